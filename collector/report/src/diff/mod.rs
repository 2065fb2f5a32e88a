//! `cuflight diff A B [C ...]`: the runs of a performance lab side by side (a baseline, one change, the next),
//! each against the run before it: steady step time, GPU utilisation, kernel time by category, the kernels
//! gained, lost, faster and slower, and the findings resolved and new. Each input is reported on its own first
//! ([`crate`]: warm-up left out), so any trace format compares with any other: a native capture against
//! a torch.profiler trace of the same program.
//!
//! Kernels are matched by name with what differs between tools taken off (a leading `void `, the parameter
//! list that Kineto keeps and CUPTI's demangled names may not), so `void at::native::f<float>(Args)` and
//! `at::native::f<float>` are one kernel.

mod render;

use crate::{ProcessReport, Report};
use serde::Serialize;
use std::collections::BTreeMap;

/// A finding present in both runs reduced or grew when its share of step time moved by this fraction of the
/// larger share (18.9% → 9.8% reduced, 4.8% → 5.2% persists) ...
const FINDING_CHANGE: f64 = 0.25;
/// ... and by at least this share of step time (1.0% → 1.4% is noise, not growth).
const MIN_FINDING_CHANGE: f64 = 0.01;

/// A kernel is faster or slower when its time per step changes by more than this fraction (the step is what the
/// user waits for: fewer, longer calls that take less time a step are faster) ...
const STEP_CHANGE: f64 = 0.10;
/// ... and by more than this (ns): noise on tiny kernels is no change.
const MIN_STEP_CHANGE_NS: f64 = 1_000.0;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
/// One run as `diff` compares it: the process with the most GPU work (or the rank compared before).
pub struct RunRow {
    /// The trace as named on the command line.
    pub file: String,
    /// The process compared.
    pub pid: u32,
    /// Steady steps found (warm-up left out); 0 when none were found and the figures are per run.
    pub steps: usize,
    /// Warm-up steps left out of the figures (0 when the warm-up was kept in, as `report --include-warmup` does).
    pub warmup_steps: usize,
    /// `record --sample 1/N`: N (the steps are the recorded ones; absent for a whole recording).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled_one_in: Option<u64>,
    /// Mean steady step time (the span of the GPU work when no steps were found).
    pub step_ns: u64,
    /// Step time over the previous run's (None for the first).
    pub step_ratio: Option<f64>,
    /// Kernel time over steady step time, 0 to 1 (0 without steps).
    pub gpu_util: f64,
    /// Kernels per step.
    pub kernels: f64,
    /// Kernel time per step.
    pub kernel_ns: u64,
    /// The report's one-line verdict of the run.
    pub verdict: String,
    /// What `--filter-nvtx`/`--filter-time` kept of the run (the report's `filtered`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filtered: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
/// A kind of kernel (GEMM, attention, NCCL, elementwise, ...) across the runs.
pub struct CategoryRow {
    /// The kernel category.
    pub category: &'static str,
    /// Per run: its kernel time per step.
    pub per_step_ns: Vec<u64>,
    /// Per run: its kernels per step.
    pub count_per_step: Vec<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema)]
