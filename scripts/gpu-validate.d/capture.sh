# shellcheck shell=bash
# Parts of scripts/gpu-validate, which sources this file. Capture on hardware: exact counts, a killed program,
# CUPTI's own timings, the device counters, `cuflight doctor` and the hardware event system.
# Each part_NAME runs in a child bash under its time limit with the driver's variables below exported (declared
# here, values kept, so that ShellCheck reads a misspelt name as one), and its with_mode and rotated.
declare -x bin out work root cuda_root cupti_lib cupti_inc cupti_flags have_torch

part_streams() {
  nvcc -O2 -o "$out/streams" tests/gpu/streams.cu || return 1
  "$bin" record --force -o "$out/streams.cuf" -- "$out/streams" || return 1
  "$bin" stats "$out/streams.cuf" --format json > "$out/streams.json" || return 1
  python3 - "$out/streams.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
k = {r["name"]: r["count"] for r in s["kernels"]}
c = {(r["kind"], r["host_memory"]): r["count"] for r in s["memcpy"]}
print("kernels:", k, "copies:", c, "dropped:", s["dropped"])
ok = sum(v for n, v in k.items() if "saxpy" in n) == 100 and sum(v for n, v in k.items() if "relu" in n) == 100
ok &= c.get(("HtoD", "pinned")) == 100 and c.get(("DtoH", "pinned")) == 100 and s["dropped"] == 0
print("streams.cu:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
}

part_faithful() {
  nvcc -O2 -o "$out/faithful" tests/gpu/faithful.cu -lcuda -ldl -lpthread || return 1
  local rc=0
  "$bin" record --force -o "$out/faithful.cuf" -- "$out/faithful" || rc=1
  "$bin" stats "$out/faithful.cuf" --format json > "$out/faithful.json" || return 1
  "$bin" export "$out/faithful.cuf" --format chrome --force -o "$out/faithful.trace.json" || return 1
  python3 scripts/gpu_checks.py faithful "$out/faithful.json" "$out/faithful.trace.json" "$out/faithful-summary.json" || rc=1
  return $rc
}

part_killed() {
  nvcc -O2 -o "$out/killed" tests/gpu/killed.cu || return 1
  "$bin" record --force --flush-ms 100 -o "$out/killed.cuf" -- "$out/killed"
  "$bin" stats "$out/killed.cuf" --format json > "$out/killed.json" || return 1
  python3 - "$out/killed.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
n = sum(r["count"] for r in s["kernels"] if r["name"].startswith("work"))
finished = [p["finished"] for p in s["processes"] if p["cupti_version"]]
ok = n == 40 and finished == [False]
print(f"killed.cu: {n} kernels (want 40), finished {finished} (want [False]):", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
}

part_cupti_timing() {
  gcc -O1 -I"$cuda_root/include" -I"$cupti_inc" tests/c/cupti_timing.c -L"$cuda_root/lib64" -lcudart \
    -L"$cupti_lib" -lcupti -Wl,-rpath,"$cupti_lib" -Wl,-rpath,"$cuda_root/lib64" -o "$out/cupti_timing" || return 1
  local rc=0 run
  for run in 1 2 3; do "$out/cupti_timing" 200 > "$out/cupti-timing-$run.json" || rc=1; cat "$out/cupti-timing-$run.json"; done
  python3 - "$out" <<'PY' || rc=1
import json, os, statistics, sys
out = sys.argv[1]
runs = [json.load(open(os.path.join(out, f"cupti-timing-{r}.json"))) for r in (1, 2, 3)]
keys = [k for k, v in runs[0].items() if isinstance(v, float)]
summary = {k: {"median": statistics.median(r[k] for r in runs), "max": max(r[k] for r in runs)} for k in keys}
summary["records_before_flush"] = [r["records_before_flush"] for r in runs]
summary["pass"] = all(r["memset_records"] == r["memsets"] for r in runs)
for k in keys:
    print(f"{k:36} median {summary[k]['median']:10.3f} max {summary[k]['max']:10.3f}")
json.dump(summary, open(os.path.join(out, "cupti-timing-summary.json"), "w"), indent=1)
sys.exit(0 if summary["pass"] else 1)
PY
  return $rc
}

part_counters() {
  # The profiler host half lives in libnvperf_host beside libcupti where the toolkit ships it separately.
  local nvperf
  nvperf=$(for l in nvperf_host nvperf_target; do [ -e "$cupti_lib/lib$l.so" ] && echo "-l$l"; done)
  nvcc -O2 -std=c++17 -arch=sm_90 -o "$out/pm_sampling" tests/gpu/pm_sampling.cu $cupti_flags -lcublas $nvperf || return 1
  local rc=0
  for interval in 20000 100000; do
    mkdir -p "$out/counters-$interval"
    "$out/pm_sampling" "$out/counters-$interval" "$interval" || rc=1
  done
  python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
runs = {}
for interval in ("20000", "100000"):
    try:
        runs[interval] = json.load(open(os.path.join(out, f"counters-{interval}", "pm-sampling.json")))
    except (OSError, ValueError) as e:
        runs[interval] = {"unreadable": str(e)}
ok = all(r.get("available") and r.get("samples", 0) > 0 for r in runs.values())
json.dump({"runs": runs, "pass": ok}, open(os.path.join(out, "counters-summary.json"), "w"), indent=1)
print("counters:", "PASS" if ok else "FAIL (PM sampling unavailable or no samples)")
sys.exit(0 if ok else 1)
PY
  [ $? = 0 ] && [ $rc = 0 ]
}

part_hes() {
  # Issue 52 item 5: `--trace ...,hes` where CUPTI offers the Hardware Event System (Blackwell and newer, CUDA
  # 12.8+): the trace says `hes` in `traced`; elsewhere (an H100 or H200) record says CUPTI did not take it and
  # kernels are recorded as usual. Either way the same kernels as without it.
  [ -x "$out/streams" ] || nvcc -O2 -o "$out/streams" tests/gpu/streams.cu || return 1
  "$bin" record --force --trace cuda,nvtx,hes -o "$out/hes.cuf" -- "$out/streams" 2> "$out/hes.err" || return 1
  "$bin" record --force --trace cuda,nvtx -o "$out/nohes.cuf" -- "$out/streams" 2> /dev/null || return 1
  "$bin" stats --format json "$out/hes.cuf" > "$out/hes-stats.json" && "$bin" stats --format json "$out/nohes.cuf" > "$out/nohes-stats.json"
  python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
a, b = (json.load(open(os.path.join(out, f))) for f in ("hes-stats.json", "nohes-stats.json"))
count = lambda s: sum(k["count"] for k in s["kernels"])
traced = a["processes"][0]["traced"]
said = [l.strip() for l in open(os.path.join(out, "hes.err")) if "hardware kernel timestamps" in l]
print(f"hes: traced {traced!r}, kernels {count(a)} (without hes {count(b)}), device {a['devices'][0]['name'] if a['devices'] else '?'}")
print("hes:", said or "CUPTI took it")
json.dump({"traced": traced, "kernels": count(a), "kernels_without": count(b), "said": said},
          open(os.path.join(out, "hes-summary.json"), "w"), indent=1)
sys.exit(0 if count(a) == count(b) and ("hes" in traced.split(",")) != bool(said) else 1)
PY
}

part_doctor() {
  # Issue 53 item 2: `cuflight doctor` on a real machine: the driver, the libcupti the probe loaded and those found,
  # the probe recorded end to end (its memset), counters, ptrace, environment, clock. It must say a recording works
  # (exit 0) with a recording check of "ok"; its text goes into the closing note.
  "$bin" doctor | tee "$out/doctor.txt"
  local rc=${PIPESTATUS[0]}
  "$bin" doctor --format json > "$out/doctor-summary.json"
  python3 - "$out/doctor-summary.json" "$rc" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
checks = {c["check"]: c for c in d["checks"]}
print("doctor:", {k: c["result"] for k, c in checks.items()})
sys.exit(0 if sys.argv[2] == "0" and d["record_would_work"] and checks["recording"]["result"] == "ok" else 1)
PY
}

part_gpu_metrics() {
  nvcc -O2 -std=c++17 -arch=sm_90 -o "$out/counter_kernels" tests/gpu/counter_kernels.cu -lcublas || return 1
  local r
  for r in 1 2 3; do
    for mode in plain counters; do
      mkdir -p "$out/gm-$mode-$r"
      local flags=()
      [ "$mode" = counters ] && flags=(--gpu-metrics)
      "$bin" record --force -o "$out/gm-$mode-$r/t.cuf" "${flags[@]}" -- "$out/counter_kernels" "$out/gm-$mode-$r" \
        > "$out/gm-$mode-$r/record.log" 2>&1 || return 1
    done
  done
  "$bin" stats --report gpu_metrics --format json "$out/gm-counters-1/t.cuf" > "$out/gm-stats.json" || return 1
  "$bin" stats --report gpu_metrics "$out/gm-counters-1/t.cuf" || true
  # How long the sampler's set-up takes here: the first counter sample after the program's first CUDA call (the
  # doctor's recorded probe works 1.5 s for it; the H200's ~20 ms probe got no counters on 2026-12-01).
  "$bin" export --format chrome --force -o "$out/gm-counters-1/t.json" "$out/gm-counters-1/t.cuf" > /dev/null || true
  python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
set_up_ms = None
try:
    events = json.load(open(os.path.join(out, "gm-counters-1", "t.json")))["traceEvents"]
    calls = [float(e["ts"]) for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    samples = [float(e["ts"]) for e in events if e.get("ph") == "C" and "counters" in e.get("name", "")]
    if calls and samples:
        set_up_ms = (min(samples) - min(calls)) / 1e3
except (OSError, ValueError, KeyError):
    pass
print("gpu-metrics: first counter sample", "none" if set_up_ms is None else f"{set_up_ms:.1f} ms",
      "after the first CUDA call (the sampler's set-up and its first, dropped, sample)")
rows = json.load(open(os.path.join(out, "gm-stats.json")))["gpu_metrics"]
kernels = [r for r in rows if r["level"] == "kernel"]
by_name = {r["name"]: r for r in kernels}
m = json.load(open(os.path.join(out, "gm-counters-1", "measured.json")))
copy, fma = by_name.get("stream_copy"), by_name.get("fma_loop")
gemms = [r for r in kernels if r["name"] not in ("stream_copy", "fma_loop") and (r["tensor_active_pct"] or 0) > 0]
gemm = max(gemms, key=lambda r: r["total_ns"], default=None)
want_dram = 100 * m["copy_bps"] / m["dram_peak_bps"]
want_tensor = 100 * m["gemm_flops"] / 989.4e12
checks = {
    "copy_dram": (copy and copy["dram_pct"], want_dram),
    "gemm_tensor": (gemm and gemm["tensor_active_pct"], want_tensor),
}
ok = all(got is not None and abs(got - want) <= 0.10 * want for got, want in checks.values())
ok = ok and fma is not None and (fma["dram_pct"] or 0) < 5
phases = {}
for mode in ("plain", "counters"):
    runs = [json.load(open(os.path.join(out, f"gm-{mode}-{r}", "measured.json"))) for r in (1, 2, 3)]
    phases[mode] = {k: statistics.median(x[k] for x in runs) for k in ("copy_ms", "fma_ms", "gemm_ms")}
cost = {k: phases["counters"][k] / phases["plain"][k] - 1 for k in phases["plain"]}
sampler = [l for l in open(os.path.join(out, "gm-counters-1", "record.log")) if "device counters" in l]
summary = {"checks": {k: {"counters": g, "measured": w} for k, (g, w) in checks.items()},
           "fma": fma, "gemm_kernel": gemm and gemm["name"], "phases_ms": phases, "cost": cost,
           "sampler": sampler, "first_sample_after_first_call_ms": set_up_ms, "pass": ok}
json.dump(summary, open(os.path.join(out, "gpu-metrics-summary.json"), "w"), indent=1)
for k, (g, w) in checks.items():
    print(f"{k}: counters {g} vs measured {w:.1f}")
print("phase cost with counters:", {k: f"{100 * v:+.2f}%" for k, v in cost.items()}, "".join(sampler).strip())
print("gpu-metrics:", "PASS" if ok else "FAIL (counters more than 10% from the measured rates)")
sys.exit(0 if ok else 1)
PY
}
