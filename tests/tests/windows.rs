//! Windows on a fast loop, on cudasim (the CPU test double for the driver, runtime and CUPTI) with its
//! realistic CUPTI timing (`cudasim/src/timing.rs`: set-up that takes a while, callbacks that cost): what the first
//! H100 run showed failing. A program doing ~1 ms steps is attached by steps, by an NVTX range, by injection and by
//! duration; each window holds exactly the work of its steps, counted from the moment recording was armed, and no
//! event the agent did not see begin.

use cuflight_integration::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

/// Kernels (and launches) per step of the stepper; each step also makes one cudaStreamSynchronize.
const PER_STEP: u64 = 4;

/// `tests/c/stepper.c`, started under `cuflight launch` (dormant agent) or plainly.
struct Stepper {
    child: Child,
    _out: BufReader<ChildStdout>,
}

impl Stepper {
    fn start(dir: &Path, launched: bool, extra: &[&str]) -> Stepper {
        let prog = build_c("stepper", dir);
        let mut cmd = if launched {
            let mut c = Command::new(cuflight_bin());
            c.arg("launch").arg("--").arg(&prog);
            c
        } else {
            let mut c = Command::new(&prog);
            for var in ["CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "CUFLIGHT_SESSION", "LD_PRELOAD"] {
                c.env_remove(var);
            }
            c
        };
        let mut child = cmd
            .arg(PER_STEP.to_string())
            .args(extra)
            .env("LD_LIBRARY_PATH", cudasim_dir())
            .env_remove("CUDASIM_CUPTI_VERSION")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("stepper runs");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        // "ready", and "blocked" first when a thread blocks.
        for _ in 0..if extra.first() == Some(&"block") { 2 } else { 1 } {
            let mut line = String::new();
            out.read_line(&mut line).expect("stepper prints");
            assert!(line.starts_with("stepper: ready") || line.starts_with("stepper: blocked"), "{line}");
        }
        Stepper { child, _out: out }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn end(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// `cuflight attach PID --force -o TRACE ARGS`, to its end; returns its stderr. 30 s bound any wait.
fn attach(pid: u32, trace: &Path, args: &[&str]) -> String {
    let out = Command::new(cuflight_bin())
        .args(["attach", &pid.to_string(), "--force", "-o"])
        .arg(trace)
        .args(args)
        .output()
        .expect("cuflight runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

/// Every API call in the stats, all names.
fn api_calls(s: &Value) -> u64 {
    s["api"].as_array().unwrap().iter().map(|r| r["count"].as_u64().unwrap()).sum()
}

/// The window holds `steps` whole steps of the stepper and nothing else of its work.
fn assert_steps(s: &Value, steps: u64, what: &str) {
    let shown = format!("{what}: kernels {} api {} nvtx {}", s["kernels"], s["api"], s["nvtx"]);
    assert_eq!(count(s, "nvtx", "name", "step"), steps, "{shown}");
    assert_eq!(count(s, "nvtx", "name", "request"), steps, "{shown}");
    assert_eq!(count(s, "kernels", "name", "tick"), steps * PER_STEP, "{shown}");
    assert_eq!(count(s, "api", "name", "cudaLaunchKernel"), steps * PER_STEP, "{shown}");
    assert_eq!(count(s, "api", "name", "cudaStreamSynchronize"), steps, "{shown}");
    assert_eq!(api_calls(s), steps * (PER_STEP + 1), "{shown}");
}

#[test]
fn step_windows_on_a_fast_loop_hold_their_steps_counted_from_arming() {
    let dir = scratch("windows-steps");
    let stepper = Stepper::start(&dir, true, &[]);
    let pid = stepper.pid();
    let trace = dir.join("w.cuf");

    let err = attach(pid, &trace, &["--steps", "5", "--duration", "30s"]);
    assert!(err.contains("the range ended") && err.contains("recording was armed"), "{err}");
    assert!(err.contains("not counted"), "a loop of 1 ms steps went on while CUPTI was set up: {err}");
    assert_steps(&stats(&trace), 5, "--steps 5");
    wait_for_agent_state(pid, "dormant");

    // Attached a second time: the agent's CUPTI is set up already, and the window is as exact.
    let err = attach(pid, &trace, &["--skip-steps", "2", "--steps", "3", "--duration", "30s"]);
    assert!(err.contains("the range ended"), "{err}");
    assert_steps(&stats(&trace), 3, "--skip-steps 2 --steps 3");
    wait_for_agent_state(pid, "dormant");

    // The first "request" range that begins after arming: one request's kernels, launches and wait; the step
    // around it began before the window.
    let err = attach(pid, &trace, &["--capture-range", "nvtx:request", "--duration", "30s"]);
    assert!(err.contains("the range ended"), "{err}");
    let s = stats(&trace);
    assert_eq!(count(&s, "nvtx", "name", "request"), 1, "{}", s["nvtx"]);
    assert_eq!(count(&s, "kernels", "name", "tick"), PER_STEP);
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), PER_STEP);
    assert_eq!(api_calls(&s), PER_STEP + 1, "{}", s["api"]);
    stepper.end();
}

#[test]
fn an_injected_agent_counts_steps_from_arming_too() {
    if std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.contains("Seccomp:\t2")) {
        skipped("ptrace is forbidden here (inject.rs tests the refusal)");
        return;
    }
    let dir = scratch("windows-inject");
    let stepper = Stepper::start(&dir, false, &[]);
    let trace = dir.join("w.cuf");
    let err = attach(stepper.pid(), &trace, &["--inject", "--steps", "5", "--duration", "30s"]);
    assert!(err.contains("the range ended") && err.contains("recording was armed"), "{err}");
    assert_steps(&stats(&trace), 5, "--inject --steps 5");
    stepper.end();
}

/// A call blocked in a synchronisation when the agent arms ends inside the window: it is left out and counted,
/// never written as starting at boot; the timelines start and end with the window.
#[test]
fn a_call_in_flight_at_arming_is_left_out_and_counted() {
    let dir = scratch("windows-in-flight");
    // A second thread waits 1.5 s in cudaStreamSynchronize from before the attach.
    let stepper = Stepper::start(&dir, true, &["block", "1.5"]);
    let trace = dir.join("w.cuf");
    let err = attach(stepper.pid(), &trace, &["--duration", "2500ms"]);
    assert!(err.contains("the duration passed") && err.contains("recording was armed"), "{err}");
    let s = stats(&trace);
    let p = &s["processes"][0];
    assert!(p["unseen_begin"].as_u64().unwrap() >= 1, "the blocked wait is counted: {p}");
    // Counted apart: it began before the window and was not lost.
    assert_eq!(s["dropped"], 0, "{}", s["dropped"]);
    assert_eq!(count(&s, "kernels", "name", "spin"), 0, "launched before the window");
    let steps = count(&s, "nvtx", "name", "step");
    assert!(steps > 100, "{steps} steps in 2.5 s");
    // Every wait in the window is a step's (give or take the requests the window's ends cut): the blocked one,
    // 1.5 s long, is not among them.
    let waits = row(&s, "api", "name", "cudaStreamSynchronize");
    let requests = count(&s, "nvtx", "name", "request");
    assert!(waits["count"].as_u64().unwrap().abs_diff(requests) <= 2, "{waits} for {requests} requests");
    assert!(waits["max_ns"].as_u64().unwrap() < 500_000_000, "{waits}");

    // The timelines hold the window and nothing from before it (the old agent's call started at boot).
    let chrome = export_chrome(&trace, &dir.join("w.json"));
    let spans: Vec<(f64, f64)> = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap_or(0.0)))
        .collect();
    let first = spans.iter().map(|s| s.0).fold(f64::MAX, f64::min);
    let last = spans.iter().map(|s| s.0 + s.1).fold(0.0, f64::max);
    assert!(last - first < 3.5e6, "the Chrome timeline spans {} s for a 2.5 s window", (last - first) / 1e6);
    let perfetto = dir.join("w.perfetto");
    let (ok, err) =
        cuflight(&["export".as_ref(), trace.as_os_str(), "--force".as_ref(), "-o".as_ref(), perfetto.as_os_str()]);
    assert!(ok, "{err}");
    let checked = python_json("check_perfetto.py", &[perfetto.as_os_str()]);
    let span = checked["last_ns"].as_f64().unwrap() - checked["first_ns"].as_f64().unwrap();
    assert!(span < 3.5e9, "the Perfetto timeline spans {} s for a 2.5 s window", span / 1e9);
    stepper.end();
}

