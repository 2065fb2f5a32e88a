//! The flight recorder (`cuflight launch --flight-recorder`) and `cuflight dump`, on cudasim (the CPU test double
//! for the driver, runtime and CUPTI): dumps on demand, on a crash, on SIGUSR2 and on a hang; images read back.

use cuflight_integration::*;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn dump(target: &str, out: &Path, extra: &[&str]) -> Output {
    Command::new(cuflight_bin()).arg("dump").arg(target).arg("-o").arg(out).arg("--force").args(extra).output().unwrap()
}

fn dumped(target: &str, out: &Path, extra: &[&str]) -> String {
    let o = dump(target, out, extra);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    err
}

/// The images in `dir`, waiting up to 10 s for `n` of them.
fn images(dir: &Path, n: usize) -> Vec<PathBuf> {
    let t = Instant::now();
    loop {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "seg"))
            .collect();
        found.sort();
        if found.len() >= n || t.elapsed() > Duration::from_secs(10) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn launches(trace: &Path) -> u64 {
    count(&stats(trace), "api", "name", "cudaLaunchKernel")
}

#[test]
fn a_dump_on_demand_holds_the_last_seconds_and_the_program_records_on() {
    let dir = scratch("flight-on-demand");
    let mut server = Server::start(&dir, &["--flight-recorder", "60s", "--dump-dir", dir.to_str().unwrap()], &[]);
    let pid = server.pid().to_string();
    assert_eq!(server.cmd("k 5"), "done 5");
    let all = dir.join("all.cuf");
    let err = dumped(&pid, &all, &[]);
    assert!(err.contains("dumped: on demand"), "{err}");
    // The kernel before "ready" and the five since; the agent flushed CUPTI first, so the kernels are there too.
    let s = stats(&all);
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 6);
    assert_eq!(count(&s, "kernels", "name", "tick"), 6);
    assert!(s["devices"][0]["name"].as_str().is_some_and(|n| n.contains("H100")), "{s}");
    // Only the last second: what ran two seconds ago is left out.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(server.cmd("k 3"), "done 3");
    let last = dir.join("last.cuf");
    dumped(&pid, &last, &["--last", "1s"]);
    assert_eq!(launches(&last), 3);
    assert_eq!(count(&stats(&last), "kernels", "name", "tick"), 3);
    // A dump takes nothing away: the next one still has everything.
    dumped(&pid, &all, &[]);
    assert_eq!(launches(&all), 9);
    // It is listed as a flight recorder and cannot be attached to.
    let ps = Command::new(cuflight_bin()).arg("ps").output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(ps.lines().any(|l| l.contains(&pid) && l.contains("flight recorder")), "{ps}");
    let attach = Command::new(cuflight_bin()).args(["attach", &pid, "-o"]).arg(dir.join("a.cuf")).output().unwrap();
    let err = String::from_utf8_lossy(&attach.stderr);
    assert!(!attach.status.success() && err.contains("flight recorder") && err.lines().count() == 1, "{err}");
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
    assert!(images(&dir, 0).is_empty(), "no automatic dump without a reason");
}

#[test]
fn full_rings_keep_their_newest_events_and_drop_nothing() {
    let dir = scratch("flight-overwrite");
    let mut server = Server::start(&dir, &["--flight-recorder", "60s"], &[("CUFLIGHT_RING_EVENTS", "256")]);
    assert_eq!(server.cmd("k 2000"), "done 2000");
    assert_eq!(server.cmd("r last 7"), "done");
    let trace = dir.join("t.cuf");
    let err = dumped(&server.pid().to_string(), &trace, &[]);
    assert!(err.contains("busy rings wrapped"), "{err}");
    let s = stats(&trace);
    let launches = count(&s, "api", "name", "cudaLaunchKernel");
    assert!((100..=256).contains(&launches), "a ring of 256 keeps at most 256 events: {launches}");
    assert_eq!(s["dropped"], 0, "overwriting is not dropping");
    assert_eq!(count(&s, "nvtx", "name", "last"), 1, "the newest events are the ones kept");
    assert!(server.end().0.success());
}

