# shellcheck shell=bash
# Parts of scripts/gpu-validate, which sources this file. What recording costs a CUDA program: per call, per
# piece of CUPTI's configuration, per activity kind, the eager call mix, a dormant agent, Python stacks, attach cycles.
# Each part_NAME runs in a child bash under its time limit with the driver's variables below exported (declared
# here, values kept, so that ShellCheck reads a misspelt name as one), and its with_mode and rotated.
declare -x bin out work root cuda_root cupti_lib cupti_inc cupti_flags have_torch

part_cost() {
  nvcc -O2 -o "$out/overhead" tests/gpu/overhead.cu $cupti_flags || return 1
  local round m
  for round in 1 2 3 4 5; do
    for m in $(rotated $round plain null null+activity dormant cuflight queries callbacks records ab); do
      case $m in
        null|null+activity) with_mode none "$out/overhead" 200000 $m ;;
        # 100,000 launches in 200 blocks of 500 (the GPU's queue) for the in-process measurement's 100 pairs.
        ab) with_mode cuflight "$out/overhead" 1000000 ab ;;
        *) with_mode $m "$out/overhead" 200000 plain ;;
      esac > "$out/oh-$m-$round.txt"
    done
  done
  python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
# queries: cuflight recording with --trace ...,queries (every runtime call subscribed, as before per-id callbacks).
# callbacks / records: one trace (cuda,nvtx,memory,overhead), its calls from callbacks or from API activity records
# (issue 52: the cheaper of the two becomes the default where no callback is needed).
modes = ["plain", "null", "null+activity", "dormant", "cuflight", "queries", "callbacks", "records"]
def read(m, r):
    return dict(l.split() for l in open(os.path.join(out, f"oh-{m}-{r}.txt")) if l.strip())
keys = ("cudaGetDevice_ns", "cudaLaunchKernel_ns")
vals = {m: {k: [float(read(m, r)[k]) for r in range(1, 6)] for k in keys} for m in modes}
med = {m: {k: statistics.median(v) for k, v in d.items()} for m, d in vals.items()}
worst = {m: {k: max(v) for k, v in d.items()} for m, d in vals.items()}
print(f"{'ns per call (median / max)':28}" + "".join(f"{m:>18}" for m in modes) + f"{'agent adds':>12}")
for k in keys:
    print(f"{k:28}" + "".join(f"{med[m][k]:9.1f}/{worst[m][k]:<8.1f}" for m in modes)
          + f"{med['cuflight'][k] - med['null+activity'][k]:12.1f}")
for k in keys:
    print(f"api-records against callbacks, {k}: {med['records'][k] - med['callbacks'][k]:+.1f} ns a call "
          f"(medians {med['records'][k]:.1f} / {med['callbacks'][k]:.1f})")
# The agent's own work measured inside one recorded process (overhead.cu's ab mode: batches with its callback
# working and skipped, alternated), where CUPTI's spread from run to run is common to both halves.
own = {k: [float(read("ab", r)[k]) for r in range(1, 6)] for k in ("agent_own_getdevice_ns", "agent_own_launch_ns")}
for k, v in own.items():
    print(f"{k:28} median {statistics.median(v):7.1f}  max {max(v):7.1f}  runs {v}  (goal: 100)")
json.dump({"medians": med, "maxima": worst, "agent_own_in_one_process": own},
          open(os.path.join(out, "cost-summary.json"), "w"), indent=1)
PY
}

part_bisect() {
  [ -x "$out/overhead" ] || nvcc -O2 -o "$out/overhead" tests/gpu/overhead.cu $cupti_flags || return 1
  local round m
  # percbid+activity+api: the launches' API activity records instead of their callbacks (issue 52: CUPTI's own
  # share of --trace ...,api-records, against percbid+activity).
  local modes="plain null percbid percbid+activity percbid+activity+api percbid+activity+kinds percbid+activity+kinds+ts percbid+activity+kinds+ts+tid percbid+activity+kinds+ts+tid+driver"
  for round in 1 2 3; do
    for m in $(rotated $round $modes cuflight-noop cuflight); do
      case $m in
        cuflight-noop) CUFLIGHT_NOOP_CALLBACK=1 with_mode cuflight "$out/overhead" 200000 plain ;;
        cuflight) with_mode cuflight "$out/overhead" 200000 plain ;;
        *) with_mode none "$out/overhead" 200000 $m ;;
      esac > "$out/bi-$m-$round.txt" || return 1
    done
  done
  python3 - "$out" $modes cuflight-noop cuflight <<'PY'
