//! The self-restoring call: the thread runs a short stub that calls `dlopen`, then puts back every register
//! itself and goes on where it was. Nothing in the call depends on the injector after the registers are set:
//! SIGKILL the helper at any moment and the thread still finishes the call and resumes its program, which the
//! return-to-address-0 method cannot promise. How the registers come back is each architecture's: x86-64 loads
//! them from a context and jumps (`x86_64`); aarch64 has no register left to jump through and has the kernel
//! restore them from a signal frame with `rt_sigreturn` (`aarch64`).
//!
//! Where it lives: the bytes past the end of libc's last executable segment, in the same page. The kernel maps
//! them executable with that page, and no section owns them, so nothing else reads or runs them. The thread's
//! saved state and the path go on its stack, below its stack pointer (and x86-64's red zone).
//!
//! The injector follows the call with PTRACE_SYSCALL and reads dlopen's result at the stub's marker (a `getpid`
//! right after the call), while the thread still sits in the stub: once it moves on, its own calls reuse the
//! stack below its stack pointer, context included (a busy thread did within the 5 ms between two looks, and
//! the result read was garbage). Untraced, that `getpid` costs a system call and changes nothing.

use crate::ptrace::{regs, FpState, Stop};
use crate::InjectError;
use std::ffi::CStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(target_arch = "aarch64")]
use aarch64 as arch;
#[cfg(target_arch = "x86_64")]
use x86_64 as arch;

/// Code gap needed.
pub const LEN: u64 = arch::LEN;

/// The stub with what it reads, ready to go: its code, its context (at `base` on the thread's stack), where it
/// leaves dlopen's result, and the registers that start it.
pub struct Prepared {
    pub code: Vec<u8>,
    pub ctx: Vec<u8>,
    pub base: u64,
    pub result_at: u64,
    pub regs: regs::Regs,
}

/// What the stub needs from the caller: the stopped thread, its saved state, the call.
pub struct Call<'a> {
    pub pid: u32,
    pub tid: u32,
    pub saved: &'a regs::Regs,
    pub fp: &'a FpState,
    pub mem: &'a File,
    pub gap: u64,
    pub dlopen: u64,
    pub mode: u64,
    pub path: &'a CStr,
    /// A signal that was on its way when the thread stopped: delivered when it is let go.
    pub pending: i32,
    pub deadline: Instant,
    pub timeout: Duration,
}

