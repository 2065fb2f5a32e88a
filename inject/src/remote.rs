//! Making one thread of another process call `dlopen`, through ptrace.

use crate::elf::Symbols;
use crate::ptrace::{regs, wait_stop, FpState, Stop};
use crate::InjectError;
use std::ffi::CString;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the target's dlopen is, and how to call it.
pub struct Dlopen {
    pub(crate) addr: u64,
    /// glibc before 2.34: `__libc_dlopen_mode`, whose mode needs `__RTLD_DLOPEN` (0x80000000).
    private: bool,
    /// Executable bytes past the end of libc's code, in its last code page, that belong to no section:
    /// where the self-restoring call stub goes.
    pub(crate) code_gap: Option<(u64, u64)>,
}

const RTLD_NOW: u64 = 2;
const RTLD_DLOPEN: u64 = 0x8000_0000;

/// Finds `dlopen` in the target's libc: the mapping's base address plus the symbol's value. The file is the one
/// mapped (`/proc/PID/map_files/`, even where libc was upgraded on disk since the process started), else the
/// target's own root (a container's libc, not ours) when its inode matches the mapping's.
pub fn find_dlopen(pid: u32) -> Result<Dlopen, InjectError> {
    let target = |why: String| InjectError::Target { pid, why };
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| target(format!("maps: {e}")))?;
    let mut libc = None;
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(range), Some(offset), Some(inode), Some(path)) = (f.first(), f.get(2), f.get(4), f.get(5)) else {
            continue;
        };
        let name = path.rsplit('/').next().unwrap_or("");
        if !(name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))) {
            continue;
        }
        if u64::from_str_radix(offset, 16).ok() == Some(0) {
            let start = range.split('-').next().and_then(|s| u64::from_str_radix(s, 16).ok());
            libc = start.map(|s| (s, range.to_string(), inode.parse::<u64>().unwrap_or(0), path.to_string()));
            break;
        }
    }
    let (base, range, inode, path) = libc.ok_or_else(|| {
        target("no glibc mapped (statically linked, or another C library such as musl): cannot inject".into())
    })?;
    let mapped = Path::new(&format!("/proc/{pid}/map_files/{range}")).to_path_buf();
    let syms = match Symbols::read(&mapped) {
        Ok(syms) => syms,
        Err(_) => {
            let on_disk = Path::new(&format!("/proc/{pid}/root")).join(path.trim_start_matches('/'));
            let same = std::fs::metadata(&on_disk).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == inode);
            if !same {
                return Err(target(format!(
                    "{path} on disk is not the file the process mapped (upgraded since it started?): cannot find its dlopen"
                )));
            }
            Symbols::read(&on_disk).map_err(target)?
        }
    };
    let (value, private) = match syms.function("dlopen") {
        Some(v) => (v, false),
        None => (syms.function("__libc_dlopen_mode").ok_or_else(|| target(format!("no dlopen in {path}")))?, true),
    };
    let at = |v: u64| base.wrapping_add(v).wrapping_sub(syms.load_bias);
    let code_gap = syms.exec_end.and_then(|end| {
        let start = at(end).checked_add(15)? & !15;
        let mapping_end = maps.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (lo, hi) = f.first()?.split_once('-')?;
            let (lo, hi) = (u64::from_str_radix(lo, 16).ok()?, u64::from_str_radix(hi, 16).ok()?);
            (f.get(1)?.contains('x') && f.get(5) == Some(&path.as_str()) && lo < at(end) && at(end) <= hi).then_some(hi)
        })?;
        (start < mapping_end).then_some((start, mapping_end))
    });
    Ok(Dlopen { addr: at(value), private, code_gap })
}

/// System calls a thread may be blocked in while holding no lock dlopen needs (waiting for input, a timer, a
/// futex, a child): x86-64 numbers (asm/unistd_64.h) and aarch64 ones (asm-generic/unistd.h).
#[cfg(target_arch = "x86_64")]
const QUIET_SYSCALLS: &[i64] = &[0, 7, 23, 35, 43, 45, 47, 61, 202, 230, 232, 270, 271, 281, 288, 299];
#[cfg(target_arch = "aarch64")]
const QUIET_SYSCALLS: &[i64] = &[63, 73, 72, 101, 202, 207, 212, 260, 98, 115, 22, 242, 243];