/// A kernel in one run.
pub struct KernelStat {
    /// Calls per step.
    pub count_per_step: f64,
    /// Time per step.
    pub per_step_ns: u64,
    /// Mean time a call.
    pub mean_ns: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
/// A kernel across the runs, matched by its name without `void ` and its parameter list.
pub struct KernelDiffRow {
    /// The name as the first run that has it spells it.
    pub name: String,
    /// Its kernel category.
    pub category: &'static str,
    /// Per run (None: it did not run there).
    pub runs: Vec<Option<KernelStat>>,
    /// Per run after the first, against the run before it, by its time per step: gained, lost, faster, slower,
    /// same or absent.
    pub change: Vec<&'static str>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
/// A kind of finding across the runs.
pub struct FindingDiffRow {
    /// The finding's kind (as the report's `findings[].kind`).
    pub kind: &'static str,
    /// Per run: the share of step time it costs (None: not found).
    pub share: Vec<Option<f64>>,
    /// Per run after the first: new (not found before), resolved (not found after), reduced, grew, persists,
    /// absent (in neither); unmeasured for a finding made from device counters where one of the two runs has none.
    pub change: Vec<&'static str>,
    /// The summary from the last run that has it.
    pub summary: String,
}

/// The device counters of a device or a kind of work in one run (`record --gpu-metrics`), percent of peak.
#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema, PartialEq)]
pub struct CounterStat {
    /// Mean SM activity, percent of peak.
    pub sm_active_pct: Option<f64>,
    /// Mean Tensor Core activity, percent of peak.
    pub tensor_active_pct: Option<f64>,
    /// Mean DRAM throughput (reads and writes), percent of peak.
    pub dram_pct: Option<f64>,
    /// The side of the roofline the counters put the work on (as `gpu_metrics.bound`).
    pub bound: &'static str,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CounterDiffRow {
    /// "device" (all its samples) or "category" (the samples its kernels filled).
    pub level: &'static str,
    /// "GPU" for the device, else the category.
    pub name: String,
    /// Per run (None: no counters there, or no such work).
    pub runs: Vec<Option<CounterStat>>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Diff {
    /// The runs in the order given, the baseline first.
    pub runs: Vec<RunRow>,
    /// Kernel time per step by category, the category that takes most in any run first.
    pub categories: Vec<CategoryRow>,
    /// Device counters by device and category, where a run recorded them (`record --gpu-metrics`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<CounterDiffRow>,
    /// Changed kernels first (by how much their time per step moved), then the rest.
    pub kernels: Vec<KernelDiffRow>,
    /// Every kind of finding in any run, with its cost in each.
    pub findings: Vec<FindingDiffRow>,
    /// What changed from each run to the next, in words.
    pub summary: Vec<String>,
    /// What limits the comparison: several processes in a run, a rank missing, no steps found.
    pub warnings: Vec<String>,
}

/// The process a run is about: of several (ranks, workers), the rank the runs before compared (`rank`), else
/// the one with the most kernel time.
fn main_process(r: &Report, rank: Option<u32>) -> Option<&ProcessReport> {
    let same_rank = rank.and_then(|rank| {
        r.processes
            .iter()
            .filter(|p| p.rank == Some(rank))
            .max_by_key(|p| p.kernels.iter().map(|k| k.total_ns).sum::<u64>())
    });
    same_rank.or_else(|| r.processes.iter().max_by_key(|p| p.kernels.iter().map(|k| k.total_ns).sum::<u64>()))
}

/// Each run's counters of its first device and of each category, where any run has counters.
fn counters(mains: &[&ProcessReport]) -> Vec<CounterDiffRow> {
    let mut rows: Vec<CounterDiffRow> = Vec::new();
    for (i, p) in mains.iter().enumerate() {
        let first_device = p.gpu_metrics.iter().filter(|r| r.level == "device").map(|r| r.device).min();
        for r in p.gpu_metrics.iter().filter(|r| r.level != "kernel" && Some(r.device) == first_device) {
            let name = if r.level == "device" { "GPU".to_string() } else { r.name.clone() };
            let at = match rows.iter().position(|x| x.level == r.level && x.name == name) {
                Some(at) => at,
                None => {
                    rows.push(CounterDiffRow { level: r.level, name, runs: vec![None; mains.len()] });
                    rows.len() - 1
                }
            };
            rows[at].runs[i] = Some(CounterStat {
                sm_active_pct: r.sm_active_pct,
                tensor_active_pct: r.tensor_active_pct,
                dram_pct: r.dram_pct,
                bound: r.bound,
            });
        }
    }
    rows.sort_by_key(|r| r.level != "device");
    rows
}

/// A kernel's name as every tool can agree on it.
pub fn kernel_key(name: &str) -> String {
    let n = name.trim();
    let n = n.strip_prefix("void ").unwrap_or(n);
    // The parameter list: the last top-level '(' ... ')' at the end.
    let mut depth = 0i32;
    let mut cut = n.len();
    for (i, ch) in n.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && n.ends_with(')') => {
                cut = i;
                break;
            }
            _ => {}
        }
    }
    n[..cut].trim_end().to_string()
}

fn steps_of(p: &ProcessReport) -> (usize, u64) {
    match &p.step_total {
        Some(t) if !p.steps.is_empty() => (p.steps.len(), t.duration_ns / p.steps.len() as u64),
        _ => (0, p.utilization_span_ns.map_or(0, |(s, e)| e.saturating_sub(s))),
    }
}

impl Diff {
    /// `runs`: (display name, its report), baseline first.
    pub fn compute(runs: &[(String, Report)]) -> Diff {
        let mut warnings = Vec::new();
        let mut mains: Vec<&ProcessReport> = Vec::new();
        let mut rows: Vec<RunRow> = Vec::new();
        // Runs of a job compare one rank throughout: the first run's busiest.
        let mut rank: Option<u32> = None;
        for (file, r) in runs {
            // A run of a job whose rank recorded nothing: the others are compared, and the diff says so.
            warnings.extend(r.traces_left_out.iter().map(|why| format!("{file}: left out {why}")));
            let Some(p) = main_process(r, rank) else { continue };
            if r.processes.len() > 1 {
                let why =
                    if rank.is_some() && p.rank == rank { "the rank compared before" } else { "the most kernel time" };
                warnings.push(format!(
                    "{file}: {} processes with GPU work; compared: {} ({why})",
                    r.processes.len(),
                    p.who
                ));
            }
            if let Some(r) = rank.filter(|&r| p.rank != Some(r)) {
                warnings.push(format!("{file}: rank {r} is not in it; compared {} instead", p.who));
            }
            rank = rank.or(p.rank);
            let (steps, step_ns) = steps_of(p);
            let per = steps.max(1) as f64;
            let kernel_ns: u64 = p.kernels.iter().map(|k| k.total_ns).sum();
            let count: u64 = p.kernels.iter().map(|k| k.count).sum();
            let step_ratio =
                rows.last().filter(|prev| prev.step_ns > 0).map(|prev| step_ns as f64 / prev.step_ns as f64);
            rows.push(RunRow {
                file: file.clone(),
                pid: p.pid,
                steps,
                warmup_steps: if p.warmup.included { 0 } else { p.warmup.steps },
                sampled_one_in: p.sampling.as_ref().map(|s| s.one_in),
                step_ns,
                step_ratio,
                gpu_util: p.step_total.as_ref().map_or(0.0, |t| t.gpu_utilization),
                kernels: count as f64 / per,
                kernel_ns: (kernel_ns as f64 / per) as u64,
                verdict: r.verdict.clone(),
                filtered: p.filtered.clone(),
            });
            if steps == 0 {
                warnings.push(format!("{file}: no steps found: figures are per run, not per step"));
            }
            mains.push(p);
        }
        let per_step: Vec<f64> = rows.iter().map(|r| r.steps.max(1) as f64).collect();
        let categories = categories(&mains, &per_step);
        let kernels = kernels(&mains, &per_step);
        let findings = findings(runs, &mains);
        let summary = summary(&rows, &kernels, &findings);
        let counters = counters(&mains);
        Diff { runs: rows, categories, counters, kernels, findings, summary, warnings }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

fn categories(mains: &[&ProcessReport], per_step: &[f64]) -> Vec<CategoryRow> {
    let mut by: BTreeMap<&'static str, CategoryRow> = BTreeMap::new();
    let n = mains.len();
    for (i, p) in mains.iter().enumerate() {
        for c in &p.categories {
            let row = by.entry(c.category).or_insert_with(|| CategoryRow {
                category: c.category,
                per_step_ns: vec![0; n],
                count_per_step: vec![0.0; n],
            });
            row.per_step_ns[i] = (c.total_ns as f64 / per_step[i]) as u64;
            row.count_per_step[i] = c.count as f64 / per_step[i];
        }
    }
    let mut rows: Vec<CategoryRow> = by.into_values().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.per_step_ns.iter().copied().max().unwrap_or(0)));
    rows
}

fn kernels(mains: &[&ProcessReport], per_step: &[f64]) -> Vec<KernelDiffRow> {
    use cuflight_trace::model::kernel_category::kernel_category;
    let n = mains.len();
    let mut by: BTreeMap<String, KernelDiffRow> = BTreeMap::new();
    for (i, p) in mains.iter().enumerate() {
        for k in &p.kernels {
            let row = by.entry(kernel_key(&k.name)).or_insert_with(|| KernelDiffRow {
                name: k.name.clone(),
                category: kernel_category(&k.name).as_str(),
                runs: vec![None; n],
                change: Vec::new(),
            });
            // Two spellings of one kernel in one run (rare): added together.
            let prev = row.runs[i].unwrap_or(KernelStat { count_per_step: 0.0, per_step_ns: 0, mean_ns: 0 });
            let count = prev.count_per_step + k.count as f64 / per_step[i];
            let ns = prev.per_step_ns + (k.total_ns as f64 / per_step[i]) as u64;
            let mean = if count > 0.0 { (ns as f64 / count) as u64 } else { 0 };
            row.runs[i] = Some(KernelStat { count_per_step: count, per_step_ns: ns, mean_ns: mean });
        }
    }
    let mut rows: Vec<KernelDiffRow> = by.into_values().collect();
    for row in &mut rows {
        row.change = (1..n).map(|i| kernel_change(row.runs[i - 1], row.runs[i])).collect();
    }
    // The most moved first: the largest change in time per step between any two consecutive runs.
    let moved = |r: &KernelDiffRow| -> u64 {
        (1..n)
            .map(|i| {
                let a = r.runs[i - 1].map_or(0, |s| s.per_step_ns);
                let b = r.runs[i].map_or(0, |s| s.per_step_ns);
                a.abs_diff(b)
            })
            .max()
            .unwrap_or(0)
    };
    rows.sort_by(|a, b| {
        let changed = |r: &KernelDiffRow| r.change.iter().any(|c| *c != "same" && *c != "absent");
        changed(b).cmp(&changed(a)).then(moved(b).cmp(&moved(a))).then(a.name.cmp(&b.name))
    });
    rows
}

fn kernel_change(before: Option<KernelStat>, after: Option<KernelStat>) -> &'static str {
    match (before, after) {
        (None, None) => "absent",
        (None, Some(_)) => "gained",
        (Some(_), None) => "lost",
        (Some(a), Some(b)) => {
            let delta = b.per_step_ns as f64 - a.per_step_ns as f64;
            let relative = delta.abs() / (a.per_step_ns.max(1) as f64);
            if delta.abs() < MIN_STEP_CHANGE_NS || relative <= STEP_CHANGE {
                "same"
            } else if delta < 0.0 {
                "faster"
            } else {
                "slower"
            }
        }
    }
}

