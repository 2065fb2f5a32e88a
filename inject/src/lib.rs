//! Loading the cuflight agent into a process that was started without it (`cuflight attach --inject PID`).
//!
//! How (the technique debuggers and Meta's wprof use; this code is our own): find the target's libc in
//! `/proc/PID/maps` and `dlopen` in its dynamic symbols (glibc 2.34+ exports `dlopen` from libc; older ones have
//! `__libc_dlopen_mode`); ptrace one of its threads that is blocked in a system call (so it holds no lock of the
//! allocator or the loader that `dlopen` needs) and make it call `dlopen(agent, RTLD_NOW)`. The call goes through
//! a stub written past the end of libc's code (see `stub`): it calls dlopen, puts every register back (x86-64
//! itself, aarch64 through `rt_sigreturn`) and resumes the interrupted system call as the kernel would. Where libc
//! leaves no room after its code, the call returns to address 0, the fault is caught, and the registers are put
//! back through ptrace. The agent's constructor sees it was loaded late and goes dormant with its control socket up.
//!
//! Guarantees and their limits:
//! - The ptrace work runs in a helper process of its own session with every catchable signal blocked: killing
//!   `cuflight` (Ctrl-C, `kill -9`, a closed terminal) at any moment leaves the helper to finish.
//! - With the stub, a SIGKILL aimed at the helper itself at any step leaves the program running too: before the
//!   call the kernel lets the thread go untouched, and once the registers are set the thread needs no one. On
//!   the fallback path a SIGKILL of the helper while `dlopen` runs (milliseconds) kills the program.
//! - Every wait has a time limit; a dlopen that takes longer is left to finish (with the stub, safely). A ptrace
//!   refusal is one line naming the cause and the remedy.
//! - Tested on x86-64, and on aarch64 in an emulated arm64 machine with SVE and pointer authentication
//!   (scripts/aarch64-vm): the same tests, SIGKILL of the helper at each step included.

mod elf;
mod ptrace;
mod remote;
mod stub;

use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("process {0} does not exist")]
    NoProcess(u32),
    #[error("process {pid} belongs to user {uid}; only its owner (or root) may attach to it")]
    Stranger { pid: u32, uid: u32 },
    #[error("cannot ptrace process {pid}: {why}")]
    Ptrace { pid: u32, why: String },
    #[error("process {pid}: {why}")]
    Target { pid: u32, why: String },
    #[error("process {pid}: every thread is busy running code (none waits in a system call, where loading a library is safe); try again in a moment")]
    NoQuietThread { pid: u32 },
    #[error("process {pid} could not load {library} (its dlopen returned NULL: is the file readable by that process, inside its container, and built for its architecture?)")]
    DlopenFailed { pid: u32, library: String },
    #[error("process {pid}: its thread did not return from dlopen within {secs} s; it was left running the call")]
    Stuck { pid: u32, secs: u64 },
    /// What the helper process reported (one of the above, as text).
    #[error("{0}")]
    Helper(String),
}

/// Loads `library` (an absolute path, as the target sees its file system) into process `pid`.
pub fn inject(pid: u32, library: &Path, timeout: Duration) -> Result<(), InjectError> {
    check(pid)?;
    let dlopen = remote::find_dlopen(pid)?;
    in_helper(|| remote::call_dlopen(pid, &dlopen, library, timeout))
}

/// The process exists and this user may inject into it (its owner, or root).
pub fn check(pid: u32) -> Result<(), InjectError> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let status = std::fs::read_to_string(proc.join("status")).map_err(|_| InjectError::NoProcess(pid))?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
        .ok_or_else(|| InjectError::Target { pid, why: "unreadable /proc status".into() })?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if uid != me && me != 0 {
        return Err(InjectError::Stranger { pid, uid });
    }
    Ok(())
}

/// Runs `work` in a forked helper process that outlives this one (its own session, catchable signals blocked)
/// and returns what it reported.
fn in_helper(work: impl FnOnce() -> Result<(), InjectError>) -> Result<(), InjectError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(InjectError::Helper(format!("pipe: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: fork; the child only runs `work` (system calls and allocations, which glibc keeps usable after
    // fork) and leaves with _exit.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(InjectError::Helper(format!("fork: {}", std::io::Error::last_os_error())));
    }
    if child == 0 {
        // In the child: a new session (no terminal signals), every catchable signal blocked, then the work, its
        // report on the pipe, and _exit (no exit handlers of the parent's run here).
        // SAFETY: the child's copy of the read end, unused here.
        unsafe { libc::close(fds[0]) };
        // SAFETY: setsid has no memory preconditions.
        unsafe { libc::setsid() };
        // SAFETY: an all-zero sigset_t is a valid value, filled next.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: on a local sigset_t.
        unsafe { libc::sigfillset(&mut all) };
        // SAFETY: this thread's mask, from a valid set.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut()) };
        let report = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
            Ok(Ok(())) => "ok".to_string(),
            Ok(Err(e)) => format!("error:{e}"),
            Err(_) => "error:the injection helper failed unexpectedly".to_string(),
        };
        // SAFETY: write of the report's bytes to our pipe end.
        unsafe { libc::write(fds[1], report.as_ptr() as *const libc::c_void, report.len()) };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut report = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        // SAFETY: read into our buffer from our pipe end.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n > 0 && report.len() < 1 << 16 {
            report.extend_from_slice(&buf[..n as usize]);
        } else if n == 0 || (n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)) {
            break;
        }
    }
    // SAFETY: closing our pipe end.
    unsafe { libc::close(fds[0]) };
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    let report = String::from_utf8_lossy(&report).into_owned();
    match report.strip_prefix("error:") {
        _ if report == "ok" => Ok(()),
        Some(why) => Err(InjectError::Helper(why.to_string())),
        None => Err(InjectError::Helper("the injection helper ended without a report (killed?)".into())),
    }
}

/// A step of the injection, for tests that kill the helper at each one: with `CUFLIGHT_INJECT_PAUSE_MS=N` the
/// helper says `cuflight-inject: helper PID at STEP` on stderr and waits N ms. (A plain write: the helper is a
/// fork of a possibly threaded process, where stderr's lock may be held by a thread that is not there.)
pub(crate) fn step(name: &str) {
    static PAUSE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let Some(ms) = *PAUSE.get_or_init(|| std::env::var("CUFLIGHT_INJECT_PAUSE_MS").ok()?.parse().ok()) else {
        return;
    };
    // SAFETY: getpid has no preconditions.
    let line = format!("cuflight-inject: helper {} at {name}\n", unsafe { libc::getpid() });
    // SAFETY: writing our buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
    std::thread::sleep(Duration::from_millis(ms));
}

/// Whether `library` is mapped into process `pid` already.
pub fn loaded(pid: u32, library: &Path) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.lines().any(|l| l.split_whitespace().nth(5) == Some(&*library.to_string_lossy())))
}
