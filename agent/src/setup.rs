//! CUPTI setup, once per process from `InitializeInjection`: load libcupti, check its version, subscribe (naming
//! the other tool when CUPTI is taken), enable our callbacks and activity kinds, register the activity buffers,
//! and start the flush thread. What keeps data flowing afterwards is in [`crate::cupti`].

use crate::{activity, activity_buffers, api_records, callbacks, clock, cupti, state};
use cuflight_format::calls::CallEffects;
use cuflight_format::tracing;
use cupti_sys::cuda13 as c;
use cupti_sys::loader::Cupti;
use cupti_sys::CuptiFamily;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

/// Activity kinds, each with whether set-up fails without it and the `--trace` name that asks for it (`CUDA` is
/// always asked for). Never KIND_KERNEL, which serialises kernels.
const ACTIVITY_KINDS: &[(c::CUpti_ActivityKind, bool, u32)] = &[
    (c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, true, tracing::CUDA),
    (c::CUPTI_ACTIVITY_KIND_MEMCPY, true, tracing::CUDA),
    (c::CUPTI_ACTIVITY_KIND_MEMSET, true, tracing::CUDA),
    (c::CUPTI_ACTIVITY_KIND_MEMORY2, false, tracing::MEMORY),
    (c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, false, tracing::SYNC),
    (c::CUPTI_ACTIVITY_KIND_OVERHEAD, false, tracing::OVERHEAD),
    (c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE, false, tracing::GRAPHS),
];

fn check(cupti: &Cupti, r: c::CUptiResult, what: &str) -> Result<(), String> {
    if r == c::CUPTI_SUCCESS {
        return Ok(());
    }
    Err(format!("{what} failed: {} (libcupti: {})", cupti.result_string(r), cupti.path))
}

/// The answer to timestamp requests once registered: CUPTI then stamps every record with the clock the agent
/// stamps host events with, so device and host events need no alignment.
extern "C" fn timestamp_ns() -> u64 {
    clock::monotonic_ns()
}

/// How we share CUPTI.
#[derive(Clone, Copy)]
struct Sharing {
    /// Multi-subscriber mode: other tools may subscribe beside us; our activity goes through the v2 API.
    multi: bool,
    /// Another tool subscribed before us (it decided CUPTI's global options).
    joined: bool,
}

/// CUPTI releases whose multi-subscriber mode comes with the per-subscriber Activity API (CUPTI 13.5 notes).
const MULTI_SUBSCRIBER_VERSION: u32 = 130500;

/// Subscribes, naming ourselves (13.x `cuptiSubscribe_v2`), and names the other tool when CUPTI is taken. From
/// 13.5 with the v2 Activity API, asks for multi-subscriber mode, so that torch.profiler, nsys or Kineto record
/// beside us (they must ask for it too; a tool that took CUPTI alone still keeps it).
fn subscribe(cupti: &Cupti, version: u32) -> Result<(c::CUpti_SubscriberHandle, Sharing), String> {
    let mut subscriber: c::CUpti_SubscriberHandle = std::ptr::null_mut();
    let mut other = [0 as std::ffi::c_char; 256];
    let multi = version >= MULTI_SUBSCRIBER_VERSION && cupti.optional.activity_v2.is_some();
    let v1 = |subscriber: &mut c::CUpti_SubscriberHandle| {
        // SAFETY: the callback is a panic-catching extern "C" fn; userdata is unused.
        unsafe { (cupti.api.subscribe)(subscriber, callbacks::subscriber_callback(), std::ptr::null_mut()) }
    };
    let mut r = match cupti.optional.subscribe_v2 {
        Some(subscribe_v2) => {
            // SAFETY: all-zero is a valid CUpti_SubscriberParams (pointers null, sizes 0).
            let mut params: c::CUpti_SubscriberParams = unsafe { std::mem::zeroed() };
            params.structSize = std::mem::size_of::<c::CUpti_SubscriberParams>();
            params.subscriberName = c"cuflight".as_ptr();
            params.oldSubscriberName = other.as_mut_ptr();
            params.oldSubscriberSize = other.len();
            params.allowMultipleSubscribers = multi as u8;
            // SAFETY: the callback is a panic-catching extern "C" fn; params and `other` outlive the call.
            unsafe {
                subscribe_v2(&mut subscriber, callbacks::subscriber_callback(), std::ptr::null_mut(), &mut params)
            }
        }
        None => v1(&mut subscriber),
    };
    let mut multi = multi && cupti.optional.subscribe_v2.is_some();
    if r != c::CUPTI_SUCCESS && r != c::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
        // A v2 entry point this release refuses: nothing was subscribed, the v1 call is the documented one.
        r = v1(&mut subscriber);
        multi = false;
    }
    if r == c::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
        other[other.len() - 1] = 0;
        // SAFETY: NUL-terminated above; CUPTI wrote a C string or left zeros.
        let name = unsafe { std::ffi::CStr::from_ptr(other.as_ptr()) }.to_string_lossy().into_owned();
        let who = if name.is_empty() { "a profiler such as nsys or torch.profiler".to_string() } else { name };
        return Err(format!("another CUPTI client ({who}) is already subscribed"));
    }
    check(cupti, r, "cuptiSubscribe")?;
    // Joined: CUPTI wrote the first subscriber's name.
    Ok((subscriber, Sharing { multi, joined: multi && other[0] != 0 }))
}

