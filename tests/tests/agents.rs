//! Agents that run without a recording collector: `cuflight launch` (dormant) and `cuflight ps`, on cudasim
//! (the CPU test double for the driver, runtime and CUPTI).

use cuflight_integration::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

#[path = "agents/hardships.rs"]
mod hardships;

/// Starts `cuflight ARGS -- server 0 [extra]` (it runs until its stdin closes) and waits for "server: ready".
fn start_server(
    dir: &std::path::Path,
    cuflight_args: &[&str],
    extra: &[&str],
) -> (Child, BufReader<std::process::ChildStdout>) {
    let prog = build_c("server", dir);
    let mut child = Command::new(cuflight_bin())
        .args(cuflight_args)
        .arg("--")
        .arg(&prog)
        .arg("0")
        .args(extra)
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .env_remove("CUDASIM_CUPTI_VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cuflight runs");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("server prints");
    assert_eq!(line.trim(), "server: ready", "{line}");
    (child, out)
}

fn ps() -> Vec<Value> {
    let out = Command::new(cuflight_bin()).args(["ps", "--format", "json"]).output().expect("cuflight runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("ps prints JSON").as_array().expect("rows").clone()
}

/// The `ps` row of the process whose command runs `server`, if any (with its pid).
fn server_row(rows: &[Value], pid: u32) -> Option<Value> {
    rows.iter().find(|r| r["pid"] == pid).cloned()
}

#[test]
fn a_launched_program_is_dormant_listed_and_leaves_cupti_to_others() {
    let dir = scratch("agents-dormant");
    // "subscribe": the program subscribes to CUPTI itself once CUDA runs; it exits 21 if the agent held it.
    let (mut child, mut out) = start_server(&dir, &["launch"], &["subscribe"]);
    // `launch` execs the program: its pid is the child's.
    let pid = child.id();
    let row = server_row(&ps(), pid).unwrap_or_else(|| panic!("pid {pid} not in {:?}", ps()));
    assert_eq!(row["state"], "dormant", "{row}");
    assert_eq!(row["cupti_version"], 0, "a dormant agent loads no CUPTI: {row}");
    assert!(row["cuda_driver_version"].as_u64().unwrap() > 0, "{row}");
    assert!(row["command"].as_str().unwrap().contains("server 0 subscribe"), "{row}");
    let table = Command::new(cuflight_bin()).arg("ps").output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.lines().any(|l| l.contains(&pid.to_string()) && l.contains("dormant")), "{table}");
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}{err}");
    // A dormant agent says nothing on the program's output.
    assert!(!err.contains("cuflight"), "{err}");
    assert!(server_row(&ps(), pid).is_none(), "an exited process leaves nothing behind");
}

#[test]
fn a_recorded_program_is_listed_recording() {
    let dir = scratch("agents-recording");
    let trace = dir.join("trace.cuf");
    let (mut child, _out) = start_server(&dir, &["record", "--force", "-o", trace.to_str().unwrap()], &[]);
    let rows = ps();
    let row = rows
        .iter()
        .find(|r| r["command"].as_str().is_some_and(|c| c.contains("agents-recording/server 0")))
        .unwrap_or_else(|| panic!("no server in {rows:?}"));
    assert_eq!(row["state"], "recording", "{row}");
    assert!(row["cupti_version"].as_u64().unwrap() > 0, "{row}");
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert!(count(&stats(&trace), "kernels", "name", "tick") >= 1);
}

#[test]
fn launch_exits_with_the_program_status_and_refuses_a_missing_program() {
    let out = Command::new(cuflight_bin()).args(["launch", "--", "sh", "-c", "exit 7"]).output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    let out = Command::new(cuflight_bin()).args(["launch", "--", "/nonexistent/program"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127), "as a shell says of a command it cannot find");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("cuflight: cannot run '/nonexistent/program'") && err.lines().count() == 1, "{err}");
}

