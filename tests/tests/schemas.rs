//! The published JSON Schemas (docs/guide/schemas/, from `cuflight schema`) against what the commands print: the
//! committed files are the binary's (scripts/gen-reference --check says so in CI too), and every `--format json`
//! output of cudasim recordings and of the third-party traces validates against them with the reference
//! implementation of JSON Schema, strictly: a member the schema does not describe fails (tests/py/schema_check.py).

use cuflight_integration::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs cuflight with `args`, its standard output saved as `dir/name.json`.
fn save(dir: &Path, name: &str, args: &[&OsStr]) -> PathBuf {
    let out = Command::new(cuflight_bin()).args(args).env("LD_LIBRARY_PATH", cudasim_dir()).output().unwrap();
    assert!(out.status.success() || name.starts_with("doctor"), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

fn validate(schema: &str, outputs: &[PathBuf]) {
    let file = repo_root().join("docs/guide/schemas").join(format!("{schema}.schema.json"));
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    let printed = Command::new(cuflight_bin()).args(["schema", schema]).output().unwrap();
    assert_eq!(
        committed,
        String::from_utf8_lossy(&printed.stdout),
        "{} is stale: run scripts/gen-reference",
        file.display()
    );
    let mut args: Vec<&OsStr> = vec![file.as_os_str()];
    args.extend(outputs.iter().map(|p| p.as_os_str()));
    let seen = python_json("schema_check.py", &args);
    assert_eq!(seen["checked"], outputs.len(), "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{schema}: {seen:#}");
}

/// Recordings whose outputs fill most members: the demo's training loop with NVTX and device counters, CUDA graphs,
/// torch.compile's Triton kernels.
fn recordings(dir: &Path) -> Vec<PathBuf> {
    let mut traces = Vec::new();
    for (program, flags, args) in [
        ("train", &["--gpu-metrics=100us", "--trace", "cuda,nvtx,memory,sync,overhead"][..], &["4"][..]),
        ("graphs", &[][..], &[][..]),
        ("compiled_loop", &[][..], &["20", "12"][..]),
    ] {
        let sub = dir.join(program);
        std::fs::create_dir_all(&sub).unwrap();
        let prog = build_c(program, &sub);
        let rec = record(&sub, flags, &prog, args, &[]);
        assert!(rec.output.status.success(), "{program}: {}", rec.stderr());
        traces.push(rec.trace);
    }
    traces
}

/// The third-party traces recorded on real GPUs, where present (Kineto JSON, an nsys SQLite export, a cuflight
/// window attached on an H100).
fn real_traces() -> Vec<PathBuf> {
    let names = [
        "kineto-a100-nccl-r0.json.gz",
        "kineto-h100-qwen-inference.json.gz",
        "kineto-v100-ddp-ns.json.gz",
        "nsys-a100-cloverleaf.sqlite",
        "h100-attach-window.cuf",
    ];
    names.iter().filter_map(|n| shared_trace(n)).collect()
}

#[test]
fn every_json_output_is_described_by_its_published_schema() {
    let dir = scratch("schemas");
    let mut traces = recordings(&dir);
    traces.extend(real_traces());
    let (mut stats, mut reports) = (Vec::new(), Vec::new());
    for (i, t) in traces.iter().enumerate() {
        let f = |s: &str| format!("{s}-{i}");
        stats.push(save(&dir, &f("stats"), &["stats".as_ref(), "--format".as_ref(), "json".as_ref(), t.as_os_str()]));
        reports.push(save(
            &dir,
            &f("report"),
            &["report".as_ref(), "--format".as_ref(), "json".as_ref(), t.as_os_str()],
        ));
    }
    // The per-event tables and the nvtx table's parts, which only `--report` prints.
    let per_event =
        "cuda_gpu_trace,cuda_api_trace,cuda_kern_exec_trace,nvtx_pushpop_trace,nvtx_pushpop_sum,nvtx_startend_sum";
    let args = ["stats", "--format", "json", "--report", per_event];
    let mut args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    args.push(traces[0].as_os_str());
    stats.push(save(&dir, "stats-per-event", &args));
    // A job of two ranks: the report's job section.
    if let (Some(r0), Some(r1)) = (shared_trace("kineto-2rank-r0.json.gz"), shared_trace("kineto-2rank-r1.json.gz")) {
        let args = ["report".as_ref(), "--format".as_ref(), "json".as_ref(), r0.as_os_str(), r1.as_os_str()];
        reports.push(save(&dir, "report-job", &args));
    }
    validate("stats", &stats);
    validate("report", &reports);
    let diff = save(
        &dir,
        "diff",
        &["diff".as_ref(), "--format".as_ref(), "json".as_ref(), traces[0].as_os_str(), traces[2].as_os_str()],
    );
    validate("diff", &[diff]);
    let doctor = save(&dir, "doctor", &["doctor".as_ref(), "--format".as_ref(), "json".as_ref()]);
    validate("doctor", &[doctor]);
    let ps = save(&dir, "ps", &["ps".as_ref(), "--format".as_ref(), "json".as_ref(), "--all".as_ref()]);
    validate("ps", &[ps]);
}
