# shellcheck shell=bash
# Parts of scripts/gpu-validate, which sources this file. PyTorch programs: the training loops (eager, compiled,
# graphed) against torch.profiler, windows into them, planted bottlenecks, overhead, GPT-2 generation, the wheel.
# Each part_NAME runs in a child bash under its time limit with the driver's variables below exported (declared
# here, values kept, so that ShellCheck reads a misspelt name as one), and its with_mode and rotated.
declare -x bin out work root cuda_root cupti_lib cupti_inc cupti_flags have_torch

part_compiled() {
  local steps=20 mode
  for mode in eager compile graphs; do
    "$bin" record --force -o "$out/compiled-$mode.cuf" -- python3 tests/gpu/compiled_torch.py $mode $steps || return 1
    "$bin" report "$out/compiled-$mode.cuf" --format json > "$out/compiled-$mode-report.json" || return 1
    "$bin" stats "$out/compiled-$mode.cuf" --format json > "$out/compiled-$mode-stats.json" || return 1
    python3 tests/gpu/compiled_torch.py $mode $steps torchprof "$out/compiled-$mode-torchprof.json" || return 1
  done
  "$bin" diff "$out/compiled-eager.cuf" "$out/compiled-compile.cuf" "$out/compiled-graphs.cuf" > "$out/compiled-diff.txt" || return 1
  head -40 "$out/compiled-diff.txt"
  python3 scripts/gpu_checks.py compiled "$out" $steps
}

part_graphtrace() {
  # issue 51 item 1: CUDA graphs traced per node (the default) and per launch (--trace ...,graphs:
  # CUPTI_ACTIVITY_KIND_GRAPH_TRACE), side by side with no tool, 2 rounds alternated: the reduce-overhead loop of
  # tests/gpu/compiled_torch.py (every step replays CUDA graphs); step time, events, bytes, graphs table.
  local steps=300 round mode rc=0
  for round in 1 2; do
    for mode in none node graph; do
      case $mode in
        none) python3 tests/gpu/compiled_torch.py graphs $steps timing > "$out/gt-$mode-$round.txt" 2>&1 || rc=1 ;;
        node) "$bin" record --force -o "$out/gt-node.cuf" -- python3 tests/gpu/compiled_torch.py graphs $steps timing \
                > "$out/gt-$mode-$round.txt" 2>&1 || rc=1 ;;
        graph) "$bin" record --force --trace cuda,nvtx,memory,overhead,python,graphs -o "$out/gt-graph.cuf" \
                 -- python3 tests/gpu/compiled_torch.py graphs $steps timing > "$out/gt-$mode-$round.txt" 2>&1 || rc=1 ;;
      esac
    done
  done
  for mode in node graph; do
    "$bin" stats "$out/gt-$mode.cuf" --format json > "$out/gt-$mode-stats.json" || rc=1
    "$bin" report "$out/gt-$mode.cuf" --format json > "$out/gt-$mode-report.json" || rc=1
  done
  python3 scripts/gpu_checks.py graphtrace "$out" || rc=1
  return $rc
}

part_nccl() {
  # Whether the agent records NCCL's own NVTX ranges (ncclAllReduce, domain NCCL) on a GPU, never seen yet, and
  # which kernels a one-rank group launches: the report tells a collective by the range around its launch.
  "$bin" record --force -o "$out/nccl.cuf" -- python3 tests/gpu/nccl_single.py 20 || return 1
  "$bin" stats "$out/nccl.cuf" --format json > "$out/nccl-stats.json" || return 1
  "$bin" report "$out/nccl.cuf" --format json > "$out/nccl-report.json" || return 1
  "$bin" export -o "$out/nccl.json.gz" "$out/nccl.cuf" || return 1
  python3 scripts/gpu_checks.py nccl "$out"
}

part_torch() {
  local steps=50 rc=0
  "$bin" record --force -o "$out/torch.cuf" -- python3 tests/gpu/train_torch.py plain $steps || return 1
  "$bin" stats "$out/torch.cuf" --format json > "$out/torch.json" || return 1
  python3 tests/gpu/train_torch.py torchprof $steps "$out/torchprof.json" || return 1
  python3 scripts/gpu_checks.py torch "$out/torch.json" "$out/torchprof.json" $steps "$out/torch-summary.json"
}