/// A `server cmd` under `cuflight launch`: it obeys lines on stdin.
struct Server {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    stdin: std::process::ChildStdin,
}

impl Server {
    fn start(dir: &std::path::Path) -> Server {
        Server::start_with_cupti(dir, None)
    }

    /// On cudasim modelling CUPTI `version` (its newest without).
    fn start_with_cupti(dir: &std::path::Path, version: Option<&str>) -> Server {
        let prog = build_c("server", dir);
        let mut cmd = Command::new(cuflight_bin());
        cmd.args(["launch", "--"]).arg(&prog).arg("cmd").env("LD_LIBRARY_PATH", cudasim_dir());
        match version {
            Some(v) => cmd.env("CUDASIM_CUPTI_VERSION", v),
            None => cmd.env_remove("CUDASIM_CUPTI_VERSION"),
        };
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("cuflight runs");
        let stdin = child.stdin.take().expect("stdin");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "server: ready");
        Server { child, out, stdin }
    }

    fn cmd(&mut self, line: &str) -> String {
        use std::io::Write;
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut reply = String::new();
        self.out.read_line(&mut reply).unwrap();
        reply.trim().to_string()
    }
}

#[test]
fn attach_windows_hold_exactly_the_work_inside_them_and_leave_the_process_as_before() {
    let dir = scratch("agents-attach");
    let mut server = Server::start(&dir);
    let pid = server.child.id();
    assert_eq!(server.cmd("k 5"), "done 5"); // before any window: not recorded
    for (window, n) in [(1, 7), (2, 11), (3, 2)] {
        let trace = dir.join(format!("window{window}.cuf"));
        let attach = attach_in_background(pid, &trace, &["--duration", "60s"]);
        // While cuflight records, CUPTI (one subscriber below 13.3) is taken.
        assert_eq!(server.cmd("s"), "refused");
        assert_eq!(server.cmd(&format!("k {n}")), format!("done {n}"));
        // Ctrl-C ends the window early; the trace is still written.
        assert!(Command::new("kill").args(["-INT", &attach.id().to_string()]).status().unwrap().success());
        let out = attach.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.contains("interrupted"), "{err}");
        wait_for_agent_state(pid, "dormant");
        // Detached: CUPTI is free for another tool again, and work between windows is not recorded.
        assert_eq!(server.cmd("s"), "subscribed");
        assert_eq!(server.cmd("k 3"), "done 3");
        let s = stats(&trace);
        assert_eq!(count(&s, "kernels", "name", "tick"), n, "window {window}");
        assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), n, "window {window}");
        assert_eq!(s["dropped"], 0);
        assert_eq!(s["processes"][0]["injected_late"], false);
        assert!(s["devices"][0]["name"].as_str().is_some_and(|n| n.contains("H100")), "every window names its devices");
    }
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn attach_refuses_what_it_cannot_record_with_one_line() {
    let dir = scratch("agents-attach-refused");
    // No agent in this process (the test itself).
    let out = Command::new(cuflight_bin())
        .args(["attach", &std::process::id().to_string(), "-o"])
        .arg(dir.join("none.cuf"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("no cuflight agent answers") && err.lines().count() == 1, "{err}");
    assert!(!dir.join("none.cuf").exists(), "nothing left behind");
    // No such process: said so, not that its agent is silent.
    let mut ended = Command::new("true").spawn().unwrap();
    ended.wait().unwrap();
    let out = Command::new(cuflight_bin()).args(["attach", &ended.id().to_string()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("no process {} runs here", ended.id())) && err.lines().count() == 1, "{err}");
    // An agent already recording for `cuflight record` is not taken over.
    let trace = dir.join("trace.cuf");
    let (mut child, _out) = start_server(&dir, &["record", "--force", "-o", trace.to_str().unwrap()], &[]);
    let pid = ps()
        .iter()
        .find(|r| r["command"].as_str().is_some_and(|c| c.contains("agents-attach-refused/server 0")))
        .and_then(|r| r["pid"].as_u64())
        .expect("the recorded server is listed") as u32;
    let out = Command::new(cuflight_bin())
        .args(["attach", &pid.to_string(), "-o"])
        .arg(dir.join("taken.cuf"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("already recording"), "{err}");
    assert!(!dir.join("taken.cuf").exists());
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_killed_attach_collector_leaves_the_agent_dormant_again() {
    let dir = scratch("agents-attach-killed");
    let mut server = Server::start(&dir);
    let pid = server.child.id();
    let trace = dir.join("killed.cuf");
    let mut attach = attach_in_background(pid, &trace, &["--duration", "60s"]);
    assert_eq!(server.cmd("k 4"), "done 4");
    attach.kill().unwrap();
    attach.wait().unwrap();
    // The agent sees its collector's connection close and detaches by itself: CUPTI is free again.
    wait_for_agent_state(pid, "dormant");
    assert_eq!(server.cmd("s"), "subscribed");
    // What reached the file before the kill is readable; a new window works as before.
    let second = dir.join("after.cuf");
    let attach = attach_in_background(pid, &second, &["--duration", "60s"]);
    assert_eq!(server.cmd("k 6"), "done 6");
    assert!(Command::new("kill").args(["-TERM", &attach.id().to_string()]).status().unwrap().success());
    assert!(attach.wait_with_output().unwrap().status.success());
    assert_eq!(count(&stats(&second), "kernels", "name", "tick"), 6);
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn a_window_ends_with_its_process_and_keeps_everything_up_to_the_exit() {
    let dir = scratch("agents-attach-exit");
    let mut server = Server::start(&dir);
    let pid = server.child.id();
    let trace = dir.join("exit.cuf");
    let attach = attach_in_background(pid, &trace, &["--duration", "60s"]);
    assert_eq!(server.cmd("k 9"), "done 9");
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
    let out = attach.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("the process exited"), "{err}");
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 9);
}

#[test]
fn sampling_windows_record_only_inside_each_window() {
    let dir = scratch("agents-sampling");
    // The server launches one kernel every 10 ms until its stdin closes.
    let (mut child, mut out) = start_server(&dir, &["launch"], &[]);
    let pid = child.id();
    let t = std::time::Instant::now();
    let run = Command::new(cuflight_bin())
        .args(["attach", &pid.to_string(), "--duration", "200ms", "--every", "500ms", "--count", "3", "--force", "-o"])
        .arg(dir.join("sample.cuf"))
        .output()
        .unwrap();
    let elapsed = t.elapsed();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(elapsed >= std::time::Duration::from_millis(1200), "three windows 500 ms apart took {elapsed:?}");
    let mut total = 0;
    for n in 1..=3 {
        let s = stats(&dir.join(format!("sample-{n}.cuf")));
        let k = count(&s, "kernels", "name", "tick");
        // 200 ms at one kernel per 10 ms, on a loaded machine.
        assert!((5..=40).contains(&k), "window {n}: {k} kernels\n{err}");
        total += k;
    }
    assert_eq!(server_row(&ps(), pid).map(|r| r["state"].clone()), Some("dormant".into()));
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let launched: u64 = rest.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap();
    // Between windows the agent was dormant: the 300 ms gaps are not in any trace.
    assert!(total * 3 / 2 < launched, "{total} kernels in windows of {launched} launched");
}

#[test]
fn attach_flags_that_contradict_are_refused() {
    for args in [&["--every", "1s"][..], &["--count", "3"], &["--duration", "2s", "--every", "1s", "--count", "2"]] {
        let out = Command::new(cuflight_bin()).args(["attach", "1"]).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(if args.len() == 6 { 1 } else { 2 }), "{args:?}");
    }
}

/// Waits for an attach that ends by itself and checks that it succeeded, saying `why`.
fn ended_by_itself(attach: Child, why: &str) {
    let out = attach.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains(why), "{err}");
}

