//! `cuflight serve`: one long-running collector that follows every cuflight agent this user may control (the ones
//! started later too; exited ones are dropped) and serves their GPU work as Prometheus metrics on `GET /metrics`.
//!
//! Dormant agents are sampled in windows (`--duty ON/PERIOD`, 1s/10s by default): each period every followed
//! process is attached for ON, its window folded into counters ([`metrics`]) and the window's file removed, so
//! the program pays the dormant cost plus ON/PERIOD of the recording cost; `cuflight_window_seconds_total` says
//! what share of time the counters cover. `--duty continuous` records back to back.
//!
//! Every window is a CUPTI session, and CUPTI keeps memory of each one after `cuptiFinalize` (74 KB in use a cycle
//! on an H200, CUDA 13.0, with or without callbacks, records or an unsubscribe first: tests/gpu/attach_cycles.cu,
//! 2026-11-28; keeping one subscriber between windows kept nothing but left launches 19-23% slower between them).
//! So a process's windows are spaced out as its sessions add up: after every `--window-budget` sessions (360, an
//! hour at 1s/10s) its period doubles, and the memory CUPTI keeps grows with the logarithm of the time followed
//! (27 MB the first hour, 27 MB more by the third, the seventh, the fifteenth...), not in proportion to it.

pub mod exposition;
mod flight;
mod follow;
mod http;
pub mod metrics;

use crate::LiveError;
use cuflight_capture::{agents, attach};
use metrics::ProcessMetrics;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much of the time windows cover.
#[derive(Clone, Copy, Debug)]
pub struct Duty {
    pub on: Duration,
    pub period: Duration,
    /// Recorded without pause: each dormant agent is attached once and its work folded every period.
    pub continuous: bool,
    /// CUPTI sessions of a process after which its period doubles (again after as many more); 0: never.
    pub budget: u32,
    /// One line on stderr per window (`serve --log-windows`): when it was asked for, how long arming took, what it
    /// recorded. Lines up a program's own timings with the windows that cost it.
    pub log: bool,
}

/// `--window-budget`'s default: an hour of windows at the default duty (1s/10s), about 27 MB of CUPTI's.
pub const DEFAULT_WINDOW_BUDGET: u32 = 360;

/// `1s/10s` (ON/PERIOD) or `continuous` (windows back to back, as long as `--interval`: ON = PERIOD = 0 here).
pub fn parse_duty(text: &str) -> Result<Duty, String> {
    if text == "continuous" {
        return Ok(Duty {
            on: Duration::ZERO,
            period: Duration::ZERO,
            continuous: true,
            budget: DEFAULT_WINDOW_BUDGET,
            log: false,
        });
    }
    let Some((on, period)) = text.split_once('/') else {
        return Err(format!("'{text}': give ON/PERIOD (1s/10s) or continuous"));
    };
    let (on, period) = (attach::parse_duration(on)?, attach::parse_duration(period)?);
    if on.is_zero() || on > period {
        return Err(format!("'{text}': the window must be longer than zero and at most the period"));
    }
    Ok(Duty { on, period, continuous: false, budget: DEFAULT_WINDOW_BUDGET, log: false })
}

impl Duty {
    /// `continuous` folds every `interval`.
    pub fn or_continuous(self, interval: Duration) -> Duty {
        if self.continuous {
            Duty { on: interval, period: interval, continuous: true, ..self }
        } else {
            self
        }
    }
}

pub struct ServeOptions {
    pub listen: SocketAddr,
    pub allow_remote: bool,
    pub duty: Duty,
    /// Only these processes (empty: every agent this user may control).
    pub pids: Vec<u32>,
    /// Stop after this many periods (tests; None: until a signal).
    pub rounds: Option<u64>,
}

/// The followed processes' metrics, shared between the sampling loop and whoever shows them.
pub type Shared = Arc<Mutex<BTreeMap<u32, ProcessMetrics>>>;

