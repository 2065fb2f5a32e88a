//! `record --sample 1/N` on cudasim (the CPU test double for the driver, runtime and CUPTI): one step of every N
//! recorded whole, CUPTI quiet in between, every step's own range kept; stats says what the tables hold and the
//! report extrapolates to every step. The program (`tests/c/sampled.c`) runs kernels of known durations.

use cuflight_integration::*;
use serde_json::Value;

const STEPS: u64 = 200;

fn kernel_count(stats: &Value, name: &str) -> u64 {
    row(stats, "kernels", "name", name)["count"].as_u64().unwrap()
}

fn nvtx_count(stats: &Value, name: &str) -> u64 {
    row(stats, "nvtx", "name", name)["count"].as_u64().unwrap()
}

#[test]
fn one_step_in_ten_is_recorded_whole_and_extrapolated() {
    let dir = scratch("sampled_one_in_ten");
    let prog = build_c("sampled", &dir);
    let steps = STEPS.to_string();
    std::fs::create_dir_all(dir.join("full")).unwrap();
    let full = record(&dir.join("full"), &[], &prog, &[&steps], &[]);
    assert!(full.output.status.success(), "{}", full.stderr());
    let sampled = record(&dir, &["--sample", "1/10"], &prog, &[&steps], &[]);
    assert!(sampled.output.status.success(), "{}", sampled.stderr());
    assert!(sampled.stderr().contains("recorded 20 step(s) whole"), "{}", sampled.stderr());

    // Each recorded step whole, nothing of the others but their step range.
    let s = stats(&sampled.trace);
    assert_eq!(kernel_count(&s, "ampere_sgemm_128x64_nn"), 20, "one GEMM a recorded step");
    assert_eq!(kernel_count(&s, "flash_fwd_kernel"), 20);
    assert_eq!(kernel_count(&s, "vectorized_elementwise_kernel_add"), 60);
    assert_eq!(nvtx_count(&s, "train_step"), STEPS, "every step's range is kept");
    assert_eq!(nvtx_count(&s, "forward"), 20, "nested ranges only in recorded steps");
    assert_eq!(s["processes"][0]["sampled_steps"], 20);
    assert_eq!(s["processes"][0]["sample_one_in"], 10);
    assert_eq!(s["dropped"], 0);
    let f = stats(&full.trace);
    assert_eq!(kernel_count(&f, "ampere_sgemm_128x64_nn"), STEPS);

    // The report analyses the recorded steps and extrapolates: kernel time per step agrees with the full
    // recording's within the interval it gives (and a margin for a loaded machine).
    let r = report_json(&sampled.trace);
    let p = &r["processes"][0];
    let sampling = &p["sampling"];
    assert_eq!(sampling["steps_run"], STEPS);
    assert_eq!(sampling["steps_recorded"], 20);
    let analysed = sampling["steps_analysed"].as_u64().unwrap();
    assert!((18..=20).contains(&analysed), "{sampling}");
    assert_eq!(p["steps"].as_array().unwrap().len() as u64, analysed);
    let fr = report_json(&full.trace);
    let fp = &fr["processes"][0];
    let full_steps = fp["steps"].as_array().unwrap();
    let full_mean_ms =
        full_steps.iter().map(|s| s["kernel_ns"].as_f64().unwrap()).sum::<f64>() / 1e6 / full_steps.len() as f64;
    let (mean, ci) = (sampling["kernel_ms_per_step"].as_f64().unwrap(), sampling["kernel_ms_ci95"].as_f64().unwrap());
    assert!(
        (mean - full_mean_ms).abs() <= ci + 0.15 * full_mean_ms,
        "sampled {mean} ± {ci} ms, full {full_mean_ms} ms"
    );
    assert!(
        (sampling["kernel_s_run"].as_f64().unwrap() - mean * STEPS as f64 / 1e3).abs() < 1e-9,
        "the run's total is per step times the steps run"
    );
    // Kernel durations as the full recording has them (medians: a loaded machine stretches a few of cudasim's
    // busy-waiting kernels).
    for name in ["ampere_sgemm_128x64_nn", "flash_fwd_kernel", "vectorized_elementwise_kernel_add"] {
        let median = |s: &Value| row(s, "kernels", "name", name)["median_ns"].as_f64().unwrap();
        let (a, b) = (median(&s), median(&f));
        assert!((a / b - 1.0).abs() < 0.05, "{name}: median sampled {a} ns, full {b} ns");
    }
    assert!(!r["warnings"].to_string().contains("never ended"), "{}", r["warnings"]);

    let out = std::process::Command::new(cuflight_bin()).arg("report").arg(&sampled.trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Sampled: 20 of 200 steps recorded whole (one in 10"), "{text}");
    assert!(text.contains("(extrapolated)"), "{text}");
    // Step time of the recorded steps against the others', each by its own range.
    let (rec, others) =
        (sampling["step_ms_recorded"].as_f64().unwrap(), sampling["step_ms_unrecorded"].as_f64().unwrap());
    assert!(rec > 0.0 && others > 0.0, "{sampling}");
    assert!(text.contains("Sampled: step time (each step's own range): "), "{text}");
    assert!(text.contains("a sampled recording: the 180 steps not recorded count as idle in this split"), "{text}");
    assert!(!text.contains("for the first time"), "a sampled trace cannot tell first runs: {text}");

    // diff takes a sampled run beside a whole one, and says which is which.
    let out =
        std::process::Command::new(cuflight_bin()).arg("diff").arg(&full.trace).arg(&sampled.trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("(1 in 10 recorded)"), "{text}");
}

/// The processes of one job choose the same steps: one seed for a `record` run (`CUFLIGHT_SAMPLE_SEED`, which a
/// multi-node job exports on every node), the choice of each block derived from it alone.
#[test]
fn one_seed_records_the_same_steps_in_every_process() {
    let dir = scratch("sampled_seed");
    let prog = build_c("sampled", &dir);
    let recorded = |seed: &str| {
        let rec = record(&dir, &["--sample", "1/4"], &prog, &["40"], &[("CUFLIGHT_SAMPLE_SEED", seed)]);
        assert!(rec.output.status.success(), "{}", rec.stderr());
        let r = report_json(&rec.trace);
        r["processes"][0]["sampling"]["recorded"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let (a, b) = (recorded("42"), recorded("42"));
    assert_eq!(a.len(), 10, "{a:?}");
    assert_eq!(a, b, "one seed, one choice");
    assert!(a.iter().enumerate().all(|(block, &i)| i / 4 == block as u64), "one step of each block of 4: {a:?}");
    let others: Vec<Vec<u64>> = ["1", "2", "3"].iter().map(|s| recorded(s)).collect();
    assert!(others.iter().any(|o| *o != a), "other seeds choose otherwise: {a:?} {others:?}");
}

/// Steps marked by `cuflight.step()` (the agent's C entry point) are sampled the same way.
#[test]
fn steps_marked_through_the_agent_are_sampled() {
    let dir = scratch("sampled_marked");
    let prog = build_c("sampled", &dir);
    let rec = record(&dir, &["--sample", "1/5"], &prog, &["50", "mark"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    assert!(rec.stderr().contains("recorded 10 step(s) whole"), "{}", rec.stderr());
    let s = stats(&rec.trace);
    assert_eq!(kernel_count(&s, "flash_fwd_kernel"), 10);
    assert_eq!(nvtx_count(&s, "forward"), 10);
}

/// A program that marks no step is sampled in time slices (shortened here to 50 ms), one in two.
#[test]
fn a_program_without_steps_is_sampled_in_time_slices() {
    let dir = scratch("sampled_slices");
    let prog = build_c("sampled", &dir);
    let rec = record(&dir, &["--sample", "1/2"], &prog, &["400", "plain"], &[("CUFLIGHT_SAMPLE_SLICE_MS", "50")]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    assert!(rec.stderr().contains("time slice(s) whole"), "{}", rec.stderr());
    let s = stats(&rec.trace);
    let slices = s["processes"][0]["sampled_slices"].as_u64().unwrap();
    // About 1.4 s of work (longer on a loaded machine) in 50 ms slices, one of each two recorded.
    assert!((8..=200).contains(&slices), "{slices} slices: {}", s["processes"][0]);
    let gemms = kernel_count(&s, "ampere_sgemm_128x64_nn");
    assert!(gemms > 0 && gemms < 400, "{gemms} of 400 iterations' GEMMs recorded");
    let r = report_json(&rec.trace);
    let sampling = &r["processes"][0]["sampling"];
    assert_eq!(sampling["unit"], "slice", "{sampling}");
    assert_eq!(sampling["steps_recorded"], slices);
    assert!(sampling["steps_run"].as_u64().unwrap() >= slices * 3 / 2 - 1, "{sampling}");
    let out = std::process::Command::new(cuflight_bin()).arg("report").arg(&rec.trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("time slices of") && text.contains("the program marks no steps"), "{text}");
}

/// What cannot be sampled is refused before the program runs.
#[test]
fn sampling_needs_nvtx_steps_and_a_fraction() {
    let dir = scratch("sampled_refused");
    let prog = build_c("sampled", &dir);
    for (flags, says) in [
        (&["--sample", "1/10", "--trace", "cuda"][..], "keep nvtx in --trace"),
        (&["--sample", "1/1"][..], "leave --sample out"),
        (&["--sample", "one"][..], "give 1/N"),
        (&["--sample", "1/10", "--every", "1s", "--count", "2"][..], "cannot be used with"),
    ] {
        let rec = record(&dir, flags, &prog, &["5"], &[]);
        assert!(!rec.output.status.success(), "{flags:?}");
        assert!(rec.stderr().contains(says), "{flags:?}: {}", rec.stderr());
    }
}
