//! The MCP server's tools. Each reading tool runs this same `cuflight` binary with `--format json` in a process
//! of its own, so that an assistant gets exactly what the command line gives, a corrupt trace cannot take the
//! server down, and a slow analysis can be stopped at its time limit.

use super::{string_arg, Failure, McpOptions};
use crate::deadline::{wait_with_deadline_or_cancel, Ended};
use cuflight_collector::capture::private_dir::PrivateDir;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A tool's text is cut here (an assistant's context is finite): a stats table or a report of a long job fits.
const MAX_TEXT: usize = 256 << 10;
/// What a tool that picks from a command's JSON (findings, kernel) reads of it at most: a job of many ranks
/// writes a report far larger than an assistant reads, and the part picked is small.
const MAX_JSON: u64 = 256 << 20;
/// How long an analysis may take before it is stopped.
const ANALYSIS_LIMIT: Duration = Duration::from_secs(600);

fn traces_schema() -> Value {
    json!({"type": "array", "items": {"type": "string"}, "minItems": 1,
           "description": "Trace files (cuflight .cuf, torch.profiler Kineto .json, Nsight Systems .sqlite or \
                           .nsys-rep; but .nsys-rep, also compressed: .gz, .zst), or one directory of them; several \
                           are one job's ranks"})
}

/// The tools, with their JSON Schemas; the recording ones only under `--allow-record`.
pub fn list(opts: &McpOptions) -> Vec<Value> {
    let mut tools = vec![
        json!({"name": "list_traces", "title": "List traces",
               "description": "The trace files in a directory (not its subdirectories): name, format, size, when modified.",
               "inputSchema": {"type": "object", "required": ["directory"], "additionalProperties": false,
                               "properties": {"directory": {"type": "string"}}}}),
        json!({"name": "findings", "title": "Findings and verdict",
               "description": "The diagnosis of a run: the verdict (what bounds it) and each finding with its \
                               severity, the time it costs per step, its evidence and the fix to try (fields as in \
                               cuflight://schema/report).",
               "inputSchema": {"type": "object", "required": ["traces"], "additionalProperties": false,
                               "properties": {"traces": traces_schema(),
                                              "include_warmup": {"type": "boolean", "default": false}}}}),
        json!({"name": "report", "title": "Full report",
               "description": "The whole report of `cuflight report --format json`: per process the run, time \
                               breakdown, idle causes, steps, warm-up, critical path, categories, top kernels, \
                               findings. Every field is described in the resource cuflight://schema/report.",
               "inputSchema": {"type": "object", "required": ["traces"], "additionalProperties": false,
                               "properties": {"traces": traces_schema(),
                                              "step": {"type": "string", "description": "steps are the ranges with this name"},
                                              "include_warmup": {"type": "boolean", "default": false}}}}),
        json!({"name": "trace_stats", "title": "Stats tables",
               "description": "nsys-style summary tables of `cuflight stats --format json` (kernels, API calls, \
                               copies, NVTX ranges...). `tables` picks some by nsys's names, e.g. \
                               cuda_gpu_kern_sum,cuda_api_sum. Every column is described in the resource \
                               cuflight://schema/stats.",
               "inputSchema": {"type": "object", "required": ["traces"], "additionalProperties": false,
                               "properties": {"traces": traces_schema(), "tables": {"type": "string"}}}}),
        json!({"name": "kernel", "title": "One kernel",
               "description": "The kernels whose name contains `name` (case-insensitive): calls, total, mean, min, max \
                               time, launch configuration, as the kernel summary table has them (at most 20).",
               "inputSchema": {"type": "object", "required": ["traces", "name"], "additionalProperties": false,
                               "properties": {"traces": traces_schema(), "name": {"type": "string", "minLength": 1}}}}),
        json!({"name": "step", "title": "One step",
               "description": "The stats tables of one step only: the Nth instance (from 1) of the step range `range` \
                               (default ProfilerStep#*, every step of a PyTorch profile matches it).",
               "inputSchema": {"type": "object", "required": ["traces", "n"], "additionalProperties": false,
                               "properties": {"traces": traces_schema(), "n": {"type": "integer", "minimum": 1},
                                              "range": {"type": "string", "default": "ProfilerStep#*"}}}}),
        json!({"name": "diff", "title": "Compare two runs",
               "description": "What changed from a baseline run to a candidate: step time, kernels, findings that \
                               appeared, grew, shrank or went away (fields: cuflight://schema/diff).",
               "inputSchema": {"type": "object", "required": ["baseline", "candidate"], "additionalProperties": false,
                               "properties": {"baseline": {"type": "string"}, "candidate": {"type": "string"}}}}),
    ];
    if opts.allow_record {
        let max = opts.max_seconds;
        tools.push(json!({"name": "record_process", "title": "Record a running process",
            "description": format!("Attach to a running CUDA process for a window of at most {max} s and write its \
                                    trace (the process must have a dormant agent: started with `cuflight launch`, or \
                                    `inject` loads one). Returns the trace's path and what was recorded."),
            "inputSchema": {"type": "object", "required": ["pid", "seconds"], "additionalProperties": false,
                            "properties": {"pid": {"type": "integer", "minimum": 1},
                                           "seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": max},
                                           "inject": {"type": "boolean", "default": false}}}}));
        tools.push(json!({"name": "record_command", "title": "Run a command under cuflight record",
            "description": format!("Run a command under `cuflight record` for at most {max} s (stopped then, its \
                                    trace kept) and return the trace's path and what was recorded."),
            "inputSchema": {"type": "object", "required": ["command"], "additionalProperties": false,
                            "properties": {"command": {"type": "array", "items": {"type": "string"}, "minItems": 1}}}}));
    }
    tools
}