import json, os, statistics, sys
out, modes = sys.argv[1], sys.argv[2:]
def read(m, r):
    return dict(l.split() for l in open(os.path.join(out, f"bi-{m}-{r}.txt")) if l.strip())
keys = ("cudaGetDevice_ns", "cudaLaunchKernel_ns")
vals = {m: {k: [float(read(m, r)[k]) for r in (1, 2, 3)] for k in keys} for m in modes}
med = {m: {k: statistics.median(v) for k, v in d.items()} for m, d in vals.items()}
print(f"{'mode (median / max of 3, ns)':44}{'cudaGetDevice':>20}{'cudaLaunchKernel':>22}")
for m in modes:
    print(f"{m:44}" + "".join(f"{med[m][k]:11.1f}/{max(vals[m][k]):<8.1f}" for k in keys))
own = {k: med["cuflight"][k] - med["cuflight-noop"][k] for k in keys}
print("agent's own work (cuflight - cuflight-noop):", {k: round(v, 1) for k, v in own.items()})
json.dump({"medians": med, "runs": vals, "agent_own_ns": own}, open(os.path.join(out, "bisect-summary.json"), "w"), indent=1)
PY
}

part_kinds() {
  [ -x "$out/overhead" ] || nvcc -O2 -o "$out/overhead" tests/gpu/overhead.cu $cupti_flags || return 1
  local round m modes="percbid+activity percbid+activity+memcpy percbid+activity+memset percbid+activity+memory2 percbid+activity+sync percbid+activity+ovh percbid+activity+kinds"
  for round in 1 2 3; do
    for m in $(rotated $round $modes); do
      with_mode none "$out/overhead" 200000 $m > "$out/k-$m-$round.txt" || return 1
    done
  done
  nvcc -O2 -shared -Xcompiler -fPIC -cudart shared -o "$out/libempty_kernel.so" tests/gpu/empty_kernel.cu \
    -Xlinker -rpath -Xlinker "$cuda_root/lib64" || return 1
  export CUDART_KERNEL_LIB="$out/libempty_kernel.so"
  for round in 1 2 3; do
    for m in $(rotated $round none record lean); do
      with_mode $m python3 tests/py/eager_loop.py 500 > "$out/ke-$m-$round.txt" || return 1
    done
  done
  python3 - "$out" $modes <<'PY'
import json, os, re, statistics, sys
out, modes = sys.argv[1], sys.argv[2:]
def read(m, r):
    return dict(l.split() for l in open(os.path.join(out, f"k-{m}-{r}.txt")) if l.strip())
keys = ("cudaGetDevice_ns", "cudaLaunchKernel_ns")
vals = {m: {k: [float(read(m, r)[k]) for r in (1, 2, 3)] for k in keys} for m in modes}
med = {m: {k: statistics.median(v) for k, v in d.items()} for m, d in vals.items()}
print(f"{'activity kinds (median / max of 3, ns)':44}{'cudaGetDevice':>20}{'cudaLaunchKernel':>22}")
for m in modes:
    print(f"{m:44}" + "".join(f"{med[m][k]:11.1f}/{max(vals[m][k]):<8.1f}" for k in keys))
def us(m, r):
    return float(re.search(r"us_per_op=([0-9.]+)", open(os.path.join(out, f"ke-{m}-{r}.txt")).read()).group(1))
eager = {m: [us(m, r) for r in (1, 2, 3)] for m in ("none", "record", "lean")}
emed = {m: statistics.median(v) for m, v in eager.items()}
for m, v in eager.items():
    print(f"eager {m:7} {emed[m]:7.2f} us/op  {(emed[m] / emed['none'] - 1) * 100:+6.1f}% vs none  runs {v}")
json.dump({"medians": med, "runs": vals, "eager_us_per_op": emed, "eager_runs": eager},
          open(os.path.join(out, "kinds-summary.json"), "w"), indent=1)
PY
}

