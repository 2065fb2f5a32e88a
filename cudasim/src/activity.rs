//! The simulator's CUPTI activity buffers: records laid out in the modelled release's layouts (`records.rs`),
//! stamped with CUPTI's clock, filled into the client's buffers (one per producing thread where the release
//! allocates per-thread buffers), completed on a worker thread like CUPTI's own, and flushed on request.

use crate::api_records::{self, ApiSet};
use crate::c;
use crate::cupti_state::{activity_enabled, finalized, graph_level};
use crate::now_ns;
use crate::records::{record_size, SimRecord};
use crate::release::current as rel;
use crossbeam_channel::{unbounded, Sender};
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One client's buffers: the legacy (global) registration, or one subscriber's (v2, 13.5+).
pub(crate) struct Buffers {
    /// The client's request and completion callbacks (function addresses; 0 = none registered), of the v2
    /// signatures (`CUpti_BuffersCallbackRequestFunc_v2`, `..CompleteFunc_v2`) when `v2`.
    pub(crate) request: usize,
    pub(crate) complete: usize,
    pub(crate) v2: bool,
    /// Buffers being filled, (thread key, (buffer, size, used)): one per thread that produces records where the
    /// release allocates per-thread buffers (13.x default), else one (key 0).
    current: Vec<(u64, (usize, usize, usize))>,
}

/// A subscriber using the per-subscriber Activity API (`cuptiActivityEnable_v2` and friends, CUPTI 13.5): it
/// gets its own copy of every record of the kinds it enabled, in its own buffers.
struct Consumer {
    handle: usize,
    kinds: u64,
    /// This subscriber selected graph-level tracing (see `cupti_state::graph_level`): sticky.
    graph_level: bool,
    /// The calls it wants API records of (`api_records.rs`).
    api: ApiSet,
    bufs: Buffers,
    dropped: usize,
}

static CONSUMERS: Mutex<Vec<Consumer>> = Mutex::new(Vec::new());
/// The kinds some per-subscriber consumer enabled (their union), readable without the lock on every API call.
static CONSUMER_KINDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn publish_kinds(all: &[Consumer]) {
    crate::api_records::set_any_consumer(all.iter().any(|c| c.api.any()));
    let kinds = all.iter().fold(0, |k, c| k | c.kinds);
    if kinds != 0 {
        crate::cupti_state::kind_was_enabled();
    }
    CONSUMER_KINDS.store(kinds, Ordering::Relaxed);
}

/// Whether `kind` is enabled at all: through the legacy Activity API or by a per-subscriber consumer.
pub(crate) fn enabled_anywhere(kind: c::CUpti_ActivityKind) -> bool {
    activity_enabled(kind) || (kind < 64 && CONSUMER_KINDS.load(Ordering::Relaxed) & (1 << kind) != 0)
}

/// Runs `f` on `handle`'s consumer (made on first use), under one lock, and publishes the kinds it leaves enabled.
fn with_consumer<R>(handle: usize, f: impl FnOnce(&mut Consumer) -> R) -> R {
    let mut all = CONSUMERS.lock();
    let i = match all.iter().position(|c| c.handle == handle) {
        Some(i) => i,
        None => {
            let bufs = Buffers { request: 0, complete: 0, v2: true, current: Vec::new() };
            all.push(Consumer { handle, kinds: 0, graph_level: false, api: ApiSet::default(), bufs, dropped: 0 });
            all.len() - 1
        }
    };
    let r = f(&mut all[i]);
    publish_kinds(&all);
    r
}

/// `cuptiActivityEnable_v2` / `Disable_v2` for `handle`.
pub(crate) fn set_kind_v2(handle: usize, kind: c::CUpti_ActivityKind, on: bool) {
    if kind >= 64 {
        return;
    }
    with_consumer(handle, |c| {
        c.graph_level |= on && kind == c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
        if let Some(domain) = api_records::domain_of_kind(kind) {
            c.api.set_all(domain, on);
        }
        if on {
            c.kinds |= 1 << kind;
        } else {
            c.kinds &= !(1 << kind);
        }
    });
}

