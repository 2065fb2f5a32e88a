//! Our CUPTI session once [`crate::setup`] made it, and what keeps its data flowing: a flush thread, a forced flush
//! at exit (and on cudaDeviceReset and cudaProfilerStop, from the callbacks), dropped-record counts, clock pairs.

use crate::{clock, state};
use cuflight_format::view::ClockPair;
use cuflight_format::RawEvent;
use cupti_sys::cuda13 as c;
use cupti_sys::loader::{ActivityV2, CuptiApi};
use once_cell::sync::OnceCell;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub struct Loaded {
    pub api: CuptiApi,
    /// `cuptiGetVersion`'s answer (API version 19-28 on 12.x, 130000+ on 13.x).
    pub version: u32,
}

static CUPTI: OnceCell<Loaded> = OnceCell::new();

/// Multi-subscriber mode (CUPTI 13.5+, see `setup`): the per-subscriber Activity API and our subscriber while we
/// record in that mode; null: the legacy (global) Activity API.
static V2: OnceCell<ActivityV2> = OnceCell::new();
static V2_SUBSCRIBER: AtomicPtr<c::CUpti_Subscriber_st> = AtomicPtr::new(std::ptr::null_mut());

/// The v2 Activity API and our subscriber, when recording in multi-subscriber mode.
pub fn activity_v2() -> Option<(&'static ActivityV2, c::CUpti_SubscriberHandle)> {
    let sub = V2_SUBSCRIBER.load(Ordering::Acquire);
    if sub.is_null() {
        return None;
    }
    V2.get().map(|v2| (v2, sub))
}

/// Records in multi-subscriber mode as `subscriber` (or, with None, through the legacy Activity API).
pub fn set_activity_v2(v2: Option<(ActivityV2, c::CUpti_SubscriberHandle)>) {
    match v2 {
        Some((api, sub)) => {
            let _ = V2.set(api);
            V2_SUBSCRIBER.store(sub, Ordering::Release);
        }
        None => V2_SUBSCRIBER.store(std::ptr::null_mut(), Ordering::Release),
    }
}

/// Our CUPTI session, once `cuptiSubscribe` succeeded and setup finished; None in a fork child of a profiled
/// process and after a failed setup (never another tool's session).
pub fn loaded() -> Option<&'static Loaded> {
    if !state::enabled() {
        return None;
    }
    CUPTI.get()
}

/// Held shared by the agent's CUPTI calls outside its API callback (flushes, clock pairs) and exclusively while
/// `cuptiFinalize` runs (`teardown`): a flush racing cuptiFinalize crashed Kineto (pytorch/kineto#686).
static CALLS: RwLock<()> = RwLock::new(());

/// Taken around the agent's own CUPTI calls off the callback path. Recursive (a flush writes a clock pair): a
/// finalize waiting for the lock never blocks a reader, and it waits a bounded time itself.
pub fn calls_shared() -> RwLockReadGuard<'static, ()> {
    CALLS.read_recursive()
}

/// The lock exclusively, within `wait`; None if a flush holds it that long.
pub fn calls_exclusive(wait: Duration) -> Option<RwLockWriteGuard<'static, ()>> {
    CALLS.try_write_for(wait)
}

/// The CUPTI entry points once a session was set up, whatever the agent's state now.
pub fn installed() -> Option<&'static Loaded> {
    CUPTI.get()
}

/// Keeps the session [`crate::setup::start`] made (once).
pub fn install(l: Loaded) {
    let _ = CUPTI.set(l);
}

/// The CUPTI API version in use, 0 before CUPTI is loaded.
pub fn version() -> u32 {
    CUPTI.get().map_or(0, |l| l.version)
}

/// Registers the forced flush at exit, once. Registered after the segment's own exit handler (the segment is
/// made before CUPTI starts), so it runs before that handler marks the segment finished.
pub fn flush_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" handler with libc.
        unsafe { libc::atexit(at_exit) };
    });
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(final_flush);
}

