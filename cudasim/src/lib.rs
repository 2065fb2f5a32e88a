//! **cudasim is a test double.** It is a CPU-backed stand-in for the CUDA driver (`libcuda.so.1`), runtime
//! (`libcudart.so.13`) and CUPTI (`libcupti.so.13`), built so that cuflight can be developed and tested on
//! machines without a GPU. It proves nothing about real GPUs; `scripts/gpu-validate` does that on hardware.
//!
//! It behaves like the real stack wherever the agent can tell:
//! - the first CUDA call runs `cuInit`, which loads `CUDA_INJECTION64_PATH` and calls `InitializeInjection`;
//! - CUPTI subscribers get runtime and driver API enter/exit callbacks with correlation ids, the real
//!   `*_params` structs and `symbolName`; activity records travel through the registered buffer callbacks with
//!   flush and dropped-record counts;
//! - `CUDASIM_CUPTI_VERSION` picks the CUDA release modelled (12.0 to 13.5, see `release.rs` for each fact and
//!   its source): `cuptiGetVersion`, each kind's record layout, a NULL buffer aborting the process below API
//!   version 27 (as the real library crashes), per-thread buffers on 13.x, `cuptiSubscribe_v2` and
//!   `cuptiActivityGetStructSize` on 13.x only; timestamps on CLOCK_REALTIME unless a timestamp callback is
//!   registered; forced flushes hand over running kernels unfinished (end 0); full buffers are completed on a
//!   worker thread, as CUPTI's own;
//! - the device is an H100, or with `CUDASIM_GPU=b200` a Blackwell B200, which alone takes
//!   `cuptiActivityEnableHWTrace` (hardware kernel timestamps, CUDA 12.8+, before any context: `hw_trace.rs`);
//! - CUPTI takes time as the real one does (`timing.rs`, each figure with its source): lazy initialisation at the
//!   first CUPTI call, each activity enable, each callback site; a callback site goes to the subscribers enabled
//!   at that site, so a tool that subscribes while a call runs gets its exit with a zeroed correlation slot;
//! - a kernel is a host function `void k(void **args)`; each stream has a device thread that runs kernels, copies
//!   and memsets in stream order, so durations, overlap and waiting are real. Device memory is host memory.
//!
//! Conventions a real GPU does not need: the simulator cannot read parameter sizes from a cubin, so a kernel's
//! parameters are either registered with `cudasimRegisterKernelParams(func, count, sizes)` (a table standing in
//! for the cubin's metadata: then the argument array is exactly as CUDA C passes it) or, unregistered, its
//! argument array ends with a NULL entry and each argument is copied as 8 bytes; apps link with `-rdynamic` so
//! kernel names resolve through `dladdr` when not registered with `__cudaRegisterFunction`. Two calls exist
//! only for test programs, for what a GPU does by itself: `cudasim_kernel_fault(code)` (a device-side fault,
//! sticky) and `cudasim_kernel_ends_at(ns)` (when the GPU finishes the running kernel, untouched by the host's
//! scheduler, as GPU timestamps are). One query exists only for tests: `cudasim_cupti_finalizations()`, how many
//! times cuptiFinalize tore CUPTI down (a test cannot otherwise see a tool's detach). One machine plays several
//! hosts (`machine.rs`): each simulated process may have its own host name and clocks, and
//! `cudasim_machine_monotonic_ns()` reads the machine's clock beneath them.

#[macro_use]
mod macros {
    /// Defines an exported CUPTI function: it takes CUPTI's time per call and turns a panic into an error.
    macro_rules! cupti_entry {
        (fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
            /// # Safety
            /// Called from C with the arguments documented for this CUPTI function.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::c::CUptiResult {
                $crate::timing::cupti_call();
                $crate::guard($crate::c::CUPTI_ERROR_UNKNOWN, || $body)
            }
        };
    }

    /// Defines an exported runtime function whose arguments are named after the fields of its CUPTI params struct.
    macro_rules! runtime_fn {
        ($name:ident($($arg:ident: $ty:ty),* $(,)?) => $cbid:ident, $params:ident $body:block) => {
            /// # Safety
            /// Called from C with the arguments of the CUDA runtime function of the same name.
            #[no_mangle]
            #[allow(non_snake_case)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::CudaError {
                $crate::guard($crate::c::cudaErrorUnknown, || {
                    if let Err(e) = crate::driver::ensure_init() {
                        return $crate::runtime::set_error(e);
                    }
                    let params = $crate::c::$params { $($arg),* };
                    let name = const { $crate::runtime::cname(concat!(stringify!($name), "\0")) };
                    $crate::runtime::set_error($crate::cupti::api_call($crate::c::CUPTI_CB_DOMAIN_RUNTIME_API, $crate::c::$cbid, name, &params, std::ptr::null(), || $body))
                })
            }
        };
        ($name:ident() => $cbid:ident $body:block) => {
            /// # Safety
            /// Called from C, like the CUDA runtime function of the same name.
            #[no_mangle]
            pub unsafe extern "C" fn $name() -> $crate::CudaError {
                $crate::guard($crate::c::cudaErrorUnknown, || {
                    if let Err(e) = crate::driver::ensure_init() {
                        return $crate::runtime::set_error(e);
                    }
                    let name = const { $crate::runtime::cname(concat!(stringify!($name), "\0")) };
                    $crate::runtime::set_error($crate::cupti::api_call($crate::c::CUPTI_CB_DOMAIN_RUNTIME_API, $crate::c::$cbid, name, &(), std::ptr::null(), || $body))
                })
            }
        };
    }
}

mod activity;
mod api_entries;
mod api_records;
mod context;
mod cupti;
mod cupti_state;
mod device;
mod driver;
mod driver_context;
mod graphs;
mod hw_trace;
mod machine;
mod memory;
mod pm_counters;
mod pm_host;
mod pm_sampling;
mod records;
mod release;
mod runtime;
mod runtime_extra;
mod subscribers;
mod timing;

use cupti_sys::cuda13 as c;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs an exported entry point, turning a panic into an error code: a test double must not unwind into C.
fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// CLOCK_MONOTONIC in ns: the simulated devices' clock. Records are moved onto CUPTI's clock (CLOCK_REALTIME
/// unless the client registered a timestamp callback) when they are written (`cupti::emit`).
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub(crate) type CudaError = c::cudaError_t;

/// The most devices the simulator models (`CUDASIM_DEVICES` is capped here).
pub(crate) const MAX_DEVICES: u32 = 8;