/// Serves until SIGINT or SIGTERM (or `rounds` periods), then lets every agent go dormant again.
pub fn serve(opts: &ServeOptions) -> Result<(), LiveError> {
    if !opts.listen.ip().is_loopback() && !opts.allow_remote {
        return Err(LiveError::RemoteRefused(opts.listen));
    }
    // The windows' files, in a directory of this process's own: made first, so that serve says it serves only
    // once it can.
    let scratch = cuflight_capture::private_dir::PrivateDir::new("serve")?;
    let listener =
        std::net::TcpListener::bind(opts.listen).map_err(|err| LiveError::Listen { addr: opts.listen, err })?;
    let addr = listener.local_addr()?;
    if opts.duty.continuous {
        cuflight_capture::notice!(
            "cuflight: serving http://{addr}/metrics (recording continuously, folded every {:?})",
            opts.duty.period
        );
    } else {
        cuflight_capture::notice!(
            "cuflight: serving http://{addr}/metrics (windows of {:?} every {:?})",
            opts.duty.on,
            opts.duty.period
        );
    }
    let shared: Shared = Arc::default();
    {
        let shared = shared.clone();
        std::thread::spawn(move || {
            http::run(listener, move |om| exposition::render(&shared.lock().expect("metrics"), om))
        });
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    sample_loop(&opts.pids, opts.duty, &shared, &stop, opts.rounds, scratch.path())
}

/// Samples every period until `stop` (or `rounds` periods), then lets every agent go dormant again. The windows'
/// files go in `scratch`, a directory of the caller's own.
pub fn sample_loop(
    pids: &[u32],
    duty: Duty,
    shared: &Shared,
    stop: &Arc<AtomicBool>,
    rounds: Option<u64>,
    scratch: &Path,
) -> Result<(), LiveError> {
    let followers = follow::Followers::new(stop.clone());
    let flights = {
        let (pids, shared, scratch, stop) = (pids.to_vec(), shared.clone(), scratch.to_path_buf(), stop.clone());
        std::thread::spawn(move || flight::follow(&pids, &shared, &scratch, &stop))
    };
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) && rounds.is_none_or(|r| round < r) {
        let started = Instant::now();
        if duty.continuous {
            followers.follow_new(pids, duty.period, shared, scratch);
        } else {
            sample_round(pids, duty, shared, scratch, round);
        }
        round += 1;
        while started.elapsed() < duty.period && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50).min(duty.period));
        }
    }
    stop.store(true, Ordering::Relaxed);
    followers.join();
    let _ = flights.join();
    Ok(())
}

