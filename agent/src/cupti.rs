//! CUPTI setup: load libcupti, check its version, subscribe, enable callbacks and activity kinds, and keep data
//! flowing (a flush thread, a forced flush at exit, on cudaDeviceReset and on cudaProfilerStop).

use crate::{activity, callbacks, clock, state};
use cuflight_format::{EventKind, RawEvent};
use cupti_sys::cuda13 as c;
use cupti_sys::loader::{Cupti, CuptiApi};
use cupti_sys::CuptiFamily;
use once_cell::sync::OnceCell;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub struct Loaded {
    pub api: CuptiApi,
    pub family: CuptiFamily,
}

static CUPTI: OnceCell<Loaded> = OnceCell::new();

/// The loaded CUPTI, unless this is a fork child (CUPTI belongs to the parent there).
pub fn loaded() -> Option<&'static Loaded> {
    if state::is_fork_child() {
        return None;
    }
    CUPTI.get()
}

/// Driver callbacks worth recording when called directly (runtime calls are recorded in the runtime domain and
/// their nested driver calls skipped): launches, copies, memsets, allocation and synchronisation.
const DRIVER_CBIDS: &[u32] = &[
    c::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    c::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    c::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    c::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    c::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    c::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    c::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemcpy,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
    c::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
    c::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
    c::CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
    c::CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
    c::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,
];

/// Activity kinds: never KIND_KERNEL, which serialises kernels.
const ACTIVITY_KINDS: &[(c::CUpti_ActivityKind, bool)] = &[
    (c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, true),
    (c::CUPTI_ACTIVITY_KIND_MEMCPY, true),
    (c::CUPTI_ACTIVITY_KIND_MEMSET, true),
    (c::CUPTI_ACTIVITY_KIND_MEMORY2, false),
    (c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, false),
    (c::CUPTI_ACTIVITY_KIND_OVERHEAD, false),
];

fn check(cupti: &Cupti, r: c::CUptiResult, what: &str) -> Result<(), String> {
    if r == c::CUPTI_SUCCESS {
        return Ok(());
    }
    if r == c::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
        return Err("another CUPTI client (a profiler such as nsys or torch.profiler) already subscribed".into());
    }
    Err(format!("{what} failed: {} (libcupti: {})", cupti.result_string(r), cupti.path))
}

/// Loads and configures CUPTI. Called once from `InitializeInjection` (inside the first cuInit).
pub fn start() -> Result<(), String> {
    let seg = state::segment().ok_or("no recording session")?;
    let cupti = Cupti::load().map_err(|e| e.to_string())?;
    let api = cupti.api;
    let mut version = 0u32;
    // SAFETY: valid out-pointer.
    let r = unsafe { (api.get_version)(&mut version) };
    check(&cupti, r, "cuptiGetVersion")?;
    let family = CuptiFamily::from_version(version).ok_or_else(|| {
        format!("unsupported CUPTI version {version} at {} (cuflight supports CUPTI 12.x and 13.x)", cupti.path)
    })?;
    let h = seg.header();
    h.cupti_version.store(version, Ordering::Relaxed);
    h.cupti_path.store(state::intern(cupti.path.as_bytes()), Ordering::Relaxed);
    activity::init_pool();
    if CUPTI.set(Loaded { api, family }).is_err() {
        return Ok(()); // already started
    }
    let mut subscriber: c::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: the callback is a panic-catching extern "C" fn; userdata is unused.
    let r = unsafe { (api.subscribe)(&mut subscriber, Some(callbacks::api_callback), std::ptr::null_mut()) };
    check(&cupti, r, "cuptiSubscribe")?;
    // SAFETY: plain CUPTI configuration calls on our subscriber.
    unsafe {
        check(
            &cupti,
            (api.enable_domain)(1, subscriber, c::CUPTI_CB_DOMAIN_RUNTIME_API),
            "enabling runtime callbacks",
        )?;
        for &cbid in DRIVER_CBIDS {
            // An older CUPTI may not know a newer entry point (e.g. cuLaunchKernelEx): skip it, keep the rest.
            let _ = (api.enable_callback)(1, subscriber, c::CUPTI_CB_DOMAIN_DRIVER_API, cbid);
        }
        // System thread ids, so API calls and activity records name the same threads.
        (api.set_thread_id_type)(c::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
        check(
            &cupti,
            (api.activity_register_callbacks)(Some(activity::buffer_requested), Some(activity::buffer_completed)),
            "registering activity buffers",
        )?;
        for &(kind, required) in ACTIVITY_KINDS {
            let r = (api.activity_enable)(kind);
            if required {
                check(&cupti, r, "enabling activity records")?;
            }
        }
    }
    write_clock_pair();
    let spawned = std::thread::Builder::new().name("cuflight-flush".into()).spawn(flush_loop);
    if spawned.is_err() {
        return Err("cannot start the flush thread".into());
    }
    Ok(())
}

fn flush_period() -> Duration {
    let ms = std::env::var("CUFLIGHT_FLUSH_MS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1000u64);
    Duration::from_millis(ms.clamp(10, 60_000))
}

fn flush_loop() {
    let period = flush_period();
    let mut first = true;
    loop {
        std::thread::sleep(period);
        if state::is_fork_child() {
            return;
        }
        if std::mem::take(&mut first) {
            record_devices_once();
        }
        let _ = std::panic::catch_unwind(|| flush(false));
    }
}

/// Asks CUPTI for every completed record (forced: also for records still being written).
pub fn flush(forced: bool) {
    let Some(l) = loaded() else { return };
    let flag = if forced { c::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED } else { 0 };
    // SAFETY: plain CUPTI call; buffer callbacks run on this thread or CUPTI's.
    unsafe { (l.api.activity_flush_all)(flag) };
    write_clock_pair();
}

/// The flush at process exit (atexit).
pub fn final_flush() {
    record_devices_once();
    flush(true);
}

/// Device facts, from the flush thread once CUDA is up, or at exit for programs shorter than a flush period.
fn record_devices_once() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if loaded().is_some() && !DONE.swap(true, Ordering::AcqRel) {
        let _ = std::panic::catch_unwind(crate::devices::record);
    }
}

/// Writes (CUPTI time, CLOCK_MONOTONIC, CLOCK_REALTIME) so the collector can map device time to host time.
pub fn write_clock_pair() {
    let Some(l) = loaded() else { return };
    let mono0 = clock::monotonic_ns();
    let mut cupti_ts = 0u64;
    // SAFETY: valid out-pointer.
    if unsafe { (l.api.get_timestamp)(&mut cupti_ts) } != c::CUPTI_SUCCESS {
        return;
    }
    let mono1 = clock::monotonic_ns();
    let mut ev = RawEvent::new(EventKind::ClockSync, 0, cupti_ts, mono0 / 2 + mono1 / 2);
    ev.a = clock::realtime_ns();
    crate::emit::push(ev);
}
