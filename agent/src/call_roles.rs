//! What each CUPTI callback id is to the agent, computed once at set-up from the binding tables
//! (`cupti_sys::cbids`) by the one classifier of CUDA calls (`cuflight_format::calls`): which calls the flight
//! recorder watches as waits for the GPU, and which carry the Python stack of their thread. The hot path reads one
//! relaxed byte per call.

use cuflight_format::calls::{CallEffects, PythonStacks};
use std::sync::atomic::{AtomicU8, Ordering};

/// Callback ids at or above this are ignored (CUDA 13.5: 877 driver, 567 runtime ids).
pub const MAX_CBID: usize = 1024;

/// The call blocks until the GPU reaches a point ([`CallEffects::waits_for_gpu`]): hang detection watches it.
const WAITS: u8 = 1;
/// Every call reads the Python stack.
const STACK_EVERY: u8 = 2;
/// Every Nth launch per thread reads it.
const STACK_SAMPLED: u8 = 4;
/// The call captures, instantiates or launches a CUDA graph: a detach then leaves CUPTI loaded
/// ([`crate::teardown`]).
const GRAPHS: u8 = 8;

/// Roles per domain (0 = driver, 1 = runtime) and callback id; 0 until [`compute`] ran, or for ids unknown to
/// the bindings (a newer CUPTI's), which then have no role.
static ROLES: [[AtomicU8; MAX_CBID]; 2] = [const { [const { AtomicU8::new(0) }; MAX_CBID] }; 2];

/// Fills the table (idempotent; every set-up calls it).
pub fn compute() {
    for (runtime, table) in [(false, cupti_sys::cbids::DRIVER), (true, cupti_sys::cbids::RUNTIME)] {
        for &(cbid, name) in table {
            let Some(slot) = ROLES[runtime as usize].get(cbid as usize) else { continue };
            slot.store(role_of(CallEffects::of(name)), Ordering::Relaxed);
        }
    }
}

fn role_of(call: CallEffects) -> u8 {
    let stacks = match call.python_stacks() {
        PythonStacks::None => 0,
        PythonStacks::Every => STACK_EVERY,
        PythonStacks::Sampled => STACK_SAMPLED,
    };
    let graphs = [CallEffects::LAUNCHES_GRAPH, CallEffects::INSTANTIATES_GRAPH, CallEffects::BEGINS_CAPTURE]
        .into_iter()
        .any(|flag| call.has(flag));
    stacks | if call.waits_for_gpu() { WAITS } else { 0 } | if graphs { GRAPHS } else { 0 }
}

#[inline]
fn role(runtime: bool, cbid: u32) -> u8 {
    ROLES[runtime as usize].get(cbid as usize).map_or(0, |r| r.load(Ordering::Relaxed))
}

/// Whether the call waits for the GPU (the flight recorder's hang detection).
#[inline]
pub fn waits_for_gpu(runtime: bool, cbid: u32) -> bool {
    role(runtime, cbid) & WAITS != 0
}

/// Whether the call captures, instantiates or launches a CUDA graph.
#[inline]
pub fn touches_graphs(runtime: bool, cbid: u32) -> bool {
    role(runtime, cbid) & GRAPHS != 0
}

/// Which of the call's invocations read the Python stack.
#[inline]
pub fn python_stacks(runtime: bool, cbid: u32) -> PythonStacks {
    let r = role(runtime, cbid);
    if r & STACK_EVERY != 0 {
        PythonStacks::Every
    } else if r & STACK_SAMPLED != 0 {
        PythonStacks::Sampled
    } else {
        PythonStacks::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cupti_sys::cuda13 as c;

    #[test]
    fn the_flight_recorder_watches_every_wait_and_blocking_copy() {
        compute();
        for cbid in [
            c::CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020,
        ] {
            assert!(waits_for_gpu(true, cbid), "runtime {cbid}");
        }
        for cbid in [
            c::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
            c::CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
            c::CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
            c::CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
            c::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
        ] {
            assert!(waits_for_gpu(false, cbid), "driver {cbid}");
        }
        assert!(!waits_for_gpu(true, c::CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020));
        assert!(!waits_for_gpu(true, c::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
        assert!(!waits_for_gpu(false, c::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent));
        assert_eq!(python_stacks(true, c::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000), PythonStacks::Sampled);
        assert_eq!(python_stacks(true, c::CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020), PythonStacks::Every);
        assert_eq!(python_stacks(true, c::CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020), PythonStacks::None);
        assert_eq!(python_stacks(true, MAX_CBID as u32 + 5), PythonStacks::None);
    }

    #[test]
    fn graph_captures_instantiations_and_launches_are_marked() {
        compute();
        for cbid in [
            c::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v10000,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000,
        ] {
            assert!(touches_graphs(true, cbid), "runtime {cbid}");
        }
        assert!(touches_graphs(false, c::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch));
        assert!(!touches_graphs(true, c::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
        assert!(!touches_graphs(true, c::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddKernelNode_v10000));
    }
}
