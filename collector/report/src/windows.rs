//! One process's windows in several files (`record --every`'s `<name>-N.cuf`, attach windows taken one after
//! another) side by side, in time order: how the process fared from window to window, which the per-window
//! process sections leave the reader to piece together. Text and HTML show it; JSON has every figure already, in
//! `processes`.

use super::findings::{ms, Finding};
use super::{ProcessReport, Report};

/// The processes of `processes` that share a pid and rank with another in a different file, grouped (indices in
/// order of the processes): the windows of one process. A pid and rank alone do not tell them apart.
pub fn shared_pids(processes: &[ProcessReport]) -> Vec<Vec<usize>> {
    // (pid, rank) and the processes that have it, in order of first seen.
    type Key = (u32, Option<u32>);
    let mut groups: Vec<(Key, Vec<usize>)> = Vec::new();
    for (i, p) in processes.iter().enumerate() {
        match groups.iter_mut().find(|(key, _)| *key == (p.pid, p.rank)) {
            Some((_, members)) => members.push(i),
            None => groups.push(((p.pid, p.rank), vec![i])),
        }
    }
    groups
        .into_iter()
        .map(|(_, members)| members)
        .filter(|m| m.iter().any(|&i| processes[i].file != processes[m[0]].file))
        .collect()
}

/// One window's row.
pub struct WindowRow<'a> {
    pub trace: &'a str,
    /// Its timeline's start after the first window's (one process: one clock).
    pub at_ns: u64,
    pub span_ns: u64,
    pub steps: usize,
    /// Mean step time and GPU utilisation in steps, where it has steps.
    pub mean_step_ns: Option<u64>,
    pub gpu_utilization: Option<f64>,
    /// Its most costly finding.
    pub largest: Option<&'a Finding>,
}

/// The windows of one process.
pub struct Windows<'a> {
    pub who: &'a str,
    pub command: &'a str,
    pub rows: Vec<WindowRow<'a>>,
}

/// Every process seen in several windows, with its windows in time order.
pub fn of(r: &Report) -> Vec<Windows<'_>> {
    shared_pids(&r.processes)
        .into_iter()
        .map(|members| {
            let mut ps: Vec<&ProcessReport> = members.iter().map(|&i| &r.processes[i]).collect();
            ps.sort_by_key(|p| p.run.trace_start_ns);
            let first = ps[0].run.trace_start_ns;
            let rows = ps
                .iter()
                .map(|p| {
                    let total = p.step_total.as_ref().filter(|_| !p.steps.is_empty());
                    WindowRow {
                        trace: &p.file,
                        at_ns: p.run.trace_start_ns.saturating_sub(first),
                        span_ns: p.run.trace_end_ns.saturating_sub(p.run.trace_start_ns),
                        steps: p.steps.len(),
                        mean_step_ns: total.map(|t| t.duration_ns / p.steps.len() as u64),
                        gpu_utilization: total.map(|t| t.gpu_utilization),
                        largest: p.findings.iter().max_by_key(|f| (f.severity, f.time_lost_ns)),
                    }
                })
                .collect();
            Windows { who: &ps[0].who, command: &ps[0].command, rows }
        })
        .collect()
}

impl WindowRow<'_> {
    /// The cells text and HTML show, in the order of [`HEADERS`].
    pub fn cells(&self) -> Vec<String> {
        vec![
            self.trace.to_string(),
            format!("+{:.3}", self.at_ns as f64 / 1e9),
            ms(self.span_ns),
            self.steps.to_string(),
            self.mean_step_ns.map_or("-".into(), ms),
            self.gpu_utilization.map_or("-".into(), |u| format!("{:.0}%", u * 100.0)),
            self.largest.map_or("none".into(), |f| format!("{} {:.1}%", f.kind, f.share * 100.0)),
        ]
    }
}

pub const HEADERS: [&str; 7] = ["Trace", "At (s)", "Span", "Steps", "Mean step", "GPU util", "Largest finding"];

impl Windows<'_> {
    pub fn title(&self) -> String {
        format!("The {} windows of {} ({}), in time order", self.rows.len(), self.who, self.command)
    }
}
