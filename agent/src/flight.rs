//! The flight recorder (`cuflight launch --flight-recorder DUR`): the agent records from the start into rings
//! that keep their newest events (overwrite mode, see `cuflight_format::ring`), nobody drains them, and the last
//! seconds are dumped when asked for or when something goes wrong:
//!
//! - `cuflight dump PID` ([`dump_to_session`]): CUPTI is flushed and the segment handed to the collector, which
//!   takes a snapshot without stopping anything.
//! - a fatal signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL): the handler writes the segment's image into the
//!   dump directory with async-signal-safe calls only, then hands the signal to the program's own handler (or the
//!   default action), so the process ends exactly as it would have. CUPTI cannot be flushed there: device records
//!   CUPTI still held (up to one flush period) are missing from such a dump.
//! - SIGUSR2 (only where the program left it at its default action), a hang (a thread waited in a synchronising
//!   call while no GPU work completed for `--hang-timeout`), a sticky CUDA error, or a slow step
//!   (`--dump-on-slow-step`, `crate::slow_steps`): the control thread flushes CUPTI and writes the image. A
//!   program that exits meanwhile (its last step was the slow one) writes it at exit, or waits for it there:
//!   ending the process would leave it half-written.
//!
//! `cuflight dump IMAGE` turns an image into a trace.

use crate::flight_config::CONFIG;
use crate::{clock, cupti, state};
use cuflight_format::segment::{dump_dir, dump_reason};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The flight recorder's span in ns (0: this agent is not one). Only meaningful outside `cuflight record`.
pub fn span_ns() -> u64 {
    CONFIG.span_ns
}

/// Set once the recorder runs: API exits are watched for sticky errors, synchronising calls for hangs.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Threads inside a synchronising call, since when the first entered, and the latest sign of GPU progress.
static IN_SYNC: AtomicU32 = AtomicU32::new(0);
static SYNC_SINCE: AtomicU64 = AtomicU64::new(0);
static LAST_PROGRESS: AtomicU64 = AtomicU64::new(0);
/// LAST_PROGRESS when the latest hang was dumped: one dump per hang.
static HANG_DUMPED_AT: AtomicU64 = AtomicU64::new(u64::MAX);
/// A dump the control thread should write (a `dump_reason`), 0: none.
static PENDING: AtomicU32 = AtomicU32::new(0);
/// A sticky CUDA error was dumped already (one per process: every later call fails the same way).
static CUDA_ERROR_SEEN: AtomicBool = AtomicBool::new(false);
/// A fatal-signal dump happened or is happening (several threads may fault at once).
static FATAL_DUMPED: AtomicBool = AtomicBool::new(false);
/// The control thread, or exit, is writing a dump: one at a time, and exit waits for it.
static DUMPING: AtomicBool = AtomicBool::new(false);
/// The longest exit waits for a dump being written (an image of every ring, on a slow disk).
const EXIT_WAITS_NS: u64 = 10_000_000_000;

/// Starts the recorder's watches once CUPTI runs: signal handlers and hang detection.
pub fn arm() {
    install_handlers();
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    // Registered after CUPTI's forced flush at exit (`cupti::flush_at_exit`, at set-up): it runs before it.
    // SAFETY: registering a plain extern "C" handler with libc.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(at_exit);
    });
    crate::slow_steps::arm();
    // The flush thread records the devices after its first period (never inside cuInit, which is running now).
    FACTS_AT.store(clock::monotonic_ns(), Ordering::Relaxed);
    ARMED.store(true, Ordering::Release);
}

/// Whether API calls are watched (one relaxed load per call otherwise).
#[inline]
pub fn armed() -> bool {
    ARMED.load(Ordering::Relaxed)
}

/// A thread enters a call that waits for the GPU.
pub fn sync_enter() {
    if IN_SYNC.fetch_add(1, Ordering::AcqRel) == 0 {
        SYNC_SINCE.store(clock::monotonic_ns(), Ordering::Release);
    }
}