/// Threads blocked in a quiet system call, the main thread first.
fn quiet_threads(pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    tids.sort_by_key(|&t| (t != pid, t));
    tids.retain(|t| {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/syscall")) else { return false };
        s.split_whitespace().next().and_then(|n| n.parse::<i64>().ok()).is_some_and(|n| QUIET_SYSCALLS.contains(&n))
    });
    tids
}

/// Holds off the signals that would kill the injector in the middle of the call (restored on drop).
struct HoldSignals(libc::sigset_t);

impl HoldSignals {
    fn new() -> HoldSignals {
        // SAFETY: an all-zero sigset_t is a valid value of the plain C type.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut old = set;
        // SAFETY: on a local sigset_t.
        unsafe { libc::sigemptyset(&mut set) };
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            // SAFETY: on a local sigset_t, with a valid signal number.
            unsafe { libc::sigaddset(&mut set, s) };
        }
        // SAFETY: this thread's mask, from and into local sets.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        HoldSignals(old)
    }
}

impl Drop for HoldSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Why ptrace was refused, and what to do about it.
fn refusal(pid: u32) -> String {
    let scope =
        std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok().and_then(|s| s.trim().parse::<u32>().ok());
    match (errno(), scope) {
        (libc::EPERM, Some(s)) if s >= 1 => format!(
            "kernel.yama.ptrace_scope is {s}: run as root or with CAP_SYS_PTRACE, or lower it (sysctl kernel.yama.ptrace_scope=0)"
        ),
        (libc::EPERM, _) => "not permitted: the process is another user's, or a container's seccomp policy or missing CAP_SYS_PTRACE forbids ptrace (docker run --cap-add SYS_PTRACE)".into(),
        (libc::ESRCH, _) => format!("process {pid} exited"),
        (e, _) => std::io::Error::from_raw_os_error(e).to_string(),
    }
}

/// Runs `dlopen(library, RTLD_NOW)` on a quiet thread of `pid`, then leaves the thread exactly as it was.
pub fn call_dlopen(pid: u32, dlopen: &Dlopen, library: &Path, timeout: Duration) -> Result<(), InjectError> {
    let target = |why: String| InjectError::Target { pid, why };
    let path =
        CString::new(library.as_os_str().as_encoded_bytes()).map_err(|_| target("library path holds NUL".into()))?;
    let mut tries = 0;
    loop {
        let Some(&tid) = quiet_threads(pid).first() else {
            return Err(InjectError::NoQuietThread { pid });
        };
        match call_on(pid, tid, dlopen, &path, timeout)? {
            Some(0) => return Err(InjectError::DlopenFailed { pid, library: library.display().to_string() }),
            Some(_) => return Ok(()),
            // The thread woke up between the look and the interrupt: put back untouched, try again.
            None if tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            None => return Err(InjectError::NoQuietThread { pid }),
        }
    }
}

