//! The classifier's tests: every call of CUDA 13.5's runtime and driver tables against a committed table
//! (`calls_table.txt`, one line a call with what it does), so that a change of rule shows as a diff of decisions;
//! then the disagreements the one rule settled, and names in every dialect.

use super::*;
use std::fmt::Write;

/// The effect names, in bit order, as the table writes them.
const EFFECTS: [(u32, &str); 18] = [
    (CallEffects::LAUNCHES_KERNEL, "launches_kernel"),
    (CallEffects::LAUNCHES_GRAPH, "launches_graph"),
    (CallEffects::COPIES, "copies"),
    (CallEffects::SETS_MEMORY, "sets_memory"),
    (CallEffects::ALLOCATES, "allocates"),
    (CallEffects::FREES, "frees"),
    (CallEffects::SYNCHRONIZES, "synchronizes"),
    (CallEffects::STREAM_WAIT, "stream_wait"),
    (CallEffects::POLLS, "polls"),
    (CallEffects::QUERIES, "queries"),
    (CallEffects::HOST_FUNCTION, "host_function"),
    (CallEffects::ASYNC, "async"),
    (CallEffects::BOOKKEEPING, "bookkeeping"),
    (CallEffects::PINNED_HOST, "pinned_host"),
    (CallEffects::BEGINS_CAPTURE, "begins_capture"),
    (CallEffects::ENDS_CAPTURE, "ends_capture"),
    (CallEffects::INSTANTIATES_GRAPH, "instantiates_graph"),
    (CallEffects::SETS_UP, "sets_up"),
];

fn describe(domain: &str, cbid: u32, name: &str) -> String {
    let e = CallEffects::of(name);
    let mut line = format!("{domain} {cbid} {name}:");
    for (bit, word) in EFFECTS {
        if e.has(bit) {
            let _ = write!(line, " {word}");
        }
    }
    let _ = write!(line, " | {:?}", e.class(false));
    if domain == "runtime" && e.recorded_by_default() || domain == "driver" && e.recorded_from_driver() {
        line.push_str(" recorded");
    }
    match e.python_stacks() {
        PythonStacks::Every => line.push_str(" stack"),
        PythonStacks::Sampled => line.push_str(" stack-sampled"),
        PythonStacks::None => {}
    }
    line
}

