//! `cuflight serve` (issue 30): Prometheus metrics of every dormant agent, sampled in windows. Steppers
//! (tests/c/stepper.c on cudasim, the CPU test double: K launches and one synchronisation a ~1 ms step) run under
//! `cuflight launch`; serve is scraped over HTTP twice and the exposition parsed with prometheus_client's parser.

use cuflight_integration::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "serve/cost.rs"]
mod cost;
#[path = "serve/endpoint.rs"]
mod endpoint;
#[path = "serve/flight.rs"]
mod flight;
#[path = "serve/lost.rs"]
mod lost;
#[path = "serve/steps.rs"]
mod steps;

/// Serve follows every agent of this user: the tests take turns, so none sees (or attaches to) another's programs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Stepper {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    started: Instant,
}

fn stepper(dir: &Path, launches_per_step: u32) -> Stepper {
    stepper_with(dir, &[&launches_per_step.to_string()])
}

fn stepper_with(dir: &Path, args: &[&str]) -> Stepper {
    launched_stepper(dir, &[], args)
}

/// A stepper under `cuflight launch FLAGS`.
fn launched_stepper(dir: &Path, flags: &[&str], args: &[&str]) -> Stepper {
    let prog = build_c("stepper", dir);
    let mut child = launch_dormant_with(flags, &prog, args);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("stepper: ready"), "{line}");
    Stepper { child, out, started: Instant::now() }
}

impl Stepper {
    /// Ends it; its steps per second over its life.
    fn end(mut self) -> f64 {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        assert!(self.child.wait().unwrap().success());
        let secs = self.started.elapsed().as_secs_f64();
        let steps =
            rest.trim().lines().last().and_then(|l| l.strip_prefix("stepper: ")).and_then(|r| r.strip_suffix(" steps"));
        let steps: f64 = steps.unwrap_or_else(|| panic!("{rest}")).parse().unwrap();
        steps / secs
    }
}

fn scrape(addr: &str, dir: &Path, n: u32) -> Value {
    scrape_as(addr, dir, n, false)
}

/// GET /metrics, in OpenMetrics when `openmetrics` (as Prometheus asks for it), parsed by the matching parser.
fn scrape_as(addr: &str, dir: &Path, n: u32, openmetrics: bool) -> Value {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let accept = if openmetrics { "Accept: application/openmetrics-text; version=1.0.0\r\n" } else { "" };
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{accept}\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let kind = if openmetrics { "application/openmetrics-text; version=1.0.0" } else { "text/plain; version=0.0.4" };
    assert!(head.contains(kind), "{head}");
    let file = dir.join(format!("scrape-{n}.txt"));
    std::fs::write(&file, body).unwrap();
    let mut args = vec![file.as_os_str()];
    if openmetrics {
        args.push("--openmetrics".as_ref());
    }
    python_json("prom_parse.py", &args)
}

/// The value of `family`'s sample for `pid` (0 when absent).
fn value(m: &Value, family: &str, pid: u32) -> f64 {
    let pid = pid.to_string();
    m[family]["samples"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter(|s| s["labels"]["pid"].as_str() == Some(pid.as_str()))
                .map(|s| s["value"].as_f64().unwrap())
                .sum()
        })
        .unwrap_or(0.0)
}

fn pids(m: &Value) -> Vec<u32> {
    let mut p: Vec<u32> = m["cuflight_agent_state"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["labels"]["pid"].as_str().unwrap().parse().unwrap())
        .collect();
    p.sort();
    p
}

/// Starts `cuflight serve --listen 127.0.0.1:0 ARGS` and returns it with the address it listens on (its first
/// line on stderr). Its stderr is kept open in the returned reader so later lines never block it.
fn start_serve(args: &[&str]) -> (Child, String, BufReader<std::process::ChildStderr>) {
    start_serve_on("127.0.0.1:0", args)
}

/// As [`start_serve`], listening on `listen`.
fn start_serve_on(listen: &str, args: &[&str]) -> (Child, String, BufReader<std::process::ChildStderr>) {
    let mut serve = Command::new(cuflight_bin());
    serve.args(["serve", "--listen", listen]).args(args);
    start_serve_by(serve)
}