/// The CUPTI version as a release, for messages.
fn unsupported(version: u32, path: &str) -> String {
    if (13..19).contains(&version) {
        return format!("CUPTI API version {version} at {path} is CUDA 11.x; cuflight supports CUDA 12.0 and later");
    }
    format!("unsupported CUPTI version {version} at {path} (cuflight supports CUPTI 12.x and 13.x)")
}

/// libcupti, loaded once per process (attach cycles reuse it).
static LIB: once_cell::sync::OnceCell<Cupti> = once_cell::sync::OnceCell::new();
/// Our subscriber while recording (null otherwise), for detach.
static SUBSCRIBER: AtomicPtr<c::CUpti_Subscriber_st> = AtomicPtr::new(std::ptr::null_mut());
/// CUPTI sessions set up in this process (`control::Status::cupti_sessions`): each finalized one leaves memory
/// CUPTI never frees (74 KB in use a cycle on an H200, CUDA 13.0: tests/gpu/attach_cycles.cu, 2026-11-28).
static SESSIONS: AtomicU32 = AtomicU32::new(0);

/// How many CUPTI sessions this process has had.
pub fn sessions() -> u32 {
    SESSIONS.load(Ordering::Relaxed)
}

/// Loads and configures CUPTI: from `InitializeInjection` under `cuflight record`, or from the control thread
/// when `cuflight attach` wakes a dormant agent (CUPTI initialises lazily and accepts a subscriber after contexts
/// exist). Nothing of CUPTI is kept unless the subscription succeeds, and a later failure unsubscribes again.
pub fn start(before_contexts: bool) -> Result<(), String> {
    let seg = state::segment().ok_or("no recording session")?;
    let cupti = match LIB.get() {
        Some(c) => c,
        None => {
            let loaded = Cupti::load().map_err(|e| e.to_string())?;
            LIB.get_or_init(|| loaded)
        }
    };
    let api = cupti.api;
    let mut version = 0u32;
    // SAFETY: valid out-pointer.
    let r = unsafe { (api.get_version)(&mut version) };
    check(cupti, r, "cuptiGetVersion")?;
    CuptiFamily::from_version(version).ok_or_else(|| unsupported(version, &cupti.path))?;
    let h = seg.header();
    h.cupti_version.store(version, Ordering::Relaxed);
    h.cupti_path.store(state::intern(cupti.path.as_bytes()), Ordering::Relaxed);
    if !SUBSCRIBER.load(Ordering::Acquire).is_null() {
        return Ok(()); // already recording
    }
    // Before any callback of this window can run: depths counted in an earlier one are stale.
    callbacks::new_window();
    let (subscriber, sharing) = subscribe(cupti, version)?;
    // Counted once subscribed: CUPTI initialised, whatever happens next (a failed set-up unsubscribes).
    SESSIONS.fetch_add(1, Ordering::Relaxed);
    activity_buffers::init_pool();
    if before_contexts {
        hw_trace(cupti);
    }
    cupti::install(cupti::Loaded { api, version });
    cupti::set_activity_v2(cupti.optional.activity_v2.filter(|_| sharing.multi).map(|v2| (v2, subscriber)));
    if let Err(why) = configure(cupti, subscriber, sharing) {
        release(api, subscriber);
        return Err(why);
    }
    static FLUSH_THREAD: std::sync::Once = std::sync::Once::new();
    let mut spawned = true;
    FLUSH_THREAD.call_once(|| {
        spawned = std::thread::Builder::new().name("cuflight-flush".into()).spawn(cupti::flush_loop).is_ok();
    });
    if !spawned {
        release(api, subscriber);
        return Err("cannot start the flush thread".into());
    }
    SUBSCRIBER.store(subscriber, Ordering::Release);
    cupti::flush_at_exit();
    crate::gpu_counters::start(cupti.optional.pm_sampling);
    Ok(())
}

