"""Checks a Chrome JSON export cut to an NVTX range's instances against the whole trace's export.

The windows are the instances' own slices in the whole export. Checks: every slice of the cut is one of the whole
export's (name, track, start and duration exact); every slice of the whole export that overlaps a window is in
the cut; a slice of the cut outside the windows is device work whose launching call (same correlation id) is in the
cut and overlaps a window; every flow that starts in the cut ends there; device memory in use (the running sum
of `[memory]` events' Bytes) equals the whole export's at each of the cut's memory events, all inside a window.
Prints counts as JSON.
Usage: export_cut.py WHOLE_JSON CUT_JSON RANGE_NAME INSTANCE   (INSTANCE from 1, in start order, or all)
"""
import gzip
import json
import sys
from collections import Counter, defaultdict
from decimal import Decimal


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)["traceEvents"]


def key(e):
    return (e.get("cat"), e["name"], e["pid"], e["tid"], e["ts"], e.get("dur"))


def overlaps(e, windows):
    return any(e["ts"] <= hi and e["ts"] + e.get("dur", 0) >= lo for lo, hi in windows)


def memory_levels(events):
    """(pid, ts) -> device bytes in use after every [memory] event at ts, in the order the file gives them."""
    level, at = defaultdict(int), {}
    mem = [e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    for e in sorted(mem, key=lambda e: e["ts"]):
        level[e["pid"]] += int(e["args"]["Bytes"])
        at[(e["pid"], e["ts"])] = level[e["pid"]]
    return mem, at


def main(whole_path, cut_path, name, instance):
    whole, cut = load(whole_path), load(cut_path)
    ranges = sorted((e for e in whole if e.get("ph") == "X" and e["name"] == name), key=lambda e: e["ts"])
    chosen = ranges if instance == "all" else [ranges[int(instance) - 1]]
    windows = [(r["ts"], r["ts"] + r["dur"]) for r in chosen]

    slices_whole = Counter(key(e) for e in whole if e.get("ph") == "X")
    slices_cut = [e for e in cut if e.get("ph") == "X"]
    extra = Counter(key(e) for e in slices_cut) - slices_whole
    assert not extra, f"slices of the cut that the whole export lacks: {list(extra)[:5]}"
    kept = Counter(key(e) for e in slices_cut)
    missing = [k for k, n in slices_whole.items() if n > kept[k] and overlaps(dict(zip(
        ("cat", "name", "pid", "tid", "ts", "dur"), k)), windows)]
    assert not missing, f"slices overlapping the window left out: {missing[:5]}"

    calls = {}
    for e in slices_cut:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]:
            calls[(e["pid"], e["args"]["correlation"])] = e
    after = 0
    for e in slices_cut:
        if overlaps(e, windows):
            continue
        assert e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"), f"outside the window: {e}"
        launch = [c for (_, corr), c in calls.items() if corr == e["args"]["correlation"]]
        assert launch and any(overlaps(c, windows) for c in launch), f"kept without its launch: {e}"
        after += 1

    starts = {e["id"] for e in cut if e.get("ph") == "s"}
    ends = {e["id"] for e in cut if e.get("ph") == "f"}
    assert starts <= ends, f"flows that start in the cut and end nowhere: {sorted(starts - ends)[:5]}"

    mem_cut, levels_cut = memory_levels(cut)
    _, levels_whole = memory_levels(whole)
    for (pid, ts), level in levels_cut.items():
        assert any(lo <= ts <= hi for lo, hi in windows), f"a memory value outside the windows at {ts}"
        before = [v for (p, t), v in levels_whole.items() if p == pid and t <= ts]
        want = before[-1] if before else 0
        assert level == want, f"device memory at {ts}: {level} in the cut, {want} in the trace"

    print(json.dumps({
        "slices": len(slices_cut),
        "slices_whole": sum(slices_whole.values()),
        "kernels": sum(1 for e in slices_cut if e.get("cat") == "kernel"),
        "overlapping": sum(1 for e in slices_cut if overlaps(e, windows)),
        "launched_inside_run_after": after,
        "flows": len(starts),
        "memory_events": len(mem_cut),
        "windows_us": str(sum(hi - lo for lo, hi in windows)),
    }))


if __name__ == "__main__":
    main(*sys.argv[1:])
