//! Detaching for real: `cuptiFinalize` at the end of an attach window, from the exit of the program's next CUDA
//! call. Removing our subscriber and activity kinds is not enough: a program that was profiled once stays slower
//! until CUPTI is finalized. PyTorch users measured 10-20% slower training after torch.profiler had finished
//! (pytorch/pytorch#144455, #146604), and Kineto finalizes by default from CUDA 12.6 (pytorch/kineto#1264). On an
//! H100 (2026-11-27, gpu-validate's infer part) a served model's p50 request latency was 0.320 ms dormant, 0.506
//! ms attached and still 0.458 ms after the detach without a finalize.
//!
//! NVIDIA's guide (dynamic attach and detach) asks for `cuptiFinalize` from an API exit callsite; Kineto found
//! that a flush racing it on another thread crashes (pytorch/kineto#686). So: the detach disables our kinds and
//! flushes, enables every runtime and driver callback on our subscriber and makes one trivial CUDA call itself;
//! the first exit callback (that call's, or one of the program's) finalizes while holding CUPTI's call lock
//! ([`cupti::calls_exclusive`]) exclusively, which the agent's own flushes hold shared. Where no exit callback comes within [`WAIT`], the
//! detach falls back to unsubscribing rather than leave our subscriber behind.
//!
//! Only from CUPTI 12.6 (API version 24): before it, CUPTI initialised again after a finalize crashed programs
//! using CUDA graphs (PyTorch turned teardown off for them, pytorch/pytorch#144455). Not in multi-subscriber mode,
//! where another tool's session shares CUPTI. Never in a process that captured, instantiated or launched a CUDA
//! graph: on an H200 (CUDA 13.0, driver 580.159.04, 2026-12-01, gpu-validate's batching part) a server replaying
//! decode graphs back to back (150 requests a second) died with `cudaErrorLaunchFailure` at its first
//! synchronisation after a 10-second window's detach, where the same server at 20 and 60 requests a second lived
//! on; PyTorch keeps teardown off wherever graphs are used (pytorch/pytorch#112507: crashes at CUPTI's next
//! initialisation after a teardown, on CUDA 11 and 12). Such a program keeps CUPTI loaded after a detach, and with
//! it some of a launch's cost (module docs above). `CUFLIGHT_FINALIZE=0` turns finalizing off; `always` finalizes
//! graph programs too.

use crate::cupti;
use cupti_sys::cuda13 as c;
use cupti_sys::loader::CuptiApi;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::time::{Duration, Instant};

const IDLE: u8 = 0;
const PENDING: u8 = 1;
const FINALIZING: u8 = 2;
/// A benchmark has the API callback skip its work ([`crate::api::cuflight_bench_skip_callbacks`]): the callback
/// returns at once, as while a finalize is pending. Sharing this state keeps the callback's usual path at one test.
const SKIPPING: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// The subscriber whose callback finalizes, while PENDING.
static KEPT: AtomicPtr<c::CUpti_Subscriber_st> = AtomicPtr::new(std::ptr::null_mut());

/// How long a detach waits for the program's next CUDA call.
const WAIT: Duration = Duration::from_millis(100);
/// How long a finalizing callback waits for a flush in progress before leaving it to the next call.
const LOCK_WAIT: Duration = Duration::from_millis(20);
/// CUPTI 12.6's API version (cupti_version.h).
const FIRST_VERSION: u32 = 24;

/// Set for good once the process captured, instantiated or launched a CUDA graph under CUPTI (seen by a call's
/// callback or a graph node's record).
static GRAPHS_SEEN: AtomicBool = AtomicBool::new(false);

/// The process uses CUDA graphs: its detaches leave CUPTI loaded.
#[cold]
pub fn saw_graphs() {
    GRAPHS_SEEN.store(true, Ordering::Relaxed);
}

/// Whether a detach from CUPTI `version` should finalize it.
pub fn wanted(version: u32, multi_subscriber: bool) -> bool {
    let setting = std::env::var("CUFLIGHT_FINALIZE").ok();
    decide(version, multi_subscriber, GRAPHS_SEEN.load(Ordering::Relaxed), setting.as_deref().map(str::trim))
}

/// [`wanted`]'s rule: `setting` is `CUFLIGHT_FINALIZE` (`0` never, `always` even with graphs).
fn decide(version: u32, multi_subscriber: bool, graphs: bool, setting: Option<&str>) -> bool {
    version >= FIRST_VERSION && !multi_subscriber && setting != Some("0") && (!graphs || setting == Some("always"))
}

