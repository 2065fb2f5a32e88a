//! The Kineto importer's tests: exact timestamps, memcpy kinds, both schemas, refusals.

use super::*;

#[test]
fn decimal_microseconds_become_exact_nanoseconds() {
    assert_eq!(us_to_ns("1712195495506161.2"), Some(1712195495506161200));
    assert_eq!(us_to_ns("1682725898082228"), Some(1682725898082228000));
    assert_eq!(us_to_ns("2.368"), Some(2368));
    assert_eq!(us_to_ns("0.0004"), Some(0));
    assert_eq!(us_to_ns("1.0005"), Some(1001));
    assert_eq!(us_to_ns("1e3"), Some(1_000_000));
    assert_eq!(us_to_ns("-3"), None);
    assert_eq!(us_to_ns("x"), None);
}

#[test]
fn memcpy_names_give_kinds() {
    assert_eq!(memcpy_kinds("Memcpy HtoD (Pageable -> Device)"), (1, 1, 3));
    assert_eq!(memcpy_kinds("Memcpy DtoH (Device -> Pinned)"), (2, 3, 2));
    assert_eq!(memcpy_kinds("Memcpy DtoD (Device -> Device)"), (8, 3, 3));
}

#[test]
fn old_and_new_schemas_import_alike() {
    let new = r#"{"traceEvents":[
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":11,"ts":100,"dur":5,"args":{"correlation":7,"cbid":211}},
        {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":110.5,"dur":2.25,"args":{"correlation":7,"device":0,"stream":7,"grid":[4,1,1],"block":[128,1,1]}}]}"#;
    let old = r#"{"traceEvents":[
        {"ph":"X","cat":"Runtime","name":"cudaLaunchKernel","pid":10,"tid":11,"ts":100,"dur":5,"args":{"correlation":7}},
        {"ph":"X","cat":"Kernel","name":"k","pid":0,"tid":"stream 7","ts":110.5,"dur":2.25,"args":{"device":0,"stream":7}},
        {"ph":"f","cat":"async","id":7,"pid":0,"tid":"stream 7","ts":110.5}]}"#;
    for text in [new, old] {
        let t = import(text.as_bytes()).unwrap();
        let p = &t.processes[&10];
        let k = p.events.iter().find(|e| e.kind() == Some(EventKind::Kernel)).unwrap();
        assert_eq!((k.start, k.end, k.correlation, p.string(k.name)), (110_500, 112_750, 7, "k"));
    }
}

