//! The Hardware Event System (HES) for kernel, copy and memset timestamps (**test double**), and the GPU it needs.
//! Sources: cupti_activity.h of CUDA 12.9 Update 1 and 13.5, `cuptiActivityEnableHWTrace` and
//! `CUPTI_ACTIVITY_ATTR_ENABLE_HES`; the CUPTI 12.8 release notes (HES tracing introduced, for Blackwell):
//! - "only available on NVIDIA Blackwell architecture and later": on the default device (an H100, compute
//!   capability 9.0) the call returns `CUPTI_ERROR_NOT_SUPPORTED` ("if HW trace cannot be enabled on the
//!   current platform"); `CUDASIM_GPU=b200` makes the device a Blackwell B200 (compute capability 10.0);
//! - the entry point exists from API version 26 (CUDA 12.8); earlier releases lack the symbol, which the simulator
//!   (one library for every release) answers with `CUPTI_ERROR_NOT_SUPPORTED`;
//! - it "must be called after CUDA driver initialization but before creating the CUDA context", and the 13.x
//!   attribute "must be set before enabling any activity kind by any subscriber"; "once enabled, HES-based tracing
//!   persists for the entire profiling session and cannot be disabled". The header names no result for breaking
//!   these; the simulator answers `CUPTI_ERROR_INVALID_OPERATION`, CUPTI's code for a call made in the wrong state
//!   (an assumption, to be checked on a Blackwell GPU: gpu-validate's `hes` part).
//!
//! Records are the same either way (the header changes none of the kernel, copy or memset fields), so nothing else
//! changes here; no cost difference is modelled, none having been measured.

use crate::c;
use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);
/// The program made its CUDA context (the runtime makes the primary context at its first call that needs one:
/// a stream operation or an allocation here).
static CONTEXT_MADE: AtomicBool = AtomicBool::new(false);

/// The device is a Blackwell (`CUDASIM_GPU=b200`).
pub(crate) fn blackwell() -> bool {
    static B: once_cell::sync::Lazy<bool> = once_cell::sync::Lazy::new(|| {
        std::env::var("CUDASIM_GPU").is_ok_and(|g| g.trim().eq_ignore_ascii_case("b200"))
    });
    *B
}

pub(crate) fn context_made() {
    if !CONTEXT_MADE.load(Ordering::Relaxed) {
        CONTEXT_MADE.store(true, Ordering::Relaxed);
    }
}

/// Whether kernel timestamps come from the hardware (HES).
pub(crate) fn on() -> bool {
    ON.load(Ordering::Acquire)
}

/// `cuptiActivityEnableHWTrace(enable)`.
pub(crate) fn enable(enable: bool, any_kind_enabled: bool) -> c::CUptiResult {
    if !crate::release::current().has_hw_trace() || !blackwell() {
        return c::CUPTI_ERROR_NOT_SUPPORTED;
    }
    if on() && !enable {
        return c::CUPTI_ERROR_INVALID_OPERATION; // cannot be disabled
    }
    if enable && !on() && (CONTEXT_MADE.load(Ordering::Relaxed) || any_kind_enabled) {
        return c::CUPTI_ERROR_INVALID_OPERATION;
    }
    if enable {
        ON.store(true, Ordering::Release);
    }
    c::CUPTI_SUCCESS
}
