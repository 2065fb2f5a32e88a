//! Loading the cuflight agent into a process that was started without it (`cuflight attach --inject PID`).
//!
//! How (the technique debuggers and Meta's wprof use; this code is our own): find the target's libc in
//! `/proc/PID/maps` and `dlopen` in its dynamic symbols (glibc 2.34+ exports `dlopen` from libc; older ones have
//! `__libc_dlopen_mode`); ptrace one of its threads that is blocked in a system call (so it holds no lock of the
//! allocator or the loader that `dlopen` needs), make it call `dlopen(agent, RTLD_NOW)` with a return address of
//! 0, catch the fault that return raises, and put back every register and byte touched before detaching. The
//! agent's constructor sees it was loaded late and goes dormant with its control socket up, ready for `attach`.
//!
//! Guarantees and their limits:
//! - Every wait has a time limit; SIGINT, SIGTERM, SIGHUP and SIGQUIT are held off while the thread runs our call.
//! - A ptrace refusal is one line naming the cause and the remedy.
//! - Killed with SIGKILL between redirecting the thread and restoring it (the few milliseconds `dlopen` takes),
//!   the injector leaves the thread to return to address 0, which kills the program: nothing can catch SIGKILL.
//! - x86-64 is tested; the aarch64 register handling follows the kernel's regsets and is untested.

mod elf;
mod remote;

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
}

/// Loads `library` (an absolute path, as the target sees its file system) into process `pid`.
pub fn inject(pid: u32, library: &Path, timeout: Duration) -> Result<(), InjectError> {
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
    let dlopen = remote::find_dlopen(pid)?;
    remote::call_dlopen(pid, &dlopen, library, timeout)
}

/// Whether `library` is mapped into process `pid` already.
pub fn loaded(pid: u32, library: &Path) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.lines().any(|l| l.split_whitespace().nth(5) == Some(&*library.to_string_lossy())))
}
