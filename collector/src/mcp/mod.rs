//! `cuflight mcp`: a Model Context Protocol server over standard input and output, so that an AI assistant can
//! read traces (list them, stats tables, the report's findings and verdict, a diff, one kernel or step) and, when
//! the user allows it with `--allow-record`, record a bounded window of a process or run a command under `record`.
//!
//! The transport is the specification's stdio one: one JSON-RPC 2.0 message a line, the server's own logging on
//! standard error only. The lifecycle is `initialize` (the client's protocol version is answered with itself when
//! this server speaks it, else with the newest it does), then `tools/list` and `tools/call`, and `resources/list`
//! and `resources/read` for the JSON Schemas of the tools' results; `ping` at any time.
//! Tool calls run on threads of their own (`calls`), so requests are read, pings answered and calls cancelled
//! while they run. A bad request gets a JSON-RPC error and the server carries on; a tool that fails returns its
//! error as the tool's result (`isError`), as the specification asks, so the assistant can read it.

mod calls;
mod fit;
mod resources;
mod tools;
mod tools_record;

use anyhow::Result;
use calls::{reply, Calls, Progress, Work};
use serde_json::{json, Value};
use std::io::BufRead;
use std::sync::atomic::AtomicBool;

/// The protocol revisions this server speaks, newest first.
const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// How long the server waits, when it ends, for its calls to stop their commands (a recording asked to stop
/// writes its trace first: well under a second).
const STOPPING_AT_MOST: std::time::Duration = std::time::Duration::from_secs(10);

/// A request line longer than this is refused (and skipped) rather than held in memory.
const MAX_LINE: usize = 4 << 20;

#[derive(Clone, Debug)]
pub struct McpOptions {
    /// Allow the tools that record (attach to a process, run a command).
    pub allow_record: bool,
    /// The longest window or command a recording tool may take, seconds.
    pub max_seconds: u64,
    /// Where the recording tools write their traces.
    pub output_dir: std::path::PathBuf,
}

/// JSON-RPC 2.0's error codes.
pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;

/// Why a tool gave no result.
pub(crate) enum Failure {
    /// The arguments are wrong: a JSON-RPC error.
    Args(String),
    /// The tool ran and failed: its result, marked as an error.
    Ran(String),
}

/// A tool's argument that must be a non-empty string.
pub(crate) fn string_arg(args: &Value, key: &str) -> Result<String, Failure> {
    match args.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(Failure::Args(format!("`{key}` must be a non-empty string"))),
    }
}

pub(crate) fn error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn serve(opts: &McpOptions) -> Result<i32> {
    let calls = Calls::default();
    stop_calls_on_signals(&calls)?;
    let read = read_requests(opts, &calls);
    // The client closed our input (the specification's shutdown) or it failed: stop what still runs.
    calls.cancel_all_and_wait(STOPPING_AT_MOST);
    read.map(|()| 0)
}

/// A client that does not see the server end after closing its input sends SIGTERM (the specification's stdio
/// shutdown), and a terminal sends SIGINT or SIGHUP: the commands the calls run, each a process of its own, are
/// stopped first (a recording keeps its trace), the calls' private directories removed, then the signal ends the
/// server as it would have.
fn stop_calls_on_signals(calls: &Calls) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let calls = calls.clone();
    std::thread::Builder::new().name("mcp-signals".into()).spawn(move || {
        if let Some(signal) = signals.forever().next() {
            calls.cancel_all_and_wait(STOPPING_AT_MOST);
            let end = || {
                let _ = signal_hook::low_level::emulate_default_handler(signal);
            };
            cuflight_collector::capture::private_dir::remove_all_then(end, 128 + signal);
        }
    })?;
    Ok(())
}

