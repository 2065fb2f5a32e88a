"""The checks scripts/gpu-validate runs on a GPU's outputs, one subcommand per part. Each prints its table, may
write its part's summary JSON, and exits 1 when a check fails.

usage: gpu_checks.py faithful STATS TRACE SUMMARY | torch STATS TORCHPROF STEPS SUMMARY |
       torch-windows DIR STEPS SUMMARY | infer DIR SUMMARY | planted DIR | serve DIR "MODES" |
       scrape SERVE_STDERR OUT SERVE_PID | nccl DIR
"""
import gzip
import json
import os
import re
import statistics
import sys
import time
import urllib.request


def faithful(args):
    s, t = json.load(open(args[0])), json.load(open(args[1]))
    k = {}
    for r in s["kernels"]:
        k[r["name"]] = k.get(r["name"], 0) + r["count"]
    def kernels(prefix):
        return sum(v for n, v in k.items() if n.startswith(prefix))
    def nvtx(domain, name):
        return sum(r["count"] for r in s["nvtx"] if r["domain"] == domain and r["name"] == name)
    checks = [
        ("fork child traces its own CUDA", kernels("child_kernel"), 3),
        ("24 threads x 50 kernels", kernels("tick"), 1200),
        ("demangled template name", k.get("void templated<4>(float*, int)", 0), 3),
        ("graph kernels", kernels("graph_a") + kernels("graph_b"), 10),
        ("graphs table: 1 graph, 5 launches", (len(s["graphs"]), sum(g["launches"] for g in s["graphs"])), (1, 5)),
        ("driver-API kernels", kernels("driver_kernel"), 2),
        ("memset 1 MiB", sum(r["bytes"] for r in s["memset"]), 1 << 20),
        ("HtoD copies: pageable, pinned", tuple(sum(r["count"] for r in s["memcpy"] if r["kind"] == "HtoD" and r["host_memory"] == m) for m in ("pageable", "pinned")), (1, 1)),
        ("cudaMallocAsync calls", sum(r["count"] for r in s["api"] if r["name"].startswith("cudaMallocAsync")), 1),
        ("NVTX outer / worker / io:read", (nvtx("default", "outer"), nvtx("default", "worker"), nvtx("io", "read")), (1, 24, 2)),
        ("nothing dropped or skipped", (s["dropped"], [u for p in s["processes"] for u in p["records_unused"] if u["skipped"]]), (0, [])),
        ("device clock", sorted({p["device_clock"] for p in s["processes"] if p["cupti_version"]}), ["monotonic"]),
    ]
    # Clock check: every kernel starts after its launch call began (same host clock after alignment). Kernels are
    # joined to their launch call through the export's ac2g flows: correlation ids repeat across processes (the forked
    # child), flow ids do not.
    ev = t["traceEvents"]
    starts = {e["id"]: e for e in ev if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    gpu = {(e["pid"], e["tid"], e["ts"]): e for e in ev if e.get("cat") == "kernel"}
    pairs = [(starts[f["id"]], gpu[(f["pid"], f["tid"], f["ts"])]) for f in ev
             if f.get("ph") == "f" and f.get("cat") == "ac2g" and f["id"] in starts and (f["pid"], f["tid"], f["ts"]) in gpu]
    checks.append(("kernels joined to their launch by a flow", len(pairs) >= 1200 + 3 + 3 + 2, True))
    early = [k["name"] for s, k in pairs if k["ts"] + 1 < s["ts"]]
    checks.append(("kernels start after their launch call", len(early), 0))
    # ... and end before a synchronisation of the same process that began after their launch returns.
    syncs = [(e["pid"], e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Synchronize" in e["name"]]
    late = 0
    for s, k in pairs:
        ends = [end for pid, start, end in syncs if pid == s["pid"] and start >= s["ts"]]
        if ends and k["ts"] + k["dur"] > max(ends) + 1:
            late += 1
    checks.append(("kernels end before a later sync returns", late, 0))
    ok = True
    print(f"{'check':48} {'got':>20} {'want':>20}")
    for name, got, want in checks:
        ok &= got == want
        print(f"{name:48} {str(got):>20} {str(want):>20} {'PASS' if got == want else 'FAIL'}")
    json.dump({"checks": [{"check": n, "got": g, "want": w, "pass": g == w} for n, g, w in checks], "pass": ok}, open(args[2], "w"), indent=1, default=str)
    print("faithful.cu:", "PASS" if ok else "FAIL")
    return ok

def torch(args):
    s, t, steps = json.load(open(args[0])), json.load(open(args[1])), int(args[2])
    # cuflight saw 3 warm-up steps as well as the measured ones.
    ours = sum(r["count"] for r in s["kernels"])
    ours_ns = sum(r["total_ns"] for r in s["kernels"])
    print(f"cuflight:       {ours} kernels over {steps + 3} steps = {ours / (steps + 3):.1f}/step, {ours_ns / 1e6:.2f} ms kernel time")
    print(f"torch.profiler: {t['kernels']} kernels over {steps} steps = {t['kernels'] / steps:.1f}/step, {t['kernel_time_us'] / 1e3:.2f} ms kernel time")
    print("dropped:", s["dropped"])
    # Same script, separate runs: kernel time per step within 2%.
    ours_step, theirs_step = ours_ns / 1e3 / (steps + 3), t["kernel_time_us"] / steps
    gap = abs(ours_step / theirs_step - 1)
    ok = gap <= 0.02
    print(f"kernel time per step: cuflight {ours_step:.1f} us, torch.profiler {theirs_step:.1f} us, gap {gap:.1%}:", "PASS" if ok else "FAIL")
    json.dump({"cuflight_us_per_step": ours_step, "torchprof_us_per_step": theirs_step, "gap": gap, "pass": ok},
              open(args[3], "w"), indent=1)
    return ok


def armed_ms(err_path):
    """The arming time `cuflight attach` printed ("recording was armed 123.4 ms after the request"), or None."""
    m = re.search(r"armed ([0-9.]+) ms", open(err_path).read()) if os.path.exists(err_path) else None
    return float(m.group(1)) if m else None


def steps_in(stats):
    """Step-like NVTX ranges of train_torch.py ("stepN") in a window's stats."""
    return sum(r["count"] for r in stats["nvtx"] if re.fullmatch(r"step\d+", r["name"]))


def torch_windows(args):
    out, steps = args[0], int(args[1])
    rec = json.load(open(os.path.join(out, "torch.json")))
    per_rec = sum(r["count"] for r in rec["kernels"]) / (steps + 3)
    rows, ok, summary = [], True, {"per_step_record": per_rec}
    for name, want in (("torch-steps", 5), ("torch-inject", 10)):
        try:
            s = json.load(open(os.path.join(out, f"{name}.json")))
        except (OSError, ValueError) as e:
            rows.append((name, f"no stats: {e}", False))
            ok = False
            continue
        got_steps = steps_in(s)
        per = sum(r["count"] for r in s["kernels"]) / max(got_steps, 1)
        p = s["processes"][0] if s["processes"] else {}
        good = got_steps == want and abs(per - per_rec) <= 1
        ok &= good
        armed = armed_ms(os.path.join(out, f"{name}.err"))
        summary[name] = {"steps": got_steps, "kernels_per_step": per, "armed_ms": armed,
                         "unseen_begin": p.get("unseen_begin"), "nvtx_tables_late": p.get("nvtx_tables_late"),
                         "pass": good}
        rows.append((name, f"{got_steps} steps (want {want}), {per:.1f} kernels/step (record {per_rec:.1f}), "
                           f"armed after {armed} ms, {p.get('unseen_begin')} calls in flight left out", good))
    for name, text, good in rows:
        print(f"{name:14} {text} {'PASS' if good else 'FAIL'}")
    summary["pass"] = ok
    json.dump(summary, open(args[2], "w"), indent=1)
    return ok


def infer(args):
    out = args[0]
    phases = dict(line.split() for line in open(os.path.join(out, "infer-phases.txt")) if line.strip())
    requests = json.load(open(os.path.join(out, "infer-requests.json")))

    def latency(start, end):
        lo, hi = int(phases[start]), int(phases[end])
        lat = sorted(r[1] / 1e6 for r in requests if lo <= r[0] < hi)
        if not lat:
            return {"requests": 0}
        return {"requests": len(lat), "p50_ms": statistics.median(lat), "p99_ms": lat[int(0.99 * (len(lat) - 1))]}

    summary = {"latency": {"dormant": latency("dormant", "dormant_end"),
                           "attached": latency("attached", "attached_end"),
                           "detached": latency("detached", "detached_end")}}
    for phase, l in summary["latency"].items():
        print(f"{phase:10} {l.get('requests', 0):6} requests  p50 {l.get('p50_ms', 0):7.3f} ms  p99 {l.get('p99_ms', 0):7.3f} ms")
    ok = True
    # After a detach the program pays nothing for having been profiled (the agent finalizes CUPTI): on 2026-11-27,
    # before it did, p50 was 0.320 ms dormant and 0.458 ms after the detach. Reported, not failed: one 4 s phase
    # each on a shared machine.
    lat = summary["latency"]
    if lat["dormant"].get("p50_ms") and lat["detached"].get("p50_ms"):
        ratio = lat["detached"]["p50_ms"] / lat["dormant"]["p50_ms"]
        summary["detached_over_dormant_p50"] = ratio
        print(f"detached p50 / dormant p50: {ratio:.2f}", "(within 10%)" if ratio <= 1.10 else "(MORE THAN 10% SLOWER)")
    # The duration window: whole requests only. Kernels per request of each batch size, from the kernels launched
    # inside each batchN range (nvtx_kern), must come out whole.
    d = json.load(open(os.path.join(out, "infer-duration.json")))
    per_batch = {}
    for b in (1, 8, 32):
        ranges = sum(r["count"] for r in d["nvtx"] if r["name"] == f"batch{b}")
        kernels = sum(r["count"] for r in d["nvtx_kern"] if r["range"] == f"batch{b}")
        per = kernels / ranges if ranges else 0
        whole = ranges > 0 and kernels % ranges == 0
        ok &= whole
        per_batch[b] = per
        print(f"duration window batch{b}: {ranges} requests, {kernels} kernels, {per:.2f} per request", "PASS" if whole else "FAIL")
    requests_in_window = sum(r["count"] for r in d["nvtx"] if r["name"] == "request")
    # The capture-range window: the first request after arming, its kernels exactly those of its batch size.
    q = json.load(open(os.path.join(out, "infer-request.json")))
    batch = [r["name"] for r in q["nvtx"] if r["name"].startswith("batch")]
    n_req = sum(r["count"] for r in q["nvtx"] if r["name"] == "request")
    kernels = sum(r["count"] for r in q["kernels"])
    b = int(batch[0][5:]) if len(batch) == 1 else None
    exact = n_req == 1 and b is not None and kernels == per_batch.get(b)
    ok &= exact
    print(f"nvtx:request window: {n_req} request ({batch}), {kernels} kernels (want {per_batch.get(b)}):", "PASS" if exact else "FAIL")
    summary.update({"kernels_per_request": per_batch, "duration_window_requests": requests_in_window,
                    "request_window": {"requests": n_req, "batch": b, "kernels": kernels},
                    "armed_ms": {"duration": armed_ms(os.path.join(out, "infer-duration.err")),
                                 "request": armed_ms(os.path.join(out, "infer-request.err"))},
                    "pass": ok})
    json.dump(summary, open(args[1], "w"), indent=1)
    return ok


def planted(args):
    out = args[0]
    want = {"clean": None, "dataload": "data_loading", "item": "sync_stall", "pageable": "pageable_memcpy",
            "tiny": "launch_bound", "fp32": "fp32_gemm", "leak": "memory_growth"}
    # PLANTED_VARIANTS (gpu-validate): the variants that ran; the others are not checked.
    ran = os.environ.get("PLANTED_VARIANTS", " ".join(want)).split()
    rows, ok = [], True
    for v, kind in want.items():
        if v not in ran:
            continue
        try:
            r = json.load(open(os.path.join(out, f"planted-{v}.json")))
        except (OSError, ValueError) as e:
            rows.append((v, f"no report: {e}", kind, False))
            ok = False
            continue
        f = r.get("findings", [])
        top = f[0]["kind"] if f else None
        share = f[0].get("share", 0) if f else 0
        good = (share < 0.05) if kind is None else (top == kind)
        ok &= good
        rows.append((v, f"{top} ({share:.0%})", kind or "nothing above 5%", good))
    # Issue 29: the top finding names the planted line of the script (recorded Python stacks).
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu", "planted_torch.py")
    lines = open(script).read().splitlines()
    for v, text in (("item", "loss.item()"), ("tiny", "t = t + 1")):
        if v not in ran:
            continue
        want_line = next(i + 1 for i, l in enumerate(lines) if l.strip() == text)
        try:
            f = json.load(open(os.path.join(out, f"planted-{v}.json"))).get("findings", [])
            src = (f[0].get("sources") or [{}])[0] if f else {}
        except (OSError, ValueError):
            src = {}
        got = f"{os.path.basename(src.get('file', '?'))}:{src.get('line', '?')}"
        good = src.get("file", "").endswith("planted_torch.py") and src.get("line") == want_line
        ok &= good
        rows.append((f"{v} line", got, f"planted_torch.py:{want_line}", good))
    # Issue 29's rule: Python stacks stay on by default while they cost under 0.5% of a step. The agent times each
    # stack it reads; the report sums those read inside steps (python_stacks); stats has the whole run's total, in
    # which start-up's cold reads (24-32 us each on the H200, 2026-11-27) weigh most.
    for v in ("item", "tiny"):
        if v not in ran:
            continue
        try:
            p = json.load(open(os.path.join(out, f"planted-{v}-stats.json")))["processes"][0]
            c = json.load(open(os.path.join(out, f"planted-{v}.json")))["processes"][0]["python_stacks"]
            got = (f"{c['in_steps']} in steps, {c['per_step_ns'] / 1e3:.1f} us/step ({c['share_of_steps']:.3%}), "
                   f"with the GPU idle {c.get('exposed_share_of_steps', c['share_of_steps']):.3%}; "
                   f"run: {p['python_stacks']} in {p['python_stack_ns'] / 1e6:.1f} ms")
            # The rule is on what the steps lost: the reads' part with the GPU idle (both are printed).
            good = (c["in_steps"] > 0 and c["in_steps_ns"] > 0
                    and c.get("exposed_share_of_steps", c["share_of_steps"]) < 0.005)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            got, good = f"unreadable: {e!r}", False
        ok &= good
        rows.append((f"{v} stacks", got, "under 0.5% of a step", good))
    print(f"{'variant':10} {'top finding':60} {'expected':22}")
    for v, got, w, good in rows:
        print(f"{v:10} {got:60} {w:22} {'PASS' if good else 'FAIL'}")
    json.dump({"planted": [{"variant": v, "top": g, "expected": w, "pass": p} for v, g, w, p in rows], "pass": ok},
              open(os.path.join(out, "planted-summary.json"), "w"), indent=1)
    return ok


def compiled(args):
    """tests/gpu/compiled_torch.py eager, compiled and graphed (issue 51): steady kernel time per step within 1% of
    torch.profiler's (kernels alone on both sides: tests/gpu/torchprof_kernels.py), the warm-up (compilation,
    capture) left out, graph replays joined, and the graphed loop's launch_bound at most a fifth of the eager one's
    and not its top finding: what is left is the optimizer step outside the graphs and the graph launch calls, less
    what CUPTI's node-level tracing adds to them (graph_tracing_ns; on an H200, 2026-12-01: 6.5% against 61.9%
    eager, 12.4% before the tracing's part was set apart, 11.3% before gaps inside graphs stopped counting as
    launch overhead)."""
    out, steps = args[0], int(args[1])
    rows, ok, summary = [], True, {}
    eager_launch = None
    for mode in ("eager", "compile", "graphs"):
        try:
            r = json.load(open(os.path.join(out, f"compiled-{mode}-report.json")))
            s = json.load(open(os.path.join(out, f"compiled-{mode}-stats.json")))
            t = json.load(open(os.path.join(out, f"compiled-{mode}-torchprof.json")))
        except (OSError, ValueError) as e:
            rows.append((mode, f"missing: {e}", False))
            ok = False
            continue
        p = r["processes"][0]
        n = max(len(p["steps"]), 1)
        ours = p["step_total"]["kernel_ns"] / 1e3 / n if p.get("step_total") else 0.0
        theirs = t["kernel_time_us"] / steps
        gap = abs(ours / theirs - 1) if theirs else 1.0
        graphs = s.get("graphs", [])
        replays = sum(g["launches"] for g in graphs)
        launch = next((f["share"] for f in r["findings"] if f["kind"] == "launch_bound"), 0.0)
        capture = next((f["summary"] for f in r["findings"] if f["kind"] == "graph_capture"), "")
        if mode == "eager":
            eager_launch = launch
        top = r["findings"][0]["kind"] if r["findings"] else ""
        graphed_ok = replays >= steps and top != "launch_bound" and eager_launch is not None \
            and launch <= eager_launch / 5
        good = gap <= 0.01 and (mode != "graphs" or graphed_ok)
        ok &= good
        summary[mode] = {"us_per_step": ours, "torchprof_us_per_step": theirs, "gap": gap, "steps": len(p["steps"]),
                         "warmup_steps": p["warmup"]["steps"], "graphs": len(graphs), "replays": replays,
                         "launch_bound": launch, "graph_tracing_ns": p["idle_causes"].get("graph_tracing_ns"),
                         "graph_capture": capture, "verdict": r["verdict"], "pass": good}
        rows.append((mode, f"{ours:.1f} vs {theirs:.1f} us/step ({gap:.2%}); warm-up {p['warmup']['steps']}; "
                           f"graphs {len(graphs)} replayed {replays}; launch_bound {launch:.1%}", good))
    for mode, what, good in rows:
        print(f"{mode:8} {what} {'PASS' if good else 'FAIL'}")
    summary["pass"] = ok
    json.dump(summary, open(os.path.join(out, "compiled-summary.json"), "w"), indent=1)
    return ok


def phase_latency(requests, phases, start, end):
    """p50/p99 latency (ms) of the requests that arrived in one phase."""
    lo, hi = int(phases[start]), int(phases[end])
    lat = sorted(r[1] / 1e6 for r in requests if lo <= r[0] < hi)
    if not lat:
        return {"requests": 0}
    return {"requests": len(lat), "p50_ms": statistics.median(lat), "p99_ms": lat[int(0.99 * (len(lat) - 1))]}


def batching(args):
    """tests/gpu/batching_server.py attached at each rate (issue 51, item 3): every replayed kernel joined to its
    graph launch (each graph's kernels a whole multiple of its launches), the iteration kinds named (NVTX prefill,
    decode, mixed), no launch_bound blamed on graphed decoding, and request latency dormant / attached / after the
    detach (reported, not failed: one short phase each on a shared machine)."""
    out, rates = args[0], args[1:]
    ok, summary = True, {}
    for rate in rates:
        try:
            phases = dict(line.split() for line in open(os.path.join(out, f"batching-{rate}-phases.txt")) if line.strip())
            served = json.load(open(os.path.join(out, f"batching-{rate}-requests.json")))
            s = json.load(open(os.path.join(out, f"batching-{rate}-stats.json")))
            r = json.load(open(os.path.join(out, f"batching-{rate}-report.json")))
        except (OSError, ValueError) as e:
            print(f"rate {rate}: missing: {e} FAIL")
            ok = False
            continue
        requests = served["requests"]
        latency = {p: phase_latency(requests, phases, p, p + "_end") for p in ("dormant", "attached", "detached")}
        graphs = s.get("graphs", [])
        replays = sum(g["launches"] for g in graphs)
        whole = bool(graphs) and all(g["launches"] > 0 and g["kernels"] % g["launches"] == 0 for g in graphs)
        kinds = {k: sum(n["count"] for n in s["nvtx"] if n["name"] == k) for k in ("prefill", "decode", "mixed")}
        # The report's own iteration table (issue 51 item 3): kinds named, requests attributed.
        it = (r["processes"][0].get("iterations") or {}) if r.get("processes") else {}
        reported = {k["kind"]: k["count"] for k in it.get("kinds", [])}
        requests = it.get("requests") or {}
        launch = next((f["share"] for f in r["findings"] if f["kind"] == "launch_bound"), 0.0)
        # What the warm-up rule left out, each step against its own kind's steady median (reported, not failed).
        w = r["processes"][0].get("warmup", {}) if r.get("processes") else {}
        left_out = [(d["name"], d.get("kind"), round(d["slowdown"], 2)) for d in w.get("detail", [])]
        left_out += [(f["name"], f.get("kind"), f"+{f['cost_ns'] / 1e6:.2f} ms") for f in w.get("later", [])]
        # launch_bound is reported, not failed: under node-level tracing CUPTI lengthens each decode graph's launch
        # call (about 1.1 us a kernel node on an H200), time the GPU idles for, which the report sets apart up to
        # that much a node (graph_tracing_ns, in the summary); its facts must tell graph nodes apart from kernels
        # launched one by one (the prefill's), and say what the tracing adds.
        lb = next((f for f in r["findings"] if f["kind"] == "launch_bound"), None)
        told_apart = lb is None or "nodes of replayed CUDA graphs" in " ".join(lb["evidence"]["facts"])
        good = whole and kinds["decode"] > 0 and told_apart and it.get("told_by") == "names" \
            and reported.get("decode", 0) > 0 and requests.get("ended", 0) > 0
        ok &= good
        traced = r["processes"][0]["idle_causes"].get("graph_tracing_ns") if r.get("processes") else None
        summary[rate] = {"latency": latency, "graphs": len(graphs), "replays": replays, "whole": whole,
                         "graph_tracing_ns": traced,
                         "iterations": kinds, "reported_iterations": reported, "reported_requests": requests,
                         "server_iterations": served["iterations"], "launch_bound": launch,
                         "left_out": left_out, "steady_by_kind": w.get("steady_by_kind", []),
                         "verdict": r["verdict"], "pass": good}
        lat = "  ".join(f"{p} p50 {l.get('p50_ms', 0):.2f} p99 {l.get('p99_ms', 0):.2f} ms ({l.get('requests', 0)})"
                        for p, l in latency.items())
        print(f"rate {rate}/s: {len(graphs)} graphs, {replays} replays, joined whole: {whole}; iterations {kinds}; "
              f"report: {reported}, requests {requests.get('ended', 0)} (p50 {requests.get('latency_p50_ns', 0) / 1e6:.1f} ms, "
              f"{requests.get('kernels_p50', 0)} kernels); left out {left_out}; launch_bound {launch:.1%}; {lat}; verdict: {r['verdict'][:120]}", "PASS" if good else "FAIL")
    summary["pass"] = ok
    json.dump(summary, open(os.path.join(out, "batching-summary.json"), "w"), indent=1)
    return ok


def graphtrace(args):
    """CUDA graphs traced per node and per launch (issue 51, item 1): the reduce-overhead loop's step time with no
    tool, node-level and graph-level tracing (2 rounds), the events and bytes each trace took, and the same graph
    launches seen both ways (graph-level rows know no kernels)."""
    out = args[0]
    step = {}
    for mode in ("none", "node", "graph"):
        for rnd in (1, 2):
            try:
                text = open(os.path.join(out, f"gt-{mode}-{rnd}.txt")).read()
                step.setdefault(mode, []).append(float(re.search(r"step_ms ([0-9.]+)", text).group(1)))
                m = re.search(r"\((\d+) events .*?, (\d+) bytes", text)
                if m:
                    step.setdefault(mode + "_events", []).append((int(m.group(1)), int(m.group(2))))
            except (OSError, AttributeError) as e:
                print(f"graphtrace {mode} round {rnd}: missing: {e} FAIL")
                return False
    base = min(step["none"])
    stats = {m: json.load(open(os.path.join(out, f"gt-{m}-stats.json"))) for m in ("node", "graph")}
    launches = {m: sum(g["launches"] for g in stats[m].get("graphs", [])) for m in stats}
    graph_level = all(g["graph_level"] for g in stats["graph"].get("graphs", [])) and bool(stats["graph"].get("graphs"))
    node_kernels = sum(g["kernels"] for g in stats["node"].get("graphs", []))
    print(f"{'mode':6} {'step ms r1':>10} {'r2':>8} {'vs none':>8} {'events':>10} {'bytes':>10}")
    for m in ("none", "node", "graph"):
        ev = step.get(m + "_events", [(0, 0)])[-1]
        print(f"{m:6} {step[m][0]:10.3f} {step[m][1]:8.3f} {(min(step[m]) / base - 1) * 100:7.1f}% {ev[0]:10} {ev[1]:10}")
    print(f"graph launches: node-level {launches['node']}, graph-level {launches['graph']}; "
          f"kernels in graphs (node-level) {node_kernels}; graph-level rows marked: {graph_level}")
    ok = graph_level and launches["graph"] > 0 and abs(launches["graph"] - launches["node"]) <= launches["node"] * 0.01
    json.dump({"step_ms": step, "launches": launches, "node_kernels": node_kernels, "pass": ok},
              open(os.path.join(out, "graphtrace-summary.json"), "w"), indent=1)
    print("PASS" if ok else "FAIL")
    return ok

WINDOW_LINE = re.compile(r"unix (\d+\.\d+)\): (?:armed in ([\d.]+) ms|never armed), over after ([\d.]+) s")


def serve_windows(err_path):
    """The windows `cuflight serve --log-windows` logged: (asked, armed, over) in Unix seconds."""
    windows = []
    for line in open(err_path) if os.path.exists(err_path) else []:
        m = WINDOW_LINE.search(line)
        if m:
            asked, over = float(m[1]), float(m[1]) + float(m[3])
            windows.append((asked, asked + float(m[2] or 0) / 1e3, over))
    return windows


def scrape(args):
    """Keeps, in OUT, serve's last exposition that holds a followed process (serve drops a process once it exits,
    so the figures are read while the program runs), until serve (SERVE_PID) ends: its URL from its first line."""
    err_path, out_path, serve_pid = args[0], args[1], int(args[2])
    url, deadline = None, time.time() + 15
    while url is None and time.time() < deadline:
        m = re.search(r"(http://[^ ]+/metrics)", open(err_path).read() if os.path.exists(err_path) else "")
        url = m and m[1]
        time.sleep(0.2)
    while url:
        try:
            os.kill(serve_pid, 0)
        except OSError:
            break
        try:
            text = urllib.request.urlopen(url, timeout=2).read().decode()
            if "cuflight_agent_overhead_ratio{" in text:
                with open(out_path + ".part", "w") as f:
                    f.write(text)
                os.replace(out_path + ".part", out_path)
        except OSError:
            pass
        time.sleep(0.5)
    return True


SAMPLE = re.compile(r'^(cuflight_[a-z_]+)\{([^}]*)\} ([0-9.eE+-]+)$')


def serve_said(prom_path):
    """What serve's last scrape said the windows cost: (window seconds, {source: seconds})."""
    window, cost = 0.0, {}
    for line in open(prom_path) if os.path.exists(prom_path) else []:
        m = SAMPLE.match(line.strip())
        if not m:
            continue
        if m[1] == "cuflight_window_seconds_total":
            window += float(m[3])
        elif m[1] == "cuflight_agent_overhead_seconds_total":
            source = re.search(r'source="([^"]+)"', m[2])[1]
            cost[source] = cost.get(source, 0.0) + float(m[3])
    return window, cost


def serve(args):
    """Where a duty cycle's cost goes (issue 52 item 1): each step of planted_torch.py tiny under each mode against
    the dormant median, split into the steps before any window (serve's presence), inside a window (arming,
    recording, the finalize) and after one (a program left slower by a finalized CUPTI). Modes: dormant; watch
    (serve following another pid: the collector alone); duty (1s/10s); duty-keep (the same, CUPTI not finalized
    after a window: CUFLIGHT_FINALIZE=0); continuous; record; sample10."""
    out, modes = args[0], args[1].split()
    runs = {}
    for m in modes:
        for r in (1, 2):
            path = os.path.join(out, f"s-{m}-{r}.json")
            if os.path.exists(path):
                t = json.load(open(path))
                runs.setdefault(m, []).append((r, t, serve_windows(os.path.join(out, f"serve-{m}-{r}.err"))))
    if "dormant" not in runs:
        print("serve: no dormant run to compare with (SERVE_MODES must hold dormant)")
        return False
    base = statistics.median(x for _, t, _ in runs["dormant"] for x in t["step_ms_each"])
    print(f"dormant median step {base:.3f} ms")
    print(f"{'mode':11} {'rd':>2} {'mean ms':>8} {'vs dorm':>8} {'before: n  med   +ms':>22} "
          f"{'in windows: n  max   +ms':>25} {'after: n  med   +ms':>21} windows")
    summary = {"dormant_median_ms": base, "modes": {}}
    for m in modes:
        for r, t, windows in runs.get(m, []):
            each, t0 = t["step_ms_each"], t.get("t0_unix")
            parts = {"before": [], "window": [], "after": []}
            end = t0
            for ms in each:
                start, end = end, end + ms / 1e3
                if not windows or t0 is None or end <= windows[0][0]:
                    parts["before"].append(ms)
                elif any(start < w[2] and end > w[0] for w in windows):
                    parts["window"].append(ms)
                else:
                    parts["after"].append(ms)
            def cell(xs, mid):
                if not xs:
                    return f"{0:4} {'-':>6} {'-':>7}"
                return f"{len(xs):4} {mid(xs):6.2f} {sum(x - base for x in xs):+7.0f}"
            mean = statistics.mean(each)
            arm = [round((w[1] - w[0]) * 1e3, 1) for w in windows]
            print(f"{m:11} {r:2} {mean:8.3f} {(mean / base - 1) * 100:+7.1f}% {cell(parts['before'], statistics.median):>22} "
                  f"{cell(parts['window'], max):>25} {cell(parts['after'], statistics.median):>21} "
                  f"{len(windows)} (armed in {arm} ms)")
            # What serve's own metrics said the windows cost (issue 52 item 1), against the steps they covered.
            window_s, said = serve_said(os.path.join(out, f"serve-{m}-{r}.prom"))
            if window_s > 0:
                in_windows = parts["window"] if windows else each
                measured = (statistics.mean(in_windows) / base - 1) * 100 if in_windows else float("nan")
                said_pct = {k: round(v / window_s * 100, 2) for k, v in said.items() if v > 0}
                print(f"    serve said: {sum(said.values()) / window_s * 100:.1f}% of {window_s:.1f} s of windows "
                      f"{said_pct}; measured in windows: {measured:+.1f}% a step")
                t["serve_said"] = {"window_s": window_s, "cost_s": said}
            summary["modes"].setdefault(m, []).append({
                "serve_said": t.get("serve_said"),
                "round": r, "mean_ms": mean, "windows": windows,
                **{k: {"steps": len(v), "median_ms": statistics.median(v) if v else None,
                       "excess_ms": sum(x - base for x in v)} for k, v in parts.items()}})
    json.dump(summary, open(os.path.join(out, "serve-summary.json"), "w"), indent=1)
    return True


def nccl(args):
    """A one-rank NCCL group's collectives under cuflight (tests/gpu/nccl_single.py): NCCL's own NVTX ranges
    (domain NCCL), the kernels it launched, and the collective the report, stats and the timeline told each
    communication kernel by. Passes where NCCL's ranges were recorded; the rest is printed for the closing note."""
    out = args[0]
    stats = json.load(open(os.path.join(out, "nccl-stats.json")))
    ranges = [r for r in stats.get("nvtx", []) if r["domain"] == "NCCL"]
    print(f"NCCL NVTX ranges: {len(ranges)} names")
    for r in sorted(ranges, key=lambda r: -r["count"])[:10]:
        print(f"  {r['count']:6} {r['total_ns'] / 1e6:10.3f} ms  {r['name']}")
    kernels = [k for k in stats.get("kernels", []) if "nccl" in k["name"].lower()]
    print(f"NCCL kernels: {len(kernels)} names")
    for k in kernels[:10]:
        print(f"  {k['count']:6} {k['total_ns'] / 1e6:10.3f} ms  {k['name'][:100]}")
    for c in stats.get("collectives", []):
        print(f"  stats collectives: {c['name']:16} {c['count']:6} {c['total_ns'] / 1e6:10.3f} ms")
    timeline = json.load(gzip.open(os.path.join(out, "nccl.json.gz"), "rt"))["traceEvents"]
    told = {}
    for e in timeline:
        if e.get("cat") == "kernel" and "collective" in e.get("args", {}):
            told[e["args"]["collective"]] = told.get(e["args"]["collective"], 0) + 1
    print(f"timeline kernels by collective: {told}")
    ok = bool(ranges)
    json.dump({"nvtx_ranges": ranges, "kernels": kernels, "collectives": stats.get("collectives", []),
               "timeline": told, "pass": ok}, open(os.path.join(out, "nccl-summary.json"), "w"), indent=1)
    print("PASS" if ok else "FAIL: no range in domain NCCL (NCCL built without NVTX, or NVTX_INJECTION not reached)")
    return ok


CHECKS = {"faithful": faithful, "torch": torch, "torch-windows": torch_windows, "infer": infer, "planted": planted,
          "compiled": compiled, "batching": batching, "graphtrace": graphtrace, "serve": serve, "scrape": scrape,
          "nccl": nccl}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CHECKS:
        sys.exit(__doc__)
    sys.exit(0 if CHECKS[sys.argv[1]](sys.argv[2:]) else 1)
