//! `cuflight top` (issue 30) driven in tmux at 80x24, as over ssh: it shows a dormant stepper (tests/c/stepper.c
//! on cudasim, the CPU test double) with its launch rate, kernel categories and failed calls (every 10th step asks
//! for more memory than exists), and quits cleanly on `q`.

use cuflight_integration::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// tmux on a server of these tests' own: its socket in the build's scratch directory, so the tests neither add
/// sessions to the user's own tmux server nor leave /tmp/tmux-UID behind (a socket path over the 108 bytes a Unix
/// socket allows, in a clone at a long path, falls back to a named server of this test binary's).
fn tmux_command() -> Command {
    let socket = profile_dir().join("test-scratch/tmux.sock");
    let _ = std::fs::create_dir_all(profile_dir().join("test-scratch"));
    let mut cmd = Command::new("tmux");
    if socket.as_os_str().len() < 100 {
        cmd.arg("-S").arg(socket);
    } else {
        cmd.args(["-L", &format!("cuflight-tests-{}", std::process::id())]);
    }
    cmd
}

fn tmux(args: &[&str]) -> String {
    let out = tmux_command().args(args).output().expect("tmux runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether tmux is here (CI must have it); says the test skipped otherwise.
fn have_tmux() -> bool {
    if Command::new("tmux").arg("-V").output().is_ok() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "tmux is missing (scripts/setup-tests installs it)");
    skipped("no tmux");
    false
}

/// tests/c/stepper.c built into `dir` and started with a dormant agent, once it said it is ready.
fn dormant_stepper(dir: &std::path::Path, args: &[&str]) -> std::process::Child {
    let prog = build_c("stepper", dir);
    let mut stepper = launch_dormant(&prog, args);
    let mut line = String::new();
    BufReader::new(stepper.stdout.take().unwrap()).read_line(&mut line).unwrap();
    stepper
}

/// A detached 80x24 session `name` of the tests' tmux server running `cmd`.
fn tmux_session(name: &str, cmd: &str) {
    tmux(&["new-session", "-d", "-s", name, "-x", "80", "-y", "24", cmd]);
}

#[test]
fn top_shows_live_rates_and_quits_on_q() {
    if !have_tmux() {
        return;
    }
    let dir = scratch("top");
    let mut stepper = dormant_stepper(&dir, &["4", "oom"]);
    let pid = stepper.id();
    let session = format!("cuflight-top-{}", std::process::id());
    let done = dir.join("top-exited");
    let cmd = format!("{} top --duty 500ms/1s {pid}; echo $? > {}", cuflight_bin().display(), done.display());
    tmux_session(&session, &cmd);
    // Wait for a row with a launch rate (windows of 500 ms, a refresh a second).
    let started = Instant::now();
    let (mut screen, mut live) = (String::new(), false);
    while !live && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(500));
        screen = tmux(&["capture-pane", "-p", "-t", &session]);
        let row = screen.lines().find(|l| l.trim_start().starts_with(&pid.to_string()));
        // PID, GPU, BUSY, LAUNCH/S, ...
        live = row.is_some_and(|r| {
            r.split_whitespace().nth(3).and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v > 100.0)
        }) && screen.contains("kernel time (GPU-s/s): other")
            && screen.contains("failed CUDA calls: cudaErrorMemoryAllocation x")
            && screen.contains("CUPTI sessions: ");
    }
    assert!(live, "no live row for pid {pid}:\n{screen}");
    assert!(screen.lines().count() <= 24 && screen.lines().all(|l| l.chars().count() <= 80), "{screen}");
    assert!(screen.contains("./stepper 4") || screen.contains("stepper 4"), "{screen}");
    assert!(screen.contains("kernel time (GPU-s/s): other"), "{screen}");
    // Each window is a CUPTI session (memory CUPTI keeps): counted, with the time between windows.
    assert!(screen.contains("a window every 1.0 s"), "{screen}");
    // What the windows cost the program's threads: its 4 launches a step traced, at least.
    let cost = screen.split("; cost ").nth(1).and_then(|r| r.split('%').next()).and_then(|v| v.parse::<f64>().ok());
    assert!(cost.is_some_and(|c| (0.0..100.0).contains(&c)), "{screen}");
    tmux(&["send-keys", "-t", &session, "q"]);
    let quit = Instant::now();
    while !done.exists() && quit.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = tmux_command().args(["kill-session", "-t", &session]).output();
    drop(stepper.stdin.take());
    let _ = stepper.wait();
    assert_eq!(std::fs::read_to_string(&done).expect("top quit on q").trim(), "0");
}