/// Starts serve by `command` (which runs it), as [`start_serve`] does.
fn start_serve_by(mut command: Command) -> (Child, String, BufReader<std::process::ChildStderr>) {
    let mut serve = command.stderr(Stdio::piped()).spawn().unwrap();
    let mut err = BufReader::new(serve.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|r| r.split('/').next()).expect(&line).to_string();
    (serve, addr, err)
}

#[test]
fn serve_follows_agents_and_counts_their_work_in_windows() {
    let _serial = serial();
    let dir = scratch("serve");
    let (slow, fast) = (stepper(&dir, 2), stepper(&dir, 8));
    let (mut serve, addr, _err) = start_serve(&["--duty", "300ms/1s"]);
    let served_from = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(3500));
    let first = scrape(&addr, &dir, 1);
    // (Other agents of this user, left by anything else, may be there too: these must.)
    let seen = pids(&first);
    assert!(seen.contains(&slow.child.id()) && seen.contains(&fast.child.id()), "{seen:?}");
    for family in ["cuflight_kernel_launches_total", "cuflight_window_seconds_total", "cuflight_gpu_busy_seconds_total"]
    {
        assert_eq!(first[family.trim_end_matches("_total")]["type"], "counter", "{family}: {first}");
    }
    // One process ends, another starts: the next scrape drops the first and has the second.
    let late = stepper(&dir, 2);
    let fast_pid = fast.child.id();
    let fast_rate = fast.end();
    std::thread::sleep(Duration::from_millis(3500));
    let second = scrape(&addr, &dir, 2);
    let served_for = served_from.elapsed().as_secs_f64();
    let open = scrape_as(&addr, &dir, 3, true);
    // Prometheus' own linter accepts the exposition.
    let local = repo_root().join(".cache/prometheus/usr/bin/promtool");
    let promtool = if local.exists() { local } else { "promtool".into() };
    match Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(dir.join("scrape-2.txt")).unwrap())
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "no promtool ({e}): scripts/setup-tests fetches it");
            skipped(&format!("promtool: {e}"));
        }
    }
    // The Grafana dashboard in docs asks only for metrics serve has.
    let served = std::fs::read_to_string(dir.join("scrape-2.txt")).unwrap();
    let dashboard = std::fs::read_to_string(repo_root().join("docs/grafana/cuflight-dashboard.json")).unwrap();
    for name in dashboard
        .split("cuflight_")
        .skip(1)
        .map(|rest| rest.split(|c: char| !(c.is_ascii_lowercase() || c == '_')).next().unwrap_or_default())
    {
        let name = format!("cuflight_{name}");
        if name != "cuflight_" && !name.starts_with("cuflight_gpu_work") {
            // A histogram's series are its family's name with a suffix.
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|s| name.strip_suffix(s))
                .find(|f| served.contains(&format!("# TYPE {f} histogram")))
                .unwrap_or(&name);
            assert!(served.contains(&format!("# TYPE {family} ")), "the dashboard asks for {name}, not served");
        }
    }
    assert_eq!(open["cuflight_kernel_launches"]["type"], "counter", "{open}");
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    assert!(serve.wait().unwrap().success());
    let slow_pid = slow.child.id();
    let seen = pids(&second);
    assert!(seen.contains(&slow_pid) && seen.contains(&late.child.id()) && !seen.contains(&fast_pid), "{seen:?}");
    // Coverage is the duty cycle: 300 ms a window, one window a second (about 7 s to the second scrape; longer
    // where a loaded machine slowed the scrapes and the programs' start, a window more each second).
    let windows = value(&second, "cuflight_window_seconds", slow_pid);
    let most = 0.3 * (served_for.ceil() + 1.0);
    assert!(
        (1.2..=most).contains(&windows) && (windows / 0.3 - (windows / 0.3).round()).abs() < 0.01,
        "{windows} s of windows in {served_for:.1} s"
    );
    // Launches per covered second against the program's own rate over its whole run (K launches a step). The
    // windows cover a third of the run, and the program's pace drifts with the machine's load (a loaded run
    // counted 3787/s in windows against 3349/s over the run): a fault of counting (a window counted twice, a
    // second lost) is far outside the bound.
    let slow_rate = slow.end();
    let counted = value(&second, "cuflight_kernel_launches", slow_pid) / windows;
    let known = slow_rate * 2.0;
    assert!((counted / known - 1.0).abs() <= 0.25, "counted {counted:.0}/s, the program ran {known:.0}/s");
    let first_fast =
        value(&first, "cuflight_kernel_launches", fast_pid) / value(&first, "cuflight_window_seconds", fast_pid);
    assert!(
        (first_fast / (fast_rate * 8.0) - 1.0).abs() <= 0.25,
        "counted {first_fast:.0}/s, ran {:.0}/s",
        fast_rate * 8.0
    );
    // Every step synchronises: time waited is counted.
    assert!(value(&second, "cuflight_sync_wait_seconds", slow_pid) > 0.0);
    late.end();
}

