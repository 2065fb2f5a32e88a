//! Agents already running in processes of this machine (`cuflight ps`), and starting a program with a dormant
//! agent (`cuflight launch`). Finding and asking agents is `cuflight_format::control`; this module turns their
//! answers into rows.

use cuflight_format::control;
use std::io::Read;
use std::path::Path;

/// One process with a cuflight agent that this user may control.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct AgentRow {
    /// In this process's pid namespace.
    pub pid: u32,
    /// The user the process runs as (and the agent's control channel belongs to).
    pub uid: u32,
    /// dormant, recording, flight recorder; with `--all`, "no agent" for a CUDA process without one.
    pub state: &'static str,
    /// When the agent entered its state (Unix time, ns).
    pub since_unix_ns: u64,
    /// `cuDriverGetVersion` (e.g. 13000), 0 when unknown.
    pub cuda_driver_version: u32,
    /// The CUPTI API version in use; 0 while none is loaded (dormant).
    pub cupti_version: u32,
    /// CUPTI sessions the agent set up so far (recording, attach windows); 0 from agents older than the count.
    pub cupti_sessions: u32,
    /// The process's command line (`/proc/PID/cmdline`, arguments joined by spaces).
    pub command: String,
}

/// The agents this user may control, by pid.
pub fn list() -> std::io::Result<Vec<AgentRow>> {
    Ok(control::agents()?
        .into_iter()
        .map(|a| AgentRow {
            pid: a.pid,
            uid: a.uid,
            state: control::state_name(a.status.state),
            since_unix_ns: a.status.since_ns,
            cuda_driver_version: a.status.driver_version,
            cupti_version: a.status.cupti_version,
            cupti_sessions: a.status.cupti_sessions,
            command: command_line(a.pid),
        })
        .collect())
}

/// With `all`: also the CUDA processes of this user (root: everyone's) that have no agent, as state
/// "no agent" (`cuflight attach --inject PID` can load one): those that map the CUDA driver (libcuda, loaded by
/// every CUDA program once CUDA starts) or the shared CUDA runtime (libcudart, as PyTorch wheels ship it).
pub fn list_all() -> std::io::Result<Vec<AgentRow>> {
    let mut rows = list()?;
    let me = cuflight_format::channel::euid();
    let known: std::collections::HashSet<u32> = rows.iter().map(|r| r.pid).collect();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if known.contains(&pid) || pid == std::process::id() {
            continue;
        }
        let uid = std::os::unix::fs::MetadataExt::uid(&match entry.metadata() {
            Ok(m) => m,
            Err(_) => continue,
        });
        if uid != me && me != 0 {
            continue;
        }
        // Reading maps needs the same access as ptrace: processes we could not inject into are skipped too.
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { continue };
        let cuda = maps.lines().any(|l| {
            l.split_whitespace()
                .nth(5)
                .and_then(|p| p.rsplit('/').next())
                .is_some_and(|f| f.starts_with("libcuda.so") || f.starts_with("libcudart.so"))
        });
        if cuda {
            rows.push(AgentRow {
                pid,
                uid,
                state: "no agent",
                since_unix_ns: 0,
                cuda_driver_version: 0,
                cupti_version: 0,
                cupti_sessions: 0,
                command: command_line(pid),
            });
        }
    }
    rows.sort_by_key(|r| r.pid);
    Ok(rows)
}

/// `/proc/PID/cmdline` with spaces between arguments (at most 4 KiB of it).
fn command_line(pid: u32) -> String {
    let mut raw = Vec::new();
    if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/cmdline")) {
        let _ = f.take(4096).read_to_end(&mut raw);
    }
    let text = String::from_utf8_lossy(&raw);
    text.trim_end_matches('\0').replace('\0', " ")
}

