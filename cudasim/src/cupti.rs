//! The simulator's CUPTI: one subscriber, per-callback enables, API enter/exit dispatch with correlation ids,
//! and activity buffers delivered through the client's request/complete callbacks, behaving like the release
//! `CUDASIM_CUPTI_VERSION` names (`release.rs`): its version, record layouts, buffer rules and clock.

use crate::records::{record_size, SimRecord};
use crate::release::{self, Release};
use crate::{c, guard, now_ns};
use crossbeam_channel::{unbounded, Sender};
use once_cell::sync::Lazy;
use parking_lot::{Mutex, RwLock};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const MAX_CBID: usize = 1024;

struct Subscriber {
    callback: c::CUpti_CallbackFunc,
    userdata: usize,
}

struct Buffers {
    request: c::CUpti_BuffersCallbackRequestFunc,
    complete: c::CUpti_BuffersCallbackCompleteFunc,
    /// Buffers being filled, (thread key, (buffer, size, used)): one per thread that produces records where the
    /// release allocates per-thread buffers (13.x default), else one (key 0).
    current: Vec<(u64, (usize, usize, usize))>,
}

/// A kernel running on a simulated device: a forced flush hands it over unfinished (end 0), as CUPTI's forced
/// flush does with records still being written (cupti_activity.h, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), and then
/// it is not delivered again when it completes.
struct Running {
    token: u64,
    record: SimRecord,
    delivered: bool,
}

static SUBSCRIBER: RwLock<Option<Subscriber>> = RwLock::new(None);
static ENABLED: [RwLock<[bool; MAX_CBID]>; 2] = [RwLock::new([false; MAX_CBID]), RwLock::new([false; MAX_CBID])];
static ACTIVITY_KINDS: AtomicU64 = AtomicU64::new(0);
/// Held while records are appended or buffers handed over, so buffers reach the client whole and in order.
static BUFFERS: Mutex<Buffers> = Mutex::new(Buffers { request: None, complete: None, current: Vec::new() });
static RUNNING: Mutex<Vec<Running>> = Mutex::new(Vec::new());
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);
/// The client's timestamp callback (`cuptiActivityRegisterTimestampCallback`), as a function address; 0 = none.
static TIMESTAMP_CALLBACK: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicUsize = AtomicUsize::new(0);
static CORRELATION: AtomicU32 = AtomicU32::new(0);
static FINALIZED: AtomicBool = AtomicBool::new(false);
/// Callback names by domain and cbid, registered by the first call of each API (for cuptiGetCallbackName).
static NAMES: [[AtomicPtr<c_char>; MAX_CBID]; 2] =
    [const { [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CBID] }; 2];