fn findings(runs: &[(String, Report)], mains: &[&ProcessReport]) -> Vec<FindingDiffRow> {
    let n = mains.len();
    let mut by: BTreeMap<&'static str, FindingDiffRow> = BTreeMap::new();
    for (i, p) in mains.iter().enumerate() {
        // The process's own findings, and the job-level ones its report holds.
        let report = runs.iter().map(|r| &r.1).find(|r| r.processes.iter().any(|q| std::ptr::eq(q, *p)));
        let job = report.into_iter().flat_map(|r| r.findings.iter()).filter(|f| f.pid != p.pid);
        for f in p.findings.iter().chain(job).filter(|f| f.kind != "hot_kernels") {
            let row = by.entry(f.kind).or_insert_with(|| FindingDiffRow {
                kind: f.kind,
                share: vec![None; n],
                change: Vec::new(),
                summary: String::new(),
            });
            let s = row.share[i].get_or_insert(0.0);
            *s = s.max(f.share);
            row.summary = f.summary.clone();
        }
    }
    let mut rows: Vec<FindingDiffRow> = by.into_values().collect();
    // A finding made from device counters is neither new nor resolved where one of the two runs has none.
    let counted: Vec<bool> = mains.iter().map(|p| !p.gpu_metrics.is_empty()).collect();
    for row in &mut rows {
        let needs_counters = crate::counter_findings::KINDS.contains(&row.kind);
        row.change = (1..n)
            .map(|i| match needs_counters && !(counted[i - 1] && counted[i]) {
                true => "unmeasured",
                false => change(row.share[i - 1], row.share[i]),
            })
            .collect();
    }
    rows.sort_by(|a, b| {
        let top = |r: &FindingDiffRow| r.share.iter().flatten().fold(0.0f64, |m, &s| m.max(s));
        top(b).total_cmp(&top(a)).then(a.kind.cmp(b.kind))
    });
    rows
}

