# shellcheck shell=bash
# Parts of scripts/gpu-validate, which sources this file. Servers and always-on use: attach to a served CUDA
# program, a PyTorch model server, a continuous-batching server, `serve` duty cycles, `record --sample`.
# Each part_NAME runs in a child bash under its time limit with the driver's variables below exported (declared
# here, values kept, so that ShellCheck reads a misspelt name as one), and its with_mode and rotated.
declare -x bin out work root cuda_root cupti_lib cupti_inc cupti_flags have_torch

part_attach() {
  nvcc -O2 -o "$out/server" tests/gpu/server.cu $cupti_flags -ldl || return 1
  python3 tests/py/attach_check.py "$bin" "$out/attach" 100 -- "$out/server" | tee "$out/attach-check.txt"
  local rc=${PIPESTATUS[0]}
  tail -1 "$out/attach-check.txt" > "$out/attach-summary.json"
  return $rc
}

part_batching() {
  # tests/gpu/batching_server.py (issue 51, item 3): a continuous-batching server (eager prefill, decode replayed
  # as CUDA graphs of 4 batch sizes) under `cuflight launch` at 3 request rates: 3 s dormant, a 10 s attach window,
  # 3 s after the detach; request latency by phase, the window's graph replays, iteration kinds and verdict.
  local rate pid rc=0
  for rate in ${BATCHING_RATES:-20 60 150}; do
    rm -f "$out/batching.in"; mkfifo "$out/batching.in"
    "$bin" launch -- python3 tests/gpu/batching_server.py "$out/batching-$rate-requests.json" $rate \
      < "$out/batching.in" > "$out/batching-$rate.out" 2>&1 &
    pid=$!
    exec 7> "$out/batching.in"
    for _ in $(seq 1 120); do grep -q ready "$out/batching-$rate.out" && break; sleep 0.5; done
    t() { date +%s%N; }
    { echo "dormant $(t)"; sleep 3; echo "dormant_end $(t)"
      echo "attached $(t)"
      "$bin" attach "$pid" --duration 10s --force -o "$out/batching-$rate.cuf" 2> "$out/batching-$rate.err" || rc=1
      echo "attached_end $(t)"; sleep 1
      echo "detached $(t)"; sleep 3; echo "detached_end $(t)"
    } > "$out/batching-$rate-phases.txt"
    exec 7>&-
    wait "$pid" || rc=1
    cat "$out/batching-$rate.err"
    "$bin" stats "$out/batching-$rate.cuf" --format json > "$out/batching-$rate-stats.json" || rc=1
    "$bin" report "$out/batching-$rate.cuf" --format json > "$out/batching-$rate-report.json" || rc=1
  done
  python3 scripts/gpu_checks.py batching "$out" ${BATCHING_RATES:-20 60 150} || rc=1
  return $rc
}

# Starts a program in the background with its output in FILE and waits (60 s at most) for a line "ready".
start_ready() {
  local file=$1; shift
  "$@" > "$file" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do grep -q ready "$file" && break; sleep 0.5; done
  echo $pid
}

part_infer() {
  local rc=0 pid
  mkfifo "$out/infer.in"
  # The writer end stays open in fd 7 until the server is to stop.
  "$bin" launch -- python3 tests/gpu/infer_server.py "$out/infer-requests.json" < "$out/infer.in" > "$out/infer.out" 2>&1 &
  pid=$!
  exec 7> "$out/infer.in"
  for _ in $(seq 1 120); do grep -q ready "$out/infer.out" && break; sleep 0.5; done
  t() { date +%s%N; }
  { echo "dormant $(t)"; sleep 4; echo "dormant_end $(t)"
    echo "attached $(t)"
    "$bin" attach "$pid" --duration 4s --force -o "$out/infer-duration.cuf" 2> "$out/infer-duration.err" || rc=1
    echo "attached_end $(t)"; sleep 1
    echo "detached $(t)"; sleep 4; echo "detached_end $(t)"
    "$bin" attach "$pid" --capture-range nvtx:request --duration 30s --force -o "$out/infer-request.cuf" 2> "$out/infer-request.err" || rc=1
  } > "$out/infer-phases.txt"
  exec 7>&-
  wait "$pid" || rc=1
  cat "$out/infer-duration.err" "$out/infer-request.err"
  "$bin" stats "$out/infer-duration.cuf" --format json > "$out/infer-duration.json" || rc=1
  "$bin" stats "$out/infer-request.cuf" --format json > "$out/infer-request.json" || rc=1
  python3 scripts/gpu_checks.py infer "$out" "$out/infer-summary.json" || rc=1
  return $rc
}