#[test]
fn top_shows_what_went_wrong_below_its_table_and_lists_it_when_it_ends() {
    // Windows that cannot be written (here a file size limit, as a full temporary directory does): what the
    // sampler says must not land over the table (it once scrolled the table off the screen), and must not be
    // lost either.
    if !have_tmux() {
        return;
    }
    let dir = scratch("top-notices");
    let mut stepper = dormant_stepper(&dir, &["4"]);
    let session = format!("cuflight-top-notices-{}", std::process::id());
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let done = dir.join("top-exited");
    // The shell ignores SIGXFSZ, so that the write fails with EFBIG instead of killing top; the pane stays.
    let cmd = format!(
        "trap '' XFSZ; ulimit -f 1; TMPDIR={} {} top --duty 500ms/1s {}; echo $? > {}; sleep 60",
        tmp.display(),
        cuflight_bin().display(),
        stepper.id(),
        done.display()
    );
    tmux_session(&session, &cmd);
    let started = Instant::now();
    let mut screen = String::new();
    // The windows lost are counted on the process's lines, whose counts keep up though no window folds.
    let lost = |screen: &str| {
        screen.lines().find_map(|l| l.strip_prefix("windows lost: ")?.split(' ').next()?.parse::<u32>().ok())
    };
    let ready = |screen: &str| {
        screen.starts_with("cuflight top: 1 process(es)")
            && screen.lines().any(|l| l.starts_with("cuflight: cannot write"))
            && lost(screen).is_some_and(|n| n >= 2)
    };
    while !ready(&screen) && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(300));
        screen = tmux(&["capture-pane", "-p", "-t", &session]);
    }
    let lines: Vec<&str> = screen.lines().collect();
    let header_kept = lines.first().is_some_and(|l| l.starts_with("cuflight top: 1 process(es)"))
        && lines.get(2).is_some_and(|l| l.starts_with("PID"));
    // Said once a minute (each window fails alike): one so far.
    let said = lines.iter().position(|l| l.starts_with("cuflight: cannot write"));
    let keys = lines.iter().position(|l| l.starts_with("↑/↓ pick"));
    tmux(&["send-keys", "-t", &session, "q"]);
    let quit = Instant::now();
    while !done.exists() && quit.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = tmux(&["capture-pane", "-p", "-J", "-t", &session]);
    let _ = tmux_command().args(["kill-session", "-t", &session]).output();
    drop(stepper.stdin.take());
    let _ = stepper.wait();
    assert!(header_kept && screen.lines().count() <= 24, "the table was written over:\n{screen}");
    assert!(lost(&screen).is_some_and(|n| n >= 2), "windows lost not counted:\n{screen}");
    assert!(said.is_some_and(|s| keys.is_some_and(|k| s < k && k - s <= 2)), "no notice above the keys:\n{screen}");
    assert_eq!(std::fs::read_to_string(&done).ok().as_deref().map(str::trim), Some("0"), "{after}");
    let listed = after.split("cuflight top: while it ran:").nth(1).unwrap_or("");
    assert!(listed.contains("File too large") && listed.contains("the file ends there"), "not listed:\n{after}");
}

#[test]
fn top_ends_cleanly_when_its_terminal_goes() {
    // ssh dropped or the tmux pane killed: SIGHUP. top must end (a top left running keeps a core busy and attaches
    // to every agent) and leave nothing behind (its scratch directory of windows).
    if !have_tmux() {
        return;
    }
    let dir = scratch("top-hup");
    let mut stepper = dormant_stepper(&dir, &["4"]);
    let session = format!("cuflight-top-hup-{}", std::process::id());
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // exec: the pane's process is top itself.
    let cmd =
        format!("TMPDIR={} exec {} top --duty 500ms/1s {}", tmp.display(), cuflight_bin().display(), stepper.id());
    tmux_session(&session, &cmd);
    let top: u32 = tmux(&["display-message", "-p", "-t", &session, "#{pane_pid}"]).trim().parse().unwrap();
    // cuflight_capture::private_dir's name: cuflight-serve-PID-NS.
    let scratch_dirs = || -> Vec<std::path::PathBuf> {
        let prefix = format!("cuflight-serve-{top}-");
        let entries = std::fs::read_dir(&tmp).into_iter().flatten().flatten();
        entries.filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).map(|e| e.path()).collect()
    };
    let started = Instant::now();
    while !tmux(&["capture-pane", "-p", "-t", &session]).contains("CUPTI sessions: ")
        && started.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    // Judged after the session is gone: a failed check must not leave top running (a leftover found after a
    // failed rehearsal, still attached to its stepper).
    let running = scratch_dirs();
    let seen_running = running.len() == 1 && running[0].is_dir();
    tmux(&["kill-session", "-t", &session]);
    let hup = Instant::now();
    let alive = || std::path::Path::new(&format!("/proc/{top}")).exists();
    while alive() && hup.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let still = alive();
    if still {
        let _ = Command::new("kill").args(["-9", &top.to_string()]).status();
    }
    drop(stepper.stdin.take());
    let _ = stepper.wait();
    assert!(seen_running, "top's scratch directory in {} while it ran: {running:?}", tmp.display());
    assert!(!still, "top still ran 10 s after its terminal went");
    let left: Vec<_> = scratch_dirs()
        .into_iter()
        .map(|d| {
            let inside =
                std::fs::read_dir(&d).into_iter().flatten().flatten().map(|e| e.file_name()).collect::<Vec<_>>();
            format!("{} holding {inside:?}", d.display())
        })
        .collect();
    assert!(left.is_empty(), "top left {left:?} behind");
}

#[test]
fn top_without_a_terminal_says_so() {
    let out = Command::new(cuflight_bin()).arg("top").stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("top needs a terminal") && err.lines().count() == 1, "{err}");
}
