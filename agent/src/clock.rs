//! Host clocks. Host events (API calls, NVTX) are stamped with CLOCK_MONOTONIC (vDSO, no syscall); device
//! events carry CUPTI timestamps. The agent writes clock pairs so the collector can map one onto the other.
//!
//! Timestamps that end up in events ([`stamp_ns`], [`stamp_realtime_ns`]) carry `CUFLIGHT_TEST_CLOCK_OFFSET_NS`
//! (signed, default 0), so one machine can play several hosts whose clocks disagree (the multi-host tests);
//! durations the agent measures for itself, and times compared with the collector's, use the plain clocks.

use std::sync::OnceLock;

static TEST_OFFSET: OnceLock<i64> = OnceLock::new();

fn test_offset() -> i64 {
    *TEST_OFFSET.get_or_init(|| {
        std::env::var("CUFLIGHT_TEST_CLOCK_OFFSET_NS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    })
}

/// CLOCK_MONOTONIC for an event's timestamp.
#[inline]
pub fn stamp_ns() -> u64 {
    monotonic_ns().wrapping_add_signed(test_offset())
}

/// CLOCK_REALTIME for an event (a clock pair) or a recorded fact (the segment's start).
pub fn stamp_realtime_ns() -> u64 {
    realtime_ns().wrapping_add_signed(test_offset())
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