part_serve() {
  # Issue 52 item 1: where `serve --duty 1s/10s` costs more than its duty (H200: +8.8% against record's +34%).
  # Each mode runs planted_torch.py tiny (launch-bound, about 18 ms a step) under `cuflight launch`, serve logging
  # its windows, and gpu_checks.py serve splits each run's extra time into the steps before any window (serve's
  # mere presence), inside windows (arming, recording, finalize) and after them (a program CUPTI left slower).
  # watch: serve following another pid (the collector alone); duty-keep: CUPTI not finalized after a window.
  local round m serve_pid modes="${SERVE_MODES:-dormant watch duty duty-keep continuous record sample10}"
  for round in 1 2; do
    [ "$round" -gt "${SERVE_ROUNDS:-2}" ] && break
    # shellcheck disable=SC2086
    for m in $(rotated $round $modes); do
      serve_pid=
      case $m in
        watch) "$bin" serve --listen 127.0.0.1:0 --duty 1s/10s 1 2> "$out/serve-$m-$round.err" & serve_pid=$! ;;
        duty|duty-keep) "$bin" serve --listen 127.0.0.1:0 --duty 1s/10s --log-windows 2> "$out/serve-$m-$round.err" &
          serve_pid=$! ;;
        continuous) "$bin" serve --listen 127.0.0.1:0 --duty continuous 2> "$out/serve-$m-$round.err" & serve_pid=$! ;;
      esac
      # What serve's own metrics say the windows cost, read while the program runs (serve drops it once it exits).
      [ -n "$serve_pid" ] && python3 scripts/gpu_checks.py scrape "$out/serve-$m-$round.err" \
        "$out/serve-$m-$round.prom" "$serve_pid" &
      case $m in
        record|sample10) trace_out="$out/serve-$m.cuf" with_mode $m python3 tests/gpu/planted_torch.py tiny 600 \
          --timing "$out/s-$m-$round.json" ;;
        duty-keep) CUFLIGHT_FINALIZE=0 with_mode dormant python3 tests/gpu/planted_torch.py tiny 600 \
          --timing "$out/s-$m-$round.json" ;;
        *) with_mode dormant python3 tests/gpu/planted_torch.py tiny 600 --timing "$out/s-$m-$round.json" ;;
      esac
      [ -n "$serve_pid" ] && { kill "$serve_pid"; wait "$serve_pid"; wait; }
    done
  done
  python3 scripts/gpu_checks.py serve "$out" "$modes" || return 1
  # Every part folded: serve complains of none (an idle stretch once made every part "unreadable").
  ! grep -h "unreadable" "$out"/serve-*.err
}

part_sampled() {
  # Issue 52 item 2: `record --sample 1/10` on the launch-bound loop (tiny) against no tool, the dormant agent and a
  # full recording, alternated, 2 rounds (target: at most 5% step-time cost); then kernel time per step by
  # category, sampled against full (target: within 2%), from the two traces' reports.
  local round m
  for round in 1 2; do
    for m in $(rotated $round none dormant sample10 record); do
      trace_out="$out/sampled-$m-$round.cuf" with_mode $m python3 tests/gpu/planted_torch.py tiny 400 \
        --timing "$out/sampled-$m-$round.json"
    done
  done
  for m in sample10 record; do
    "$bin" report --format json "$out/sampled-$m-1.cuf" > "$out/sampled-report-$m.json" || return 1
  done
  python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
modes = ("none", "dormant", "sample10", "record")
runs = {m: [json.load(open(os.path.join(out, f"sampled-{m}-{r}.json")))["step_ms"] for r in (1, 2)
            if os.path.exists(os.path.join(out, f"sampled-{m}-{r}.json"))] for m in modes}
med = {m: statistics.median(v) for m, v in runs.items() if v}
for m in modes:
    if m in med:
        print(f"sampled {m:9} {med[m]:8.3f} ms/step  runs {runs[m]}  ({(med[m] / med['none'] - 1) * 100:+.1f}% vs none)")
rep = {m: json.load(open(os.path.join(out, f"sampled-report-{m}.json")))["processes"][0] for m in ("sample10", "record")}
per_step = {m: {c["category"]: c.get("per_step_ns", 0) / 1e6 for c in rep[m]["categories"]} for m in rep}
apart = {}
for cat, full in per_step["record"].items():
    got = per_step["sample10"].get(cat, 0.0)
    apart[cat] = (got / full - 1) * 100 if full else 0.0
    print(f"sampled {cat:12} per step: sampled {got:8.4f} ms, full {full:8.4f} ms ({apart[cat]:+.1f}%)")
sampling = rep["sample10"].get("sampling")
print("sampled: report's sampling section", json.dumps(sampling))
if sampling and sampling.get("step_ms_unrecorded"):
    # What recording costs a step, measured inside one run (EAGER_LAUNCH_TRACING_NS is read off this).
    print(f"sampled: steps recorded {sampling['step_ms_recorded']:.3f} ms, not recorded "
          f"{sampling['step_ms_unrecorded']:.3f} ms (their own ranges)")
json.dump({"step_ms": med, "runs": runs, "category_per_step_ms": per_step, "apart_pct": apart, "sampling": sampling},
          open(os.path.join(out, "sampled-summary.json"), "w"), indent=1)
sys.exit(0 if sampling and sampling["steps_recorded"] >= 30 else 1)
PY
}