/// Runs `tools/call`. Err: the request itself is wrong (unknown tool, bad arguments), a JSON-RPC error; a tool
/// that ran and failed is Ok with `isError`.
/// `cancelled` set (the client cancelled the request, or closed the session) stops the command it runs.
pub fn call(params: &Value, opts: &McpOptions, cancelled: &AtomicBool) -> Result<Value, String> {
    let name = params.get("name").and_then(Value::as_str).ok_or("tools/call needs a tool name")?;
    let args = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
    if !args.is_object() {
        return Err("arguments must be an object".into());
    }
    let outcome = match name {
        "list_traces" => list_traces(&args),
        "findings" => findings(&args, cancelled),
        "report" => report(&args, cancelled),
        "trace_stats" => trace_stats(&args, cancelled),
        "kernel" => kernel(&args, cancelled),
        "step" => step(&args, cancelled),
        "diff" => diff(&args, cancelled),
        "record_process" | "record_command" if !opts.allow_record => {
            return Err(format!("{name} records programs: start `cuflight mcp --allow-record` to allow it"))
        }
        "record_process" => super::tools_record::record_process(&args, opts, cancelled),
        "record_command" => super::tools_record::record_command(&args, opts, cancelled),
        other => return Err(format!("unknown tool {other}")),
    };
    Ok(match outcome {
        Ok(text) => json!({"content": [{"type": "text", "text": cut(text)}], "isError": false}),
        Err(Failure::Args(why)) => return Err(why),
        Err(Failure::Ran(why)) => json!({"content": [{"type": "text", "text": why}], "isError": true}),
    })
}

fn cut(mut text: String) -> String {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(
            "\n[cut at 256 KiB: `findings` gives the verdict and findings alone; `trace_stats` with `tables` fewer \
             tables; `kernel` or `step` one kernel or step]",
        );
    }
    text
}

fn traces_arg(args: &Value) -> Result<Vec<String>, Failure> {
    let list = match args.get("traces") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    };
    if list.is_empty() || list.iter().any(|s| s.is_empty() || s == "-") {
        return Err(Failure::Args("`traces` must name one or more trace files (or a directory)".into()));
    }
    Ok(list)
}

