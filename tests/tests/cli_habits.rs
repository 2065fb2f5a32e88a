//! The command line as nsys and perf users expect it: `record CMD ARGS` without `--`, a shell's exit status for a
//! command that cannot run, a plain word when nothing used CUDA or the agent was off, shell completions, and
//! `cuflight doctor` saying what a recording needs on the machine it runs on.

use cuflight_integration::*;
use std::process::Command;

fn cuflight(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(cuflight_bin());
    cmd.args(args).env("LD_LIBRARY_PATH", cudasim_dir()).env_remove("CUDASIM_CUPTI_VERSION");
    cmd.envs(env.iter().copied()).output().expect("cuflight runs")
}

#[test]
fn record_takes_the_command_without_a_double_dash() {
    let dir = scratch("cli-no-dashes");
    let prog = build_c("streams", &dir);
    let trace = dir.join("t.cuf");
    // The program's own `-o` is the program's: options end at the first word that is not one.
    let out =
        cuflight(&["record", "--force", "-o", trace.to_str().unwrap(), prog.to_str().unwrap(), "3", "-o", "x"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count(&stats(&trace), "kernels", "name", "saxpy"), 2 * 2 * 3);
}

#[test]
fn a_command_that_cannot_run_exits_as_a_shell_would_and_leaves_no_file() {
    let dir = scratch("cli-127");
    let trace = dir.join("t.cuf");
    let t = trace.to_str().unwrap();
    let out = cuflight(&["record", "-o", t, "no-such-program-anywhere"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(err.lines().count() == 1 && err.contains("cannot run 'no-such-program-anywhere'"), "{err}");
    assert!(!trace.exists());
    let plain = dir.join("plain.txt");
    std::fs::write(&plain, "not a program").unwrap();
    let out = cuflight(&["record", "-o", t, plain.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(126));
    let out = cuflight(&["launch", "no-such-program-anywhere"], &[]);
    assert_eq!(out.status.code(), Some(127));
}

#[test]
fn a_run_without_cuda_or_with_the_agent_off_is_said_plainly_and_not_blamed_on_the_program() {
    let dir = scratch("cli-no-cuda");
    let trace = dir.join("t.cuf");
    let t = trace.to_str().unwrap();
    let out = cuflight(&["record", "--force", "-o", t, "sh", "-c", "exit 3"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "the program's status");
    assert!(err.contains("no process of the program reached the collector: none used CUDA"), "{err}");
    let prog = build_c("streams", &dir);
    let off = [("CUDASIM_FAIL", "cuptiActivityRegisterCallbacks")];
    let out = cuflight(&["record", "--force", "-o", t, prog.to_str().unwrap(), "1"], &off);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("agent was off in every process"), "{err}");
    let report = cuflight(&["report", t], &[]);
    let err = String::from_utf8_lossy(&report.stderr);
    assert!(!report.status.success() && err.contains("the agent was off in process"), "{err}");
    assert!(err.contains("says nothing about the program") && err.lines().count() == 1, "{err}");
}

#[test]
fn shell_completions_are_generated_for_bash_zsh_and_fish() {
    for (shell, mark) in
        [("bash", "complete -F _cuflight"), ("zsh", "#compdef cuflight"), ("fish", "complete -c cuflight")]
    {
        let out = cuflight(&["completions", shell], &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains(mark), "{shell}");
        assert!(text.contains("attach") && text.contains("--capture-range"), "{shell}: every subcommand and option");
    }
}

/// nsys's habits before the program: `-t` selects tracing, an unknown option is an error naming it (exit 2, never
/// a program to run), `-d` records that long, `-y` waits first, `--stats` prints the tables at the end.
#[test]
fn options_before_the_program_are_cuflights_as_nsys_spells_them() {
    let dir = scratch("cli-nsys-options");
    let prog = build_c("scenario", &dir);
    let p = prog.to_str().unwrap();
    let trace = dir.join("t.cuf");
    let t = trace.to_str().unwrap();
    let out = cuflight(&["record", "-f", "-o", t, "-t", "cuda,nvtx", "--", p, "clean", "2"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let help = String::from_utf8(cuflight(&["record", "--help"], &[]).stdout).unwrap();
    for heading in ["Output:", "What to record:", "When to record:", "Tuning:", "-d, --duration", "-y, --delay"] {
        assert!(help.contains(heading), "record --help lacks {heading}");
    }
    for (sub, bad) in [("record", "--bogus"), ("record", "-q"), ("launch", "--no-such-option")] {
        let out = cuflight(&[sub, bad, p, "clean", "1"], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sub} {bad}: {err}");
        assert!(err.contains(&format!("unknown option '{bad}'")) && err.contains("Usage:"), "{err}");
    }
    // About 3 s of steps; one second of them is kept, from when recording was armed.
    let out = cuflight(&["record", "-f", "-o", t, "-d", "1s", "--", p, "clean", "300"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let span = |trace: &str| {
        let out = cuflight(&["report", "--format", "json", trace], &[]);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let run = &r["processes"][0]["run"];
        (run["trace_end_ns"].as_u64().unwrap() - run["trace_start_ns"].as_u64().unwrap()) as f64 / 1e9
    };
    let s = span(t);
    assert!((0.9..=1.1).contains(&s), "-d 1s kept {s} s");
    // Half a second, one second in; the tables follow the run.
    let out = cuflight(&["record", "-f", "-o", t, "-y", "1s", "-d", "500ms", "--stats", "--", p, "clean", "300"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = span(t);
    assert!((0.4..=0.6).contains(&s), "-y 1s -d 500ms kept {s} s");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[cuda_gpu_kern_sum]") && text.contains("scenario clean: 300 steps"), "{text}");
    let first_step = cuflight(&["report", "--format", "json", "--include-warmup", t], &[]);
    let r: serde_json::Value = serde_json::from_slice(&first_step.stdout).unwrap();
    let name = r["processes"][0]["steps"][0]["name"].as_str().unwrap().to_string();
    let n: u32 = name.trim_start_matches("ProfilerStep#").parse().unwrap();
    assert!(n >= 50, "the window starts a second in, not at {name}");
}

/// `-o -` is standard output for the commands that write a file, and a reader that goes away ends them quietly.
#[test]
fn dash_is_standard_output_and_a_closed_pipe_ends_quietly() {
    let dir = scratch("cli-stdout");
    let prog = build_c("scenario", &dir);
    let trace = dir.join("t.cuf");
    let t = trace.to_str().unwrap();
    let out = cuflight(&["record", "-f", "-o", t, "--", prog.to_str().unwrap(), "clean", "3"], &[]);
    assert!(out.status.success());
    let out = cuflight(&["export", "--format", "chrome", "-o", "-", t], &[]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["traceEvents"].as_array().unwrap().len() > 10);
    assert!(!std::path::Path::new("-").exists() && !dir.join("-").exists());
    for args in [vec!["export", "-o", "-", t], vec!["completions", "bash"], vec!["stats", t]] {
        let shell = format!("set -o pipefail; {} {} | head -c 10 >/dev/null", cuflight_bin().display(), args.join(" "));
        let out = Command::new("bash").args(["-c", &shell]).env("LD_LIBRARY_PATH", cudasim_dir()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let quiet = !err.contains("panicked") && !err.contains("rror") && !err.contains("Broken pipe");
        assert!(quiet && matches!(out.status.code(), Some(0 | 141)), "{args:?}: {:?} {err}", out.status);
    }
    for sub in ["report", "stats"] {
        let out = cuflight(&[sub, "-o", "-", t], &[]);
        assert!(out.status.success() && !out.stdout.is_empty(), "{sub}");
    }
}

/// `stats` of a thousand steps fits a few screens by default (numbered NVTX names grouped, the per-range kernel
/// table left to `--report`), while CSV keeps every row.
#[test]
fn stats_of_a_thousand_steps_stays_short_and_csv_keeps_every_row() {
    let dir = scratch("cli-stats-length");
    let prog = build_c("scenario", &dir);
    let trace = dir.join("t.cuf");
    let t = trace.to_str().unwrap();
    let out = cuflight(&["record", "-f", "-o", t, "--", prog.to_str().unwrap(), "quick", "1000"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(cuflight(&["stats", t], &[]).stdout).unwrap();
    assert!(text.lines().count() <= 300, "{} lines", text.lines().count());
    assert!(text.contains("ProfilerStep#* (1000 names") && text.contains("layer_* (3 names"), "{text}");
    assert!(!text.contains("[nvtx_kern_sum]"), "the per-range kernel table is not in the default text");
    let csv =
        String::from_utf8(cuflight(&["stats", t, "--report", "nvtx_sum", "--format", "csv"], &[]).stdout).unwrap();
    assert_eq!(csv.lines().filter(|l| l.contains("ProfilerStep#")).count(), 1000);
    let kern = String::from_utf8(cuflight(&["stats", t, "--report", "nvtx_kern_sum"], &[]).stdout).unwrap();
    assert!(kern.contains("[nvtx_kern_sum]"));
}

/// `cuflight doctor --format json` under `env`, with its exit status and the checks by name.
fn doctor(env: &[(&str, &str)], lib_dir: &std::path::Path) -> (i32, serde_json::Value) {
    let out = Command::new(cuflight_bin())
        .args(["doctor", "--format", "json"])
        .env("LD_LIBRARY_PATH", lib_dir)
        .env_remove("CUFLIGHT_CUPTI")
        .env_remove("CUDA_HOME")
        .envs(env.iter().copied())
        .output()
        .expect("cuflight doctor runs");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor's JSON: {e}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), json)
}

fn check<'a>(json: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    json["checks"].as_array().unwrap().iter().find(|c| c["check"] == name).unwrap_or_else(|| panic!("{name}: {json}"))
}

#[test]
fn doctor_on_cudasim_says_a_recording_works_and_that_the_gpu_is_simulated() {
    let (code, json) = doctor(&[], &cudasim_dir());
    assert_eq!(code, 0, "{json:#}");
    assert_eq!(json["record_would_work"], true);
    let driver = check(&json, "driver");
    assert_eq!(driver["result"], "note");
    assert!(driver["found"].as_str().unwrap().contains("cudasim"), "{driver}");
    let recording = check(&json, "recording");
    assert_eq!(recording["result"], "ok", "{recording}");
    assert!(recording["found"].as_str().unwrap().contains("memsets on GPU 0 recorded"), "{recording}");
    assert_eq!(check(&json, "cupti")["result"], "ok");
    let counters = check(&json, "counters");
    assert_eq!(counters["result"], "ok", "{counters}");
    assert!(counters["found"].as_str().unwrap().contains("the probe sampled"), "{counters}");
    let names: Vec<&str> = json["checks"].as_array().unwrap().iter().map(|c| c["check"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "agent",
            "driver",
            "cupti",
            "recording",
            "other-tools",
            "counters",
            "ptrace",
            "memory",
            "environment",
            "clock"
        ]
    );
}

/// A counters set-up that outlasts the probe (cudasim's host initialisation made to take 3 s) is said as such, with
/// where it was, not as a CUPTI failure: the H200's doctor said "setting up CUPTI's PM sampling failed (CUPTI result
/// 1)" of a probe that lived ~20 ms, where a long program sampled. The probe now works for 1.5 s when recorded.
#[test]
fn doctor_says_when_the_counters_set_up_outlasted_its_probe() {
    let (code, json) = doctor(&[("CUDASIM_PM_HOST_INIT_US", "3000000")], &cudasim_dir());
    assert_eq!(code, 0, "{json:#}");
    let counters = check(&json, "counters");
    assert_eq!(counters["result"], "warn", "{counters}");
    let found = counters["found"].as_str().unwrap();
    assert!(found.contains(cuflight_format::gpu_counters::ENDED_EARLY_SAYS), "{counters}");
    assert!(found.contains("(at cupti") && !found.contains("failed"), "{counters}");
    assert!(counters["fix"].as_str().unwrap().contains("1.5 s of work"), "{counters}");
}

#[test]
fn doctor_without_libcupti_fails_and_record_names_the_check() {
    let dir = scratch("doctor-no-cupti");
    let libs = dir.join("libs");
    std::fs::create_dir_all(&libs).unwrap();
    // The driver and the runtime, but no libcupti anywhere the agent looks.
    for name in ["libcuda.so.1", "libcudart.so", "libcudart.so.13"] {
        std::os::unix::fs::symlink(cudasim_dir().join(name).canonicalize().unwrap(), libs.join(name)).unwrap();
    }
    let (code, json) = doctor(&[], &libs);
    assert_eq!(code, 1, "{json:#}");
    let cupti = check(&json, "cupti");
    assert_eq!(cupti["result"], "fail", "{cupti}");
    assert!(cupti["found"].as_str().unwrap().contains("no libcupti found"), "{cupti}");
    assert!(cupti["fix"].as_str().unwrap().contains("CUFLIGHT_CUPTI"), "{cupti}");
    assert_eq!(check(&json, "recording")["fix"], "see the cupti check");

    let prog = build_c("streams", &dir);
    let out = Command::new(cuflight_bin())
        .args(["record", "--force", "-o", dir.join("t.cuf").to_str().unwrap(), prog.to_str().unwrap(), "1"])
        .env("LD_LIBRARY_PATH", &libs)
        .env_remove("CUFLIGHT_CUPTI")
        .env_remove("CUDA_HOME")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no libcupti found") && err.contains("(`cuflight doctor` checks this: cupti)"), "{err}");
}

#[test]
fn doctor_without_a_gpu_names_the_driver_error_and_skips_the_recording() {
    let (code, json) = doctor(&[("CUDASIM_DEVICES", "0")], &cudasim_dir());
    assert_eq!(code, 1, "{json:#}");
    let driver = check(&json, "driver");
    assert_eq!(driver["result"], "fail");
    assert!(driver["found"].as_str().unwrap().contains("CUDA_ERROR_NO_DEVICE (100)"), "{driver}");
    assert!(driver["fix"].as_str().unwrap().contains("CUDA_VISIBLE_DEVICES"), "{driver}");
    assert_eq!(check(&json, "recording")["result"], "skipped");
}

#[test]
fn doctor_says_how_to_allow_counters_the_driver_keeps_to_administrators() {
    // cudasim's CUDASIM_PM_SAMPLING=denied answers as a driver with NVreg_RestrictProfilingToAdminUsers=1 does.
    let (code, json) = doctor(&[("CUDASIM_PM_SAMPLING", "denied")], &cudasim_dir());
    assert_eq!(code, 0, "counters are not needed for a recording: {json:#}");
    let counters = check(&json, "counters");
    assert_eq!(counters["result"], "warn", "{counters}");
    assert!(counters["found"].as_str().unwrap().contains("administrators"), "{counters}");
    assert!(counters["fix"].as_str().unwrap().contains("NVreg_RestrictProfilingToAdminUsers=0"), "{counters}");
}

#[test]
fn doctor_with_a_tiny_dev_shm_still_records_and_says_why() {
    // A mount namespace of its own with a 1 MiB /dev/shm (Docker's default is 64 MiB): needs unshare and root.
    let probe = Command::new("unshare").args(["-m", "true"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        skipped("needs `unshare -m` (root) for a private /dev/shm");
        return;
    }
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec \"$0\" doctor --format json"])
        .arg(cuflight_bin())
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor's JSON");
    let memory = check(&json, "memory");
    assert!(memory["found"].as_str().unwrap().contains("/dev/shm is 1 MiB but cuflight does not use it"), "{memory}");
    assert_eq!(check(&json, "recording")["result"], "ok", "a recording needs no /dev/shm: {json:#}");
}

#[test]
fn mcp_serves_an_assistant_through_the_protocols_own_client() {
    let dir = scratch("mcp");
    let prog = build_c("train", &dir);
    let first = record(&dir, &[], &prog, &["6"], &[]);
    assert!(first.output.status.success(), "{}", first.stderr());
    let baseline = dir.join("baseline.cuf");
    std::fs::rename(&first.trace, &baseline).unwrap();
    let second = record(&dir, &[], &prog, &["8"], &[]);
    assert!(second.output.status.success(), "{}", second.stderr());
    let out = Command::new("python3")
        .arg(repo_root().join("tests/py/mcp_client.py"))
        .args([cuflight_bin().as_os_str(), dir.as_os_str(), baseline.as_os_str(), second.trace.as_os_str()])
        .args(["--allow-record".as_ref(), prog.as_os_str()])
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "mcp_client.py: {}", String::from_utf8_lossy(&out.stderr));
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(seen["server"], "cuflight");
    assert_eq!(seen["schemas_are_objects"], true);
    let tools: Vec<&str> = seen["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for t in [
        "list_traces",
        "findings",
        "report",
        "trace_stats",
        "kernel",
        "step",
        "diff",
        "record_process",
        "record_command",
    ] {
        assert!(tools.contains(&t), "{t} not listed: {tools:?}");
    }
    for (name, call) in seen["calls"].as_object().unwrap() {
        assert_eq!(call["is_error"], false, "{name}: {call}");
        assert_eq!(call["json"], true, "{name}: {call}");
    }
    assert!(seen["calls"]["findings"]["keys"].as_array().unwrap().contains(&"verdict".into()));
    // The SDK's progress callback heard a 6-second recording run, in increasing steps.
    let told: Vec<f64> = seen["progress"].as_array().unwrap().iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(!told.is_empty() && told.windows(2).all(|w| w[0] < w[1]), "{}", seen["progress"]);
    assert!(
        seen["progress"][0]["message"].as_str().unwrap().contains("record_command running for"),
        "{}",
        seen["progress"]
    );
    // Either GEMM may come first (their times are close): the rows are those whose name contains "sgemm".
    assert!(seen["calls"]["kernel"]["head"].as_str().unwrap().contains("sgemm_128x128_"));
    // The schemas are resources, and what the tools return conforms to them.
    let resources: Vec<&str> = seen["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    for of in ["report", "stats", "diff", "doctor", "ps"] {
        assert!(resources.contains(&format!("cuflight://schema/{of}").as_str()), "{resources:?}");
    }
    for tool in ["report", "trace_stats", "diff"] {
        assert_eq!(seen["valid_against_schema"][tool], "valid", "{tool}: {}", seen["valid_against_schema"]);
    }
    assert!(seen["unknown_resource"].as_str().unwrap().starts_with("jsonrpc:"), "{}", seen["unknown_resource"]);
    let bad = &seen["bad_calls"];
    assert!(bad["kernel"].as_str().unwrap().starts_with("jsonrpc:"), "{bad}");
    assert!(bad["no_such_tool"].as_str().unwrap().contains("unknown tool"), "{bad}");
    assert!(bad["step"].as_str().unwrap().starts_with("jsonrpc:"), "{bad}");
    assert!(bad["record_process"].as_str().unwrap().contains("no cuflight agent answers"), "{bad}");
    let option_like = &seen["option_like_value"];
    assert_eq!(option_like["is_error"], true, "{option_like}");
    assert!(option_like["text"].as_str().unwrap().contains("unknown report '--output=x'"), "{option_like}");
    assert_eq!(seen["missing_trace"]["is_error"], true);
    assert_eq!(seen["alive_after_errors"], true);
    let mut paths = Vec::new();
    for key in ["record_command", "record_command_again"] {
        let recorded = &seen[key];
        assert_eq!(recorded["is_error"], false, "{recorded}");
        let text = recorded["text"].as_str().unwrap();
        let path = text.strip_prefix("trace ").and_then(|t| t.split(' ').next()).expect("the trace's path");
        assert!(std::path::Path::new(path).is_file(), "{text}");
        paths.push(path.to_string());
    }
    assert_ne!(paths[0], paths[1], "two recordings, two traces");
}

/// `cuflight mcp` driven line by line: what the SDK's client hides (when each reply comes) is what is checked.
#[test]
fn mcp_answers_while_a_tool_runs_and_a_cancelled_call_stops_its_command() {
    use std::io::{BufRead, Write};
    use std::time::{Duration, Instant};
    let dir = scratch("mcp-cancel");
    let mut server = Command::new(cuflight_bin())
        .args(["mcp", "--allow-record", "--max-seconds", "120", "--output-dir", dir.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("cuflight mcp runs");
    let mut input = server.stdin.take().unwrap();
    let (tx, replies) = std::sync::mpsc::channel::<serde_json::Value>();
    let (progress_tx, progress) = std::sync::mpsc::channel::<serde_json::Value>();
    let output = std::io::BufReader::new(server.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in output.lines().map_while(Result::ok) {
            let message: serde_json::Value = serde_json::from_str(&line).expect("each line is one JSON message");
            let _ = if message["method"] == "notifications/progress" { &progress_tx } else { &tx }.send(message);
        }
    });
    let mut send = |message: serde_json::Value| writeln!(input, "{message}").and_then(|()| input.flush()).unwrap();
    let call = |id: u32, command: &[&str]| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                           "params": {"name": "record_command", "arguments": {"command": command}}})
    };
    let started = Instant::now();
    // Two programs that would run for two minutes, then a ping and a quick call: both answered meanwhile. Their
    // duration names this test run (GNU sleep takes fractions): a run of this test beside it (another checkout's
    // CI) or a program another run left behind is not counted as one of them.
    let long = format!("120.{}", std::process::id());
    send(call(1, &["sleep", &long]));
    // The second asks for progress: it is told to be running while it runs.
    let mut with_progress = call(2, &["sleep", &long]);
    with_progress["params"]["_meta"] = serde_json::json!({"progressToken": "rec-2"});
    send(with_progress);
    send(serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
    let pong = replies.recv_timeout(Duration::from_secs(10)).expect("a ping is answered while tools run");
    assert_eq!(pong["id"], 3, "{pong}");
    send(call(4, &["true"]));
    let quick = replies.recv_timeout(Duration::from_secs(30)).expect("a quick call ends beside the long ones");
    assert_eq!((quick["id"].as_u64(), &quick["result"]["isError"]), (Some(4), &false.into()), "{quick}");
    // An id whose reply came is free at once (MCP asks clients not to reuse one; some do): the call ends before
    // its reply is written, or a client sending its next request at once was told the id was in progress.
    send(call(4, &["true"]));
    let again = replies.recv_timeout(Duration::from_secs(30)).expect("a quick call again");
    assert_eq!((again["id"].as_u64(), &again["result"]["isError"]), (Some(4), &false.into()), "{again}");
    // A reused id in progress is refused; the cancelled call's recording stops and it gets no reply.
    send(call(1, &["true"]));
    let reused = replies.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!((reused["id"].as_u64(), reused["error"]["code"].as_i64()), (Some(1), Some(-32600)), "{reused}");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
    let no_sleep_1 = || {
        let ps = Command::new("pgrep").args(["-f", "-c", &format!("^sleep {long}$")]).output().unwrap();
        String::from_utf8_lossy(&ps.stdout).trim().parse::<u32>().unwrap_or(0)
    };
    let t = Instant::now();
    while no_sleep_1() > 1 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Which processes, and whose, if the count is wrong. (Seen once, 2026-11-30, when the count was of every
    // "sleep 120" on the machine, likely while a clean clone's CI ran this test beside it.)
    let processes = || {
        let ps = Command::new("ps").args(["-eo", "pid,ppid,etimes,args"]).output().unwrap();
        String::from_utf8_lossy(&ps.stdout).lines().filter(|l| l.contains("sleep 120")).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(no_sleep_1(), 1, "the cancelled call's program was stopped, the other runs on:\n{}", processes());
    assert!(replies.recv_timeout(Duration::from_secs(1)).is_err(), "a cancelled call gets no reply");
    let first = progress.recv_timeout(Duration::from_secs(15)).expect("the call that asked is told to be running");
    let second = progress.recv_timeout(Duration::from_secs(15)).expect("and again");
    for p in [&first, &second] {
        assert_eq!(p["params"]["progressToken"], "rec-2", "only the call that asked: {p}");
        assert!(p["params"]["message"].as_str().unwrap().starts_with("record_command running for"), "{p}");
    }
    let at = |p: &serde_json::Value| p["params"]["progress"].as_u64().unwrap();
    assert!(at(&second) > at(&first), "progress increases: {first} then {second}");
    // Closing the session stops the call still running, and the server ends.
    drop(input);
    let t = Instant::now();
    while server.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = server.try_wait().unwrap();
    if status.is_none() {
        let _ = server.kill();
    }
    assert_eq!(status.and_then(|s| s.code()), Some(0), "the server ends when its input closes");
    assert_eq!(no_sleep_1(), 0, "no program left running");
    let traces =
        std::fs::read_dir(&dir).unwrap().filter(|e| e.as_ref().unwrap().path().extension() == Some("cuf".as_ref()));
    assert_eq!(traces.count(), 4, "the stopped recordings kept their traces (and the two quick ones theirs)");
    assert!(started.elapsed() < Duration::from_secs(100), "nothing waited for a program's two minutes");
}

/// The H100 attach window's report is 863 KB of JSON (1,645 steps), more than a tool returns (256 KiB): `findings`
/// once failed on it ("the report is larger than 256 KiB"), though what it returns is a few KB, and `report` cut
/// it in the middle of a step. Now `findings` reads it whole, and `report` returns JSON with fewer step rows and
/// says so.
#[test]
fn mcp_findings_and_report_of_a_report_larger_than_a_tools_text() {
    let Some(window) = shared_trace("h100-attach-window.cuf") else {
        return;
    };
    let mut mcp = Mcp::start();
    let mut ask = |tool: &str| -> serde_json::Value {
        let text = mcp.tool_text(tool, &[&window]);
        assert!(text.len() <= 256 << 10, "{tool}: {} bytes", text.len());
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{tool}: not JSON ({e})"))
    };
    let findings = ask("findings");
    assert!(findings["verdict"].as_str().unwrap().starts_with("launch_bound"), "{}", findings["verdict"]);
    let report = ask("report");
    let steps = report["processes"][0]["steps"].as_array().unwrap().len() as u64;
    let cut = &report["cut"]["arrays"][0];
    assert_eq!(cut["array"], "/processes/0/steps", "{}", report["cut"]);
    assert!(cut["rows"].as_u64().unwrap() > steps && cut["shown"].as_u64() == Some(steps), "{cut}");
    assert_eq!(report["verdict"], findings["verdict"]);
}

/// A `cuflight mcp` session for tests that ask one tool at a time; ended when dropped.
struct Mcp {
    server: std::process::Child,
    input: Option<std::process::ChildStdin>,
    output: std::io::BufReader<std::process::ChildStdout>,
    /// The last request's id: MCP asks that a session never use one twice.
    id: u64,
}

impl Mcp {
    fn start() -> Mcp {
        let mut server = Command::new(cuflight_bin())
            .arg("mcp")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("cuflight mcp runs");
        let input = server.stdin.take();
        let output = std::io::BufReader::new(server.stdout.take().unwrap());
        Mcp { server, input, output, id: 0 }
    }

    /// The text `tool` answers for `traces`, which must not be an error.
    fn tool_text(&mut self, tool: &str, traces: &[&std::path::Path]) -> String {
        use std::io::{BufRead, Write};
        self.id += 1;
        let call = serde_json::json!({"jsonrpc": "2.0", "id": self.id, "method": "tools/call",
                                      "params": {"name": tool, "arguments": {"traces": traces}}});
        writeln!(self.input.as_mut().unwrap(), "{call}").unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!((&reply["id"], &reply["result"]["isError"]), (&self.id.into(), &false.into()), "{reply}");
        reply["result"]["content"][0]["text"].as_str().unwrap().to_string()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        drop(self.input.take());
        let _ = self.server.wait();
    }
}

/// Traces of two runs given to the tools: `findings` says why they are reported alone, and `trace_stats`, whose
/// tables sum them, passes on the warning the command printed (a tool's reply holds its output alone).
#[test]
fn mcp_tools_say_when_traces_are_of_separate_runs() {
    let (Some(ddp), Some(qwen)) =
        (shared_trace("kineto-v100-ddp-ns.json.gz"), shared_trace("kineto-h100-qwen-inference.json.gz"))
    else {
        return;
    };
    let mut mcp = Mcp::start();
    let mut ask =
        |tool: &str| -> serde_json::Value { serde_json::from_str(&mcp.tool_text(tool, &[&ddp, &qwen])).unwrap() };
    let findings = ask("findings");
    assert!(findings["separate_runs"].as_str().unwrap().contains("470 days apart"), "{}", findings["separate_runs"]);
    let each = findings["run_verdicts"].as_array().expect("each run's verdict");
    assert_eq!(each.len(), 2, "{each:?}");
    assert!(each[0]["verdict"].as_str().unwrap().starts_with("fp32_gemm"), "{each:?}");
    assert!(findings["findings"].as_array().unwrap().iter().all(|f| f["trace"].is_string()), "{findings}");
    let stats = ask("trace_stats");
    let warned = stats["cuflight_warnings"].as_array().expect("the warning passed on");
    assert!(warned.iter().any(|w| w.as_str().unwrap().contains("470 days apart")), "{warned:?}");
}
