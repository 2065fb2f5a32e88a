//! A job's ranks in one session: every rank's process named by the launcher's RANK, LOCAL_RANK, WORLD_SIZE and
//! its host, and `-o run.%h.%r.cuf` writing one trace per rank (as nsys's `%q{RANK}`), each holding only its
//! rank's process. One machine plays two hosts through CUDASIM_HOST.

use cuflight_integration::*;
use std::process::Command;

fn record_ranks(dir: &std::path::Path, output: &str, ranks: u32) -> std::process::Output {
    let prog = build_c("smoke", dir);
    // A launcher as torchrun starts its workers: one process per rank, two ranks per host.
    let workers: Vec<String> = (0..ranks)
        .map(|r| {
            format!("RANK={r} LOCAL_RANK={} WORLD_SIZE={ranks} CUDASIM_HOST=node{} {} &", r % 2, r / 2, prog.display())
        })
        .collect();
    Command::new(cuflight_bin())
        .current_dir(dir)
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .args(["record", "-o", output, "sh", "-c"])
        .arg(format!("{} wait", workers.join(" ")))
        .output()
        .unwrap()
}

/// `cuflight record -o run.%h.%r.cuf sh -c SCRIPT` in `dir` (one file per host and rank); its output, checked.
fn record_per_host(dir: &std::path::Path, script: &str) -> std::process::Output {
    let recorded = Command::new(cuflight_bin())
        .current_dir(dir)
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .args(["record", "-o", "run.%h.%r.cuf", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(recorded.status.success(), "{}", String::from_utf8_lossy(&recorded.stderr));
    recorded
}

#[test]
fn one_file_per_rank_named_by_host_and_rank() {
    let _serial = serial();
    let dir = scratch("ranks-files");
    let out = record_ranks(&dir, "run.%h.%r.cuf", 4);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("wrote 4 files (run.node0.0.cuf, run.node0.1.cuf, run.node1.2.cuf, run.node1.3.cuf)"),
        "{err}"
    );
    for r in 0..4u64 {
        let file = dir.join(format!("run.node{}.{r}.cuf", r / 2));
        let s = stats(&file);
        let procs = s["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 1, "{}: only its rank's process", file.display());
        let p = &procs[0];
        assert_eq!(
            (p["rank"].as_u64(), p["local_rank"].as_u64(), p["world_size"].as_u64()),
            (Some(r), Some(r % 2), Some(4))
        );
        assert_eq!(p["host"], format!("node{}", r / 2));
        assert!(s["api"].as_array().unwrap().iter().any(|a| a["name"] == "cudaLaunchKernel"), "{s}");
    }
    // The same names again: refused without --force (the program still runs; the recording says why it stopped).
    let again = record_ranks(&dir, "run.%h.%r.cuf", 4);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && err.contains("exists; pass --force"), "{err}");
    assert!(stats(&dir.join("run.node0.0.cuf"))["processes"].as_array().unwrap().len() == 1, "the old file is intact");
    // A code the name does not know is refused before the program starts.
    let bad = record_ranks(&dir, "run.%q.cuf", 1);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("unknown code %q"), "{err}");
}

#[test]
fn ranks_in_one_file_are_named_rank_local_pid() {
    let _serial = serial();
    let dir = scratch("ranks-one");
    let out = record_ranks(&dir, "job.cuf", 2);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = dir.join("job.cuf");
    let text = Command::new(cuflight_bin()).args(["stats", "--report", "processes"]).arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("0 (local 0) of 2") && text.contains("1 (local 1) of 2"), "{text}");
    // The Perfetto timeline names each process "cmd (rank R (local L) pid P)".
    let pf = dir.join("job.pftrace");
    let (ok, err) = cuflight(&[std::ffi::OsStr::new("export"), trace.as_os_str(), "-o".as_ref(), pf.as_os_str()]);
    assert!(ok, "{err}");
    let bytes = std::fs::read(&pf).unwrap();
    let has = |s: &str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
    assert!(has("(rank 0 (local 0) pid ") && has("(rank 1 (local 1) pid "));
}

