//! `cuflight record --every DUR --count N -- CMD`: sampling windows of a program cuflight starts itself. The
//! program runs with the agent dormant, as under `cuflight launch`, and is attached to N times (window K written to
//! `<name>-K.<ext>`), CUPTI-free between windows; `record` then waits for the program and exits with its status.
//! Only the started process is sampled: its fork children stay quiet (a dormant agent's children have no control
//! socket), and programs it execs have dormant agents of their own that `cuflight attach` can reach.

use super::attach::{self, AttachError, AttachOptions, Attached};
use cuflight_format::channel;
use cuflight_format::control;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct SampledOptions {
    pub command: Vec<String>,
    pub agent: PathBuf,
    pub output: PathBuf,
    pub every: Duration,
    pub count: u32,
    pub duration: Option<Duration>,
    pub range: Option<super::window::Range>,
    pub force: bool,
    pub drain_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SampledError {
    #[error("cannot run '{command}': {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error(transparent)]
    Attach(#[from] AttachError),
}

/// What happened: the program's exit status, how many windows were taken, and why there were fewer than asked.
pub struct Sampled {
    pub exit_code: i32,
    pub windows: u32,
    pub short: Option<&'static str>,
}

/// Runs the program, takes the windows (calling `done` with each window's file and result), waits for the end.
pub fn record_sampled(opts: &SampledOptions, done: impl FnMut(&Path, &Attached)) -> Result<Sampled, SampledError> {
    let (program, args) = opts.command.split_first().expect("clap requires a command");
    let mut child = std::process::Command::new(program)
        .args(args)
        .env("CUDA_INJECTION64_PATH", &opts.agent)
        .env("NVTX_INJECTION64_PATH", &opts.agent)
        .env_remove("CUFLIGHT_SESSION")
        .env_remove("CUFLIGHT_FLIGHT_RECORDER")
        .spawn()
        .map_err(|source| SampledError::Spawn { command: program.clone(), source })?;
    let pid = child.id();
    // Signals for the program (as `record` forwards them): registered before anything else can take a while.
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP]).ok();
    // The agent answers once the program initialised CUDA (the driver loads it then).
    let mut windows = 0;
    let mut short = Some("the program ended before it used CUDA");
    loop {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        if signals.as_mut().is_some_and(|s| forward(s, pid)) {
            short = Some("interrupted before the program used CUDA");
            break;
        }
        if control::find(pid).ok().flatten().is_some() {
            let attach_opts = AttachOptions {
                pid,
                output: opts.output.clone(),
                duration: opts.duration,
                range: opts.range.clone(),
                drain_interval: opts.drain_interval,
                force: opts.force,
                every: Some(opts.every),
                count: opts.count,
                inject: None,
                // The program's environment carries record's --trace.
                trace: None,
            };
            windows = attach::attach(&attach_opts, done)?;
            short = (windows < opts.count).then_some("the program ended or a signal arrived first");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if let Some(s) = signals.as_mut() {
            forward(s, pid);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let exit_code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(Sampled { exit_code, windows, short })
}

/// Forwards signals sent to `record` itself (not a terminal's Ctrl-C, which reached the program already).
fn forward(signals: &mut SignalsInfo<WithOrigin>, pid: u32) -> bool {
    let mut any = false;
    for origin in signals.pending() {
        any = true;
        if !matches!(origin.cause, Cause::Kernel) {
            let _ = channel::signal_process(pid, origin.signal);
        }
    }
    any
}