/// One attempt on thread `tid`: Some(dlopen's result), or None when the thread was not in a system call after all
/// (it is left as it was).
fn call_on(pid: u32, tid: u32, dlopen: &Dlopen, path: &CString, timeout: Duration) -> Result<Option<u64>, InjectError> {
    let _held = HoldSignals::new();
    let deadline = Instant::now() + timeout;
    // SAFETY: PTRACE_SEIZE of a thread of a process we may trace; system-call stops marked (see `stub`).
    if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid as i32, 0, libc::PTRACE_O_TRACESYSGOOD) } != 0 {
        return Err(InjectError::Ptrace { pid, why: refusal(pid) });
    }
    let detach = |sig: i32| {
        // SAFETY: detaching our tracee, delivering `sig` (0: none) as it goes.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, tid as i32, 0, sig as usize) };
    };
    // SAFETY: PTRACE_INTERRUPT of our seized tracee.
    unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid as i32, 0, 0) };
    // A signal already on its way is held back and delivered when we leave.
    let pending = match wait_stop(tid, deadline) {
        Stop::Event | Stop::Syscall => 0,
        Stop::Signal(sig) => sig,
        Stop::Exited => return Err(InjectError::Target { pid, why: "exited".into() }),
        Stop::TimedOut => {
            detach(0);
            return Err(InjectError::Target { pid, why: "did not stop for ptrace within the time limit".into() });
        }
    };
    let Some(saved) = regs::get(tid) else {
        detach(pending);
        return Err(InjectError::Ptrace { pid, why: "cannot read the thread's registers".into() });
    };
    if !regs::in_syscall(&saved) {
        detach(pending);
        return Ok(None);
    }
    let Some(fp) = FpState::save(tid) else {
        detach(pending);
        return Err(InjectError::Ptrace { pid, why: "cannot read the thread's floating-point registers".into() });
    };
    // The traced thread's own mem file: where the kernel lets only a process's tracer write to its code
    // (proc_mem.force_override=ptrace), the tracer of that very task is what it checks.
    let mem = std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/{pid}/task/{tid}/mem"));
    let Ok(mem) = mem else {
        detach(pending);
        return Err(InjectError::Ptrace { pid, why: "cannot open its memory".into() });
    };
    let mode = if dlopen.private { RTLD_NOW | RTLD_DLOPEN } else { RTLD_NOW };
    crate::step("stopped");
    if let Some((gap, _)) = dlopen.code_gap.filter(|(a, b)| b - a >= crate::stub::LEN) {
        let call = crate::stub::Call {
            pid,
            tid,
            saved: &saved,
            fp: &fp,
            mem: &mem,
            gap,
            dlopen: dlopen.addr,
            mode,
            path,
            pending,
            deadline,
            timeout,
        };
        return crate::stub::call(&call).map(Some);
    }
    // Without room for the stub: the call returns to address 0 and the fault it raises is caught. The path and
    // (x86-64) the return address go below the red zone of the thread's stack; the bytes
    // there are saved and put back.
    let bytes = path.as_bytes_with_nul();
    let path_at = (regs::sp(&saved) - regs::RED_ZONE - 256 - bytes.len() as u64) & !15;
    let ret_sp = if regs::RETURN_ON_STACK { path_at - 16 - 8 } else { path_at - 32 };
    let span = (ret_sp, path_at + bytes.len() as u64);
    let mut original = vec![0u8; (span.1 - span.0) as usize];
    if mem.read_exact_at(&mut original, span.0).is_err() {
        detach(pending);
        return Err(InjectError::Target { pid, why: "cannot read its stack".into() });
    }
    let mut image = original.clone();
    image[(path_at - span.0) as usize..].copy_from_slice(bytes);
    if regs::RETURN_ON_STACK {
        image[..8].copy_from_slice(&0u64.to_le_bytes());
    }
    let call = regs::call(&saved, dlopen.addr, path_at, mode, ret_sp);
    let restore = |mem: &std::fs::File| {
        let ok = regs::set(tid, &saved) && fp.restore(tid) && mem.write_all_at(&original, span.0).is_ok();
        detach(pending);
        ok
    };
    if mem.write_all_at(&image, span.0).is_err() || !regs::set(tid, &call) {
        restore(&mem);
        return Err(InjectError::Target { pid, why: "cannot prepare the call on its stack".into() });
    }
    #[cfg(target_arch = "aarch64")]
    regs::no_restart(tid);
    // From here until the registers are restored, the thread runs our call.
    // SAFETY: resuming our tracee with no signal.
    unsafe { libc::ptrace(libc::PTRACE_CONT, tid as i32, 0, 0) };
    let result = loop {
        match wait_stop(tid, deadline) {
            Stop::Signal(libc::SIGSEGV) => match regs::get(tid).as_ref().and_then(regs::returned) {
                Some(handle) => break handle,
                None => {
                    // A fault inside the call: nothing sane to return to but the state we saved.
                    restore(&mem);
                    return Err(InjectError::Target {
                        pid,
                        why: "faulted inside dlopen; its thread was put back".into(),
                    });
                }
            },
            // Another signal for the thread meanwhile: let it have it (its handler runs on top of our call).
            Stop::Signal(sig) => {
                // SAFETY: resuming our tracee, delivering its signal.
                unsafe { libc::ptrace(libc::PTRACE_CONT, tid as i32, 0, sig as usize) };
            }
            Stop::Event | Stop::Syscall => {
                // SAFETY: as above, nothing to deliver.
                unsafe { libc::ptrace(libc::PTRACE_CONT, tid as i32, 0, 0) };
            }
            Stop::Exited => return Err(InjectError::Target { pid, why: "exited during the call".into() }),
            Stop::TimedOut => {
                return Err(InjectError::Stuck { pid, secs: timeout.as_secs() });
            }
        }
    };
    if !restore(&mem) {
        return Err(InjectError::Target { pid, why: "could not put its thread back as it was".into() });
    }
    Ok(Some(result))
}
