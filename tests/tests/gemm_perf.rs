//! `cuflight stats --report gemm_perf` and `attention_perf`: GEMM and attention operators' achieved TFLOP/s and
//! TB/s from the shapes a trace recorded, against the figures TraceLens (AMD's trace analyser) computed for the
//! same real trace.

use cuflight_integration::*;

fn stats_with(args: &[&str]) -> std::process::Output {
    std::process::Command::new(cuflight_bin()).arg("stats").args(args).output().expect("cuflight runs")
}

/// GEMM operators by shape on the shared H100 Qwen inference trace (TraceLens's test trace, recorded with
/// shapes): each row's achieved TFLOP/s and TB/s within 2% of what TraceLens computed for the same trace
/// (its tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005_perf_report_csvs/GEMM.csv: TFLOPS/s_mean, TB/s_mean,
/// name_count), which counts the same FLOPs and bytes and the same GPU work (kernels and cuBLAS's memsets).
#[test]
fn gemm_rates_from_shapes_agree_with_tracelens() {
    let Some(trace) = shared_trace("kineto-h100-qwen-inference.json.gz") else { return };
    let out = stats_with(&["--format", "json", trace.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = s["gemm_perf"].as_array().unwrap();
    // (op, M, N, K, calls, TFLOP/s, TB/s) as TraceLens's GEMM.csv gives them.
    let tracelens = [
        ("aten::mm", 8944, 2816, 1024, 48, 610.6657102342793, 0.8814855312346527),
        ("aten::addmm", 8944, 1024, 1024, 72, 580.1844380894671, 1.1975199165160728),
        ("aten::mm", 8944, 1024, 2816, 24, 674.5509897222395, 0.9737028419232031),
        ("aten::mm", 8944, 1024, 1024, 24, 578.5261168808248, 1.1946169746358157),
        ("aten::bmm", 32, 559, 1, 1, 0.01016357996948259, 0.020998747121653488),
    ];
    assert_eq!(rows.len(), tracelens.len(), "{rows:#?}");
    for (op, m, n, k, count, tflops, tbps) in tracelens {
        let row = rows
            .iter()
            .find(|r| r["op"] == op && r["m"] == m && r["n"] == n && r["k"] == k)
            .unwrap_or_else(|| panic!("no {op} {m}x{n}x{k} in {rows:#?}"));
        assert_eq!(row["count"], count, "{row}");
        for (what, got, want) in [("TFLOP/s", &row["tflops_mean"], tflops), ("TB/s", &row["tbps_mean"], tbps)] {
            let got = got.as_f64().unwrap();
            assert!((got / want - 1.0).abs() <= 0.02, "{op} {m}x{n}x{k} {what}: {got} vs TraceLens's {want}");
        }
    }
    // On the roofline of the GPU the trace names (an H100 SXM5: 989.4 dense bf16 TFLOP/s, 3.35 TB/s, by NVIDIA's
    // datasheet): 693 FLOP per byte is far above the ridge (295), so compute-bound, at 62% of the peak.
    let big = rows.iter().find(|r| r["m"] == 8944 && r["n"] == 2816).unwrap();
    let roof = &big["roofline"];
    assert_eq!(
        (roof["gpu"].as_str(), roof["math"].as_str(), roof["bound"].as_str()),
        (Some("H100 SXM5"), Some("bf16"), Some("compute")),
        "{roof}"
    );
    let of_peak = roof["compute_of_peak"].as_f64().unwrap();
    assert!((of_peak - 610.6657102342793 / 989.4).abs() < 0.01, "{roof}");
    let text = stats_with(&["--report", "gemm_perf", trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("[gemm_perf]") && text.contains("610.7"), "{text}");
}

/// The same trace's attention (causal flash SDPA, 24 calls): within 2% of TraceLens's SDPA_fwd.csv for it
/// (TFLOPS/s_mean 90.289, TB/s_mean 0.6461), the causal mask read from the call's concrete arguments.
#[test]
fn attention_rates_from_shapes_agree_with_tracelens() {
    let Some(trace) = shared_trace("kineto-h100-qwen-inference.json.gz") else { return };
    let out = stats_with(&["--format", "json", "--report", "attention_perf", trace.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = s["attention_perf"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let r = &rows[0];
    assert_eq!(
        (r["op"].as_str(), r["count"].as_u64(), r["causal"].as_bool()),
        (Some("aten::_scaled_dot_product_flash_attention"), Some(24), Some(true)),
        "{r}"
    );
    assert_eq!(
        (r["batch"].as_u64(), r["heads_q"].as_u64(), r["n_q"].as_u64(), r["d_qk"].as_u64()),
        (Some(16), Some(16), Some(559), Some(64))
    );
    for (what, key, want) in [("TFLOP/s", "tflops_mean", 90.28922364189224), ("TB/s", "tbps_mean", 0.6460767344679231)]
    {
        let got = r[key].as_f64().unwrap();
        assert!((got / want - 1.0).abs() <= 0.02, "{what}: {got} vs TraceLens's {want}");
    }
}