fn bool_arg(args: &Value, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Runs this cuflight with `args`; its standard output (what `cut` shows: a little more than MAX_TEXT), or its
/// error line.
pub fn run_cuflight(args: &[String], limit: Duration, cancelled: &AtomicBool) -> Result<String, Failure> {
    run_cuflight_reading(args, limit, cancelled, MAX_TEXT as u64 + 1)
}

/// [`run_cuflight`], reading at most `most` bytes of its output.
fn run_cuflight_reading(
    args: &[String],
    limit: Duration,
    cancelled: &AtomicBool,
    most: u64,
) -> Result<String, Failure> {
    run_cuflight_warned(args, limit, cancelled, most).map(|(out, _)| out)
}

/// [`run_cuflight_reading`], with the warnings a successful run printed (`cuflight: warning: ...`, at most 16):
/// traces of separate runs summed, a trace cut short, which the output alone does not say.
fn run_cuflight_warned(
    args: &[String],
    limit: Duration,
    cancelled: &AtomicBool,
    most: u64,
) -> Result<(String, Vec<String>), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Ran(format!("cannot find the cuflight binary: {e}")))?;
    let dir = PrivateDir::new("mcp").map_err(|e| Failure::Ran(format!("{e:#}")))?;
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let ran = (|| {
        let mut child = std::process::Command::new(exe)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out_path).map_err(|e| e.to_string())?)
            .stderr(std::fs::File::create(&err_path).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot run cuflight: {e}"))?;
        let status =
            match wait_with_deadline_or_cancel(&mut child, limit, None, cancelled).map_err(|e| e.to_string())? {
                Ended::Exited(s) | Ended::Stopped(s) => s,
                Ended::Killed if cancelled.load(std::sync::atomic::Ordering::Relaxed) => return Err("cancelled".into()),
                Ended::Killed => return Err(format!("stopped after {} s", limit.as_secs())),
            };
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        if !status.success() {
            return Err(failure_line(&err).to_string());
        }
        let warnings =
            err.lines().filter_map(|l| l.strip_prefix("cuflight: warning: ")).take(16).map(str::to_string).collect();
        Ok((read_capped(&out_path, most)?, warnings))
    })();
    ran.map_err(Failure::Ran)
}

/// The line of a failed run's standard error that says why: cuflight's own errors are one line (`cuflight: ...`,
/// the last such line, after any warnings), clap's begin `error:` and end with a hint to try `--help`.
fn failure_line(stderr: &str) -> &str {
    let lines = || stderr.lines().rev().map(str::trim).filter(|l| !l.is_empty());
    lines()
        .find(|l| l.starts_with("cuflight:") || l.starts_with("error:"))
        .or_else(|| lines().next())
        .unwrap_or("failed")
}

/// A file's first `most` bytes as text.
fn read_capped(path: &Path, most: u64) -> Result<String, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    f.take(most).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn list_traces(args: &Value) -> Result<String, Failure> {
    let dir = PathBuf::from(string_arg(args, "directory")?);
    let entries = std::fs::read_dir(&dir).map_err(|e| Failure::Ran(format!("cannot read {}: {e}", dir.display())))?;
    let mut rows = Vec::new();
    for entry in entries.flatten().take(10_000) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(format) = format_of(&name) else { continue };
        // No links followed: a link's target is read only when named.
        let Ok(meta) = entry.path().symlink_metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().ok().and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok());
        rows.push(json!({"path": entry.path().display().to_string(), "name": name, "format": format,
                         "bytes": meta.len(), "modified_unix": modified.map(|d| d.as_secs())}));
    }
    rows.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    rows.truncate(500);
    Ok(serde_json::to_string_pretty(&json!({"directory": dir.display().to_string(), "traces": rows}))
        .unwrap_or_default())
}

