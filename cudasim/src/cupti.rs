//! The simulator's CUPTI: one subscriber, per-callback enables, API enter/exit dispatch with correlation ids,
//! and activity buffers delivered through the client's request/complete callbacks, behaving like the release
//! `CUDASIM_CUPTI_VERSION` names (`release.rs`): its version, record layouts, buffer rules and clock.

use crate::activity::{cupti_now, flush, injected_failure, BUFFERS, DROPPED, TIMESTAMP_CALLBACK};
use crate::records::record_size;
use crate::release::{self, Release};
use crate::{c, guard};
use parking_lot::RwLock;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

const MAX_CBID: usize = 1024;

struct Subscriber {
    callback: c::CUpti_CallbackFunc,
    userdata: usize,
}

static SUBSCRIBER: RwLock<Option<Subscriber>> = RwLock::new(None);
static ENABLED: [RwLock<[bool; MAX_CBID]>; 2] = [RwLock::new([false; MAX_CBID]), RwLock::new([false; MAX_CBID])];
static ACTIVITY_KINDS: AtomicU64 = AtomicU64::new(0);
/// Held while records are appended or buffers handed over, so buffers reach the client whole and in order.
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
    ret = crate::device::sticky_error(domain, cbid).unwrap_or(ret);
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

/// cuptiFinalize was called: no more records.
pub(crate) fn finalized() -> bool {
    FINALIZED.load(Ordering::Relaxed)
}

pub(crate) fn activity_enabled(kind: c::CUpti_ActivityKind) -> bool {
    kind < 64 && ACTIVITY_KINDS.load(Ordering::Relaxed) & (1 << kind) != 0
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
