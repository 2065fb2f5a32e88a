//! `cuflight report`: where the GPU's time goes, per process (rank). This first part computes the temporal
//! breakdown with Holistic Trace Analysis' definitions ([`breakdown`]) and lists the training steps; the
//! bottleneck findings of the diagnosis build on it.

pub mod breakdown;

use crate::trace::{Process, Trace};
use cuflight_format::EventKind;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    pub name: String,
    pub start_ns: u64,
    pub duration_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub rank: Option<u32>,
    pub command: String,
    pub breakdown: breakdown::Breakdown,
    pub steps: Vec<StepRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub processes: Vec<ProcessReport>,
}

/// Step ranges: `ProfilerStep#N` annotations, else NVTX ranges whose name looks like a step.
fn steps(p: &Process, ranges: &[crate::ranges::Range]) -> Vec<StepRow> {
    let profiler: Vec<StepRow> = p
        .events
        .iter()
        .filter(|e| e.kind() == Some(EventKind::Range) && p.string(e.name).starts_with("ProfilerStep"))
        .map(|e| StepRow { name: p.string(e.name).to_string(), start_ns: e.start, duration_ns: e.duration() })
        .collect();
    if !profiler.is_empty() {
        return profiler;
    }
    let step_like = |n: &str| {
        let l = n.to_ascii_lowercase();
        l.starts_with("profilerstep")
            || l.starts_with("step")
            || l.starts_with("iteration")
            || l.starts_with("train_step")
    };
    ranges
        .iter()
        .filter(|r| step_like(p.string(r.name)))
        .map(|r| StepRow { name: p.string(r.name).to_string(), start_ns: r.start, duration_ns: r.end - r.start })
        .collect()
}

impl Report {
    pub fn compute(trace: &Trace) -> Report {
        let mut processes = Vec::new();
        for (&pid, p) in &trace.processes {
            let b = breakdown::breakdown(p, trace.fractional_us_timestamps);
            if b.gpu_ops == 0 && !p.events.iter().any(|e| e.kind() == Some(EventKind::Api)) {
                continue; // CPU-only helpers (data loaders, launchers) have nothing to break down
            }
            let mut pairer = crate::ranges::Pairer::default();
            let ranges: Vec<_> = p.events.iter().filter_map(|e| pairer.feed(e)).collect();
            let command = if p.name.is_empty() { p.info.cmdline.join(" ") } else { p.name.clone() };
            processes.push(ProcessReport { pid, rank: p.rank, command, breakdown: b, steps: steps(p, &ranges) });
        }
        Report { processes }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        if self.processes.is_empty() {
            out.push_str("No GPU activity in this trace: nothing to break down.\n");
        }
        for p in &self.processes {
            let b = &p.breakdown;
            let rank = p.rank.map_or(String::new(), |r| format!(" rank {r}"));
            out.push_str(&format!("\n{} (pid {}{rank})\n", p.command, p.pid));
            out.push_str(&format!(
                "  GPU time breakdown over {:.3} ms ({} GPU ops): idle {:.1}%, compute {:.1}%, non-compute {:.1}%\n",
                b.span_ns as f64 / 1e6,
                b.gpu_ops,
                b.percent(b.idle_ns),
                b.percent(b.compute_ns),
                b.percent(b.non_compute_ns)
            ));
            if !p.steps.is_empty() {
                let total: u64 = p.steps.iter().map(|s| s.duration_ns).sum();
                out.push_str(&format!(
                    "  {} steps, mean {:.3} ms\n",
                    p.steps.len(),
                    total as f64 / p.steps.len() as f64 / 1e6
                ));
            }
        }
        out
    }
}