/// Each window is a CUPTI session, and CUPTI keeps memory of every one (cudasim models the H200's 74 KB): after
/// every --window-budget sessions a process's period doubles, so its windows thin out as they add up.
#[test]
fn windows_thin_out_as_cupti_sessions_add_up() {
    let _serial = serial();
    let dir = scratch("serve-budget");
    let s = stepper(&dir, 2);
    let pid = s.child.id();
    let args = ["--duty", "50ms/200ms", "--window-budget", "2", "--rounds", "11", &pid.to_string()];
    let (mut serve, addr, mut err) = start_serve(&args);
    std::thread::sleep(Duration::from_millis(1300));
    let m = scrape(&addr, &dir, 1);
    let period = value(&m, "cuflight_window_period_seconds", pid);
    assert!([0.2, 0.4, 0.8].iter().any(|p| (p - period).abs() < 1e-9), "{period}");
    assert!(value(&m, "cuflight_agent_cupti_sessions", pid) >= 2.0, "{m}");
    assert!(serve.wait().unwrap().success());
    // Each stretch is said, with what CUPTI keeps by then.
    let mut said = String::new();
    err.read_to_string(&mut said).unwrap();
    assert!(said.contains(&format!("pid {pid} has had 2 CUPTI sessions")) && said.contains("every 0.4 s"), "{said}");
    assert!(said.contains("has had 4 CUPTI sessions") && said.contains("every 0.8 s"), "{said}");
    // 11 periods: windows in periods 0 and 1, then every 2nd (3, 5), then every 4th (9).
    let row = Command::new(cuflight_bin()).args(["ps", "--format", "json"]).output().unwrap();
    let rows: Value = serde_json::from_slice(&row.stdout).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["pid"] == pid).cloned().expect("listed");
    assert_eq!(row["cupti_sessions"], 5, "{row}");
    s.end();
}

#[test]
fn idle_time_is_counted_by_cause() {
    let _serial = serial();
    // scenario item (tests/c/scenario.c): each step's loss read back with a synchronous copy after 3 ms of host
    // work, the GPU idle meanwhile: a planted sync stall, long enough to span several windows.
    let dir = scratch("serve-idle");
    let prog = build_c("scenario", &dir);
    let mut planted = launch_dormant(&prog, &["item", "600"]);
    let pid = planted.id();
    std::thread::sleep(Duration::from_millis(500));
    let (mut serve, addr, _err) = start_serve(&["--duty", "500ms/700ms", "--rounds", "3", &pid.to_string()]);
    std::thread::sleep(Duration::from_millis(1900));
    let m = scrape(&addr, &dir, 1);
    let _ = planted.kill();
    let _ = planted.wait();
    assert!(serve.wait().unwrap().success());
    let causes: Vec<(String, f64)> = m["cuflight_gpu_idle_seconds"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["labels"]["cause"].as_str().unwrap().to_string(), s["value"].as_f64().unwrap()))
        .collect();
    let top = causes.iter().max_by(|a, b| a.1.total_cmp(&b.1)).expect("idle causes");
    assert_eq!(top.0, "sync_stall", "{causes:?}");
}

