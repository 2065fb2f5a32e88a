//! `cuflight top`: the followed processes' GPU work, live, refreshed every second (as `top` shows CPU work): per
//! process and GPU its busy share, launches per second, threads waiting in synchronisation on average (SYNC-THR:
//! summed over threads, so 1.60 is more than one thread always waiting, not a share), device memory, records lost
//! and command; under it, the selected process's kernel time by category in GPU-seconds per second (summed over
//! streams and devices: above 1 where kernels overlap), its steps (or a server's iterations by kind) a second and
//! their mean time, its GPU idle time by cause, and what the windows cost its threads (serve's
//! `cuflight_agent_overhead_seconds_total` over window time, summed over threads). The numbers come from `serve`'s
//! sampling (windows folded into counters); rates are over the time the windows covered since the previous refresh.
//! What the sampler has to say meanwhile (a window it could not write) is shown above the keys and listed when top
//! ends. Keys: ↑/↓ (k/j) pick a process, s changes the sort, q or Ctrl-C quits.

use crate::serve::{self, metrics::ProcessMetrics, Duty, Shared};
use crate::LiveError;
use cuflight_capture::private_dir::PrivateDir;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, TableState};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One process's rates on one GPU between two refreshes (its process-wide figures repeated on each GPU's row).
#[derive(Default, Clone)]
struct Rates {
    pid: u32,
    /// None before the process's first window saw device work.
    device: Option<u32>,
    busy: f64,
    launches: f64,
    sync: f64,
    memory: Option<u64>,
    dropped: u64,
    command: String,
    state: &'static str,
    categories: Vec<(String, f64)>,
    idle: Vec<(String, f64)>,
    /// Calls that failed since the process was first seen (not the expected answers), most first.
    failed: Vec<(String, u64)>,
    /// The agent's CUPTI sessions, and the time between its windows now (0: none yet, or continuous).
    sessions: u64,
    period_ns: u64,
    /// Windows folded, and those lost by why (serve's [`crate::serve::metrics::LOST_WINDOWS`]), since top began.
    windows: u64,
    lost: Vec<(&'static str, u64)>,
    /// What the recording cost the program's threads per second of window (serve's overhead sources, summed).
    cost: f64,
    /// Steps by kind: how many a second of window, and their mean duration in ns.
    steps: Vec<(&'static str, f64, u64)>,
    /// The device counters of the last window (processes launched with `--gpu-metrics`), on a device's row.
    counters: Option<cuflight_format::view::GpuSample>,
}

#[derive(Clone, Copy, PartialEq)]
enum Sort {
    Busy,
    Launches,
    Pid,
}

pub fn top(pids: Vec<u32>, duty: Duty) -> Result<(), LiveError> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(LiveError::NoTerminal);
    }
    let shared: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (sampler_done, sampler_ended) = std::sync::mpsc::channel::<()>();
    // The sampler's windows' files: top's own, so that an exit on a signal removes them whether or not the sampler
    // ended in time.
    let scratch = PrivateDir::new("serve")?;
    let mut notices = Notices { from: Some(cuflight_capture::notice::divert()), ..Notices::default() };
    let sampler = {
        let (shared, stop, dir) = (shared.clone(), stop.clone(), scratch.path().to_path_buf());
        std::thread::spawn(move || {
            let r = serve::sample_loop(&pids, duty, &shared, &stop, None, &dir);
            let _ = sampler_done.send(());
            r
        })
    };
    let signals = end_on_signals(stop.clone(), sampler_ended)?;
    let result = match enter_terminal() {
        Ok(mut terminal) => {
            let r = ui(&mut terminal, &shared, &mut notices);
            let _ = ratatui::try_restore();
            if r.is_err() {
                // The terminal failed (hung up): ratatui's drop would report its failure to show the cursor with
                // `eprintln!`, whose own failure is a panic, an exit with the sampler's window still open.
                std::mem::forget(terminal);
            }
            r
        }
        Err(e) => Err(LiveError::Terminal(e)),
    };
    signals.close();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    drop(scratch);
    notices.tell_after();
    result
}

