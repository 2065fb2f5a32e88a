//! The job across ranks in `cuflight report`: four ranks of tests/c/scenario.c (`rank` mode: an all-reduce that
//! waits for every rank; rank 1 runs an extra kernel per step) recorded in one session on cudasim, the test
//! double for the GPU. The report must name rank 1 as the straggler with its lag within 10% of what it planted,
//! show who waited for whom, a critical path through a step's collectives that rank 1's work dominates, and a
//! rank × step heatmap, in JSON, text and HTML.

use cuflight_integration::*;
use serde_json::Value;
use std::process::Command;

/// Four ranks measure time on this machine's cores: each test takes `serial()`, one at a time.
const RANKS: u32 = 4;
const STEPS: u32 = 16;

fn planted_ns(stdout: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    text.lines().filter_map(|l| l.strip_prefix("planted_ns=")).map(|v| v.parse::<f64>().unwrap()).sum()
}

/// The median lateness rank `rank` measured at the collectives' barrier (scenario prints `lateness_ns[R]=N`).
pub fn lateness_ns(stdout: &[u8], rank: u32) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    let key = format!("lateness_ns[{rank}]=");
    let line = text.lines().find_map(|l| l.strip_prefix(key.as_str())).unwrap_or_else(|| panic!("no {key} in {text}"));
    line.parse().unwrap()
}