/// Calls that fail are counted by class and CUDA's name for the code: a loop whose every 10th step asks for more
/// device memory than exists (about one failed allocation per 10 ms).
#[test]
fn failed_calls_are_counted_by_class_and_error() {
    let _serial = serial();
    let dir = scratch("serve-errors");
    let failing = stepper_with(&dir, &["2", "oom"]);
    let pid = failing.child.id();
    let (mut serve, addr, _err) = start_serve(&["--duty", "300ms/400ms", "--rounds", "3", &pid.to_string()]);
    std::thread::sleep(Duration::from_millis(1000));
    let m = scrape(&addr, &dir, 1);
    assert!(serve.wait().unwrap().success());
    failing.end();
    let samples: Vec<&Value> = m["cuflight_cuda_call_errors"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["labels"]["pid"].as_str() == Some(pid.to_string().as_str()))
        .collect();
    assert_eq!(m["cuflight_cuda_call_errors"]["type"], "counter");
    assert!(!samples.is_empty(), "{m}");
    for s in &samples {
        assert_eq!(
            (s["labels"]["class"].as_str(), s["labels"]["error"].as_str()),
            (Some("out_of_memory"), Some("cudaErrorMemoryAllocation"))
        );
    }
    let n: f64 = samples.iter().map(|s| s["value"].as_f64().unwrap()).sum();
    assert!(n >= 5.0, "{n} failed allocations in two 300 ms windows");
}

#[test]
fn serve_clears_the_scratch_that_killed_serves_left() {
    let _serial = serial();
    let dir = scratch("serve-sweep");
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    // What a SIGKILLed serve leaves: its private window directory, a window file inside.
    let stale = dir.join(format!("cuflight-serve-{dead}"));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("window.cuf"), b"partial").unwrap();
    // A running process's (this test's) directory stays; so does whatever a symlink points at.
    let live = dir.join(format!("cuflight-serve-{}", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    let outside = dir.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), b"mine").unwrap();
    let link = dir.join("cuflight-serve-4194305"); // above any pid_max: no such process
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let out = Command::new(cuflight_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--rounds", "1", "--duty", "100ms/200ms"])
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stale.exists(), "the dead serve's directory is still there");
    assert!(live.is_dir() && outside.join("keep").is_file() && link.symlink_metadata().is_ok());
    let own = std::fs::read_dir(&dir).unwrap().flatten().filter(|e| e.file_name() != "outside").count();
    assert_eq!(own, 2, "serve removed its own directory on exit: only the live one and the link remain");
}

#[test]
fn continuous_serve_misses_nothing_after_the_first_arming() {
    let _serial = serial();
    let dir = scratch("serve-continuous");
    // 4 launches a step, and 1 MiB of device memory kept every 100 steps (about 10 MiB/s).
    let stepper = stepper_with(&dir, &["4", "grow"]);
    let pid = stepper.child.id();
    let (mut serve, addr, _err) = start_serve(&["--duty", "continuous", "--interval", "250ms"]);
    std::thread::sleep(Duration::from_millis(2000));
    let first = scrape(&addr, &dir, 0);
    let since = Instant::now();
    std::thread::sleep(Duration::from_millis(4000));
    let second = scrape(&addr, &dir, 1);
    let span = since.elapsed().as_secs_f64();
    // Attached once: the agent records throughout (back-to-back windows would show it dormant between them).
    for m in [&first, &second] {
        let states: Vec<_> = m["cuflight_agent_state"]["samples"].as_array().unwrap().iter().collect();
        assert!(states.iter().any(|s| s["labels"]["state"] == "recording"), "{states:?}");
    }
    let covered = value(&second, "cuflight_window_seconds", pid) - value(&first, "cuflight_window_seconds", pid);
    let launches = value(&second, "cuflight_kernel_launches", pid) - value(&first, "cuflight_kernel_launches", pid);
    // The gauge holds everything allocated since the attach, not one part's allocations: one scrape's value is
    // several parts' worth (a 250 ms part holds about 2 MiB), and it grows as the program allocates (about 10 MiB/s).
    let (mem0, mem1) =
        (value(&first, "cuflight_device_memory_bytes", pid), value(&second, "cuflight_device_memory_bytes", pid));
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    assert!(serve.wait().unwrap().success());
    // Left dormant again by serve's exit.
    let ps = Command::new(cuflight_bin()).arg("ps").output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    let row = ps.lines().find(|l| l.split_whitespace().next() == Some(&pid.to_string())).unwrap_or_default();
    assert!(row.contains("dormant"), "{ps}");
    let rate = stepper.end() * 4.0;
    // Folded every 250 ms: the two scrapes see whole parts, so each figure is within a part of the 4 s between.
    // Launches are held to the program's mean rate over its whole run, which the machine's load moves (a loaded
    // run: 1568/s in these 4 s against 1866/s over the run): the coverage above is what says no part was missed.
    assert!((covered / span - 1.0).abs() <= 0.15, "covered {covered:.2} s of {span:.2} s");
    assert!(
        (launches / (rate * span) - 1.0).abs() <= 0.25,
        "counted {launches} launches in {span:.2} s, the program ran {rate:.0}/s"
    );
    let grown = (mem1 - mem0) / f64::from(1 << 20);
    let expected = rate / 4.0 * span / 100.0; // rate counts launches, 4 a step
    assert!(mem0 >= 4.0 * f64::from(1 << 20), "device memory at the first scrape: {mem0} bytes");
    assert!(
        (grown / expected - 1.0).abs() <= 0.25,
        "device memory grew {grown:.1} MiB, the program kept {expected:.1}"
    );
}

