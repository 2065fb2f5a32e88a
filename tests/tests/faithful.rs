//! The agent against cudasim's model of each CUDA release (issue 8): every test here is a scenario that fails
//! when the agent follows a wrong idea of CUPTI (NULL buffers, exact-size layouts, forced flushes, one clock
//! offset, mangled names, the driver's symbols in the global scope, fork children, setup failures).

use cuflight_integration::*;
use serde_json::Value;

const RELEASES: &[(&str, u64)] = &[
    ("12.0", 19),
    ("12.4", 22),
    ("12.6", 24),
    ("12.8", 26),
    ("12.9", 28),
    ("13.0", 130000),
    ("13.3", 130300),
    ("13.5", 130500),
];

fn unused(s: &Value) -> Vec<Value> {
    s["processes"].as_array().unwrap().iter().flat_map(|p| p["records_unused"].as_array().unwrap().clone()).collect()
}

#[test]
fn every_modelled_release_is_recorded_exactly() {
    let dir = scratch("releases");
    let prog = build_c("streams", &dir);
    for &(release, api) in RELEASES {
        let r = record(&dir, EVERYTHING, &prog, &["10"], &[("CUDASIM_CUPTI_VERSION", release)]);
        assert!(r.output.status.success(), "{release}: {}", r.stderr());
        let s = stats(&r.trace);
        assert_eq!(s["processes"][0]["cupti_version"], api, "{release}");
        // 2 threads x 2 streams x 10 iterations; record layouts differ per release (Kernel9..13, Memcpy5..7,
        // Memset4/5, Memory3/4, Synchronization 1/2).
        assert_eq!(count(&s, "kernels", "name", "saxpy"), 40, "{release}");
        assert_eq!(count(&s, "kernels", "name", "relu"), 40, "{release}");
        assert_eq!(count(&s, "memset", "kind", "device"), 40, "{release}");
        assert_eq!(count(&s, "memcpy", "kind", "HtoD"), 42, "{release}");
        assert!(count(&s, "sync", "kind", "cudaStreamSynchronize") > 0, "{release}: synchronization records");
        assert_eq!(unused(&s), Vec::<Value>::new(), "{release}: no record skipped or unfinished");
        assert_eq!(s["dropped"], 0, "{release}");
        assert_eq!(s["processes"][0]["device_clock"], "monotonic", "{release}: the timestamp callback is in force");
    }
}

