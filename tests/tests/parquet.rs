//! `cuflight export --format parquet`: fleet tables that DuckDB (PyPI `duckdb`, hive partitioning on, as a user
//! reads them; tests/py/parquet_check.py) sums to what `cuflight stats` and `report` say, on a capture, on
//! torch.profiler and Nsight traces, and on two ranks exported into one directory. The output directory is
//! handled as files are: never through a link, never over foreign files, replaced only with --force.

use cuflight_integration::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::Path;

fn export(traces: &[&Path], dir: &Path, extra: &[&str]) -> (bool, String) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("export")];
    args.extend(traces.iter().map(|t| t.as_os_str()));
    args.extend([OsStr::new("--format"), OsStr::new("parquet"), OsStr::new("-o"), dir.as_os_str()]);
    args.extend(extra.iter().map(OsStr::new));
    cuflight(&args)
}

/// DuckDB's sums against `cuflight stats` of the same trace.
fn check_against_stats(trace: &Path, q: &Value, name: &str) {
    let s = stats(trace);
    let kernels = q["kernels"].as_object().unwrap();
    assert_eq!(kernels.len(), s["kernels"].as_array().unwrap().len(), "{name}: kernel names");
    for k in s["kernels"].as_array().unwrap() {
        let row = &kernels[k["name"].as_str().unwrap()];
        assert_eq!((&row[0], &row[1]), (&k["count"], &k["total_ns"]), "{name}: {}", k["name"]);
    }
    for a in s["api"].as_array().unwrap() {
        let row = &q["api"][a["name"].as_str().unwrap()];
        assert_eq!((&row[0], &row[1]), (&a["count"], &a["total_ns"]), "{name}: {}", a["name"]);
    }
    let sum = |t: &str, f: &str| s[t].as_array().unwrap().iter().map(|r| r[f].as_u64().unwrap()).sum::<u64>();
    assert_eq!(q["copies"], serde_json::json!([sum("memcpy", "count"), sum("memcpy", "bytes")]), "{name}: copies");
    assert_eq!(q["memsets"], serde_json::json!([sum("memset", "count"), sum("memset", "bytes")]), "{name}: memsets");
    let ranges =
        s["nvtx"].as_array().unwrap().iter().filter(|r| r["kind"] != "mark").map(|r| r["count"].as_u64().unwrap());
    assert_eq!(q["nvtx_ranges"].as_u64().unwrap(), ranges.sum::<u64>(), "{name}: NVTX ranges");
    assert_eq!(q["bad_spans"], 0, "{name}");
}

