//! A job's ranks in one session: every rank's process named by the launcher's RANK, LOCAL_RANK, WORLD_SIZE and
//! its host, and `-o run.%h.%r.cuf` writing one trace per rank (as nsys's `%q{RANK}`), each holding only its
//! rank's process. One machine plays two hosts through CUFLIGHT_TEST_HOST.

use cuflight_integration::*;
use std::process::Command;

fn record_ranks(dir: &std::path::Path, output: &str, ranks: u32) -> std::process::Output {
    let prog = build_c("smoke", dir);
    // A launcher as torchrun starts its workers: one process per rank, two ranks per host.
    let workers: Vec<String> = (0..ranks)
        .map(|r| {
            format!(
                "RANK={r} LOCAL_RANK={} WORLD_SIZE={ranks} CUFLIGHT_TEST_HOST=node{} {} &",
                r % 2,
                r / 2,
                prog.display()
            )
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

#[test]
fn one_file_per_rank_named_by_host_and_rank() {
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
    // Two "hosts" on this machine (CUFLIGHT_TEST_HOST), hostb's clock 7.3 ms ahead (CUFLIGHT_TEST_CLOCK_OFFSET_NS,
    // on every host and device timestamp and on its REALTIME pairs, as a host whose NTP is off), each rank in its
    // own file. Their all-reduces end together (the kernels wait for each other): the export recovers the skew.
    let dir = scratch("ranks-skew");
    let prog = build_c("scenario", &dir);
    let barrier = dir.join("barrier");
    let skew: i64 = 7_300_000;
    let (p, b) = (prog.display(), barrier.display());
    let script = format!(
        "RANK=0 CUFLIGHT_TEST_HOST=hosta {p} rank 16 0 2 {b} & \
         RANK=1 CUFLIGHT_TEST_HOST=hostb CUFLIGHT_TEST_CLOCK_OFFSET_NS={skew} {p} rank 16 1 2 {b}; wait"
    );
    let out = Command::new(cuflight_bin())
        .current_dir(&dir)
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .args(["record", "-o", "run.%h.%r.cuf", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
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
    assert!((shift + skew).abs() <= 50_000, "recovered {shift} ns for a skew of {skew} ns: {h}");
    assert!(h["residual_ns"].as_u64().unwrap() <= 50_000, "{h}");
}