/// ... and returns from it: the GPU got somewhere.
pub fn sync_exit() {
    // Down by one, never below zero (an exit whose entry came before arming). A loop rather than fetch_update,
    // which Rust 1.99 deprecates for try_update, a name older toolchains lack.
    let mut n = IN_SYNC.load(Ordering::Acquire);
    while let Some(less) = n.checked_sub(1) {
        match IN_SYNC.compare_exchange_weak(n, less, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => n = now,
        }
    }
    progress();
}

/// Completed GPU work arrived (activity records).
pub fn progress() {
    LAST_PROGRESS.store(clock::monotonic_ns(), Ordering::Release);
}

/// A CUDA call returned `code`: the errors after which the context is unusable (driver_types.h: "the process
/// ... must be terminated and relaunched") get the recorder dumped, once.
pub fn cuda_result(code: u32) {
    // cudaErrorIllegalAddress 700, LaunchFailure 719, HardwareStackError 714, IllegalInstruction 715,
    // MisalignedAddress 716, InvalidAddressSpace 717, InvalidPc 718, Assert 710, ECCUncorrectable 214; the driver's
    // CUresult values are the same numbers (cuda.h).
    if matches!(code, 214 | 700 | 710 | 714..=719) && !CUDA_ERROR_SEEN.swap(true, Ordering::AcqRel) {
        request(dump_reason::CUDA_ERROR);
    }
}

/// Asks the control thread for a dump into the dump directory (async-signal-safe: one atomic store).
pub fn request(reason: u32) {
    let _ = PENDING.compare_exchange(0, reason, Ordering::AcqRel, Ordering::Acquire);
}

/// Device facts and thread and category names are recorded once, into rings that overwrite their oldest events:
/// they are recorded again every half span, so that any dump, even a crash's, holds them.
static FACTS_AT: AtomicU64 = AtomicU64::new(0);

fn record_facts() {
    FACTS_AT.store(clock::monotonic_ns(), Ordering::Relaxed);
    cupti::record_devices_now();
    crate::nvtx::repeat_names();
}

/// Before a dump: CUPTI's completed records first, then the facts. The flush may deliver records into this
/// thread's own ring (when the delivery ring is busy), and a full ring overwrites its oldest events: facts
/// written after the flush are the newest there, and survive.
fn flush_then_facts() {
    cupti::flush_settled(false);
    record_facts();
}

/// Called by the control thread between requests: writes a requested dump, watches for hangs.
pub fn service() {
    let now = clock::monotonic_ns();
    if now.saturating_sub(FACTS_AT.load(Ordering::Relaxed)) >= (CONFIG.span_ns / 2).max(1_000_000_000) {
        record_facts();
    }
    crate::slow_steps::check_open();
    if crate::slow_steps::take_wanted() {
        request(dump_reason::SLOW_STEP);
    }
    dump_pending();
    if CONFIG.hang_ns == 0 || IN_SYNC.load(Ordering::Acquire) == 0 {
        return;
    }
    let progress = LAST_PROGRESS.load(Ordering::Acquire);
    let since = SYNC_SINCE.load(Ordering::Acquire).max(progress);
    if clock::monotonic_ns().saturating_sub(since) >= CONFIG.hang_ns
        && HANG_DUMPED_AT.swap(progress, Ordering::AcqRel) != progress
        && !DUMPING.swap(true, Ordering::AcqRel)
    {
        flush_then_facts();
        dump_to_dir(dump_reason::HANG);
        DUMPING.store(false, Ordering::Release);
    }
}

/// Writes the dump asked for, unless one is being written (then the next look takes it).
fn dump_pending() {
    if PENDING.load(Ordering::Acquire) == 0 || DUMPING.swap(true, Ordering::AcqRel) {
        return;
    }
    let reason = PENDING.swap(0, Ordering::AcqRel);
    if reason != 0 {
        if reason == dump_reason::SLOW_STEP {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "cuflight: {}", crate::slow_steps::describe());
        }
        flush_then_facts();
        dump_to_dir(reason);
    }
    DUMPING.store(false, Ordering::Release);
}