/// How often CUPTI is flushed: `CUFLIGHT_FLUSH_MS` (1 s). A fork child flushes at least every 100 ms: workers
/// (Python's multiprocessing, DataLoader) often leave through `_exit`, which runs no exit handler, so whatever
/// was not flushed by then is lost.
fn flush_period() -> Duration {
    let ms = std::env::var("CUFLIGHT_FLUSH_MS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1000u64);
    let period = Duration::from_millis(ms.clamp(10, 60_000));
    if state::forked() {
        period.min(Duration::from_millis(100))
    } else {
        period
    }
}

pub fn flush_loop() {
    let period = flush_period();
    let mut first = true;
    // A first clock pair once CUPTI has settled (never inside InitializeInjection, where wprof found
    // cuptiGetTimestamp unsettled on CUDA 13), so early device work lies between pairs rather than before them.
    std::thread::sleep(period.min(Duration::from_millis(10)));
    write_clock_pair();
    loop {
        std::thread::sleep(period);
        if loaded().is_none() {
            if state::dormant() {
                continue; // detached: nothing to flush until the next attach
            }
            return;
        }
        if std::mem::take(&mut first) {
            record_devices_once();
        }
        let _ = std::panic::catch_unwind(|| flush(false));
    }
}

/// Flushes running and activity buffers being drained into rings, on any thread.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Counts a flush or a buffer delivery as in flight while it lives.
pub struct InFlight(());

impl InFlight {
    pub fn begin() -> InFlight {
        IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        InFlight(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A flush that returns only once every flush and delivery begun before it has reached the rings (at most
/// `SETTLE_LIMIT` later). CUPTI documents the pattern of a periodic flush on one thread and a forced one in the
/// exit handler, but not that one flush waits for buffers another is delivering: without this, buffers the
/// flush thread took a moment earlier were still being drained when the exit handler declared the trace
/// complete, and the process ended under them (seen on cudasim, whose flushes do not wait for each other).
pub fn flush_settled(forced: bool) {
    flush(forced);
    let deadline = Instant::now() + SETTLE_LIMIT;
    while IN_FLIGHT.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Bounds the wait of [`flush_settled`]: a delivery stuck behind a full ring whose collector died must not hold
/// the program's exit for long.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// Asks CUPTI for every completed record. Forced (exit only): also records still being written, which come with
/// zero or unfinished timestamps and are counted, not used.
pub fn flush(forced: bool) {
    let Some(l) = loaded() else { return };
    let _in_flight = InFlight::begin();
    let _cupti = calls_shared();
    let flag = if forced { c::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED } else { 0 };
    // SAFETY: plain CUPTI call; buffer callbacks run on this thread or CUPTI's.
    unsafe { (l.api.activity_flush_all)(flag) };
    // Records dropped while CUPTI had no buffer are only reported here, not in a completion that never came: the
    // global queue (NULL context). Per-context queues are read in their completion callbacks, with the context
    // CUPTI passes (never a remembered one, which may have been destroyed since).
    collect_dropped(l, std::ptr::null_mut(), 0);
    write_clock_pair();
    // How much a process that ends without its final flush (SIGKILL, _exit) may lose: what CUPTI held since.
    if let Some(seg) = state::segment() {
        let h = seg.header();
        h.last_flush_ns.store(crate::clock::monotonic_ns(), Ordering::Relaxed);
        h.flush_period_ms.store(flush_period().as_millis() as u32, Ordering::Relaxed);
    }
}

/// Adds CUPTI's dropped-record count for (context, stream) to the segment (reading it resets it in CUPTI).
pub fn collect_dropped(l: &Loaded, ctx: c::CUcontext, stream: u32) {
    let mut dropped = 0usize;
    let r = match activity_v2() {
        // SAFETY: a plain CUPTI query with a valid out-pointer, for our subscriber in multi-subscriber mode.
        Some((v2, sub)) => unsafe { (v2.get_num_dropped_records)(sub, ctx, stream, &mut dropped) },
        // SAFETY: a plain CUPTI query with a valid out-pointer.
        None => unsafe { (l.api.activity_get_num_dropped_records)(ctx, stream, &mut dropped) },
    };
    if r == c::CUPTI_SUCCESS && dropped > 0 {
        if let Some(seg) = state::segment() {
            seg.header().cupti_dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        }
    }
}

/// The flush at process exit (atexit): forced, so that nothing finished is left behind.
pub fn final_flush() {
    record_devices_once();
    flush_settled(true);
}

static DEVICES_RECORDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Each attach window is a trace of its own: its device facts are recorded at its start (CUDA is up by then).
pub fn record_devices_now() {
    DEVICES_RECORDED.store(true, Ordering::Release);
    let _ = std::panic::catch_unwind(crate::devices::record);
}

/// Device facts, from the flush thread once CUDA is up, or at exit for programs shorter than a flush period.
fn record_devices_once() {
    if loaded().is_some() && !DEVICES_RECORDED.swap(true, Ordering::AcqRel) {
        let _ = std::panic::catch_unwind(crate::devices::record);
    }
}

/// Writes (CUPTI time, CLOCK_MONOTONIC, CLOCK_REALTIME) so the collector can map device time to host time. Of
/// three readings it keeps the one bracketed most tightly by its two monotonic reads (a thread descheduled
/// between them would shift the pair by up to the gap).
pub fn write_clock_pair() {
    let Some(l) = loaded() else { return };
    let _cupti = calls_shared();
    let mut best: Option<(u64, u64, u64)> = None; // (gap, cupti, monotonic midpoint)
    for _ in 0..3 {
        let mono0 = clock::monotonic_ns();
        let mut cupti_ts = 0u64;
        // SAFETY: valid out-pointer.
        if unsafe { (l.api.get_timestamp)(&mut cupti_ts) } != c::CUPTI_SUCCESS {
            return;
        }
        let mono1 = clock::monotonic_ns();
        let gap = mono1.saturating_sub(mono0);
        if best.is_none_or(|(g, _, _)| gap < g) {
            best = Some((gap, cupti_ts, mono0 / 2 + mono1 / 2));
        }
    }
    let Some((_, cupti_ts, mono)) = best else { return };
    let ev =
        RawEvent::clock_pair(ClockPair { cupti_ns: cupti_ts, monotonic_ns: mono, realtime_ns: clock::realtime_ns() });
    // Through the delivery ring, as device records: the flush thread holds no ring of its own when application
    // threads have taken them all, and a clock pair lost would leave device time less well aligned.
    crate::thread_rings::delivery().push(ev);
}