thread_local! {
    /// Correlation id of the outermost API call on this thread (what the activity records carry).
    static OUTER_CORRELATION: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The release being modelled.
pub(crate) fn rel() -> Release {
    release::current()
}

/// CUPTI's clock: the registered timestamp callback, else CLOCK_REALTIME ("Linux and Android use
/// clock_gettime(CLOCK_REALTIME, ..)", cuptiActivityRegisterTimestampCallback in cupti_activity.h).
fn cupti_now() -> u64 {
    let f = TIMESTAMP_CALLBACK.load(Ordering::Acquire);
    if f != 0 {
        // SAFETY: the address of the client's `uint64_t (*)(void)` callback, registered through the CUPTI API.
        let f = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> u64>(f) };
        // SAFETY: the client's callback takes no arguments.
        return unsafe { f() };
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let realtime = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    realtime.wrapping_add_signed(slew_ns())
}

/// `CUDASIM_REALTIME_SLEW_PPM`: CLOCK_REALTIME drifts against CLOCK_MONOTONIC by this many parts per million, as
/// when NTP slews it ("CLOCK_REALTIME ... is affected by ... the incremental adjustments performed by adjtime(3)
/// and NTP", clock_gettime(2)); ntpd slews by up to 500 ppm, tests exaggerate it so a short run shows the effect.
fn slew_ns() -> i64 {
    static PPM: Lazy<Option<(i64, u64)>> = Lazy::new(|| {
        let ppm: i64 = std::env::var("CUDASIM_REALTIME_SLEW_PPM").ok()?.trim().parse().ok()?;
        Some((ppm, now_ns()))
    });
    PPM.map_or(0, |(ppm, t0)| (now_ns().saturating_sub(t0) as i128 * ppm as i128 / 1_000_000) as i64)
}

/// `CUDASIM_FAIL=<CUPTI function>`: that entry point fails with CUPTI_ERROR_UNKNOWN (fault injection, to test how
/// clients clean up after a setup step fails).
fn injected_failure(name: &str) -> bool {
    static FAIL: Lazy<Option<String>> = Lazy::new(|| std::env::var("CUDASIM_FAIL").ok());
    FAIL.as_deref() == Some(name)
}

/// Moves a simulated-device time (CLOCK_MONOTONIC) onto CUPTI's clock, as CUPTI converts GPU timestamps to CPU
/// time when it post-processes records (the documentation of the timestamp callback); 0 stays 0.
fn to_cupti_time(record: SimRecord) -> SimRecord {
    let offset = cupti_now() as i64 - now_ns() as i64;
    record.map_times(|t| if t == 0 { 0 } else { t.wrapping_add_signed(offset) })
}

fn domain_index(domain: c::CUpti_CallbackDomain) -> Option<usize> {
    match domain {
        c::CUPTI_CB_DOMAIN_DRIVER_API => Some(0),
        c::CUPTI_CB_DOMAIN_RUNTIME_API => Some(1),
        _ => None,
    }
}

/// Correlation id that activity records of work issued now should carry.
pub(crate) fn current_correlation() -> u32 {
    OUTER_CORRELATION.with(|c| c.get())
}

/// Runs an API call with CUPTI enter/exit callbacks around `body`, as the real runtime and driver do.
pub(crate) fn api_call<P>(
    domain: c::CUpti_CallbackDomain,
    cbid: u32,
    name: &'static CStr,
    params: &P,
    symbol: *const c_char,
    body: impl FnOnce() -> u32,
) -> u32 {
    let correlation = CORRELATION.fetch_add(1, Ordering::Relaxed) + 1;
    let outer = OUTER_CORRELATION.with(|c| {
        let was = c.get();
        if was == 0 {
            c.set(correlation);
        }
        was == 0
    });
    if let Some(slot) = domain_index(domain).and_then(|d| NAMES[d].get(cbid as usize)) {
        slot.store(name.as_ptr() as *mut c_char, Ordering::Relaxed);
    }
    let enabled = domain_index(domain).is_some_and(|d| ENABLED[d].read().get(cbid as usize).copied().unwrap_or(false));
    let subscriber = if enabled { SUBSCRIBER.read().as_ref().map(|s| (s.callback, s.userdata)) } else { None };
    let mut correlation_data = 0u64;
    let mut ret = 0u32;
    let mut data = c::CUpti_CallbackData {
        callbackSite: c::CUPTI_API_ENTER,
        functionName: name.as_ptr(),
        functionParams: params as *const P as *const c_void,
        functionReturnValue: std::ptr::null_mut(),
        symbolName: symbol,
        context: 1usize as c::CUcontext,
        contextUid: 1,
        correlationData: &mut correlation_data,
        correlationId: correlation,
    };
    if let Some((Some(cb), userdata)) = subscriber {
        // SAFETY: the subscriber registered this C callback; `data` and the params outlive the call.
        unsafe { cb(userdata as *mut c_void, domain, cbid, &data as *const _ as *const c_void) };
    }
    ret = body().max(ret);
    if let Some((Some(cb), userdata)) = subscriber {
        data.callbackSite = c::CUPTI_API_EXIT;
        data.functionReturnValue = &mut ret as *mut u32 as *mut c_void;
        // SAFETY: as above; the return value pointer is valid for the call.
        unsafe { cb(userdata as *mut c_void, domain, cbid, &data as *const _ as *const c_void) };
    }
    if outer {
        OUTER_CORRELATION.with(|c| c.set(0));
    }
    ret
}

pub(crate) fn activity_enabled(kind: c::CUpti_ActivityKind) -> bool {
    kind < 64 && ACTIVITY_KINDS.load(Ordering::Relaxed) & (1 << kind) != 0
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
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}

/// Appends a record to the producing thread's activity buffer, handing full buffers to the client.
pub(crate) fn emit(rec: SimRecord) {
    if !activity_enabled(rec.activity_kind()) || FINALIZED.load(Ordering::Relaxed) {
        return;
    }
    let release = rel();
    let rec = to_cupti_time(rec);
    let size = record_size(rec.activity_kind(), &release);
    let key = thread_key();
    let mut st = BUFFERS.lock();
    for _ in 0..2 {
        if let Some(i) = st.current.iter().position(|(k, _)| *k == key) {
            let (buf, cap, used) = st.current[i].1;
            if used + size <= cap {
                // SAFETY: the client gave us `cap` bytes at `buf`; [used, used + size) is inside and unused.
                unsafe { rec.write(buf as *mut u8, used, &release) };
                st.current[i].1 = (buf, cap, used + size);
                return;
            }
            let full = st.current.swap_remove(i).1;
            deliver(&st, full);
        }
        let Some(request) = st.request else { break };
        let (mut buf, mut cap, mut max) = (std::ptr::null_mut::<u8>(), 0usize, 0usize);
        // SAFETY: the client's request callback fills the three out-parameters.
        unsafe { request(&mut buf, &mut cap, &mut max) };
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
        st.current.push((key, (buf as usize, cap, 0)));
    }
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// Hands a full buffer to the client's completion callback on CUPTI's own worker thread, as the real library
/// does outside flushes, so the thread that filled it carries on (and no lock is held while the client works).
fn deliver(st: &Buffers, b: (usize, usize, usize)) {
    let Some(complete) = st.complete else { return };
    /// (completion callback address, (buffer, size, valid bytes))
    type Delivery = (usize, (usize, usize, usize));
    static WORKER: Lazy<Option<Sender<Delivery>>> = Lazy::new(|| {
        let (tx, rx) = unbounded::<Delivery>();
        let spawned = std::thread::Builder::new().name("cudasim-cupti-worker".into()).spawn(move || {
            for (complete, b) in rx {
                call_complete(complete, b);
                IN_DELIVERY.fetch_sub(1, Ordering::AcqRel);
            }
        });
        spawned.ok().map(|_| tx)
    });
    IN_DELIVERY.fetch_add(1, Ordering::AcqRel);
    let sent = WORKER.as_ref().is_some_and(|tx| tx.send((complete as usize, b)).is_ok());
    if !sent {
        IN_DELIVERY.fetch_sub(1, Ordering::AcqRel);
        call_complete(complete as usize, b);
    }
}

/// Buffers handed to the worker and not yet returned to the client.
static IN_DELIVERY: AtomicUsize = AtomicUsize::new(0);

fn call_complete(complete: usize, (buf, cap, used): (usize, usize, usize)) {
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
    let (complete, pending) = {
        let mut st = BUFFERS.lock();
        let all = std::mem::take(&mut st.current);
        let (full, empty): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, b)| b.2 > 0);
        st.current = empty; // nothing in them yet: keep filling them
        (st.complete, full)
    };
    if let Some(complete) = complete {
        for (_, b) in pending {
            call_complete(complete as usize, b);
        }
    }
}