/// At exit: a dump asked for and not yet taken (a slow last step: the control thread looks five times a second)
/// is written now, and one being written is waited for, or the process would end it half-written.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if crate::slow_steps::take_wanted() {
            request(dump_reason::SLOW_STEP);
        }
        let deadline = clock::monotonic_ns().saturating_add(EXIT_WAITS_NS);
        let wait = || {
            while DUMPING.load(Ordering::Acquire) && clock::monotonic_ns() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        wait();
        dump_pending();
        // The control thread may have taken it first.
        wait();
    });
}

/// `cuflight dump PID`: flushes CUPTI and hands the segment to the collector listening on `session`, which
/// reads a snapshot of it; recording goes on meanwhile.
pub fn dump_to_session(session: &str) -> Result<(), String> {
    let agent = state::existing_agent().ok_or("the flight recorder has no segment")?;
    flush_then_facts();
    let h = agent.seg.header();
    h.dump_ns.store(clock::monotonic_ns(), Ordering::Relaxed);
    h.dump_reason.store(dump_reason::ON_DEMAND, Ordering::Release);
    cuflight_format::channel::send(session, agent.seg.fd())
        .map(drop)
        .map_err(|e| format!("cannot reach the collector: {e}"))
}

/// Writes the segment's image to `<dump dir>/cuflight-<pid>-<unix seconds>-<n>.seg` and says so on stderr. The image
/// is written under a hidden name first and linked into place whole (renamed where the file system has no hard
/// links), so that whoever watches the directory (a job that uploads new dumps) never takes a dump still being
/// written. Async-signal-safe: no allocation, no lock; only `open`, `pwrite`, `ftruncate`, `close`, `link`,
/// `access`, `rename`, `unlink`, `write`.
fn dump_to_dir(reason: u32) -> bool {
    let (Some(agent), Some(dir)) = (state::existing_agent(), CONFIG.dump_dir.as_ref()) else { return false };
    if refused_for_disk(dir, agent.seg.image_bytes()) {
        return false;
    }
    let h = agent.seg.header();
    h.dump_ns.store(clock::monotonic_ns(), Ordering::Relaxed);
    h.dump_reason.store(reason, Ordering::Release);
    let secs = clock::realtime_ns() / 1_000_000_000;
    let (mut partial, mut path) = (Buf::new(), Buf::new());
    let mut fd = -1;
    for n in 0..16u64 {
        dump_name(&mut partial, dir, dump_dir::PARTIAL_PREFIX, secs, n, dump_dir::PARTIAL_SUFFIX);
        // SAFETY: a NUL-terminated path in our buffer; a new file only (never a link, never an existing file).
        fd = unsafe {
            libc::open(
                partial.bytes().as_ptr() as *const libc::c_char,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd >= 0 || last_errno() != libc::EEXIST {
            break;
        }
    }
    if fd < 0 {
        say(b"cuflight: cannot write the flight recorder's dump into ", dir.to_bytes(), b"\n");
        return false;
    }
    let ok = agent.seg.write_image(fd);
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    let unlink_partial = || {
        // SAFETY: a NUL-terminated path in our buffer, of the file created above (O_EXCL): ours.
        unsafe { libc::unlink(partial.bytes().as_ptr() as *const libc::c_char) }
    };
    if !ok && dump_reason::flushed_first(reason) {
        // The program goes on, and needs the space more than a part of a dump: given back.
        unlink_partial();
        say(b"cuflight: the flight recorder's dump could not be written whole (disk full?) and was removed: the program needs the space; dump directory ", dir.to_bytes(), b"\n");
        return false;
    }
    // `link` never replaces a file: a name taken (by another dump this second) is skipped.
    let mut placed = false;
    for n in 0..16u64 {
        dump_name(&mut path, dir, dump_dir::DUMP_PREFIX, secs, n, dump_dir::DUMP_SUFFIX);
        // SAFETY: NUL-terminated paths in our buffers; link never replaces a file.
        let r = unsafe {
            libc::link(partial.bytes().as_ptr() as *const libc::c_char, path.bytes().as_ptr() as *const libc::c_char)
        };
        placed = r == 0;
        if placed {
            break;
        }
        if last_errno() == libc::EEXIST {
            continue;
        }
        // A file system without hard links (some FUSE and object-store mounts): renamed instead, which replaces a
        // file of that name, so only where none is (a link refused may not say EEXIST for a name taken: the next
        // name is tried).
        let (from, to) =
            (partial.bytes().as_ptr() as *const libc::c_char, path.bytes().as_ptr() as *const libc::c_char);
        // SAFETY: a NUL-terminated path in our buffer; F_OK only asks whether the name exists.
        if unsafe { libc::access(to, libc::F_OK) } == 0 {
            continue;
        }
        // SAFETY: NUL-terminated paths in our buffers.
        placed = unsafe { libc::rename(from, to) } == 0;
        break;
    }
    unlink_partial();
    if !placed {
        say(b"cuflight: flight recorder dump not written into ", dir.to_bytes(), b": no name for it could be made\n");
        return false;
    }
    let shown = &path.bytes()[..path.len - 1];
    if ok {
        say(b"cuflight: flight recorder dump written to ", shown, b" (`cuflight dump FILE -o trace.cuf` reads it)\n");
    } else {
        // The process is ending: a part of its dump is better than none (`cuflight dump` reads what is there).
        say(b"cuflight: the flight recorder's dump is incomplete (disk full?): ", shown, b"\n");
    }
    ok
}

/// `<dir>/<prefix><pid>-<secs>-<n><suffix>` into `p`, NUL-terminated.
fn dump_name(p: &mut Buf, dir: &std::ffi::CStr, prefix: &str, secs: u64, n: u64, suffix: &str) {
    p.clear();
    p.push(dir.to_bytes());
    p.push(b"/");
    p.push(prefix.as_bytes());
    // SAFETY: getpid has no preconditions.
    p.number(unsafe { libc::getpid() } as u64);
    p.push(b"-");
    p.number(secs);
    p.push(b"-");
    p.number(n);
    p.push(suffix.as_bytes());
    p.push(b"\0");
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Whether a dump of `image` bytes must not be written into `dir`, for the disk it would take
/// (`--dump-max-use`, `--dump-keep-free`: `cuflight_format::segment::dump_dir`); said on stderr where so.
fn refused_for_disk(dir: &std::ffi::CStr, image: u64) -> bool {
    use std::fmt::Write;
    let Some(refusal) = dump_dir::measure(dir).and_then(|room| CONFIG.dump_limits.refusal(&room, image)) else {
        return false;
    };
    let mut line = Buf::new();
    line.push(b"cuflight: flight recorder dump not written into ");
    line.push(dir.to_bytes());
    line.push(b": ");
    // Into the fixed buffer: core's formatting neither allocates nor locks; a line too long is cut.
    let _ = write!(line, "{refusal}");
    line.push(b"\n");
    say(line.bytes(), b"", b"");
    true
}

/// One line on stderr from three pieces, with a single `writev` (async-signal-safe, no buffer on the stack).
fn say(a: &[u8], b: &[u8], c: &[u8]) {
    let iov = [a, b, c].map(|s| libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() });
    // SAFETY: writev of three live slices to stderr; a failure is ignored.
    unsafe { libc::writev(2, iov.as_ptr(), iov.len() as libc::c_int) };
}

/// A fixed buffer for building paths and messages without allocating (signal handlers).
struct Buf {
    bytes: [u8; 4096],
    len: usize,
}

impl Buf {
    fn new() -> Buf {
        Buf { bytes: [0; 4096], len: 0 }
    }
    fn clear(&mut self) {
        self.len = 0;
    }
    fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }
    fn number(&mut self, v: u64) {
        self.push(cuflight_format::decimal::digits(v, &mut [0u8; 20]));
    }
    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::fmt::Write for Buf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

const FATAL: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, libc::SIGFPE, libc::SIGILL];
/// The actions our handlers replaced, by signal number, to hand each signal on.
static PREVIOUS: [once_cell::sync::OnceCell<libc::sigaction>; 32] = [const { once_cell::sync::OnceCell::new() }; 32];

/// An alternate signal stack for the thread that arms the recorder (the one that initialised CUDA, usually the
/// main thread), where it has none: a stack overflow there still gets its dump (the handlers run with
/// SA_ONSTACK). Other threads keep what they have.
fn alternate_stack() {
    const SIZE: usize = 64 << 10;
    let mut current = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: 0, ss_size: 0 };
    // SAFETY: a query into a local stack_t.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut current) } != 0 || current.ss_flags & libc::SS_DISABLE == 0 {
        return;
    }
    let (prot, flags) = (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS);
    // SAFETY: anonymous memory, checked below; never freed (the thread may use it until the process ends).
    let p = unsafe { libc::mmap(std::ptr::null_mut(), SIZE, prot, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return;
    }
    let stack = libc::stack_t { ss_sp: p, ss_flags: 0, ss_size: SIZE };
    // SAFETY: the stack just mapped, SIZE bytes.
    unsafe { libc::sigaltstack(&stack, std::ptr::null_mut()) };
}