#[test]
fn a_crash_leaves_an_image_and_the_program_dies_of_its_own_signal() {
    // "o": a stack overflow, whose handler runs on the alternate stack the agent gave the thread that started CUDA.
    for (command, signal, name) in
        [("x", libc::SIGSEGV, "SIGSEGV"), ("a", libc::SIGABRT, "SIGABRT"), ("o", libc::SIGSEGV, "SIGSEGV")]
    {
        let dir = scratch(&format!("flight-crash-{command}"));
        let mut server = Server::start(&dir, &["--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap()], &[]);
        assert_eq!(server.cmd("k 4"), "done 4");
        server.send(command);
        let (status, err) = server.end();
        assert_eq!(status.signal(), Some(signal), "the exit status stays the program's: {status:?}");
        let found = images(&dir, 1);
        assert_eq!(found.len(), 1, "{found:?}");
        let image = found[0].to_str().unwrap();
        assert!(err.contains("flight recorder dump written to") && err.contains(image), "{err}");
        let trace = dir.join("crash.cuf");
        let said = dumped(image, &trace, &[]);
        assert!(said.contains(&format!("fatal signal {name}")), "{said}");
        // Host events reach the rings directly: every launch is there. Device records still in CUPTI's buffers
        // (up to one flush period) cannot be flushed from a signal handler, and that is said.
        assert_eq!(launches(&trace), 5);
        assert!(count(&stats(&trace), "kernels", "name", "tick") <= 5);
        assert!(said.contains("could not flush CUPTI"), "{said}");
        // Every command reads the image itself as that trace, and says what it is.
        assert_eq!(launches(&found[0]), 5);
        let out = Command::new(cuflight_bin()).args(["stats", image]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let says = format!("{image}: a flight recorder's dump (fatal signal {name})");
        assert!(out.status.success() && err.contains(&says), "{err}");
        // Its kernels were still in CUPTI's buffers: the report says so, not that nothing ran on the GPU.
        let out = Command::new(cuflight_bin()).args(["report", image]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("its process ended before CUPTI delivered them"), "{err}");
    }
}

#[test]
fn the_programs_own_crash_handler_still_runs_after_the_dump() {
    let dir = scratch("flight-own-handler");
    let mut server = Server::start(
        &dir,
        &["--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap()],
        &[("SERVER_OWN_SEGV_HANDLER", "1")],
    );
    assert_eq!(server.cmd("k 2"), "done 2");
    server.send("x");
    let (status, err) = server.end();
    assert_eq!(status.code(), Some(42), "the program's handler decided how it ends: {status:?} {err}");
    let dump_at = err.find("flight recorder dump written").expect("dumped");
    assert!(err.find("server: own handler").is_some_and(|h| h > dump_at), "dump first, then the handler: {err}");
    assert_eq!(images(&dir, 1).len(), 1);
}

#[test]
fn a_sticky_cuda_error_dumps_once() {
    let dir = scratch("flight-sticky");
    let mut server = Server::start(&dir, &["--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap()], &[]);
    assert_eq!(server.cmd("k 3"), "done 3");
    // cudasim's stand-in for a kernel reading an illegal address: every later call fails with 700.
    assert_eq!(server.cmd("e"), "error 700 700");
    let found = images(&dir, 1);
    assert_eq!(found.len(), 1);
    let trace = dir.join("sticky.cuf");
    assert!(dumped(found[0].to_str().unwrap(), &trace, &[]).contains("dumped: a sticky CUDA error"));
    let s = stats(&trace);
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 5, "the faulting launch is in it");
    assert_eq!(count(&s, "kernels", "name", "faulty"), 1);
    // The dump's report leads with the fault and names the kernel launched last before it.
    let r = report_json(&trace);
    assert!(r["verdict"].as_str().unwrap().starts_with("The run failed: a device fault"), "{}", r["verdict"]);
    assert!(r["processes"][0]["warnings"][0].as_str().unwrap().contains("kernel faulty"), "{}", r["processes"][0]);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(images(&dir, 0).len(), 1, "one dump: every later call fails the same way");
    assert!(server.end().0.success());
}

#[test]
fn a_flight_recorder_asked_for_api_records_keeps_its_callbacks() {
    // Its watches (sticky errors, hangs, slow steps) are callbacks: `api-records` is not taken, and the trace says so.
    let dir = scratch("flight-api-records");
    let d = dir.to_str().unwrap();
    let launch = ["--flight-recorder", "30s", "--dump-dir", d, "--trace", "cuda,nvtx,api-records"];
    let mut server = Server::start(&dir, &launch, &[]);
    assert_eq!(server.cmd("k 3"), "done 3");
    assert_eq!(server.cmd("e"), "error 700 700");
    let found = images(&dir, 1);
    assert_eq!(found.len(), 1, "the sticky error was watched");
    let trace = dir.join("t.cuf");
    dumped(found[0].to_str().unwrap(), &trace, &[]);
    let s = stats(&trace);
    assert_eq!(s["processes"][0]["traced"], "cuda,nvtx");
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 5);
    assert!(server.end().0.success());
}

#[test]
fn sigusr2_and_a_hang_each_dump_and_the_program_goes_on() {
    let dir = scratch("flight-usr2-hang");
    let mut server = Server::start(
        &dir,
        &["--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap(), "--hang-timeout", "1s"],
        &[],
    );
    assert_eq!(server.cmd("k 2"), "done 2");
    assert!(Command::new("kill").args(["-USR2", &server.pid().to_string()]).status().unwrap().success());
    let first = images(&dir, 1);
    assert_eq!(first.len(), 1);
    assert_eq!(server.cmd("k 1"), "done 1", "SIGUSR2 did not disturb the program");
    let usr2 = dir.join("usr2.cuf");
    let said = dumped(first[0].to_str().unwrap(), &usr2, &[]);
    // The control thread flushed CUPTI before writing the image: nothing is said to be missing.
    assert!(said.contains("dumped: SIGUSR2") && !said.contains("could not flush"), "{said}");
    // Flushed by the control thread before writing: kernels are complete.
    assert_eq!(count(&stats(&usr2), "kernels", "name", "tick"), 3);
    // A kernel that takes 3 s while the host waits for it: dumped once, after the 1 s timeout.
    assert_eq!(server.cmd("h 3"), "done");
    let both = images(&dir, 2);
    assert_eq!(both.len(), 2, "{both:?}");
    let hang = dir.join("hang.cuf");
    let said = dumped(both.iter().find(|p| **p != first[0]).unwrap().to_str().unwrap(), &hang, &[]);
    assert!(said.contains("dumped: a hang"), "{said}");
    assert_eq!(count(&stats(&hang), "api", "name", "cudaDeviceSynchronize"), 3, "the hung wait is not in it yet");
    assert_eq!(server.cmd("k 1"), "done 1");
    std::thread::sleep(Duration::from_millis(600));
    assert!(server.end().0.success());
    assert_eq!(images(&dir, 0).len(), 2, "one dump per hang, none for the quick waits after it");
}

/// A dump directory on a file system without hard links (some FUSE and object-store mounts; here a seccomp filter,
/// tests/c/no_link.c, has link(2) fail with EPERM): the dump is renamed into place instead, never over a file of
/// the same name (the names it would take first are there already: it takes the next), and no partial file is left.
#[test]
fn a_dump_directory_without_hard_links_gets_its_dump_by_rename() {
    let dir = scratch("flight-no-link");
    let no_link = build_c_linked("no_link", &dir, false);
    let probe = Command::new(&no_link).arg("true").status().unwrap();
    if probe.code() == Some(125) {
        skipped("no seccomp filter could be installed here (tests/c/no_link.c)");
        return;
    }
    assert!(probe.success(), "{probe:?}");
    let server = build_c("server", &dir);
    let mut cmd = Command::new(cuflight_bin());
    cmd.args(["launch", "--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap(), "--"]);
    cmd.arg(&no_link).arg(&server).arg("cmd");
    let mut server = Server::spawn(cmd, &[]);
    assert_eq!(server.cmd("k 2"), "done 2");
    // The first name of each second about now is taken by another file.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let taken: Vec<PathBuf> =
        (now - 1..now + 20).map(|s| dir.join(format!("cuflight-{}-{s}-0.seg", server.pid()))).collect();
    for t in &taken {
        std::fs::write(t, b"not a dump").unwrap();
    }
    assert!(Command::new("kill").args(["-USR2", &server.pid().to_string()]).status().unwrap().success());
    let found = images(&dir, taken.len() + 1);
    let placed: Vec<&PathBuf> = found.iter().filter(|p| !taken.contains(p)).collect();
    assert_eq!(placed.len(), 1, "{found:?}");
    assert!(placed[0].to_str().unwrap().ends_with("-1.seg"), "the next name: {placed:?}");
    assert_eq!(server.cmd("k 1"), "done 1", "the program goes on");
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
    assert!(err.contains("flight recorder dump written to") && err.contains(placed[0].to_str().unwrap()), "{err}");
    for t in &taken {
        assert_eq!(std::fs::read(t).unwrap(), b"not a dump", "{} replaced", t.display());
    }
    let partial: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".partial"))
        .collect();
    assert!(partial.is_empty(), "{partial:?}");
    let trace = dir.join("renamed.cuf");
    assert!(dumped(placed[0].to_str().unwrap(), &trace, &[]).contains("dumped: SIGUSR2"));
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 3);
}

/// Dumps fill no disk: one that would take the dump directory's dumps past --dump-max-use, or leave its file
/// system less than --dump-keep-free, is not written and says why (the program goes on); `launch` says so before
/// the program starts where no dump could be written; within both limits, dumps are written as before.
#[test]
fn a_dump_that_would_fill_the_disk_is_not_written() {
    let dir = scratch("flight-disk");
    let d = dir.to_str().unwrap();
    let old = dir.join("cuflight-1-1-0.seg");
    std::fs::write(&old, vec![1u8; 3 << 20]).unwrap(); // an earlier dump of 3 MiB
                                                       // Partial dumps: one a killed process left (no such pid runs), one of a process still writing it (this one).
    let stale = dir.join(".cuflight-4000000-1-0.seg.partial");
    let live = dir.join(format!(".cuflight-{}-1-0.seg.partial", std::process::id()));
    for p in [&stale, &live] {
        std::fs::write(p, b"part").unwrap();
    }
    for (limit, value, said) in [
        ("--dump-max-use", "2M", "the dumps there take 3 MiB"),
        ("--dump-keep-free", "1000000T", "less than the"),
        ("--dump-max-use", "1G", ""),
    ] {
        let mut server = Server::start(&dir, &["--flight-recorder", "30s", "--dump-dir", d, limit, value], &[]);
        assert!(!stale.exists() && live.exists(), "launch sweeps only what dead processes left");
        assert_eq!(server.cmd("k 2"), "done 2");
        assert!(Command::new("kill").args(["-USR2", &server.pid().to_string()]).status().unwrap().success());
        let written = said.is_empty();
        // The control thread looks five times a second, and the program must not exit while it writes.
        std::thread::sleep(Duration::from_millis(1000));
        let found = images(&dir, 2);
        assert_eq!(server.cmd("k 1"), "done 1", "the program goes on");
        let (status, err) = server.end();
        assert!(status.success(), "{err}");
        if written {
            assert_eq!(found.len(), 2, "{found:?} {err}");
            assert!(err.contains("flight recorder dump written to") && !err.contains("warning"), "{err}");
            continue;
        }
        assert_eq!(found, std::slice::from_ref(&old), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.contains(said)).collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(lines[0].starts_with(&format!("cuflight: warning: --dump-dir {d}: automatic dumps will not be")));
        assert!(lines[1].starts_with(&format!("cuflight: flight recorder dump not written into {d}: ")));
        assert!(lines[1].contains(limit), "{err}");
    }
    std::fs::remove_file(&live).unwrap();
    // Written under a hidden name and linked into place whole: nothing half-written is left, visible or not.
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.starts_with('.') || n.ends_with(".partial")), "{names:?}");
}

/// `n` NVTX steps "step" of about `ms` each, held open by the test (a step's time is the test's, not the machine's:
/// on a loaded machine a step of a few microseconds may take milliseconds, and ten such would look slow).
fn steps(server: &mut Server, n: usize, ms: u64) {
    for _ in 0..n {
        assert_eq!(server.cmd("u step 1"), "done");
        std::thread::sleep(Duration::from_millis(ms));
        assert_eq!(server.cmd("q"), "done");
    }
}

/// `--dump-on-slow-step 8`: 20 steps of 20 ms, then one of 400 ms: dumped once, with the line that says why; the
/// steps after it and a second slow one within the span are not dumped again.
#[test]
fn a_slow_step_dumps_once_with_what_led_to_it() {
    let dir = scratch("flight-slow-step");
    let flags = ["--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap(), "--dump-on-slow-step", "8x"];
    let mut server = Server::start(&dir, &flags, &[]);
    steps(&mut server, 20, 20);
    assert!(images(&dir, 0).is_empty(), "steps of their usual time are not slow");
    steps(&mut server, 1, 400);
    let found = images(&dir, 1);
    assert_eq!(found.len(), 1, "{found:?}");
    steps(&mut server, 5, 20);
    steps(&mut server, 1, 400);
    std::thread::sleep(Duration::from_millis(600));
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
    assert!(
        err.contains("a step took ") && err.contains("the typical") && err.contains("(--dump-on-slow-step)"),
        "{err}"
    );
    assert_eq!(images(&dir, 0).len(), 1, "one slow-step dump per recorder span");
    let trace = dir.join("slow.cuf");
    let said = dumped(found[0].to_str().unwrap(), &trace, &[]);
    assert!(said.contains("dumped: a slow step") && !said.contains("could not flush"), "{said}");
    // The usual steps and the slow one, which the report names; flushed, the snapshot did not end abruptly.
    let report = report_json(&trace);
    assert_eq!(report["processes"][0]["run"]["finished"], true, "{}", report["processes"][0]["run"]);
    let steps = report["processes"][0]["steps"].as_array().unwrap();
    let slowest = steps.iter().map(|s| s["duration_ns"].as_u64().unwrap()).max().unwrap();
    assert!(slowest >= 400_000_000, "slowest {slowest} ns");
    // Every step since the start (the report leaves out a warm-up, as long as a loaded machine makes it).
    assert_eq!(count(&stats(&trace), "nvtx", "name", "step"), 21);
    // A factor that is no factor is refused before anything runs.
    let refused = Command::new(cuflight_bin())
        .args(["launch", "--flight-recorder", "30s", "--dump-on-slow-step", "1", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("1.1 to 1000 times"), "{err}");
}

/// A slow step that has run half the recorder's span (2 s) is dumped while it lasts, before the rings overwrite how
/// it began; its end, long after, asks for nothing more.
#[test]
fn a_step_stalled_for_half_the_span_dumps_while_it_lasts() {
    let dir = scratch("flight-stalled-step");
    let flags = ["--flight-recorder", "2s", "--dump-dir", dir.to_str().unwrap(), "--dump-on-slow-step", "8"];
    let mut server = Server::start(&dir, &flags, &[]);
    steps(&mut server, 20, 20);
    assert_eq!(server.cmd("u step 1"), "done");
    let found = images(&dir, 1);
    assert_eq!(found.len(), 1, "dumped while the step ran: {found:?}");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(server.cmd("q"), "done");
    std::thread::sleep(Duration::from_millis(600));
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
    assert!(err.contains("a step has run for ") && err.matches("dumping the flight recorder").count() == 1, "{err}");
    assert_eq!(images(&dir, 0).len(), 1, "the stalled step's end asked for nothing more");
}

/// A slow step like one already dumped (an evaluation every N steps, named as a step) is dumped once, even past the
/// span; a slowdown of another size is dumped again.
#[test]
fn a_periodic_slow_step_is_dumped_once() {
    let dir = scratch("flight-periodic-step");
    let flags = ["--flight-recorder", "2s", "--dump-dir", dir.to_str().unwrap(), "--dump-on-slow-step", "8"];
    let mut server = Server::start(&dir, &flags, &[]);
    let evaluation = |server: &mut Server, ms: u64| {
        steps(server, 20, 20);
        steps(server, 1, ms);
        // Past the span: only the likeness holds a second dump back.
        std::thread::sleep(Duration::from_millis(2200));
    };
    evaluation(&mut server, 300);
    assert_eq!(images(&dir, 1).len(), 1);
    evaluation(&mut server, 300);
    assert_eq!(images(&dir, 0).len(), 1, "as slow as the one dumped: known");
    evaluation(&mut server, 800);
    assert_eq!(images(&dir, 2).len(), 2, "more than twice as slow: dumped");
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
}

/// A server with a thread per GPU: a side thread runs steps of 5 ms back to back, always one open, while the main
/// thread runs steps of 60 ms. Each thread's steps are watched, against its own: the main thread's usual steps are
/// not slow beside the side thread's (12 times as long), and its slow step is dumped, measured against its own.
#[test]
fn each_thread_steps_against_its_own() {
    let dir = scratch("flight-thread-steps");
    let flags = ["--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap(), "--dump-on-slow-step", "6"];
    let mut server = Server::start(&dir, &flags, &[]);
    assert_eq!(server.cmd("b 5"), "done");
    steps(&mut server, 20, 60);
    std::thread::sleep(Duration::from_millis(400));
    assert!(images(&dir, 0).is_empty(), "a thread's usual steps are not slow beside another's shorter ones");
    steps(&mut server, 1, 800);
    let found = images(&dir, 1);
    assert_eq!(found.len(), 1, "the main thread's slow step, though the side thread always had one open");
    let side = server.cmd("B");
    let side_steps: u64 = side.strip_prefix("done ").and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(side_steps >= 100, "{side}");
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
    let typical_ms: f64 = err
        .split("the typical ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no slow-step line: {err}"));
    assert!(typical_ms >= 40.0, "measured against the main thread's own steps, not the side thread's: {err}");
}

/// A slow last step: the program exits as soon as it ends, before the control thread looks (five times a second).
/// The dump is written at exit, whole: not left half-written, nor never asked for.
#[test]
fn a_slow_last_step_is_dumped_at_exit() {
    let dir = scratch("flight-slow-last-step");
    let flags = ["--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap(), "--dump-on-slow-step", "8"];
    let mut server = Server::start(&dir, &flags, &[]);
    steps(&mut server, 20, 20);
    steps(&mut server, 1, 400);
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
    assert!(err.contains("a step took ") && err.contains("flight recorder dump written to"), "{err}");
    let found = images(&dir, 1);
    assert_eq!(found.len(), 1, "{err}");
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.ends_with(".partial")), "{names:?}");
    let trace = dir.join("last.cuf");
    dumped(found[0].to_str().unwrap(), &trace, &[]);
    let report = report_json(&trace);
    let steps = report["processes"][0]["steps"].as_array().unwrap();
    let slowest = steps.iter().map(|s| s["duration_ns"].as_u64().unwrap()).max().unwrap();
    assert!(slowest >= 400_000_000, "the slow step is in the dump: slowest {slowest} ns");
}

/// A stall that holds every thread's step (a thread per GPU waiting in one collective) is dumped once while it
/// lasts: the other thread's step, running then too, asks for nothing more, while it lasts or at its end.
#[test]
fn a_stall_of_every_thread_dumps_once() {
    let dir = scratch("flight-thread-stall");
    let flags = ["--flight-recorder", "2s", "--dump-dir", dir.to_str().unwrap(), "--dump-on-slow-step", "8"];
    let mut server = Server::start(&dir, &flags, &[]);
    assert_eq!(server.cmd("b 20"), "done");
    steps(&mut server, 20, 20);
    // Both stall: one step of the side thread's sleeps 3.5 s (those after it 20 ms again), the main thread's
    // stays open 4 s.
    assert_eq!(server.cmd("b 3500"), "done");
    assert_eq!(server.cmd("u step 1"), "done");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.cmd("b 20"), "done");
    assert_eq!(images(&dir, 1).len(), 1, "dumped while the steps ran");
    std::thread::sleep(Duration::from_millis(3700));
    assert_eq!(server.cmd("q"), "done");
    assert!(server.cmd("B").starts_with("done "));
    std::thread::sleep(Duration::from_millis(600));
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
    assert_eq!(err.matches("dumping the flight recorder").count(), 1, "{err}");
    assert_eq!(images(&dir, 0).len(), 1, "one stall, one dump: {err}");
}

#[test]
fn hostile_or_mistaken_images_get_one_line() {
    let dir = scratch("flight-bad-images");
    let garbage = dir.join("garbage.seg");
    std::fs::write(&garbage, vec![0x5au8; 9000]).unwrap();
    let link = dir.join("link.seg");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&garbage, &link).unwrap();
    for (target, expect) in [
        (garbage.clone(), "not a flight recorder image"),
        (link.clone(), "symbolic link"),
        (dir.join("missing.seg"), "No such file"),
    ] {
        let out = dump(target.to_str().unwrap(), &dir.join("out.cuf"), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(expect) && err.lines().count() == 1, "{err}");
    }
    assert!(!dir.join("out.cuf").exists(), "nothing left behind");
    let out = dump(garbage.to_str().unwrap(), &garbage, &[]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&garbage).unwrap().len(), 9000, "the output never replaces the image");
    // A dump directory no file can be created in is refused before the program runs, not at its crash.
    let out = Command::new(cuflight_bin())
        .args(["launch", "--flight-recorder", "10s", "--dump-dir", "/proc", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("cannot create files there") && err.lines().count() == 1,
        "{err}"
    );
    // No agent, or an agent that is not a flight recorder.
    let out = dump(&std::process::id().to_string(), &dir.join("none.cuf"), &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cuflight agent answers"));
}