macro_rules! cupti_entry {
    (fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        /// # Safety
        /// Called from C with the arguments documented for this CUPTI function.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c::CUptiResult {
            guard(c::CUPTI_ERROR_UNKNOWN, || $body)
        }
    };
}

cupti_entry!(
    fn cuptiGetVersion(version: *mut u32) {
        if version.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        // SAFETY: non-null out-parameter from the caller.
        unsafe { *version = rel().api_version };
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiGetResultString(result: c::CUptiResult, out: *mut *const c_char) {
        if out.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        let s: &'static CStr = match result {
            c::CUPTI_SUCCESS => c"CUPTI_SUCCESS",
            c::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => c"CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
            c::CUPTI_ERROR_INVALID_PARAMETER => c"CUPTI_ERROR_INVALID_PARAMETER",
            c::CUPTI_ERROR_INVALID_KIND => c"CUPTI_ERROR_INVALID_KIND",
            c::CUPTI_ERROR_MAX_LIMIT_REACHED => c"CUPTI_ERROR_MAX_LIMIT_REACHED",
            _ => c"CUPTI_ERROR_UNKNOWN",
        };
        // SAFETY: non-null out-parameter; the string is static.
        unsafe { *out = s.as_ptr() };
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiSubscribe(handle: *mut c::CUpti_SubscriberHandle, callback: c::CUpti_CallbackFunc, userdata: *mut c_void) {
        if handle.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        let mut sub = SUBSCRIBER.write();
        if sub.is_some() {
            return c::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
        }
        *sub = Some(Subscriber { callback, userdata: userdata as usize });
        // SAFETY: non-null out-parameter; the handle is an opaque non-null token.
        unsafe { *handle = 1usize as c::CUpti_SubscriberHandle };
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiUnsubscribe(_handle: c::CUpti_SubscriberHandle) {
        *SUBSCRIBER.write() = None;
        for d in &ENABLED {
            *d.write() = [false; MAX_CBID];
        }
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiEnableDomain(enable: u32, _handle: c::CUpti_SubscriberHandle, domain: c::CUpti_CallbackDomain) {
        match domain_index(domain) {
            Some(d) => {
                *ENABLED[d].write() = [enable != 0; MAX_CBID];
                c::CUPTI_SUCCESS
            }
            // Resource, synchronize, NVTX and state domains exist in CUPTI; the simulator never raises them.
            None if domain < c::CUPTI_CB_DOMAIN_SIZE && domain != 0 => c::CUPTI_SUCCESS,
            None => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiEnableCallback(
        enable: u32,
        _handle: c::CUpti_SubscriberHandle,
        domain: c::CUpti_CallbackDomain,
        cbid: u32,
    ) {
        match (domain_index(domain), (cbid as usize) < MAX_CBID) {
            (Some(d), true) => {
                ENABLED[d].write()[cbid as usize] = enable != 0;
                c::CUPTI_SUCCESS
            }
            _ => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiGetCallbackName(domain: c::CUpti_CallbackDomain, cbid: u32, name: *mut *const c_char) {
        if name.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        let found = domain_index(domain)
            .and_then(|d| NAMES[d].get(cbid as usize))
            .map(|p| p.load(Ordering::Relaxed))
            .filter(|p| !p.is_null());
        match found {
            Some(p) => {
                // SAFETY: non-null out-parameter; registered names are static C strings.
                unsafe { *name = p };
                c::CUPTI_SUCCESS
            }
            None => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiActivityEnable(kind: c::CUpti_ActivityKind) {
        match kind {
            c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
            | c::CUPTI_ACTIVITY_KIND_KERNEL
            | c::CUPTI_ACTIVITY_KIND_MEMCPY
            | c::CUPTI_ACTIVITY_KIND_MEMSET
            | c::CUPTI_ACTIVITY_KIND_MEMORY2
            | c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION
            | c::CUPTI_ACTIVITY_KIND_OVERHEAD => {
                ACTIVITY_KINDS.fetch_or(1 << kind, Ordering::Relaxed);
                c::CUPTI_SUCCESS
            }
            _ => c::CUPTI_ERROR_NOT_SUPPORTED,
        }
    }
);

cupti_entry!(
    fn cuptiActivityDisable(kind: c::CUpti_ActivityKind) {
        if kind < 64 {
            ACTIVITY_KINDS.fetch_and(!(1 << kind), Ordering::Relaxed);
        }
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiActivityRegisterCallbacks(
        request: c::CUpti_BuffersCallbackRequestFunc,
        complete: c::CUpti_BuffersCallbackCompleteFunc,
    ) {
        if request.is_none() || complete.is_none() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        if injected_failure("cuptiActivityRegisterCallbacks") {
            return c::CUPTI_ERROR_UNKNOWN;
        }
        let mut st = BUFFERS.lock();
        st.request = request;
        st.complete = complete;
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiActivityFlushAll(flag: u32) {
        flush(flag & c::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED != 0);
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiActivityGetNextRecord(buffer: *mut u8, valid: usize, record: *mut *mut c::CUpti_Activity) {
        if buffer.is_null() || record.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        // SAFETY: `record` is the caller's cursor: null to start, else a record we returned from this buffer.
        let cur = unsafe { *record } as *mut u8;
        let next = if cur.is_null() {
            0
        } else {
            // SAFETY: `cur` points at a record header inside the buffer (we returned it).
            let kind = unsafe { (*(cur as *const c::CUpti_Activity)).kind };
            (cur as usize - buffer as usize) + record_size(kind, &rel())
        };
        if next + 4 > valid {
            return c::CUPTI_ERROR_MAX_LIMIT_REACHED;
        }
        // SAFETY: next < valid, inside the buffer the caller owns.
        unsafe { *record = buffer.add(next) as *mut c::CUpti_Activity };
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiActivityGetNumDroppedRecords(_ctx: c::CUcontext, _stream: u32, dropped: *mut usize) {
        if dropped.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        // SAFETY: non-null out-parameter. Reading resets the count, as in CUPTI.
        unsafe { *dropped = DROPPED.swap(0, Ordering::Relaxed) };
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiGetTimestamp(ts: *mut u64) {
        if ts.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        // SAFETY: non-null out-parameter. Normalised like the records' timestamps (cupti_activity.h).
        unsafe { *ts = cupti_now() };
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiSetThreadIdType(_kind: c::CUpti_ActivityThreadIdType) {
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiFinalize() {
        flush(false);
        FINALIZED.store(true, Ordering::Relaxed);
        *SUBSCRIBER.write() = None;
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiActivityRegisterTimestampCallback(callback: c::CUpti_TimestampCallbackFunc) {
        match callback {
            Some(f) => {
                TIMESTAMP_CALLBACK.store(f as usize, Ordering::Release);
                c::CUPTI_SUCCESS
            }
            None => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

// The simulator is one library for every release, so it cannot leave out the symbols a release lacks; it refuses
// them instead, which the client sees as the entry point being unusable.
cupti_entry!(
    fn cuptiSubscribe_v2(
        handle: *mut c::CUpti_SubscriberHandle,
        callback: c::CUpti_CallbackFunc,
        userdata: *mut c_void,
        params: *mut c::CUpti_SubscriberParams,
    ) {
        if !rel().has_subscribe_v2() {
            return c::CUPTI_ERROR_NOT_SUPPORTED;
        }
        // SAFETY: params is null or the caller's CUpti_SubscriberParams (cupti_callbacks.h).
        let params = unsafe { params.as_mut() };
        if params.as_ref().is_some_and(|p| p.structSize == 0) {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        // SAFETY: forwarded from our caller.
        let r = unsafe { cuptiSubscribe(handle, callback, userdata) };
        if r == c::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
            // "the name of the incompatible tool or the existing CUPTI subscriber will be written to this location"
            if let Some(p) = params.filter(|p| !p.oldSubscriberName.is_null() && p.oldSubscriberSize > 0) {
                let name = OTHER_SUBSCRIBER_NAME.to_bytes();
                let n = name.len().min(p.oldSubscriberSize - 1);
                // SAFETY: the caller's buffer holds oldSubscriberSize bytes; we write n + 1 <= that many.
                unsafe {
                    std::ptr::copy_nonoverlapping(name.as_ptr(), p.oldSubscriberName as *mut u8, n);
                    *p.oldSubscriberName.add(n) = 0;
                }
            }
        }
        r
    }
);

/// What a v2 subscriber is told holds CUPTI when the subscription is refused.
const OTHER_SUBSCRIBER_NAME: &CStr = c"CUPTI for cudasim-test-subscriber";

cupti_entry!(
    fn cuptiActivityGetStructSize(kind: c::CUpti_ActivityKind, version: u32, size: *mut usize) {
        if !rel().has_struct_size() {
            return c::CUPTI_ERROR_NOT_SUPPORTED;
        }
        if size.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        if version != 0 && version < 130000 {
            return c::CUPTI_ERROR_NOT_SUPPORTED;
        }
        // SAFETY: non-null out-parameter.
        unsafe { *size = record_size(kind, &rel()) };
        c::CUPTI_SUCCESS
    }
);