/// One period: follow the agents there are now (those in `pids`, or all), record a window of each dormant one
/// whose turn it is (its spacing, [`ProcessMetrics::stride`]) at once, fold them in.
pub fn sample_round(pids: &[u32], duty: Duty, shared: &Shared, scratch: &Path, round: u64) {
    let rows = refresh(pids, shared);
    let due: Vec<u32> = {
        let mut all = shared.lock().expect("metrics");
        rows.iter()
            .filter(|r| r.state == "dormant")
            .filter_map(|r| {
                let m = all.get_mut(&r.pid)?;
                let stride = m.stride(duty.budget);
                let period = (duty.period.as_nanos() as u64).saturating_mul(stride);
                if m.window_period_ns != 0 && period > m.window_period_ns {
                    cuflight_capture::notice!(
                        "cuflight serve: pid {} has had {} CUPTI sessions (CUPTI keeps about {} MB of them): a window \
                         every {:.1} s from now",
                        r.pid,
                        m.cupti_sessions,
                        m.cupti_sessions.saturating_mul(cuflight_format::control::CUPTI_KEEPS_PER_SESSION) >> 20,
                        period as f64 / 1e9
                    );
                }
                m.window_period_ns = period;
                let due = m.last_window_round.is_none_or(|last| round.saturating_sub(last) >= stride);
                if due {
                    m.last_window_round = Some(round);
                }
                due.then_some(r.pid)
            })
            .collect()
    };
    let windows: Vec<_> = due
        .into_iter()
        .map(|pid| {
            let on = duty.on;
            let path = scratch.join(format!("{pid}-{round}.cuf"));
            std::thread::spawn(move || {
                let (started, asked_ns) = (Instant::now(), unix_ns());
                let window = record_window(pid, &path, on);
                let took = started.elapsed();
                if duty.log {
                    cuflight_capture::notice!("{}", window_line(pid, round, asked_ns, took, window.as_ref()));
                }
                // A window whose file could not be written (a full temporary directory) was said by the
                // recording; folding what is left of it would only add that it cannot be read.
                let lost = match &window {
                    Err(_) => Some("not_recorded"),
                    Ok(w) if w.summary.stopped.is_some() => Some("unwritten"),
                    Ok(_) => None,
                };
                (pid, path, lost, took)
            })
        })
        .collect();
    for w in windows {
        let Ok((pid, path, lost, took)) = w.join() else { continue };
        match lost {
            Some(why) => count_lost(shared, pid, why),
            None => {
                let covered = took.min(duty.on).as_nanos() as u64;
                fold_into(shared, pid, &path, covered, None, &format!("pid {pid}'s window"), |_| {});
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// A window of `pid` wanted but not folded, and why ([`metrics::LOST_WINDOWS`]).
fn count_lost(shared: &Shared, pid: u32, why: &'static str) {
    if let Some(m) = shared.lock().expect("metrics").get_mut(&pid) {
        *m.windows_lost.entry(why).or_default() += 1;
    }
}

/// Folds the recording at `path` (`what`: a window, a part of a continuous recording, a flight recorder's snapshot)
/// covering `covered_ns` into `pid`'s metrics, once `prepare` has adjusted them; `carried`: the device memory of
/// the recording's earlier parts. Folded into a copy outside the lock (a report of it takes milliseconds), so
/// scrapes never wait on it. False where `pid` is followed no more.
fn fold_into(
    shared: &Shared,
    pid: u32,
    path: &Path,
    covered_ns: u64,
    carried: Option<&mut cuflight_trace::model::memory::LiveMemory>,
    what: &str,
    prepare: impl FnOnce(&mut ProcessMetrics),
) -> bool {
    let Some(mut m) = shared.lock().expect("metrics").get(&pid).cloned() else { return false };
    prepare(&mut m);
    let open = || cuflight_trace::model::source::EventSource::open(path).map_err(|e| e.to_string());
    match open().and_then(|mut s| m.fold(&mut s, covered_ns, carried)) {
        Ok(()) => {
            // Idle causes need a report of it; one that cannot be made costs only them.
            if let Err(e) = open().and_then(|s| m.fold_idle(s)) {
                cuflight_capture::notice!("cuflight serve: idle causes left out of {what}: {e}");
            }
            if let Some(now) = shared.lock().expect("metrics").get_mut(&pid) {
                (m.state, m.command) = (now.state, now.command.clone());
                *now = m;
            }
        }
        Err(e) => {
            cuflight_capture::notice!("cuflight serve: {what} unreadable: {e}");
            count_lost(shared, pid, "unreadable");
        }
    }
    true
}

/// The agents there are now (those in `pids`, or all): exited ones dropped from `shared`, new ones added, states
/// updated.
fn refresh(pids: &[u32], shared: &Shared) -> Vec<agents::AgentRow> {
    let rows = agents::list().unwrap_or_default();
    let rows: Vec<_> = rows.into_iter().filter(|r| pids.is_empty() || pids.contains(&r.pid)).collect();
    let mut all = shared.lock().expect("metrics");
    all.retain(|pid, _| rows.iter().any(|r| r.pid == *pid));
    for r in &rows {
        let m = all.entry(r.pid).or_default();
        (m.state, m.command, m.cupti_sessions) = (r.state, r.command.clone(), u64::from(r.cupti_sessions));
    }
    rows
}

/// `--log-windows`' line for one window: asked for at `asked_ns` (CLOCK_REALTIME, printed as Unix seconds too,
/// the clock programs log in), over after `took`.
fn window_line(
    pid: u32,
    round: u64,
    asked_ns: u64,
    took: Duration,
    window: Result<&attach::Attached, &String>,
) -> String {
    let at = format!(
        "cuflight serve: pid {pid} period {} window asked at {} (unix {}.{:06})",
        round + 1,
        cuflight_report::run::utc(asked_ns),
        asked_ns / 1_000_000_000,
        asked_ns % 1_000_000_000 / 1000
    );
    let w = match window {
        Ok(w) => w,
        Err(why) => return format!("{at}: not recorded: {}", cuflight_capture::doctor_checks::with_pointer(why)),
    };
    let armed =
        w.arming.took_ns.map_or_else(|| "never armed".into(), |ns| format!("armed in {:.1} ms", ns as f64 / 1e6));
    format!(
        "{at}: {armed}, over after {:.3} s ({}), {} events, {}",
        took.as_secs_f64(),
        w.ended,
        w.summary.events,
        w.summary.losses_line()
    )
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Attaches to `pid` for `on`; why not when the window could not be recorded (the process left, another collector).
fn record_window(pid: u32, path: &Path, on: Duration) -> Result<attach::Attached, String> {
    let opts = attach::AttachOptions {
        pid,
        output: path.to_path_buf(),
        duration: Some(on),
        range: None,
        drain_interval: Duration::from_millis(10),
        force: true,
        every: None,
        count: 1,
        inject: None,
        trace: None,
    };
    let mut recorded = None;
    attach::attach(&opts, |_, window| recorded = Some(window.clone())).map_err(|e| e.to_string())?;
    recorded.ok_or_else(|| "no window was recorded".to_string())
}