fn read_requests(opts: &McpOptions, calls: &Calls) -> Result<()> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    let mut batches = 0u64;
    loop {
        line.clear();
        let n = std::io::Read::take(&mut input, MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE && !line.ends_with(b"\n") {
            // Skip the rest of the oversized line, then say so.
            let mut rest = Vec::new();
            while {
                rest.clear();
                std::io::Read::take(&mut input, MAX_LINE as u64).read_until(b'\n', &mut rest)? > 0
                    && !rest.ends_with(b"\n")
            } {}
            reply(&error(Value::Null, INVALID_REQUEST, "message longer than 4 MiB"))?;
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let (key, id, progress, work): (String, Value, Option<Progress>, Work) =
            match serde_json::from_str::<Value>(&text) {
                Err(e) => {
                    reply(&error(Value::Null, PARSE_ERROR, format!("not JSON: {e}")))?;
                    continue;
                }
                // A batch (JSON-RPC 2.0, MCP 2025-03-26) is answered with one array of its replies, none when it
                // held only notifications. It runs as one call: cancelling one of its requests does not stop it.
                Ok(Value::Array(batch)) if !batch.is_empty() => {
                    batches += 1;
                    let opts = opts.clone();
                    let work = move |cancelled: &AtomicBool| {
                        let answers: Vec<Value> = batch.iter().filter_map(|m| handle(m, &opts, cancelled)).collect();
                        (!answers.is_empty()).then_some(Value::Array(answers))
                    };
                    // No request id's JSON text begins with a space: the key cannot be taken by a request.
                    (format!(" batch {batches}"), Value::Null, None, Box::new(work))
                }
                Ok(message) => match message.get("method").and_then(Value::as_str) {
                    Some("notifications/cancelled") => {
                        if let Some(request) = message.pointer("/params/requestId") {
                            calls.cancel(&request.to_string());
                        }
                        continue;
                    }
                    Some("tools/call") if message.get("id").is_some_and(valid_id) => {
                        let (id, progress) = (message["id"].clone(), Progress::asked(&message));
                        let opts = opts.clone();
                        let work = move |cancelled: &AtomicBool| handle(&message, &opts, cancelled);
                        (id.to_string(), id, progress, Box::new(work))
                    }
                    _ => {
                        if let Some(r) = handle(&message, opts, &AtomicBool::new(false)) {
                            reply(&r)?;
                        }
                        continue;
                    }
                },
            };
        if let Err(why) = calls.start(key, id.clone(), progress, work) {
            reply(&error(id, INVALID_REQUEST, why))?;
        }
    }
}

/// MCP: "Requests MUST include a string or integer ID ... the ID MUST NOT be null."
fn valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// The reply to one message; None for a notification (no id), which is never answered.
fn handle(message: &Value, opts: &McpOptions, cancelled: &AtomicBool) -> Option<Value> {
    let id = message.get("id").cloned();
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return Some(error(id.unwrap_or(Value::Null), INVALID_REQUEST, "not a JSON-RPC 2.0 request (no method)"));
    };
    let id = id?; // notifications/initialized, notifications/cancelled...: nothing to answer
    if !valid_id(&id) {
        return Some(error(Value::Null, INVALID_REQUEST, "a request's id must be a string or an integer"));
    }
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some(error(id, INVALID_REQUEST, "jsonrpc must be \"2.0\""));
    }
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    Some(match method {
        "initialize" => result(id, initialize(&params)),
        "ping" => result(id, json!({})),
        "tools/list" => result(id, json!({"tools": tools::list(opts)})),
        "tools/call" => match tools::call(&params, opts, cancelled) {
            Ok(r) => result(id, r),
            Err(message) => error(id, INVALID_PARAMS, message),
        },
        "resources/list" => result(id, resources::list()),
        "resources/templates/list" => result(id, json!({"resourceTemplates": []})),
        "resources/read" => match resources::read(&params) {
            Ok(r) => result(id, r),
            Err((code, message)) => error(id, code, message),
        },
        other => error(id, METHOD_NOT_FOUND, format!("unknown method {other}")),
    })
}

fn initialize(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    let version = PROTOCOL_VERSIONS.iter().find(|v| **v == asked).copied().unwrap_or(PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}, "resources": {"listChanged": false}},
        "serverInfo": {"name": "cuflight", "title": "cuflight GPU profiler", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Start with list_traces on the user's folder, then report (the findings, each with the time \
                         it costs and the fix to try) and trace_stats for tables; diff compares two runs. Times \
                         are nanoseconds in JSON; the resources cuflight://schema/report, cuflight://schema/stats and \
                         cuflight://schema/diff describe every field.",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> McpOptions {
        McpOptions { allow_record: false, max_seconds: 10, output_dir: std::env::temp_dir() }
    }

    fn handled(message: Value) -> Option<Value> {
        handle(&message, &opts(), &AtomicBool::new(false))
    }

    #[test]
    fn initialize_answers_the_clients_version_when_spoken_and_the_newest_otherwise() {
        let m = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26"}});
        let r = handled(m).unwrap();
        assert_eq!(r["result"]["protocolVersion"], "2025-03-26");
        assert_eq!(r["result"]["serverInfo"]["name"], "cuflight");
        let m = json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "1999-01-01"}});
        assert_eq!(handled(m).unwrap()["result"]["protocolVersion"], PROTOCOL_VERSIONS[0]);
    }

    #[test]
    fn notifications_get_no_answer_and_bad_requests_get_errors() {
        assert!(handled(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).is_none());
        let r = handled(json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/list"})).unwrap();
        assert_eq!(r["error"]["code"], METHOD_NOT_FOUND);
        let r = handled(json!({"jsonrpc": "2.0", "id": null, "method": "ping"})).unwrap();
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
        let r = handled(json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"})).unwrap();
        assert_eq!((r["error"]["code"].as_i64(), &r["id"]), (Some(INVALID_REQUEST), &Value::Null));
        let r = handled(json!({"id": 4})).unwrap();
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
        let r = handled(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "nope"}}));
        assert_eq!(r.unwrap()["error"]["code"], INVALID_PARAMS);
    }

    #[test]
    fn the_recording_tools_are_listed_only_when_allowed() {
        let names = |o: &McpOptions| -> Vec<String> {
            tools::list(o).iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
        };
        assert!(!names(&opts()).iter().any(|n| n.starts_with("record")));
        let allowed = McpOptions { allow_record: true, ..opts() };
        assert!(names(&allowed).contains(&"record_process".to_string()));
        let call = json!({"name": "record_process", "arguments": {"pid": 1, "seconds": 1}});
        assert!(tools::call(&call, &opts(), &AtomicBool::new(false)).unwrap_err().contains("--allow-record"));
    }
}
