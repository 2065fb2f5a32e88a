//! Device counters (`record --gpu-metrics`) on cudasim, the CPU stand-in for the GPU, whose PM sampling model
//! computes each sample from the work kernels declare (tests/c/counters.c): the counters `stats --report
//! gpu_metrics` joins to each kernel must agree, within 2%, with the declared work over the trace's own kernel
//! durations and the simulated H100's peaks; a refusal (privileges, another tool holding the counters) is one line
//! and a complete trace without counters.

use cuflight_integration::*;
use serde_json::Value;

const ROUNDS: u64 = 3;
/// The simulated H100 SXM5's peaks (cudasim/src/pm_counters.rs, from NVIDIA's datasheet): bytes and FLOPs a ns.
const DRAM_PEAK: f64 = 3350.0;
const TENSOR_PEAK: f64 = 989_400.0;

/// Σ duration (ns) of the trace's kernels named `name`, and how many.
fn kernel_time(trace: &std::path::Path, name: &str) -> (u64, u64) {
    let mut source = cuflight_collector::model::source::EventSource::open(trace).unwrap();
    let (mut ns, mut n) = (0, 0);
    source
        .for_each(|_, p, e| {
            if e.kind() == Some(cuflight_format::EventKind::Kernel) && p.string(e.name) == name {
                ns += e.end - e.start;
                n += 1;
            }
        })
        .unwrap();
    (ns, n)
}

fn kernel_row<'a>(stats: &'a Value, name: &str) -> &'a Value {
    stats["gpu_metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["level"] == "kernel" && r["name"] == name)
        .unwrap_or_else(|| panic!("no gpu_metrics row for {name}: {}", stats["gpu_metrics"]))
}

fn close(what: &str, got: f64, want: f64) {
    assert!((got - want).abs() <= 0.02 * want.max(1.0), "{what}: {got:.2}% measured, {want:.2}% declared");
}

const GEMM: &str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1";