#[test]
fn two_hosts_with_skewed_clocks_are_aligned_on_their_collectives() {
    // Alone: a rank descheduled at a collective's end by the other tests here shifts what it measured (50 µs).
    let _serial = serial();
    // Two "hosts" on this machine (CUDASIM_HOST), hostb's wall clock 7.3 ms ahead (CUDASIM_CLOCK_OFFSET_NS: the
    // simulated process's CLOCK_REALTIME, as on a host whose NTP is off), each rank in its
    // own file. Their all-reduces end together (the kernels wait for each other): the export recovers the skew.
    let dir = scratch("ranks-skew");
    let prog = build_c("scenario", &dir);
    let barrier = dir.join("barrier");
    let skew: i64 = 7_300_000;
    let (p, b) = (prog.display(), barrier.display());
    let script = format!(
        "RANK=0 CUDASIM_HOST=hosta {p} rank 16 0 2 {b} & \
         RANK=1 CUDASIM_HOST=hostb CUDASIM_CLOCK_OFFSET_NS={skew} {p} rank 16 1 2 {b}; wait"
    );
    let recorded = record_per_host(&dir, &script);
    let (a, bfile) = (dir.join("run.hosta.0.cuf"), dir.join("run.hostb.1.cuf"));
    let tables = dir.join("job");
    let (ok, err) = cuflight(&[
        "export".as_ref(),
        a.as_os_str(),
        bfile.as_os_str(),
        "--format".as_ref(),
        "parquet".as_ref(),
        "-o".as_ref(),
        tables.as_os_str(),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("host hostb shifted by"), "{err}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tables.join("cuflight-parquet.json")).unwrap()).unwrap();
    let hosts = manifest["hosts"].as_array().unwrap();
    assert_eq!(hosts[0]["host"], "hosta");
    let h = &hosts[1];
    assert_eq!(h["host"], "hostb");
    assert!(h["matched"].as_u64().unwrap() >= 16, "{h}");
    let shift = h["shift_ns"].as_i64().unwrap();
    // Within 50 µs, as the issue asks (about 1 µs measured, with the cores loaded too: the all-reduce's end is
    // the simulated GPU's, cudasim_kernel_ends_at, not when a loaded host schedules the rank's thread again).
    let allowed = 50_000;
    assert!((shift + skew).abs() <= allowed, "recovered {shift} ns for a skew of {skew} ns: {h}");
    assert!(h["residual_ns"].as_i64().unwrap() <= allowed, "{h}");
    // `merge` writes them as one trace on that clock: its collectives already agree (a second alignment finds
    // nothing left to shift), and the report finds rank 1, the planted straggler.
    let job = dir.join("job.cuf");
    let (ok, err) = cuflight(&["merge".as_ref(), a.as_os_str(), bfile.as_os_str(), "-o".as_ref(), job.as_os_str()]);
    assert!(ok && err.contains("2 processes"), "{err}");
    let again = dir.join("again");
    let (ok, err) = cuflight(&[
        "export".as_ref(),
        job.as_os_str(),
        "--format".as_ref(),
        "parquet".as_ref(),
        "-o".as_ref(),
        again.as_os_str(),
    ]);
    assert!(ok, "{err}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(again.join("cuflight-parquet.json")).unwrap()).unwrap();
    let left = manifest["hosts"][1]["shift_ns"].as_i64().unwrap();
    assert!(left.abs() <= 5_000, "the merged trace is {left} ns off: {manifest}");
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(&job).output().unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((r["findings"][0]["kind"].as_str(), r["findings"][0]["rank"].as_u64()), (Some("straggler"), Some(1)));
    // `report` on the two files aligns them itself and compares arrivals on the aligned clock: rank 1 joins
    // the all-reduces as late as it measured itself at their barrier (within 10%), and rank 0 waits for it.
    let text = String::from_utf8_lossy(&recorded.stdout);
    let line = text.lines().find_map(|l| l.strip_prefix("lateness_ns[1]=")).expect("rank 1's own lateness");
    let lag: f64 = line.parse().unwrap();
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(&a).arg(&bfile).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = &r["job"];
    assert_eq!((job["clocks"]["basis"].as_str(), job["method"].as_str()), (Some("aligned"), Some("arrival")), "{job}");
    let shift = job["clocks"]["hosts"][1]["shift_ns"].as_i64().unwrap();
    assert!((shift + skew).abs() <= allowed, "{job}");
    let f = &r["findings"][0];
    assert_eq!((f["kind"].as_str(), f["rank"].as_u64()), (Some("straggler"), Some(1)), "{}", r["findings"]);
    let measured = job["ranks"][1]["median_lateness_ns"].as_f64().unwrap();
    assert!((measured - lag).abs() <= 0.1 * lag, "rank 1 joined {measured} ns late, it measured {lag} ns: {job}");
    assert!(job["ranks"][0]["waited_for"][0][0].as_str().unwrap().starts_with("rank 1 "), "{job}");
    assert!(job["critical_path"]["duration_ns"].as_u64().unwrap() > 0, "{job}");
}

/// A small rank's trace, as a recording writes one: its process, strings, a ProfilerStep range per step and
/// `kernels` kernels of one name, each launched by a call.
fn write_rank(path: &std::path::Path, rank: u32, steps: u64, kernels: u64) {
    use cuflight_format::event::{LaunchConfig, API_RUNTIME};
    use cuflight_format::file::{Footer, ProcessInfo, TraceWriter};
    use cuflight_format::{EventKind, RawEvent};
    let mut w = TraceWriter::new(std::io::BufWriter::new(std::fs::File::create(path).unwrap())).unwrap();
    let pid = 1000 + rank % 7; // pids repeat across hosts
    let info = ProcessInfo {
        pid,
        cmdline: vec!["train.py".into()],
        host: format!("node{}", rank / 8),
        rank: Some(rank),
        finished: true,
        device_clock_monotonic: true,
        ..Default::default()
    };
    w.write_process(&info).unwrap();
    let mut region = cuflight_format::strings::StringRegion::default();
    let launch = region.intern("cudaLaunchKernel");
    let gemm = region.intern("_Z4gemmPfS_i"); // mangled: readers show gemm(float*, float*, int)
    let names: Vec<u32> = (0..steps).map(|s| region.intern(&format!("ProfilerStep#{s}"))).collect();
    w.write_strings(pid, 4, &region.bytes()[4..]).unwrap();
    let cfg = LaunchConfig { grid: [64, 1, 1], block: [128, 1, 1], ..Default::default() }.pack();
    let (mut t, mut corr, mut events) = (1_000_000u64, 0u32, Vec::new());
    for &name in &names {
        events.push(RawEvent { name, ..RawEvent::new(EventKind::NvtxPush, pid, t, t) });
        for _ in 0..kernels {
            corr += 1;
            let mut api = RawEvent::new(EventKind::Api, pid, t, t + 3_000);
            (api.sub, api.name, api.correlation) = (API_RUNTIME, launch, corr);
            let mut k = RawEvent::new(EventKind::Kernel, 0, t + 5_000, t + 25_000);
            (k.name, k.correlation, k.stream, (k.a, k.b, k.c)) = (gemm, corr, 7, cfg);
            events.extend([api, k]);
            t += 30_000;
        }
        events.push(RawEvent::new(EventKind::NvtxPop, pid, t, t));
        t += 10_000;
    }
    w.write_events(pid, &events).unwrap();
    w.finish(Footer { events: events.len() as u64, command: vec![], exit_code: Some(0) }).unwrap();
}

#[test]
fn a_thousand_ranks_merge_in_bounded_memory() {
    let _serial = serial();
    // 1000 per-rank files (125 hosts, pids repeating): one merged trace with every process under a key of its own
    // and every event, written a file at a time. Memory stays far below what holding the events would take.
    let dir = scratch("ranks-thousand");
    let (steps, kernels) = (4u64, 250u64);
    let files: Vec<std::path::PathBuf> = (0..1000)
        .map(|r| {
            let f = dir.join(format!("run.{r}.cuf"));
            write_rank(&f, r, steps, kernels);
            f
        })
        .collect();
    let merged = dir.join("job.cuf");
    let mut cmd = Command::new("python3");
    // The collector's peak memory, as the kernel counts it for a finished child.
    cmd.args(["-c", "import resource,subprocess,sys; r=subprocess.run(sys.argv[1:]); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"]);
    cmd.arg(cuflight_bin()).arg("merge").args(&files).arg("-o").arg(&merged);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let events_in = 1000 * steps * (2 + 2 * kernels);
    assert!(err.contains(&format!("1000 processes, {events_in} events from 1000 traces")), "{err}");
    let peak_kib: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let held_kib = events_in * 64 / 1024;
    eprintln!("merge of {events_in} events: peak {peak_kib} KiB (holding them: {held_kib} KiB)");
    assert!(peak_kib * 3 < held_kib, "peak {peak_kib} KiB; holding every event would take {held_kib} KiB");
    let s = stats(&merged);
    let procs = s["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1000);
    let kernel = &s["kernels"].as_array().unwrap()[0];
    assert_eq!(
        (kernel["name"].as_str(), kernel["count"].as_u64()),
        (Some("gemm(float*, float*, int)"), Some(1000 * steps * kernels))
    );
    assert_eq!(s["nvtx"].as_array().unwrap().iter().map(|n| n["count"].as_u64().unwrap()).sum::<u64>(), 1000 * steps);
    // The report of the merged job: a thousand processes swept in one pass, each with its launch ring sized by
    // the launches in flight (2 MiB each at full size made this 2.7 GB), and a terminal view that stays readable.
    let mut cmd = Command::new("python3");
    cmd.args(["-c", "import resource,subprocess,sys; r=subprocess.run(sys.argv[1:], stdout=subprocess.PIPE); sys.stderr.buffer.write(r.stdout); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"]);
    cmd.arg(cuflight_bin()).arg("report").arg(&merged);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let peak_kib: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    eprintln!("report of 1000 processes: peak {peak_kib} KiB, {} lines", text.lines().count());
    assert!(peak_kib < 600 * 1024, "report peak {peak_kib} KiB");
    assert!(
        text.contains("== The job: 1000 ranks") && text.contains("(16 of 1000 ranks"),
        "{}",
        &text[..2000.min(text.len())]
    );
    assert!(text.lines().count() < 1500, "{} lines", text.lines().count());
}

#[test]
fn dataloader_workers_of_every_start_method_are_attributed_to_their_rank() {
    let _serial = serial();
    // A rank's process (RANK=1 as torchrun sets it) with workers started by fork (before it touched CUDA),
    // spawn and forkserver, each doing CUDA work of its own (tests/py/loader_workers.py). The fork and
    // forkserver workers leave through os._exit, and were forked before the agent was live in their parent:
    // the agent knows them as workers by their parent's program and flushes them often enough.
    let dir = scratch("ranks-workers");
    let script = repo_root().join("tests/py/loader_workers.py");
    let env = [("RANK", "1"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "2")];
    let rec = record(&dir, &[], std::path::Path::new("python3"), &[script.to_str().unwrap()], &env);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let pids: serde_json::Value = serde_json::from_slice(&rec.output.stdout).unwrap();
    let pid = |k: &str| pids[k].as_u64().unwrap();
    let s = stats(&rec.trace);
    let procs = s["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 4, "{procs:?}");
    for p in procs {
        assert_eq!(
            (p["rank"].as_u64(), p["local_rank"].as_u64(), p["world_size"].as_u64()),
            (Some(1), Some(1), Some(2))
        );
    }
    let ppid = |k: &str| procs.iter().find(|p| p["pid"] == pid(k)).unwrap()["ppid"].as_u64().unwrap();
    assert_eq!((ppid("fork"), ppid("spawn")), (pid("main"), pid("main")));
    // A forkserver's workers are the server's children.
    assert_ne!(ppid("forkserver"), pid("main"));
    // The report names each "rank 1 (local 1) pid P", and the main process stands for the rank: the workers
    // are reported as its workers, with their own GPU work, and there is no second rank to compare.
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(&rec.trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.get("job").is_none(), "one rank: {}", r["job"]);
    let reported = r["processes"].as_array().unwrap();
    assert_eq!(reported.len(), 4);
    for p in reported {
        let me = p["pid"].as_u64().unwrap();
        assert_eq!(p["who"].as_str().unwrap(), format!("rank 1 (local 1) pid {me}"));
        assert!(p["breakdown"]["gpu_ops"].as_u64().unwrap() >= 8, "{me}: its memsets and copies: {p}");
        let expected = (me != pid("main")).then(|| pid("main"));
        assert_eq!(p["worker_of"].as_u64(), expected, "{p}");
    }
}

#[test]
fn ranks_come_from_every_launchers_environment() {
    let _serial = serial();
    // What torchrun (and deepspeed, accelerate), Open MPI's mpirun, MPICH/Intel MPI (PMI) and Slurm's srun put
    // in each rank's environment; the first set wins where several are present (srun running torchrun).
    let dir = scratch("ranks-launchers");
    let prog = build_c("smoke", &dir);
    let launchers: [(&str, [(&str, &str); 3]); 4] = [
        ("torchrun", [("RANK", "5"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "8")]),
        ("mpirun", [("OMPI_COMM_WORLD_RANK", "5"), ("OMPI_COMM_WORLD_LOCAL_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "8")]),
        ("mpich", [("PMI_RANK", "5"), ("MPI_LOCALRANKID", "1"), ("PMI_SIZE", "8")]),
        ("srun", [("SLURM_PROCID", "5"), ("SLURM_LOCALID", "1"), ("SLURM_NTASKS", "8")]),
    ];
    for (launcher, env) in launchers {
        let rec = record(&dir, &[], &prog, &[], &env);
        assert!(rec.output.status.success(), "{launcher}: {}", rec.stderr());
        let s = stats(&rec.trace);
        let p = &s["processes"][0];
        assert_eq!(
            (p["rank"].as_u64(), p["local_rank"].as_u64(), p["world_size"].as_u64()),
            (Some(5), Some(1), Some(8)),
            "{launcher}: {p}"
        );
    }
    // srun starting torchrun: SLURM_PROCID is the node's index, RANK the worker's.
    let env = [("SLURM_PROCID", "1"), ("SLURM_LOCALID", "0"), ("RANK", "9"), ("LOCAL_RANK", "1")];
    let rec = record(&dir, &[], &prog, &[], &env);
    let s = stats(&rec.trace);
    assert_eq!((s["processes"][0]["rank"].as_u64(), s["processes"][0]["local_rank"].as_u64()), (Some(9), Some(1)));
}

#[test]
fn a_host_whose_clock_drifts_is_followed_through_the_run() {
    let _serial = serial();
    // hostb's clock is 7.3 ms ahead and gains 2000 ppm (CUDASIM_CLOCK_DRIFT_PPM): about 3 ms more over the
    // 100 steps. One shift for the whole run would leave a residual of about a quarter of that, and misplace
    // arrivals by as much; the alignment follows it (a knot per 16 matched collectives).
    let dir = scratch("ranks-drift");
    let prog = build_c("scenario", &dir);
    let (p, b) = (prog.display(), dir.join("barrier").display().to_string());
    let script = format!(
        "RANK=0 CUDASIM_HOST=hosta {p} rank 100 0 2 {b} & RANK=1 CUDASIM_HOST=hostb \
         CUDASIM_CLOCK_OFFSET_NS=7300000 CUDASIM_CLOCK_DRIFT_PPM=2000 {p} rank 100 1 2 {b}; wait"
    );
    let recorded = record_per_host(&dir, &script);
    let text = String::from_utf8_lossy(&recorded.stdout);
    let truth: f64 = text.lines().find_map(|l| l.strip_prefix("lateness_ns[1]=")).unwrap().parse().unwrap();
    let (a, bfile) = (dir.join("run.hosta.0.cuf"), dir.join("run.hostb.1.cuf"));
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(&a).arg(&bfile).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let h = &r["job"]["clocks"]["hosts"][1];
    assert_eq!(h["host"], "hostb");
    assert!(h["knots"].as_array().unwrap().len() >= 4, "{h}");
    // The knots' shifts follow the drift: 2000 ppm of the time between the first knot and the last (about 3 ms
    // over a 1.3 s run; a run slowed by a busy machine drifts further).
    let at = |k: &serde_json::Value| (k[0].as_i64().unwrap(), k[1].as_i64().unwrap());
    let (first, last) = (at(&h["knots"][0]), at(h["knots"].as_array().unwrap().last().unwrap()));
    let spread = first.1 - last.1;
    let drifted = (last.0 - first.0) as f64 * 2000e-6;
    assert!((spread as f64 - drifted).abs() <= 0.1 * drifted, "{spread} ns of shift, {drifted} ns of drift: {h}");
    // Followed, the residual is about 1 µs (the collectives end together on the simulated GPUs); one shift for
    // the run would leave about a quarter of the drift, some 700 µs.
    let residual = h["residual_ns"].as_i64().unwrap();
    assert!(residual <= 25_000, "residual {residual} ns for a drift of {spread} ns: {h}");
    let measured = r["job"]["ranks"][1]["median_lateness_ns"].as_f64().unwrap();
    assert!((measured - truth).abs() <= 0.1 * truth, "rank 1 joined {measured} ns late, it measured {truth}: {h}");
    // merge applies the same: aligning the merged trace again finds nothing left to shift, at any time.
    let job = dir.join("job.cuf");
    let (ok, err) = cuflight(&["merge".as_ref(), a.as_os_str(), bfile.as_os_str(), "-o".as_ref(), job.as_os_str()]);
    assert!(ok, "{err}");
    let out = Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(&job).output().unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let left = &r["job"]["clocks"]["hosts"][1];
    let mut knots: Vec<i64> = left["knots"].as_array().unwrap().iter().map(|k| k[1].as_i64().unwrap().abs()).collect();
    knots.sort_unstable();
    assert!(knots[knots.len() / 2] <= 25_000, "{left}");
    // Every stretch: a knot is the median of 16 ends, which follow the drift between knots within tens of µs.
    assert!(knots.iter().all(|&k| k <= 100_000), "{left}");
    // A timeline of both files is on that clock too: each all-reduce ends at the same time on both ranks.
    let json = dir.join("job.json");
    let (ok, err) = cuflight(&[
        "export".as_ref(),
        a.as_os_str(),
        bfile.as_os_str(),
        "--format".as_ref(),
        "chrome".as_ref(),
        "-o".as_ref(),
        json.as_os_str(),
    ]);
    assert!(ok && err.contains("host hostb shifted by"), "{err}");
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut ends: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for e in t["traceEvents"].as_array().unwrap() {
        if e["cat"] == "kernel" && e["name"].as_str().is_some_and(|n| n.starts_with("ncclDevKernel")) {
            let end = e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
            // Each rank's GPU 0 is a "process" of its own (pid above any OS pid).
            ends.entry(e["pid"].as_u64().unwrap()).or_default().push(end);
        }
    }
    let ranks: Vec<&Vec<f64>> = ends.values().collect();
    assert_eq!(ranks.len(), 2, "{:?}", ends.keys());
    let mut gaps: Vec<f64> = ranks[0].iter().zip(ranks[1]).map(|(x, y)| (x - y).abs()).collect();
    gaps.sort_by(f64::total_cmp);
    // The export applies the alignment the report found (unshifted, the ends would be about 8 ms apart).
    assert!(
        gaps[gaps.len() / 2] <= 25.0,
        "all-reduce ends {} µs apart (median), residual {residual} ns",
        gaps[gaps.len() / 2]
    );
}

#[test]
fn a_trace_named_twice_is_refused_and_equal_names_keep_apart() {
    let _serial = serial();
    // `report run.*.cuf run.0.cuf` would count rank 0 twice (merged, as two ranks): every command that takes a
    // job's traces refuses a file named twice, under another spelling or through a hard link, and writes nothing.
    let dir = scratch("ranks-twice");
    let (a, b) = (dir.join("run.0.cuf"), dir.join("run.1.cuf"));
    write_rank(&a, 0, 2, 3);
    write_rank(&b, 1, 2, 3);
    let again = dir.join(".").join("run.0.cuf");
    let linked = dir.join("alias.cuf");
    std::fs::hard_link(&a, &linked).unwrap();
    let out = dir.join("out");
    for twice in [&again, &linked] {
        for cmd in
            [&["merge", "-o"][..], &["report", "-o"], &["export", "-o"], &["export", "--format", "parquet", "-o"]]
        {
            let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(std::ffi::OsStr::new).collect();
            args.extend([out.as_os_str(), a.as_os_str(), b.as_os_str(), twice.as_os_str()]);
            let (ok, err) = cuflight(&args);
            assert!(!ok && err.contains("are the same file; name each trace once"), "{cmd:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(!out.exists(), "{cmd:?} wrote {}", out.display());
        }
    }
    // Two traces of one name from two directories (the same rank recorded twice, say) share a partition as two
    // part files, each named after its trace, the second numbered; DuckDB counts both.
    let other = dir.join("again");
    std::fs::create_dir_all(&other).unwrap();
    let a2 = other.join("run.0.cuf");
    write_rank(&a2, 0, 2, 3);
    let (ok, err) = cuflight(&[
        "export".as_ref(),
        a.as_os_str(),
        a2.as_os_str(),
        "--format".as_ref(),
        "parquet".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(ok, "{err}");
    let part = out.join("kernels/host=node0/rank=0");
    let mut files: Vec<String> =
        std::fs::read_dir(&part).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, ["run_0-2.parquet", "run_0.parquet"]);
    let q = python_json("parquet_check.py", &[out.as_os_str()]);
    assert_eq!(q["kernels_by_rank"], serde_json::json!({"0": 2 * 2 * 3}));
}

#[test]
fn a_report_of_more_ranks_than_the_soft_file_limit_raises_it_or_says_what_to_do() {
    let _serial = serial();
    // report keeps every trace open through its passes: with the soft limit on open files below their number
    // (1,024 is common), cuflight raises it to the hard limit; where the hard limit is too low, it refuses in
    // one line before opening any, and names the remedy.
    let dir = scratch("ranks-nofile");
    let files: Vec<String> = (0..100)
        .map(|r| {
            let f = dir.join(format!("run.{r}.cuf"));
            write_rank(&f, r, 2, 3);
            f.display().to_string()
        })
        .collect();
    let report = |limit: &str| {
        let script =
            format!("ulimit {limit} 64 && exec {} report --format json {}", cuflight_bin().display(), files.join(" "));
        Command::new("sh").args(["-c", &script]).output().unwrap()
    };
    let out = report("-Sn");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["job"]["ranks"].as_array().unwrap().len(), 100);
    let out = report("-n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("100 traces are read at once") && err.contains("cuflight merge"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // Only report raises it: a program under `record` keeps the limit it was given, as it would without cuflight.
    let trace = dir.join("limit.cuf");
    let script = format!(
        "ulimit -Sn 300 && exec {} record -o {} -- sh -c 'echo soft=$(ulimit -Sn)'",
        cuflight_bin().display(),
        trace.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "soft=300", "{}", String::from_utf8_lossy(&out.stderr));
}
