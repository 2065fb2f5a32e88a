//! `cuflight report`: names the bottleneck, how much time it costs and the fix.
//!
//! Per process (rank): HTA's temporal and idle breakdowns ([`breakdown`]), the training steps and their
//! TensorBoard-style breakdown ([`steps`]), and findings: why the GPU idles inside steps ([`idle`],
//! `findings.rs`), what the GPU work itself says (`gpu_findings.rs`) and, across ranks, the straggler
//! (`ranks.rs`). Findings are sorted by severity, then by the time they cost; the verdict names the first.

pub mod breakdown;
mod findings;
mod gpu_findings;
mod html;
pub mod idle;
mod occupancy;
mod ranks;
pub mod spans;
pub mod steps;
mod text;
pub mod timeline;

use findings::{Ctx, MIN_SHARE};
pub use findings::{Evidence, Finding, KernelRow, Severity};
use serde::Serialize;
use steps::{StepRow, StepSource};
use timeline::Timeline;

use crate::model::trace::Trace;

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--step NAME`: steps are the ranges named NAME (or starting with it).
    pub step: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    pub file: String,
    pub pid: u32,
    pub rank: Option<u32>,
    pub command: String,
    pub breakdown: breakdown::Breakdown,
    pub idle_breakdown: breakdown::IdleSplit,
    /// cuflight's attribution of the idle time inside steps (see [`idle`]).
    pub idle_causes: idle::IdleSummary,
    pub step_source: StepSource,
    pub steps: Vec<StepRow>,
    /// All steps together (sums; utilisation over their total time).
    pub step_total: Option<StepRow>,
    pub findings: Vec<Finding>,
    pub top_kernels: Vec<KernelRow>,
    /// Kernel-busy share of each of 100 equal slices of the traced GPU span (for plots).
    pub utilization_over_time: Vec<f64>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub verdict: String,
    /// Every process's findings and the cross-rank ones, most costly first.
    pub findings: Vec<Finding>,
    pub processes: Vec<ProcessReport>,
}

/// Why a report cannot be made (one line each, for the CLI).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{0}: the trace holds no events (was the program run under `cuflight record`, and did it use CUDA?)")]
    Empty(String),
    #[error("{0}: no GPU kernels, copies or memsets in the trace: nothing ran on the GPU while it was recorded")]
    NoGpuWork(String),
}

fn sort_findings(v: &mut [Finding]) {
    v.sort_by(|a, b| b.severity.cmp(&a.severity).then(b.time_lost_ns.cmp(&a.time_lost_ns)));
}

fn utilization_over_time(tl: &Timeline) -> Vec<f64> {
    let (Some(first), Some(last)) = (tl.busy.first(), tl.busy.last()) else { return vec![] };
    let (s, e) = (first.0, last.1);
    let bin = (e - s).div_ceil(100).max(1);
    (0..100).map(|i| spans::within(&tl.kernel_busy, s + i * bin, s + (i + 1) * bin) as f64 / bin as f64).collect()
}

impl Report {
    /// `traces`: (display name, trace); several traces are several ranks of one job.
    pub fn compute(traces: &[(String, Trace)], opts: &Options) -> Result<Report, ReportError> {
        let mut procs = Vec::new();
        for (fi, (file, t)) in traces.iter().enumerate() {
            if t.processes.values().all(|p| p.events.is_empty()) {
                return Err(ReportError::Empty(file.clone()));
            }
            for (&pid, p) in &t.processes {
                let gpu = p.events.iter().any(|e| e.is_gpu_work());
                if gpu {
                    procs.push((fi, file, pid, p, t.fractional_us_timestamps));
                }
            }
        }
        if procs.is_empty() {
            let names: Vec<&str> = traces.iter().map(|(f, _)| f.as_str()).collect();
            return Err(ReportError::NoGpuWork(names.join(", ")));
        }
        let several_files = traces.len() > 1;
        let mut tls: Vec<Timeline> = procs.iter().map(|(_, _, _, p, _)| Timeline::new(p)).collect();
        let mut warnings: Vec<Vec<String>> = vec![vec![]; procs.len()];
        let steps: Vec<steps::Steps> = tls
            .iter_mut()
            .zip(&mut warnings)
            .map(|(tl, warn)| {
                let mut s = steps::detect(tl, opts.step.as_deref());
                for (name, start) in &tl.unclosed {
                    if crate::model::names::step_like(name) || opts.step.as_deref().is_some_and(|o| name.starts_with(o)) {
                        warn.push(format!("step range \"{name}\" opened at {start} ns never ended; it was left out"));
                    }
                }
                if s.windows.is_empty() {
                    if opts.step.is_some() {
                        warn.push(format!("no range named {:?}: findings cover the whole trace", opts.step.as_deref().unwrap_or("")));
                    } else {
                        warn.push("no steps found (no ProfilerStep#N, no step-like NVTX range, no repeating launch pattern): findings cover the whole trace; name the step range with --step NAME".into());
                    }
                    let first = tl.busy.first().map_or(0, |b| b.0).min(tl.calls.first().map_or(u64::MAX, |c| c.start));
                    let last = tl.busy.last().map_or(0, |b| b.1).max(tl.calls.last().map_or(0, |c| c.end));
                    s.windows = vec![(first, last.max(first))];
                    s.names = vec!["whole trace".into()];
                }
                let step_names: rustc_hash::FxHashSet<u32> = s.host.iter().map(|r| r.name).collect();
                tl.classify_ranges(|r| step_names.contains(&r.name));
                s
            })
            .collect();
        let ctxs: Vec<Ctx> = procs
            .iter()
            .enumerate()
            .map(|(i, (fi, _, pid, p, _))| {
                let rank = p.rank.or(if several_files {
                    Some(*fi as u32)
                } else if procs.len() > 1 {
                    Some(i as u32)
                } else {
                    None
                });
                Ctx {
                    tl: &tls[i],
                    steps: &steps[i],
                    step_total_ns: steps[i].windows.iter().map(|w| w.1 - w.0).sum(),
                    pid: *pid,
                    rank,
                    op_in_steps: findings::ops_in_windows(&tls[i], &steps[i].windows),
                }
            })
            .collect();
        let straggler = ranks::straggler(&ctxs);
        let mut all = Vec::new();
        let mut processes = Vec::new();
        for (i, ctx) in ctxs.iter().enumerate() {
            let (_, file, pid, p, rounding) = procs[i];
            let host_starts: Vec<u64> = ctx.steps.host.iter().map(|r| r.start).collect();
            let idle = idle::attribute(ctx.tl, &ctx.steps.windows, &host_starts);
            let mut fs = findings::idle_findings(ctx, &idle);
            fs.extend(findings::allocator_churn(ctx, &idle));
            fs.extend(gpu_findings::pageable_memcpy(ctx));
            fs.extend(gpu_findings::memcpy_heavy(ctx));
            fs.extend(gpu_findings::fp32_gemm(ctx));
            fs.extend(gpu_findings::nccl_exposed(ctx, &straggler.waits[i]));
            fs.extend(gpu_findings::memory_growth(ctx));
            fs.retain(|f| f.share >= MIN_SHARE || f.kind == "memory_growth");
            let hot = gpu_findings::hot_kernels(ctx);
            let top_kernels = hot.as_ref().map_or(vec![], |h| h.evidence.kernels.clone());
            fs.extend(hot);
            sort_findings(&mut fs);
            all.extend(fs.iter().filter(|f| f.severity > Severity::Info).cloned());
            let rows: Vec<StepRow> = if ctx.steps.host.is_empty() {
                vec![]
            } else {
                ctx.steps.windows.iter().zip(&ctx.steps.names).map(|(&w, n)| steps::breakdown(ctx.tl, n, w)).collect()
            };
            let step_total = (!rows.is_empty()).then(|| total_row(&rows));
            let command = if p.name.is_empty() { p.info.cmdline.join(" ") } else { p.name.clone() };
            processes.push(ProcessReport {
                file: file.clone(),
                pid,
                rank: ctx.rank,
                command,
                breakdown: breakdown::breakdown(ctx.tl, rounding),
                idle_breakdown: breakdown::idle_split(ctx.tl, rounding),
                idle_causes: idle.summary(),
                step_source: ctx.steps.source,
                steps: rows,
                step_total,
                findings: fs,
                top_kernels,
                utilization_over_time: utilization_over_time(ctx.tl),
                warnings: std::mem::take(&mut warnings[i]),
            });
        }
        all.extend(straggler.finding);
        sort_findings(&mut all);
        let verdict = verdict(&all, &processes);
        Ok(Report { verdict, findings: all, processes })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

fn total_row(rows: &[StepRow]) -> StepRow {
    let sum = |f: fn(&StepRow) -> u64| rows.iter().map(f).sum::<u64>();
    let duration = sum(|r| r.duration_ns);
    let kernel = sum(|r| r.kernel_ns);
    StepRow {
        name: format!("all {} steps", rows.len()),
        start_ns: rows[0].start_ns,
        duration_ns: duration,
        kernel_ns: kernel,
        memcpy_ns: sum(|r| r.memcpy_ns),
        memset_ns: sum(|r| r.memset_ns),
        runtime_ns: sum(|r| r.runtime_ns),
        dataloader_ns: sum(|r| r.dataloader_ns),
        cpu_exec_ns: sum(|r| r.cpu_exec_ns),
        other_ns: sum(|r| r.other_ns),
        gpu_utilization: if duration == 0 { 0.0 } else { kernel as f64 / duration as f64 },
    }
}

fn verdict(findings: &[Finding], processes: &[ProcessReport]) -> String {
    let util = processes
        .iter()
        .filter_map(|p| p.step_total.as_ref())
        .map(|t| t.gpu_utilization)
        .fold(None, |m: Option<f64>, u| Some(m.map_or(u, |m| m.min(u))));
    let util = util.map_or(String::new(), |u| format!(" GPU utilisation in steps: {:.0}%.", u * 100.0));
    match findings.first() {
        Some(f) if f.severity >= Severity::Medium => {
            let who = if processes.len() > 1 {
                f.rank.map_or(format!(" (pid {})", f.pid), |r| format!(" (rank {r})"))
            } else {
                String::new()
            };
            let cost =
                if f.time_lost_ns > 0 { format!(", {:.0}% of step time", f.share * 100.0) } else { String::new() };
            format!("{}: {}{who}{cost}.{util}", f.kind, f.summary)
        }
        Some(f) => format!(
            "No major bottleneck; the largest is {}: {} ({:.1}% of step time).{util}",
            f.kind,
            f.summary,
            f.share * 100.0
        ),
        None => format!("No bottleneck above {:.0}% of step time.{util}", MIN_SHARE * 100.0),
    }
}
