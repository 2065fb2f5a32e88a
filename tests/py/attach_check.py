"""The dormant agent, attach windows and sampling, the flight recorder's dumps (on demand, on a slow step), and
injection into the same program started without cuflight, checked end to end with exact counts: on cudasim
(tests/c/server.c, "cmd" mode) and on a real GPU (tests/gpu/server.cu, from scripts/gpu-validate).

usage: attach_check.py CUFLIGHT OUT_DIR CYCLES -- SERVER [ARGS...]
Prints one line per check and a JSON summary as its last line; exits 1 if any check failed.
"""
import json
import os
import signal
import subprocess
import sys
import time

cuflight, out, cycles = sys.argv[1], sys.argv[2], int(sys.argv[3])
server_cmd = sys.argv[sys.argv.index("--") + 1:]
os.makedirs(out, exist_ok=True)
results = {}


def check(name, ok, detail=""):
    results[name] = bool(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}".rstrip(), flush=True)


def ps():
    r = subprocess.run([cuflight, "ps", "--format", "json"], capture_output=True, text=True, check=True)
    return {row["pid"]: row for row in json.loads(r.stdout)}


def wait_state(pid, state, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if ps().get(pid, {}).get("state") == state:
            return True
        time.sleep(0.02)
    return False


def kernels(trace):
    r = subprocess.run([cuflight, "stats", trace, "--format", "json"], capture_output=True, text=True, check=True)
    s = json.loads(r.stdout)
    return sum(k["count"] for k in s["kernels"] if "tick" in k["name"]), s


def footprint(pid):
    rss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS"))
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task")), rss


server = subprocess.Popen([cuflight, "launch", "--"] + server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, bufsize=1)
assert server.stdout.readline().strip() == "server: ready"
pid = server.pid


def cmd(line):
    server.stdin.write(line + "\n")
    server.stdin.flush()
    return server.stdout.readline().strip()


def attach(trace, *args):
    p = subprocess.Popen([cuflight, "attach", str(pid), "--force", "-o", trace, *args], stderr=subprocess.PIPE, text=True)
    if not wait_state(pid, "recording"):
        p.kill()
        raise SystemExit(f"process {pid} never started recording")
    return p


row = ps().get(pid, {})
check("dormant after launch", row.get("state") == "dormant" and row.get("cupti_version") == 0, str(row))
check("CUPTI free while dormant", cmd("s") == "subscribed")

# A window ended by Ctrl-C: exactly the kernels inside it.
cmd("k 5")
p = attach(os.path.join(out, "window.cuf"), "--duration", "600s")
inside_refused = cmd("s") == "refused"
cmd("k 7")
p.send_signal(signal.SIGINT)
err = p.communicate()[1]
n, s = kernels(os.path.join(out, "window.cuf"))
check("window holds exactly its kernels", n == 7 and s["dropped"] == 0, f"{n} of 7; {err.strip()}")
check("CUPTI taken inside a window (one subscriber)", inside_refused)
check("dormant and CUPTI free after detach", wait_state(pid, "dormant") and cmd("s") == "subscribed")

# Steps 2..3 of 5 (3 kernels each).
p = attach(os.path.join(out, "steps.cuf"), "--steps", "2", "--skip-steps", "1")
cmd("k 4")
cmd("t 5 3")
err = p.communicate(timeout=120)[1]
n, s = kernels(os.path.join(out, "steps.cuf"))
steps = sum(r["count"] for r in s["nvtx"] if r["name"] == "step")
check("--steps 2 --skip-steps 1", n == 6 and steps == 2, f"{n} of 6 kernels, {steps} of 2 steps; {err.strip()}")
wait_state(pid, "dormant")

# cudaProfilerStart..Stop.
p = attach(os.path.join(out, "profiler.cuf"), "--capture-range", "cudaProfilerApi")
for line in ("k 2", "p", "k 5", "P", "k 3"):
    cmd(line)
err = p.communicate(timeout=120)[1]
n, _ = kernels(os.path.join(out, "profiler.cuf"))
check("--capture-range cudaProfilerApi", n == 5, f"{n} of 5; {err.strip()}")
wait_state(pid, "dormant")

# Attach/detach cycles: descriptors and threads flat, memory nearly so.
for _ in range(5):
    subprocess.run([cuflight, "attach", str(pid), "--duration", "10ms", "--force", "-o", os.path.join(out, "c.cuf")],
                   capture_output=True, check=True)
before = footprint(pid)
t0 = time.time()
failed = sum(subprocess.run([cuflight, "attach", str(pid), "--duration", "10ms", "--force", "-o",
                             os.path.join(out, "c.cuf")], capture_output=True).returncode != 0 for _ in range(cycles))
per_cycle_ms = (time.time() - t0) * 1000 / max(cycles, 1)
after = footprint(pid)
check(f"{cycles} attach/detach cycles", failed == 0 and after[:2] == before[:2] and after[2] - before[2] < 16384,
      f"fds/threads/RSS KiB {before} -> {after}, {per_cycle_ms:.1f} ms per cycle")
check("work after the cycles", cmd("k 3") == "done 3" and cmd("s") == "subscribed")

server.stdin.close()
check("the program ends normally", server.wait(timeout=60) == 0)


def start(prefix):
    p = subprocess.Popen(prefix + server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert p.stdout.readline().strip() == "server: ready"
    return p


def ask(p, line):
    p.stdin.write(line + "\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


# Flight recorder: everything since the start (the ready kernel and 6), dumped on demand; the program records on.
fr = start([cuflight, "launch", "--flight-recorder", "60s", "--dump-dir", out, "--"])
ask(fr, "k 6")
for label, want in (("", 7), (" again, nothing taken by the first", 9)):
    dump = os.path.join(out, "dump.cuf")
    r = subprocess.run([cuflight, "dump", str(fr.pid), "--force", "-o", dump], capture_output=True, text=True)
    n, s = kernels(dump) if r.returncode == 0 else (0, {"dropped": 0})
    check(f"flight recorder dump{label}", n == want and s["dropped"] == 0, f"{n} of {want}; {r.stderr.strip()}")
    ask(fr, "k 2")
fr.stdin.close()
check("the flight recorder's program ends normally", fr.wait(timeout=60) == 0)

# A slow step dumps by itself (--dump-on-slow-step 5): 20 steps of 200 kernels (about half a millisecond), then one
# of 10,000 (20 times as long and over 10 ms more); each ring keeps 16 Ki events, so all of it fits, and the control
# thread flushes CUPTI first, so every kernel is in the image.
slow_dir = os.path.join(out, "slow-step")
os.makedirs(slow_dir, exist_ok=True)
fr = start([cuflight, "launch", "--flight-recorder", "60s", "--dump-dir", slow_dir, "--dump-on-slow-step", "5", "--"])
ask(fr, "t 20 200")
ask(fr, "t 1 10000")
deadline = time.time() + 5
while time.time() < deadline and not any(f.endswith(".seg") for f in os.listdir(slow_dir)):
    time.sleep(0.1)
images = sorted(f for f in os.listdir(slow_dir) if f.endswith(".seg"))
n, said = 0, ""
if len(images) == 1:
    dump = os.path.join(out, "slow-step.cuf")
    r = subprocess.run([cuflight, "dump", os.path.join(slow_dir, images[0]), "--force", "-o", dump],
                       capture_output=True, text=True)
    said = r.stderr.strip()
    n = kernels(dump)[0] if r.returncode == 0 else 0
check("a slow step dumps the flight recorder by itself, flushed", len(images) == 1 and n == 14001
      and "a slow step" in said and "could not flush" not in said, f"{images}: {n} of 14001; {said}")
fr.stdin.close()
fr.wait(timeout=60)

# Injection: the same program started without cuflight, recorded through `attach --inject`.
plain = start([])
p = subprocess.Popen([cuflight, "attach", "--inject", str(plain.pid), "--duration", "600s", "--force", "-o",
                      os.path.join(out, "inject.cuf")], stderr=subprocess.PIPE, text=True)
if wait_state(plain.pid, "recording"):
    ask(plain, "k 4")
    p.send_signal(signal.SIGINT)
    err = p.communicate()[1]
    n, s = kernels(os.path.join(out, "inject.cuf"))
    late = [row.get("injected_late") for row in s["processes"]]
    check("attach --inject: a window of a plainly started program", n == 4 and late == [True], f"{n} of 4; {err.strip()}")
else:
    p.kill()
    err = p.communicate()[1].strip()
    if "cannot ptrace" in err:
        print(f"SKIP attach --inject (ptrace is not permitted here: {err})", flush=True)
    else:
        check("attach --inject: a window of a plainly started program", False, err)
check("the injected program works on and ends normally", ask(plain, "k 1") == "done 1" and (plain.stdin.close() or
      plain.wait(timeout=60) == 0))
print(json.dumps({"checks": results, "cycles": cycles, "footprint_before": before, "footprint_after": after,
                  "ms_per_cycle": round(per_cycle_ms, 1)}))
sys.exit(0 if all(results.values()) else 1)