fn elapsed(since_ns: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let s = now.saturating_sub(since_ns) / 1_000_000_000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

fn driver(v: u32) -> String {
    if v == 0 {
        "-".into()
    } else {
        format!("{}.{}", v / 1000, v % 1000 / 10)
    }
}

/// The rows as a table (`cuflight ps`).
pub fn table(rows: &[AgentRow]) -> String {
    if rows.is_empty() {
        return "no cuflight agents this user may control (start a program with `cuflight launch -- CMD`)\n".into();
    }
    // SESSIONS: CUPTI sessions so far (recording, windows), each leaving memory in the program (serve's docs).
    let mut out = format!(
        "{:>8} {:<15} {:>8} {:>5} {:>7} {:>8}  {}\n",
        "PID", "STATE", "SINCE", "CUDA", "CUPTI", "SESSIONS", "COMMAND"
    );
    for r in rows {
        let cupti = if r.cupti_version == 0 { "-".to_string() } else { r.cupti_version.to_string() };
        let since = if r.since_unix_ns == 0 { "-".to_string() } else { elapsed(r.since_unix_ns) };
        let sessions = if r.state == "no agent" { "-".to_string() } else { r.cupti_sessions.to_string() };
        out += &format!(
            "{:>8} {:<15} {:>8} {:>5} {:>7} {:>8}  {}\n",
            r.pid,
            r.state,
            since,
            driver(r.cuda_driver_version),
            cupti,
            sessions,
            r.command
        );
    }
    out
}

/// Replaces this process with `command`, its agent dormant (the driver loads it through CUDA_INJECTION64_PATH,
/// NVTX through NVTX_INJECTION64_PATH; no session, so it records nothing until asked). The program keeps this
/// process's pid, signals and exit status. Returns only if the exec failed.
/// With a `flight` recorder, the agent records from the start into rings that keep the newest events instead.
pub fn launch(agent: &Path, command: &[String], flight: Option<&FlightRecorder>) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = command.split_first() else {
        return std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command given");
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .env("CUDA_INJECTION64_PATH", agent)
        .env("NVTX_INJECTION64_PATH", agent)
        .env_remove("CUFLIGHT_SESSION")
        .env_remove("CUFLIGHT_FLIGHT_RECORDER")
        .env_remove("CUFLIGHT_DUMP_DIR")
        .env_remove("CUFLIGHT_HANG_TIMEOUT")
        .env_remove("CUFLIGHT_SLOW_STEP")
        .env_remove("CUFLIGHT_DUMP_MAX_USE")
        .env_remove("CUFLIGHT_DUMP_KEEP_FREE");
    if let Some(f) = flight {
        cmd.env("CUFLIGHT_FLIGHT_RECORDER", f.span.as_nanos().to_string()).env("CUFLIGHT_DUMP_DIR", &f.dump_dir);
        if let Some(h) = f.hang_timeout {
            cmd.env("CUFLIGHT_HANG_TIMEOUT", h.as_nanos().to_string());
        }
        if let Some(factor) = f.slow_step {
            // The agent reads the factor in thousandths (no float parsing in it).
            cmd.env("CUFLIGHT_SLOW_STEP", ((factor * 1000.0).round() as u64).to_string());
        }
        if let Some(bytes) = f.limits.max_use {
            cmd.env("CUFLIGHT_DUMP_MAX_USE", bytes.to_string());
        }
        if let Some(bytes) = f.limits.keep_free {
            cmd.env("CUFLIGHT_DUMP_KEEP_FREE", bytes.to_string());
        }
    }
    cmd.exec()
}

/// `cuflight launch --flight-recorder`'s settings, as the agent reads them from its environment.
pub struct FlightRecorder {
    pub span: std::time::Duration,
    /// Absolute: the program may change its working directory.
    pub dump_dir: std::path::PathBuf,
    pub hang_timeout: Option<std::time::Duration>,
    /// `--dump-on-slow-step`: dump when a step takes this many times the typical one.
    pub slow_step: Option<f64>,
    /// `--dump-max-use`, `--dump-keep-free`.
    pub limits: cuflight_format::segment::dump_dir::Limits,
}
