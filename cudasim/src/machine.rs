//! The simulated machine's name and clocks (**test double**), so that one real machine can play several hosts of a
//! job: real hosts differ in name, their wall clocks disagree by milliseconds (NTP keeps them that close, no
//! closer), and each crystal runs at its own rate (tens of ppm). Exported over libc's own `gethostname` and
//! `clock_gettime`: a program links cudasim's libraries before libc, so the program, cudasim and any tool loaded
//! into the process (a profiler's agent) resolve those names here, and the whole process sees one host's view,
//! as on a real host. Nothing outside the process is touched (a collector reading the process's files keeps its
//! own clocks).
//! - `CUDASIM_HOST`: the name gethostname(2) gives.
//! - `CUDASIM_CLOCK_OFFSET_NS` (signed): how far this host's CLOCK_REALTIME is off.
//! - `CUDASIM_CLOCK_DRIFT_PPM` (signed): this host's clocks, CLOCK_MONOTONIC and CLOCK_REALTIME alike, run this
//!   many parts per million fast from the process's first reading (tests exaggerate it so a short run shows it).
//!
//! Unset, each call goes straight to libc's (found with `dlsym(RTLD_NEXT)`, the vDSO-backed clock).
//!
//! Sources: clock_gettime(2) (CLOCK_REALTIME "is affected by discontinuous jumps in the system time ... and by the
//! incremental adjustments performed by adjtime(3) and NTP"; CLOCK_MONOTONIC by the incremental ones), which is
//! what makes hosts' clocks disagree and drift; ld.so(8) and dlsym(3) (symbols resolve in load order, the
//! executable's libraries before libc, and RTLD_NEXT finds the next definition), which is how the stand-ins take
//! the names. None of this is CUDA's: the agent reads the clocks and the host name as it would on any machine.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The host's settings, read once with getenv(3) (no allocation or lock: a clock may be read anywhere).
struct Machine {
    host: Option<&'static CStr>,
    offset_ns: i64,
    drift_ppm: i64,
}

fn machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(|| {
        let var = |name: &CStr| {
            // SAFETY: getenv with a NUL-terminated name; the environment outlives the process's use of it here
            // (cudasim's tests never unset these variables while running).
            let v = unsafe { libc::getenv(name.as_ptr()) };
            // SAFETY: getenv returns NULL or a NUL-terminated string.
            (!v.is_null()).then(|| unsafe { CStr::from_ptr(v) })
        };
        let int = |name: &CStr| var(name).and_then(|v| v.to_str().ok()?.trim().parse::<i64>().ok()).unwrap_or(0);
        Machine {
            host: var(c"CUDASIM_HOST"),
            offset_ns: int(c"CUDASIM_CLOCK_OFFSET_NS"),
            drift_ppm: int(c"CUDASIM_CLOCK_DRIFT_PPM"),
        }
    })
}

type ClockGettime = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int;
type GetHostname = unsafe extern "C" fn(*mut libc::c_char, libc::size_t) -> libc::c_int;

/// libc's definition of `name`, the next after this library's.
fn next(name: &CStr) -> usize {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

/// The raw monotonic time of the first reading: where the drift counts from.
static DRIFT_ORIGIN: AtomicU64 = AtomicU64::new(0);

/// What this host's clocks have gained by the machine's monotonic time `now`.
fn drift_at(now: u64, ppm: i64) -> i64 {
    let origin = match DRIFT_ORIGIN.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => now,
        Err(first) => first,
    };
    let drift = (now as i128 - origin as i128) * ppm as i128 / 1_000_000;
    drift.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn real_clock_gettime() -> Option<ClockGettime> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let real = *REAL.get_or_init(|| next(c"clock_gettime"));
    // SAFETY: the address of libc's clock_gettime, which has this signature.
    (real != 0).then(|| unsafe { std::mem::transmute::<usize, ClockGettime>(real) })
}

fn machine_monotonic(real: ClockGettime) -> u64 {
    let mut mono = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: libc's clock_gettime into a local timespec.
    unsafe { real(libc::CLOCK_MONOTONIC, &mut mono) };
    mono.tv_sec as u64 * 1_000_000_000 + mono.tv_nsec as u64
}

/// Test double only (no such call exists in CUDA or libc): the machine's own CLOCK_MONOTONIC, beneath every
/// simulated host's clocks. Processes playing different hosts of one machine line up what they simulate by it
/// (a collective's arrivals, the instant it ends), as real hosts line up through their network, not a clock.
#[no_mangle]
pub extern "C" fn cudasim_machine_monotonic_ns() -> u64 {
    real_clock_gettime().map_or(0, machine_monotonic)
}

/// The machine's monotonic time `machine_ns` as this simulated host's CLOCK_MONOTONIC reads it.
pub(crate) fn host_monotonic(machine_ns: u64) -> u64 {
    match machine().drift_ppm {
        0 => machine_ns,
        ppm => machine_ns.saturating_add_signed(drift_at(machine_ns, ppm)),
    }
}

/// # Safety
/// Called as clock_gettime(2): `tp` points to a writable timespec.
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clock: libc::clockid_t, tp: *mut libc::timespec) -> libc::c_int {
    let Some(real) = real_clock_gettime() else { return -1 };
    // SAFETY: forwarded as given.
    let rc = unsafe { real(clock, tp) };
    let m = machine();
    if rc != 0 || tp.is_null() || (m.offset_ns == 0 && m.drift_ppm == 0) {
        return rc;
    }
    let mut add = match clock {
        libc::CLOCK_REALTIME | libc::CLOCK_REALTIME_COARSE => m.offset_ns,
        libc::CLOCK_MONOTONIC | libc::CLOCK_MONOTONIC_COARSE | libc::CLOCK_MONOTONIC_RAW | libc::CLOCK_BOOTTIME => 0,
        _ => return rc,
    };
    if m.drift_ppm != 0 {
        add = add.saturating_add(drift_at(machine_monotonic(real), m.drift_ppm));
    }
    // SAFETY: `tp` was written by libc's clock_gettime above and is the caller's timespec.
    let ts = unsafe { &mut *tp };
    let ns = (ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128 + add as i128).max(0);
    ts.tv_sec = (ns / 1_000_000_000) as libc::time_t;
    ts.tv_nsec = (ns % 1_000_000_000) as libc::c_long;
    rc
}

/// # Safety
/// Called as gethostname(2): `name` points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gethostname(name: *mut libc::c_char, len: libc::size_t) -> libc::c_int {
    if let Some(host) = machine().host {
        let bytes = host.to_bytes_with_nul();
        if name.is_null() || bytes.len() > len {
            // SAFETY: errno's location is this thread's, always valid.
            let errno = unsafe { libc::__errno_location() };
            // SAFETY: as above.
            unsafe { *errno = libc::ENAMETOOLONG };
            return -1;
        }
        // SAFETY: `name` holds `len` >= bytes.len() bytes (the caller's promise, checked above).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const libc::c_char, name, bytes.len()) };
        return 0;
    }
    static REAL: OnceLock<usize> = OnceLock::new();
    let real = *REAL.get_or_init(|| next(c"gethostname"));
    if real == 0 {
        return -1;
    }
    // SAFETY: the address of libc's gethostname, which has this signature.
    let real = unsafe { std::mem::transmute::<usize, GetHostname>(real) };
    // SAFETY: forwarded as given.
    unsafe { real(name, len) }
}
