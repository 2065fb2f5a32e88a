//! `--trace` (record and launch), on cudasim (the CPU test double for the driver, runtime and CUPTI): what the
//! agent subscribes to is what the user asked for, and by default the runtime calls that only read state are
//! neither dispatched to the agent nor recorded.

use cuflight_integration::*;
use std::process::Command;

const INPUT: &str = "c 1000\nE 40\nk 5\nt 2 1\np\nP\n";

/// The error queries `E 40` makes: the runtime dispatches them to CUPTI as it does every call (cudasim models
/// this; they are what PyTorch calls after each kernel), so they are recorded exactly when asked for.
const ERROR_QUERIES: [&str; 3] = ["cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString"];

#[test]
fn by_default_calls_that_only_read_state_are_not_recorded() {
    let dir = scratch("tracing-default");
    let (s, _) = record_server_cmd(&dir, &[], INPUT);
    assert_eq!(count(&s, "api", "name", "cudaGetDevice"), 0, "{}", s["api"]);
    for query in ERROR_QUERIES {
        assert_eq!(count(&s, "api", "name", query), 0, "{query}: {}", s["api"]);
    }
    // Everything the analyses use is there: launches, waits, the profiler range, NVTX.
    assert_eq!(count(&s, "kernels", "name", "tick"), 8);
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 8);
    assert!(count(&s, "api", "name", "cudaDeviceSynchronize") >= 3, "{}", s["api"]);
    assert_eq!(count(&s, "api", "name", "cudaProfilerStart"), 1);
    assert_eq!(count(&s, "nvtx", "name", "step"), 2);
    assert_eq!(s["processes"][0]["traced"], "cuda,nvtx,memory,overhead,python");
}

#[test]
fn queries_and_nvtx_are_traced_as_asked() {
    let dir = scratch("tracing-asked");
    let (s, _) = record_server_cmd(&dir, &["--trace", "cuda,queries,nvtx"], INPUT);
    assert!(count(&s, "api", "name", "cudaGetDevice") >= 1000, "{}", s["api"]);
    for query in ERROR_QUERIES {
        assert_eq!(count(&s, "api", "name", query), 40, "{query}: {}", s["api"]);
    }
    assert_eq!(count(&s, "nvtx", "name", "step"), 2);
    assert_eq!(s["processes"][0]["traced"], "cuda,queries,nvtx");

    // Without nvtx: no ranges, and the tables say NVTX was not recorded rather than showing none.
    let (s, _) = record_server_cmd(&dir, &["-t", "cuda"], INPUT);
    assert_eq!(count(&s, "nvtx", "name", "step"), 0);
    assert_eq!(count(&s, "kernels", "name", "tick"), 8);
    assert!(s["not_recorded"].as_array().unwrap().iter().any(|r| r["kind"] == "nvtx"), "{}", s["not_recorded"]);
}

