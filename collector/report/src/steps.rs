//! Training steps: where they come from, the time window each one covers, and the per-step breakdown in the
//! manner of TensorBoard's profiler plugin.
//!
//! Steps come from, in order of preference: `--step NAME` (ranges named NAME or starting with it),
//! `ProfilerStep#N` annotations, NVTX ranges with a step-like name (`step`, `iteration`, `train_step`...), or
//! the repeating pattern of kernel launches. A step's **window** starts at its host start (or where the previous
//! window ended, if later) and ends at its host end or at the end of the last GPU op launched inside it,
//! whichever is later: the host usually runs ahead of the GPU, and a step's cost includes its GPU work.
//!
//! The **breakdown** gives each nanosecond of a window to one category, the first that applies: kernel,
//! memcpy, memset, CUDA runtime (any thread in a CUDA call), data loading, CPU exec, other, with TensorBoard's
//! definitions of the last ones (see `range_roles::cpu_exec_category` and docs/report.md). GPU utilisation is the
//! kernel-busy share of the window.

use super::spans::{clip, within, Span};
use super::window::{HostRange, WindowView};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    Option,
    ProfilerStep,
    Nvtx,
    Pattern,
    None,
}

#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct StepRow {
    /// The step's name (ProfilerStep#12, the NVTX range's, or "step N (pattern)" for a repeating launch pattern).
    pub name: String,
    /// Its window's start on the trace's clock.
    pub start_ns: u64,
    /// Its window: from its host start to its host end or the end of the last GPU op launched in it, whichever is
    /// later.
    pub duration_ns: u64,
    /// Window time with a kernel running.
    pub kernel_ns: u64,
    /// ... else with a copy running.
    pub memcpy_ns: u64,
    /// ... else with a memset running.
    pub memset_ns: u64,
    /// ... else with a thread in a CUDA call.
    pub runtime_ns: u64,
    /// ... else loading data (DataLoader ranges).
    pub dataloader_ns: u64,
    /// ... else in other host work the trace shows (operators, NVTX ranges).
    pub cpu_exec_ns: u64,
    /// The rest of the window.
    pub other_ns: u64,
    /// The kernel-busy share of the window, 0 to 1.
    pub gpu_utilization: f64,
    /// Kernels that start in the window, those of them launched one by one (not by a graph launch), and the CUDA
    /// graph replays whose first node starts in it: a serving engine's decode replays graphs, its prefill runs
    /// eagerly ([`super::iterations`]).
    pub kernels: u64,
    /// Those launched one by one (not by a graph launch).
    pub eager_kernels: u64,
    /// CUDA graph replays whose first node starts in it.
    pub graph_replays: u64,
    /// The device counters of the samples that start in the step (`record --gpu-metrics`; absent without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<StepCounters>,
}

/// A step's device counters: how many samples, and their mean shares of peak (percent).
#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema, PartialEq)]
pub struct StepCounters {
    /// Counter samples that start in the step.
    pub samples: u64,
    /// Mean SM activity, percent of peak.
    pub sm_active_pct: Option<f64>,
    /// Mean Tensor Core activity, percent of peak.
    pub tensor_active_pct: Option<f64>,
    /// Mean DRAM throughput (reads and writes), percent of peak.
    pub dram_pct: Option<f64>,
}

impl StepCounters {
    pub fn of(m: &cuflight_trace::model::gpu_counters::CounterMeans) -> Option<StepCounters> {
        let c = m.means();
        let pct = |v: Option<f64>| v.map(|v| (v * 1000.0).round() / 10.0);
        (m.samples > 0).then(|| StepCounters {
            samples: m.samples,
            sm_active_pct: pct(c.sm_active),
            tensor_active_pct: pct(c.tensor_active),
            dram_pct: pct(c.dram()),
        })
    }

