//! `cuflight stats` as `nsys stats` users read it: Med and StdDev beside Avg, copies by time and by size,
//! `--report` by nsys's report names, `--format csv`, `-o`. Checked on the Nsight Systems export in the shared
//! traces against tests/py/nsys_api_sum.py (Python's sqlite3 and statistics on the same file).

use cuflight_integration::*;
use serde_json::Value;
use std::process::Command;

#[path = "stats_tables/collectives.rs"]
mod collectives;
#[path = "stats_tables/ranges.rs"]
mod ranges;

fn stats_with(args: &[&str]) -> std::process::Output {
    Command::new(cuflight_bin()).arg("stats").args(args).output().expect("cuflight runs")
}

#[test]
fn api_and_copy_size_summaries_equal_an_independent_computation() {
    let Some(path) = shared_trace("nsys-a100-cloverleaf.sqlite") else { return };
    let want = python_json("nsys_api_sum.py", &[path.as_os_str()]);
    let p = path.to_str().unwrap();
    let out = stats_with(&[p, "--report", "cuda_api_sum,cuda_gpu_mem_size_sum", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&String> = got.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["api", "gpu_mem_size", "not_recorded"], "only the reports asked for (and what is unknown)");
    let api = want["api"].as_object().unwrap();
    assert_eq!(got["api"].as_array().unwrap().len(), api.len());
    for row in got["api"].as_array().unwrap() {
        let w = &api[row["name"].as_str().unwrap()];
        for (ours, theirs) in [("count", "count"), ("total_ns", "total"), ("avg_ns", "avg"), ("median_ns", "median")]
            .into_iter()
            .chain([("min_ns", "min"), ("max_ns", "max"), ("stddev_ns", "stddev")])
        {
            assert_eq!(row[ours], w[theirs], "{}: {ours}", row["name"]);
        }
    }
    // The Avg alone misleads: cudaDeviceSynchronize averages 229,918 ns, its median is 8,867.
    let sync = got["api"].as_array().unwrap().iter().find(|r| r["name"] == "cudaDeviceSynchronize").unwrap();
    assert_eq!((sync["avg_ns"].as_u64(), sync["median_ns"].as_u64()), (Some(229_918), Some(8_867)));
    let htod =
        got["gpu_mem_size"].as_array().unwrap().iter().find(|r| r["operation"] == "[CUDA memcpy Host-to-Device]");
    let w = &want["sizes"]["1"];
    let htod = htod.expect("host-to-device copies");
    for (ours, theirs) in
        [("count", "count"), ("total_bytes", "total"), ("median_bytes", "median"), ("stddev_bytes", "stddev")]
    {
        assert_eq!(htod[ours], w[theirs], "HtoD {ours}");
    }
}

/// cuda_kern_exec_sum: every kernel with the call that launched it, API, queue and kernel times per (process,
/// thread, device, call, kernel), equal to nsys's definition computed in SQL on the export (tests/py/nsys_api_sum.py),
/// longest average total first as nsys orders them.
#[test]
fn kernel_launch_and_execution_times_equal_an_independent_join() {
    let Some(path) = shared_trace("nsys-a100-cloverleaf.sqlite") else { return };
    let want = python_json("nsys_api_sum.py", &[path.as_os_str()]);
    let want = want["kern_exec"].as_object().unwrap();
    let out = stats_with(&[path.to_str().unwrap(), "--report", "cuda_kern_exec_sum", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = got["kern_exec"].as_array().unwrap();
    assert_eq!(rows.len(), want.len());
    let mut queued = 0;
    let averages: Vec<u64> = rows.iter().map(|r| r["total"]["avg_ns"].as_u64().unwrap()).collect();
    assert!(averages.windows(2).all(|w| w[0] >= w[1]), "longest average total first");
    for row in rows {
        let key = |k: &str| row[k].to_string().trim_matches('"').to_string();
        let w = &want[&["pid", "tid", "device", "api", "kernel"].map(key).join("|")];
        assert_eq!(row["count"], w["kernel"]["count"], "{}", row["kernel"]);
        let queue_count = w["queue"]["count"].as_u64().unwrap_or(0);
        assert_eq!(row["queue_count"].as_u64(), Some(queue_count), "{}", row["kernel"]);
        queued += queue_count;
        for (ours, theirs) in [("total", "total"), ("api_time", "api"), ("kernel_time", "kernel"), ("queue", "queue")] {
            if w[theirs].is_null() {
                continue;
            }
            for (o, t) in [
                ("avg_ns", "avg"),
                ("median_ns", "median"),
                ("min_ns", "min"),
                ("max_ns", "max"),
                ("stddev_ns", "stddev"),
            ] {
                assert_eq!(row[ours][o], w[theirs][t], "{} {ours}.{o}", row["kernel"]);
            }
        }
    }
    assert!(queued > 0, "some kernels queued after their call returned");
    // cuda_gpu_kern_gb_sum: by name and launch configuration.
    let out = stats_with(&[path.to_str().unwrap(), "--report", "cuda_gpu_kern_gb_sum", "--format", "json"]);
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = python_json("nsys_api_sum.py", &[path.as_os_str()]);
    let want = want["kern_gb"].as_object().unwrap();
    let rows = got["kern_gb"].as_array().unwrap();
    assert_eq!(rows.len(), want.len());
    let xyz = |v: &Value| v.as_array().unwrap().iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ");
    for row in rows {
        let key = format!("{}|{}|{}", row["name"].as_str().unwrap(), xyz(&row["grid"]), xyz(&row["block"]));
        let w = &want[&key];
        for (ours, theirs) in [("count", "count"), ("total_ns", "total"), ("median_ns", "median"), ("max_ns", "max")] {
            assert_eq!(row[ours], w[theirs], "{key}: {ours}");
        }
    }
    // On the terminal, under nsys's column names.
    let text = stats_with(&[path.to_str().unwrap(), "--report", "cuda_kern_exec_sum"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("[cuda_kern_exec_sum]") && text.contains("QAvg (ns)") && text.contains("KStdDev (ns)"),
        "{text}"
    );
}

#[test]
fn csv_tables_and_the_output_file_follow_nsys_habits() {
    let dir = scratch("stats-csv");
    let prog = build_c("streams", &dir);
    let r = record(&dir, &[], &prog, &["5"], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let t = r.trace.to_str().unwrap();
    let out = stats_with(&[t, "--report", "cuda_gpu_kern_sum,cuda_gpu_mem_time_sum", "--format", "csv"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{text}");
    let kern: Vec<&str> = blocks[0].lines().collect();
    assert!(kern[0].starts_with("# CUDA kernels"));
    assert_eq!(kern[1], "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name");
    let instances: u64 = kern[2..].iter().map(|l| l.split(',').nth(2).unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(instances, 2 * 2 * 5 * 2, "saxpy and relu per stream and iteration");
    assert!(blocks[1].lines().any(|l| l.ends_with(",[CUDA memset]")), "{}", blocks[1]);
    // -o writes the file (and never over the trace it reads).
    let file = dir.join("stats.txt");
    let out = stats_with(&[t, "--report", "nvtx_sum,processes", "-o", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("[nvtx_sum]") && written.contains("Processes") && !written.contains("CUDA kernels"));
    let out = stats_with(&[t, "-o", t, "--force"]);
    assert!(!out.status.success() && std::fs::metadata(t).unwrap().len() > 0, "the input is never the output");
    let bad = stats_with(&[t, "--report", "cuda_gpu_kern_sum,gpu_traces"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("unknown report 'gpu_traces'"), "{err}");
}

#[test]
fn what_an_import_never_recorded_is_said_to_be_unknown_not_zero() {
    // The shared nsys export was made without --cuda-memory-usage (no CUDA_GPU_MEMORY_USAGE_EVENTS) and holds
    // no NVTX_EVENTS: its memory and NVTX tables are unknown, not empty. A capture of ours records what it traced.
    if let Some(path) = shared_trace("nsys-a100-cloverleaf.sqlite") {
        let p = path.to_str().unwrap();
        let s: Value = serde_json::from_slice(&stats_with(&[p, "--format", "json"]).stdout).unwrap();
        let kinds: Vec<&str> =
            s["not_recorded"].as_array().unwrap().iter().map(|n| n["kind"].as_str().unwrap()).collect();
        assert!(kinds.contains(&"memory") && kinds.contains(&"nvtx"), "{kinds:?}");
        let text = String::from_utf8(stats_with(&[p, "--report", "memory"]).stdout).unwrap();
        assert!(text.contains("not recorded: the export has no CUDA_GPU_MEMORY_USAGE_EVENTS"), "{text}");
        assert!(!text.contains("Allocs"), "no table of zeros: {text}");
    }
    let dir = scratch("stats-recorded");
    let prog = build_c("streams", &dir);
    let r = record(&dir, &[], &prog, &["2"], &[]);
    assert!(r.output.status.success());
    // The default leaves CUPTI's synchronization records out (their cost, format/src/tracing.rs); asked for,
    // everything is recorded.
    let kinds: Vec<String> = stats(&r.trace)["not_recorded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["sync"]);
    let all = record(&dir, &["--trace", "cuda,nvtx,memory,sync,overhead,python"], &prog, &["2"], &[]);
    assert!(all.output.status.success());
    assert_eq!(stats(&all.trace)["not_recorded"], serde_json::json!([]));
}

#[test]
fn nsys_memory_usage_events_are_read_when_the_export_has_them() {
    // An export made with --cuda-memory-usage=true: its CUDA_GPU_MEMORY_USAGE_EVENTS become allocations and frees,
    // and the memory tables say what tests/py/nsys_memory.py counts on its own rows (pageable memory left out).
    let Some(path) = shared_trace("nsys-a100-cloverleaf.sqlite") else { return };
    let dir = scratch("nsys-memory");
    let copy = dir.join("with-memory.sqlite");
    let want = python_json("nsys_memory.py", &[path.as_os_str(), copy.as_os_str()]);
    let s: Value = serde_json::from_slice(&stats_with(&[copy.to_str().unwrap(), "--format", "json"]).stdout).unwrap();
    assert_eq!(s["memory"], want);
    let kinds: Vec<&str> = s["not_recorded"].as_array().unwrap().iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert!(!kinds.contains(&"memory"), "{kinds:?}");
    // An export of a run that failed holds its return codes (returnValue): named and classed as a recording's.
    let failed = dir.join("failed.sqlite");
    let want = python_json("nsys_errors.py", &[path.as_os_str(), failed.as_os_str()]);
    let s: Value = serde_json::from_slice(&stats_with(&[failed.to_str().unwrap(), "--format", "json"]).stdout).unwrap();
    let got: Vec<Value> = s["api_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| serde_json::json!({"api": r["api"], "code": r["code"], "error": r["error"], "class": r["class"], "count": r["count"]}))
        .collect();
    assert_eq!(Value::Array(got), want);
}

/// Kernels named as cuBLAS, FlashAttention, ATen and NCCL name theirs land in their categories, copies and
/// memsets in theirs, and the categories add up to all device time.
#[test]
fn device_time_by_category() {
    let dir = scratch("categories");
    let prog = build_c("categories", &dir);
    let r = record(&dir, &[], &prog, &[], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    let rows = s["categories"].as_array().unwrap();
    let of = |c: &str| rows.iter().find(|r| r["category"] == c).unwrap_or_else(|| panic!("no {c} in {rows:?}"));
    for c in ["communication", "gemm", "attention", "softmax", "normalization", "elementwise"] {
        assert_eq!(of(c)["count"], 5, "{c}");
    }
    assert_eq!((of("memcpy")["count"].as_u64(), of("memset")["count"].as_u64()), (Some(1), Some(1)));
    // Each kernel runs at least its own time (500, 400, 300, 200, 100, 50 us; more when the machine is busy),
    // and the rows come largest first.
    for (c, us) in [("communication", 500), ("gemm", 400), ("attention", 300), ("softmax", 200)]
        .into_iter()
        .chain([("normalization", 100), ("elementwise", 50)])
    {
        assert!(of(c)["total_ns"].as_u64().unwrap() >= 5 * us * 1000, "{c}: {}", of(c));
    }
    let totals: Vec<u64> = rows.iter().map(|r| r["total_ns"].as_u64().unwrap()).collect();
    assert!(totals.windows(2).all(|w| w[0] >= w[1]), "largest first: {totals:?}");
    let total = |table: &str| s[table].as_array().unwrap().iter().map(|r| r["total_ns"].as_u64().unwrap()).sum::<u64>();
    let device = total("kernels") + total("memcpy") + total("memset");
    assert_eq!(rows.iter().map(|r| r["total_ns"].as_u64().unwrap()).sum::<u64>(), device);
    // The report says the same per process (kernels only: copies and memsets are the copy engines').
    // Every step, warm-up too: on a loaded machine the first pattern steps can be slow enough to count as warm-up.
    let out = Command::new(cuflight_bin())
        .args(["report", "--format", "json", "--include-warmup"])
        .arg(&r.trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cats = report["processes"][0]["categories"].as_array().unwrap();
    let kernels_in = |c: &str| cats.iter().find(|r| r["category"] == c).map(|r| r["count"].as_u64().unwrap());
    // Each kind, in the steps the report analyses (found by the launch pattern: the first or last launches may
    // fall outside them), and no copies.
    for c in ["communication", "gemm", "attention", "softmax", "normalization", "elementwise"] {
        assert!(kernels_in(c).is_some_and(|n| (3..=5).contains(&n)), "{c}: {cats:?}");
    }
    assert_eq!(kernels_in("memcpy"), None);
    let shares: f64 = cats.iter().map(|r| r["share_of_kernel_time"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9, "{shares}");
    // The table, by its name.
    let out = stats_with(&[r.trace.to_str().unwrap(), "--report", "categories"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("attention") && text.contains("GPU time by kind of work"), "{text}");
}

/// The per-event reports (cuda_gpu_trace, cuda_api_trace, cuda_kern_exec_trace): every row equal to the export's
/// own tables read by tests/py/nsys_traces.py as nsys defines the columns, times one constant apart (cuflight counts
/// from the timeline's first instant, nsys from its session's start); in JSON beside a summary, in CSV and on the
/// terminal.
#[test]
fn per_event_reports_equal_the_exports_rows() {
    let Some(path) = shared_trace("nsys-a100-cloverleaf.sqlite") else { return };
    let want = python_json("nsys_traces.py", &[path.as_os_str()]);
    let p = path.to_str().unwrap();
    // A report named twice (here under its older name too) comes once.
    let reports = "cuda_api_sum,cuda_gpu_trace,cuda_api_trace,kernexectrace,gpu_trace";
    let out = stats_with(&[p, "--report", reports, "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(got["api"].as_array().is_some_and(|a| !a.is_empty()), "the summary beside the rows");
    let json = String::from_utf8_lossy(&out.stdout);
    assert_eq!(json.matches("\"gpu_trace\":").count(), 1);
    let mut offset = None;
    // Time columns (by index) carry the offset; the rest are equal as they are.
    #[rustfmt::skip]
    let gpu_keys = [
        "start_ns", "duration_ns", "correlation", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
        "registers_per_thread", "static_shared_bytes", "dynamic_shared_bytes", "bytes", "bytes_per_second",
        "source_memory", "destination_memory", "pid", "device", "stream", "name",
    ];
    // cuda_api_trace's thread name (the export's ThreadNames) is not in the reference's rows.
    let api_keys = ["start_ns", "duration_ns", "name", "result", "correlation", "pid", "tid"];
    #[rustfmt::skip]
    let exec_keys = [
        "api_start_ns", "api_ns", "queue_start_ns", "queue_ns", "kernel_start_ns", "kernel_ns", "total_ns", "pid",
        "tid", "device", "api", "grid", "block", "kernel",
    ];
    for (key, keys, times) in [
        ("gpu_trace", &gpu_keys[..], &[0][..]),
        ("api_trace", &api_keys, &[0]),
        ("kern_exec_trace", &exec_keys, &[0, 2, 4]),
    ] {
        let rows = got[key].as_array().unwrap().iter();
        let mut rows: Vec<Vec<Value>> = rows.map(|r| keys.iter().map(|k| r[*k].clone()).collect()).collect();
        let mut theirs: Vec<Vec<Value>> = serde_json::from_value(want[key].clone()).unwrap();
        assert_eq!(rows.len(), theirs.len(), "{key}");
        assert!(rows.len() > 250, "{key}: {} rows", rows.len());
        // Both in the same order: by start (one offset apart), then correlation id.
        let order = |v: &mut Vec<Vec<Value>>| v.sort_by_key(|r| (r[0].as_i64(), r[2].as_i64(), r[4].as_i64()));
        order(&mut rows);
        order(&mut theirs);
        for (ours, t) in rows.iter_mut().zip(theirs.iter_mut()) {
            for &i in times {
                let (Some(a), Some(b)) = (ours[i].as_i64(), t[i].as_i64()) else {
                    assert_eq!(ours[i], t[i], "{key} column {i}");
                    continue;
                };
                let d = *offset.get_or_insert(b - a);
                assert_eq!(b - a, d, "{key} column {i}: {ours:?} vs {t:?}");
                t[i] = ours[i].clone();
            }
        }
        for (ours, t) in rows.iter().zip(&theirs) {
            assert_eq!(ours, t, "{key}");
        }
    }
    // Each table in start order, as nsys sorts them (kernel launches by their kernels' start on one stream).
    let starts: Vec<u64> =
        got["gpu_trace"].as_array().unwrap().iter().map(|r| r["start_ns"].as_u64().unwrap()).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]));
    // CSV: a block per report; the terminal: nsys's column names.
    let out = stats_with(&[p, "--report", "cuda_gpu_trace,cuda_api_trace", "--format", "csv"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].lines().count(), 2 + 1591);
    assert!(blocks[1].lines().nth(1).unwrap().starts_with("Start (ns),Duration (ns),Name,Result,CorrID"));
    let out = stats_with(&[p, "--report", "cuda_kern_exec_trace"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[cuda_kern_exec_trace]") && text.contains("Queue Dur (ns)"), "{}", &text[..300]);
    assert_eq!(text.lines().count(), 4 + 1312);
}

/// On a recording: as many rows as the summaries count (kernels, copies and memsets; calls; launches joined to
/// their kernels), each launch's phases in order, device names from the recording, the first row at the
/// timeline's start.
#[test]
fn per_event_reports_of_a_recording_agree_with_its_summaries() {
    let dir = scratch("stats-event-reports");
    let prog = build_c("streams", &dir);
    let r = record(&dir, &[], &prog, &["3"], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let t = r.trace.to_str().unwrap();
    let reports =
        "cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_api_sum,cuda_gpu_trace,cuda_api_trace,cuda_kern_exec_trace";
    let out = stats_with(&[t, "--report", reports, "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let count = |key: &str| got[key].as_array().unwrap().iter().map(|r| r["count"].as_u64().unwrap()).sum::<u64>();
    let rows = |key: &str| got[key].as_array().unwrap().clone();
    let kernels = count("kernels");
    assert!(kernels > 0);
    assert_eq!(rows("gpu_trace").len() as u64, kernels + count("gpu_mem_time"));
    assert_eq!(rows("api_trace").len() as u64, count("api"));
    assert_eq!(rows("kern_exec_trace").len() as u64, kernels, "every kernel joined to its launch");
    let api = rows("api_trace");
    assert_eq!(api[0]["start_ns"], 0, "the first call opens the timeline");
    assert!(rows("gpu_trace").iter().all(|r| r["device"].as_str().unwrap().ends_with("(cudasim) (0)")));
    for k in rows("kern_exec_trace") {
        let n = |key: &str| k[key].as_u64();
        let (start, api_ns, kernel_start) =
            (n("api_start_ns").unwrap(), n("api_ns").unwrap(), n("kernel_start_ns").unwrap());
        assert!(kernel_start >= start, "{k}");
        match n("queue_ns") {
            Some(q) => assert_eq!((n("queue_start_ns"), kernel_start), (Some(start + api_ns), start + api_ns + q)),
            None => assert!(kernel_start < start + api_ns, "{k}"),
        }
        assert_eq!(n("total_ns"), Some((start + api_ns).max(kernel_start + n("kernel_ns").unwrap()) - start));
    }
}

/// `cuda_gpu_kern_sum:base` groups kernels by the function's own name, as nsys's shortName does, and `:mangled` by
/// the symbol: both equal the export's own columns grouped in SQL; so does `cuda_gpu_sum`, kernels and copies side
/// by side; a kernel report without the form in the same run is refused in one line, and a summary that names no
/// kernels takes no form.
#[test]
fn kernel_reports_take_nsys_name_forms() {
    let Some(path) = shared_trace("nsys-a100-cloverleaf.sqlite") else { return };
    let want = python_json("nsys_api_sum.py", &[path.as_os_str()]);
    let p = path.to_str().unwrap();
    for (form, key) in [("base", "kern_base"), ("mangled", "kern_mangled")] {
        let report = format!("cuda_gpu_kern_sum:{form},cuda_gpu_trace:{form}");
        let out = stats_with(&[p, "--report", &report, "--format", "json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        let want = want[key].as_object().unwrap();
        let rows = got["kernels"].as_array().unwrap();
        assert_eq!(rows.len(), want.len(), "{form}");
        for row in rows {
            let w = &want[row["name"].as_str().unwrap()];
            for k in ["count", "total", "median", "min", "max", "stddev"] {
                let ours = if k == "count" { "count".to_string() } else { format!("{k}_ns") };
                assert_eq!(row[&ours], w[k], "{form} {}: {k}", row["name"]);
            }
        }
        let names = got["gpu_trace"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str());
        assert!(names.filter(|n| !n.starts_with('[')).all(|n| want.contains_key(n)), "{form}: the trace's names");
    }
    // cuda_gpu_sum: kernels and copies side by side, shares of the whole (nsys's combined summary).
    let out = stats_with(&[p, "--report", "cuda_gpu_sum", "--format", "json"]);
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum = want["gpu_sum"].as_object().unwrap();
    let rows = got["gpu_sum"].as_array().unwrap();
    assert_eq!(rows.len(), sum.len());
    for row in rows {
        let w = &sum[&format!("{}|{}", row["category"].as_str().unwrap(), row["name"].as_str().unwrap())];
        assert_eq!((&row["count"], &row["total_ns"], &row["median_ns"]), (&w["count"], &w["total"], &w["median"]));
        assert!((row["percent"].as_f64().unwrap() - w["percent"].as_f64().unwrap()).abs() < 0.051, "{row}");
    }
    assert!(rows.iter().any(|r| r["category"] == "MEMORY_OPER") && rows.iter().any(|r| r["category"] == "CUDA_KERNEL"));
    let mixed = stats_with(&[p, "--report", "cuda_gpu_kern_sum:base,cuda_kern_exec_sum"]);
    let err = String::from_utf8_lossy(&mixed.stderr);
    assert!(!mixed.status.success() && err.contains("name kernels differently"), "{err}");
    let bad = stats_with(&[p, "--report", "cuda_api_sum:base"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("takes no argument"));
}

/// Several traces (or their directory) are one job's: each table covers every rank, its instances and time the
/// sums of the ranks' own, and the processes table lists each rank; an output among the inputs is refused.
#[test]
fn the_traces_of_a_job_are_summarised_together() {
    let (Some(r0), Some(r1)) = (shared_trace("kineto-2rank-r0.json.gz"), shared_trace("kineto-2rank-r1.json.gz"))
    else {
        return;
    };
    let kernels = |args: &[&str]| -> Value {
        let out = stats_with(&[args, &["--report", "cuda_gpu_kern_sum,processes", "--format", "json"]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (p0, p1) = (r0.to_str().unwrap(), r1.to_str().unwrap());
    let both = kernels(&[p0, p1]);
    let (one, other) = (kernels(&[p0]), kernels(&[p1]));
    let find = |v: &Value, name: &str| -> (u64, u64) {
        let rows = v["kernels"].as_array().unwrap();
        rows.iter()
            .find(|r| r["name"] == name)
            .map_or((0, 0), |r| (r["count"].as_u64().unwrap(), r["total_ns"].as_u64().unwrap()))
    };
    let rows = both["kernels"].as_array().unwrap();
    assert!(rows.len() >= one["kernels"].as_array().unwrap().len());
    for row in rows {
        let name = row["name"].as_str().unwrap();
        let (a, b) = (find(&one, name), find(&other, name));
        assert_eq!(
            (row["count"].as_u64().unwrap(), row["total_ns"].as_u64().unwrap()),
            (a.0 + b.0, a.1 + b.1),
            "{name}"
        );
    }
    let ranks: Vec<u64> = both["processes"].as_array().unwrap().iter().filter_map(|p| p["rank"].as_u64()).collect();
    assert!(ranks.contains(&0) && ranks.contains(&1), "{ranks:?}");
    // Their directory: the same tables.
    let dir = scratch("stats-job-dir");
    for r in [&r0, &r1] {
        std::fs::copy(r, dir.join(r.file_name().unwrap())).unwrap();
    }
    assert_eq!(kernels(&[dir.to_str().unwrap()])["kernels"], both["kernels"]);
    let out = stats_with(&[p0, p1, "-o", p1, "--force"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("input"));
}

/// `--timeunit` (nsys's): the same figures in the unit asked for, exactly, in every time column of summaries and
/// per-event reports alike; JSON keeps nanoseconds.
#[test]
fn time_columns_follow_the_unit_asked_for() {
    let Some(path) = shared_trace("nsys-a100-cloverleaf.sqlite") else { return };
    let p = path.to_str().unwrap();
    let csv = |unit: &str| {
        let out = stats_with(&[p, "--report", "cuda_api_sum,cuda_api_trace", "--format", "csv", "--timeunit", unit]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let (ns, ms) = (csv("ns"), csv("msec"));
    assert_eq!(ns.lines().count(), ms.lines().count());
    let mut times = 0;
    for (a, b) in ns.lines().zip(ms.lines()) {
        if a.starts_with('#') || a.is_empty() {
            continue;
        }
        if a.starts_with("Time (%)") || a.starts_with("Start") {
            assert_eq!(a.replace("(ns)", "(ms)"), b);
            continue;
        }
        for (x, y) in a.split(',').zip(b.split(',')) {
            if x != y {
                let (x, y): (u64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!((x as f64 / 1e6 - y).abs() < 1e-9, "{x} ns vs {y} ms");
                times += 1;
            }
        }
    }
    assert!(times > 3000, "{times} time cells");
    let json = stats_with(&[p, "--report", "cuda_api_sum", "--format", "json", "--timeunit", "s"]);
    assert!(String::from_utf8_lossy(&json.stdout).contains("\"total_ns\""));
}

/// torch.compile's kernels grouped by what they fuse: two copies of one chain (`_0`, `_3`) in one row, a
/// reduction apart, other kernels left out; the table is in the default view only when there are Triton kernels.
#[test]
fn triton_kernels_are_grouped_by_the_operations_they_fuse() {
    let dir = scratch("stats-triton");
    let kernel = |name: &str, ts: u64, dur: u64| {
        format!(
            r#"{{"ph":"X","cat":"kernel","name":"{name}","pid":0,"tid":7,"ts":{ts},"dur":{dur},"args":{{"device":0,"stream":7}}}}"#
        )
    };
    let events = [
        kernel("triton_poi_fused_add_mul_0", 10, 5),
        kernel("triton_poi_fused_add_mul_3", 20, 5),
        kernel("triton_red_fused__to_copy_mean_pow_rsqrt_1", 30, 20),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 60, 50),
    ];
    let compiled = dir.join("compiled.json");
    std::fs::write(&compiled, format!(r#"{{"traceEvents":[{}]}}"#, events.join(","))).unwrap();
    let out = stats_with(&["--format", "json", "--report", "triton", compiled.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = serde_json::from_slice::<Value>(&out.stdout).unwrap()["triton"].clone();
    assert_eq!(rows.as_array().unwrap().len(), 2, "{rows}");
    assert_eq!(
        (rows[0]["kind"].as_str(), rows[0]["fused"].as_str()),
        (Some("reduction"), Some("_to_copy_mean_pow_rsqrt"))
    );
    assert_eq!(
        (rows[1]["fused"].as_str(), rows[1]["kernels"].as_u64(), rows[1]["count"].as_u64()),
        (Some("add_mul"), Some(2), Some(2))
    );
    assert!((rows[1]["percent"].as_f64().unwrap() - 12.5).abs() < 0.01, "{rows}");
    let title = "Triton kernels (torch.compile) by what they fuse";
    let text = String::from_utf8_lossy(&stats_with(&[compiled.to_str().unwrap()]).stdout).to_string();
    assert!(text.contains(title) && text.contains("add_mul"), "{text}");
    let eager = dir.join("eager.json");
    std::fs::write(&eager, format!(r#"{{"traceEvents":[{}]}}"#, events[3])).unwrap();
    let text = String::from_utf8_lossy(&stats_with(&[eager.to_str().unwrap()]).stdout).to_string();
    assert!(!text.contains(title), "{text}");
}