/// A finding's change from one run to the next: new or resolved only where it was or is not found at all; found
/// in both, it reduced or grew when its share of step time moved by [`FINDING_CHANGE`] of the larger share and
/// [`MIN_FINDING_CHANGE`] of step time (33% → 2.5% reduced, 1.7% → 20.1% grew, 4.8% → 5.2% persists).
fn change(before: Option<f64>, after: Option<f64>) -> &'static str {
    match (before, after) {
        (None, None) => "absent",
        (None, Some(_)) => "new",
        (Some(_), None) => "resolved",
        (Some(a), Some(b)) => {
            let moved = b - a;
            if moved.abs() < MIN_FINDING_CHANGE || moved.abs() < FINDING_CHANGE * a.max(b) {
                "persists"
            } else if moved < 0.0 {
                "reduced"
            } else {
                "grew"
            }
        }
    }
}

/// What a run fused that the run before it did not (an eager loop against its `torch.compile`d self): the ATen
/// elementwise kernels it no longer runs and the Triton kernels it gained, by the operations they fuse (their
/// Inductor names); None unless both happened.
fn fusion(kernels: &[KernelDiffRow], i: usize) -> Option<String> {
    use cuflight_analysis::stats::triton::fused_chain;
    let changed = |what: &'static str| kernels.iter().filter(move |k| k.change[i - 1] == what);
    let (mut calls, mut ns) = (0.0, 0u64);
    for k in changed("lost").filter(|k| k.category == "elementwise" && fused_chain(&k.name).is_none()) {
        let before = k.runs[i - 1].as_ref()?;
        (calls, ns) = (calls + before.count_per_step, ns + before.per_step_ns);
    }
    let mut chains: Vec<(u64, String)> = changed("gained")
        .filter_map(|k| Some((k.runs[i].as_ref()?.per_step_ns, fused_chain(&k.name)?)))
        .map(|(ns, (kind, ops))| (ns, if ops.is_empty() { kind.to_string() } else { format!("{kind} {ops}") }))
        .collect();
    if calls == 0.0 || chains.is_empty() {
        return None;
    }
    chains.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    chains.dedup_by(|a, b| a.1 == b.1);
    let shown: Vec<&str> = chains.iter().take(3).map(|c| c.1.as_str()).collect();
    let more = if chains.len() > 3 { format!(" and {} more", chains.len() - 3) } else { String::new() };
    Some(format!(
        "fused: {calls:.0} elementwise kernels a step ({}) gone; the Triton kernels in their place fuse {}{more}",
        render::ms(ns),
        shown.join(", ")
    ))
}

