//! Host clocks. Host events (API calls, NVTX) are stamped with CLOCK_MONOTONIC (vDSO, no syscall); device
//! events carry CUPTI timestamps. The agent writes clock pairs so the collector can map one onto the other.
//!
//! Every timestamp the agent writes is the plain clock: a test that plays several hosts on one machine shifts the
//! clocks of the whole simulated process instead (cudasim's `CUDASIM_CLOCK_OFFSET_NS` and
//! `CUDASIM_CLOCK_DRIFT_PPM`), so the shipped agent carries no test hook.

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the valid timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[inline]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}
