//! The MCP tools that record, offered only under `cuflight mcp --allow-record`: a window of a running process
//! (`cuflight attach`), or a command run under `cuflight record`, each bounded by `--max-seconds`.

use super::{string_arg, Failure, McpOptions};
use crate::deadline::{wait_with_deadline_or_cancel, Ended};
use cuflight_collector::capture::private_dir::PrivateDir;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Time beyond the window for arming (CUPTI's set-up), injecting and writing the trace.
const GRACE: Duration = Duration::from_secs(60);

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A new trace's path. The sequence number keeps two recordings in one second apart: with the same name the
/// second `record` would refuse to replace the first, and its trace would be taken for the new one.
fn output(opts: &McpOptions, what: &str) -> PathBuf {
    static SEQUENCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    opts.output_dir.join(format!("mcp-{what}-{}-{}-{n}.cuf", unix_now(), std::process::id()))
}

pub fn record_process(args: &Value, opts: &McpOptions, cancelled: &AtomicBool) -> Result<String, Failure> {
    let pid = args
        .get("pid")
        .and_then(Value::as_u64)
        .filter(|p| (1..=u32::MAX as u64).contains(p))
        .ok_or(Failure::Args("`pid` must be a process id".into()))?;
    let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(0.0);
    if !(seconds > 0.0 && seconds <= opts.max_seconds as f64) {
        return Err(Failure::Args(format!("`seconds` must be above 0 and at most {}", opts.max_seconds)));
    }
    let path = output(opts, &format!("attach-{pid}"));
    let mut a = vec![
        "attach".to_string(),
        pid.to_string(),
        "--duration".into(),
        format!("{}ms", (seconds * 1000.0).round() as u64),
        "-o".into(),
        path.display().to_string(),
    ];
    if args.get("inject").and_then(Value::as_bool).unwrap_or(false) {
        a.push("--inject".into());
    }
    run_recording(&a, Duration::from_secs_f64(seconds) + GRACE, &path, cancelled)
}

pub fn record_command(args: &Value, opts: &McpOptions, cancelled: &AtomicBool) -> Result<String, Failure> {
    let command: Vec<String> = match args.get("command") {
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    };
    if command.is_empty() || command[0].is_empty() {
        let _ = string_arg(args, "command")?;
        return Err(Failure::Args("`command` must be a non-empty array of strings".into()));
    }
    let path = output(opts, "record");
    let mut a = vec!["record".to_string(), "-o".into(), path.display().to_string(), "--".into()];
    a.extend(command);
    run_recording(&a, Duration::from_secs(opts.max_seconds), &path, cancelled)
}

/// Runs a recording cuflight; at the limit, or cancelled, it is asked to stop as `kill` would (it ends the
/// program's run and keeps the trace), then killed if it does not end within a grace period. Returns what it said
/// and the path.
fn run_recording(
    args: &[String],
    limit: Duration,
    path: &std::path::Path,
    cancelled: &AtomicBool,
) -> Result<String, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Ran(format!("cannot find the cuflight binary: {e}")))?;
    let dir = PrivateDir::new("mcp").map_err(|e| Failure::Ran(format!("{e:#}")))?;
    let err_path = dir.path().join("err");
    let result = (|| {
        if path.symlink_metadata().is_ok() {
            return Err(format!("{} exists already: not replaced", path.display()));
        }
        let mut child = std::process::Command::new(exe)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&err_path).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot run cuflight: {e}"))?;
        // At the limit it is asked to stop as `kill` would: record ends the program's run and keeps the trace.
        let (status, stopped) =
            match wait_with_deadline_or_cancel(&mut child, limit, Some(GRACE), cancelled).map_err(|e| e.to_string())? {
                Ended::Exited(s) => (s, false),
                Ended::Stopped(s) => (s, true),
                Ended::Killed => return Err(format!("did not stop within {} s of its limit", GRACE.as_secs())),
            };
        let said = std::fs::read_to_string(&err_path).unwrap_or_default();
        let said: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).rev().take(20).collect();
        let said: Vec<&str> = said.into_iter().rev().collect();
        let cut = if stopped { format!("stopped at its limit of {} s; ", limit.as_secs()) } else { String::new() };
        if !path.exists() {
            return Err(format!("{cut}no trace was written: {}", said.join(" | ")));
        }
        Ok(format!(
            "{cut}trace {} (exit status {}); cuflight said:\n{}",
            path.display(),
            status.code().map_or("signal".into(), |c| c.to_string()),
            said.join("\n")
        ))
    })();
    result.map_err(Failure::Ran)
}
