//! `cuflight stats`' collectives table against an independent reading of the Kineto JSON: each NCCL kernel's
//! launch found by its correlation id, the `nccl:*` annotation around that launch on its thread named.

use super::stats_with;
use cuflight_integration::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// Per collective (the annotation's name after `nccl:`, "-" where none is around the launch or the launch is not in
/// the trace): kernels and their µs, read straight from the JSON.
fn independent(path: &std::path::Path) -> BTreeMap<String, (u64, f64)> {
    let file = std::fs::File::open(path).unwrap();
    let v: Value = serde_json::from_reader(flate2::read::GzDecoder::new(file)).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let cat = |e: &Value, c: &str| e["cat"] == c && e["ph"] == "X";
    let corr = |e: &Value| e["args"]["correlation"].as_u64();
    let launches: BTreeMap<u64, &Value> =
        events.iter().filter(|e| cat(e, "cuda_runtime")).filter_map(|e| Some((corr(e)?, e))).collect();
    let annotations: Vec<&Value> = events
        .iter()
        .filter(|e| cat(e, "user_annotation") && e["name"].as_str().is_some_and(|n| n.starts_with("nccl:")))
        .collect();
    let mut out: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for k in events.iter().filter(|e| cat(e, "kernel") && e["name"].as_str().unwrap().starts_with("ncclKernel")) {
        let launch = corr(k).and_then(|c| launches.get(&c));
        let around = launch.and_then(|l| {
            let (ts, end) = (l["ts"].as_f64()?, l["ts"].as_f64()? + l["dur"].as_f64()?);
            annotations
                .iter()
                .filter(|a| a["tid"] == l["tid"] && a["pid"] == l["pid"])
                .filter(|a| {
                    a["ts"].as_f64().unwrap() <= ts && a["ts"].as_f64().unwrap() + a["dur"].as_f64().unwrap() >= end
                })
                .max_by(|a, b| a["ts"].as_f64().unwrap().total_cmp(&b["ts"].as_f64().unwrap()))
        });
        let name = around.map_or("-".to_string(), |a| a["name"].as_str().unwrap()["nccl:".len()..].to_string());
        let row = out.entry(name).or_default();
        *row = (row.0 + 1, row.1 + k["dur"].as_f64().unwrap());
    }
    out
}

/// On the shared A100 rank, NCCL ran all its collectives on `ncclKernel_SendRecv_*`: the table tells them apart as
/// the host's annotations do (all_reduce 126.6 ms of 10 kernels, all_to_all 30.3 ms of 45...).
#[test]
fn communication_time_is_told_by_collective_as_the_annotations_say() {
    let Some(path) = shared_trace("kineto-a100-nccl-r0.json.gz") else { return };
    let out = stats_with(&[path.to_str().unwrap(), "--report", "collectives", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["collectives"].as_array().unwrap();
    let want = independent(&path);
    assert_eq!(rows.len(), want.len(), "{rows:?} against {want:?}");
    for (name, (count, us)) in &want {
        let label = match name.as_str() {
            "-" => "not told",
            "_all_gather_base" => "all_gather",
            "_reduce_scatter_base" => "reduce_scatter",
            other => other,
        };
        let row = rows.iter().find(|r| r["name"].as_str().unwrap().starts_with(label)).expect(label);
        assert_eq!(row["count"].as_u64(), Some(*count), "{label}");
        let total_us = row["total_ns"].as_u64().unwrap() as f64 / 1e3;
        assert!((total_us - us).abs() <= *count as f64, "{label}: {total_us} µs against {us}");
    }
    // The default terminal view shows the table (a collective ran); a trace without one does not.
    let text = String::from_utf8(stats_with(&[path.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("Communication kernels by collective"), "{text}");
    if let Some(qwen) = shared_trace("kineto-h100-qwen-inference.json.gz") {
        let text = String::from_utf8(stats_with(&[qwen.to_str().unwrap()]).stdout).unwrap();
        assert!(!text.contains("by collective"));
    }
}
