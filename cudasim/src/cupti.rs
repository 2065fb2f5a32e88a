//! The simulator's CUPTI: one subscriber, per-callback enables, API enter/exit dispatch with correlation ids,
//! and activity buffers delivered through the client's request/complete callbacks, behaving like the release
//! `CUDASIM_CUPTI_VERSION` names (`release.rs`): its version, record layouts, buffer rules and clock.

use crate::activity::{cupti_now, flush, injected_failure, BUFFERS, DROPPED, TIMESTAMP_CALLBACK};
use crate::c;
use crate::cupti_state;
use crate::records::{record_size, SimRecord};
use crate::release::{self, Release};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::subscribers::{self, MAX_CBID, MAX_DISPATCH};

/// Held while records are appended or buffers handed over, so buffers reach the client whole and in order.
static CORRELATION: AtomicU32 = AtomicU32::new(0);
/// Callback names by domain and cbid, registered by the first call of each API (for cuptiGetCallbackName).
static NAMES: [[AtomicPtr<c_char>; MAX_CBID]; 2] =
    [const { [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CBID] }; 2];

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
    let outer = cupti_state::enter_outer(correlation);
    if let Some(slot) = domain_index(domain).and_then(|d| NAMES[d].get(cbid as usize)) {
        slot.store(name.as_ptr() as *mut c_char, Ordering::Relaxed);
    }
    // Who gets each site is decided at that site: a subscriber that enables the callback while the call runs
    // (a tool attaching to a busy program) gets its exit without its enter, and its slot then holds the zero
    // CUPTI initialises it with. Seen on an H100 (CUDA 13.0): calls in flight when cuflight's agent subscribed
    // reached its exit callback with a zero start (issue 25).
    let targets_now = || match domain_index(domain) {
        Some(d) => subscribers::targets(d, cbid as usize),
        None => ([(None, 0, 0); MAX_DISPATCH], 0),
    };
    let (targets, n) = targets_now();
    crate::timing::callback_sites(n);
    if domain == c::CUPTI_CB_DOMAIN_RUNTIME_API
        && crate::activity::enabled_anywhere(c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)
    {
        crate::timing::runtime_call_with_sync_records();
    }
    // Each subscriber has its own slot shared by its enter and exit callbacks.
    let mut correlation_data = [0u64; MAX_DISPATCH];
    let mut ret = 0u32;
    let mut data = c::CUpti_CallbackData {
        callbackSite: c::CUPTI_API_ENTER,
        functionName: name.as_ptr(),
        functionParams: params as *const P as *const c_void,
        functionReturnValue: std::ptr::null_mut(),
        symbolName: symbol,
        context: 1usize as c::CUcontext,
        contextUid: 1,
        correlationData: std::ptr::null_mut(),
        correlationId: correlation,
    };
    for (i, &(cb, userdata, _)) in targets[..n].iter().enumerate() {
        if let Some(cb) = cb {
            data.correlationData = &mut correlation_data[i];
            // SAFETY: the subscriber registered this C callback; `data` and the params outlive the call.
            unsafe { cb(userdata as *mut c_void, domain, cbid, &data as *const _ as *const c_void) };
        }
    }
    // An API activity record: runtime calls, and the driver calls the program makes itself (`api_records.rs`).
    let api_record = domain_index(domain)
        .filter(|&d| (d == 1 || outer) && crate::activity::api_record_wanted(d, cbid))
        .map(|d| (d, cupti_now()));
    ret = body().max(ret);
    ret = crate::device::sticky_error(domain, cbid).unwrap_or(ret);
    data.callbackSite = c::CUPTI_API_EXIT;
    data.functionReturnValue = &mut ret as *mut u32 as *mut c_void;
    let (at_exit, n_exit) = targets_now();
    crate::timing::callback_sites(n_exit);
    for &(cb, userdata, handle) in &at_exit[..n_exit] {
        if let Some(cb) = cb {
            let mut fresh = 0u64;
            data.correlationData = match targets[..n].iter().position(|t| t.2 == handle) {
                Some(i) => &mut correlation_data[i],
                None => &mut fresh,
            };
            // SAFETY: as above; the return value pointer is valid for the call.
            unsafe { cb(userdata as *mut c_void, domain, cbid, &data as *const _ as *const c_void) };
        }
    }
    if let Some((d, start)) = api_record {
        let kind = if d == 1 { c::CUPTI_ACTIVITY_KIND_RUNTIME } else { c::CUPTI_ACTIVITY_KIND_DRIVER };
        let thread = crate::api_records::thread_id();
        let end = cupti_now();
        crate::activity::emit(SimRecord::Api { kind, cbid, start, end, thread, correlation, result: ret });
        crate::api_records::written();
    }
    if outer {
        cupti_state::leave_outer();
    }
    ret
}