#[test]
fn a_list_without_cuda_or_with_an_unknown_name_is_refused_in_one_line() {
    for list in ["nvtx", "cuda,osrt"] {
        let out = Command::new(cuflight_bin()).args(["record", "--trace", list, "--", "true"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--trace") && !err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_launched_agent_traces_what_launch_asked_for_in_every_window() {
    let dir = scratch("tracing-launch");
    let mut server = Server::start(&dir, &["--trace", "cuda,queries"], &[("CUFLIGHT_TRACE", "")]);
    let pid = server.pid();
    let trace = dir.join("w.cuf");
    let window = spawn_attach(pid, &trace, &["--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording");
    assert!(server.cmd("c 100").starts_with("ns "));
    assert_eq!(server.cmd("t 2 1"), "done");
    end_attach_window(window);
    let s = stats(&trace);
    assert!(count(&s, "api", "name", "cudaGetDevice") >= 100, "{}", s["api"]);
    assert_eq!(count(&s, "nvtx", "name", "step"), 0, "launched without nvtx");
    let (status, _) = server.end();
    assert!(status.success());
}

#[test]
fn an_attached_window_traces_what_attach_asks_and_the_next_what_launch_chose() {
    let dir = scratch("tracing-attach");
    let mut server = Server::start(&dir, &[], &[("CUFLIGHT_TRACE", "")]);
    let pid = server.pid();
    let window = |name: &str, args: &[&str], server: &mut Server| {
        let trace = dir.join(name);
        let mut all = vec!["--duration", "60s"];
        all.extend_from_slice(args);
        let child = spawn_attach(pid, &trace, &all, &[]);
        wait_for_agent_state(pid, "recording");
        assert!(server.cmd("c 100").starts_with("ns "));
        assert_eq!(server.cmd("t 2 1"), "done");
        end_attach_window(child);
        wait_for_agent_state(pid, "dormant");
        stats(&trace)
    };
    // Queries added and NVTX left out, for this window only.
    let s = window("asked.cuf", &["--trace", "cuda,queries"], &mut server);
    assert!(count(&s, "api", "name", "cudaGetDevice") >= 100, "{}", s["api"]);
    assert_eq!(count(&s, "nvtx", "name", "step"), 0, "{}", s["nvtx"]);
    assert_eq!(s["processes"][0]["traced"], "cuda,queries");
    assert!(s["not_recorded"].as_array().unwrap().iter().any(|r| r["kind"] == "nvtx"), "{}", s["not_recorded"]);
    // The next window, without --trace, is the launch's default again.
    let s = window("default.cuf", &[], &mut server);
    assert_eq!(count(&s, "api", "name", "cudaGetDevice"), 0, "{}", s["api"]);
    assert_eq!(count(&s, "nvtx", "name", "step"), 2, "{}", s["nvtx"]);
    assert_eq!(s["processes"][0]["traced"], "cuda,nvtx,memory,overhead,python");
    let (status, _) = server.end();
    assert!(status.success());
}

/// The measurement aid behind the agent's own cost in one process (`cuflight_bench_skip_callbacks`, used by
/// tests/c/overhead.c's ab mode): found by the program in the library CUDA loaded, it skips the calls made while
/// it is on (half the batches) and nothing else: every kernel is still recorded.
#[test]
fn the_callback_switch_for_benchmarks_skips_only_the_calls_made_while_it_is_on() {
    let dir = scratch("tracing-bench-skip");
    let prog = build_c("overhead", &dir);
    let rec = record(&dir, &[], &prog, &["4000", "ab", "launch"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let out = String::from_utf8_lossy(&rec.output.stdout);
    assert!(out.contains("agent_own_launch_ns "), "{out}");
    let s = stats(&rec.trace);
    // 400 launches (4000 / 10) in 40 blocks, the agent skipped in 20 of them.
    let kernels: u64 = s["kernels"].as_array().unwrap().iter().map(|k| k["count"].as_u64().unwrap()).sum();
    assert_eq!(kernels, 400, "{}", s["kernels"]);
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 200, "{}", s["api"]);
    // Without an agent the program says so and fails.
    let plain = Command::new(&prog).args(["10", "ab"]).env("LD_LIBRARY_PATH", cudasim_dir()).output().unwrap();
    assert_eq!(plain.status.code(), Some(23));
    assert!(String::from_utf8_lossy(&plain.stderr).contains("no cuflight agent"));
}

/// `--trace ...,hes`: hardware kernel timestamps where CUPTI takes them, the usual path elsewhere, and said.
/// cudasim models `cuptiActivityEnableHWTrace` from the headers: a Blackwell (`CUDASIM_GPU=b200`) takes it
/// before the program's context exists; an H100, or a CUDA before 12.8, refuses it; an attach comes too late.
#[test]
fn hardware_kernel_timestamps_are_used_where_cupti_takes_them() {
    let dir = scratch("tracing-hes");
    let prog = build_c("categories", &dir);
    let flags = ["--trace", "cuda,nvtx,hes"];
    let b200 = record(&dir, &flags, &prog, &[], &[("CUDASIM_GPU", "b200")]);
    assert!(b200.output.status.success(), "{}", b200.stderr());
    assert!(!b200.stderr().contains("did not take"), "{}", b200.stderr());
    let s = stats(&b200.trace);
    assert_eq!(s["processes"][0]["traced"], "cuda,nvtx,hes");
    assert_eq!(count(&s, "kernels", "name", "flash_fwd_kernel"), 5, "{}", s["kernels"]);
    assert!(s["devices"].to_string().contains("B200"), "{}", s["devices"]);
    for (why, env) in
        [("an H100", vec![]), ("CUDA 12.6", vec![("CUDASIM_GPU", "b200"), ("CUDASIM_CUPTI_VERSION", "12.6")])]
    {
        let r = record(&dir, &flags, &prog, &[], &env);
        assert!(r.output.status.success(), "{why}: {}", r.stderr());
        assert!(r.stderr().contains("did not take hardware kernel timestamps"), "{why}: {}", r.stderr());
        let s = stats(&r.trace);
        assert_eq!(s["processes"][0]["traced"], "cuda,nvtx", "{why}");
        assert_eq!(count(&s, "kernels", "name", "flash_fwd_kernel"), 5, "{why}: recorded the usual way");
    }
    // An attach to a program launched asking for it: its context exists, so the window times kernels as usual.
    let mut server = Server::start(&dir, &flags, &[("CUDASIM_GPU", "b200"), ("CUFLIGHT_TRACE", "")]);
    let pid = server.pid();
    let trace = dir.join("attached.cuf");
    let window = spawn_attach(pid, &trace, &["--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording");
    assert_eq!(server.cmd("t 2 1"), "done");
    end_attach_window(window);
    let s = stats(&trace);
    assert_eq!(s["processes"][0]["traced"], "cuda,nvtx");
    assert_eq!(count(&s, "kernels", "name", "tick"), 2, "{}", s["kernels"]);
    let (status, _) = server.end();
    assert!(status.success());
}

/// `record` says what CUPTI's tracing of kernels launched one by one added to the program's launch calls (1.0 us
/// each, the H200's figure), once that reaches 10 ms in all, and counts exactly the kernels the trace holds.
#[test]
fn record_says_what_tracing_eager_launches_cost_once_it_matters() {
    let dir = scratch("tracing-eager-cost");
    let prog = build_c("streams", &dir);
    let r = record(&dir, &[], &prog, &["1300"], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    let kernels: u64 = s["kernels"].as_array().unwrap().iter().map(|k| k["count"].as_u64().unwrap()).sum();
    assert!(kernels >= 10_000, "{kernels}");
    let said = format!(
        "CUPTI traced {kernels} kernel launches, lengthening the launching threads' calls by about {:.1} ms in all \
         (1.0 us a launch",
        kernels as f64 / 1e3
    );
    assert!(r.stderr().contains(&said), "{said}\n{}", r.stderr());
    // A few thousand launches cost a few ms: not worth a line.
    let r = record(&dir, &[], &prog, &["300"], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    assert!(!r.stderr().contains("kernel launches, lengthening"), "{}", r.stderr());
}

/// Where [`record_on`] writes its trace.
fn trace_file(dir: &std::path::Path, release: &str, trace: Option<&str>) -> std::path::PathBuf {
    dir.join(format!("{release}-{}.cuf", trace.unwrap_or("default").replace(',', "-")))
}

/// `cuflight record [--trace LIST] -- server cmd` on cudasim modelling CUPTI `release`, fed `input`: the trace's
/// stats, what the server answered, and cuflight's stderr.
fn record_on(
    dir: &std::path::Path,
    release: &str,
    trace: Option<&str>,
    input: &str,
) -> (serde_json::Value, String, String) {
    use std::io::Write;
    let prog = build_c("server", dir);
    let out_file = trace_file(dir, release, trace);
    let mut cmd = Command::new(cuflight_bin());
    cmd.args(["record", "--force", "-o"]).arg(&out_file);
    if let Some(list) = trace {
        cmd.args(["--trace", list]);
    }
    let mut child = cmd
        .arg("--")
        .arg(&prog)
        .arg("cmd")
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .env("CUDASIM_CUPTI_VERSION", release)
        .env_remove("CUFLIGHT_TRACE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{release}: {stderr}");
    (stats(&out_file), stdout.into_owned(), stderr.into_owned())
}

#[test]
fn cupti_is_handed_zeroed_buffers_and_told_so() {
    // By default CUPTI zeroes every activity buffer it is given on the thread that asked for it (the program's,
    // on CUDA 13); the agent's buffers come zeroed instead, recycled ones too, and CUPTI is told so: through the
    // per-subscriber call (13.5) and the global one (12.9). 30,000 kernels fill more buffers than the pool holds,
    // so completed buffers are handed out again.
    let dir = scratch("tracing-zeroed");
    for release in ["13.5", "12.9"] {
        let (s, stdout, stderr) = record_on(&dir, release, None, "k 30000\nz\n");
        assert!(stdout.contains("zeroed 1 dirty 0 api 0"), "{release}: {stdout}\n{stderr}");
        assert_eq!(count(&s, "kernels", "name", "tick"), 30001, "{release}: every record read (and the warm-up)");
    }
}

/// The threads the Chrome export shows API calls on, and its launch-to-kernel flow events.
fn timeline(dir: &std::path::Path, trace: &std::path::Path) -> (Vec<u64>, usize) {
    let file = dir.join("timeline.json");
    let out = Command::new(cuflight_bin()).args(["export", "--force", "-o"]).arg(&file).arg(trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut threads: Vec<u64> = events
        .iter()
        .filter(|e| e["cat"] == "cuda_runtime" || e["cat"] == "cuda_driver")
        .filter_map(|e| e["tid"].as_u64())
        .collect();
    threads.dedup();
    (threads, events.iter().filter(|e| e["cat"] == "ac2g").count())
}

/// Launches, a driver launch, waits, NVTX steps, error queries, graph replays and the profiler range.
const CALLS: &str = "k 5\nt 2 3\nD\nE 3\nR 4\np\nP\n";

/// Each API table row as (name, calls).
fn api_rows(s: &serde_json::Value) -> Vec<(String, u64)> {
    let mut rows: Vec<(String, u64)> = s["api"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), r["count"].as_u64().unwrap()))
        .collect();
    rows.sort();
    rows
}

#[test]
fn calls_from_cupti_records_are_the_calls_callbacks_record() {
    // `api-records`: the same calls, on the threads that made them and joined to the same kernels, without a
    // callback into the agent; through the per-subscriber entry points (13.5) and the global ones (12.9). CUPTI
    // 12.4 has no per-call records: callbacks record, and the trace says which it was.
    let dir = scratch("tracing-api-records");
    for release in ["13.5", "12.9"] {
        let (by_callbacks, _, _) = record_on(&dir, release, Some("cuda,nvtx,memory,overhead"), CALLS);
        let (by_records, _, err) = record_on(&dir, release, Some("cuda,nvtx,memory,overhead,api-records"), CALLS);
        assert_eq!(by_records["processes"][0]["traced"], "cuda,nvtx,memory,overhead,api-records", "{release}: {err}");
        assert_eq!(api_rows(&by_records), api_rows(&by_callbacks), "{release}");
        assert_eq!(count(&by_records, "api", "name", "cuLaunchKernel"), 1, "{release}: the program's own driver call");
        assert_eq!(count(&by_records, "api", "name", "cudaGetLastError"), 0, "{release}: queries stay out");
        assert_eq!(count(&by_records, "kernels", "name", "tick"), count(&by_callbacks, "kernels", "name", "tick"));
        // On the program's thread (the server makes every call on its main thread, whose id is its pid), each
        // launch joined to its kernel as with callbacks.
        let pid = by_records["processes"][0]["pid"].as_u64().unwrap();
        let (threads, flows) =
            timeline(&dir, &trace_file(&dir, release, Some("cuda,nvtx,memory,overhead,api-records")));
        assert_eq!(threads, vec![pid], "{release}");
        let (_, flows_by_callbacks) = timeline(&dir, &trace_file(&dir, release, Some("cuda,nvtx,memory,overhead")));
        assert_eq!(flows, flows_by_callbacks, "{release}");
    }
    let (s, _, err) = record_on(&dir, "12.4", Some("cuda,nvtx,api-records"), CALLS);
    assert_eq!(s["processes"][0]["traced"], "cuda,nvtx", "no per-call records before 12.5: callbacks");
    assert!(err.contains("recorded through callbacks, not CUPTI's API records"), "said: {err}");
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 14);
    // Python stacks are read in callbacks: asking for both is refused at once.
    let out = Command::new(cuflight_bin())
        .args(["record", "--trace", "cuda,python,api-records", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("leave python out"));
}

#[test]
fn api_records_end_with_their_window() {
    // Nothing of ours stays enabled between windows (Meta's wprof warns of a subscribed CUPTI still filling
    // buffers): the launches made between two windows reach neither. With CUPTI finalized after each window (the
    // default) and without (CUFLIGHT_FINALIZE=0, where only the agent's own disabling stops the records).
    // Through the per-subscriber calls (13.5) and the global ones (12.9), which outlive an unsubscribe.
    for (release, finalize) in [("13.5", "1"), ("13.5", "0"), ("12.9", "1"), ("12.9", "0")] {
        let dir = scratch(&format!("tracing-api-records-windows-{release}-{finalize}"));
        let mut server = Server::start(
            &dir,
            &["--trace", "cuda,nvtx,api-records"],
            &[("CUFLIGHT_TRACE", ""), ("CUFLIGHT_FINALIZE", finalize), ("CUDASIM_CUPTI_VERSION", release)],
        );
        let pid = server.pid();
        let mut window = |name: &str, kernels: u64| {
            let trace = dir.join(name);
            let child = spawn_attach(pid, &trace, &["--duration", "60s"], &[]);
            wait_for_agent_state(pid, "recording");
            assert_eq!(server.cmd(&format!("k {kernels}")), format!("done {kernels}"));
            end_attach_window(child);
            wait_for_agent_state(pid, "dormant");
            // CUPTI writes no API record between windows.
            let written = |server: &mut Server| server.cmd("z").rsplit(' ').next().unwrap().to_string();
            let before = written(&mut server);
            assert_eq!(server.cmd("k 7"), "done 7", "between windows");
            assert_eq!(written(&mut server), before, "{release} {finalize}: records between windows");
            stats(&trace)
        };
        for (name, kernels) in [("first.cuf", 3), ("second.cuf", 2)] {
            let s = window(name, kernels);
            assert_eq!(s["processes"][0]["traced"], "cuda,nvtx,api-records", "{release} {finalize} {name}");
            assert_eq!(
                count(&s, "api", "name", "cudaLaunchKernel"),
                kernels,
                "{release} {finalize} {name}: {}",
                s["api"]
            );
            assert_eq!(count(&s, "kernels", "name", "tick"), kernels, "{release} {finalize} {name}");
        }
        let (status, _) = server.end();
        assert!(status.success());
    }
}