fn summary(rows: &[RunRow], kernels: &[KernelDiffRow], findings: &[FindingDiffRow]) -> Vec<String> {
    let mut out = Vec::new();
    for i in 1..rows.len() {
        let (a, b) = (&rows[i - 1], &rows[i]);
        let mut s = match b.step_ratio {
            Some(r) => format!(
                "{} → {}: steady step {} → {} ({:+.1}%), GPU utilisation {} → {}",
                a.file,
                b.file,
                render::ms(a.step_ns),
                render::ms(b.step_ns),
                (r - 1.0) * 100.0,
                crate::words::percent(a.gpu_util),
                crate::words::percent(b.gpu_util)
            ),
            None => format!("{} → {}", a.file, b.file),
        };
        let count = |what: &str| kernels.iter().filter(|k| k.change[i - 1] == what).count();
        let k: Vec<String> = ["gained", "lost", "faster", "slower"]
            .iter()
            .filter(|w| count(w) > 0)
            .map(|w| format!("{} {w}", count(w)))
            .collect();
        if !k.is_empty() {
            s.push_str(&format!("; kernels: {}", k.join(", ")));
        }
        if let Some(fused) = fusion(kernels, i) {
            s.push_str(&format!("; {fused}"));
        }
        // Each changed finding with the shares that make it so: "reduced: nccl_exposed 18.9% → 9.8%".
        let pct = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.1}%", s * 100.0));
        for what in ["resolved", "reduced", "grew", "new"] {
            let found: Vec<String> = findings
                .iter()
                .filter(|f| f.change[i - 1] == what)
                .map(|f| format!("{} {} → {}", f.kind, pct(f.share[i - 1]), pct(f.share[i])))
                .collect();
            if !found.is_empty() {
                s.push_str(&format!("; {what}: {}", found.join(", ")));
            }
        }
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_is_new_or_resolved_only_where_it_was_or_is_not_found() {
        assert_eq!(change(Some(0.048), Some(0.052)), "persists", "the same bottleneck measured twice");
        assert_eq!(change(Some(0.052), Some(0.048)), "persists");
        assert_eq!(change(Some(0.010), Some(0.014)), "persists", "under a point of step time");
        assert_eq!(change(None, Some(0.06)), "new");
        assert_eq!(change(None, Some(0.001)), "new");
        assert_eq!(change(Some(0.08), None), "resolved");
        assert_eq!(change(None, None), "absent");
        // HTA's trace_diff control/test pair, and a finding that shrank by most of its share.
        assert_eq!(change(Some(0.042), Some(0.138)), "grew", "memcpy_heavy");
        assert_eq!(change(Some(0.189), Some(0.098)), "reduced", "nccl_exposed");
        assert_eq!(change(Some(0.017), Some(0.201)), "grew", "fp32_gemm");
        assert_eq!(change(Some(0.33), Some(0.025)), "reduced");
    }

    #[test]
    fn kernel_names_from_different_tools_match() {
        let k = kernel_key("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, \
                            at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)");
        assert_eq!(
            k,
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
        );
        assert_eq!(kernel_key("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
        assert_eq!(kernel_key("void f<(int)1>(float*)"), "f<(int)1>");
        assert_eq!(kernel_key("f(int) const"), "f(int) const");
    }

    /// An eager loop against its compiled self: the ATen elementwise kernels it lost and the Triton chains it
    /// gained are named; a change without both says nothing of fusion.
    #[test]
    fn fused_chains_that_replaced_eager_kernels_are_named() {
        let stat = |count: f64, per_step_ns: u64| Some(KernelStat { count_per_step: count, per_step_ns, mean_ns: 1 });
        let row = |name: &str, category: &'static str, runs: Vec<Option<KernelStat>>, change: &'static str| {
            KernelDiffRow { name: name.into(), category, runs, change: vec![change] }
        };
        let rows = vec![
            row(
                "at::native::vectorized_elementwise_kernel<4, AddFunctor>",
                "elementwise",
                vec![stat(8.0, 80_000), None],
                "lost",
            ),
            row(
                "at::native::vectorized_elementwise_kernel<4, GeluFunctor>",
                "elementwise",
                vec![stat(4.0, 40_000), None],
                "lost",
            ),
            row("triton_poi_fused_add_gelu_0", "elementwise", vec![None, stat(4.0, 30_000)], "gained"),
            row("triton_poi_fused_add_gelu_3", "elementwise", vec![None, stat(4.0, 20_000)], "gained"),
            row("triton_red_fused_sum_1", "reduction", vec![None, stat(1.0, 10_000)], "gained"),
            row("sm90_gemm", "gemm", vec![stat(4.0, 1_000_000), stat(4.0, 1_000_000)], "same"),
        ];
        let line = fusion(&rows, 1).expect("named");
        assert_eq!(
            line,
            "fused: 12 elementwise kernels a step (0.12 ms) gone; the Triton kernels in their place fuse pointwise \
             add_gelu, reduction sum"
        );
        assert_eq!(fusion(&rows[3..], 1), None, "nothing eager lost");
        assert_eq!(fusion(&rows[..2], 1), None, "nothing fused gained");
    }

    #[test]
    fn kernels_are_gained_lost_faster_slower_or_the_same() {
        let s = |count: f64, per_step_ns: u64| {
            Some(KernelStat { count_per_step: count, per_step_ns, mean_ns: (per_step_ns as f64 / count) as u64 })
        };
        assert_eq!(kernel_change(None, s(1.0, 5)), "gained");
        assert_eq!(kernel_change(s(1.0, 5), None), "lost");
        assert_eq!(kernel_change(s(4.0, 8_000_000), s(4.0, 2_000_000)), "faster");
        assert_eq!(kernel_change(s(4.0, 2_000_000), s(4.0, 2_100_000)), "same");
        assert_eq!(kernel_change(s(1.0, 900), s(1.0, 1_800)), "same", "under a microsecond per step");
        assert_eq!(kernel_change(s(1.0, 10_000), s(1.0, 20_000)), "slower");
        // Fewer, longer calls that take less of each step: faster, as the step time says.
        assert_eq!(kernel_change(s(4.0, 11_079_000), s(2.0, 7_245_000)), "faster");
        assert_eq!(kernel_change(s(2.0, 4_000_000), s(4.0, 6_000_000)), "slower", "cheaper calls, twice as many");
    }
}