#[test]
fn counters_of_planted_kernels_match_their_declared_work() {
    let dir = scratch("gpu-counters");
    let prog = build_c("counters", &dir);
    let rec = record(&dir, &["--gpu-metrics=100us"], &prog, &[&ROUNDS.to_string()], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    assert!(rec.stderr().contains("sampled device counters"), "{}", rec.stderr());
    let stats = stats(&rec.trace);

    // stream_copy: 12 GB a kernel (6 GB each way).
    let (ns, n) = kernel_time(&rec.trace, "stream_copy");
    assert_eq!(n, ROUNDS);
    let copy = kernel_row(&stats, "stream_copy");
    close("stream_copy DRAM", copy["dram_pct"].as_f64().unwrap(), 100.0 * 12e9 * n as f64 / (ns as f64 * DRAM_PEAK));
    assert_eq!(copy["bound"], "memory");
    assert!(copy["tensor_active_pct"].as_f64().unwrap() < 0.1);

    // The GEMM: 4.2 TFLOP on Tensor Cores a kernel, 0.5 GB of DRAM traffic.
    let (ns, n) = kernel_time(&rec.trace, GEMM);
    let gemm = kernel_row(&stats, GEMM);
    close(
        "GEMM tensor",
        gemm["tensor_active_pct"].as_f64().unwrap(),
        100.0 * 4.2e12 * n as f64 / (ns as f64 * TENSOR_PEAK),
    );
    close("GEMM DRAM", gemm["dram_pct"].as_f64().unwrap(), 100.0 * 0.5e9 * n as f64 / (ns as f64 * DRAM_PEAK));
    assert_eq!(gemm["bound"], "compute");

    // The FMA loop: a full grid, nothing moved, no Tensor Cores.
    let fma = kernel_row(&stats, "fma_loop");
    close("FMA SM active", fma["sm_active_pct"].as_f64().unwrap(), 100.0);
    assert_eq!((fma["dram_pct"].as_f64(), fma["tensor_active_pct"].as_f64()), (Some(0.0), Some(0.0)));
    assert_eq!(fma["bound"], "compute (CUDA cores)");

    // Each 5 ms kernel held ~50 samples by itself; the 60 us elementwise kernels only as their name's aggregate.
    for row in [copy, gemm, fma] {
        assert_eq!(row["measured_alone"], ROUNDS, "{row}");
        assert!(row["whole_samples"].as_u64().unwrap() >= 5 * ROUNDS, "{row}");
    }
    let elementwise = kernel_row(&stats, "vectorized_elementwise_kernel");
    let (ns, n) = kernel_time(&rec.trace, "vectorized_elementwise_kernel");
    // (A loaded machine descheduling the simulated GPU can stretch one of them past five samples.)
    assert!(elementwise["measured_alone"].as_u64().unwrap() * 10 <= n, "{elementwise}");
    assert!(elementwise["samples"].as_u64().unwrap() > 0, "{elementwise}");
    // The name's aggregate counts its samples' counters over the share its kernels filled (the launch gaps between
    // them add nothing): the declared bytes over the kernels' own time, as for the long kernels.
    close(
        "elementwise DRAM",
        elementwise["dram_pct"].as_f64().unwrap(),
        100.0 * 0.2e9 * n as f64 / (ns as f64 * DRAM_PEAK),
    );

    let device = stats["gpu_metrics"].as_array().unwrap().iter().find(|r| r["level"] == "device").unwrap();
    assert_eq!(device["name"], "NVIDIA H100 80GB HBM3 (cudasim)");
    assert!(device["samples"].as_u64().unwrap() >= 3 * 50 * ROUNDS, "{device}");
    let processes = &stats["processes"][0];
    assert!(processes["status"].as_str().unwrap().is_empty());
}

/// The report's counter findings on the same program: the streaming copy is memory-bound (and judged so alone), the
/// small GEMM leaves the Tensor Cores idle next to the large one, each estimate as the finding says it is made.
#[test]
fn the_report_names_the_memory_bound_kernel_and_the_starved_gemm() {
    let dir = scratch("gpu-counters-report");
    let prog = build_c("counters", &dir);
    let rec = record(&dir, &["--gpu-metrics"], &prog, &["6"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let report = report_json(&rec.trace);
    let finding = |kind: &str| {
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} in {}", report["findings"]))
    };
    let names = |f: &Value| -> Vec<String> {
        f["evidence"]["kernels"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap().to_string()).collect()
    };
    let lost = |f: &Value| f["time_lost_ns"].as_f64().unwrap();
    // Each step carries its samples' counters; all of them together are the device's over the steps.
    let steps = report["processes"][0]["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    for step in steps {
        assert!(step["counters"]["samples"].as_u64().unwrap() >= 100, "{step}");
        assert!(step["counters"]["dram_pct"].as_f64().unwrap() > 10.0, "{step}");
    }
    let total = &report["processes"][0]["step_total"]["counters"];
    let samples: u64 = steps.iter().map(|s| s["counters"]["samples"].as_u64().unwrap()).sum();
    assert_eq!(total["samples"].as_u64().unwrap(), samples);
    let memory = finding("memory_bound");
    assert_eq!(names(&memory), ["stream_copy"]);
    let in_steps = memory["evidence"]["metrics"]["memory_bound_ns"].as_f64().unwrap();
    assert!((lost(&memory) - 0.5 * in_steps).abs() <= 1.0 + 1e-6 * in_steps, "{memory}");

    let starved = finding("tensor_underused");
    assert_eq!(names(&starved), ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64"]);
    // The target is the large GEMM's activity (4.2 TFLOP in its 5 ms: about 85%), the small one's about 15%.
    let stats = stats(&rec.trace);
    let big = kernel_row(&stats, GEMM)["tensor_active_pct"].as_f64().unwrap();
    let small = kernel_row(&stats, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64")["tensor_active_pct"]
        .as_f64()
        .unwrap();
    close("target", starved["evidence"]["metrics"]["target_tensor_pct"].as_f64().unwrap(), big);
    let (ns, n) = kernel_time(&rec.trace, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64");
    close("small GEMM tensor", small, 100.0 * 2.9682e11 * n as f64 / (ns as f64 * TENSOR_PEAK));
    let underused = starved["evidence"]["metrics"]["underused_gemm_ns"].as_f64().unwrap();
    let want = underused * (1.0 - small / big);
    assert!((lost(&starved) - want).abs() <= 0.01 * want, "{} against {want}: {starved}", lost(&starved));
    // Neither the large GEMM nor the FMA loop is a finding: one is compute-bound, the other on CUDA cores.
    for f in report["findings"].as_array().unwrap() {
        let kernels = f["evidence"]["kernels"].as_array().map_or(vec![], |k| k.clone());
        if f["kind"] == "memory_bound" || f["kind"] == "tensor_underused" {
            assert!(kernels.iter().all(|k| k["name"] != GEMM && k["name"] != "fma_loop"), "{f}");
        }
    }
}

/// Counters refused: one line saying why and what would allow them, and the trace complete without them.
#[test]
fn a_refusal_is_one_line_and_the_trace_goes_on_without_counters() {
    for (mode, says) in [
        ("denied", "NVreg_RestrictProfilingToAdminUsers=0"),
        ("busy", "CUPTI_ERROR_HARDWARE_BUSY"),
        // A failure with no documented cause names the call that failed.
        ("invalid", "(CUPTI result 1 at cuptiPmSamplingSetConfig)"),
    ] {
        let dir = scratch(&format!("gpu-counters-{mode}"));
        let prog = build_c("counters", &dir);
        let rec = record(&dir, &["--gpu-metrics"], &prog, &["1"], &[("CUDASIM_PM_SAMPLING", mode)]);
        assert!(rec.output.status.success(), "{}", rec.stderr());
        let stderr = rec.stderr();
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("no device counters")).collect();
        assert_eq!(lines.len(), 1, "{}", rec.stderr());
        assert!(lines[0].contains(says), "{}", lines[0]);
        let stats = stats(&rec.trace);
        assert_eq!(stats["gpu_metrics"].as_array().unwrap().len(), 0);
        assert_eq!(kernel_time(&rec.trace, "stream_copy").1, 1);
        assert_eq!(kernel_time(&rec.trace, "vectorized_elementwise_kernel").1, 40);
    }
}

/// A program that ends while the sampler is still setting up (cudasim's host initialisation made to take 1 s; the
/// program runs about 0.1 s) gets a line saying so and where the set-up was, not a CUPTI failure: at exit the
/// set-up goes no further than the call it is in (the H200's ~20 ms doctor probe read "setting up CUPTI's PM
/// sampling failed (CUPTI result 1)").
#[test]
fn a_program_that_ends_during_the_set_up_is_told_so_not_a_cupti_failure() {
    let dir = scratch("gpu-counters-short");
    let prog = build_c("counters", &dir);
    let rec = record(&dir, &["--gpu-metrics"], &prog, &["1"], &[("CUDASIM_PM_HOST_INIT_US", "1000000")]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let stderr = rec.stderr();
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("no device counters")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("still being set up (at cuptiPmSamplingSetConfig)"), "{}", lines[0]);
    assert!(!lines[0].contains("failed"), "{}", lines[0]);
    assert_eq!(kernel_time(&rec.trace, "vectorized_elementwise_kernel").1, 40);
}

/// Samples in `stderr`'s "sampled device counters N times" lines, one a window.
fn sampled_counts(stderr: &str) -> Vec<u64> {
    stderr.lines().filter_map(|l| l.split("sampled device counters ").nth(1)?.split(' ').next()?.parse().ok()).collect()
}

/// A sampler slower than the device (decoding 500 us a sample at a 50 us interval: the H200 took 67-122 us)
/// falls behind; what it cannot decode by the end is lost, counted, and the line says how often it can sample.
#[test]
fn a_sampler_that_falls_behind_says_samples_were_lost_and_how_often_it_can_sample() {
    let dir = scratch("gpu-counters-behind");
    let prog = build_c("counters", &dir);
    let rec = record(&dir, &["--gpu-metrics=50us"], &prog, &["3"], &[("CUDASIM_PM_DECODE_US", "500")]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let stderr = rec.stderr();
    let line = stderr.lines().find(|l| l.contains("sampled device counters")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains("samples were lost") && line.contains("--gpu-metrics="), "{line}");
    let each: f64 = line.split(" (").nth(1).and_then(|r| r.split(" us a sample").next()).unwrap().parse().unwrap();
    // CPU time, which a loaded machine's descheduling leaves below the 500 us cudasim spins for.
    assert!(each >= 100.0, "{line}");
    // The trace holds what was decoded, and its kernels all the same.
    assert!(!stats(&rec.trace)["gpu_metrics"].as_array().unwrap().is_empty());
    assert_eq!(kernel_time(&rec.trace, "vectorized_elementwise_kernel").1, 120);
}

/// An attached agent keeps its segment from window to window: each window's summary counts that window's samples
/// and cost, not the sums since the first (the third of three 200 ms windows at 1 ms said 601 before). At 50 us,
/// faster than the sampler decodes (cudasim charges the H200's 67 us a sample), every window still samples: the
/// counts are written as the sampler goes, and a window's sampler finishing its backlog is not started twice.
#[test]
fn each_attach_window_counts_only_its_own_samples() {
    for (interval, least, most) in [("1ms", 50, 320), ("50us", 1000, 12_000)] {
        attach_windows_sampling(interval, least, most);
    }
}

fn attach_windows_sampling(interval: &str, least: u64, most: u64) {
    let dir = scratch(&format!("gpu-counters-windows-{interval}"));
    let prog = build_c("stepper", &dir);
    let flag = format!("--gpu-metrics={interval}");
    let mut child = launch_dormant_with(&[&flag], &prog, &["4"]);
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("stepper: ready"), "{line}");
    let run = std::process::Command::new(cuflight_bin())
        .args(["attach", &child.id().to_string(), "--duration", "200ms", "--every", "400ms", "--count", "3", "-o"])
        .arg(dir.join("w.cuf"))
        .output()
        .unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(!err.contains("no device counters"), "{err}");
    let counts = sampled_counts(&err);
    assert_eq!(counts.len(), 3, "{err}");
    for (n, c) in counts.iter().enumerate() {
        // 200 ms, the window's arming and final decode on a loaded machine around it.
        assert!((least..=most).contains(c), "{interval}, window {}: {c} samples\n{err}", n + 1);
    }
}

/// Without the flag nothing is sampled and nothing is said.
#[test]
fn no_counters_unless_asked() {
    let dir = scratch("gpu-counters-off");
    let prog = build_c("counters", &dir);
    let rec = record(&dir, &[], &prog, &["1"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    assert!(!rec.stderr().contains("device counters"), "{}", rec.stderr());
    assert_eq!(stats(&rec.trace)["gpu_metrics"].as_array().unwrap().len(), 0);
}

/// The timelines draw the counters: a Perfetto counter track per device and counter (a value per sample), and
/// the Kineto JSON's counter events ("ph":"C") on the GPU's process, which the importer reads past.
#[test]
fn the_timelines_draw_each_sample() {
    let dir = scratch("gpu-counters-export");
    let prog = build_c("counters", &dir);
    let rec = record(&dir, &["--gpu-metrics"], &prog, &["1"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let mut samples = 0u64;
    let mut source = cuflight_collector::model::source::EventSource::open(&rec.trace).unwrap();
    source.for_each(|_, _, e| samples += (e.kind() == Some(cuflight_format::EventKind::GpuSample)) as u64).unwrap();
    assert!(samples > 100, "{samples}");
    let perfetto = dir.join("t.perfetto-trace");
    let out = std::process::Command::new(cuflight_bin())
        .args(["export", "--force", "-o"])
        .arg(&perfetto)
        .arg(&rec.trace)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // SM, Tensor and DRAM: three values a sample.
    assert!(err.contains(&format!("{} counter values", 3 * samples)), "{err}");
    let json = dir.join("t.json");
    let out = std::process::Command::new(cuflight_bin())
        .args(["export", "--force", "-o"])
        .arg(&json)
        .arg(&rec.trace)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = std::fs::read_to_string(&json).unwrap();
    assert_eq!(text.matches(r#""ph":"C","name":"GPU 0 counters""#).count() as u64, samples);
    let back = stats(&json);
    assert_eq!(back["kernels"], stats(&rec.trace)["kernels"]);
    // The Parquet export's gpu_samples table, joined to kernels with DuckDB as a user would.
    let pq = dir.join("pq");
    let out = std::process::Command::new(cuflight_bin())
        .args(["export", "--format", "parquet", "--force", "-o"])
        .arg(&pq)
        .arg(&rec.trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let q = python_json("parquet_check.py", &[pq.as_os_str()]);
    assert_eq!(q["gpu_samples"].as_u64(), Some(samples));
    let stream_copy = kernel_row(&stats(&rec.trace), "stream_copy")["dram_read_pct"].as_f64().unwrap();
    close("Parquet stream_copy DRAM read", 100.0 * q["copy_dram_read"].as_f64().unwrap(), stream_copy);
}

/// `diff` sets the runs' counters side by side, and a counter finding resolves only between two runs that both have
/// counters: gone with the streaming copy, unmeasured against a run recorded without them.
#[test]
fn diff_compares_counters_and_never_calls_an_unmeasured_finding_resolved() {
    let dir = scratch("gpu-counters-diff");
    let prog = build_c("counters", &dir);
    let run = |name: &str, flags: &[&str], args: &[&str]| {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let rec = record(&sub, flags, &prog, args, &[]);
        assert!(rec.output.status.success(), "{}", rec.stderr());
        rec.trace
    };
    let base = run("base", &["--gpu-metrics"], &["4"]);
    let fused = run("fused", &["--gpu-metrics"], &["4", "nocopy"]);
    let plain = run("plain", &[], &["4", "nocopy"]);
    let out = std::process::Command::new(cuflight_bin())
        .args(["diff", "--format", "json"])
        .args([&base, &fused, &plain])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    let finding = diff["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "memory_bound").unwrap();
    assert_eq!(finding["change"], serde_json::json!(["resolved", "unmeasured"]), "{finding}");
    let device = diff["counters"].as_array().unwrap().iter().find(|c| c["level"] == "device").unwrap();
    let runs = device["runs"].as_array().unwrap();
    assert!(runs[0].is_object() && runs[1].is_object() && runs[2].is_null(), "{device}");
    // Without the copy its kind of work ("other": the copy and the FMA loop) moves far less. (The device's own
    // share also counts idle samples, which the host's pace decides.)
    let other = diff["counters"].as_array().unwrap().iter().find(|c| c["name"] == "other").unwrap();
    let dram = |i: usize| other["runs"][i]["dram_pct"].as_f64().unwrap();
    assert!(dram(1) < dram(0) / 2.0, "{other}");
}