fn format_of(name: &str) -> Option<&'static str> {
    let whole = name.to_ascii_lowercase();
    // Compressed traces read as their contents (gzip, zstd); an Nsight Systems report only as it is.
    let n = whole.strip_suffix(".gz").or_else(|| whole.strip_suffix(".zst")).unwrap_or(&whole);
    Some(if n.ends_with(".cuf") {
        "cuflight"
    } else if n.ends_with(".json") {
        "kineto-json"
    } else if n.ends_with(".sqlite") {
        "nsys-sqlite"
    } else if whole.ends_with(".nsys-rep") {
        "nsys-report"
    } else if whole.starts_with("cuflight-") && whole.ends_with(".seg") {
        "flight-recorder-dump"
    } else {
        return None;
    })
}

// Option values go glued to their option (`--step=VALUE`): a value an assistant sends that begins with `-` is then
// never read as an option of its own. Trace paths come after `--` for the same reason.
fn report_args(args: &Value) -> Result<Vec<String>, Failure> {
    let mut a = vec!["report".to_string(), "--format".into(), "json".into()];
    if bool_arg(args, "include_warmup") {
        a.push("--include-warmup".into());
    }
    if args.get("step").is_some() {
        a.push(format!("--step={}", string_arg(args, "step")?));
    }
    a.push("--".into());
    a.extend(traces_arg(args)?);
    Ok(a)
}

fn report(args: &Value, cancelled: &AtomicBool) -> Result<String, Failure> {
    fitted(run_cuflight_warned(&report_args(args)?, ANALYSIS_LIMIT, cancelled, MAX_JSON)?)
}

/// A command's JSON output shortened to fit a tool's text, still JSON ([`super::fit`]), with the warnings it
/// printed as `cuflight_warnings`; output too large to read whole is cut as text.
fn fitted((text, warnings): (String, Vec<String>)) -> Result<String, Failure> {
    let Ok(mut value) = serde_json::from_str::<Value>(&text) else { return Ok(text) };
    if warnings.is_empty() && text.len() <= MAX_TEXT {
        return Ok(text);
    }
    if let Some(object) = value.as_object_mut().filter(|_| !warnings.is_empty()) {
        object.insert("cuflight_warnings".into(), warnings.into());
    }
    Ok(if text.len() > MAX_TEXT {
        super::fit::fit(value, MAX_TEXT - 1024)
    } else {
        serde_json::to_string_pretty(&value).unwrap_or(text)
    })
}

fn findings(args: &Value, cancelled: &AtomicBool) -> Result<String, Failure> {
    let text = run_cuflight_reading(&report_args(args)?, ANALYSIS_LIMIT, cancelled, MAX_JSON)?;
    let full: Value = serde_json::from_str(&text)
        .map_err(|_| Failure::Ran(format!("the report is larger than {} MiB: report fewer traces", MAX_JSON >> 20)))?;
    let processes: Vec<Value> = full["processes"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    json!({"file": p["file"], "pid": p["pid"], "rank": p["rank"], "command": p["command"],
                                "steps": p["step_total"], "step_spread": p["step_spread"], "warmup": p["warmup"],
                                "warnings": p["warnings"]})
                })
                .collect()
        })
        .unwrap_or_default();
    let mut answer = json!({"verdict": full["verdict"], "findings": full["findings"], "processes": processes});
    // Traces of separate runs, or one process's windows: each finding names its trace, and this says why.
    if let Some(why) = full.get("separate_runs") {
        answer["separate_runs"] = why.clone();
    }
    if let Some(each) = full.get("run_verdicts") {
        answer["run_verdicts"] = each.clone();
    }
    // A rank with nothing recorded: the findings are the others'.
    if let Some(each) = full.get("traces_left_out") {
        answer["traces_left_out"] = each.clone();
    }
    Ok(serde_json::to_string_pretty(&answer).unwrap_or_default())
}

