//! `cuflight report` on a busy GPU: each mode of tests/c/busy_gpu.c (kernels named as cuBLAS, CUTLASS and ATen
//! name theirs, each running a known time on cudasim, the CPU stand-in for the GPU) wastes the GPU one way, which
//! must come out as the top finding with its time and estimate as planted; the clean mode has none of them.

use cuflight_integration::*;
use serde_json::Value;
use std::process::Command;

const STEPS: u64 = 12;

/// Records `busy_gpu MODE STEPS` and returns its report and how many steps it analysed (the first is warm-up).
fn report_of(mode: &str) -> (Value, u64) {
    let dir = scratch(&format!("busy-gpu-{mode}"));
    let prog = build_c("busy_gpu", &dir);
    let rec = record(&dir, &[], &prog, &[mode, &STEPS.to_string()], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(&rec.trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = r["processes"][0]["steps"].as_array().unwrap().len() as u64;
    assert!((STEPS - 1..=STEPS).contains(&steps), "{steps} steps analysed");
    (r, steps)
}

fn finding<'a>(r: &'a Value, kind: &str) -> &'a Value {
    let all = r["findings"].as_array().unwrap();
    all.iter().find(|f| f["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in {}", r["findings"]))
}

fn metric(f: &Value, name: &str) -> f64 {
    f["evidence"]["metrics"][name].as_f64().unwrap_or_else(|| panic!("no {name} in {f}"))
}

/// Within `tol` of `want` as a fraction (the simulated kernels run at least their planted time, a loaded machine
/// may stretch them).
fn near(what: &str, got: f64, want: f64, tol: f64, f: &Value) {
    assert!((got - want).abs() <= tol * want, "{what}: {got} vs planted {want} (±{:.0}%)\n{f:#}", tol * 100.0);
}

#[test]
fn gemms_on_fallback_kernels_are_named_with_their_cost() {
    let (r, steps) = report_of("fallback");
    let f = finding(&r, "misaligned_gemm");
    assert_eq!(r["findings"][0]["kind"], "misaligned_gemm", "the top finding of a busy GPU: {}", r["findings"]);
    // 800 us align1 and 300 us of compute capability 7.5 a step, beside 1200 us of the GPU's own (9.0) GEMMs.
    let (misaligned, legacy) = (metric(f, "misaligned_gemm_ns"), metric(f, "legacy_arch_gemm_ns"));
    near("align1 GEMM time", misaligned, steps as f64 * 800e3, 0.25, f);
    near("7.5 GEMM time", legacy, steps as f64 * 300e3, 0.25, f);
    // By hand: the flagged time (both kinds) at the assumed 2x is half of it.
    let flagged = metric(f, "fallback_gemm_ns");
    assert_eq!(flagged, misaligned + legacy, "{f:#}");
    near("time to gain", f["time_lost_ns"].as_f64().unwrap(), flagged / 2.0, 0.001, f);
    let names: Vec<&str> =
        f["evidence"]["kernels"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 2, "only the fallback kernels: {names:?}");
    assert!(names.iter().all(|n| n.contains("align1") || n.starts_with("cutlass_75")), "{names:?}");
    let facts = f["evidence"]["facts"].to_string();
    assert!(facts.contains("9.0") && facts.contains("`_align1`"), "{facts}");
    assert!(f["fix"].as_str().unwrap().contains("50304"), "{f:#}");
}

#[test]
fn an_eager_gelu_is_one_chain_a_step_with_its_saving() {
    let (r, steps) = report_of("chain");
    let f = finding(&r, "elementwise_chains");
    assert_eq!(r["findings"][0]["kind"], "elementwise_chains", "{}", r["findings"]);
    assert_eq!(metric(f, "chains") as u64, steps, "one chain a step: {f:#}");
    assert_eq!(metric(f, "chain_kernels") as u64, 8 * steps, "{f:#}");
    let time = metric(f, "chain_ns");
    near("chain time", time, steps as f64 * 400e3, 0.25, f);
    // By hand: eight kernels of 50 us, the longest kept: 7/8 of the chain's time (more when one runs long).
    let gain = f["time_lost_ns"].as_f64().unwrap() / time;
    assert!((0.80..=0.876).contains(&gain), "fusing saves {gain:.3} of the chain: {f:#}");
    let facts = f["evidence"]["facts"].to_string();
    let ops = ["pow", "mul", "add", "mul", "tanh", "add", "mul", "mul"]
        .map(|op| format!("vectorized_elementwise_kernel_{op}"));
    assert!(facts.contains(&format!("8 kernels: {} ({steps} times", ops.join(" -> "))), "{facts}");
    assert!(f["fix"].as_str().unwrap().contains("torch.compile"), "{f:#}");
}

#[test]
fn attention_from_separate_kernels_is_named() {
    let (r, steps) = report_of("attention");
    let f = finding(&r, "unfused_attention");
    assert_eq!(metric(f, "patterns") as u64, steps, "GEMM, scale, softmax, GEMM once a step: {f:#}");
    // By hand: 200 + 30 + 100 + 200 us a step (the output projection after it is not attention's), half saved.
    let time = metric(f, "pattern_ns");
    near("attention time", time, steps as f64 * 530e3, 0.25, f);
    near("time to gain", f["time_lost_ns"].as_f64().unwrap(), time / 2.0, 0.001, f);
    assert!(f["fix"].as_str().unwrap().contains("scaled_dot_product_attention"), "{f:#}");
}

#[test]
fn the_same_work_done_well_has_none_of_them() {
    let (r, _) = report_of("clean");
    let kinds: Vec<&str> = r["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    for kind in ["misaligned_gemm", "elementwise_chains", "unfused_attention"] {
        assert!(!kinds.contains(&kind), "{kind} on the clean loop: {}", r["findings"]);
    }
}
