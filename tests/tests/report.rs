//! `cuflight report`: the temporal breakdown equals Holistic Trace Analysis' on the shared Kineto traces.

use cuflight_integration::*;
use std::process::Command;

fn report(path: &std::path::Path) -> serde_json::Value {
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn breakdown_equals_hta_within_one_percent() {
    for name in ["kineto-2rank-r0.json.gz", "kineto-a100-nccl-r0.json.gz", "kineto-v100-ddp-ns.json.gz"] {
        let path = shared_trace(name);
        let hta = python_json("hta_breakdown.py", &[path.as_os_str()]);
        let ours = &report(&path)["processes"][0]["breakdown"];
        for (k_ours, k_hta) in [
            ("idle_ns", "idle_us"),
            ("compute_ns", "compute_us"),
            ("non_compute_ns", "non_compute_us"),
            ("span_ns", "kernel_us"),
        ] {
            let (a, b) = (ours[k_ours].as_f64().unwrap() / 1000.0, hta[k_hta].as_f64().unwrap());
            assert!((a - b).abs() <= 0.01 * b.max(1.0), "{name}: {k_ours} {a} µs vs HTA {b} µs");
        }
    }
}

#[test]
fn report_works_where_hta_fails_and_on_captures() {
    // HTA 0.5 stops with an AssertionError on this trace; we still break it down.
    let r = report(&shared_trace("kineto-h100-qwen-inference.json.gz"));
    let main = r["processes"].as_array().unwrap().iter().max_by_key(|p| p["breakdown"]["gpu_ops"].as_u64()).unwrap();
    let b = &main["breakdown"];
    let sum =
        b["idle_ns"].as_u64().unwrap() + b["compute_ns"].as_u64().unwrap() + b["non_compute_ns"].as_u64().unwrap();
    assert_eq!(sum, b["span_ns"].as_u64().unwrap());
    assert_eq!(b["gpu_ops"].as_u64().unwrap(), 1707, "every GPU op, launched in the trace or not");
    // A cudasim capture of the demo loop: steps found from the NVTX ProfilerStep ranges.
    let dir = scratch("report");
    let prog = build_c("train", &dir);
    let rec = record(&dir, &[], &prog, &["4"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let r = report(&rec.trace);
    let p = &r["processes"][0];
    assert_eq!(p["steps"].as_array().unwrap().len(), 4);
    assert!(p["breakdown"]["compute_ns"].as_u64().unwrap() > 0);
    let text = Command::new(cuflight_bin()).arg("report").arg(&rec.trace).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("GPU time breakdown"));
}