/// The activity kinds the simulator produces records of.
fn supported_kind(kind: c::CUpti_ActivityKind) -> bool {
    matches!(
        kind,
        c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
            | c::CUPTI_ACTIVITY_KIND_KERNEL
            | c::CUPTI_ACTIVITY_KIND_MEMCPY
            | c::CUPTI_ACTIVITY_KIND_MEMSET
            | c::CUPTI_ACTIVITY_KIND_MEMORY2
            | c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION
            | c::CUPTI_ACTIVITY_KIND_OVERHEAD
            | c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE
            | c::CUPTI_ACTIVITY_KIND_RUNTIME
            | c::CUPTI_ACTIVITY_KIND_DRIVER
    )
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
            c::CUPTI_ERROR_INVALID_OPERATION => c"CUPTI_ERROR_INVALID_OPERATION",
            c::CUPTI_ERROR_INVALID_METRIC_NAME => c"CUPTI_ERROR_INVALID_METRIC_NAME",
            c::CUPTI_ERROR_HARDWARE_BUSY => c"CUPTI_ERROR_HARDWARE_BUSY",
            c::CUPTI_ERROR_NOT_SUPPORTED => c"CUPTI_ERROR_NOT_SUPPORTED",
            c::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES => c"CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
            c::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED => c"CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED",
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
        // The legacy entry point never asks for multi-subscriber mode.
        match subscribers::subscribe(callback, userdata as usize, None, false) {
            Ok((h, _)) => {
                // SAFETY: non-null out-parameter; the handle is an opaque non-null token.
                unsafe { *handle = h as c::CUpti_SubscriberHandle };
                c::CUPTI_SUCCESS
            }
            Err(_) => c::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
        }
    }
);

cupti_entry!(
    fn cuptiUnsubscribe(handle: c::CUpti_SubscriberHandle) {
        crate::activity::forget_subscriber(handle as usize);
        if subscribers::unsubscribe(handle as usize) {
            c::CUPTI_SUCCESS
        } else {
            c::CUPTI_ERROR_INVALID_PARAMETER
        }
    }
);

