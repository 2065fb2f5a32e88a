//! One stopped thread of a traced process: waiting for its next stop, reading and writing its registers and its
//! floating-point state. What `remote` (calling dlopen) and `stub` (running code in a gap) both stand on.

use std::time::{Duration, Instant};

/// A stop of the traced thread, or why there was none.
pub(crate) enum Stop {
    /// Stopped by our PTRACE_INTERRUPT (or a group stop).
    Event,
    /// A system-call stop (PTRACE_SYSCALL, reported as SIGTRAP | 0x80 under PTRACE_O_TRACESYSGOOD).
    Syscall,
    /// Stopped on its way to receiving `sig`.
    Signal(i32),
    Exited,
    TimedOut,
}

pub(crate) fn wait_stop(tid: u32, deadline: Instant) -> Stop {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our tracee with a valid status pointer; WNOHANG keeps every wait bounded.
        let r = unsafe { libc::waitpid(tid as i32, &mut status, libc::__WALL | libc::WNOHANG) };
        if r < 0 {
            return Stop::Exited;
        }
        if r == 0 {
            if Instant::now() >= deadline {
                return Stop::TimedOut;
            }
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Stop::Exited;
        }
        if libc::WIFSTOPPED(status) {
            let sig = libc::WSTOPSIG(status);
            // PTRACE_EVENT_STOP (interrupt or group stop) shows as event 128 in the high bits.
            if status >> 16 == libc::PTRACE_EVENT_STOP {
                return Stop::Event;
            }
            if sig == libc::SIGTRAP | 0x80 {
                return Stop::Syscall;
            }
            return Stop::Signal(sig);
        }
    }
}

/// The thread's registers, and how a call is set up in them.
#[cfg(target_arch = "x86_64")]
pub(crate) mod regs {
    pub type Regs = libc::user_regs_struct;

