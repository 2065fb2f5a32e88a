"""Decodes a Perfetto trace with the official schema (perfetto_trace_pb2 from PyPI's `perfetto`) and checks it.

Checks: every packet decodes; track events name known tracks; every SLICE_END closes a SLICE_BEGIN on its track
(in timestamp order, as trace processor sorts); interned names, categories and annotation names resolve; each
flow id starts once and terminates once. Prints the counts as JSON for the caller to compare.
With a second argument, the Chrome JSON export of the same trace, checks timestamps event by event: every slice's
start and end (ns, exact) and name appear among the JSON's complete events (copies and memsets are named
differently by the two formats, so only their times are compared; a CUDA graph replay, drawn from its nodes, starts
at a node's start and ends at a node's end); prints the number checked as "times_checked".
Usage: check_perfetto.py TRACE [CHROME_JSON]
"""
import decimal
import gzip
import json
import sys
from collections import Counter, defaultdict

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


def main(path, chrome):
    trace = Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    tracks, names, cats, anns, values = {}, {}, {}, {}, {}
    events, closed = [], []
    for seq, p in enumerate(trace.packet):
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            tracks[d.uuid] = d
        if p.HasField("interned_data"):
            for n in p.interned_data.event_names:
                names[n.iid] = n.name
            for c in p.interned_data.event_categories:
                cats[c.iid] = c.name
            for a in p.interned_data.debug_annotation_names:
                anns[a.iid] = a.name
            for v in p.interned_data.debug_annotation_string_values:
                assert v.iid not in values, f"annotation value iid {v.iid} interned twice"
                values[v.iid] = v.str
        if p.HasField("track_event"):
            events.append((p.timestamp, seq, p.track_event))
    counts = defaultdict(int)
    collectives = Counter()
    stack_tops = set()
    counts["packets"] = len(trace.packet)
    counts["tracks"] = len(tracks)
    open_slices = defaultdict(list)
    flows_started, flows_ended = defaultdict(int), defaultdict(int)
    # END before BEGIN at equal timestamps closes zero-length neighbours first, as the exporter emits them.
    events.sort(key=lambda e: (e[0], e[1]))
    for ts, _, e in events:
        assert e.track_uuid in tracks, f"event on unknown track {e.track_uuid}"
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            assert e.name_iid in names, f"uninterned name {e.name_iid}"
            for c in e.category_iids:
                assert c in cats, f"uninterned category {c}"
            for a in e.debug_annotations:
                assert a.name_iid in anns, f"uninterned annotation name {a.name_iid}"
                if anns[a.name_iid] == "collective":
                    collectives[a.string_value] += 1
                if a.HasField("string_value_iid"):
                    assert a.string_value_iid in values, f"uninterned annotation value {a.string_value_iid}"
                    if anns[a.name_iid] == "python stack":
                        counts["python_stacks"] += 1
                        stack_tops.add(values[a.string_value_iid].decode().split("\n")[0])
            open_slices[e.track_uuid].append((ts, names[e.name_iid]))
            counts["slices"] += 1
            for f in e.flow_ids:
                flows_started[f] += 1
            for f in e.terminating_flow_ids:
                flows_ended[f] += 1
        elif e.type == TrackEvent.TYPE_SLICE_END:
            assert open_slices[e.track_uuid], f"SLICE_END without BEGIN on track {e.track_uuid} at {ts}"
            start, name = open_slices[e.track_uuid].pop()
            assert start <= ts
            closed.append((name, start, ts))
            counts["graph_replays"] += is_replay(name)
        elif e.type == TrackEvent.TYPE_INSTANT:
            counts["instants"] += 1
        elif e.type == TrackEvent.TYPE_COUNTER:
            assert tracks[e.track_uuid].HasField("counter"), "counter value on a non-counter track"
            counts["counter_values"] += 1
    unclosed = sum(len(v) for v in open_slices.values())
    assert unclosed == 0, f"{unclosed} slices never end"
    assert all(v == 1 for v in flows_started.values()), "a flow starts twice"
    assert set(flows_started) == set(flows_ended), "flows that start but never end, or end without start"
    counts["flows"] = len(flows_started)
    counts["slice_names"] = len(names)
    # Communication kernels by the collective each ran.
    counts["collectives"] = dict(collectives)
    # The innermost frame of every Python stack shown on a call's slice ("file:line in function").
    counts["python_stack_tops"] = sorted(stack_tops)
    # The timeline's extent, as the UI counts time from its first event.
    if events:
        counts["first_ns"] = min(ts for ts, _, _ in events)
        counts["last_ns"] = max(ts for ts, _, _ in events)
    if chrome:
        counts["times_checked"] = check_times(closed, chrome)
    print(json.dumps(counts, sort_keys=True))


def device_copy(name):
    return name.startswith("Memcpy") or name.startswith("Memset")


def check_times(slices, chrome):
    """Every slice's (name, start ns, end ns) is among the Chrome JSON's complete events; returns how many."""
    opener = gzip.open if chrome.endswith(".gz") else open
    with opener(chrome, "rt") as f:
        # Exact decimals: microseconds since the epoch with three decimals are beyond a double's precision in ns.
        events = json.load(f, parse_float=decimal.Decimal)["traceEvents"]
    source = Counter()
    for e in events:
        if e.get("ph") == "X":
            start = int(decimal.Decimal(e["ts"]) * 1000)
            end = start + int(decimal.Decimal(e["dur"]) * 1000)
            source[("" if device_copy(e["name"]) else e["name"], start, end)] += 1
    # A CUDA graph replay is drawn from its nodes: it starts as its first node and ends as its last.
    replays = [(s, t) for n, s, t in slices if is_replay(n)]
    starts = {s for (_, s, _) in source}
    ends = {t for (_, _, t) in source}
    for s, t in replays:
        assert s in starts and t in ends, f"a graph replay from {s} to {t} starts or ends at no node"
    ours = Counter(("" if device_copy(n) else n, s, t) for n, s, t in slices if not is_replay(n))
    missing = ours - source
    assert not missing, f"{sum(missing.values())} slices whose times are not the source's, e.g. {list(missing)[:3]}"
    return sum(ours.values()) + len(replays)


def is_replay(name):
    return name.startswith("CUDA graph ") and name.endswith(" replay")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