cupti_entry!(
    fn cuptiEnableDomain(enable: u32, handle: c::CUpti_SubscriberHandle, domain: c::CUpti_CallbackDomain) {
        match domain_index(domain) {
            Some(d) if subscribers::enable(handle as usize, d, None, enable != 0) => c::CUPTI_SUCCESS,
            Some(_) => c::CUPTI_ERROR_INVALID_PARAMETER,
            // Resource, synchronize, NVTX and state domains exist in CUPTI; the simulator never raises them.
            None if domain < c::CUPTI_CB_DOMAIN_SIZE && domain != 0 => c::CUPTI_SUCCESS,
            None => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiEnableCallback(enable: u32, handle: c::CUpti_SubscriberHandle, domain: c::CUpti_CallbackDomain, cbid: u32) {
        match (domain_index(domain), (cbid as usize) < MAX_CBID) {
            (Some(d), true) if subscribers::enable(handle as usize, d, Some(cbid as usize), enable != 0) => {
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
        if !supported_kind(kind) {
            return c::CUPTI_ERROR_NOT_SUPPORTED;
        }
        crate::timing::activity_enable();
        match crate::api_records::domain_of_kind(kind) {
            Some(domain) => crate::api_records::set_legacy(domain, None, true),
            None => cupti_state::set_kind(kind, true),
        }
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiActivityDisable(kind: c::CUpti_ActivityKind) {
        if let Some(domain) = crate::api_records::domain_of_kind(kind) {
            crate::api_records::set_legacy(domain, None, false);
        }
        cupti_state::set_kind(kind, false);
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
        st.request = request.map_or(0, |f| f as usize);
        st.complete = complete.map_or(0, |f| f as usize);
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
        unsafe { *record = buffer.wrapping_add(next) as *mut c::CUpti_Activity };
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
    fn cuptiSetThreadIdType(kind: c::CUpti_ActivityThreadIdType) {
        crate::api_records::set_thread_id_type(kind)
    }
);

cupti_entry!(
    fn cuptiFinalize() {
        flush(false);
        // Multi-subscriber mode: finalizing is a no-op while other subscribers remain (one tool must not tear
        // CUPTI down under another).
        if subscribers::count() > 1 {
            return c::CUPTI_SUCCESS;
        }
        cupti_state::finalize();
        crate::api_records::clear();
        subscribers::clear();
        crate::timing::cupti_finalized();
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

cupti_entry!(
    fn cuptiActivityEnableHWTrace(enable: u8) {
        crate::hw_trace::enable(enable != 0, cupti_state::any_kind_enabled())
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
        if handle.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        let name = params.as_ref().filter(|p| !p.subscriberName.is_null()).map(|p| {
            // SAFETY: subscriberName is the caller's NUL-terminated string.
            unsafe { CStr::from_ptr(p.subscriberName) }
        });
        let allow_multi = params.as_ref().is_some_and(|p| p.allowMultipleSubscribers == 1);
        let (r, other) = match subscribers::subscribe(callback, userdata as usize, name, allow_multi) {
            Ok((h, first)) => {
                // SAFETY: non-null out-parameter; the handle is an opaque non-null token.
                unsafe { *handle = h as c::CUpti_SubscriberHandle };
                (c::CUPTI_SUCCESS, first)
            }
            Err(holder) => (c::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, Some(holder)),
        };
        // Refused: "the name of the incompatible tool or the existing CUPTI subscriber will be written to this
        // location"; joined: "this will be the name of the first subscriber".
        if let (Some(p), Some(other)) =
            (params.filter(|p| !p.oldSubscriberName.is_null() && p.oldSubscriberSize > 0), other)
        {
            let name = other.to_bytes();
            let n = name.len().min(p.oldSubscriberSize - 1);
            // SAFETY: the caller's buffer holds oldSubscriberSize bytes; we write n + 1 <= that many.
            unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), p.oldSubscriberName as *mut u8, n) };
            // SAFETY: as above: the NUL, at n < oldSubscriberSize.
            unsafe { *p.oldSubscriberName.wrapping_add(n) = 0 };
        }
        r
    }
);

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

// The per-subscriber (v2) Activity API of CUPTI 13.5 (cupti_activity.h; CUPTI Python 13.5 notes: "New
// per-subscriber Activity APIs"): each subscriber enables its own kinds and gets its own buffers. Refused below
// 13.5, like any entry point a release lacks.
pub(crate) fn v2_subscriber(handle: c::CUpti_SubscriberHandle) -> Result<usize, c::CUptiResult> {
    if !rel().has_multiple_subscribers() {
        return Err(c::CUPTI_ERROR_NOT_SUPPORTED);
    }
    if !subscribers::exists(handle as usize) {
        return Err(c::CUPTI_ERROR_INVALID_PARAMETER);
    }
    Ok(handle as usize)
}

cupti_entry!(
    fn cuptiActivityEnable_v2(
        handle: c::CUpti_SubscriberHandle,
        kind: c::CUpti_ActivityKind,
        _config: *mut c::CUpti_ActivityConfig,
    ) {
        let h = match v2_subscriber(handle) {
            Ok(h) => h,
            Err(e) => return e,
        };
        if !supported_kind(kind) {
            return c::CUPTI_ERROR_NOT_SUPPORTED;
        }
        crate::timing::activity_enable();
        crate::activity::set_kind_v2(h, kind, true);
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiActivityDisable_v2(
        handle: c::CUpti_SubscriberHandle,
        kind: c::CUpti_ActivityKind,
        _config: *mut c::CUpti_ActivityConfig,
    ) {
        let h = match v2_subscriber(handle) {
            Ok(h) => h,
            Err(e) => return e,
        };
        if kind < 64 {
            crate::activity::set_kind_v2(h, kind, false);
        }
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiActivityRegisterCallbacks_v2(
        handle: c::CUpti_SubscriberHandle,
        request: c::CUpti_BuffersCallbackRequestFunc_v2,
        complete: c::CUpti_BuffersCallbackCompleteFunc_v2,
    ) {
        let h = match v2_subscriber(handle) {
            Ok(h) => h,
            Err(e) => return e,
        };
        // Fault injection names the operation: either name fails registering buffers.
        if injected_failure("cuptiActivityRegisterCallbacks") || injected_failure("cuptiActivityRegisterCallbacks_v2") {
            return c::CUPTI_ERROR_UNKNOWN;
        }
        match (request, complete) {
            (Some(r), Some(c)) => {
                crate::activity::register_v2(h, r as usize, c as usize);
                c::CUPTI_SUCCESS
            }
            _ => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiActivityGetNextRecord_v2(
        handle: c::CUpti_SubscriberHandle,
        buffer: *mut u8,
        valid: usize,
        record: *mut *mut c::CUpti_Activity,
    ) {
        if let Err(e) = v2_subscriber(handle) {
            return e;
        }
        // SAFETY: forwarded from our caller; the records are laid out as for the legacy API.
        unsafe { cuptiActivityGetNextRecord(buffer, valid, record) }
    }
);

cupti_entry!(
    fn cuptiActivityGetNumDroppedRecords_v2(
        handle: c::CUpti_SubscriberHandle,
        _ctx: c::CUcontext,
        _stream: u32,
        dropped: *mut usize,
    ) {
        let h = match v2_subscriber(handle) {
            Ok(h) => h,
            Err(e) => return e,
        };
        if dropped.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        // SAFETY: non-null out-parameter. Reading resets the count, as in CUPTI.
        unsafe { *dropped = crate::activity::take_dropped_v2(h) };
        c::CUPTI_SUCCESS
    }
);
