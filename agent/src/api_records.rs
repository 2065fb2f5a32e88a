//! `--trace api-records`: the program's runtime and driver calls from CUPTI's API activity records
//! (`CUPTI_ACTIVITY_KIND_RUNTIME` / `DRIVER`, one `CUpti_ActivityAPI` per call, as Kineto records them) instead
//! of callbacks into the agent. Each call the callbacks would have recorded is enabled on its own
//! (`cuptiActivityEnableRuntimeApi(cbid, 1)` without the kind: "to enable the collection of a small set of CUDA
//! Runtime APIs", cupti_activity.h), so no call of the program runs a line of the agent's code; the records
//! reach the agent on CUPTI's delivery thread with the calling thread's id, and become the same
//! [`cuflight_format::EventKind::Api`] events.
//!
//! What only a callback can see is then missing, so the agent takes this path only where none is wanted
//! ([`possible`]): Python stacks (read on the calling thread), `record --sample` (it counts calls as they are
//! made), the flight recorder (it watches each call's result and waits). Allocation sizes and addresses come from
//! CUPTI's MEMORY2 records (`memory`), not from the calls' parameters. Whether it costs the program less than
//! callbacks is for a GPU to say (gpu-validate's `cost` part): not a default until measured.

use crate::name_cache;
use cuflight_format::view::ApiCall;
use cuflight_format::RawEvent;
use cupti_sys::cuda13 as c;
use cupti_sys::loader::{ApiRecords, Cupti};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this window's calls come from records (set at set-up, cleared when the records are disabled).
static ON: AtomicBool = AtomicBool::new(false);

/// Whether the calls may come from records in this window: asked for, nothing that needs a callback on, and a
/// CUPTI with the per-call entry points (the per-subscriber forms in multi-subscriber mode).
pub fn possible(cupti: &Cupti, mask: u32, multi_subscriber: bool) -> bool {
    use cuflight_format::tracing::{API_RECORDS, PYTHON};
    // A flight recorder is set up before it is armed: its span says it is one.
    let callbacks_needed = mask & PYTHON != 0 || crate::sampler::sampling() || crate::flight::span_ns() != 0;
    let entry_points = match cupti.optional.api_records {
        Some(r) => !multi_subscriber || r.v2.is_some(),
        None => false,
    };
    mask & API_RECORDS != 0 && !callbacks_needed && entry_points
}

/// Enables records of the calls given (runtime and driver callback ids), or of every runtime call
/// (`all_runtime`: `--trace queries`). False when CUPTI refused: the caller subscribes callbacks instead.
pub fn enable(
    cupti: &Cupti,
    subscriber: c::CUpti_SubscriberHandle,
    all_runtime: bool,
    runtime: &[u32],
    driver: &[u32],
) -> bool {
    let Some(api) = cupti.optional.api_records else { return false };
    let v2 = crate::cupti::activity_v2();
    let runtime_ok = if all_runtime {
        let r = match v2 {
            // SAFETY: a plain CUPTI configuration call for our subscriber.
            Some((v2, sub)) => unsafe { (v2.enable)(sub, c::CUPTI_ACTIVITY_KIND_RUNTIME, std::ptr::null_mut()) },
            // SAFETY: a plain CUPTI configuration call.
            None => unsafe { (cupti.api.activity_enable)(c::CUPTI_ACTIVITY_KIND_RUNTIME) },
        };
        r == c::CUPTI_SUCCESS
    } else {
        runtime.iter().filter(|&&cbid| set(api, v2.map(|_| subscriber), true, cbid, true)).count() > 0
    };
    if !runtime_ok {
        ON.store(true, Ordering::Release); // so that `disable` undoes whatever was enabled
        disable(cupti, runtime, driver);
        return false;
    }
    for &cbid in driver {
        // An id this release does not know is refused and skipped, as with callbacks.
        set(api, v2.map(|_| subscriber), false, cbid, true);
    }
    ON.store(true, Ordering::Release);
    true
}

/// One call's records on or off, through the per-subscriber form where there is a subscriber to name.
fn set(api: ApiRecords, subscriber: Option<c::CUpti_SubscriberHandle>, runtime: bool, cbid: u32, on: bool) -> bool {
    let on = u8::from(on);
    let r = match (subscriber, api.v2) {
        (Some(sub), Some((rt, drv))) => {
            let f = if runtime { rt } else { drv };
            // SAFETY: a plain CUPTI configuration call for our subscriber.
            unsafe { f(sub, cbid, on) }
        }
        (Some(_), None) => return false,
        (None, _) => {
            let f = if runtime { api.runtime } else { api.driver };
            // SAFETY: a plain CUPTI configuration call.
            unsafe { f(cbid, on) }
        }
    };
    r == c::CUPTI_SUCCESS
}

