//! `cuflight attach PID`: records a window of a process whose agent is dormant (started with `cuflight launch`
//! or `CUDA_INJECTION64_PATH`), then leaves it dormant again.
//!
//! The collector opens a session as `record` does, asks the agent over its control socket to attach to it (the
//! agent makes or reuses its shared-memory segment, hands it over, subscribes to CUPTI), drains the window, and
//! asks it to detach: the agent flushes CUPTI into its rings, unsubscribes and marks the segment finished before
//! it answers, so the last drain after the answer holds the whole window.

use super::record::{RecordError, RecordSummary};
use super::session::Session;
use super::AGENT_REPLY_MS as REPLY_MS;
use cuflight_format::control;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct AttachOptions {
    pub pid: u32,
    /// The trace; with several windows, window N goes to `<stem>-N.<ext>`.
    pub output: PathBuf,
    /// How long a window lasts; with a `range`, the longest it may wait and last (None: until the range ends).
    pub duration: Option<Duration>,
    /// A window bounded by the program's own marks (profiler API, an NVTX range, steps).
    pub range: Option<super::window::Range>,
    pub drain_interval: Duration,
    pub force: bool,
    /// Sampling: a window starts every `every` (the agent is dormant, CUPTI-free, in between)...
    pub every: Option<Duration>,
    /// ... `count` times.
    pub count: u32,
    /// With no agent in the process, load this one into it first (`--inject`).
    pub inject: Option<PathBuf>,
    /// What the windows trace (`--trace`; None: what the program was launched with).
    pub trace: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("{}", super::recorded_process::no_agent_in(*.0, "start the program with `cuflight launch`, or attach with --inject; "))]
    NoAgent(u32),
    #[error("cannot list agents: {0}")]
    List(std::io::Error),
    #[error("the agent in process {pid} refused to attach: {why}")]
    Refused { pid: u32, why: String },
    #[error("cannot reach the agent in process {pid}: {source}")]
    Control { pid: u32, source: cuflight_format::channel::ChannelError },
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Inject(#[from] cuflight_inject::InjectError),
    #[error("the agent was loaded into process {0} but does not answer (its control socket could not start)")]
    Silent(u32),
    #[error("cannot make the agent visible to the process: {0}")]
    Copy(String),
}

/// What an attach produced, and why its window ended.
#[derive(Clone, Debug)]
pub struct Attached {
    pub summary: RecordSummary,
    pub ended: &'static str,
    pub arming: super::record::Arming,
}

/// The file of window `n` (1-based) of `count`.
pub fn window_path(output: &Path, n: u32, count: u32) -> PathBuf {
    if count <= 1 {
        return output.to_path_buf();
    }
    let stem = output.file_stem().map_or_else(|| "window".into(), |s| s.to_string_lossy().into_owned());
    let name = match output.extension() {
        Some(ext) => format!("{stem}-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{n}"),
    };
    output.with_file_name(name)
}

/// Records the windows asked for, calling `done` with each window's file and result as it completes. Stops
/// early when the process exits or a signal arrives (the window in progress is still written).
pub fn attach(opts: &AttachOptions, mut done: impl FnMut(&Path, &Attached)) -> Result<u32, AttachError> {
    let name = match (control::find(opts.pid).map_err(AttachError::List)?, &opts.inject) {
        (Some(name), _) => name,
        (None, None) => return Err(AttachError::NoAgent(opts.pid)),
        (None, Some(agent)) => inject(opts.pid, agent)?,
    };
    // Ctrl-C, SIGTERM or SIGHUP end the window in progress (still written) and the sampling.
    // SIGUSR1: the program itself ends the window (`cuflight.capture()` leaving its block), a normal end.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1]).ok();
    let count = opts.count.max(1);
    let mut next_start = Instant::now();
    for n in 1..=count {
        let path = window_path(&opts.output, n, count);
        let window = record_window(opts, &name, &path, &mut signals)?;
        done(&path, &window);
        if !matches!(window.ended, "the duration passed" | "the range ended") || n == count {
            return Ok(n);
        }
        // Dormant until the next window: wait in short steps, watching for signals and the process's end.
        next_start += opts.every.or(opts.duration).unwrap_or_default();
        while Instant::now() < next_start {
            if signals.as_mut().is_some_and(|s| s.pending().next().is_some()) {
                return Ok(n);
            }
            if control::query(&name).is_err() {
                return Ok(n); // the process (or its agent) is gone
            }
            std::thread::sleep(next_start.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
        }
    }
    Ok(count)
}

fn record_window(
    opts: &AttachOptions,
    name: &str,
    path: &Path,
    signals: &mut Option<signal_hook::iterator::Signals>,
) -> Result<Attached, AttachError> {
    let mut session = Session::open_near(path, opts.force, control::netns_of(name), control::uid_of(name))?;
    // Every window starts once the agent is armed: a duration counts from there too.
    let range = opts.range.clone().unwrap_or(super::window::Range::Armed {
        ns: opts.duration.map(|d| d.as_nanos().min(u64::MAX as u128) as u64),
        delay_ns: 0,
    });
    session.set_window(super::window::Window::new(range));
    let pid = opts.pid;
    // On a refusal the output is dropped uncommitted: nothing is left behind.
    request_attach(name, &session.name, pid, opts.trace)?;
    let wait_ms = opts.drain_interval.as_millis().clamp(1, 10_000) as i32;
    let deadline = opts.duration.map(|d| Instant::now() + d);
    let ended = loop {
        session.step(false);
        if session.all_ended() && session.processes() > 0 {
            break "the process exited";
        }
        if opts.range.is_some() && matches!(session.window_phase(), Some(super::window::Phase::Closed(..))) {
            break "the range ended";
        }
        if let Some(sig) = signals.as_mut().and_then(|s| s.pending().next()) {
            break if sig == SIGUSR1 { "the program ended the window" } else { "interrupted" };
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break if opts.range.is_some() && session.window_phase() == Some(super::window::Phase::Waiting) {
                "the duration passed before the range started"
            } else {
                "the duration passed"
            };
        }
        session.wait(wait_ms);
    };
    if ended != "the process exited" {
        if let Some(why) = request_detach(name) {
            crate::notice!("cuflight: the agent in process {pid} {why}");
        }
    }
    let arming = session.arming();
    let summary = session.finish(vec![format!("attach {pid}")], None);
    Ok(Attached { summary, ended, arming })
}

/// Asks the agent behind control socket `name` (process `pid`) to attach to `session`, tracing `trace`.
pub(super) fn request_attach(name: &str, session: &str, pid: u32, trace: Option<u32>) -> Result<(), AttachError> {
    match control::command(name, control::COMMAND_ATTACH, &control::attach_payload(session, trace), REPLY_MS) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(why)) => Err(AttachError::Refused { pid, why }),
        Err(source) => Err(AttachError::Control { pid, source }),
    }
}

