//! `cuflight record`: runs a command with the agent injected, and a collector session ([`crate::session`]) that
//! receives the shared-memory segment of every process of the run (children included) over a private socket,
//! drains their rings while they run and streams everything into one trace file (or one per rank, host or pid).
//!
//! Besides what every session promises (the file readable up to its last complete block, a full disk never
//! stopping the program): SIGINT, SIGTERM and SIGHUP sent to `record` are forwarded to the program (a terminal's
//! Ctrl-C already reached it), and `record` then finishes the file and exits with the program's status.
pub use crate::outputs::RecordError;
pub use crate::recorded_process::read_segment_once;
use crate::session::Session;
pub use crate::status::Progress;
pub use crate::summary::{Arming, RecordSummary};
pub use crate::window::Range;
use cuflight_format::channel;
use cuflight_format::segment;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How the agent enters the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inject {
    /// `CUDA_INJECTION64_PATH` (the driver loads the agent at cuInit) and `NVTX_INJECTION64_PATH`.
    Driver,
    /// `LD_PRELOAD` (the agent then routes both injection variables to itself).
    Preload,
}

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub output: PathBuf,
    pub command: Vec<String>,
    pub agent: PathBuf,
    pub inject: Inject,
    pub drain_interval: Duration,
    pub flush_ms: Option<u64>,
    /// How long to keep draining processes that outlive the command.
    pub linger: Duration,
    /// Replace an existing output file.
    pub force: bool,
    /// Keep only what lies inside the program's own marks (steps, profiler API, an NVTX range).
    pub range: Option<super::window::Range>,
    /// `--sample 1/N`: the agents record one step of every N whole, CUPTI quiet in between.
    pub sample: Option<u32>,
}

/// Finds `libcuflight.so`: `$CUFLIGHT_AGENT`, next to the running executable, or in `../lib` beside it.
pub fn find_agent() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUFLIGHT_AGENT").map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("libcuflight.so"), dir.join("../lib/libcuflight.so")].into_iter().find(|p| p.is_file())
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Runs the command under the agent and writes the trace.
pub fn record(opts: &RecordOptions) -> Result<RecordSummary, RecordError> {
    let mut session = Session::open(&opts.output, opts.force)?;
    if let Some(range) = &opts.range {
        session.set_window(super::window::Window::new(range.clone()));
    }
    let session_name = session.name.clone();

    // Signals for the program: a terminal's Ctrl-C reaches the whole foreground group (the program too), so
    // only signals sent to `record` itself (kill, docker stop, a batch system's time limit) are forwarded.
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP]).ok();

    let mut cmd = Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..]).env("CUFLIGHT_SESSION", &session_name);
    match opts.inject {
        Inject::Driver => {
            cmd.env("CUDA_INJECTION64_PATH", &opts.agent).env("NVTX_INJECTION64_PATH", &opts.agent);
        }
        Inject::Preload => {
            let preload = match std::env::var("LD_PRELOAD") {
                Ok(v) if !v.is_empty() => format!("{}:{v}", opts.agent.display()),
                _ => opts.agent.display().to_string(),
            };
            cmd.env("LD_PRELOAD", preload);
        }
    }
    if let Some(ms) = opts.flush_ms {
        cmd.env("CUFLIGHT_FLUSH_MS", ms.to_string());
    }
    match opts.sample {
        Some(n) => {
            // One seed for every process of the run, so that the ranks of a job record the same steps; one the
            // user exported (the same on every node of a multi-node job) is kept.
            if std::env::var_os("CUFLIGHT_SAMPLE_SEED").is_none() {
                cmd.env("CUFLIGHT_SAMPLE_SEED", (segment::monotonic_ns() ^ std::process::id() as u64).to_string());
            }
            cmd.env("CUFLIGHT_SAMPLE", n.to_string())
        }
        None => cmd.env_remove("CUFLIGHT_SAMPLE"),
    };
    // On failure the output is dropped, which removes what this command created (never an existing file).
    let mut child = cmd.spawn().map_err(|source| RecordError::Spawn { command: opts.command[0].clone(), source })?;
    let wait_ms = opts.drain_interval.as_millis().clamp(1, 10_000) as i32;
    let mut forwarded = Vec::new();
    let mut forward = |signals: &mut Option<SignalsInfo<WithOrigin>>, pid: Option<u32>| {
        let Some(signals) = signals.as_mut() else { return false };
        let mut any = false;
        for origin in signals.pending() {
            any = true;
            if let (Some(pid), false) = (pid, matches!(origin.cause, Cause::Kernel)) {
                let _ = channel::signal_process(pid, origin.signal);
                forwarded.push(signal_name(origin.signal));
            }
        }
        any
    };

    let mut status_line = super::status::StatusLine::for_stderr();
    let status = loop {
        session.step(false);
        forward(&mut signals, Some(child.id()));
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        status_line.show(|| session.progress());
        session.wait(wait_ms);
    };
    // Children may outlive the command; keep draining until they end, the linger time is up, or a signal asks
    // to stop.
    let deadline = Instant::now() + opts.linger;
    loop {
        session.step(true);
        if session.all_ended() || Instant::now() > deadline || forward(&mut signals, None) {
            break;
        }
        session.wait(wait_ms);
    }
    status_line.clear();
    let exit_code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let never_started = session.window_phase() == Some(super::window::Phase::Waiting);
    let arming = session.arming();
    let mut summary = session.finish(opts.command.clone(), Some(exit_code));
    summary.range_never_started = never_started;
    summary.arming = arming;
    summary.forwarded = forwarded;
    Ok(summary)
}

/// Default trace name in the current directory: `cuflight-<n>.cuf`, the first that does not exist.
pub fn default_output() -> PathBuf {
    (1..)
        .map(|n| PathBuf::from(format!("cuflight-{n}.cuf")))
        .find(|p| !Path::new(p).exists())
        .unwrap_or_else(|| PathBuf::from("cuflight.cuf"))
}