    pub fn get(tid: u32) -> Option<Regs> {
        // SAFETY: an all-zero user_regs_struct is a valid value of the plain C struct.
        let mut r: Regs = unsafe { std::mem::zeroed() };
        // SAFETY: PTRACE_GETREGS into a user_regs_struct of the right size for this architecture.
        (unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid as i32, 0, &mut r as *mut Regs) } == 0).then_some(r)
    }
    pub fn set(tid: u32, r: &Regs) -> bool {
        // SAFETY: PTRACE_SETREGS from a user_regs_struct read from the same thread.
        unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid as i32, 0, r as *const Regs) == 0 }
    }
    /// Blocked in a system call (the kernel keeps its number in orig_rax; -1 otherwise).
    pub fn in_syscall(r: &Regs) -> bool {
        r.orig_rax as i64 >= 0
    }
    pub fn sp(r: &Regs) -> u64 {
        r.rsp
    }
    pub fn pc(r: &Regs) -> u64 {
        r.rip
    }
    /// Calls `func(a0, a1)` returning to `ret_sp`'s word (0 written there by the caller); no syscall restart.
    pub fn call(saved: &Regs, func: u64, a0: u64, a1: u64, ret_sp: u64) -> Regs {
        let mut r = *saved;
        r.rip = func;
        r.rdi = a0;
        r.rsi = a1;
        r.rax = 0;
        r.rsp = ret_sp;
        r.orig_rax = u64::MAX;
        r
    }
    /// The call returned (to address 0) and what it returned.
    pub fn returned(r: &Regs) -> Option<u64> {
        (r.rip == 0).then_some(r.rax)
    }
    /// x86-64 pushes the return address: the stack holds it.
    pub const RETURN_ON_STACK: bool = true;
    /// Bytes below the stack pointer that leaf functions may use without moving it.
    pub const RED_ZONE: u64 = 128;
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod regs {
    pub type Regs = libc::user_regs_struct;
    const NT_PRSTATUS: libc::c_int = 1;
    const NT_ARM_SYSTEM_CALL: libc::c_int = 0x404;

    fn regset<T>(req: libc::c_uint, tid: u32, kind: libc::c_int, v: *mut T) -> bool {
        let mut iov = libc::iovec { iov_base: v as *mut libc::c_void, iov_len: std::mem::size_of::<T>() };
        // SAFETY: PTRACE_GET/SETREGSET with an iovec over a value of the regset's size.
        unsafe { libc::ptrace(req, tid as i32, kind as usize, &mut iov as *mut libc::iovec) == 0 }
    }
    pub fn get(tid: u32) -> Option<Regs> {
        // SAFETY: plain data; zeroed is valid.
        let mut r: Regs = unsafe { std::mem::zeroed() };
        regset(libc::PTRACE_GETREGSET, tid, NT_PRSTATUS, &mut r).then_some(r)
    }
    pub fn set(tid: u32, r: &Regs) -> bool {
        let mut copy = *r;
        regset(libc::PTRACE_SETREGSET, tid, NT_PRSTATUS, &mut copy)
    }
    pub fn in_syscall(_r: &Regs) -> bool {
        true // checked through /proc/PID/task/TID/syscall before the interrupt
    }
    pub fn sp(r: &Regs) -> u64 {
        r.sp
    }
    pub fn pc(r: &Regs) -> u64 {
        r.pc
    }
    pub fn call(saved: &Regs, func: u64, a0: u64, a1: u64, ret_sp: u64) -> Regs {
        let mut r = *saved;
        r.pc = func;
        r.regs[0] = a0;
        r.regs[1] = a1;
        r.regs[30] = 0; // the link register: return to 0
        r.sp = ret_sp;
        r
    }
    /// Cancels a pending syscall restart on the thread (the kernel's NT_ARM_SYSTEM_CALL regset, set to -1).
    pub fn no_restart(tid: u32) {
        let mut nr: i32 = -1;
        regset(libc::PTRACE_SETREGSET, tid, NT_ARM_SYSTEM_CALL, &mut nr);
    }
    pub fn returned(r: &Regs) -> Option<u64> {
        (r.pc == 0).then_some(r.regs[0])
    }
    pub const RETURN_ON_STACK: bool = false;
    pub const RED_ZONE: u64 = 0;
}

/// The thread's floating-point and vector registers (x87/SSE/AVX state on x86-64, FP/SIMD on aarch64), which
/// `dlopen` clobbers and the integer register set does not hold: (regset kind, bytes the kernel gave).
pub(crate) struct FpState(pub libc::c_int, pub Vec<u8>);

impl FpState {
    pub(crate) fn save(tid: u32) -> Option<FpState> {
        // x86-64: the XSAVE area (NT_X86_XSTATE, from linux/elf.h) holds the AVX upper halves too; NT_PRFPREG
        // (the FXSAVE area) where the kernel offers no XSAVE.
        #[cfg(target_arch = "x86_64")]
        let kinds = [0x202, libc::NT_PRFPREG];
        #[cfg(target_arch = "aarch64")]
        let kinds = [libc::NT_PRFPREG];
        kinds.into_iter().find_map(|kind| {
            let mut buf = vec![0u8; 64 << 10];
            let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
            // SAFETY: PTRACE_GETREGSET into our buffer, whose size the iovec states; the kernel shrinks iov_len.
            let r = unsafe {
                libc::ptrace(libc::PTRACE_GETREGSET, tid as i32, kind as usize, &mut iov as *mut libc::iovec)
            };
            (r == 0).then(|| {
                buf.truncate(iov.iov_len);
                FpState(kind, buf)
            })
        })
    }

    pub(crate) fn restore(&self, tid: u32) -> bool {
        let mut buf = self.1.clone();
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: PTRACE_SETREGSET from the bytes the same regset gave for this thread.
        unsafe { libc::ptrace(libc::PTRACE_SETREGSET, tid as i32, self.0 as usize, &mut iov as *mut libc::iovec) == 0 }
    }
}