part_eager() {
  nvcc -O2 -shared -Xcompiler -fPIC -cudart shared -o "$out/libempty_kernel.so" tests/gpu/empty_kernel.cu \
    -Xlinker -rpath -Xlinker "$cuda_root/lib64" || return 1
  export CUDART_KERNEL_LIB="$out/libempty_kernel.so"
  local round m
  for round in 1 2 3 4 5; do
    for m in $(rotated $round none dormant cudainj record callbacks records); do
      with_mode $m python3 tests/py/eager_loop.py 500 > "$out/e-$m-$round.txt" || return 1
    done
  done
  python3 - "$out" <<'PY'
import json, os, re, statistics, sys
out = sys.argv[1]
# callbacks / records: issue 52's A/B (one trace without Python stacks; its calls from callbacks or API records).
modes = ("none", "dormant", "cudainj", "record", "callbacks", "records")
def us(m, r):
    return float(re.search(r"us_per_op=([0-9.]+)", open(os.path.join(out, f"e-{m}-{r}.txt")).read()).group(1))
runs = {m: [us(m, r) for r in range(1, 6)] for m in modes}
med = {m: statistics.median(v) for m, v in runs.items()}
for m in modes:
    print(f"eager {m:8} {med[m]:7.2f} us/op (max {max(runs[m]):7.2f})  {(med[m] / med['none'] - 1) * 100:+6.1f}% vs none  runs {runs[m]}")
json.dump({"us_per_op": med, "runs": runs}, open(os.path.join(out, "eager-summary.json"), "w"), indent=1)
PY
}

part_dormant() {
  # What a dormant agent costs, taken apart (issue 26: `cuflight launch` cost +450 to +620 ns a launch in the cost
  # part on the H100 and the H200, and +27.6% in the H200's eager loop, where the CUDA injection alone cost nothing):
  # the CUDA injection alone, with the NVTX injection variable too, `cuflight launch`, `cuflight launch` with the
  # NVTX variable taken away, and the exec through `cuflight launch` with both variables taken away (no agent).
  [ -x "$out/overhead" ] || nvcc -O2 -o "$out/overhead" tests/gpu/overhead.cu $cupti_flags || return 1
  nvcc -O2 -shared -Xcompiler -fPIC -cudart shared -o "$out/libempty_kernel.so" tests/gpu/empty_kernel.cu \
    -Xlinker -rpath -Xlinker "$cuda_root/lib64" || return 1
  export CUDART_KERNEL_LIB="$out/libempty_kernel.so"
  local agent round m modes="none cudainj cudainj+nvtx dormant dormant-nvtx exec-only"
  agent="$(dirname "$bin")/libcuflight.so"
  dormant_as() {
    local m=$1
    shift
    case $m in
      cudainj+nvtx) NVTX_INJECTION64_PATH="$agent" with_mode cudainj "$@" ;;
      dormant-nvtx) with_mode dormant env -u NVTX_INJECTION64_PATH "$@" ;;
      exec-only) with_mode dormant env -u CUDA_INJECTION64_PATH -u NVTX_INJECTION64_PATH "$@" ;;
      *) with_mode "$m" "$@" ;;
    esac
  }
  for round in 1 2 3 4 5 6 7; do
    for m in $(rotated $round $modes); do
      dormant_as $m "$out/overhead" 200000 plain > "$out/d-$m-$round.txt" || return 1
    done
  done
  for round in 1 2 3 4 5; do
    for m in $(rotated $round $modes); do
      dormant_as $m python3 tests/py/eager_loop.py 500 > "$out/de-$m-$round.txt" || return 1
    done
  done
  python3 - "$out" $modes <<'PY'
import json, os, re, statistics, sys
out, modes = sys.argv[1], sys.argv[2:]
def read(m, r):
    return dict(l.split() for l in open(os.path.join(out, f"d-{m}-{r}.txt")) if l.strip())
keys = ("cudaGetDevice_ns", "cudaLaunchKernel_ns")
vals = {m: {k: [float(read(m, r)[k]) for r in range(1, 8)] for k in keys} for m in modes}
def us(m, r):
    return float(re.search(r"us_per_op=([0-9.]+)", open(os.path.join(out, f"de-{m}-{r}.txt")).read()).group(1))