part_torch_windows() {
  [ -f "$out/torch.json" ] || { "$bin" record --force -o "$out/torch.cuf" -- python3 tests/gpu/train_torch.py plain 50 && "$bin" stats "$out/torch.cuf" --format json > "$out/torch.json"; } || return 1
  local rc=0 pid
  # The loop under `cuflight launch` (dormant agent), attached by steps: CUPTI is set up while it runs.
  pid=$(start_ready "$out/forever-launched.out" "$bin" launch -- python3 tests/gpu/train_torch.py forever 0)
  "$bin" attach "$pid" --steps 5 --duration 60s --force -o "$out/torch-steps.cuf" 2> "$out/torch-steps.err" || rc=1
  cat "$out/torch-steps.err"
  "$bin" stats "$out/torch-steps.cuf" --format json > "$out/torch-steps.json" || rc=1
  kill "$pid"; wait "$pid" 2>/dev/null
  # The same loop started plainly: the agent injected, then the window.
  pid=$(start_ready "$out/forever-plain.out" python3 tests/gpu/train_torch.py forever 0)
  "$bin" attach --inject "$pid" --steps 10 --duration 60s --force -o "$out/torch-inject.cuf" 2> "$out/torch-inject.err" || rc=1
  cat "$out/torch-inject.err"
  "$bin" stats "$out/torch-inject.cuf" --format json > "$out/torch-inject.json" || rc=1
  kill "$pid"; wait "$pid" 2>/dev/null
  python3 scripts/gpu_checks.py torch-windows "$out" 50 "$out/torch-windows-summary.json" || rc=1
  return $rc
}

part_planted() {
  local v
  for v in ${PLANTED_VARIANTS:-clean dataload item pageable tiny fp32 leak}; do
    "$bin" record --force -o "$out/planted-$v.cuf" -- python3 tests/gpu/planted_torch.py $v 30 2>/dev/null || echo "planted $v: run failed"
    "$bin" report "$out/planted-$v.cuf" --format json > "$out/planted-$v.json" || true
    "$bin" stats "$out/planted-$v.cuf" --format json > "$out/planted-$v-stats.json" || true
  done
  python3 scripts/gpu_checks.py planted "$out"
}

part_overhead() {
  # Step time of the GPU-bound (clean) and the launch-bound (tiny: 2000 small ops a step) loops with no profiler,
  # the agent dormant (`cuflight launch`), `cuflight record` with and without Python stacks (issue 29's rule: stacks
  # stay on by default while they cost under 0.5% a step) and torch.profiler, alternated, 2 rounds. (The dormant
  # agent's two injections alone were measured here on 2026-11-27; the eager part now bisects the dormant cost in
  # runs ten times shorter.)
  local round variant m
  for round in 1 2; do
    for variant in ${OVERHEAD_VARIANTS:-clean tiny}; do
      for m in $(rotated $round none dormant cuflight nostacks torchprof); do
        with_mode $m python3 tests/gpu/planted_torch.py $variant 60 --timing "$out/t-$variant-$m-$round.json"
      done
    done
  done
  python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
modes = ("none", "dormant", "cuflight", "nostacks", "torchprof")
summary = {}
for variant in ("clean", "tiny"):
    med = {}
    for m in modes:
        runs = [os.path.join(out, f"t-{variant}-{m}-{r}.json") for r in (1, 2)]
        runs = [json.load(open(p))["step_ms"] for p in runs if os.path.exists(p)]
        if runs:
            med[m] = statistics.median(runs)
    summary[variant] = med
    for m, v in med.items():
        print(f"{variant:6} {m:10} {v:8.3f} ms/step  ({(v / med['none'] - 1) * 100:+.1f}% vs none)")
json.dump(summary, open(os.path.join(out, "overhead-summary.json"), "w"), indent=1)
PY
}