/// An inference server waits for requests most of the time: parts of a continuous recording with no GPU work in
/// them are still covered (the window-seconds counter keeps up with the clock) and are not errors.
#[test]
fn continuous_serve_counts_idle_parts_without_complaint() {
    let _serial = serial();
    let dir = scratch("serve-idle");
    let prog = build_c("server", &dir);
    let mut server = launch_dormant(&prog, &["cmd"]);
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "server: ready");
    let pid = server.id();
    let (mut serve, addr, mut err) = start_serve(&["--duty", "continuous", "--interval", "250ms"]);
    std::thread::sleep(Duration::from_millis(1500));
    let first = scrape(&addr, &dir, 0);
    let since = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let mut stdin = server.stdin.take().unwrap();
    writeln!(stdin, "k 10").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done 10");
    std::thread::sleep(Duration::from_millis(1500));
    let second = scrape(&addr, &dir, 1);
    let span = since.elapsed().as_secs_f64();
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    assert!(serve.wait().unwrap().success());
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    drop(stdin);
    assert!(server.wait().unwrap().success());
    assert!(!rest.contains("unreadable"), "{rest}");
    let covered = value(&second, "cuflight_window_seconds", pid) - value(&first, "cuflight_window_seconds", pid);
    assert!((covered / span - 1.0).abs() <= 0.2, "covered {covered:.2} s of {span:.2} s");
    let launches = value(&second, "cuflight_kernel_launches", pid) - value(&first, "cuflight_kernel_launches", pid);
    assert_eq!(launches, 10.0);
}