#[test]
fn windows_bounded_by_steps_profiler_calls_and_nvtx_ranges_hold_exactly_their_work() {
    let dir = scratch("agents-ranges");
    let mut server = Server::start(&dir);
    let pid = server.child.id();

    // Steps 2 and 3 of five (one skipped), three kernels each: six kernels, two step ranges.
    let trace = dir.join("steps.cuf");
    let attach = attach_in_background(pid, &trace, &["--steps", "2", "--skip-steps", "1"]);
    assert_eq!(server.cmd("k 4"), "done 4"); // before the first step: not in the window
    assert_eq!(server.cmd("t 5 3"), "done");
    ended_by_itself(attach, "the range ended");
    wait_for_agent_state(pid, "dormant");
    let s = stats(&trace);
    assert_eq!(count(&s, "kernels", "name", "tick"), 6);
    assert_eq!(count(&s, "nvtx", "name", "step"), 2, "{}", s["nvtx"]);

    // cudaProfilerStart..cudaProfilerStop.
    let trace = dir.join("profiler.cuf");
    let attach = attach_in_background(pid, &trace, &["--capture-range", "cudaProfilerApi"]);
    for (cmd, reply) in [("k 2", "done 2"), ("p", "done"), ("k 5", "done 5"), ("P", "done"), ("k 3", "done 3")] {
        assert_eq!(server.cmd(cmd), reply);
    }
    ended_by_itself(attach, "the range ended");
    wait_for_agent_state(pid, "dormant");
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 5);

    // The first NVTX range named "fwd".
    let trace = dir.join("nvtx.cuf");
    let attach = attach_in_background(pid, &trace, &["--capture-range", "nvtx:fwd"]);
    for (cmd, reply) in [("r bwd 2", "done"), ("r fwd 7", "done"), ("r fwd 1", "done")] {
        assert_eq!(server.cmd(cmd), reply);
    }
    ended_by_itself(attach, "the range ended");
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 7);

    // A range that never comes: the duration bounds the wait, and says so.
    let trace = dir.join("never.cuf");
    let attach = attach_in_background(pid, &trace, &["--capture-range", "nvtx:never", "--duration", "300ms"]);
    assert_eq!(server.cmd("k 2"), "done 2");
    ended_by_itself(attach, "before the range started");
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 0);
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn record_keeps_only_the_steps_or_range_asked_for() {
    let dir = scratch("record-ranges");
    let run = |flags: &[&str], input: &str| -> Value { record_server_cmd(&dir, flags, input).0 };
    // Steps 3 and 4 of six, two kernels each.
    let s = run(&["--steps", "2", "--skip-steps", "2"], "k 3\nt 6 2\nk 5\n");
    assert_eq!(count(&s, "kernels", "name", "tick"), 4);
    assert_eq!(count(&s, "nvtx", "name", "step"), 2);
    let s = run(&["--capture-range", "cudaProfilerApi"], "k 3\np\nk 6\nP\nk 5\n");
    assert_eq!(count(&s, "kernels", "name", "tick"), 6);
    // Without a range, everything (the first kernel of `server cmd` included).
    let s = run(&[], "k 3\np\nk 6\nP\nk 5\n");
    assert_eq!(count(&s, "kernels", "name", "tick"), 15);
}