/// Refused with what it is where another tool's member says so (TraceLens's rocprofv3 sample, HTA's execution
/// trace): a user handed the wrong file learns which to give.
#[test]
fn json_without_trace_events_is_refused() {
    assert_eq!(import(r#"{"hello": 1}"#.as_bytes()).unwrap_err(), "JSON has no traceEvents: not a Chrome/Kineto trace");
    assert!(import(r#"[1,2"#.as_bytes()).is_err());
    let rocprof = import(r#"{"rocprofiler-sdk-tool": [{"metadata": {}}]}"#.as_bytes()).unwrap_err();
    assert!(rocprof.contains("rocprofv3 --output-format json") && rocprof.contains("torch.profiler"), "{rocprof}");
    let et = import(r#"{"schema": "1.0.1", "pid": 7, "nodes": [], "finish_ts": 2}"#.as_bytes()).unwrap_err();
    assert!(et.contains("PyTorch execution trace"), "{et}");
}

/// What torch.profiler writes of the run after its events: wall time from `baseTimeNanoseconds` + the first
/// `ts` (HTA's rule), the driver's version on the devices, CUPTI's, the host; older traces' epoch `ts` alone.
#[test]
fn run_metadata_after_the_events_reaches_every_process() {
    let relative = r#"{"traceEvents":[
        {"ph":"M","name":"process_name","pid":10,"tid":0,"ts":0,"args":{"name":"python3"}},
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":11,"ts":2000000.5,"dur":5,"args":{"correlation":7}},
        {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":2000010,"dur":2,"args":{"correlation":7,"device":0,"stream":7}}],
        "deviceProperties":[{"id":0,"name":"NVIDIA H100","totalGlobalMem":1,"computeMajor":9,"computeMinor":0,"numSms":132}],
        "cuda_driver_version":12090,"cuda_runtime_version":12040,"cupti_version":22,"hostname":"node-7",
        "distributedInfo":{"backend":"nccl","rank":3,"world_size":16},
        "baseTimeNanoseconds":1751410836000000000}"#;
    let t = import(relative.as_bytes()).unwrap();
    let p = &t.processes[&10];
    assert_eq!(p.info.start_realtime_ns, 1_751_410_836_000_000_000 + 2_000_000_500, "base + first ts, not the 0 of M");
    assert_eq!((p.info.cupti_version, p.info.host.as_str(), p.info.world_size, p.rank), (22, "node-7", 16, Some(3)));
    assert_eq!((p.cuda_runtime_version, p.epoch_base_ns), (12040, 1_751_410_836_000_000_000));
    let device = p.events.iter().find(|e| e.kind() == Some(EventKind::Device)).unwrap();
    assert_eq!(device.stream, 12090, "the driver's version, as a recording's device events carry it");

    // Epoch microseconds in `ts` itself (before baseTimeNanoseconds); and a trace whose times are no wall time.
    let epoch =
        r#"{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1712195495406752.8,"dur":1}]}"#;
    assert_eq!(import(epoch.as_bytes()).unwrap().processes[&1].info.start_realtime_ns, 1_712_195_495_406_752_800);
    let local =
        r#"{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":5,"dur":1}],"host_name":"\u0007"}"#;
    let p = &import(local.as_bytes()).unwrap().processes[&1];
    assert_eq!(
        (p.info.start_realtime_ns, p.info.host.as_str()),
        (0, ""),
        "no wall time; a control character is no name"
    );
}

/// cuflight's own export marks its processes as a capture's, with what it traced: they read as the capture did
/// (every op held since it was armed, exact ns, not HTA's whole µs); a traced list `--trace` would refuse is
/// dropped, never kept as written; a process without the mark is an import.
#[test]
fn a_cuflight_capture_reads_back_from_its_export_as_a_capture() {
    let text = r#"{"traceEvents":[
        {"ph":"M","name":"cuflight_capture","pid":10,"tid":0,"args":{"name":"cuda, nvtx"}},
        {"ph":"M","name":"cuflight_capture","pid":20,"tid":0,"args":{"name":"cuda,<script>"}},
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":11,"ts":100.5,"dur":5,"args":{"correlation":7}},
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":20,"tid":21,"ts":100,"dur":5,"args":{"correlation":8}},
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":30,"tid":31,"ts":100,"dur":5,"args":{"correlation":9}}]}"#;
    let t = import(text.as_bytes()).unwrap();
    let read = |pid: u32| (t.processes[&pid].info.traced.as_str(), t.processes[&pid].imported);
    assert_eq!((read(10), read(20), read(30)), (("cuda,nvtx", false), ("", false), ("", true)));
    assert!(!t.fractional_us_timestamps, "a capture's export keeps its nanoseconds");
    let foreign = text.replace("cuflight_capture", "other_tool");
    let t = import(foreign.as_bytes()).unwrap();
    assert!(t.processes.values().all(|p| p.imported) && t.fractional_us_timestamps);
}

/// A trace torch.profiler recorded on ROCm (TraceLens's MI300X traces): the kernels name the HSA agent's node id as
/// their device (2: after two CPU agents) where `deviceProperties` and the allocator's HIP events (c10's Device Type
/// 6) name HIP device 0. The kernel lands on device 0, described; the allocation is device memory; HIP's version is
/// kept. A CUDA trace's ids are kept as written.
#[test]
fn a_rocm_traces_gpu_ops_land_on_the_device_its_properties_describe() {
    let trace = |device_type: u32, rocm: &str| {
        format!(
            r#"{{"traceEvents":[
        {{"ph":"X","cat":"cuda_runtime","name":"hipLaunchKernel","pid":10,"tid":11,"ts":2000,"dur":5,"args":{{"correlation":7}}}},
        {{"ph":"X","cat":"kernel","name":"k","pid":2,"tid":1,"ts":2010,"dur":2,"args":{{"correlation":7,"device":2,"stream":1}}}},
        {{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":10,"tid":11,"ts":2001,"s":"t",
          "args":{{"Total Reserved":2097152,"Total Allocated":512,"Bytes":512,"Addr":140000,"Device Type":{device_type},"Device Id":0}}}}],
        "deviceProperties":[{{"id":0,"name":"","totalGlobalMem":1,"computeMajor":9,"computeMinor":4,"numSms":304,"warpSize":64}}]
        {rocm}}}"#
        )
    };
    let t = import(trace(6, r#","roctracer_version":4.1,"hip_runtime_version":60443483"#).as_bytes()).unwrap();
    let p = &t.processes[&10];
    let kernel = p.events.iter().find(|e| e.kind() == Some(EventKind::Kernel)).unwrap();
    assert_eq!(kernel.device, 0);
    let alloc = p.events.iter().find(|e| e.kind() == Some(EventKind::Alloc)).expect("HIP memory is device memory");
    assert_eq!(alloc.device, 0);
    assert_eq!(p.hip_runtime_version, 60_443_483);
    assert!(p.rocm, "recorded on ROCm: the report speaks HIP's terms");
    let device = p.events.iter().find(|e| e.kind() == Some(EventKind::Device)).unwrap();
    assert_eq!(p.string(device.name), "AMD GPU", "an empty name says what is known");
    // Without the allocator's events the one listed device is still the one.
    let t = import(trace(0, r#","roctracer_version":4.1"#).as_bytes()).unwrap();
    assert_eq!(t.processes[&10].events.iter().find(|e| e.kind() == Some(EventKind::Kernel)).unwrap().device, 0);
    // Neither member (HTA's MI250 trace): the 64-wide wavefronts tell ROCm.
    assert!(import(trace(0, "").as_bytes()).unwrap().processes[&10].rocm);
    // A CUDA trace (32-wide warps, no ROCm member) keeps its ids, however odd.
    let cuda = trace(1, "").replace(r#","warpSize":64"#, "");
    let t = import(cuda.as_bytes()).unwrap();
    assert!(!t.processes[&10].rocm);
    assert_eq!(t.processes[&10].events.iter().find(|e| e.kind() == Some(EventKind::Kernel)).unwrap().device, 2);
}

/// A trace of Meta's MTIA accelerator (HTA's test data) holds no GPU work cuflight reads: it says why, rather than
/// "nothing ran on the GPU".
#[test]
fn an_accelerator_cuflight_does_not_read_is_named() {
    let mtia = r#"{"traceEvents":[
        {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":10,"tid":11,"ts":2000,"dur":5},
        {"ph":"X","cat":"mtia_ccp_events","name":"pe_exe","pid":17,"tid":3910,"ts":2001,"dur":3,"args":{"stream":112}}]}"#;
    let t = import(mtia.as_bytes()).unwrap();
    let why = t.processes[&10].info.not_recorded.iter().find(|(k, _)| k == super::ACCELERATOR).map(|(_, w)| w.as_str());
    assert!(why.is_some_and(|w| w.contains("MTIA")), "{:?}", t.processes[&10].info.not_recorded);
    let cuda = r#"{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":10,"tid":11,"ts":2000,"dur":5}]}"#;
    let t = import(cuda.as_bytes()).unwrap();
    assert!(t.processes[&10].info.not_recorded.iter().all(|(k, _)| k != super::ACCELERATOR));
}