/// What the sampler had to say while top ran ([`mod@cuflight_capture::notice`]: on the terminal, it would have landed
/// over the table): the latest on a line above the keys, and the first few and the last listed once top ends.
#[derive(Default)]
struct Notices {
    from: Option<std::sync::mpsc::Receiver<String>>,
    first: Vec<String>,
    latest: Option<String>,
    count: u64,
}

impl Notices {
    const LISTED: usize = 5;

    fn take_new(&mut self) {
        let Some(from) = &self.from else { return };
        for line in from.try_iter() {
            self.count += 1;
            if self.first.len() < Self::LISTED && !self.first.contains(&line) {
                self.first.push(line.clone());
            }
            self.latest = Some(line);
        }
    }

    /// The latest, for the line above the keys.
    fn shown(&self) -> Option<String> {
        let latest = self.latest.as_deref()?;
        Some(match self.count {
            1 => latest.to_string(),
            n => format!("{n} notices (listed when top ends), the latest: {latest}"),
        })
    }

    /// Lists them on standard error, the terminal restored (a failed write loses them: no one is there).
    fn tell_after(&mut self) {
        self.take_new();
        self.from = None; // later ones (none: the sampler has ended) go to standard error again
        let Some(latest) = &self.latest else { return };
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = match self.count {
            1 => writeln!(err, "cuflight top: while it ran:"),
            n if n as usize <= self.first.len() => writeln!(err, "cuflight top: {n} notices while it ran:"),
            n => writeln!(err, "cuflight top: {n} notices while it ran; the first different ones and the last:"),
        };
        for line in &self.first {
            let _ = writeln!(err, "  {line}");
        }
        if !self.first.contains(latest) {
            let _ = writeln!(err, "  {latest}");
        }
    }
}

/// The terminal going away (ssh dropped, the tmux pane killed: SIGHUP) or a kill (SIGTERM) ends top from a thread
/// of its own: crossterm's read of a hung-up terminal does not return, so the interface's loop never sees it (a
/// top whose terminal was gone kept running, a core busy, attached to every agent it could). The sampler is
/// stopped (its window ends; the agents return to dormant), given 5 s for that, then the process exits with 128 +
/// the signal, as a shell reports a process a signal ended, its scratch directory removed first (`exit` runs no
/// destructor; a loaded machine once took longer than 5 s to end a window). The interface, its next draw failing,
/// may be ending `top` at the same moment: `remove_all_then` keeps the two from cutting each other short.
fn end_on_signals(
    stop: Arc<AtomicBool>,
    sampler_ended: std::sync::mpsc::Receiver<()>,
) -> Result<signal_hook::iterator::Handle, LiveError> {
    use signal_hook::consts::{SIGHUP, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGTERM]).map_err(LiveError::Terminal)?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            stop.store(true, Ordering::Relaxed);
            let _ = sampler_ended.recv_timeout(Duration::from_secs(5));
            let restore = || {
                let _ = ratatui::try_restore();
            };
            cuflight_capture::private_dir::remove_all_then(restore, 128 + signal);
        }
    });
    Ok(handle)
}

/// The terminal in raw mode on its alternate screen, restored if a thread panics. Not `ratatui::try_init`: its
/// panic hook restores the terminal with `ratatui::restore`, which reports a failure with `eprintln!`; with the
/// terminal hung up that print panics inside the hook and the process aborts, skipping every clean-up (top's
/// scratch directory was left behind, CI stop 75). A restore that fails here says nothing: there is no one to
/// tell.
fn enter_terminal() -> std::io::Result<ratatui::DefaultTerminal> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = ratatui::try_restore();
        hook(info);
    }));
    ratatui::crossterm::terminal::enable_raw_mode()?;
    ratatui::crossterm::execute!(std::io::stdout(), ratatui::crossterm::terminal::EnterAlternateScreen)?;
    ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))
}