/// Runs the call through the stub; Some(dlopen's result). The thread is let go (detached) in every outcome.
pub fn call(c: &Call) -> Result<u64, InjectError> {
    let (pid, tid) = (c.pid, c.tid);
    let target = |why: &str| InjectError::Target { pid, why: why.into() };
    let detach = |sig: i32| {
        // SAFETY: detaching our (stopped) tracee, delivering `sig` (0: none).
        unsafe { libc::ptrace(libc::PTRACE_DETACH, tid as i32, 0, sig as usize) };
    };
    let mut original = vec![0u8; LEN as usize];
    if c.mem.read_exact_at(&mut original, c.gap).is_err() {
        detach(c.pending);
        return Err(target("cannot read libc's code page"));
    }
    let stub = arch::prepare(c.saved, c.fp, c.gap, c.dlopen, c.mode, c.path);
    let written = c.mem.write_all_at(&stub.code, c.gap).is_ok() && c.mem.write_all_at(&stub.ctx, stub.base).is_ok();
    crate::step("written");
    if !written || !regs::set(tid, &stub.regs) {
        let _ = c.mem.write_all_at(&original, c.gap);
        detach(c.pending);
        return Err(target("cannot prepare the call (libc's code page or the thread's stack is not writable)"));
    }
    // A restart the kernel still holds for the interrupted call would rewind into the stub: cancelled, the stub
    // resumes the call itself.
    #[cfg(target_arch = "aarch64")]
    regs::no_restart(tid);
    crate::step("registers set");
    // From here the thread finishes on its own, whatever becomes of this process. It is traced from system
    // call to system call until it reaches the marker, where its result is read with its context intact.
    resume(tid, libc::PTRACE_SYSCALL, 0);
    let mut pending = c.pending;
    let result = loop {
        match crate::ptrace::wait_stop(tid, (Instant::now() + Duration::from_millis(5)).min(c.deadline)) {
            Stop::Exited => return Err(target("exited during the call")),
            Stop::TimedOut if Instant::now() >= c.deadline => {
                // Let it go mid-call: the stub finishes and resumes the thread by itself (its bytes stay).
                let sig = stop_now(tid);
                detach(sig);
                return Err(InjectError::Stuck { pid, secs: c.timeout.as_secs() });
            }
            Stop::TimedOut => {}
            Stop::Syscall => {
                let at = regs::get(tid).map(|r| regs::pc(&r));
                if at == Some(c.gap + arch::MARKER) {
                    let mut result = [0u8; 8];
                    let read = c.mem.read_exact_at(&mut result, stub.result_at).is_ok();
                    resume(tid, libc::PTRACE_CONT, 0);
                    break read.then(|| u64::from_le_bytes(result));
                }
                resume(tid, libc::PTRACE_SYSCALL, 0);
            }
            Stop::Signal(libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE) => {
                // A fault inside the call (a bad library, a loader in trouble): nothing sane to return to but the
                // state saved before it; the fault is not the program's.
                let back = regs::set(tid, c.saved) && c.fp.restore(tid);
                detach(pending);
                let _ = c.mem.write_all_at(&original, c.gap);
                return Err(target(if back {
                    "faulted inside dlopen; its thread was put back"
                } else {
                    "faulted inside dlopen, and its thread could not be put back"
                }));
            }
            // The program's own signal: its handler runs on top of the call.
            Stop::Signal(sig) => resume(tid, libc::PTRACE_SYSCALL, sig),
            Stop::Event => resume(tid, libc::PTRACE_SYSCALL, 0),
        }
    };
    // Let it restore its registers, then let it go once it is past the stub (whose bytes are then put back).
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut past = false;
    while Instant::now() < deadline {
        let sig = stop_now(tid);
        if sig < 0 {
            return Err(target("exited during the call"));
        }
        pending = if sig > 0 { sig } else { pending };
        if outside_stub(tid, c.gap) {
            past = true;
            detach(pending);
            break;
        }
        resume(tid, libc::PTRACE_CONT, std::mem::take(&mut pending));
        std::thread::sleep(Duration::from_millis(1));
    }
    if !past {
        let sig = stop_now(tid);
        detach(sig.max(0));
    }
    crate::step("returned");
    if past {
        let _ = c.mem.write_all_at(&original, c.gap);
    }
    result.ok_or_else(|| target("cannot read dlopen's result"))
}

fn resume(tid: u32, request: libc::c_uint, sig: i32) {
    // SAFETY: resuming our stopped tracee with PTRACE_CONT or PTRACE_SYSCALL, delivering `sig` (0: none).
    unsafe { libc::ptrace(request, tid as i32, 0, sig as usize) };
}

/// Stops the running tracee (PTRACE_INTERRUPT, bounded wait): the signal it stopped with, 0 for none, -1 when
/// it is gone.
fn stop_now(tid: u32) -> i32 {
    // SAFETY: PTRACE_INTERRUPT of our tracee.
    unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid as i32, 0, 0) };
    loop {
        match crate::ptrace::wait_stop(tid, Instant::now() + Duration::from_secs(1)) {
            Stop::Event | Stop::TimedOut => return 0,
            Stop::Signal(s) => return s,
            // A system-call stop left over from the tracing above: go on to the interrupt.
            Stop::Syscall => resume(tid, libc::PTRACE_CONT, 0),
            Stop::Exited => return -1,
        }
    }
}

fn outside_stub(tid: u32, gap: u64) -> bool {
    regs::get(tid).is_some_and(|r| !(gap..gap + arch::INSTRUCTIONS as u64).contains(&regs::pc(&r)))
}