eager = {m: [us(m, r) for r in range(1, 6)] for m in modes}
print(f"{'dormant, taken apart':16}{'GetDevice ns med/max':>24}{'launch ns med/max':>24}{'eager us/op med/max':>24}")
summary = {}
for m in modes:
    g, l, e = vals[m]["cudaGetDevice_ns"], vals[m]["cudaLaunchKernel_ns"], eager[m]
    summary[m] = {"getdevice_ns": g, "launch_ns": l, "eager_us": e}
    print(f"{m:16}{statistics.median(g):14.1f}/{max(g):<9.1f}{statistics.median(l):14.1f}/{max(l):<9.1f}"
          f"{statistics.median(e):14.2f}/{max(e):<9.2f}  launch runs {[round(x) for x in l]} eager runs {e}")
json.dump(summary, open(os.path.join(out, "dormant-summary.json"), "w"), indent=1)
PY
}

part_pystacks() {
  # What reading a Python stack costs per sampled call on a real GPU (issue 29): tests/py/py_stacks.py's timed mode
  # makes 20,000 cudaDeviceSynchronize calls through ctypes 16 frames deep (one function recursing, and 16
  # functions of their own), with no tool, recorded without Python stacks and recorded with them, 3 rounds
  # alternated; recorded with minus without is the reader's cost (benches/python-stacks measures the same on
  # cudasim).
  nvcc -O2 -shared -Xcompiler -fPIC -cudart shared -o "$out/libempty_kernel.so" tests/gpu/empty_kernel.cu \
    -Xlinker -rpath -Xlinker "$cuda_root/lib64" || return 1
  export CUDART_KERNEL_LIB="$out/libempty_kernel.so"
  local round m shape
  for round in 1 2 3; do
    for shape in recursive distinct; do
      local shape_arg=()
      [ $shape = distinct ] && shape_arg=(distinct)
      for m in $(rotated $round none nostacks record); do
        trace_out="$out/pystacks.cuf" with_mode $m python3 tests/py/py_stacks.py timed 20000 16 \
          "${shape_arg[@]}" > "$out/ps-$shape-$m-$round.txt" || return 1
      done
    done
  done
  python3 - "$out" <<'PY'
import json, os, re, statistics, sys
out = sys.argv[1]
summary = {}
for shape in ("recursive", "distinct"):
    runs = {m: [float(re.search(r"ns_per_call=([0-9.]+)", open(os.path.join(out, f"ps-{shape}-{m}-{r}.txt")).read()).group(1))
                for r in (1, 2, 3)] for m in ("none", "nostacks", "record")}
    med = {m: statistics.median(v) for m, v in runs.items()}
    summary[shape] = {"ns_per_call": med, "runs": runs, "stack_read_ns": med["record"] - med["nostacks"]}
    print(f"pystacks {shape:9} ns per cudaDeviceSynchronize: none {med['none']:.0f}, recorded without stacks "
          f"{med['nostacks']:.0f}, with {med['record']:.0f}: a stack read {med['record'] - med['nostacks']:.0f} ns"
          f"  (runs {runs})")
json.dump(summary, open(os.path.join(out, "pystacks-summary.json"), "w"), indent=1)
PY
}

part_cycles() {
  nvcc -O2 -o "$out/attach_cycles" tests/gpu/attach_cycles.cu $cupti_flags || return 1
  "$out/attach_cycles" 200 50 || return 1
  # Where the memory a cycle keeps goes (issue 30): the cycle cut down to callbacks alone, then to subscribe and
  # finalize alone; one subscriber kept across windows instead; an unsubscribe before each finalize. Each prints
  # its growth by kind of mapping and what malloc_trim gives back (H200, 2026-11-28: 74 KB in use a cycle in every
  # finalizing mode, 0.1 KB kept; launches 19-23% slower between kept windows).
  "$out/attach_cycles" 200 50 callbacks && "$out/attach_cycles" 200 50 subscribe && "$out/attach_cycles" 200 50 keep \
    && "$out/attach_cycles" 200 50 full+unsub && "$out/attach_cycles" 200 50 subscribe+unsub
}