fn install_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        alternate_stack();
        for sig in FATAL {
            install(sig, on_fatal as *const () as usize, libc::SA_SIGINFO | libc::SA_ONSTACK, false);
        }
        // SIGUSR2 only where nobody handles it: a program that uses it keeps it to itself. SA_RESTART, so that
        // the program's interrupted system calls resume (sleeps still return early, as with any handled signal).
        install(libc::SIGUSR2, on_usr2 as *const () as usize, libc::SA_SIGINFO | libc::SA_RESTART, true);
    });
}

fn install(sig: libc::c_int, handler: usize, flags: libc::c_int, only_if_default: bool) {
    // SAFETY: sigaction is plain data; zeroed is valid, every field we rely on is set below.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: querying the current action.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
        return;
    }
    if only_if_default && old.sa_sigaction != libc::SIG_DFL {
        return;
    }
    let _ = PREVIOUS[sig as usize].set(old);
    new.sa_sigaction = handler;
    new.sa_flags = flags;
    // SAFETY: on our struct's mask.
    unsafe { libc::sigemptyset(&mut new.sa_mask) };
    // SAFETY: installing a handler that only does async-signal-safe work.
    unsafe { libc::sigaction(sig, &new, std::ptr::null_mut()) };
}

extern "C" fn on_usr2(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    request(dump_reason::SIGUSR2);
}