part_wheel() {
  # Issue 53 item 1: the x86_64 wheel scripts/wheels built (glibc 2.28, no Rust needed), installed into this
  # machine's Python with no toolchain on PATH, records the PyTorch loop with the agent it installed. Carry
  # target/wheels/dist (or set CUFLIGHT_WHEEL).
  local whl=${CUFLIGHT_WHEEL:-$(ls target/wheels/dist/*manylinux_2_28_x86_64.whl 2>/dev/null | head -1)}
  [ -f "$whl" ] || { echo "wheel: no x86_64 wheel: scripts/wheels target/wheels/dist x86_64, and carry target/wheels/dist"; return 1; }
  local venv="$out/wheel-venv" path
  # The machine's PyTorch stays visible; nothing from this checkout is (no CUFLIGHT_BIN, CUFLIGHT_AGENT, PYTHONPATH).
  # The H200 image's python3 is itself a venv (/opt/torch/.venv), whose packages --system-site-packages does not
  # reach (2026-12-01: "No module named 'torch'"): a .pth names the directory torch is installed in.
  python3 -m venv "$venv" || return 1
  python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' \
    > "$(echo "$venv"/lib/python3*/site-packages)/machine-torch.pth" || return 1
  path="$venv/bin:/usr/local/bin:/usr/bin:/bin"
  if PATH=$path command -v cargo >/dev/null; then echo "wheel: cargo is on $path"; return 1; fi
  env -u CUFLIGHT_BIN -u CUFLIGHT_AGENT -u PYTHONPATH PATH="$path" "$venv/bin/pip" install -q --no-index --no-deps "$whl" || return 1
  env -u CUFLIGHT_BIN -u CUFLIGHT_AGENT -u PYTHONPATH PATH="$path" "$venv/bin/cuflight" record --force -o "$out/wheel.cuf" \
    -- "$venv/bin/python" tests/gpu/train_torch.py plain 50 || return 1
  env -u CUFLIGHT_AGENT PATH="$path" "$venv/bin/cuflight" stats "$out/wheel.cuf" --format json > "$out/wheel-stats.json" || return 1
  env -u CUFLIGHT_AGENT PATH="$path" "$venv/bin/cuflight" doctor --format json > "$out/wheel-doctor.json"
  python3 - "$out" "$whl" "$venv" <<'PY'
import json, os, sys
out, whl, venv = sys.argv[1:4]
stats = json.load(open(os.path.join(out, "wheel-stats.json")))
doctor = json.load(open(os.path.join(out, "wheel-doctor.json")))
kernels = sum(k["count"] for k in stats.get("kernels", []))
agent = next(c for c in doctor["checks"] if c["check"] == "agent")
summary = {"wheel": os.path.basename(whl), "kernels": kernels, "agent": agent["found"],
           "recording": next(c["result"] for c in doctor["checks"] if c["check"] == "recording")}
print("wheel:", summary)
json.dump(summary, open(os.path.join(out, "wheel-summary.json"), "w"), indent=1)
# The installed agent (the venv's lib/), kernels recorded, and the doctor's probe recorded with it too.
sys.exit(0 if kernels > 0 and venv in agent["found"] and summary["recording"] == "ok" else 1)
PY
}

part_generate() {
  local round m
  for round in 1 2; do
    for m in $(rotated $round none dormant cuflight torchprof); do
      trace_out="$out/generate.cuf" with_mode $m python3 tests/gpu/gpt2_generate.py "$out/g-$m-$round.json" > /dev/null || return 1
    done
  done
  "$bin" stats "$out/generate.cuf" --format json > "$out/generate-stats.json" || return 1
  python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
modes = ("none", "dormant", "cuflight", "torchprof")
runs = {m: [json.load(open(os.path.join(out, f"g-{m}-{r}.json")))["tokens_per_s"] for r in (1, 2)] for m in modes}
med = {m: statistics.median(v) for m, v in runs.items()}
for m in modes:
    print(f"generate {m:10} {med[m]:8.1f} tokens/s  runs {runs[m]}  ({(med[m] / med['none'] - 1) * 100:+.1f}% vs none)")
stats = json.load(open(os.path.join(out, "generate-stats.json")))
calls = sorted(((r["count"], r["name"]) for r in stats.get("api", [])), reverse=True)[:8]
print("recorded calls (last cuflight run):", calls, "kernels:", sum(r["count"] for r in stats["kernels"]),
      "dropped:", stats["dropped"], "not recorded:", stats.get("not_recorded"))
ok = med["cuflight"] > med["torchprof"] and med["dormant"] >= 0.95 * med["none"]
json.dump({"tokens_per_s": med, "runs": runs, "pass": ok}, open(os.path.join(out, "generate-summary.json"), "w"), indent=1)
print("generate:", "PASS" if ok else "FAIL (want cuflight above torch.profiler, dormant within 5% of none)")
sys.exit(0 if ok else 1)
PY
}