/// Root's serve follows every user's agents (issue 30: "root: all users"): a stepper of uid 65534 is attached,
/// its segment handed to root's listener, and its launches counted.
#[test]
fn roots_serve_follows_another_users_agent() {
    let Some(mut owner) = as_other_user(65534) else { return };
    let _serial = serial();
    let dir = scratch("serve-root");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let prog = build_c("stepper", &dir);
    let mut child = owner
        .arg(cuflight_bin())
        .args(["launch", "--"])
        .arg(&prog)
        .arg("4")
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .env_remove("CUDASIM_CUPTI_VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("stepper: ready"), "{line}");
    let (mut serve, addr, _err) = start_serve(&["--duty", "continuous", "--interval", "250ms"]);
    std::thread::sleep(Duration::from_millis(1500));
    let m = scrape(&addr, &dir, 0);
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    assert!(serve.wait().unwrap().success());
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let launches = value(&m, "cuflight_kernel_launches", pid);
    assert!(launches > 100.0, "{launches} launches counted for uid 65534's pid {pid}");
}

/// A program launched with `--gpu-metrics` samples the device counters inside serve's windows: serve exposes them
/// as gauges per device (the last window's means), and none for a program launched without.
#[test]
fn serve_exposes_the_device_counters_of_programs_launched_with_them() {
    let _serial = serial();
    let dir = scratch("serve-counters");
    let counted = launched_stepper(&dir, &["--gpu-metrics=50us"], &["4"]);
    let plain = stepper(&dir, 4);
    let (mut serve, addr, _err) = start_serve(&["--duty", "300ms/1s"]);
    std::thread::sleep(Duration::from_millis(2500));
    let m = scrape(&addr, &dir, 1);
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    assert!(serve.wait().unwrap().success());
    let samples = |family: &str, pid: u32| -> Vec<f64> {
        m[family]["samples"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter(|s| s["labels"]["pid"].as_str() == Some(pid.to_string().as_str()))
                    .map(|s| s["value"].as_f64().unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };
    for family in
        ["cuflight_gpu_sm_active_ratio", "cuflight_gpu_tensor_active_ratio", "cuflight_gpu_dram_throughput_ratio"]
    {
        assert_eq!(m[family]["type"], "gauge", "{family}: {m}");
        let with = samples(family, counted.child.id());
        assert_eq!(with.len(), 1, "{family} of the program launched with --gpu-metrics: {with:?}");
        assert!((0.0..=1.0).contains(&with[0]), "{family}: {with:?}");
        assert!(samples(family, plain.child.id()).is_empty(), "{family} of the program launched without");
    }
    // The stepper's kernels declare no work: SMs only, no Tensor Cores, no DRAM traffic.
    assert_eq!(samples("cuflight_gpu_tensor_active_ratio", counted.child.id()), [0.0]);
    counted.end();
    plain.end();
}

/// Issue 52 item 4: a quiet program with a thread always waiting on a long kernel, under `serve`'s windows: no
/// record is lost, so `cuflight_events_dropped_total` stays 0, and the calls each window began in the middle of are
/// counted apart, at least one a window.
#[test]
fn calls_in_flight_at_arming_are_no_drops() {
    let _serial = serial();
    let dir = scratch("serve-in-flight");
    let stepper = stepper_with(&dir, &["3", "blocks", "0.2"]);
    let pid = stepper.child.id();
    let (mut serve, addr, _err) = start_serve(&["--duty", "300ms/500ms", "--rounds", "5", &pid.to_string()]);
    std::thread::sleep(Duration::from_millis(2200));
    let m = scrape(&addr, &dir, 1);
    assert!(serve.wait().unwrap().success());
    stepper.end();
    let windows = value(&m, "cuflight_window_seconds", pid) / 0.3;
    assert!(windows >= 2.0, "{windows} windows folded");
    assert_eq!(value(&m, "cuflight_events_dropped", pid), 0.0, "{}", m["cuflight_events_dropped"]);
    let in_flight = value(&m, "cuflight_calls_in_flight_at_arming", pid);
    assert!(in_flight >= windows.floor(), "{in_flight} calls in flight over {windows} windows");
    // What the recording cost, by where it is measured, and its share of the last window.
    let sources: Vec<&str> = m["cuflight_agent_overhead_seconds"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["labels"]["source"].as_str().unwrap())
        .collect();
    let sources_expected = ["cupti", "ring_wait", "python_stacks", "launch_tracing", "graph_node_tracing"];
    assert_eq!(sources, sources_expected, "{}", m["cuflight_agent_overhead_seconds"]);
    let ratio = value(&m, "cuflight_agent_overhead_ratio", pid);
    assert!((0.0..1.0).contains(&ratio), "{ratio}");
}

#[test]
fn each_window_is_logged_when_asked() {
    let _serial = serial();
    let dir = scratch("serve-log-windows");
    let stepper = stepper(&dir, 3);
    let pid = stepper.child.id();
    let (mut serve, _addr, mut err) =
        start_serve(&["--duty", "200ms/400ms", "--rounds", "3", "--log-windows", &pid.to_string()]);
    assert!(serve.wait().unwrap().success());
    stepper.end();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let lines: Vec<&str> = rest.lines().filter(|l| l.contains(&format!("pid {pid} period"))).collect();
    assert_eq!(lines.len(), 3, "{rest}");
    // Asked for once a period, each armed, over after its 200 ms, with its events and drops.
    let asked: Vec<f64> = lines
        .iter()
        .map(|l| l.split("(unix ").nth(1).and_then(|r| r.split(')').next()).unwrap().parse().unwrap())
        .collect();
    for (i, l) in lines.iter().enumerate() {
        assert!(l.contains(&format!("period {} window", i + 1)), "{l}");
        assert!(l.contains("armed in ") && l.contains("(the duration passed)") && l.contains("nothing lost"), "{l}");
        let over: f64 = l.split("over after ").nth(1).and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
        assert!((0.2..2.0).contains(&over), "{l}");
    }
    for pair in asked.windows(2) {
        assert!((0.35..1.5).contains(&(pair[1] - pair[0])), "{asked:?}");
    }
    let refused =
        Command::new(cuflight_bin()).args(["serve", "--duty", "continuous", "--log-windows"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("continuous records without any"));
}
