//! Import of real torch.profiler and Nsight Systems traces, Perfetto and Kineto-JSON export, round trips.
//! The third-party traces are checked against what the files themselves hold (counted by tests/py/raw_counts.py
//! with Python's own json/sqlite3), the Perfetto output against the official schema, the JSON against HTA.

use cuflight_integration::*;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::Path;

fn sum(s: &Value, table: &str, field: &str) -> u64 {
    s[table].as_array().unwrap().iter().map(|r| r[field].as_u64().unwrap()).sum()
}

#[test]
fn shared_traces_import_with_the_counts_the_files_hold() {
    for name in SHARED_TRACES {
        let Some(path) = shared_trace(name) else { continue };
        let raw = python_json("raw_counts.py", &[path.as_os_str()]);
        let s = stats(&path);
        let ours = |k: &str| raw[k].as_u64().unwrap();
        assert_eq!(sum(&s, "kernels", "count"), ours("kernels"), "{name}: kernels");
        assert_eq!(sum(&s, "kernels", "total_ns"), ours("kernel_ns"), "{name}: kernel time (ns, exact)");
        assert_eq!(sum(&s, "api", "count"), ours("api"), "{name}: API calls");
        assert_eq!(sum(&s, "memcpy", "count"), ours("memcpy"), "{name}: copies");
        assert_eq!(sum(&s, "memcpy", "bytes"), ours("memcpy_bytes"), "{name}: copied bytes");
        assert_eq!(sum(&s, "memset", "count"), ours("memset"), "{name}: memsets");
        assert_eq!(sum(&s, "memset", "bytes"), ours("memset_bytes"), "{name}: memset bytes");
        if let Some(sync) = raw.get("sync") {
            assert_eq!(sum(&s, "sync", "count"), sync.as_u64().unwrap(), "{name}: synchronisations");
        }
    }
}

/// Exports to Perfetto, decodes with the official schema, checks every slice's times against the Chrome JSON
/// export of the same trace and returns (exporter's counts line, decoded counts).
fn perfetto_round(trace: &Path, dir: &Path) -> (String, Value) {
    let stem = trace.file_name().unwrap().to_string_lossy().to_string();
    let out = dir.join(format!("{stem}.pftrace"));
    let json = dir.join(format!("{stem}.times.json.gz"));
    let (ok, err) = export_to(trace, &out, &[]);
    assert!(ok, "{err}");
    let (ok, json_err) = export_to(trace, &json, &[]);
    assert!(ok, "{json_err}");
    let decoded = python_json("check_perfetto.py", &[out.as_os_str(), json.as_os_str()]);
    assert_eq!(decoded["times_checked"], decoded["slices"], "{stem}: every slice's times checked");
    (err, decoded)
}