/// Whether CUPTI took the Hardware Event System for kernel timestamps (`--trace hes`): it then stays on for
/// the session ("cannot be disabled", cupti_activity.h).
static HW_TRACE: AtomicBool = AtomicBool::new(false);

/// `--trace hes`: asks CUPTI for hardware kernel timestamps. Only at set-up from `InitializeInjection`, inside
/// `cuInit`: the call "must be called after CUDA driver initialization but before creating the CUDA context",
/// and before any activity kind is enabled (cupti_activity.h, `cuptiActivityEnableHWTrace` and
/// `CUPTI_ACTIVITY_ATTR_ENABLE_HES`). A refusal (`CUPTI_ERROR_NOT_SUPPORTED` before Blackwell, or the MIG, MPS,
/// vGPU, WSL and confidential-computing codes) leaves the software path, which records the same records.
fn hw_trace(cupti: &Cupti) {
    if crate::trace_choice::trace_mask() & tracing::HES == 0 {
        return;
    }
    if let Some(enable) = cupti.optional.enable_hw_trace {
        // SAFETY: a plain CUPTI configuration call.
        if unsafe { enable(1) } == c::CUPTI_SUCCESS {
            HW_TRACE.store(true, Ordering::Release);
        }
    }
}

/// What this window traces as set up: `--trace`'s choice, with `hes` only where CUPTI took it (so the trace's
/// `traced` list says which timestamps it holds).
fn effective_mask() -> u32 {
    let mask = crate::trace_choice::trace_mask() & !tracing::HES;
    if HW_TRACE.load(Ordering::Acquire) {
        mask | tracing::HES
    } else {
        mask
    }
}

/// Leaves CUPTI as we found it for another tool: no activity kind of ours enabled, no subscriber. In
/// multi-subscriber mode only our own kinds are disabled (the legacy call would disable the other tools' too),
/// and what CUPTI completed meanwhile is collected before our subscriber, whose buffers hold it, goes.
fn release(api: cupti_sys::loader::CuptiApi, subscriber: c::CUpti_SubscriberHandle) {
    disable_kinds(api);
    // SAFETY: our own subscriber.
    unsafe { (api.unsubscribe)(subscriber) };
    cupti::set_activity_v2(None);
}

/// Disables our activity kinds and, in multi-subscriber mode, collects what CUPTI completed meanwhile.
fn disable_kinds(api: cupti_sys::loader::CuptiApi) {
    disable_kinds_only(api);
    if cupti::activity_v2().is_some() {
        cupti::flush(false);
    }
}

/// Disables our activity kinds and API records; what CUPTI holds stays in its buffers for the next flush.
fn disable_kinds_only(api: cupti_sys::loader::CuptiApi) {
    disable_these(api, ACTIVITY_KINDS.iter().map(|k| k.0));
    if let Some(lib) = LIB.get() {
        let wanted = wanted();
        api_records::disable(lib, &wanted.runtime, &wanted.driver);
    }
}

/// Kinds CUPTI pays for on every operation, instrumenting each launch, copy, memset or (SYNCHRONIZATION) runtime
/// call: the ones `record --sample` turns off between recorded steps. MEMORY2 and OVERHEAD stay on (records only
/// at allocations and at CUPTI's own flushes), so the memory timeline stays whole; re-enabling costs per kind (9 to
/// 87 µs each on an H100, `cudasim/src/timing.rs`), so fewer kinds cost less each recorded step.
const PER_OPERATION_KINDS: &[c::CUpti_ActivityKind] = &[
    c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    c::CUPTI_ACTIVITY_KIND_MEMCPY,
    c::CUPTI_ACTIVITY_KIND_MEMSET,
    c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
];

fn disable_these(api: cupti_sys::loader::CuptiApi, kinds: impl Iterator<Item = c::CUpti_ActivityKind>) {
    let v2 = cupti::activity_v2();
    for kind in kinds {
        // Disabling a kind that was never enabled is harmless.
        match v2 {
            // SAFETY: a plain CUPTI call for our subscriber.
            Some((v2, sub)) => unsafe { (v2.disable)(sub, kind, std::ptr::null_mut()) },
            // SAFETY: a plain CUPTI call.
            None => unsafe { (api.activity_disable)(kind) },
        };
    }
}