/// Stops every API record of ours: the window is over, or set-up fell back to callbacks. Nothing of ours stays
/// enabled between windows. `runtime` and `driver` are the calls [`enable`] was given: a call enabled on its own
/// outlives its kind's disable ("overrides ... if it is called after", cupti_activity.h), so each is disabled
/// again, and only those (a CUPTI configuration call each, on the control thread: the 547 calls recorded by default,
/// not the 1,412 ids CUDA 13's tables know).
pub fn disable(cupti: &Cupti, runtime: &[u32], driver: &[u32]) {
    if !ON.swap(false, Ordering::AcqRel) {
        return;
    }
    let v2 = crate::cupti::activity_v2();
    for kind in [c::CUPTI_ACTIVITY_KIND_RUNTIME, c::CUPTI_ACTIVITY_KIND_DRIVER] {
        match v2 {
            // SAFETY: a plain CUPTI call for our subscriber; disabling what was never enabled is harmless.
            Some((v2, sub)) => unsafe { (v2.disable)(sub, kind, std::ptr::null_mut()) },
            // SAFETY: as above.
            None => unsafe { (cupti.api.activity_disable)(kind) },
        };
    }
    let Some(api) = cupti.optional.api_records else { return };
    let subscriber = v2.map(|(_, sub)| sub);
    for &cbid in runtime {
        set(api, subscriber, true, cbid, false);
    }
    for &cbid in driver {
        set(api, subscriber, false, cbid, false);
    }
}

/// Whether this window records calls from records.
pub fn on() -> bool {
    ON.load(Ordering::Acquire)
}

/// A record as the event a callback would have written: the calling thread's, the call's own interval and
/// correlation id (which its kernels, copies and memsets carry), its result, its name. None for a record without
/// timestamps (CUPTI writes 0 for both when it "could not be collected").
pub fn event(r: &c::CUpti_ActivityAPI) -> Option<RawEvent> {
    if r.start == 0 || r.end < r.start {
        return None;
    }
    let runtime = r.kind == c::CUPTI_ACTIVITY_KIND_RUNTIME;
    if crate::call_roles::touches_graphs(runtime, r.cbid) {
        crate::teardown::saw_graphs();
    }
    let call = ApiCall { runtime, cbid: r.cbid, result: u64::from(r.returnValue), external: 0 };
    // Thread id 0 would be taken for "the delivering thread's" by the ring: CUPTI names real threads.
    let mut ev = RawEvent::api_call(r.threadId.max(1), r.start, r.end, call);
    ev.correlation = r.correlationId;
    ev.name = name_cache::call_name(runtime, r.cbid, || binding_name(runtime, r.cbid).map(str::as_bytes));
    Some(ev)
}

/// The call's name from the binding tables (`cudaLaunchKernel_v7000` -> `cudaLaunchKernel`,
/// `cudaLaunchKernel_ptsz_v7000` -> `cudaLaunchKernel_ptsz`), as CUPTI's callbacks name it.
fn binding_name(runtime: bool, cbid: u32) -> Option<&'static str> {
    let table = if runtime { cupti_sys::cbids::RUNTIME } else { cupti_sys::cbids::DRIVER };
    let name = table.iter().find(|&&(id, _)| id == cbid)?.1;
    Some(cuflight_format::calls::without_version(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: c::CUpti_ActivityKind, cbid: u32, start: u64, end: u64) -> c::CUpti_ActivityAPI {
        c::CUpti_ActivityAPI { kind, cbid, start, end, processId: 1, threadId: 4242, correlationId: 77, returnValue: 3 }
    }

    #[test]
    fn a_record_is_the_call_a_callback_would_have_written() {
        let launch = c::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
        let ev = event(&record(c::CUPTI_ACTIVITY_KIND_RUNTIME, launch, 100, 250)).unwrap();
        let call = ev.as_api();
        assert_eq!((ev.tid, ev.start, ev.end, ev.correlation), (4242, 100, 250, 77));
        assert_eq!((call.runtime, call.cbid, call.result), (true, launch, 3));
        let driver = c::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
        assert!(!event(&record(c::CUPTI_ACTIVITY_KIND_DRIVER, driver, 1, 2)).unwrap().as_api().runtime);
        assert_eq!(binding_name(true, launch), Some("cudaLaunchKernel"));
        assert_eq!(binding_name(false, driver), Some("cuLaunchKernel"));
    }

    #[test]
    fn a_record_without_timestamps_is_not_a_call() {
        // "A value of 0 for both the start and end timestamps indicates that timestamp information could not be
        // collected for the function" (cupti_activity.h, CUpti_ActivityAPI).
        assert!(event(&record(c::CUPTI_ACTIVITY_KIND_RUNTIME, 1, 0, 0)).is_none());
        assert!(event(&record(c::CUPTI_ACTIVITY_KIND_RUNTIME, 1, 10, 5)).is_none());
    }
}
