//! Ranges in `cuflight stats`: NVTX ranges projected onto the GPU work launched inside them, a range a window
//! closes in, and `--filter-nvtx`/`--filter-time` summarising what a range launched.

use super::stats_with;
use cuflight_integration::*;
use serde_json::Value;

#[test]
fn nvtx_ranges_project_onto_the_gpu_work_launched_inside_them() {
    // nvtx_gpu_proj_sum and nvtx_kern_sum: 4 "step" ranges each launching 3 kernels (and synchronising before
    // the pop), 2 kernels outside any range.
    let dir = scratch("stats-proj");
    let mut server = Server::start(&dir, &[], &[]);
    let trace = dir.join("proj.cuf");
    let window = spawn_attach(server.pid(), &trace, &["--duration", "60s"], &[]);
    wait_for_agent_state(server.pid(), "recording");
    assert_eq!(server.cmd("t 4 3"), "done");
    assert_eq!(server.cmd("k 2"), "done 2");
    end_attach_window(window);
    assert!(server.end().0.success());
    let out = stats_with(&[trace.to_str().unwrap(), "--report", "nvtx_gpu_proj_sum,nvtx_kern_sum", "--format", "json"]);
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let proj = &s["nvtx_gpu_proj"].as_array().unwrap();
    assert_eq!(proj.len(), 1, "{proj:?}");
    let p = &proj[0];
    assert_eq!(
        (p["name"].as_str(), p["instances"].as_u64(), p["total_gpu_ops"].as_u64()),
        (Some("step"), Some(4), Some(12))
    );
    assert!(p["min_ns"].as_u64().unwrap() > 0);
    assert!(
        p["total_proj_ns"].as_u64() <= p["total_range_ns"].as_u64(),
        "synchronised inside: the GPU finished before the pop"
    );
    let kern = &s["nvtx_kern"].as_array().unwrap();
    assert_eq!(kern.len(), 1);
    assert_eq!(
        (kern[0]["range"].as_str(), kern[0]["kernel"].as_str(), kern[0]["count"].as_u64()),
        (Some("step"), Some("tick"), Some(12))
    );
}

#[test]
fn a_range_the_window_closes_in_counts_in_neither_nvtx_table() {
    // A duration window that ends inside a request (gpu-validate's infer part on an H100: 333 closed batch1
    // ranges and the first 3 kernels of a 334th): kernels per range must come out whole, so the open range's
    // kernels are left out with it.
    let dir = scratch("stats-open-range");
    let mut server = Server::start(&dir, &[], &[]);
    let trace = dir.join("open.cuf");
    let window = spawn_attach(server.pid(), &trace, &["--duration", "60s"], &[]);
    wait_for_agent_state(server.pid(), "recording");
    assert_eq!(server.cmd("t 2 3"), "done");
    assert_eq!(server.cmd("u step 2"), "done");
    end_attach_window(window);
    assert_eq!(server.cmd("q"), "done");
    assert!(server.end().0.success());
    let out = stats_with(&[trace.to_str().unwrap(), "--report", "nvtx_gpu_proj_sum,nvtx_kern_sum", "--format", "json"]);
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let proj = &s["nvtx_gpu_proj"][0];
    assert_eq!((proj["instances"].as_u64(), proj["total_gpu_ops"].as_u64()), (Some(2), Some(6)), "{proj}");
    let kern = &s["nvtx_kern"][0];
    assert_eq!((kern["range"].as_str(), kern["count"].as_u64()), (Some("step"), Some(6)), "{kern}");
}

/// `--filter-nvtx` and `--filter-time` (nsys's): the tables of what a range launched or a stretch held. In the
/// simulated training loop every step launches 19 kernels, its `forward` range 10 of them (run on the GPU after
/// the range closed on the host); the whole timeline is the whole trace; a missing range or instance is one line.
#[test]
fn filters_summarise_what_a_range_launched() {
    let dir = scratch("stats-filters");
    let prog = build_c("train", &dir);
    let r = record(&dir, &[], &prog, &["5"], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let t = r.trace.to_str().unwrap();
    let kernels = |filter: &[&str]| -> (u64, String) {
        let out =
            stats_with(&[&[t, "--report", "cuda_gpu_kern_sum,cuda_gpu_trace", "--format", "json"], filter].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let count = v["kernels"].as_array().unwrap().iter().map(|r| r["count"].as_u64().unwrap()).sum();
        let rows = v["gpu_trace"].as_array().unwrap().iter().filter(|r| r["grid_x"].is_u64()).count() as u64;
        assert_eq!(rows, count, "the per-event report keeps the same events");
        (count, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (all, _) = kernels(&[]);
    assert_eq!(all, 5 * 19, "5 steps (ProfilerStep#0 to #4) of 19 kernels");
    let (step, said) = kernels(&["--filter-nvtx", "ProfilerStep#3"]);
    assert_eq!(step, 19, "{said}");
    let (forward, said) = kernels(&["--filter-nvtx", "forward"]);
    assert_eq!(forward, 5 * 10, "{said}");
    assert!(said.contains("inside 'forward' (5 stretches"), "{said}");
    assert_eq!(kernels(&["--filter-nvtx", "forward/2"]).0, 10);
    assert_eq!(kernels(&["--filter-time", "0/1000s"]).0, all);
    assert_eq!(kernels(&["--filter-nvtx", "ProfilerStep#*"]).0, all, "every step");
    assert_eq!(kernels(&["--filter-nvtx", "ProfilerStep#*/2"]).0, 19, "the second step");
    // nvtx_pushpop_trace: each instance with its nest, as many as nvtx_sum counts; a filter keeps the ranges that
    // start inside.
    let out = stats_with(&[t, "--report", "nvtx_sum,nvtx_pushpop_trace", "--format", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let instances: u64 = v["nvtx"].as_array().unwrap().iter().map(|r| r["count"].as_u64().unwrap()).sum();
    let ranges = v["nvtx_pushpop_trace"].as_array().unwrap();
    assert_eq!(ranges.len() as u64, instances);
    let steps: Vec<&Value> = ranges.iter().filter(|r| r["level"] == 0).collect();
    assert_eq!(steps.len(), 5);
    assert!(steps.iter().all(|s| s["name"].as_str().unwrap().starts_with(":ProfilerStep#") && s["children"] == 4));
    for r in ranges {
        let n = |k: &str| r[k].as_u64().unwrap();
        assert_eq!(n("child_ns") + n("own_ns"), n("duration_ns"), "{r}");
    }
    let out = stats_with(&[t, "--report", "nvtx_pushpop_trace", "--format", "json", "--filter-nvtx", "ProfilerStep#3"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nvtx_pushpop_trace"].as_array().unwrap().len(), 5, "the step and its 4 ranges");
    for (args, says) in [
        (["--filter-nvtx", "nowhere"], "no NVTX range or annotation named 'nowhere'"),
        (["--filter-nvtx", "forward/99"], "'forward' has no instance 99: the trace holds 5"),
        (["--filter-time", "2s/1s"], "ends before it starts"),
        (["--filter-time", "1000/1001"], "nothing starts 1000.000 s or more after its start"),
        (["--filter-nvtx", "ProfilerStep#9"], "like it: ProfilerStep#0, ProfilerStep#1, ProfilerStep#2,"),
    ] {
        let out = stats_with(&[&[t][..], &args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
    }
}