/// cudasim's CUPTI costs what `cudasim/src/timing.rs` says, measured by the same program `scripts/gpu-validate`
/// runs on a GPU (tests/c/cupti_timing.c), and each figure follows its environment variable.
#[test]
fn cudasim_models_cuptis_set_up_delivery_and_callback_costs() {
    let dir = scratch("windows-cupti-timing");
    let prog = build_c("cupti_timing", &dir);
    let run = |env: &[(&str, &str)]| -> Value {
        let out = Command::new(&prog)
            .env("LD_LIBRARY_PATH", cudasim_dir())
            .env_remove("CUDASIM_CUPTI_VERSION")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let t = run(&[]);
    let ms = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"));
    assert!(ms("subscribe_ms") >= 14.0, "lazy initialisation at the first CUPTI call: {t}");
    for kind in ["enable_kernel_ms", "enable_memcpy_ms", "enable_memset_ms"] {
        assert!(ms(kind) >= 0.04, "{kind}: {t}");
    }
    assert!((0.0..5.0).contains(&ms("first_callback_after_setup_ms")), "callbacks start with the next call: {t}");
    assert_eq!(t["records_before_flush"], 0, "records wait for a full buffer or a flush: {t}");
    assert_eq!(t["memset_records"], 200, "{t}");
    // Two callback sites of 83 ns each: wall-clock figures on a shared machine running other tests read lower
    // (85 ns once, its baseline slowed more than the measured run), so the default shows a cost, and a cost
    // raised far above the noise shows that both sites pay it.
    assert!(ms("callback_cost_ns") >= 40.0, "two callback sites of 83 ns: {t}");
    let raised = run(&[("CUDASIM_CALLBACK_NS", "3000")]);
    assert!(raised["callback_cost_ns"].as_f64().unwrap() >= 5000.0, "two callback sites of 3 us: {raised}");
    let off = run(&[("CUDASIM_CUPTI_INIT_MS", "0"), ("CUDASIM_CUPTI_ENABLE_US", "0"), ("CUDASIM_CALLBACK_NS", "0")]);
    assert!(off["setup_ms"].as_f64().unwrap() < 10.0, "{off}");
}

/// A launch pays for CUPTI while it is set up, recording or not, and only cuptiFinalize gives its cost back
/// (cudasim/src/timing.rs: the H200's launches 19-23% slower with a subscriber kept and nothing enabled): the cost
/// a paused sampler's program pays between recorded steps, and why serve's windows finalize.
#[test]
fn a_launch_pays_for_cupti_until_it_is_finalized() {
    let dir = scratch("windows-kept-cupti");
    let prog = build_c("kept_cupti", &dir);
    // Which phases pay, with the figures (800 and 700 ns by default) raised to 8 us: a debug build's launch takes
    // 3-6 us here, and a loaded machine moves it by 2 us.
    let out = Command::new(&prog)
        .arg("10000")
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .env("CUDASIM_CUPTI_LAUNCH_NS", "8000")
        .env("CUDASIM_KERNEL_RECORD_NS", "8000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ns = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"));
    // Each phase's figure is its fastest batch of five cycles (load only adds); `before` is one phase's.
    assert!(ns("kept_ns") - ns("finalized_ns") >= 5000.0, "set up and paused against finalized: {t}");
    assert!(ns("recording_ns") - ns("kept_ns") >= 5000.0, "kernel records on: {t}");
    assert!(ns("finalized_ns") - ns("before_ns") < 3000.0, "finalized as before CUPTI: {t}");
}

/// Issue 52 item 4: ten windows in a row into a program that always has a call in flight (a thread waiting on
/// 200 ms kernels, one after another) each report no record lost and their own calls in flight at arming (the
/// waiting thread's, and the loop's own wait if it was in one), never the sum of the windows before.
#[test]
fn windows_into_a_program_with_a_call_always_in_flight_lose_nothing() {
    let dir = scratch("windows-always-in-flight");
    let stepper = Stepper::start(&dir, true, &["blocks", "0.2"]);
    for w in 0..10 {
        let trace = dir.join(format!("w{w}.cuf"));
        let err = attach(stepper.pid(), &trace, &["--duration", "300ms"]);
        assert!(err.contains("nothing lost"), "window {w}: {err}");
        wait_for_agent_state(stepper.pid(), "dormant");
        let s = stats(&trace);
        assert_eq!(s["dropped"], 0, "window {w}: {}", s["processes"]);
        let unseen = s["processes"][0]["unseen_begin"].as_u64().unwrap();
        assert!((1..=3).contains(&unseen), "window {w}: {unseen} calls in flight at arming");
        let r = report_json(&trace);
        assert_eq!(r["processes"][0]["run"]["dropped_total"], 0, "window {w}");
    }
    stepper.end();
}