fn ui(terminal: &mut ratatui::DefaultTerminal, shared: &Shared, notices: &mut Notices) -> Result<(), LiveError> {
    let mut before: BTreeMap<u32, ProcessMetrics> = BTreeMap::new();
    let mut rates: Vec<Rates> = Vec::new();
    let (mut sort, mut table) = (Sort::Busy, TableState::default().with_selected(0));
    let mut next_refresh = Instant::now();
    loop {
        if Instant::now() >= next_refresh {
            let now = shared.lock().expect("metrics").clone();
            let mut next = Vec::new();
            for (pid, m) in &now {
                let old = before.get(pid);
                if old.is_some_and(|o| o.window_ns == m.window_ns) {
                    // No window folded since the last refresh: keep its rates (and the baseline they came from), with
                    // what is counted outside windows brought up to date (windows lost, sessions set up).
                    next.extend(rates.iter().filter(|r| r.pid == *pid).cloned().map(|r| r.brought_up_to(m)));
                    continue;
                }
                next.extend(rates_of(*pid, m, old));
                before.insert(*pid, m.clone());
            }
            before.retain(|pid, _| now.contains_key(pid));
            rates = next;
            next_refresh = Instant::now() + Duration::from_secs(1);
        }
        match sort {
            Sort::Busy => rates.sort_by(|a, b| b.busy.total_cmp(&a.busy).then(a.pid.cmp(&b.pid))),
            Sort::Launches => rates.sort_by(|a, b| b.launches.total_cmp(&a.launches).then(a.pid.cmp(&b.pid))),
            Sort::Pid => rates.sort_by_key(|r| (r.pid, r.device)),
        }
        let sort_name = match sort {
            Sort::Busy => "busy",
            Sort::Launches => "launches/s",
            Sort::Pid => "pid",
        };
        // An empty table leaves nothing selected: pick the first process once there is one.
        if table.selected().is_none_or(|i| i >= rates.len()) && !rates.is_empty() {
            table.select(Some(0));
        }
        notices.take_new();
        let notice = notices.shown();
        terminal.draw(|f| draw(f, &rates, &mut table, sort_name, notice.as_deref()))?;
        if event::poll(Duration::from_millis(200))? {
            if let Event::Key(k) = event::read()? {
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                let n = rates.len().max(1);
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
                    KeyCode::Down | KeyCode::Char('j') => table.select(Some((table.selected().unwrap_or(0) + 1) % n)),
                    KeyCode::Up | KeyCode::Char('k') => table.select(Some((table.selected().unwrap_or(0) + n - 1) % n)),
                    KeyCode::Char('s') => {
                        sort = match sort {
                            Sort::Busy => Sort::Launches,
                            Sort::Launches => Sort::Pid,
                            Sort::Pid => Sort::Busy,
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

impl Rates {
    /// The same rates, with the state and the counts of windows and sessions as of `m`.
    fn brought_up_to(self, m: &ProcessMetrics) -> Rates {
        Rates {
            state: m.state,
            sessions: m.cupti_sessions,
            period_ns: m.window_period_ns,
            windows: m.windows,
            lost: m.windows_lost.iter().map(|(why, n)| (*why, *n)).collect(),
            ..self
        }
    }
}

/// Rates since `before` (the whole history for a process seen the first time), per covered second: a row per GPU
/// the process used, one row before it used any.
fn rates_of(pid: u32, m: &ProcessMetrics, before: Option<&ProcessMetrics>) -> Vec<Rates> {
    let empty = ProcessMetrics::default();
    let b = before.unwrap_or(&empty);
    let covered = (m.window_ns.saturating_sub(b.window_ns)) as f64;
    let per = |now: u64, then: u64| if covered > 0.0 { now.saturating_sub(then) as f64 / covered } else { 0.0 };
    let sum = |map: &BTreeMap<u32, u64>| map.values().sum::<u64>();
    let mut categories: BTreeMap<&str, u64> = BTreeMap::new();
    for ((d, c), ns) in &m.kernel_ns {
        *categories.entry(c).or_default() += ns.saturating_sub(b.kernel_ns.get(&(*d, *c)).copied().unwrap_or(0));
    }
    let mut categories: Vec<(String, f64)> = categories
        .into_iter()
        .map(|(c, ns)| (c.to_string(), if covered > 0.0 { ns as f64 / covered } else { 0.0 }))
        .collect();
    categories.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut idle: Vec<(String, f64)> = m
        .idle_ns
        .iter()
        .map(|(c, ns)| (c.clone(), per(*ns, b.idle_ns.get(c).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    idle.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut failed: Vec<(String, u64)> = m
        .call_errors
        .iter()
        .filter(|((class, _), _)| *class != "expected")
        .map(|((_, error), n)| (error.clone(), *n))
        .collect();
    failed.sort_by_key(|f| std::cmp::Reverse(f.1));
    let row = Rates {
        pid,
        device: None,
        busy: per(sum(&m.busy_ns), sum(&b.busy_ns)),
        launches: per(sum(&m.launches), sum(&b.launches)) * 1e9,
        sync: per(m.sync_wait_ns, b.sync_wait_ns),
        memory: m.device_memory,
        dropped: m.dropped,
        command: m.command.clone(),
        state: m.state,
        categories,
        idle,
        failed,
        sessions: 0,
        period_ns: 0,
        windows: 0,
        lost: Vec::new(),
        cost: per(m.overhead_ns.values().sum(), b.overhead_ns.values().sum()),
        steps: m
            .steps
            .iter()
            .filter_map(|(kind, h)| {
                let (count, sum) = b.steps.get(kind).map_or((0, 0), |b| (b.count, b.sum_ns));
                let n = h.count.saturating_sub(count);
                (n > 0).then(|| (*kind, per(h.count, count) * 1e9, h.sum_ns.saturating_sub(sum) / n))
            })
            .collect(),
        counters: None,
    }
    .brought_up_to(m);
    let at = |map: &BTreeMap<u32, u64>, d: u32| map.get(&d).copied().unwrap_or(0);
    let devices: Vec<u32> = m.busy_ns.keys().chain(m.launches.keys()).copied().collect();
    let mut devices = devices;
    devices.sort_unstable();
    devices.dedup();
    if devices.is_empty() {
        return vec![row];
    }
    devices
        .into_iter()
        .map(|d| Rates {
            device: Some(d),
            busy: per(at(&m.busy_ns, d), at(&b.busy_ns, d)),
            launches: per(at(&m.launches, d), at(&b.launches, d)) * 1e9,
            counters: m.gpu_counters.get(&d).copied(),
            ..row.clone()
        })
        .collect()
}

fn draw(f: &mut ratatui::Frame, rates: &[Rates], table: &mut TableState, sort: &str, notice: Option<&str>) {
    let [head, list, detail, said, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(9),
        Constraint::Length(notice.map_or(0, |_| 2)),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(format!("cuflight top: {} process(es), sorted by {sort}", rates.len())), head);
    let rows = rates.iter().map(|r| {
        Row::new(vec![
            r.pid.to_string(),
            r.device.map_or("-".into(), |d| d.to_string()),
            format!("{:5.1}%", r.busy * 100.0),
            format!("{:8.0}", r.launches),
            format!("{:6.2}", r.sync),
            r.memory.map_or("-".into(), |b| format!("{} MiB", b >> 20)),
            r.dropped.to_string(),
            // "flight recorder" in the column's 10 characters.
            r.state.replace("recorder", "rec"),
            r.command.clone(),
        ])
    });
    let widths = [
        Constraint::Length(7),
        Constraint::Length(3),
        Constraint::Length(6),
        Constraint::Length(10),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(10),
        Constraint::Min(10),
    ];
    let t = Table::new(rows, widths)
        .header(
            Row::new(vec!["PID", "GPU", "BUSY", "LAUNCH/S", "SYNC-THR", "MEMORY", "DROPS", "STATE", "COMMAND"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::new().borders(Borders::TOP | Borders::BOTTOM));
    f.render_stateful_widget(t, list, table);
    let chosen = table.selected().and_then(|i| rates.get(i));
    let text = match chosen {
        Some(r) => {
            // Causes that round to 0.0% say nothing.
            let share = |v: &[(String, f64)]| {
                let shown: Vec<String> = v
                    .iter()
                    .filter(|(_, s)| *s >= 0.0005)
                    .take(5)
                    .map(|(n, s)| format!("{n} {:.1}%", s * 100.0))
                    .collect();
                if shown.is_empty() {
                    "-".to_string()
                } else {
                    shown.join(", ")
                }
            };
            // GPU-seconds per second: summed over streams, so not a share of anything.
            let rate = |v: &[(String, f64)]| {
                v.iter().take(5).map(|(n, s)| format!("{n} {s:.3}")).collect::<Vec<_>>().join(", ")
            };
            let failed = if r.failed.is_empty() {
                String::new()
            } else {
                let calls: Vec<String> = r.failed.iter().take(3).map(|(e, n)| format!("{e} x{n}")).collect();
                format!("\nfailed CUDA calls: {}", calls.join(", "))
            };
            // Each CUPTI session keeps memory in the program (serve's module docs): how many, and how far apart;
            // and what the windows cost its threads (summed over threads, so not capped at 100%).
            let cupti = match (r.sessions, r.period_ns) {
                (0, _) => String::new(),
                (n, 0) => format!("\nCUPTI sessions: {n}"),
                (n, p) => format!("\nCUPTI sessions: {n}, a window every {:.1} s", p as f64 / 1e9),
            };
            // Nothing folded yet: no window time to measure a cost over.
            let cupti = match (r.sessions, r.windows) {
                (0, _) | (_, 0) => cupti,
                _ => format!("{cupti}; cost {:.1}% of window time", r.cost * 100.0),
            };
            // Windows that were wanted but not folded: the rates above leave their time out.
            let lost: u64 = r.lost.iter().map(|l| l.1).sum();
            let cupti = match lost {
                0 => cupti,
                _ => {
                    let why: Vec<String> =
                        r.lost.iter().map(|(why, n)| format!("{} {n}", why.replace('_', " "))).collect();
                    format!("{cupti}\nwindows lost: {lost} of {} ({})", r.windows + lost, why.join(", "))
                }
            };
            let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0));
            let counters = r.counters.map_or(String::new(), |c| {
                format!(
                    "\ndevice counters: SM active {}, Tensor Cores {}, DRAM {} of peak",
                    pct(c.sm_active),
                    pct(c.tensor_active),
                    pct(c.dram())
                )
            });
            let steps = if r.steps.is_empty() {
                String::new()
            } else {
                // A training loop's steps, or a server's iterations by kind: how many a second, how long each.
                let each = |rate: f64, mean: u64| {
                    let digits = if rate >= 10.0 { 0 } else { 1 };
                    format!("{rate:.digits$}/s, {:.2} ms mean", mean as f64 / 1e6)
                };
                match r.steps.as_slice() {
                    [("step", rate, mean)] => format!("\nsteps: {}", each(*rate, *mean)),
                    kinds => {
                        let kinds: Vec<String> =
                            kinds.iter().take(4).map(|(k, rate, mean)| format!("{k} {}", each(*rate, *mean))).collect();
                        format!("\niterations: {}", kinds.join("; "))
                    }
                }
            };
            format!(
                "pid {}: {}{steps}\nkernel time (GPU-s/s): {}{counters}\nGPU idle in steps: {}{failed}{cupti}",
                r.pid,
                r.command,
                if r.categories.is_empty() { "-".into() } else { rate(&r.categories) },
                if r.idle.is_empty() { "-".into() } else { share(&r.idle) }
            )
        }
        None => "no cuflight agent to show yet (start programs with `cuflight launch`)".into(),
    };
    f.render_widget(Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }), detail);
    if let Some(notice) = notice {
        let shown = Paragraph::new(notice).style(Style::new().add_modifier(Modifier::BOLD));
        f.render_widget(shown.wrap(ratatui::widgets::Wrap { trim: true }), said);
    }
    f.render_widget(Paragraph::new("↑/↓ pick  s sort  q quit"), keys);
}