/// `cuptiActivityEnableRuntimeApi_v2` / `DriverApi_v2` for `handle`: API records of one call of `domain`.
pub(crate) fn set_api_v2(handle: usize, domain: usize, cbid: u32, on: bool) {
    with_consumer(handle, |c| c.api.set(domain, cbid, on));
}

/// Whether some client wants an API record of `cbid` in `domain` (driver 0, runtime 1).
pub(crate) fn api_record_wanted(domain: usize, cbid: u32) -> bool {
    api_records::maybe_wanted()
        && (api_records::legacy_wants(domain, cbid)
            || api_records::any_consumer() && CONSUMERS.lock().iter().any(|c| c.api.wants(domain, cbid)))
}

/// `cuptiActivityRegisterCallbacks_v2` for `handle`.
pub(crate) fn register_v2(handle: usize, request: usize, complete: usize) {
    with_consumer(handle, |c| {
        c.bufs.request = request;
        c.bufs.complete = complete;
    });
}

/// `cuptiActivityGetNumDroppedRecords_v2` for `handle` (reading resets it).
pub(crate) fn take_dropped_v2(handle: usize) -> usize {
    with_consumer(handle, |c| std::mem::take(&mut c.dropped))
}

/// A subscriber left: its records stop (what it had not flushed is lost, as with CUPTI).
pub(crate) fn forget_subscriber(handle: usize) {
    let mut all = CONSUMERS.lock();
    all.retain(|c| c.handle != handle);
    publish_kinds(&all);
}

/// A kernel running on a simulated device: a forced flush hands it over unfinished (end 0), as CUPTI's forced
/// flush does with records still being written (cupti_activity.h, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), and then
/// it is not delivered again when it completes.
struct Running {
    token: u64,
    record: SimRecord,
    delivered: bool,
}

pub(crate) static BUFFERS: Mutex<Buffers> =
    Mutex::new(Buffers { request: 0, complete: 0, v2: false, current: Vec::new() });
static RUNNING: Mutex<Vec<Running>> = Mutex::new(Vec::new());
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);
/// The client's timestamp callback (`cuptiActivityRegisterTimestampCallback`), as a function address; 0 = none.
pub(crate) static TIMESTAMP_CALLBACK: AtomicUsize = AtomicUsize::new(0);
pub(crate) static DROPPED: AtomicUsize = AtomicUsize::new(0);

/// CUPTI's clock: the registered timestamp callback, else CLOCK_REALTIME ("Linux and Android use
/// clock_gettime(CLOCK_REALTIME, ..)", cuptiActivityRegisterTimestampCallback in cupti_activity.h).
pub(crate) fn cupti_now() -> u64 {
    let f = TIMESTAMP_CALLBACK.load(Ordering::Acquire);
    if f != 0 {
        // SAFETY: the address of the client's `uint64_t (*)(void)` callback, registered through the CUPTI API.
        let f = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> u64>(f) };
        // SAFETY: the client's callback takes no arguments.
        return unsafe { f() };
    }
    realtime_raw().wrapping_add_signed(slew_at(now_ns()))
}