/// Every call CUPTI 13.5 has a callback for, classified. Set `UPDATE_CALLS_TABLE=1` to write the table anew after
/// a deliberate change of rule, and read its diff.
#[test]
fn every_cuda_call_is_classified_as_the_committed_table_says() {
    let mut table = String::from("# What each CUDA 13.5 call does (cuflight_format::calls). Written by the test\n");
    table.push_str("# every_cuda_call_is_classified_as_the_committed_table_says; UPDATE_CALLS_TABLE=1 rewrites it.\n");
    for (domain, calls) in [("runtime", cupti_sys::cbids::RUNTIME), ("driver", cupti_sys::cbids::DRIVER)] {
        for &(cbid, name) in calls {
            table.push_str(&describe(domain, cbid, name));
            table.push('\n');
        }
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/calls_table.txt");
    if std::env::var_os("UPDATE_CALLS_TABLE").is_some() {
        std::fs::write(&path, &table).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    for (line, (want, got)) in committed.lines().zip(table.lines()).enumerate() {
        assert_eq!(want, got, "calls_table.txt line {}: the rule changed (UPDATE_CALLS_TABLE=1 to accept)", line + 1);
    }
    assert_eq!(committed.lines().count(), table.lines().count(), "calls_table.txt is out of date");
}

/// Rules that hold over the whole table, whatever the words.
#[test]
fn no_call_both_queries_and_acts() {
    for &(_, name) in cupti_sys::cbids::RUNTIME.iter().chain(cupti_sys::cbids::DRIVER) {
        let e = CallEffects::of(name);
        if e.only_queries() {
            assert!(
                !e.queues_work() && !e.manages_memory() && !e.waits_for_gpu() && !e.has(CallEffects::POLLS),
                "{name}"
            );
            assert!(!e.recorded_by_default(), "{name}");
        }
        if e.queues_work() || e.waits_for_gpu() || e.manages_memory() {
            assert!(e.recorded_by_default() && e.recorded_from_driver(), "{name}");
        }
    }
}

/// The driver calls recorded when a program makes them directly include every one the agent's hand list had.
#[test]
fn the_driver_calls_a_program_makes_are_recorded() {
    for name in [
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuLaunchKernelEx",
        "cuLaunchKernelEx_ptsz",
        "cuLaunchCooperativeKernel",
        "cuGraphLaunch",
        "cuGraphLaunch_ptsz",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemAllocHost_v2",
        "cuMemFreeHost",
        "cuMemAllocManaged",
        "cuMemAllocAsync",
        "cuMemFreeAsync",
        "cuMemcpy",
        "cuMemcpyAsync",
        "cuMemcpyHtoD_v2",
        "cuMemcpyDtoH_v2",
        "cuMemcpyDtoD_v2",
        "cuMemcpyHtoDAsync_v2",
        "cuMemcpyDtoHAsync_v2",
        "cuMemcpyDtoDAsync_v2",
        "cuMemsetD8_v2",
        "cuMemsetD32_v2",
        "cuMemsetD8Async",
        "cuMemsetD32Async",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuStreamWaitEvent",
        // Not in the hand list, which missed them: pinned allocation, 2D copies, peer copies.
        "cuMemHostAlloc",
        "cuMemcpy2D_v2",
        "cuMemcpyPeerAsync",
    ] {
        assert!(CallEffects::of(name).recorded_from_driver(), "{name}");
    }
    for name in ["cuCtxGetCurrent", "cuEventQuery", "cuGraphAddMemcpyNode", "cuGraphAddMemAllocNode", "cuModuleLoad"] {
        assert!(!CallEffects::of(name).recorded_from_driver(), "{name}");
    }
}

/// `cudaHostAlloc` allocates, to the agent and to every analysis alike (the report once filed it as a launch).
#[test]
fn pinned_host_allocation_is_an_allocation() {
    for name in ["cudaHostAlloc", "cudaMallocHost", "cuMemHostAlloc", "cuMemAllocHost_v2"] {
        let e = CallEffects::of(name);
        assert!(e.allocates() && e.has(CallEffects::PINNED_HOST), "{name}");
        assert_eq!(e.class(false), CallClass::Alloc, "{name}");
        assert_eq!(e.python_stacks(), PythonStacks::Every, "{name}");
    }
}

#[test]
fn calls_are_classed_by_their_effect_on_the_queue() {
    let class = |name: &str, pageable: bool| CallEffects::of(name).class(pageable);
    assert_eq!(class("cudaStreamSynchronize", false), CallClass::Sync);
    assert_eq!(class("cuCtxSynchronize", false), CallClass::Sync);
    assert_eq!(class("cudaMemcpy", false), CallClass::Sync);
    assert_eq!(class("cuMemcpyDtoH_v2", false), CallClass::Sync);
    assert_eq!(class("cudaMemcpyAsync", false), CallClass::Launch);
    assert_eq!(class("cudaMemcpyAsync", true), CallClass::Sync);
    assert_eq!(class("cudaFree", false), CallClass::Alloc);
    assert_eq!(class("cudaMallocAsync", false), CallClass::Launch);
    assert_eq!(class("cudaFreeAsync", false), CallClass::Launch);
    assert_eq!(class("cudaLaunchKernel", false), CallClass::Launch);
    assert_eq!(class("cudaEventQuery", false), CallClass::Poll);
    assert_eq!(class("cudaGraphAddMemcpyNode", false), CallClass::Launch);
    assert!(CallEffects::of("cudaMemcpy").waits_for_gpu());
    assert!(!CallEffects::of("cudaStreamWaitEvent").waits_for_gpu());
    assert!(CallEffects::of("cudaGraphLaunch").queues_work());
    assert!(!CallEffects::of("cudaGraphLaunch").launches_kernel());
    assert!(!CallEffects::of("cudaLaunchHostFunc").queues_work());
    assert!(CallEffects::of("cudaLaunchHostFunc").has(CallEffects::HOST_FUNCTION));
    assert!(CallEffects::of("cudaLaunchCooperativeKernel").launches_kernel());
    // Kineto's and nsys's spellings of device work names queue work too.
    assert!(CallEffects::of("cudaMemsetAsync").queues_work());
}

#[test]
fn calls_with_nothing_of_their_own_to_do_return_at_once() {
    for name in
        ["cudaEventCreateWithFlags", "cudaEventRecord", "cudaSetDevice", "cudaGetDeviceCount", "cudaStreamWaitEvent"]
    {
        assert!(CallEffects::of(name).returns_at_once(), "{name}");
    }
    for name in [
        "cudaLaunchKernel",
        "cudaGraphLaunch",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cudaMalloc",
        "cudaFreeAsync",
        "cudaStreamSynchronize",
        "cudaEventQuery",
        "cudaGraphInstantiate",
        "cudaStreamEndCapture",
    ] {
        assert!(!CallEffects::of(name).returns_at_once(), "{name}");
    }
}

#[test]
fn state_queries_in_every_spelling() {
    for q in [
        "cudaGetDevice",
        "cudaGetLastError",
        "cudaPeekAtLastError",
        "cuCtxGetCurrent",
        "cuDeviceGet",
        "cudaStreamGetCaptureInfo_v2",
        "cuDeviceGetAttribute_ptsz",
        "cudaGetDevice_v3020",
        "cuStreamGetCaptureInfo_v2_ptsz",
        "cudaStreamIsCapturing",
        "cudaThreadExchangeStreamCaptureMode",
        // Queries to the agent and, since the one rule, to the report too.
        "cudaMemGetInfo",
        "cudaStreamGetFlags",
    ] {
        assert!(CallEffects::of(q).only_queries(), "{q}");
    }
    for c in ["cudaLaunchKernel", "cudaStreamSynchronize", "cudaMalloc", "cudaSetDevice", "cudaEventQuery"] {
        assert!(!CallEffects::of(c).only_queries(), "{c}");
    }
}

#[test]
fn suffixes_come_off_in_one_place() {
    assert_eq!(without_version("cudaMalloc_v3020"), "cudaMalloc");
    assert_eq!(without_version("cudaMemcpy_ptds_v7000"), "cudaMemcpy_ptds");
    assert_eq!(without_version("cuModuleGetLoadingMode"), "cuModuleGetLoadingMode");
    assert_eq!(without_version("my_vector"), "my_vector");
    assert_eq!(base_name("cudaMemcpy_v3020"), "cudaMemcpy");
    assert_eq!(base_name("cudaMemcpy_ptds_v7000"), "cudaMemcpy");
    assert_eq!(base_name("cuStreamGetCaptureInfo_v2_ptsz"), "cuStreamGetCaptureInfo");
    assert_eq!(base_name("cuMemAlloc_v2"), "cuMemAlloc");
    assert_eq!(base_name("cudaLaunchKernel"), "cudaLaunchKernel");
    assert_eq!(base_name("cuda_v"), "cuda_v");
    assert_eq!(base_name(""), "");
}

#[test]
fn the_calls_analyses_use_are_recorded_and_state_reads_are_not() {
    for name in [
        "cudaLaunchKernel",
        "cudaLaunchKernel_ptsz",
        "__cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchHostFunc",
        "cudaGraphLaunch",
        "cudaGraphInstantiate",
        "cudaStreamBeginCapture",
        "cudaMemcpyAsync",
        "cudaMemcpy2DAsync_ptsz",
        "cudaMemsetAsync",
        "cudaMalloc",
        "cudaMallocHost",
        "cudaMallocAsync",
        "cudaHostAlloc",
        "cudaHostRegister",
        "cudaFree",
        "cudaFreeHost",
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaStreamWaitEvent",
        "cudaEventRecord",
        "cudaEventRecordWithFlags",
        "cudaEventQuery",
        "cudaStreamQuery",
        "cudaStreamCreateWithFlags",
        "cudaStreamDestroy",
        "cudaProfilerStart",
        "cudaProfilerStop",
        "cudaDeviceReset",
    ] {
        assert!(CallEffects::of(name).recorded_by_default(), "{name}");
    }
    for name in [
        "cudaGetDevice",
        "cudaGetDeviceCount",
        "cudaSetDevice",
        "cudaGetLastError",
        "cudaPeekAtLastError",
        "cudaGetErrorString",
        "cudaStreamIsCapturing",
        "cudaStreamGetCaptureInfo",
        "cudaThreadExchangeStreamCaptureMode",
        "cudaDeviceGetAttribute",
        "cudaDriverGetVersion",
        "cudaEventCreate",
        "cudaEventCreateWithFlags",
        "cudaEventDestroy",
        "cudaPointerGetAttributes",
        "cudaFuncGetAttributes",
        "cudaMemGetInfo",
    ] {
        assert!(!CallEffects::of(name).recorded_by_default(), "{name}");
    }
}
