//! A loop as torch.compile runs it (tests/c/compiled_loop.c, on cudasim: Inductor-named Triton kernels, a
//! compile in the first step and a recompilation for a new shape at step 12): the report keeps the first step
//! apart as warm-up and names the recompilation with its cost; stats groups the kernels by what they fuse.

use cuflight_integration::*;
use serde_json::Value;
use std::process::Command;

#[test]
fn a_recompilation_in_the_middle_of_the_run_is_named_with_its_cost() {
    // Warm-up and slow steps are told by time: one recording at a time.
    let _one = serial();
    let dir = scratch("compiled-loop");
    let prog = build_c("compiled_loop", &dir);
    let rec = record(&dir, &[], &prog, &["20", "12"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let r = report_json(&rec.trace);
    let w = &r["processes"][0]["warmup"];
    assert!(w["steps"].as_u64().unwrap() >= 1 && w["detail"][0]["name"] == "ProfilerStep#0", "{w}");
    let later = w["later"].as_array().unwrap_or_else(|| panic!("no later first runs: {w}"));
    assert_eq!(later.len(), 1, "{w}");
    let f = &later[0];
    assert_eq!(
        (f["name"].as_str(), f["new_kernels"].as_u64(), f["recompiled"].as_bool()),
        (Some("ProfilerStep#12"), Some(2), Some(true)),
        "{f}"
    );
    // 30 ms of compiling over a step of about 6 ms of kernels.
    let cost = f["cost_ns"].as_f64().unwrap() / 1e6;
    assert!((20.0..60.0).contains(&cost), "{f}");
    let text = Command::new(cuflight_bin()).arg("report").arg(&rec.trace).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text.lines().find(|l| l.contains("Steps doing first-time work after warm-up")).expect("named");
    assert!(line.contains("ProfilerStep#12") && line.contains("a torch.compile recompilation"), "{line}");
    // Left out of the steps the findings cover, as the warm-up is; --include-warmup keeps both.
    let steps = |r: &Value| r["processes"][0]["steps"].as_array().unwrap().len() as u64;
    assert_eq!(steps(&r), 20 - w["steps"].as_u64().unwrap() - 1, "{}", r["processes"][0]["steps"]);
    let all = report_json_with(&rec.trace, &["--include-warmup"]);
    assert_eq!(steps(&all), 20);
    // The 30 ms of recompiling blames no host work on the steady steps.
    let host = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "cpu_bound");
    assert!(host.is_none_or(|f| f["share"].as_f64().unwrap() < 0.05), "{}", r["findings"]);
    let s = stats(&rec.trace);
    let triton: Vec<(String, u64)> = s["triton"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["fused"].as_str().unwrap().to_string(), t["kernels"].as_u64().unwrap()))
        .collect();
    assert_eq!(triton, vec![("_to_copy_mean_pow_rsqrt".to_string(), 2), ("add_mul".to_string(), 2)], "{}", s["triton"]);
}

/// Without a recompilation nothing later is named, and a run with one keeps its steady steps' verdict.
#[test]
fn a_compiled_loop_without_recompilation_names_no_later_step() {
    // Warm-up and slow steps are told by time: one recording at a time.
    let _one = serial();
    let dir = scratch("compiled-loop-steady");
    let prog = build_c("compiled_loop", &dir);
    let rec = record(&dir, &[], &prog, &["20", "100"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let r: Value = report_json(&rec.trace);
    let w = &r["processes"][0]["warmup"];
    assert!(w["later"].as_array().is_none_or(|l| l.is_empty()), "{w}");
    assert!(w["steps"].as_u64().unwrap() >= 1, "{w}");
    // The first step's 30 ms of host work is the compile, said so: its kernels are Inductor's.
    assert_eq!(w["compiled"], true, "{w}");
    let text = Command::new(cuflight_bin()).arg("report").arg(&rec.trace).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text.lines().find(|l| l.trim_start().starts_with("Warm-up:")).expect("a warm-up line");
    assert!(line.contains("torch.compile compiling (Dynamo's tracing") && !line.contains("CUDA graphs"), "{line}");
}

/// A compiled model whose host cannot launch its kernels fast enough: the fixes speak to a program that is already
/// compiled (CUDA graphs, graph breaks), not one to compile; the same loop with its host work in longer stretches
/// is host-bound, with the compiled program's fix for that too.
#[test]
fn a_compiled_loop_the_host_holds_back_is_told_what_to_do_next_not_to_compile() {
    let dir = scratch("compiled-loop-host");
    let prog = build_c("compiled_loop", &dir);
    for (host_us, kind, fix) in [
        ("40", "launch_bound", "The program already runs torch.compile'd code"),
        ("400", "cpu_bound", "The program already runs torch.compile'd code: the host work"),
    ] {
        let rec = record(&dir, &[], &prog, &["20", "100", host_us], &[]);
        assert!(rec.output.status.success(), "{}", rec.stderr());
        let r = report_json(&rec.trace);
        let f = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == kind);
        let f = f.unwrap_or_else(|| panic!("{host_us} us of host work: no {kind} in {}", r["findings"]));
        let text = f["fix"].as_str().unwrap();
        assert!(text.starts_with(fix) && !text.contains("torch.compile (fuses"), "{host_us} us: {f}");
        assert!(!text.contains("optimizer"), "no optimizer ran, so no training advice: {f}");
    }
}
