//! Host clocks. Host events (API calls, NVTX) are stamped with CLOCK_MONOTONIC (vDSO, no syscall); device
//! events carry CUPTI timestamps. The agent writes clock pairs so the collector can map one onto the other.
//!
//! Timestamps that end up in events ([`stamp_ns`], [`stamp_realtime_ns`]) carry `CUFLIGHT_TEST_CLOCK_OFFSET_NS`
//! (signed, default 0) and `CUFLIGHT_TEST_CLOCK_DRIFT_PPM` (signed, default 0: a clock running that many parts per
//! million fast from the process's first stamp), so one machine can play several hosts whose clocks disagree
//! and drift apart (the multi-host tests); durations the agent measures for itself, and times compared with the
//! collector's, use the plain clocks.

use std::sync::OnceLock;

/// (offset ns, drift ppm, monotonic origin of the drift).
static TEST_CLOCK: OnceLock<(i64, i64, u64)> = OnceLock::new();

/// What the test clock adds at monotonic time `mono`.
#[inline]
fn test_skew(mono: u64) -> i64 {
    let &(offset, ppm, origin) = TEST_CLOCK.get_or_init(|| {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(0);
        (var("CUFLIGHT_TEST_CLOCK_OFFSET_NS"), var("CUFLIGHT_TEST_CLOCK_DRIFT_PPM"), monotonic_ns())
    });
    if ppm == 0 {
        return offset;
    }
    let drift = (mono as i128 - origin as i128) * ppm as i128 / 1_000_000;
    offset.saturating_add(drift.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

/// CLOCK_MONOTONIC for an event's timestamp.
#[inline]
pub fn stamp_ns() -> u64 {
    let mono = monotonic_ns();
    mono.wrapping_add_signed(test_skew(mono))
}

/// CLOCK_REALTIME for an event (a clock pair) or a recorded fact (the segment's start).
pub fn stamp_realtime_ns() -> u64 {
    realtime_ns().wrapping_add_signed(test_skew(monotonic_ns()))
}

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