fn count_from(line: &str, what: &str) -> u64 {
    let before = line.split(&format!(" {what}")).next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn perfetto_exports_decode_with_the_official_schema_and_match_the_trace() {
    let dir = scratch("perfetto");
    for name in SHARED_TRACES {
        let Some(path) = shared_trace(name) else { continue };
        let (line, decoded) = perfetto_round(&path, &dir);
        for what in ["packets", "slices", "flows", "counter values", "tracks"] {
            let key = what.replace(' ', "_");
            assert_eq!(decoded[&key].as_u64().unwrap(), count_from(&line, what), "{name}: {what}");
        }
        // Every kernel, copy and memset is a slice.
        let s = stats(&path);
        let device_ops = sum(&s, "kernels", "count") + sum(&s, "memcpy", "count") + sum(&s, "memset", "count");
        assert!(decoded["slices"].as_u64().unwrap() >= device_ops + sum(&s, "api", "count"), "{name}");
        timeline_matches_the_report(&path, &decoded, name);
    }
    // A cuflight capture: every device op was launched by a recorded API call, so each gets a flow.
    let prog = build_c("streams", &dir);
    let r = record(&dir, &[], &prog, &[], &[]);
    let s = stats(&r.trace);
    let (_, decoded) = perfetto_round(&r.trace, &dir);
    let device_ops = sum(&s, "kernels", "count") + sum(&s, "memcpy", "count") + sum(&s, "memset", "count");
    assert_eq!(decoded["flows"].as_u64().unwrap(), device_ops);
    timeline_matches_the_report(&r.trace, &decoded, "streams");
    let ranges = sum(&s, "nvtx", "count");
    assert_eq!(
        decoded["slices"].as_u64().unwrap(),
        device_ops + sum(&s, "api", "count") + ranges + sum(&s, "sync", "count")
    );
    // One device-memory counter value per allocation and free.
    let m = &s["memory"];
    assert!(
        decoded["counter_values"].as_u64().unwrap()
            >= m["malloc_count"].as_u64().unwrap() + m["free_count"].as_u64().unwrap()
    );
}

/// Both timelines name the collective each communication kernel ran, as the report tells it: the shared two-rank
/// job's first rank runs all of its collectives on NCCL 2.1x's `ncclKernel_SendRecv_*`, which the slice's name
/// alone leaves unsaid; the host's `nccl:*` ranges around their launches say which.
#[test]
fn timelines_name_each_communication_kernels_collective() {
    let Some(r0) = shared_trace("kineto-2rank-r0.json.gz") else { return };
    let dir = scratch("export-collectives");
    let (_, decoded) = perfetto_round(&r0, &dir);
    let expected = serde_json::json!({"all_to_all": 4, "all_reduce": 4, "all_gather": 2});
    assert_eq!(decoded["collectives"], expected, "{decoded}");
    let json = dir.join("r0.json");
    let (ok, err) = export_to(&r0, &json, &[]);
    assert!(ok, "{err}");
    let exported: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut by_collective = std::collections::BTreeMap::new();
    for e in exported["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "kernel") {
        if let Some(c) = e["args"]["collective"].as_str() {
            *by_collective.entry(c.to_string()).or_insert(0u64) += 1;
        }
    }
    assert_eq!(serde_json::to_value(&by_collective).unwrap(), expected);
}

/// The report counts times from where the Perfetto timeline starts (the UI's zero), so "at +1.2 s" in a
/// report is 1.2 s on the timeline.
fn timeline_matches_the_report(trace: &Path, decoded: &Value, name: &str) {
    let out =
        std::process::Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(trace).output().unwrap();
    assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    for p in r["processes"].as_array().unwrap() {
        assert_eq!(p["run"]["trace_start_ns"], decoded["first_ns"], "{name}: timeline start");
        assert_eq!(p["run"]["trace_end_ns"], decoded["last_ns"], "{name}: timeline end");
    }
}

/// Stats with the float columns that legitimately differ after rounding left out.
fn comparable(s: &Value) -> Value {
    let mut s = s.clone();
    for table in ["kernels", "api", "memcpy"] {
        for row in s[table].as_array_mut().unwrap() {
            row.as_object_mut().unwrap().retain(|k, _| k != "percent" && k != "gbps");
        }
    }
    // Kineto's JSON has complete ranges only: an NVTX push/pop range comes back as a range of no NVTX style.
    for row in s["nvtx"].as_array_mut().unwrap() {
        row.as_object_mut().unwrap().remove("style");
    }
    let mut out = serde_json::Map::new();
    for k in ["kernels", "api", "memcpy", "memset", "nvtx", "sync", "memory"] {
        out.insert(k.into(), s[k].clone());
    }
    Value::Object(out)
}

#[test]
fn capture_to_kineto_json_and_back_keeps_every_statistic() {
    let dir = scratch("roundtrip");
    for (prog, args) in [("streams", vec![]), ("nvtx", vec![]), ("train", vec!["3"])] {
        let exe = build_c(prog, &dir);
        let r = record(&dir, &[], &exe, &args, &[]);
        assert!(r.output.status.success(), "{}", r.stderr());
        let json = dir.join(format!("{prog}.json"));
        let (ok, err) = cuflight(&[
            OsStr::new("export"),
            r.trace.as_os_str(),
            OsStr::new("--format"),
            OsStr::new("chrome"),
            OsStr::new("-o"),
            json.as_os_str(),
        ]);
        assert!(ok, "{err}");
        assert_eq!(
            comparable(&stats(&r.trace)),
            comparable(&stats(&json)),
            "{prog}: stats differ after the round trip"
        );
    }
}

/// `cuflight export TRACE --format chrome -o JSON`; returns JSON's path.
fn export_kineto_json(trace: &Path, json: &Path) -> std::path::PathBuf {
    let (ok, err) = cuflight(&[
        OsStr::new("export"),
        trace.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("chrome"),
        OsStr::new("-o"),
        json.as_os_str(),
    ]);
    assert!(ok, "{err}");
    json.to_path_buf()
}

#[test]
fn hta_computes_the_same_temporal_breakdown_on_our_export() {
    let dir = scratch("hta");
    // HTA 0.5 fails with an AssertionError on kineto-h100-qwen-inference (original file and ours alike).
    for name in ["kineto-2rank-r0.json.gz", "kineto-a100-nccl-r0.json.gz", "kineto-v100-ddp-ns.json.gz"] {
        let Some(path) = shared_trace(name) else { continue };
        let json = export_kineto_json(&path, &dir.join(format!("{name}.json")));
        let theirs = python_json("hta_breakdown.py", &[path.as_os_str()]);
        let ours = python_json("hta_breakdown.py", &[json.as_os_str()]);
        for k in ["idle_us", "compute_us", "non_compute_us", "kernel_us"] {
            let (a, b) = (theirs[k].as_f64().unwrap(), ours[k].as_f64().unwrap());
            assert!((a - b).abs() <= 0.01 * a.max(1.0), "{name}: {k} {a} (HTA on the original) vs {b} (on our export)");
        }
    }
}

/// The report's breakdowns of `trace` (a capture, or its export) as HTA writes them: (breakdown, idle breakdown).
fn report_breakdowns(trace: &Path) -> (Value, Value) {
    let out =
        std::process::Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &report["processes"][0];
    (p["breakdown"].clone(), p["idle_breakdown"].clone())
}

/// A capture and its Kineto export break down alike in the report, and as HTA breaks the export down with
/// nanoseconds kept (`HTA_DISABLE_NS_ROUNDING=1`: by default HTA rounds to whole µs, and sub-µs ops turn
/// negative), each figure within 0.1% of the span.
fn capture_export_and_hta_agree(capture: &Path, json: &Path) {
    let hta = python_json("hta_breakdown.py", &[OsStr::new("--exact"), json.as_os_str()]);
    let span = hta["kernel_us"].as_f64().unwrap();
    for trace in [capture, json] {
        let (ours, idle) = report_breakdowns(trace);
        let pairs = [
            (&ours["span_ns"], "kernel_us"),
            (&ours["idle_ns"], "idle_us"),
            (&ours["compute_ns"], "compute_us"),
            (&ours["non_compute_ns"], "non_compute_us"),
            (&idle["host_wait_ns"], "host_wait_us"),
            (&idle["kernel_wait_ns"], "kernel_wait_us"),
            (&idle["other_ns"], "other_us"),
        ];
        for (v, k_hta) in pairs {
            let (a, b) = (v.as_f64().unwrap() / 1000.0, hta[k_hta].as_f64().unwrap());
            assert!((a - b).abs() <= 0.001 * span, "{}: {k_hta} {a} µs vs HTA {b} µs (span {span})", trace.display());
        }
    }
}

/// A capture with work on several streams, waits between them and synchronisations (HTA counts every event with
/// a stream, synchronisations too); and 16 threads launching at once, each on a stream of its own.
#[test]
fn the_breakdown_is_htas_on_a_multi_stream_capture() {
    let dir = scratch("hta-streams");
    for (name, args) in [("streams", &[][..]), ("threads", &["16", "200"][..])] {
        let prog = build_c(name, &dir);
        let r = record(&dir, &[], &prog, args, &[]);
        assert!(r.output.status.success(), "{}", r.stderr());
        let json = export_kineto_json(&r.trace, &dir.join(format!("{name}.json")));
        capture_export_and_hta_agree(&r.trace, &json);
    }
}

/// An H100 window attached to a PyTorch loop (41,112 GPU ops, hundreds of sub-µs memsets, on which HTA's
/// default rounding stops with an AssertionError).
#[test]
fn the_breakdown_is_htas_on_an_attached_window() {
    let Some(capture) = shared_trace("h100-attach-window.cuf") else { return };
    let dir = scratch("hta-attach");
    let json = export_kineto_json(&capture, &dir.join("attach.json"));
    capture_export_and_hta_agree(&capture, &json);
}

#[test]
fn bad_inputs_get_one_line_errors_naming_the_problem() {
    let dir = scratch("badimport");
    let Some(r0) = shared_trace("kineto-2rank-r0.json.gz") else { return };
    let gz = std::fs::read(r0).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated.json.gz", gz[..gz.len() / 2].to_vec(), "gzip"),
        ("malformed.json", br#"{"traceEvents": [{"ph": "X", "ts": 1,"#.to_vec(), "Kineto JSON"),
        ("notatrace.json", br#"{"hello": [1, 2, 3]}"#.to_vec(), "no traceEvents"),
        ("random.bin", vec![0x42; 64], "unknown format"),
        // Named for what they are: the one step that makes them readable.
        ("run.nsys-rep", vec![0x42; 64], "nsys export --type sqlite -o"),
        ("run.pftrace", vec![0x0a, 0x42, 0x42], "Perfetto trace, which cuflight writes but does not read"),
    ];
    for (file, bytes, needle) in cases {
        let path = dir.join(file);
        std::fs::write(&path, bytes).unwrap();
        for cmd in ["stats", "export"] {
            let (ok, err) = cuflight(&[OsStr::new(cmd), path.as_os_str()]);
            assert!(!ok, "{cmd} {file} succeeded");
            assert!(err.contains(needle) && !err.contains("panicked"), "{cmd} {file}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
        }
    }
    // An SQLite file that is not an nsys export.
    let db = dir.join("other.sqlite");
    let made = std::process::Command::new("python3")
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('create table t(x)'); c.commit()"])
        .arg(&db)
        .status()
        .unwrap();
    assert!(made.success());
    let (ok, err) = cuflight(&[OsStr::new("stats"), db.as_os_str()]);
    assert!(!ok && err.contains("not an nsys export"), "{err}");
    // A cuflight trace of an unknown version.
    let prog = build_c("smoke", &dir);
    let r = record(&dir, &[], &prog, &[], &[]);
    let mut bytes = std::fs::read(&r.trace).unwrap();
    bytes[8] = 99;
    let future = dir.join("future.cuf");
    std::fs::write(&future, bytes).unwrap();
    let (ok, err) = cuflight(&[OsStr::new("stats"), future.as_os_str()]);
    assert!(!ok && err.contains("unsupported trace version 99"), "{err}");
}

/// `-o trace.json.gz` (the format follows the name) writes the same Kineto JSON gzip-compressed, which HTA,
/// TensorBoard and Perfetto read as it is; our own importer reads it back to the same statistics.
#[test]
fn chrome_json_is_chosen_by_its_name_and_gzip_compressed_when_named_gz() {
    let dir = scratch("json-gz");
    let exe = build_c("streams", &dir);
    let r = record(&dir, &[], &exe, &[], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let (plain, gz) = (dir.join("t.json"), dir.join("t.json.gz"));
    for out in [&plain, &gz] {
        let (ok, err) = export_to(&r.trace, out, &[]);
        assert!(ok, "{err}");
    }
    let bytes = std::fs::read(&gz).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip magic");
    let text = std::fs::read(&plain).unwrap();
    assert!(bytes.len() * 4 < text.len(), "{} compressed bytes for {} of JSON", bytes.len(), text.len());
    let unzipped = std::process::Command::new("python3")
        .args(["-c", "import gzip, sys; sys.stdout.buffer.write(gzip.open(sys.argv[1]).read())"])
        .arg(&gz)
        .output()
        .unwrap();
    assert!(unzipped.status.success());
    assert_eq!(unzipped.stdout, text, "the same JSON inside");
    assert_eq!(comparable(&stats(&gz)), comparable(&stats(&r.trace)));
}

/// An Nsight Systems report is read through its SQLite export: one beside it that is newer (as `nsys stats`
/// reuses one), else `nsys export` run into a private temporary directory that is gone afterwards; messages and
/// default outputs name the report, which no output may replace. nsys is not on the test machines: a stand-in
/// script takes its command line (`export --type=sqlite --force-overwrite=true --output=OUT REPORT`) and copies
/// the shared export, or fails as nsys fails on a damaged report.
#[test]
fn an_nsight_systems_report_is_read_through_its_sqlite_export() {
    use std::os::unix::fs::PermissionsExt;
    let Some(sqlite) = shared_trace("nsys-a100-cloverleaf.sqlite") else { return };
    let dir = scratch("nsys-report");
    let (tmp, empty) = (dir.join("tmp"), dir.join("no-nsys"));
    for d in [&tmp, &empty] {
        std::fs::create_dir_all(d).unwrap();
    }
    let fake = dir.join("nsys");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1 $2 $3\" = 'export --type=sqlite --force-overwrite=true' ] || { echo \"bad args: $*\" >&2; exit 2; }\n\
         [ -n \"$FAKE_NSYS_FAIL\" ] && { echo \"ERROR: $FAKE_NSYS_FAIL\" >&2; exit 1; }\n/bin/cp \"$FAKE_NSYS_SQLITE\" \"${4#--output=}\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let report = dir.join("run.nsys-rep");
    let bytes = b"not a format cuflight reads by content".to_vec();
    std::fs::write(&report, &bytes).unwrap();
    let run = |args: &[&OsStr], nsys: Option<&Path>, fail: Option<&str>| {
        let mut c = std::process::Command::new(cuflight_bin());
        c.args(args).current_dir(&dir).env("PATH", &empty).env("TMPDIR", &tmp).env("FAKE_NSYS_SQLITE", &sqlite);
        c.env_remove("CUFLIGHT_NSYS").env_remove("FAKE_NSYS_FAIL");
        if let Some(n) = nsys {
            c.env("CUFLIGHT_NSYS", n);
        }
        if let Some(f) = fail {
            c.env("FAKE_NSYS_FAIL", f);
        }
        let out = c.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let name = OsStr::new("run.nsys-rep");
    // No nsys: the command that makes it readable.
    let (ok, _, err) = run(&[OsStr::new("stats"), name], None, None);
    assert!(!ok && err.contains("nsys export --type sqlite -o run.sqlite run.nsys-rep"), "{err}");
    // A directory left by a cuflight killed during an export (no such pid) goes; one of a live process stays.
    let stale = tmp.join("cuflight-nsys-999999999-1");
    let live = tmp.join(format!("cuflight-nsys-{}-1", std::process::id()));
    for d in [&stale, &live] {
        std::fs::create_dir_all(d).unwrap();
    }
    // Exported with nsys: the report reads as its export, named as the report; nothing of it left in TMPDIR.
    let (ok, out, err) =
        run(&[OsStr::new("report"), OsStr::new("--format"), OsStr::new("json"), name], Some(&fake), None);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["processes"][0]["file"], "run.nsys-rep");
    assert_eq!(r["processes"][0]["run"]["host"], "nid008553");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(left, vec![live.clone()], "the private export and the stale directory are removed");
    std::fs::remove_dir(&live).unwrap();
    // A default output goes beside the report; the report itself is no output.
    let (ok, _, err) = run(&[OsStr::new("export"), name], Some(&fake), None);
    assert!(ok && dir.join("run.perfetto-trace").is_file(), "{err}");
    let (ok, _, err) =
        run(&[OsStr::new("export"), name, OsStr::new("-o"), name, OsStr::new("--force")], Some(&fake), None);
    assert!(!ok && err.contains("run.nsys-rep is also an input"), "{err}");
    assert_eq!(std::fs::read(&report).unwrap(), bytes);
    // nsys failing: one line with what it said.
    let (ok, _, err) = run(&[OsStr::new("stats"), name], Some(&fake), Some("damaged report"));
    assert!(!ok && err.contains("failed") && err.trim().ends_with("ERROR: damaged report"), "{err}");
    assert_eq!(err.trim().lines().filter(|l| !l.contains("exporting")).count(), 1, "{err}");
    // An export beside it, newer than the report: read without nsys.
    std::fs::copy(&sqlite, dir.join("run.sqlite")).unwrap();
    let (ok, out, err) = run(&[OsStr::new("stats"), OsStr::new("--format"), OsStr::new("json"), name], None, None);
    assert!(ok && err.contains("through") && out.contains("\"kernels\""), "{err}");
}

/// A directory is the traces of one job (as HTA takes a trace directory and torch.profiler's tensorboard handler
/// writes one): the report of a directory holding both ranks' traces, a note and a hidden file is the report of
/// the two traces named; a directory without traces is refused by name; a link inside is left out.
#[test]
fn a_directory_of_rank_traces_reads_as_the_job() {
    let (Some(r0), Some(r1)) = (shared_trace("kineto-2rank-r0.json.gz"), shared_trace("kineto-2rank-r1.json.gz"))
    else {
        return;
    };
    let dir = scratch("trace-dir");
    let log = dir.join("log");
    std::fs::create_dir_all(log.join("older-run")).unwrap();
    std::fs::copy(&r0, log.join("worker0.1.pt.trace.json.gz")).unwrap();
    std::fs::copy(&r1, log.join("worker1.1.pt.trace.json.gz")).unwrap();
    std::fs::write(log.join("notes.txt"), "not a trace").unwrap();
    std::fs::copy(&r1, log.join(".partial.pt.trace.json.gz")).unwrap();
    std::os::unix::fs::symlink(&r0, log.join("linked.pt.trace.json.gz")).unwrap();
    let json = |args: &[&OsStr]| -> (Value, String) {
        let out = std::process::Command::new(cuflight_bin()).args(["report", "--format", "json"]).args(args).output();
        let out = out.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (serde_json::from_slice(&out.stdout).unwrap(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (named, _) = json(&[r0.as_os_str(), r1.as_os_str()]);
    let (from_dir, err) = json(&[log.as_os_str()]);
    assert!(err.contains("2 traces; left out 4 other entries"), "{err}");
    assert_eq!(from_dir["verdict"], named["verdict"]);
    let (a, b) = (named["processes"].as_array().unwrap(), from_dir["processes"].as_array().unwrap());
    assert_eq!(a.len(), b.len());
    for (p, q) in a.iter().zip(b) {
        for k in ["rank", "breakdown", "step_total", "findings"] {
            assert_eq!(p[k], q[k], "{k}");
        }
    }
    // Two of the job's 128 ranks (distributedInfo.world_size): the job view and the straggler say so.
    let text = std::process::Command::new(cuflight_bin()).arg("report").arg(&log).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("== The job: 2 of 128 ranks (the others' traces were not given"), "{text}");
    assert!(text.contains("is the straggler") && text.contains("(of the 2 ranks given; the job has 128)"), "{text}");
    let (ok, err) = cuflight(&[OsStr::new("report"), log.join("older-run").as_os_str()]);
    assert!(!ok && err.contains("holds no trace"), "{err}");
    // diff takes a directory as one run: the job's two ranks reported together, compared with a copy.
    let again = dir.join("again");
    std::fs::create_dir_all(&again).unwrap();
    for f in ["worker0.1.pt.trace.json.gz", "worker1.1.pt.trace.json.gz"] {
        std::fs::copy(log.join(f), again.join(f)).unwrap();
    }
    let out =
        std::process::Command::new(cuflight_bin()).args(["diff", "--format", "json"]).args([&log, &again]).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["runs"].as_array().unwrap().len(), 2);
    assert_eq!(d["runs"][0]["step_ns"], d["runs"][1]["step_ns"]);
    assert!(d["warnings"].to_string().contains("2 processes with GPU work"), "{}", d["warnings"]);
    // Runs of a job compare one rank throughout: a later run holding rank 1 only is compared by rank 1, one
    // without it says so.
    let diff = |a: &Path, b: &Path| -> Value {
        let out = std::process::Command::new(cuflight_bin()).args(["diff", "--format", "json"]).args([a, b]).output();
        serde_json::from_slice(&out.unwrap().stdout).unwrap()
    };
    let busiest = d["runs"][0]["pid"].clone();
    let busiest_file = if busiest == 4045 { "worker1.1.pt.trace.json.gz" } else { "worker0.1.pt.trace.json.gz" };
    std::fs::remove_file(again.join(busiest_file)).unwrap();
    let d = diff(&log, &again);
    assert!(d["warnings"].to_string().contains("is not in it; compared"), "{}", d["warnings"]);
    let (kept, kept_file) = (log.join(busiest_file), dir.join("busiest"));
    std::fs::create_dir_all(&kept_file).unwrap();
    std::fs::copy(&kept, kept_file.join(busiest_file)).unwrap();
    let d = diff(&log, &kept_file);
    assert_eq!(
        (d["runs"][1]["pid"].clone(), d["runs"][0]["step_ns"].clone()),
        (busiest, d["runs"][1]["step_ns"].clone())
    );
    // Commands that read trace files one by one say which read a directory.
    let (ok, err) = cuflight(&[OsStr::new("recover"), log.as_os_str()]);
    assert!(!ok && err.contains("is a directory: recover reads trace files (report, stats, merge and export"), "{err}");
}

/// `export --filter-nvtx`: a step, or every instance of a range, drawn as the whole trace draws it there
/// (tests/py/export_cut.py checks the cut against the whole export slice by slice, with flows and the memory
/// level); the Perfetto cut decodes and its times are the JSON cut's. Parquet refuses the filter in one line.
#[test]
fn an_export_cut_to_a_range_draws_what_the_whole_trace_draws_there() {
    let dir = scratch("export-cut");
    let prog = build_c("train", &dir);
    let r = record(&dir, &[], &prog, &["5"], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let mut cases = vec![(r.trace.clone(), "ProfilerStep#3", "1"), (r.trace.clone(), "forward", "all")];
    if let Some(a100) = shared_trace("kineto-a100-nccl-r0.json.gz") {
        cases.push((a100, "ProfilerStep#552", "1"));
    }
    for (i, (trace, name, instance)) in cases.into_iter().enumerate() {
        let out = |ext: &str| dir.join(format!("{i}.{ext}"));
        let export = |filter: Option<&str>, to: &Path| {
            let (ok, err) = export_to(&trace, to, &filter.map_or(vec![], |f| vec!["--filter-nvtx", f]));
            assert!(ok, "{err}");
            err
        };
        let filter = if instance == "all" { name.to_string() } else { format!("{name}/{instance}") };
        export(None, &out("whole.json"));
        let said = export(Some(&filter), &out("cut.json"));
        assert!(said.contains(&format!("drawing '{name}'")) || said.contains("drawing instance"), "{said}");
        let c = python_json(
            "export_cut.py",
            &[out("whole.json").as_os_str(), out("cut.json").as_os_str(), OsStr::new(name), OsStr::new(instance)],
        );
        let n = |k: &str| c[k].as_u64().unwrap();
        assert!(n("overlapping") > 0 && n("slices") < n("slices_whole"), "{name}: {c}");
        if name == "forward" {
            // A forward range's 9 kernels mostly run after it has closed on the host: kept with their launches.
            assert!(n("kernels") >= 5 * 9 && n("launched_inside_run_after") > 0, "{c}");
        }
        if trace == r.trace {
            // The program's three allocations, made before the first step, are in use when the cut begins.
            assert_eq!(n("memory_events"), 3, "{c}");
        }
        export(Some(&filter), &out("pftrace"));
        let decoded = python_json("check_perfetto.py", &[out("pftrace").as_os_str(), out("cut.json").as_os_str()]);
        assert_eq!(decoded["slices"].as_u64(), Some(n("slices")), "{name}: {decoded}");
        assert_eq!(decoded["times_checked"], decoded["slices"], "{name}");
    }
    // Without -o, a cut is named after what it keeps, beside the whole export's name.
    let (ok, err) =
        cuflight(&[OsStr::new("export"), r.trace.as_os_str(), OsStr::new("--filter-nvtx"), OsStr::new("forward/2")]);
    assert!(ok && dir.join("trace.forward-2.perfetto-trace").is_file(), "{err}");
    let parquet = dir.join("cut.parquet");
    let (ok, err) = export_to(&r.trace, &parquet, &["--format", "parquet", "--filter-time", "0/1"]);
    assert!(!ok && err.contains("cut a timeline") && err.lines().count() == 1 && !parquet.exists(), "{err}");
}