#[test]
fn duckdb_reads_the_tables_as_stats_reads_the_trace() {
    let dir = scratch("parquet");
    let prog = build_c("train", &dir);
    let rec = record(&dir, &[], &prog, &["4"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let out = dir.join("tables");
    let (ok, err) = export(&[&rec.trace], &out, &[]);
    assert!(ok, "{err}");
    let q = python_json("parquet_check.py", &[out.as_os_str()]);
    check_against_stats(&rec.trace, &q, "capture");
    let s = stats(&rec.trace);
    assert_eq!(q["allocs"], s["memory"]["malloc_count"]);
    assert_eq!(q["frees"], s["memory"]["free_count"]);
    assert_eq!(q["steps"], 4, "the report's steps");
    // Times are ns since the Unix epoch: the capture ran in the last hour.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    let first = q["first_kernel_ns"].as_i64().unwrap();
    assert!(first < now && first > now - 3_600_000_000_000, "{first} vs now {now}");
    let manifest: Value = serde_json::from_slice(&std::fs::read(out.join("cuflight-parquet.json")).unwrap()).unwrap();
    assert_eq!(manifest["schema_version"], 1);
    assert_eq!(manifest["tables"]["kernels"], 4 * 19);

    // The output directory: refused when it exists, replaced with --force, never a foreign one or a link.
    let (ok, err) = export(&[&rec.trace], &out, &[]);
    assert!(!ok && err.contains("pass --force"), "{err}");
    let (ok, err) = export(&[&rec.trace], &out, &["--force"]);
    assert!(ok, "{err}");
    let foreign = dir.join("home");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("thesis.tex"), "years of work").unwrap();
    let (ok, err) = export(&[&rec.trace], &foreign, &["--force"]);
    assert!(!ok && err.contains("not a cuflight Parquet export"), "{err}");
    assert_eq!(std::fs::read_to_string(foreign.join("thesis.tex")).unwrap(), "years of work");
    let link = dir.join("link");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    let (ok, err) = export(&[&rec.trace], &link, &["--force"]);
    assert!(!ok && err.contains("symbolic link"), "{err}");
    // An input inside the directory it would replace.
    let inside = out.join("trace.cuf");
    std::fs::copy(&rec.trace, &inside).unwrap();
    let (ok, err) = export(&[&inside], &out, &["--force"]);
    assert!(!ok && err.contains("an input of this command"), "{err}");
    assert!(inside.exists());
}

#[test]
fn imported_traces_and_ranks_share_one_directory() {
    let dir = scratch("parquet-imports");
    for name in ["kineto-a100-nccl-r0.json.gz", "nsys-a100-cloverleaf.sqlite"] {
        let Some(path) = shared_trace(name) else { continue };
        let out = dir.join(format!("{name}.tables"));
        let (ok, err) = export(&[&path], &out, &[]);
        assert!(ok, "{name}: {err}");
        let q = python_json("parquet_check.py", &[out.as_os_str()]);
        check_against_stats(&path, &q, name);
    }
    // Two ranks of one job into one directory: partitions rank=0 and rank=1, each as its own trace says.
    let (Some(r0), Some(r1)) = (shared_trace("kineto-2rank-r0.json.gz"), shared_trace("kineto-2rank-r1.json.gz"))
    else {
        return;
    };
    let out = dir.join("job");
    let (ok, err) = export(&[&r0, &r1], &out, &[]);
    assert!(ok, "{err}");
    let q = python_json("parquet_check.py", &[out.as_os_str()]);
    let count =
        |t: &Path| stats(t)["kernels"].as_array().unwrap().iter().map(|k| k["count"].as_u64().unwrap()).sum::<u64>();
    assert_eq!(q["kernels_by_rank"], serde_json::json!({"0": count(&r0), "1": count(&r1)}));
    assert!(out.join("kernels/host=unknown/rank=0").is_dir() && out.join("kernels/host=unknown/rank=1").is_dir());
    // Each communication kernel's collective, as the report tells it (both ranks run every collective on NCCL
    // 2.1x's SendRecv kernel): the same counts as the timelines carry (interop's test) on rank 0.
    let r0_collectives: u64 = ["0 all_to_all", "0 all_reduce", "0 all_gather"]
        .iter()
        .map(|k| q["collectives"][k].as_u64().unwrap_or_else(|| panic!("{k}: {}", q["collectives"])))
        .sum();
    assert_eq!((q["collectives"]["0 all_to_all"].as_u64(), r0_collectives), (Some(4), 10), "{}", q["collectives"]);
    // The guide's DuckDB query (docs/guide/timelines.md), as printed there: its top 20 (rank, kernel) rows are each
    // what that rank's own `stats` says of the kernel.
    let readme = repo_root().join("docs/guide/timelines.md");
    let q = python_json("parquet_check.py", &[out.as_os_str(), readme.as_os_str()]);
    let rows = q["readme_query"].as_array().unwrap();
    assert_eq!(rows.len(), 20, "{rows:?}");
    let per_rank = [stats(&r0), stats(&r1)];
    for row in rows {
        let rank = row[0].as_u64().unwrap() as usize;
        let k = per_rank[rank]["kernels"].as_array().unwrap().iter().find(|k| k["name"] == row[1]).unwrap();
        assert_eq!(row[2], k["count"], "{row:?}");
        let ms = k["total_ns"].as_f64().unwrap() / 1e6;
        assert!((row[3].as_f64().unwrap() - ms).abs() <= 1e-9 * ms.max(1.0), "{row:?} vs {k}");
    }
}

#[test]
fn a_host_whose_clock_is_off_is_recorded_with_that_offset() {
    // CUDASIM_CLOCK_OFFSET_NS puts the simulated host's CLOCK_REALTIME an hour ahead (device timestamps, on CUPTI's
    // REALTIME clock, with it), so the agent's clock pairs carry that offset:
    // on the epoch, the run appears an hour late; device work still follows the calls that launched it.
    let dir = scratch("parquet-offset");
    let prog = build_c("train", &dir);
    let hour = 3_600_000_000_000i64;
    let rec = record(&dir, &[], &prog, &["2"], &[("CUDASIM_CLOCK_OFFSET_NS", &hour.to_string())]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let out = dir.join("tables");
    let (ok, err) = export(&[&rec.trace], &out, &[]);
    assert!(ok, "{err}");
    let q = python_json("parquet_check.py", &[out.as_os_str()]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    let first = q["first_kernel_ns"].as_i64().unwrap();
    assert!(first > now + hour - 600_000_000_000 && first < now + hour, "{first} vs now {now} + 1 h");
    assert_eq!(q["kernels_launched_before_their_call"], 0);
}