/// Ends a window (`cuflight attach`'s detach): every completed record is flushed into the rings first, then the
/// activity kinds are disabled, and CUPTI is finalized from the exit of the program's next CUDA call
/// ([`crate::teardown`]: a CUPTI that was only unsubscribed kept the program slower), or where that cannot be,
/// our subscriber is removed. No callback of ours runs until the next attach, which initialises CUPTI again.
pub fn stop() {
    crate::gpu_counters::finish();
    let subscriber = SUBSCRIBER.swap(std::ptr::null_mut(), Ordering::AcqRel);
    let Some(lib) = LIB.get() else { return };
    if subscriber.is_null() {
        return;
    }
    cupti::flush(false);
    let finalize = crate::teardown::wanted(cupti::version(), cupti::activity_v2().is_some());
    if finalize {
        disable_kinds(lib.api);
    } else {
        release(lib.api, subscriber);
    }
    // Records CUPTI completed while the kinds were being disabled, and those the flush thread is delivering.
    cupti::flush_settled(false);
    if finalize {
        crate::teardown::finalize_at_next_call(&lib.api, subscriber);
    }
}

fn configure(cupti: &Cupti, subscriber: c::CUpti_SubscriberHandle, sharing: Sharing) -> Result<(), String> {
    let api = cupti.api;
    let v2 = cupti::activity_v2();
    let mut mask = effective_mask();
    crate::call_roles::compute();
    if let Some(seg) = state::segment() {
        // What an earlier window's reader found (a new segment has not heard it).
        if crate::pystack::verdict() != 0 {
            seg.header().python_reader.store(crate::pystack::verdict(), Ordering::Relaxed);
        }
    }
    crate::nvtx::set_recorded(mask & tracing::NVTX != 0);
    // The calls from records (`--trace api-records`) once the clock and buffers are in place, else callbacks.
    let from_records =
        api_records::possible(cupti, mask, v2.is_some()) && layout_is_readable(cupti, c::CUPTI_ACTIVITY_KIND_RUNTIME);
    if !from_records {
        enable_callbacks(cupti, subscriber, mask)?;
    }
    // System thread ids, so API calls and activity records name the same threads. A global option: one that
    // joined another tool's CUPTI leaves it as that tool set it.
    if !sharing.joined {
        // SAFETY: a plain CUPTI configuration call.
        unsafe { (api.set_thread_id_type)(c::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) };
    }
    // One clock: CUPTI's default on Linux is CLOCK_REALTIME (CLOCK_MONOTONIC_RAW on WSL), which NTP steps and
    // slews. The callback must be registered before any activity kind is enabled (cupti_activity.h).
    // CUFLIGHT_DEVICE_CLOCK=cupti keeps CUPTI's own clock (aligned through clock pairs by the collector).
    // A global option, which the first subscriber decides: one that joined another tool's CUPTI leaves the
    // clock as that tool set it (the collector aligns through clock pairs then).
    let keep_cupti_clock = sharing.joined || std::env::var("CUFLIGHT_DEVICE_CLOCK").is_ok_and(|v| v.trim() == "cupti");
    if let Some(register) = cupti.optional.register_timestamp_callback.filter(|_| !keep_cupti_clock) {
        // SAFETY: registers our extern "C" clock, which never unwinds.
        if unsafe { register(Some(timestamp_ns)) } == c::CUPTI_SUCCESS {
            if let Some(seg) = state::segment() {
                seg.header().device_clock_monotonic.store(1, Ordering::Relaxed);
            }
        }
    }
    let registered = match v2 {
        // SAFETY: our buffer callbacks, for our subscriber in multi-subscriber mode.
        Some((v2, sub)) => unsafe {
            (v2.register_callbacks)(
                sub,
                Some(activity_buffers::buffer_requested_v2),
                Some(activity::buffer_completed_v2),
            )
        },
        // SAFETY: our buffer callbacks.
        None => unsafe {
            (api.activity_register_callbacks)(
                Some(activity_buffers::buffer_requested),
                Some(activity::buffer_completed),
            )
        },
    };
    check(cupti, registered, "registering activity buffers")?;
    promise_zeroed_buffers(cupti, subscriber, sharing);
    enable_kinds(cupti, mask)?;
    if from_records {
        let wanted = wanted();
        let all_runtime = mask & tracing::QUERIES != 0;
        if !api_records::enable(cupti, subscriber, all_runtime, &wanted.runtime, &wanted.driver) {
            enable_callbacks(cupti, subscriber, mask)?;
        }
    }
    if !api_records::on() {
        mask &= !tracing::API_RECORDS;
    }
    if let Some(seg) = state::segment() {
        seg.header().trace_mask.store(mask, Ordering::Relaxed);
    }
    Ok(())
}