/// Asks it to detach (the window's end); None when it did, else why not.
pub(super) fn request_detach(name: &str) -> Option<String> {
    match control::command(name, control::COMMAND_DETACH, &[], REPLY_MS) {
        Ok(Ok(())) => None,
        Ok(Err(why)) => Some(format!("did not detach cleanly: {why}")),
        Err(e) => Some(format!("could not be reached to detach: {e}")),
    }
}

/// Loads the agent into a process started without it and waits for its control socket.
fn inject(pid: u32, agent: &Path) -> Result<String, AttachError> {
    if !cuflight_inject::loaded(pid, agent) {
        cuflight_inject::check(pid)?;
        match visible_copy(pid, agent)? {
            None => cuflight_inject::inject(pid, agent, Duration::from_secs(30))?,
            Some(copy) => {
                // A process in another mount namespace (a container) sees another file system: the agent goes in
                // as a copy in its /tmp, removed once loaded (the mapping stays).
                let seen = Path::new("/").join(copy.strip_prefix(format!("/proc/{pid}/root")).unwrap_or(&copy));
                let result = cuflight_inject::inject(pid, &seen, Duration::from_secs(30));
                let _ = std::fs::remove_file(&copy);
                result?;
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(name) = control::find(pid).map_err(AttachError::List)? {
            return Ok(name);
        }
        if Instant::now() >= deadline {
            return Err(AttachError::Silent(pid));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// None when the process sees `agent` at the same path (the same file); else a fresh copy of it inside the
/// process's root (`/proc/PID/root/tmp/...`), created exclusively so nothing planted there is used.
fn visible_copy(pid: u32, agent: &Path) -> Result<Option<PathBuf>, AttachError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let theirs = root.join(agent.strip_prefix("/").unwrap_or(agent));
    let ours = std::fs::metadata(agent).map_err(|e| AttachError::Copy(format!("{}: {e}", agent.display())))?;
    if std::fs::metadata(&theirs).is_ok_and(|m| m.dev() == ours.dev() && m.ino() == ours.ino()) {
        return Ok(None);
    }
    let bytes = std::fs::read(agent).map_err(|e| AttachError::Copy(format!("{}: {e}", agent.display())))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let copy = root.join(format!("tmp/cuflight-agent-{}-{nanos:09}.so", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&copy)
        .map_err(|e| AttachError::Copy(format!("cannot place the agent in the process's /tmp ({e})")))?;
    std::io::Write::write_all(&mut file, &bytes).map_err(|e| AttachError::Copy(e.to_string()))?;
    Ok(Some(copy))
}

/// A duration as users write it: `10s`, `500ms`, `2m`, `1h`, or plain seconds (`1.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.trim().parse().map_err(|_| format!("'{text}' is not a duration (e.g. 10s, 500ms, 2m)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("'{text}': unknown unit '{unit}' (use ms, s, m or h)")),
    };
    let secs = value * scale;
    if !secs.is_finite() || secs <= 0.0 || secs > 7.0 * 86400.0 {
        return Err(format!("'{text}': a duration must be positive and at most a week"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_get_numbered_files() {
        assert_eq!(window_path(Path::new("w.cuf"), 1, 1), PathBuf::from("w.cuf"));
        assert_eq!(window_path(Path::new("out/w.cuf"), 2, 3), PathBuf::from("out/w-2.cuf"));
        assert_eq!(window_path(Path::new("w"), 3, 3), PathBuf::from("w-3"));
    }

    #[test]
    fn durations_parse_as_written() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }
}