fn report(trace: &std::path::Path, format: &str) -> Vec<u8> {
    let out = Command::new(cuflight_bin()).args(["report", "--format", format]).arg(trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn four_ranks_in_one_session_name_the_slow_rank_and_its_lag() {
    let _serial = serial();
    let dir = scratch("job-four");
    let prog = build_c("scenario", &dir);
    let barrier = dir.join("barrier");
    let workers: Vec<String> = (0..RANKS)
        .map(|r| {
            format!(
                "RANK={r} LOCAL_RANK={r} WORLD_SIZE={RANKS} {} rank {STEPS} {r} {RANKS} {} &",
                prog.display(),
                barrier.display()
            )
        })
        .collect();
    let rec = record(&dir, &[], std::path::Path::new("/bin/sh"), &["-c", &format!("{} wait", workers.join(" "))], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    // Only rank 1 plants: its extra kernel per step, as long as it really slept.
    let lag = planted_ns(&rec.output.stdout) / STEPS as f64;
    assert!(lag >= 3e6, "planted {lag} ns per step");
    let r: Value = serde_json::from_slice(&report(&rec.trace, "json")).unwrap();
    let f = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "straggler").expect("a straggler");
    assert_eq!(f["rank"], 1, "{}", r["findings"]);
    let job = &r["job"];
    assert_eq!(job["clocks"]["basis"], "one host");
    assert_eq!(job["method"], "arrival");
    // One collective to line the ranks up, then one per step, one kernel per rank each. cudasim stamps a
    // kernel's end when its host thread wakes, so a rank descheduled then can end a few ms late; the matcher
    // still places it by the instant its kernel shared with the others', but a collective whose ranks all woke
    // late in two groups stays split in two. Once or twice at most, on this 2-core machine.
    let matched = job["collectives"].as_u64().unwrap();
    assert!((STEPS as u64..=STEPS as u64 + 3).contains(&matched), "{job}");
    let ranks = job["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), RANKS as usize);
    let slow = &ranks[1];
    assert_eq!(slow["rank"], 1);
    assert!(slow["times_last"].as_u64().unwrap() >= (STEPS as u64 * 3) / 4, "{slow}");
    // The lag: how much later than the others rank 1 joined (median over collectives), within 10% of what
    // rank 1 itself measured at the barrier, and near what it planted (the others' kernels overshoot their
    // sleeps too, by more when the machine is busy).
    let measured = slow["median_lateness_ns"].as_f64().unwrap();
    let truth = lateness_ns(&rec.output.stdout, 1);
    assert!((measured - truth).abs() <= 0.1 * truth, "rank 1 joined {measured} ns late; it measured {truth} ns");
    assert!((measured - lag).abs() <= 0.25 * lag, "rank 1 joined {measured} ns late; it planted {lag} ns per step");
    assert_eq!(f["evidence"]["metrics"]["median_lag_ns"].as_f64().unwrap(), measured);
    for (i, other) in ranks.iter().enumerate().filter(|(i, _)| *i != 1) {
        let waited_for = &other["waited_for"][0];
        assert!(waited_for[0].as_str().unwrap().starts_with("rank 1 "), "rank {i} waited most for {waited_for}");
        // It waited about the lag in a typical step (the heatmap's waits; the mean would take in the odd step
        // where a rank was descheduled on this 2-core machine).
        let mut waits: Vec<f64> =
            job["heatmap"]["waited_ns"][i].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        waits.sort_by(f64::total_cmp);
        let typical = waits[waits.len() / 2];
        assert!((typical - lag).abs() <= 0.25 * lag, "rank {i} waits {typical} ns in a typical step: {job}");
        assert!(other["waited_ns"].as_f64().unwrap() >= 0.5 * lag * STEPS as f64, "{other}");
        assert!(other["median_lateness_ns"].as_f64().unwrap() < 0.2 * lag, "{other}");
        // The all-reduce runs on the compute stream, after the compute: no overlap, as HTA would say.
        assert_eq!(other["comm_overlap_pct"].as_f64(), Some(0.0), "{other}");
    }
    // The critical path of a typical step: its segments tile the step, and rank 1's work is most of it.
    let c = &job["critical_path"];
    let segments = c["segments"].as_array().unwrap();
    let total: u64 = segments.iter().map(|s| s["duration_ns"].as_u64().unwrap()).sum();
    assert_eq!(total, c["duration_ns"].as_u64().unwrap(), "{c}");
    assert!(c["collectives"].as_u64().unwrap() >= 1, "{c}");
    assert!(c["work_by_rank"][0][0].as_str().unwrap().starts_with("rank 1 "), "{c}");
    let rank1_work = c["work_by_rank"][0][1].as_f64().unwrap();
    assert!(rank1_work >= 0.5 * c["duration_ns"].as_f64().unwrap(), "{c}");
    // What that work was: rank 1's GPU work before it joined, its planted kernel among it, as long as it ran.
    let before = segments.iter().find(|s| s["kind"] == "work" && s["who"].as_str().unwrap().starts_with("rank 1 "));
    let work = before.expect("rank 1's work on the path")["gpu_work"].as_array().unwrap();
    let planted = work.iter().find(|w| w[0] == "slow_rank_extra_kernel").expect("the planted kernel");
    let planted_ns = planted[1].as_f64().unwrap();
    assert!((planted_ns - lag).abs() <= 0.25 * lag, "{planted_ns} ns of the planted kernel on the path: {c}");
    // The heatmap: every rank's every step, and the time the fast ranks waited in each.
    let h = &job["heatmap"];
    // Less a step every rank judged warm-up: on a loaded 2-core machine all four ranks' second step once ran
    // long enough to be (the heatmap had 15).
    let warm = |p: &Value| if p["warmup"]["included"] == true { 0 } else { p["warmup"]["steps"].as_u64().unwrap_or(0) };
    let left_out = r["processes"].as_array().unwrap().iter().map(warm).min().unwrap_or(0) as usize;
    assert_eq!(h["steps"].as_array().unwrap().len(), STEPS as usize - left_out, "{}", r["processes"]);
    assert_eq!(h["ranks"].as_array().unwrap().len(), RANKS as usize);
    for rk in 0..RANKS as usize {
        assert!(h["step_ns"][rk].as_array().unwrap().iter().all(|v| v.as_u64().is_some_and(|d| d > 0)), "{h}");
    }
    // The Kineto-style JSON export of the session keeps it: each rank labelled, each process's GPU apart (its
    // correlation ids repeat across processes; the flows say whose work is whose), the same job view.
    let json = dir.join("job.json");
    export_chrome(&rec.trace, &json);
    let again: Value = serde_json::from_slice(&report(&json, "json")).unwrap();
    let (a, b) = (&job["ranks"], &again["job"]["ranks"]);
    for i in 0..RANKS as usize {
        assert_eq!(a[i]["rank"], b[i]["rank"]);
        assert_eq!(a[i]["collectives"], b[i]["collectives"], "{}", again["job"]);
        assert_eq!(a[i]["median_lateness_ns"], b[i]["median_lateness_ns"], "{}", again["job"]);
    }
    // The same in the terminal and in HTML.
    let text = String::from_utf8(report(&rec.trace, "text")).unwrap();
    assert!(text.contains("== The job: 4 ranks; one host's clock"), "{text}");
    assert!(text.contains("Critical path of ProfilerStep#"), "{text}");
    assert!(text.contains("Step time per rank"), "{text}");
    let html = String::from_utf8(report(&rec.trace, "html")).unwrap();
    assert!(html.contains("<h2>The job</h2>"));
    let heat = &html[html.find("<table class=heat>").expect("a heatmap")..];
    let heat = &heat[..heat.find("</table>").unwrap()];
    assert_eq!(heat.matches("<tr><td>rank ").count(), RANKS as usize);
    assert_eq!(heat.matches("title=\"ProfilerStep#").count(), (RANKS * STEPS + STEPS) as usize);
}

#[test]
fn four_ranks_started_by_open_mpi_are_named_by_its_environment() {
    let _serial = serial();
    // A real launcher: Open MPI's mpirun (scripts/setup installs it) starts the four ranks; the agent takes
    // rank, local rank and world size from OMPI_COMM_WORLD_* (no RANK in sight).
    let dir = scratch("job-mpirun");
    let prog = build_c("scenario", &dir);
    let barrier = dir.join("barrier");
    let rank_cmd = format!("exec {} rank {STEPS} $OMPI_COMM_WORLD_RANK {RANKS} {}", prog.display(), barrier.display());
    let np = RANKS.to_string();
    let args = ["--allow-run-as-root", "--oversubscribe", "-np", &np, "sh", "-c", &rank_cmd];
    let rec = record(&dir, &[], std::path::Path::new("mpirun"), &args, &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let r: Value = serde_json::from_slice(&report(&rec.trace, "json")).unwrap();
    let job = &r["job"];
    let ranks = job["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), RANKS as usize, "{job}");
    for (i, rank) in ranks.iter().enumerate() {
        let pid = rank["pid"].as_u64().unwrap();
        assert_eq!(rank["who"].as_str().unwrap(), format!("rank {i} (local {i}) pid {pid}"));
        // The GPU its work ran on (scenario.c leaves every rank on device 0).
        assert_eq!(rank["gpus"], serde_json::json!([0]), "{rank}");
    }
    let s = stats(&rec.trace);
    assert!(s["processes"].as_array().unwrap().iter().all(|p| p["world_size"] == RANKS), "{}", s["processes"]);
    let f = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "straggler").expect("a straggler");
    assert_eq!(f["rank"], 1);
    let measured = ranks[1]["median_lateness_ns"].as_f64().unwrap();
    let truth = lateness_ns(&rec.output.stdout, 1);
    assert!((measured - truth).abs() <= 0.1 * truth, "rank 1 joined {measured} ns late; it measured {truth} ns");
}

#[test]
fn a_rank_claimed_by_two_processes_of_the_job_is_shown_twice_and_said() {
    let _serial = serial();
    // HTA's two ranks, and rank 0 again from another run (a copy: another file, the same rank, collectives of its
    // own). It is no DataLoader worker of rank 0: all three stand in the job view, and the report says rank 0
    // is claimed twice instead of leaving one out.
    let (Some(r0), Some(r1)) = (shared_trace("kineto-2rank-r0.json.gz"), shared_trace("kineto-2rank-r1.json.gz"))
    else {
        return;
    };
    let dir = scratch("job-claimed-twice");
    let again = dir.join("rank0-again.json.gz");
    std::fs::copy(&r0, &again).unwrap();
    let out =
        Command::new(cuflight_bin()).args(["report", "--format", "json"]).args([&r0, &r1, &again]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranks: Vec<u64> = r["job"]["ranks"].as_array().unwrap().iter().map(|k| k["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, [0, 1, 0], "{}", r["job"]);
    let procs = r["processes"].as_array().unwrap();
    assert!(procs.iter().all(|p| p.get("worker_of").is_none()), "{procs:?}");
    let claimed: Vec<&Value> = procs
        .iter()
        .filter(|p| {
            p["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("rank 0 is also claimed"))
        })
        .collect();
    assert_eq!(claimed.len(), 2, "{procs:?}");
    assert!(claimed.iter().all(|p| p["rank"] == 0));
    // Without the copy, the two ranks stand as before, with no such warning.
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).args([&r0, &r1]).output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["job"]["ranks"].as_array().unwrap().len(), 2);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("also claimed"));
}

/// 64 ranks on 8 simulated hosts, each recorded by cudasim into its own file (`-o run.%h.%r.cuf`): every command
/// over a job's traces opens each trace once, counted by the library (`EventSource::opened_on_this_thread`):
/// `merge` and the Parquet export (a first pass for the job's clock, a second for the events, each trace kept
/// open in between), the job's time-ordered source (`export` and `stats` of several traces), and the report over
/// ranks (given the traces open, it opens none). The job's source streams what `merge` writes, event for event.
#[test]
fn every_command_over_64_rank_traces_opens_each_trace_once() {
    use cuflight_collector::model::source::EventSource;
    let dir = scratch("job-64");
    let prog = build_c("smoke", &dir);
    let workers: Vec<String> = (0..64)
        .map(|r| format!("RANK={r} LOCAL_RANK={} WORLD_SIZE=64 CUDASIM_HOST=node{} {} &", r % 8, r / 8, prog.display()))
        .collect();
    let out = Command::new(cuflight_bin())
        .current_dir(&dir)
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .args(["record", "-o", "run.%h.%r.cuf", "sh", "-c"])
        .arg(format!("{} wait", workers.join(" ")))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cuf"))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 64, "one trace a rank");
    let opens = |f: &mut dyn FnMut()| {
        let before = EventSource::opened_on_this_thread();
        f();
        EventSource::opened_on_this_thread() - before
    };

    let mut merged_bytes = Vec::new();
    let mut merged = None;
    let n = opens(&mut || {
        let m =
            cuflight_collector::export::merge::merge(&paths, &mut merged_bytes, vec!["test".into()], &mut |_, _| {});
        merged = Some(m.unwrap());
    });
    let merged = merged.unwrap();
    assert_eq!((n, merged.processes), (64, 64), "merge: one open a trace, every rank's process");
    assert_eq!(merged.placement.hosts.len(), 8, "{:?}", merged.placement.hosts);

    let mut job = None;
    let n = opens(&mut || job = Some(EventSource::open_job(&paths, vec!["test".into()], &mut |_, _| {}).unwrap()));
    let (mut job, _) = job.unwrap();
    assert_eq!(n, 64, "the job's source: one open a trace");
    let mut file = EventSource::from_bytes(merged_bytes, "merged").unwrap().expect("a merged trace");
    let stream = |s: &mut EventSource| {
        let mut v = Vec::new();
        s.for_each(|k, _, e| v.push((k, e.kind(), e.start, e.end))).unwrap();
        v
    };
    let n = opens(&mut || assert_eq!(stream(&mut job), stream(&mut file), "the job's source is what merge writes"));
    assert_eq!(n, 0, "a pass opens nothing");

    let tables = dir.join("tables");
    std::fs::create_dir(&tables).unwrap();
    let stems = cuflight_collector::export::parquet::part_stems(&paths);
    let sources: Vec<_> = stems.into_iter().zip(paths.iter().cloned()).collect();
    let n = opens(&mut || {
        let mut steps_of = |_: &std::path::Path, _: &mut EventSource| Ok(Default::default());
        cuflight_collector::export::parquet::export(&sources, &tables, &mut steps_of).unwrap();
    });
    assert_eq!(n, 64, "the Parquet export: one open a trace");

    let mut report = None;
    let n = opens(&mut || {
        let mut open: Vec<_> = paths.iter().map(|p| (p.display().to_string(), EventSource::open(p).unwrap())).collect();
        report = Some(cuflight_collector::report::Report::compute(&mut open, &Default::default()).unwrap());
    });
    assert_eq!(n, 64, "the report over ranks opens no trace again");
    let report: Value = serde_json::from_str(&report.unwrap().to_json()).unwrap();
    assert_eq!(report["job"]["ranks"].as_array().map(Vec::len), Some(64), "{}", report["job"]);
}

/// Traces of different runs given together are not one job: rank 0 of a V100 DDP run in 2024 and an H100
/// inference run in 2025 (the shared traces) once made a straggler of the slower, "96% slower than the other
/// ranks' (rank 0)". Now the report says they ran apart and reports each alone: no job view, no straggler, no
/// rank invented for a trace that has none. HTA's two ranks, which ran together, still make a job, also
/// beside another run.
#[test]
fn traces_of_different_runs_are_reported_alone_not_as_a_job() {
    let (Some(ddp), Some(qwen), Some(r0), Some(r1)) = (
        shared_trace("kineto-v100-ddp-ns.json.gz"),
        shared_trace("kineto-h100-qwen-inference.json.gz"),
        shared_trace("kineto-2rank-r0.json.gz"),
        shared_trace("kineto-2rank-r1.json.gz"),
    ) else {
        return;
    };
    let json = |files: &[&std::path::Path]| -> Value {
        let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).args(files).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let r = json(&[&ddp, &qwen]);
    let why = r["separate_runs"].as_str().expect("said why");
    assert!(why.contains("2024-04-04") && why.contains("2025-07-18") && why.contains("cuflight diff"), "{why}");
    assert!(r.get("job").is_none(), "no job view: {}", r["job"]);
    let kinds: Vec<&str> = r["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert!(!kinds.contains(&"straggler"), "{kinds:?}");
    // Each finding names its trace: both runs have a rank 0.
    for f in r["findings"].as_array().unwrap() {
        let t = f["trace"].as_str().unwrap_or_default();
        assert!(t == ddp.to_str().unwrap() || t == qwen.to_str().unwrap(), "{f}");
    }
    let qwen_rank = r["processes"].as_array().unwrap().iter().find(|p| p["pid"] == 25286).unwrap().get("rank");
    assert!(qwen_rank.is_none_or(Value::is_null), "no rank invented: {qwen_rank:?}");
    let text = Command::new(cuflight_bin()).arg("report").args([&ddp, &qwen]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("Separate runs: ")), "{text}");
    // Ranks that ran together are one job.
    let pair = json(&[&r0, &r1]);
    assert!(pair.get("separate_runs").is_none() && pair["job"]["ranks"].as_array().unwrap().len() == 2, "{pair}");
    // Three traces of two runs, as a directory gathers them: the runs are listed, and HTA's two ranks are
    // reported as the job they were, as when given alone: the same job view and the same findings, each naming
    // its trace; the V100 run beside them, alone.
    let r = json(&[&r0, &ddp, &r1]);
    let why = r["separate_runs"].as_str().expect("said why");
    let (r0_name, r1_name, ddp_name) = (r0.to_str().unwrap(), r1.to_str().unwrap(), ddp.to_str().unwrap());
    assert!(why.contains(&format!("The 3 traces are 2 runs: {r0_name}, {r1_name} at 2023-04-28")), "{why}");
    assert!(why.contains(&format!("; {ddp_name} at 2024-04-04")), "{why}");
    assert!(why.contains("a run of several traces as one job"), "{why}");
    assert!(r.get("job").is_none(), "{}", r["job"]);
    // Each run's verdict, in time order, as its traces alone have it.
    let verdicts = r["run_verdicts"].as_array().expect("each run's verdict");
    let runs: Vec<&Value> = verdicts.iter().map(|v| &v["run"]["traces"]).collect();
    assert_eq!(runs, [&serde_json::json!([r0_name, r1_name]), &serde_json::json!([ddp_name])], "{verdicts:?}");
    assert_eq!(verdicts[0]["verdict"], pair["verdict"], "{verdicts:?}");
    let jobs = r["run_jobs"].as_array().expect("the pair's job");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let mut job = jobs[0].clone();
    let run = job.as_object_mut().unwrap().remove("run").expect("which run");
    assert_eq!(run["traces"], serde_json::json!([r0_name, r1_name]), "{run}");
    assert_eq!(job, pair["job"], "the job view as when the pair is given alone");
    let of = |r: &Value, pid: u64| -> Vec<(String, u64)> {
        let fs = r["findings"].as_array().unwrap().iter().filter(|f| f["pid"] == pid);
        fs.map(|f| (f["kind"].as_str().unwrap().to_string(), f["time_lost_ns"].as_u64().unwrap())).collect()
    };
    for pid in [4037, 4045] {
        assert_eq!(of(&r, pid), of(&pair, pid), "pid {pid}");
    }
    assert!(of(&r, 4045).iter().any(|f| f.0 == "straggler"), "{:?}", of(&r, 4045));
    for f in r["findings"].as_array().unwrap() {
        assert!([r0_name, r1_name, ddp_name].contains(&f["trace"].as_str().unwrap_or_default()), "{f}");
    }
    let files: Vec<&str> = r["processes"].as_array().unwrap().iter().map(|p| p["file"].as_str().unwrap()).collect();
    assert_eq!(files, [r0_name, r1_name, ddp_name], "run by run");
    let text = Command::new(cuflight_bin()).arg("report").args([&r0, &ddp, &r1]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("== The job (the run of {r0_name} and {r1_name} at 2023-04-28")), "{text}");
    assert!(text.contains(&format!("\n  - the run of {ddp_name} at 2024-04-04")), "{text}");
    // The commands that put traces on one clock say so too, and leave separate runs' hosts unaligned.
    let dir = scratch("separate-runs");
    let merged = dir.join("m.cuf");
    for args in [&["stats"][..], &["merge", "-o", merged.to_str().unwrap()][..]] {
        let out = Command::new(cuflight_bin()).args(args).args([&ddp, &qwen]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.contains("470 days apart"), "{args:?}: {err}");
        assert!(err.contains("keeps its REALTIME clock"), "{args:?}: {err}");
        let out = Command::new(cuflight_bin()).args(args).arg("--force").args([&r0, &r1]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !err.contains("warning"), "{args:?}: {err}");
    }
}