/// Sets an Activity API attribute: for our subscriber alone in multi-subscriber mode, through the legacy call (a
/// global option) only where no other tool subscribed first. Refused or unknown: CUPTI keeps its default.
fn set_attribute(cupti: &Cupti, subscriber: c::CUpti_SubscriberHandle, sharing: Sharing, attr: u32, value: &[u8]) {
    let mut bytes = [0u8; 8];
    let Some(used) = bytes.get_mut(..value.len()) else { return };
    used.copy_from_slice(value);
    let mut size = value.len();
    let value_ptr = bytes.as_mut_ptr() as *mut std::ffi::c_void;
    match (cupti::activity_v2().is_some(), cupti.optional.set_attribute_v2, cupti.optional.set_attribute) {
        // SAFETY: a plain CUPTI configuration call for our subscriber; size and value outlive it.
        (true, Some(set), _) => unsafe { set(subscriber, attr, &mut size, value_ptr) },
        // SAFETY: as above, the global form.
        (false, _, Some(set)) if !sharing.joined => unsafe { set(attr, &mut size, value_ptr) },
        _ => return,
    };
}

/// Tells CUPTI that our activity buffers come zeroed ([`activity_buffers`]), so that it does not zero each one on
/// the thread that asked for it. Refused or unknown: CUPTI zeroes as before.
fn promise_zeroed_buffers(cupti: &Cupti, subscriber: c::CUpti_SubscriberHandle, sharing: Sharing) {
    set_attribute(cupti, subscriber, sharing, c::CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &[1u8]);
}

/// Enables the activity kinds `mask` asks for (again, after [`pause_activity`]).
fn enable_kinds(cupti: &Cupti, mask: u32) -> Result<(), String> {
    enable_these(cupti, mask, |_| true)
}

/// Enables the kinds `mask` asks for that `which` keeps.
fn enable_these(cupti: &Cupti, mask: u32, which: impl Fn(c::CUpti_ActivityKind) -> bool) -> Result<(), String> {
    let (api, v2) = (cupti.api, cupti::activity_v2());
    for &(kind, required, wanted) in ACTIVITY_KINDS {
        if mask & wanted == 0 || !which(kind) {
            continue;
        }
        if !layout_is_readable(cupti, kind) {
            if required {
                return Err(format!("CUPTI at {} writes activity records older than cuflight reads", cupti.path));
            }
            continue;
        }
        let r = match v2 {
            // SAFETY: a plain CUPTI configuration call for our subscriber.
            Some((v2, sub)) => unsafe { (v2.enable)(sub, kind, std::ptr::null_mut()) },
            // SAFETY: a plain CUPTI configuration call.
            None => unsafe { (api.activity_enable)(kind) },
        };
        if required {
            check(cupti, r, "enabling activity records")?;
        }
    }
    Ok(())
}

/// `record --sample` between recorded steps ([`crate::sampler`]): no callback of ours is dispatched. CUPTI stays
/// subscribed and initialised, so the next recorded step costs enabling again, not a new CUPTI session.
pub fn pause_callbacks() {
    let (Some(lib), sub) = (LIB.get(), SUBSCRIBER.load(Ordering::Acquire)) else { return };
    if sub.is_null() {
        return;
    }
    for domain in [c::CUPTI_CB_DOMAIN_RUNTIME_API, c::CUPTI_CB_DOMAIN_DRIVER_API] {
        // SAFETY: a plain CUPTI configuration call on our subscriber.
        unsafe { (lib.api.enable_domain)(0, sub, domain) };
    }
}

/// `record --sample` once a recorded step's device work has had time to finish: no activity record of ours.
/// Nothing is flushed on the program's thread here: the subscriber stays, and the flush thread collects the
/// records CUPTI holds.
pub fn pause_activity() {
    if let Some(lib) = LIB.get().filter(|_| !SUBSCRIBER.load(Ordering::Acquire).is_null()) {
        disable_these(lib.api, PER_OPERATION_KINDS.iter().copied());
    }
}