    /// Several steps' counters together, each step weighted by its samples.
    pub fn combine(all: impl Iterator<Item = StepCounters>) -> Option<StepCounters> {
        let all: Vec<StepCounters> = all.collect();
        let samples: u64 = all.iter().map(|c| c.samples).sum();
        let mean = |f: fn(&StepCounters) -> Option<f64>| {
            let with: Vec<(f64, u64)> = all.iter().filter_map(|c| f(c).map(|v| (v, c.samples))).collect();
            let n: u64 = with.iter().map(|w| w.1).sum();
            (n > 0).then(|| (with.iter().map(|(v, k)| v * *k as f64).sum::<f64>() / n as f64 * 10.0).round() / 10.0)
        };
        (samples > 0).then(|| StepCounters {
            samples,
            sm_active_pct: mean(|c| c.sm_active_pct),
            tensor_active_pct: mean(|c| c.tensor_active_pct),
            dram_pct: mean(|c| c.dram_pct),
        })
    }
}

pub struct Steps {
    pub source: StepSource,
    /// Host-side step ranges, sorted, not overlapping.
    pub host: Vec<HostRange>,
    /// Each step's window (see the module docs).
    pub windows: Vec<Span>,
    /// Display names.
    pub names: Vec<String>,
}

/// TensorBoard-style breakdown of one window.
pub fn breakdown(tl: &WindowView, name: &str) -> StepRow {
    let (s, e) = tl.span;
    let cats: [&[Span]; 6] = [&tl.kernel_busy, &tl.memcpy_busy, &tl.memset_busy, &tl.runtime_busy, &tl.loader, &tl.cpu];
    let mut bounds: Vec<(u64, usize, bool)> = Vec::new();
    for (c, u) in cats.iter().enumerate() {
        for (a, b) in clip(u, s, e) {
            bounds.push((a, c, true));
            bounds.push((b, c, false));
        }
    }
    bounds.sort_unstable_by_key(|b| (b.0, !b.2));
    let mut acc = [0u64; 7];
    let mut active = [0i32; 6];
    let mut t = s;
    for (at, c, open) in bounds {
        let top = active.iter().position(|&n| n > 0).unwrap_or(6);
        acc[top] += at - t;
        t = at;
        active[c] += if open { 1 } else { -1 };
    }
    acc[6] += e - t;
    let duration = e - s;
    StepRow {
        name: name.to_string(),
        start_ns: s,
        duration_ns: duration,
        kernel_ns: acc[0],
        memcpy_ns: acc[1],
        memset_ns: acc[2],
        runtime_ns: acc[3],
        dataloader_ns: acc[4],
        cpu_exec_ns: acc[5],
        other_ns: acc[6],
        counters: None,
        gpu_utilization: if duration == 0 { 0.0 } else { within(&tl.kernel_busy, s, e) as f64 / duration as f64 },
        kernels: 0,
        eager_kernels: 0,
        graph_replays: 0,
    }
}

/// How the steps' times spread, where a mean hides a slow tail: the median, the 90th percentile and the slowest
/// step (nearest rank).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct StepSpread {
    /// The median step's time.
    pub median_ns: u64,
    /// The 90th percentile of the steps' times: a tenth of the steps take longer.
    pub p90_ns: u64,
    /// The slowest step's time.
    pub slowest_ns: u64,
    /// The slowest step's name.
    pub slowest: String,
}

/// The spread of `rows`' times; none for fewer than two steps.
pub fn spread(rows: &[StepRow]) -> Option<StepSpread> {
    if rows.len() < 2 {
        return None;
    }
    let mut d: Vec<u64> = rows.iter().map(|r| r.duration_ns).collect();
    d.sort_unstable();
    let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
    let slowest = rows.iter().max_by_key(|r| r.duration_ns).map(|r| r.name.clone()).unwrap_or_default();
    Some(StepSpread { median_ns: at(0.5), p90_ns: at(0.9), slowest_ns: d[d.len() - 1], slowest })
}
