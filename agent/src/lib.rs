//! `libcuflight.so`, the cuflight agent. It runs inside the profiled process and records CUDA API calls,
//! kernels, copies, memsets, allocations, synchronisation and NVTX ranges into lock-free per-thread rings in a
//! shared-memory segment that `cuflight record` drains.
//!
//! Entry points (all catch panics; a failure disables the agent with one line on stderr and never harms the
//! host process):
//! - `InitializeInjection`: called by the CUDA driver inside the first `cuInit` when `CUDA_INJECTION64_PATH`
//!   names this library; loads CUPTI and starts recording.
//! - `InitializeInjectionNvtx2`: called by every NVTX-using library when `NVTX_INJECTION64_PATH` names this
//!   library; CPU-only processes get NVTX too.
//! - `cuflight_state` and `cuflight_mark_step` ([`api`]): for the program itself (the Python module).
//! - a constructor for `LD_PRELOAD=libcuflight.so`: it only points `CUDA_INJECTION64_PATH` and
//!   `NVTX_INJECTION64_PATH` at this library when unset, so nothing happens until the process touches CUDA.
//!
//! ```text
//! CUFLIGHT_SESSION=abc CUDA_INJECTION64_PATH=libcuflight.so ./app   # what `cuflight record -- ./app` sets up
//! ```

mod activity;
mod activity_buffers;
pub mod api;
mod api_records;
#[doc(hidden)]
mod call_roles;
pub mod callbacks;
mod clock;
mod control;
mod cupti;
mod devices;
mod flight;
mod flight_config;
mod gpu_counters;
mod interner;
mod name_cache;
mod nvtx;
mod nvtx_handles;
mod nvtx_late;
mod open_steps;
mod pystack;
mod rings;
mod sampler;
mod setup;
mod slow_steps;
mod state;
mod teardown;
mod thread_names;
pub mod thread_rings;
mod trace_choice;

use std::ffi::{c_char, c_int, CStr};

/// Called by the CUDA driver during `cuInit` (CUDA_INJECTION64_PATH). Idempotent.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    std::panic::catch_unwind(|| {
        if !state::begin_init() {
            return 1;
        }
        state::begin_arming();
        if state::inherited_cupti() {
            // A fork child of a process whose CUPTI was running: that state belongs to the parent (CUDA itself
            // does not support a context inherited across fork). Children of CUPTI-less parents trace normally.
            state::finish_init(false);
            state::disable(
                "fork child of a process that was already profiling CUDA (its CUPTI state belongs to the parent)",
            );
            return 1;
        }
        if state::session().is_none() && flight::span_ns() != 0 {
            // `cuflight launch --flight-recorder`: recording from the start into rings that keep the newest
            // events, for `cuflight dump` and for dumps on a crash or hang.
            match setup::start(true) {
                Ok(()) => {
                    state::finish_init(true);
                    control::start(cuflight_format::control::STATE_FLIGHT_RECORDER);
                    flight::arm();
                }
                Err(why) => {
                    state::finish_init(false);
                    state::disable(&format!("flight recorder: {why}"));
                }
            }
            return 1;
        }
        if state::session().is_none() {
            // Injected without `cuflight record` (`cuflight launch`, or CUDA_INJECTION64_PATH by hand): dormant
            // until a collector attaches; a CUDA call costs nothing, as no CUPTI callback is registered.
            state::go_dormant();
            control::start(cuflight_format::control::STATE_DORMANT);
            return 1;
        }
        sampler::configure_from_env(sampler::Switches {
            resume: setup::resume,
            pause_callbacks: setup::pause_callbacks,
            pause_activity: setup::pause_activity,
        });
        match setup::start(true) {
            Ok(()) => {
                if sampler::sampling() {
                    // Quiet until the first recorded step or time slice (`record --sample`).
                    setup::pause_callbacks();
                    setup::pause_activity();
                    sampler::start_slices();
                }
                state::finish_init(true);
                control::start(cuflight_format::control::STATE_RECORDING);
            }
            Err(why) => {
                state::finish_init(false);
                state::disable(&why);
            }
        }
        1
    })
    .unwrap_or(0)
}

/// Called by each NVTX-using library on its first NVTX call (NVTX_INJECTION64_PATH).
///
/// # Safety
/// `get_export_table` must be NVTX's export-table getter, as the NVTX loader passes it.
#[no_mangle]
pub unsafe extern "C" fn InitializeInjectionNvtx2(
    get_export_table: cupti_sys::cuda13::NvtxGetExportTableFunc_t,
) -> c_int {
    // Without `nvtx` in `--trace`, NVTX is told there is no tool: its calls stay the no-ops they are without one.
    if crate::trace_choice::launch_mask() & cuflight_format::tracing::NVTX == 0 {
        return 0;
    }
    std::panic::catch_unwind(|| nvtx::install(get_export_table)).unwrap_or(0)
}

#[used]
#[link_section = ".init_array"]
static PRELOAD_CONSTRUCTOR: extern "C" fn() = preload_constructor;

/// Under LD_PRELOAD, route the driver's and NVTX's injection to this library (only when the user set none).
/// Loaded by neither (`cuflight attach --inject` made a thread of the running program `dlopen` it), go dormant
/// with the control socket up at once: the driver will never call `InitializeInjection` in this process.
extern "C" fn preload_constructor() {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: dladdr on one of our own functions; Dl_info is plain data.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::dladdr(preload_constructor as *const libc::c_void, &mut info) } == 0
            || info.dli_fname.is_null()
        {
            return;
        }
        // SAFETY: dli_fname is the loader's NUL-terminated path of this library.
        let own: &CStr = unsafe { CStr::from_ptr(info.dli_fname) };
        let preloaded = std::env::var_os("LD_PRELOAD").is_some_and(|v| v.to_string_lossy().contains("cuflight"));
        if !preloaded {
            // Named by an injection variable (by file name: a relative path may not resolve any more once the
            // program changed directory): the driver or NVTX loads us and calls our entry points.
            let own_name = own.to_bytes().rsplit(|&c| c == b'/').next().unwrap_or_default().to_vec();
            let ours = |var: &str| {
                std::env::var_os(var).is_some_and(|p| {
                    std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()).rsplit(|&c| c == b'/').next()
                        == Some(&own_name[..])
                })
            };
            // Linked into an executable (the agent's own tests) rather than loaded as a library: nothing to do.
            let in_executable = std::fs::read_link("/proc/self/exe").ok().is_some_and(|exe| {
                std::fs::canonicalize(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(own.to_bytes()))
                    .is_ok_and(|o| o == exe)
            });
            if !in_executable && !ours("CUDA_INJECTION64_PATH") && !ours("NVTX_INJECTION64_PATH") && state::begin_init()
            {
                state::go_dormant();
                state::set_injected_late();
                control::start(cuflight_format::control::STATE_DORMANT);
            }
            return;
        }
        for var in [c"CUDA_INJECTION64_PATH", c"NVTX_INJECTION64_PATH"] {
            // SAFETY: constructors run before main, single-threaded; setenv with overwrite=0 keeps user values.
            unsafe { libc::setenv(var.as_ptr(), own.as_ptr() as *const c_char, 0) };
        }
    });
}