/// `record --sample`: a recorded step begins; the callbacks and activity kinds of the set-up are enabled again.
pub fn resume() -> Result<(), String> {
    let (Some(lib), sub) = (LIB.get(), SUBSCRIBER.load(Ordering::Acquire)) else {
        return Err("CUPTI is not set up".into());
    };
    if sub.is_null() {
        return Err("CUPTI is not set up".into());
    }
    // Calls in flight when the callbacks were paused never had their exit seen: depths start again.
    callbacks::new_window();
    let mask = effective_mask();
    enable_callbacks(lib, sub, mask)?;
    enable_these(lib, mask, |kind| PER_OPERATION_KINDS.contains(&kind))
}

/// Subscribes our callbacks: every runtime call when `--trace` asks for queries, else callback by callback those
/// an analysis needs, and the driver calls a program makes directly.
fn enable_callbacks(cupti: &Cupti, subscriber: c::CUpti_SubscriberHandle, mask: u32) -> Result<(), String> {
    let api = cupti.api;
    let enable = |domain, cbid| {
        // SAFETY: a plain CUPTI configuration call on our subscriber.
        unsafe { (api.enable_callback)(1, subscriber, domain, cbid) }
    };
    if mask & tracing::QUERIES != 0 {
        // SAFETY: as above, for the whole domain.
        let r = unsafe { (api.enable_domain)(1, subscriber, c::CUPTI_CB_DOMAIN_RUNTIME_API) };
        check(cupti, r, "enabling runtime callbacks")?;
    } else {
        // Callback by callback, so that calls no analysis needs (cudaGetDevice, cudaGetLastError...) are never
        // dispatched to us. An id this CUPTI does not know is refused and skipped.
        let enabled = wanted()
            .runtime
            .iter()
            .filter(|&&cbid| enable(c::CUPTI_CB_DOMAIN_RUNTIME_API, cbid) == c::CUPTI_SUCCESS)
            .count();
        if enabled == 0 {
            return Err(format!("CUPTI at {} enabled none of the runtime callbacks cuflight needs", cupti.path));
        }
    }
    // Driver calls a program makes directly (the runtime's own driver calls come nested in a runtime call and
    // are skipped): launches, copies, memsets, allocations, frees and synchronisations.
    for &cbid in &wanted().driver {
        // An older CUPTI may not know a newer entry point (e.g. cuLaunchKernelEx): skip it, keep the rest.
        let _ = enable(c::CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    }
    Ok(())
}

/// The callbacks recorded by default, classified once: `record --sample` enables them again for every recorded
/// step, and classifying 700 names each time cost milliseconds.
struct Wanted {
    runtime: Vec<u32>,
    driver: Vec<u32>,
}

fn wanted() -> &'static Wanted {
    static WANTED: once_cell::sync::OnceCell<Wanted> = once_cell::sync::OnceCell::new();
    WANTED.get_or_init(|| Wanted {
        runtime: cupti_sys::cbids::RUNTIME
            .iter()
            .filter(|&&(_, name)| CallEffects::of(name).recorded_by_default())
            .map(|&(cbid, _)| cbid)
            .collect(),
        driver: cupti_sys::cbids::DRIVER
            .iter()
            .filter(|&&(_, name)| CallEffects::of(name).recorded_from_driver())
            .map(|&(cbid, _)| cbid)
            .collect(),
    })
}

/// Where the release says how long its records of `kind` are (13.x `cuptiActivityGetStructSize`), check that
/// they hold every field the decoder reads.
fn layout_is_readable(cupti: &Cupti, kind: c::CUpti_ActivityKind) -> bool {
    let (Some(get), Some(min)) = (cupti.optional.get_struct_size, activity::min_size(kind)) else {
        return true;
    };
    let mut size = 0usize;
    // SAFETY: valid out-pointer; version 0 asks for this release's layout.
    let r = unsafe { get(kind, 0, &mut size) };
    r != c::CUPTI_SUCCESS || size >= min
}

#[cfg(test)]
mod tests {
    /// The calls recorded by default (381 runtime and 166 driver ids in CUDA 13's tables) are under half of those
    /// a release knows (1,412): what `api_records::disable` turns off one by one.
    #[test]
    fn the_wanted_calls_are_under_half_of_all() {
        let w = super::wanted();
        let all = cupti_sys::cbids::RUNTIME.len() + cupti_sys::cbids::DRIVER.len();
        let wanted = w.runtime.len() + w.driver.len();
        assert!(!w.runtime.is_empty() && !w.driver.is_empty() && wanted * 2 < all, "{wanted} of {all}");
    }
}