#[test]
fn the_gpu_attach_check_passes_on_cudasim() {
    // scripts/gpu-validate runs tests/py/attach_check.py against tests/gpu/server.cu on a real GPU; running it
    // here against the cudasim server keeps the script from rotting between GPU sessions.
    let dir = scratch("agents-attach-check");
    let prog = build_c("server", &dir);
    let out = Command::new("python3")
        .arg(repo_root().join("tests/py/attach_check.py"))
        .arg(cuflight_bin())
        .arg(dir.join("out"))
        .arg("20")
        .arg("--")
        .arg(&prog)
        .arg("cmd")
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .env_remove("CUDASIM_CUPTI_VERSION")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn attach_names_the_cupti_client_that_holds_cupti_and_stays_dormant() {
    let dir = scratch("agents-attach-taken");
    let mut server = Server::start(&dir);
    let pid = server.child.id();
    // The program itself holds CUPTI, as torch.profiler or nsys would.
    assert_eq!(server.cmd("S"), "subscribed");
    let trace = dir.join("taken.cuf");
    let out = Command::new(cuflight_bin())
        .args(["attach", &pid.to_string(), "--duration", "1s", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("another CUPTI client") && err.lines().count() == 1, "{err}");
    assert!(!trace.exists());
    assert_eq!(server_row(&ps(), pid).map(|r| r["state"].clone()), Some("dormant".into()));
    // Once the other client lets go, a window works.
    assert_eq!(server.cmd("U"), "done");
    let attach = attach_in_background(pid, &trace, &["--duration", "60s"]);
    assert_eq!(server.cmd("k 3"), "done 3");
    assert!(Command::new("kill").args(["-INT", &attach.id().to_string()]).status().unwrap().success());
    ended_by_itself(attach, "interrupted");
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 3);
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn record_every_takes_sampling_windows_of_the_program_and_exits_with_its_status() {
    let dir = scratch("record-every");
    let prog = build_c("server", &dir);
    let trace = dir.join("sample.cuf");
    // The server launches a kernel every 10 ms for 2.5 s: three windows of 300 ms, one every 700 ms.
    let out = Command::new(cuflight_bin())
        .args(["record", "--every", "700ms", "--count", "3", "--duration", "300ms", "--force", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&prog)
        .arg("2.5")
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .env_remove("CUDASIM_CUPTI_VERSION")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let mut total = 0;
    for n in 1..=3 {
        let window = dir.join(format!("sample-{n}.cuf"));
        assert!(err.contains(&window.display().to_string()), "{err}");
        let kernels = count(&stats(&window), "kernels", "name", "tick");
        // About 30 (one per 10 ms); a loaded machine stretches the server's sleeps, never the window.
        assert!((5..=32).contains(&kernels), "window {n}: {kernels} kernels");
        total += kernels;
    }
    assert!(total < 100, "nothing recorded between windows: {total} of about 250 kernels");
    // The windows reported together are one process's, 400 ms apart: not ranks of a job (they once made a
    // straggler of one window against the others).
    let windows: Vec<_> = (1..=3).map(|n| dir.join(format!("sample-{n}.cuf"))).collect();
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).args(&windows).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let why = r["separate_runs"].as_str().unwrap_or_default();
    assert!(why.contains("are windows of one process (pid"), "{why}: {}", r["job"]);
    assert!(r.get("job").is_none(), "{}", r["job"]);
    // Each finding names its window, which its pid alone cannot (times in it were once taken from the first
    // window's start).
    let findings = r["findings"].as_array().unwrap();
    assert!(!findings.is_empty(), "{r}");
    for f in findings {
        let named = f["trace"].as_str().unwrap_or_default();
        assert!(windows.iter().any(|w| w.to_str() == Some(named)), "{f}");
    }
    // The text sets the windows side by side, in time order, each from its start after the first's.
    let text = Command::new(cuflight_bin()).arg("report").args(&windows).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let table: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("The 3 windows of pid ")).take(6).collect();
    assert_eq!(table.len(), 6, "{text}");
    let at: Vec<f64> = table[3..].iter().map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap()).collect();
    assert!(at[0] == 0.0 && at[0] < at[1] && at[1] < at[2], "{table:?}");
    for (row, w) in table[3..].iter().zip(&windows) {
        assert!(row.trim_start().starts_with(w.to_str().unwrap()), "{table:?}");
    }
    // A program that never uses CUDA: no window, its own status.
    let out = Command::new(cuflight_bin())
        .args(["record", "--every", "1s", "--count", "2", "--force", "-o"])
        .arg(dir.join("none.cuf"))
        .args(["--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("0 of 2 windows recorded (the program ended before it used CUDA)"), "{err}");
}