#[test]
fn many_cuda_threads_get_buffers_and_old_cupti_never_gets_null() {
    let dir = scratch("buffers");
    let prog = build_c("threads", &dir);
    // CUDA 13: every producing thread holds a buffer; a pool of 2 must grow.
    let r = record(&dir, &[], &prog, &["24", "120"], &[("CUFLIGHT_CUPTI_BUFFERS", "2")]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    assert_eq!(count(&s, "kernels", "name", "tick"), 24 * 120, "{}", r.stderr());
    assert!(s["processes"][0]["buffers_grown"].as_u64().unwrap() > 0);
    assert_eq!(s["dropped"], 0);
    // CUDA 12.8 (API 26) crashes on a NULL buffer: with a pool of 1 the next buffer is needed while the first is
    // still being delivered; the agent must hand out another one, whatever its cap.
    let r = record(
        &dir,
        &[],
        &prog,
        &["24", "120"],
        &[("CUDASIM_CUPTI_VERSION", "12.8"), ("CUFLIGHT_CUPTI_BUFFERS", "1"), ("CUFLIGHT_CUPTI_BUFFERS_MAX", "1")],
    );
    assert!(r.output.status.success(), "no crash in libcupti: {}", r.stderr());
    assert_eq!(count(&stats(&r.trace), "kernels", "name", "tick"), 24 * 120);
}

#[test]
fn records_cupti_drops_at_the_buffer_cap_are_counted() {
    // CUPTI 13.5 accepts NULL at the cap and drops records; the count is read after every flush, so drops after
    // the last buffer completion are reported too.
    let dir = scratch("cupti-drops");
    let prog = build_c("threads", &dir);
    let r = record(
        &dir,
        &[],
        &prog,
        &["24", "120"],
        &[("CUFLIGHT_CUPTI_BUFFERS", "1"), ("CUFLIGHT_CUPTI_BUFFERS_MAX", "1")],
    );
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    let p = &s["processes"][0];
    let cupti_dropped = p["drops"]["cupti_dropped"].as_u64().unwrap();
    assert!(p["buffers_refused"].as_u64().unwrap() > 0, "{p}");
    assert!(cupti_dropped > 0, "{p}");
    assert!(count(&s, "kernels", "name", "tick") + cupti_dropped >= 24 * 120, "every kernel recorded or counted");
}

#[test]
fn only_the_exit_flush_is_forced_and_unfinished_records_are_counted() {
    let dir = scratch("inflight");
    let prog = build_c("inflight", &dir);
    let r = record(&dir, &[], &prog, &[], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    let long = row(&s, "kernels", "name", "long_kernel");
    assert_eq!(long["count"], 1, "the kernel running across cudaProfilerStop is recorded whole");
    assert!(long["total_ns"].as_u64().unwrap() >= 290_000_000, "{long}");
    assert_eq!(count(&s, "kernels", "name", "left_running"), 0, "unfinished at exit: not placed at t=0");
    let unused = unused(&s);
    assert_eq!(unused.len(), 1, "{unused:?}");
    assert_eq!((unused[0]["class"].as_str(), unused[0]["incomplete"].as_u64()), (Some("kernel"), Some(1)));
}

/// Kernels, from the Kineto JSON export, with their launch call's start (by correlation).
fn kernels_with_launches(trace: &std::path::Path, dir: &std::path::Path) -> Vec<(String, f64, f64, f64)> {
    let v = export_chrome(trace, &dir.join("trace.json"));
    let events = v["traceEvents"].as_array().unwrap();
    let launches: std::collections::HashMap<u64, (f64, f64)> = events
        .iter()
        .filter(|e| e["cat"] == "cuda_runtime" && e["name"] == "cudaLaunchKernel")
        .map(|e| (e["args"]["correlation"].as_u64().unwrap(), (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap())))
        .collect();
    events
        .iter()
        .filter(|e| e["cat"] == "kernel")
        .map(|e| {
            let launch = launches[&e["args"]["correlation"].as_u64().unwrap()];
            (e["name"].as_str().unwrap().to_string(), e["ts"].as_f64().unwrap(), launch.0, launch.1)
        })
        .collect()
}

#[test]
fn device_time_stays_on_the_host_clock_while_realtime_is_slewed() {
    // CLOCK_REALTIME (CUPTI's default clock) drifts 2% against CLOCK_MONOTONIC, as an (exaggerated) NTP slew.
    let dir = scratch("clock");
    let prog = build_c("streams", &dir);
    let slew = [("CUDASIM_REALTIME_SLEW_PPM", "20000")];
    for (label, env) in [
        ("timestamp callback", vec![slew[0]]),
        ("clock pairs, piecewise-linear", vec![slew[0], ("CUFLIGHT_DEVICE_CLOCK", "cupti")]),
    ] {
        let r = record(&dir, &["--flush-ms", "50"], &prog, &["60"], &env);
        assert!(r.output.status.success(), "{}", r.stderr());
        let kernels = kernels_with_launches(&r.trace, &dir);
        assert_eq!(kernels.len(), 480, "{label}: {}\n{}", r.stderr(), stats(&r.trace)["kernels"]);
        // A kernel never starts before its launch call began (one pair, or CUPTI's own clock, breaks this by
        // the slew accumulated since the pair: milliseconds here). 50 µs of slack for the pair's own error.
        for (name, ts, launch_ts, _) in &kernels {
            assert!(ts + 50.0 >= *launch_ts, "{label}: {name} at {ts} µs starts before its launch at {launch_ts} µs");
        }
    }
}

#[test]
fn mangled_kernel_names_are_demangled_and_kept() {
    let dir = scratch("names");
    let prog = build_c("scenario", &dir);
    let r = record(&dir, &[], &prog, &["clean", "2"], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    let readable = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, \
                    at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)";
    assert!(count(&s, "kernels", "name", readable) > 0, "{}", s["kernels"]);
    let text = export_chrome(&r.trace, &dir.join("names.json")).to_string();
    assert!(text.contains(r#""mangled":"_ZN2at6native29vectorized_elementwise_kernel"#), "the symbol stays available");
}

#[test]
fn devices_are_found_when_the_runtime_is_loaded_privately() {
    let dir = scratch("dlopen-rt");
    let prog = build_c_linked("dlopen_rt", &dir, false);
    let r = record(&dir, &[], &prog, &[], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    assert_eq!(count(&s, "kernels", "name", "touch"), 1);
    assert!(!s["devices"].as_array().unwrap().is_empty(), "libcuda found with RTLD_NOLOAD: {}", s["devices"]);
}

#[test]
fn a_failed_setup_leaves_cupti_to_other_tools() {
    let dir = scratch("setup-fails");
    let prog = build_c("subscriber", &dir);
    let r = record(&dir, &[], &prog, &["late"], &[("CUDASIM_FAIL", "cuptiActivityRegisterCallbacks")]);
    assert_eq!(r.output.status.code(), Some(0), "the program subscribes after the agent gave up: {}", r.stderr());
    assert!(r.stderr().contains("registering activity buffers failed"), "{}", r.stderr());
}

#[test]
fn cuda_graph_kernels_carry_their_graph_and_capture_still_works() {
    let dir = scratch("graphs");
    let prog = build_c("graphs", &dir);
    let r = record(&dir, &[], &prog, &[], &[]);
    assert_eq!(r.output.status.code(), Some(0), "stream capture works under the agent: {}", r.stderr());
    let s = stats(&r.trace);
    for k in ["g_a", "g_b", "g_c"] {
        assert_eq!(count(&s, "kernels", "name", k), 7, "{k}");
    }
    assert_eq!(count(&s, "api", "name", "cudaGraphLaunch"), 5);
    assert_eq!(count(&s, "api", "name", "cuGraphLaunch"), 2, "direct driver launches are recorded");
    assert_eq!(count(&s, "api", "name", "cudaStreamBeginCapture"), 1);
    let graphs = s["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 1, "{graphs:?}");
    assert_eq!((graphs[0]["launches"].as_u64(), graphs[0]["kernels"].as_u64()), (Some(7), Some(21)));
    assert_eq!(graphs[0]["nodes"], 3);
    // nvtx_gpu_proj_sum: the "replay" range, popped before all its graphs ran, projects all 5 x 3 of their kernels
    // (not the first kernel of the first launch: a graph launch's work arrives under one correlation).
    let out = std::process::Command::new(cuflight_bin())
        .args(["stats", "--report", "nvtx_gpu_proj_sum,nvtx_kern_sum", "--format", "json"])
        .arg(&r.trace)
        .output()
        .unwrap();
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let proj = &p["nvtx_gpu_proj"][0];
    assert_eq!((proj["name"].as_str(), proj["instances"].as_u64()), (Some("replay"), Some(1)), "{p}");
    assert_eq!(proj["total_gpu_ops"], 15, "{p}");
    let kern: u64 = p["nvtx_kern"].as_array().unwrap().iter().map(|k| k["count"].as_u64().unwrap()).sum();
    assert_eq!(kern, 15, "{p}");
    // The Kineto JSON export names each kernel's graph and node.
    let v = export_chrome(&r.trace, &dir.join("graphs.json"));
    let nodes: std::collections::HashSet<u64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "kernel")
        .map(|e| e["args"]["graph node id"].as_u64().expect("every kernel here ran in the graph"))
        .collect();
    assert_eq!(nodes.len(), 3);
}

#[test]
fn runtime_calls_pytorch_makes_are_modelled_and_recorded() {
    let dir = scratch("torch-apis");
    let prog = build_c("torch_apis", &dir);
    let r = record(&dir, &[], &prog, &[], &[("CUDASIM_DEVICES", "2")]);
    assert_eq!(r.output.status.code(), Some(0), "{}", r.stderr());
    let s = stats(&r.trace);
    let copies: Vec<(String, String, u64, u64)> = s["memcpy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let field = |k: &str| m[k].as_str().unwrap_or("").to_string();
            (field("kind"), field("host_memory"), m["count"].as_u64().unwrap(), m["bytes"].as_u64().unwrap())
        })
        .collect();
    let has = |kind: &str, host: &str, n: u64, bytes: u64| copies.contains(&(kind.into(), host.into(), n, bytes));
    assert!(has("HtoD", "pinned", 1, 1 << 20), "cudaHostRegister'ed memory is pinned: {copies:?}");
    assert!(copies.iter().any(|c| c.0 == "HtoD" && c.3 == 1024 && c.2 == 1), "one 2D copy record: {copies:?}");
    assert!(copies.iter().any(|c| c.0 == "PtoP" && c.3 == 64 << 10), "a peer copy: {copies:?}");
    assert_eq!(count(&s, "kernels", "name", "ex_kernel"), 1);
    for api in ["cudaLaunchKernelExC", "cudaMemcpy2D", "cudaMemcpyPeer", "cudaHostRegister"] {
        assert_eq!(count(&s, "api", "name", api), 1, "{api}");
    }
    // A call that only reads state is not subscribed by default (`--trace ...,queries` records it).
    assert_eq!(count(&s, "api", "name", "cudaFuncGetAttributes"), 0);
}

#[test]
fn kernels_with_registered_parameters_take_ordinary_argument_arrays() {
    let dir = scratch("params");
    let prog = build_c("params", &dir);
    let r = record(&dir, &[], &prog, &[], &[]);
    assert_eq!(r.output.status.code(), Some(0), "the kernel saw its 4-byte int and its double: {}", r.stderr());
    assert_eq!(count(&stats(&r.trace), "kernels", "name", "scale_n"), 1);
}

#[test]
fn records_a_periodic_flush_is_still_delivering_at_exit_are_kept() {
    // The flush thread takes CUPTI's buffers, then is held up for 500 ms before they reach the rings (cudasim's
    // model of a descheduled thread); meanwhile the program exits. The exit handler must wait for them before
    // declaring the trace complete. Failed before: a run under load lost a stream's last iteration, silently.
    let dir = scratch("slow-flush");
    let prog = build_c("streams", &dir);
    let r = record(&dir, &["--flush-ms", "10"], &prog, &["100"], &[("CUDASIM_SLOW_FLUSH_MS", "500")]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    for name in ["saxpy", "relu"] {
        assert_eq!(count(&s, "kernels", "name", name), 400, "{name}: {}\n{}", r.stderr(), s["kernels"]);
    }
    assert_eq!(s["dropped"], 0, "{}", r.stderr());
}