/// Has the exit of the program's next CUDA call finalize CUPTI through `subscriber` (whose activity kinds are
/// disabled and flushed already). True once finalized; false when no call came within [`WAIT`] and the
/// subscriber was removed instead.
pub fn finalize_at_next_call(api: &CuptiApi, subscriber: c::CUpti_SubscriberHandle) -> bool {
    for domain in [c::CUPTI_CB_DOMAIN_RUNTIME_API, c::CUPTI_CB_DOMAIN_DRIVER_API] {
        // SAFETY: a plain CUPTI call on our own subscriber.
        unsafe { (api.enable_domain)(1, subscriber, domain) };
    }
    KEPT.store(subscriber, Ordering::Release);
    STATE.store(PENDING, Ordering::Release);
    // Our own trivial call reaches an exit callsite at once, on this thread; the program's calls may come first.
    crate::devices::trivial_call();
    let deadline = Instant::now() + WAIT;
    // A finalize under way is waited for, however long CUPTI takes (bounded, so a stuck one cannot hold the
    // control thread for ever).
    let give_up = deadline + Duration::from_secs(2);
    loop {
        let now = Instant::now();
        if STATE.load(Ordering::Acquire) == IDLE {
            let kept = KEPT.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if kept.is_null() {
                return true;
            }
            // CUPTI refused the finalize: leave the old way.
            // SAFETY: our own subscriber.
            unsafe { (api.unsubscribe)(kept) };
            return false;
        }
        if now >= deadline && STATE.compare_exchange(PENDING, IDLE, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let kept = KEPT.swap(std::ptr::null_mut(), Ordering::AcqRel);
            // SAFETY: our own subscriber, which no finalize took (the exchange above won over the callbacks').
            unsafe { (api.unsubscribe)(kept) };
            return false;
        }
        if now >= give_up {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// From the API callback, before anything else: true while a finalize is pending (the window is over, so the
/// callback does nothing else). At a runtime or driver exit site, the first thread finalizes.
#[inline]
pub fn on_callback(domain: c::CUpti_CallbackDomain, cbdata: *const c_void) -> bool {
    match STATE.load(Ordering::Relaxed) {
        IDLE => return false,
        SKIPPING => return true,
        _ => {}
    }
    let api_domain = domain == c::CUPTI_CB_DOMAIN_RUNTIME_API || domain == c::CUPTI_CB_DOMAIN_DRIVER_API;
    if api_domain && !cbdata.is_null() {
        // SAFETY: CUPTI passes a CUpti_CallbackData for the runtime and driver domains.
        let site = unsafe { (*(cbdata as *const c::CUpti_CallbackData)).callbackSite };
        if site == c::CUPTI_API_EXIT
            && STATE.compare_exchange(PENDING, FINALIZING, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            finalize_now();
        }
    }
    true
}

/// Starts or ends skipping (see [`SKIPPING`]); a finalize under way keeps its state.
pub fn set_skip(on: bool) {
    let (from, to) = if on { (IDLE, SKIPPING) } else { (SKIPPING, IDLE) };
    let _ = STATE.compare_exchange(from, to, Ordering::AcqRel, Ordering::Relaxed);
}

fn finalize_now() {
    let Some(l) = cupti::installed() else {
        STATE.store(PENDING, Ordering::Release);
        return;
    };
    let Some(_exclusive) = cupti::calls_exclusive(LOCK_WAIT) else {
        // A flush holds CUPTI: the next exit site tries again.
        STATE.store(PENDING, Ordering::Release);
        return;
    };
    // SAFETY: from an API exit callsite, as NVIDIA asks, with none of the agent's other CUPTI calls under way.
    let r = unsafe { (l.api.finalize)() };
    if r == c::CUPTI_SUCCESS {
        KEPT.store(std::ptr::null_mut(), Ordering::Release);
    }
    // Refused: KEPT stays, so the detach unsubscribes it.
    STATE.store(IDLE, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::decide;

    #[test]
    fn finalizes_only_from_cupti_12_6_and_alone() {
        assert!(!decide(23, false, false, None), "12.5");
        assert!(decide(24, false, false, None), "12.6");
        assert!(decide(130001, false, false, None), "13.0");
        assert!(!decide(130500, true, false, None), "another tool's session");
        assert!(!decide(130001, false, false, Some("0")), "CUFLIGHT_FINALIZE=0");
    }

    #[test]
    fn a_program_that_used_cuda_graphs_keeps_cupti_unless_told() {
        assert!(!decide(130001, false, true, None));
        assert!(!decide(130001, false, true, Some("1")));
        assert!(decide(130001, false, true, Some("always")));
        assert!(!decide(23, false, true, Some("always")), "never before 12.6");
    }
}