fn stats_args(args: &Value, extra: &[String]) -> Result<Vec<String>, Failure> {
    let mut a = vec!["stats".to_string(), "--format".into(), "json".into()];
    a.extend(extra.iter().cloned());
    a.push("--".into());
    a.extend(traces_arg(args)?);
    Ok(a)
}

fn trace_stats(args: &Value, cancelled: &AtomicBool) -> Result<String, Failure> {
    let extra = match args.get("tables") {
        Some(_) => vec![format!("--report={}", string_arg(args, "tables")?)],
        None => Vec::new(),
    };
    fitted(run_cuflight_warned(&stats_args(args, &extra)?, ANALYSIS_LIMIT, cancelled, MAX_JSON)?)
}

fn kernel(args: &Value, cancelled: &AtomicBool) -> Result<String, Failure> {
    let want = string_arg(args, "name")?.to_lowercase();
    let table = ["--report=cuda_gpu_kern_sum".to_string()];
    let text = run_cuflight_reading(&stats_args(args, &table)?, ANALYSIS_LIMIT, cancelled, MAX_JSON)?;
    let stats: Value = serde_json::from_str(&text).map_err(|e| Failure::Ran(format!("unreadable stats: {e}")))?;
    let rows: Vec<&Value> = stats
        .as_object()
        .into_iter()
        .flat_map(|o| o.values())
        .filter_map(Value::as_array)
        .flatten()
        .filter(|row| row.get("name").and_then(Value::as_str).is_some_and(|n| n.to_lowercase().contains(&want)))
        .take(20)
        .collect();
    if rows.is_empty() {
        return Err(Failure::Ran(format!("no kernel's name contains {want:?}")));
    }
    Ok(serde_json::to_string_pretty(&json!({"kernels": rows})).unwrap_or_default())
}

fn step(args: &Value, cancelled: &AtomicBool) -> Result<String, Failure> {
    let n = args
        .get("n")
        .and_then(Value::as_u64)
        .filter(|n| *n >= 1)
        .ok_or(Failure::Args("`n` must be 1 or more".into()))?;
    let range = match args.get("range") {
        Some(_) => string_arg(args, "range")?,
        None => "ProfilerStep#*".into(),
    };
    let filter = format!("{range}/{n}");
    run_cuflight(&stats_args(args, &[format!("--filter-nvtx={filter}")])?, ANALYSIS_LIMIT, cancelled)
}

fn diff(args: &Value, cancelled: &AtomicBool) -> Result<String, Failure> {
    let a = vec![
        "diff".to_string(),
        "--format".into(),
        "json".into(),
        "--".into(),
        string_arg(args, "baseline")?,
        string_arg(args, "candidate")?,
    ];
    run_cuflight(&a, ANALYSIS_LIMIT, cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_is_told_by_its_error_line_not_its_hint() {
        let clap = "error: a value is required for '--report <REPORT>'\n\nUsage: cuflight stats\n\nFor more \
                    information, try '--help'.\n";
        assert_eq!(failure_line(clap), "error: a value is required for '--report <REPORT>'");
        let ours = "cuflight: warning: 2 records dropped\ncuflight: t.cuf: truncated trace\n";
        assert_eq!(failure_line(ours), "cuflight: t.cuf: truncated trace");
        assert_eq!(failure_line("Killed\n\n"), "Killed");
        assert_eq!(failure_line(""), "failed");
    }

    #[test]
    fn values_that_look_like_options_stay_values() {
        let args = json!({"traces": ["--help"], "step": "--output=x", "tables": "-o"});
        let report = report_args(&args).ok().unwrap();
        assert!(report.contains(&"--step=--output=x".to_string()));
        let dash = report.iter().position(|a| a == "--").unwrap();
        assert_eq!(&report[dash + 1..], ["--help"]);
        let stats = stats_args(&args, &["--report=-o".to_string()]).ok().unwrap();
        assert_eq!(stats[3..], ["--report=-o", "--", "--help"]);
    }
}