/// Dumps once, then hands the signal on as if we had never been there: to the program's handler, or to the
/// default action (re-raised for a signal that was sent; returning re-executes a faulting instruction, which
/// faults again under the default action), so the exit status and core dump stay the program's.
extern "C" fn on_fatal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // No catch_unwind: nothing below can panic (no allocation, no formatting, bounded buffers), and catch_unwind
    // itself is not async-signal-safe.
    if !FATAL_DUMPED.swap(true, Ordering::AcqRel) {
        dump_to_dir(dump_reason::SIGNAL_BASE + sig as u32);
    }
    let Some(prev) = PREVIOUS.get(sig as usize).and_then(|p| p.get()) else { return };
    match prev.sa_sigaction {
        libc::SIG_DFL => {
            // SAFETY: restoring the default action.
            unsafe { libc::sigaction(sig, prev, std::ptr::null_mut()) };
            // SAFETY: the kernel's siginfo for this signal, when not null.
            let sent = info.is_null() || unsafe { (*info).si_code } <= 0;
            if sent {
                // SAFETY: re-raising where the signal was sent (si_code <= 0: kill, raise, abort); it stays
                // blocked until this handler returns.
                unsafe { libc::raise(sig) };
            }
        }
        libc::SIG_IGN => {}
        handler if prev.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the program installed this three-argument handler for `sig`.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(sig, info, ctx);
        }
        handler => {
            // SAFETY: the program installed this one-argument handler for `sig`.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(sig);
        }
    }
}
