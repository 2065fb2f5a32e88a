//! Windows serve wanted but could not fold are counted by why (`cuflight_windows_total{outcome}`), and a write
//! error stops only the file it hit: a full temporary directory (here serve's file size limit, lowered and raised
//! again while it runs) costs the parts written meanwhile, not the rest of the run.

use super::*;

/// Sets `pid`'s file size limit (RLIMIT_FSIZE) to `bytes` (None: unlimited), as a filling and emptied disk would.
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let soft = bytes.unwrap_or(libc::RLIM_INFINITY);
    let limit = libc::rlimit { rlim_cur: soft, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: `limit` is a valid rlimit that outlives the call; a null old-limit pointer is allowed.
    let rc = unsafe { libc::prlimit(pid as libc::pid_t, libc::RLIMIT_FSIZE, &limit, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

fn outcome(m: &Value, pid: u32, outcome: &str) -> f64 {
    let pid = pid.to_string();
    m["cuflight_windows"]["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["labels"]["pid"].as_str() == Some(&pid) && s["labels"]["outcome"].as_str() == Some(outcome))
        .map(|s| s["value"].as_f64().unwrap())
        .sum()
}

/// Starts `cuflight serve ARGS` from `sh`, SIGXFSZ ignored (kept across exec) so that a write past the file size
/// limit fails with EFBIG instead of killing serve, after `setup` (shell commands); returns it, its address and the
/// rest of its stderr.
fn serve_from_shell(setup: &str, args: &str) -> (Child, String, BufReader<std::process::ChildStderr>) {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(format!("trap '' XFSZ; {setup} exec \"$0\" serve --listen 127.0.0.1:0 {args}"))
        .arg(cuflight_bin());
    start_serve_by(sh)
}

#[test]
fn windows_that_cannot_be_written_are_counted_and_cover_no_time() {
    let _serial = serial();
    let dir = scratch("serve-unwritten");
    let stepper = stepper(&dir, 4);
    let pid = stepper.child.id();
    let (mut serve, addr, mut err) = serve_from_shell("ulimit -f 1;", "--duty 500ms/1s");
    std::thread::sleep(Duration::from_millis(3500));
    let m = scrape(&addr, &dir, 0);
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    assert!(serve.wait().unwrap().success());
    let mut said = String::new();
    err.read_to_string(&mut said).unwrap();
    stepper.end();
    assert!(outcome(&m, pid, "unwritten") >= 2.0, "{m}\n{said}");
    assert_eq!(outcome(&m, pid, "folded"), 0.0, "{said}");
    assert_eq!(value(&m, "cuflight_window_seconds", pid), 0.0);
    assert_eq!(value(&m, "cuflight_kernel_launches", pid), 0.0);
    assert_eq!(said.matches("cannot write").count(), 1, "{said}");
}

#[test]
fn continuous_serve_counts_the_parts_it_could_not_write_and_goes_on_once_it_can() {
    let _serial = serial();
    let dir = scratch("serve-lost");
    let stepper = stepper(&dir, 4);
    let pid = stepper.child.id();
    let (mut serve, addr, mut err) = serve_from_shell("", "--duty continuous --interval 1s");
    std::thread::sleep(Duration::from_millis(2500));
    let before = scrape(&addr, &dir, 0);
    limit_file_size(serve.id(), Some(1024));
    std::thread::sleep(Duration::from_millis(4000));
    let full = scrape(&addr, &dir, 1);
    limit_file_size(serve.id(), None);
    std::thread::sleep(Duration::from_millis(4000));
    let after = scrape(&addr, &dir, 2);
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    assert!(serve.wait().unwrap().success());
    let mut said = String::new();
    err.read_to_string(&mut said).unwrap();
    stepper.end();
    let folded = [&before, &full, &after].map(|m| outcome(m, pid, "folded"));
    let unwritten = [&before, &full, &after].map(|m| outcome(m, pid, "unwritten"));
    let covered = [&before, &full, &after].map(|m| value(m, "cuflight_window_seconds", pid));
    // Parts of a second (long enough that blocks are written, and fail, inside a part): about 2 before, 4 while
    // full (the first may have been cut before the limit), 4 after.
    assert!(folded[0] >= 1.0 && unwritten[0] == 0.0, "before: folded {folded:?}, unwritten {unwritten:?}");
    assert!(unwritten[1] >= 2.0, "while full: unwritten {unwritten:?}, folded {folded:?}");
    assert!(folded[1] - folded[0] <= 1.0, "while full: folded {folded:?}");
    // Resumed in the same attach: parts fold again, and at most the part cut when the limit rose is lost.
    assert!(folded[2] - folded[1] >= 2.0, "after: folded {folded:?}, unwritten {unwritten:?}: {said}");
    assert!(unwritten[2] - unwritten[1] <= 1.0, "after: unwritten {unwritten:?}");
    // Lost parts cover no time: the counters' time fell behind the clock while the disk was full.
    assert!(covered[1] - covered[0] <= 1.5, "covered {covered:?} s");
    assert!(covered[2] - covered[1] >= 2.0, "covered {covered:?} s");
    for m in [&before, &full, &after] {
        assert_eq!(outcome(m, pid, "not_recorded") + outcome(m, pid, "unreadable"), 0.0, "{said}");
    }
    // One attach all along (each would add a CUPTI session to the program), and the error said once a minute.
    assert_eq!(value(&after, "cuflight_agent_cupti_sessions", pid), 1.0, "{said}");
    assert_eq!(said.matches("cannot write").count(), 1, "{said}");
    assert!(!said.contains("unreadable") && !said.contains("cannot follow"), "{said}");
}