fn realtime_raw() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CUDASIM_REALTIME_SLEW_PPM`: CLOCK_REALTIME drifts against CLOCK_MONOTONIC by this many parts per million, as
/// when NTP slews it ("CLOCK_REALTIME ... is affected by ... the incremental adjustments performed by adjtime(3)
/// and NTP", clock_gettime(2)); ntpd slews by up to 500 ppm, tests exaggerate it so a short run shows the effect.
/// Returns the drift accumulated at monotonic time `t`.
fn slew_at(t: u64) -> i64 {
    static PPM: Lazy<Option<(i64, u64)>> = Lazy::new(|| {
        let ppm: i64 = std::env::var("CUDASIM_REALTIME_SLEW_PPM").ok()?.trim().parse().ok()?;
        Some((ppm, now_ns()))
    });
    PPM.map_or(0, |(ppm, t0)| ((t as i128 - t0 as i128) * ppm as i128 / 1_000_000) as i64)
}

/// `CUDASIM_SLOW_FLUSH_MS=N`: a default (periodic) flush takes N ms between taking its buffers and handing them
/// over, as a flush thread descheduled on a loaded machine does. cupti_activity.h describes a periodic flush on
/// a thread of its own beside a forced flush at exit, and promises neither that one flush waits for another's
/// deliveries nor that it does not; cudasim takes the weaker reading, so clients must not rely on it.
fn slow_flush() -> Option<std::time::Duration> {
    static MS: Lazy<Option<u64>> =
        Lazy::new(|| std::env::var("CUDASIM_SLOW_FLUSH_MS").ok().and_then(|v| v.trim().parse().ok()));
    MS.map(std::time::Duration::from_millis)
}

/// `CUDASIM_FAIL=<CUPTI function>`: that entry point fails with CUPTI_ERROR_UNKNOWN (fault injection, to test how
/// clients clean up after a setup step fails).
pub(crate) fn injected_failure(name: &str) -> bool {
    static FAIL: Lazy<Option<String>> = Lazy::new(|| std::env::var("CUDASIM_FAIL").ok());
    FAIL.as_deref() == Some(name)
}

/// Moves a simulated-device time (CLOCK_MONOTONIC) onto CUPTI's clock, as CUPTI converts GPU timestamps to CPU
/// time when it post-processes records (the documentation of the timestamp callback); 0 stays 0.
/// Each timestamp gets CUPTI's clock as it read at that moment: the callback's offset (a steady clock), or
/// CLOCK_REALTIME's, including the slew accumulated by then.
fn to_cupti_time(record: SimRecord) -> SimRecord {
    let convert = cupti_time_converter();
    record.map_times(|t| if t == 0 { 0 } else { convert(t) })
}

/// The conversion of [`to_cupti_time`] as it stands now, for other device timestamps (PM samples).
pub(crate) fn cupti_time_converter() -> impl Fn(u64) -> u64 {
    let callback = TIMESTAMP_CALLBACK.load(Ordering::Acquire) != 0;
    // The offset between the device's clock and CUPTI's, read between two readings of the device's clock: of
    // three tries, the one bracketed most tightly (a thread descheduled between the two clocks would otherwise
    // shift every timestamp by the time it lost, milliseconds on a loaded machine, where a GPU's conversion is
    // exact).
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..3 {
        let before = now_ns();
        let other = if callback { cupti_now() } else { realtime_raw() };
        let after = now_ns();
        let gap = after.saturating_sub(before);
        if best.is_none_or(|(g, _)| gap < g) {
            best = Some((gap, other as i64 - (before / 2 + after / 2) as i64));
        }
    }
    let offset = best.map_or(0, |b| b.1);
    move |t: u64| if callback { t.wrapping_add_signed(offset) } else { t.wrapping_add_signed(offset + slew_at(t)) }
}

/// Marks a kernel as running on the device (see [`Running`]); returns the token for [`kernel_finished`].
pub(crate) fn kernel_started(record: SimRecord) -> u64 {
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    RUNNING.lock().push(Running { token, record, delivered: false });
    token
}

/// Emits a finished kernel's record, unless a forced flush already handed it over unfinished.
pub(crate) fn kernel_finished(token: u64, record: SimRecord) {
    let delivered = {
        let mut running = RUNNING.lock();
        let i = running.iter().position(|r| r.token == token);
        i.map(|i| running.swap_remove(i).delivered).unwrap_or(false)
    };
    if !delivered {
        emit(record);
    }
}

fn thread_key() -> u64 {
    if !rel().per_thread_buffers() {
        return 0;
    }
    // Cached per thread: a system call per record would be this simulator's own cost, not one CUPTI is known to
    // have (cudasim/src/timing.rs models CUPTI's measured costs; this is not one of them).
    thread_local! {
        // Through the system call: glibc's gettid() is 2.30's, newer than the wheels' glibc 2.28.
        // SAFETY: SYS_gettid takes no arguments and cannot fail.
        static TID: u64 = unsafe { libc::syscall(libc::SYS_gettid) as u64 };
    }
    TID.with(|t| *t)
}

/// Appends a record to the producing thread's activity buffer of every client that enabled its kind (the legacy
/// registration and each v2 subscriber), handing full buffers to the client.
pub(crate) fn emit(rec: SimRecord) {
    if finalized() {
        return;
    }
    let release = rel();
    // Device records carry the device's clock, converted here as CUPTI converts GPU timestamps; an API record is
    // stamped on CUPTI's clock already, on the calling thread, as CUPTI stamps a call.
    let rec = if rec.api_call().is_some() { rec } else { to_cupti_time(rec) };
    let kind = rec.activity_kind();
    let size = record_size(kind, &release);
    let key = thread_key();
    let node = rec.graph_node();
    // API records go by call (`api_records.rs`), every other record by kind.
    let api = rec.api_call();
    let legacy = match api {
        Some((domain, cbid)) => api_records::legacy_wants(domain, cbid),
        None => activity_enabled(kind) && !(node && graph_level()),
    };
    if legacy && !append(&mut BUFFERS.lock(), &rec, size, key) {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    let any_consumer = match api {
        Some(_) => api_records::any_consumer(),
        None => kind < 64 && CONSUMER_KINDS.load(Ordering::Relaxed) & (1 << kind) != 0,
    };
    if !any_consumer {
        return;
    }
    let mut consumers = CONSUMERS.lock();
    let wants = |c: &Consumer| match api {
        Some((domain, cbid)) => c.api.wants(domain, cbid),
        None => kind < 64 && c.kinds & (1 << kind) != 0 && !(node && c.graph_level),
    };
    for c in consumers.iter_mut().filter(|c| wants(c)) {
        if !append(&mut c.bufs, &rec, size, key) {
            c.dropped += 1;
        }
    }
}

/// Writes `rec` into `st`'s buffer for thread `key`, asking the client for a new one when it is full; false when
/// no buffer could be had (the record is dropped).
fn append(st: &mut Buffers, rec: &SimRecord, size: usize, key: u64) -> bool {
    let release = rel();
    for _ in 0..2 {
        if let Some(i) = st.current.iter().position(|(k, _)| *k == key) {
            let (buf, cap, used) = st.current[i].1;
            if used + size <= cap {
                // SAFETY: the client gave us `cap` bytes at `buf`; [used, used + size) is inside and unused.
                unsafe { rec.write(buf as *mut u8, used, &release) };
                st.current[i].1 = (buf, cap, used + size);
                return true;
            }
            let full = st.current.swap_remove(i).1;
            deliver(st, full);
        }
        if st.request == 0 {
            break;
        }
        let (mut buf, mut cap, mut max) = (std::ptr::null_mut::<u8>(), 0usize, 0usize);
        if st.v2 {
            // SAFETY: a client's CUpti_BuffersCallbackRequestFunc_v2; it fills the three out-parameters.
            let request = unsafe {
                std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize, *mut c::CUpti_BufferCallbackRequestInfo),
                >(st.request)
            };
            let mut info = c::CUpti_BufferCallbackRequestInfo {
                structSize: std::mem::size_of::<c::CUpti_BufferCallbackRequestInfo>(),
            };
            // SAFETY: valid out-pointers and info for the call.
            unsafe { request(&mut buf, &mut cap, &mut max, &mut info) };
        } else {
            // SAFETY: the client's CUpti_BuffersCallbackRequestFunc; it fills the three out-parameters.
            let request = unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize)>(st.request)
            };
            // SAFETY: valid out-pointers for the call.
            unsafe { request(&mut buf, &mut cap, &mut max) };
        }
        if buf.is_null() && release.null_buffer_crashes() {
            // The real libcupti dereferences it (Kineto issue 1275): model the crash, loudly.
            eprintln!(
                "cudasim: CUPTI {} (API version {}) was handed a NULL activity buffer; the real library crashes here",
                release.name, release.api_version
            );
            std::process::abort();
        }
        if buf.is_null() || cap < size || !(buf as usize).is_multiple_of(8) {
            break;
        }
        // SAFETY: the client gave us `cap` bytes at `buf`.
        unsafe { api_records::received_buffer(buf, cap) };
        st.current.push((key, (buf as usize, cap, 0)));
    }
    false
}

/// Hands a full buffer to the client's completion callback on CUPTI's own worker thread, as the real library
/// does outside flushes, so the thread that filled it carries on (and no lock is held while the client works).
fn deliver(st: &Buffers, b: (usize, usize, usize)) {
    if st.complete == 0 {
        return;
    }
    /// (completion callback address, v2, (buffer, size, valid bytes))
    type Delivery = (usize, bool, (usize, usize, usize));
    static WORKER: Lazy<Option<Sender<Delivery>>> = Lazy::new(|| {
        let (tx, rx) = unbounded::<Delivery>();
        let spawned = std::thread::Builder::new().name("cudasim-cupti-worker".into()).spawn(move || {
            for (complete, v2, b) in rx {
                call_complete(complete, v2, b);
                IN_DELIVERY.fetch_sub(1, Ordering::AcqRel);
            }
        });
        spawned.ok().map(|_| tx)
    });
    IN_DELIVERY.fetch_add(1, Ordering::AcqRel);
    let sent = WORKER.as_ref().is_some_and(|tx| tx.send((st.complete, st.v2, b)).is_ok());
    if !sent {
        IN_DELIVERY.fetch_sub(1, Ordering::AcqRel);
        call_complete(st.complete, st.v2, b);
    }
}

/// Buffers handed to the worker and not yet returned to the client.
static IN_DELIVERY: AtomicUsize = AtomicUsize::new(0);

fn call_complete(complete: usize, v2: bool, (buf, cap, used): (usize, usize, usize)) {
    if v2 {
        // SAFETY: `complete` is a client's registered CUpti_BuffersCallbackCompleteFunc_v2.
        let complete = unsafe {
            std::mem::transmute::<
                usize,
                unsafe extern "C" fn(*mut u8, usize, usize, *mut c::CUpti_BufferCallbackCompleteInfo),
            >(complete)
        };
        // SAFETY: plain data; zeroed is valid (no record layouts).
        let mut info: c::CUpti_BufferCallbackCompleteInfo = unsafe { std::mem::zeroed() };
        info.structSize = std::mem::size_of::<c::CUpti_BufferCallbackCompleteInfo>();
        // SAFETY: returns the client's own buffer with the number of valid bytes, as CUPTI does.
        unsafe { complete(buf as *mut u8, cap, used, &mut info) };
        return;
    }
    // SAFETY: `complete` is the client's registered CUpti_BuffersCallbackCompleteFunc.
    let complete = unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(c::CUcontext, u32, *mut u8, usize, usize)>(complete)
    };
    // SAFETY: returns the client's own buffer with the number of valid bytes, as CUPTI does.
    unsafe { complete(std::ptr::null_mut(), 0, buf as *mut u8, cap, used) };
}

/// Flushes pending records. Kernels still running are not records yet, except under a forced flush, which hands
/// them over unfinished (end timestamp 0).
pub(crate) fn flush(forced: bool) {
    if forced {
        let unfinished: Vec<SimRecord> = RUNNING
            .lock()
            .iter_mut()
            .filter(|r| !r.delivered)
            .map(|r| {
                r.delivered = true;
                r.record
            })
            .collect();
        for r in unfinished {
            emit(r);
        }
    }
    // A flush returns only when every record so far reached the client: first the worker's queue, then the
    // partly filled buffers, on the flushing thread.
    while IN_DELIVERY.load(Ordering::Acquire) > 0 {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let take = |st: &mut Buffers| {
        let all = std::mem::take(&mut st.current);
        let (full, empty): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, b)| b.2 > 0);
        st.current = empty; // nothing in them yet: keep filling them
        (st.complete, st.v2, full)
    };
    let mut pending = vec![take(&mut BUFFERS.lock())];
    pending.extend(CONSUMERS.lock().iter_mut().map(|c| take(&mut c.bufs)));
    if let Some(pause) = slow_flush().filter(|_| !forced && pending.iter().any(|p| !p.2.is_empty())) {
        std::thread::sleep(pause);
    }
    for (complete, v2, full) in pending {
        if complete != 0 {
            for (_, b) in full {
                call_complete(complete, v2, b);
            }
        }
    }
}
