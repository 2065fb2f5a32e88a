//! The job across ranks: with several ranks (several files, or several GPU processes in one trace), their
//! clocks put on one ([`cuflight_trace::model::align`]), their collectives matched ([`collectives`]), the straggler
//! ([`straggler`]), then, once every rank is swept, the ranks side by side, who waited for whom, the critical
//! path through a typical step's collectives ([`critical`]) and a rank × step heatmap.

pub mod collectives;
pub mod critical;
mod render;
mod straggler;

use super::findings::{Ctx, Finding};
use super::ProcessReport;
use collectives::{Instance, Method, Op};
use cuflight_trace::model::align::{HostShift, ToJob};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Ends of one collective are matched this far apart at least. Real traces need more than the microseconds
/// a ring's completion takes: in HTA's two-rank sample (kineto-2rank), a send/recv pair on one stream started
/// 84 µs apart and ended 332 µs apart. One kernel per rank and the nearest end keep back-to-back collectives
/// apart (see [`collectives::match_by_end`]).
const MIN_TOLERANCE_NS: i64 = 1_000_000;

/// How the ranks' clocks were put on one.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Clocks {
    /// "one host": every rank on one host's clock; "aligned": hosts aligned on collectives; "realtime": hosts
    /// placed only by their REALTIME clocks (NTP, milliseconds of error), too coarse to compare arrivals.
    pub basis: &'static str,
    /// Each host's shift onto the reference host's clock.
    pub hosts: Vec<HostShift>,
}

/// What the collectives say, before the sweep (it needs each collective's wait).
pub struct JobPlan {
    pub clocks: Clocks,
    pub method: Method,
    pub tolerance_ns: u64,
    pub instances: Vec<Instance>,
    /// Collective kernel names (ids in [`Op::name`]).
    pub names: Vec<String>,
    pub ranks: Vec<RankWaits>,
    /// Per rank: communication kernel (by its order in the process) → time it only waited for others.
    pub waits: Vec<FxHashMap<u32, u64>>,
    pub finding: Option<Finding>,
}

/// One rank's part in the job's collectives.
#[derive(Debug, Clone, Default)]
pub struct RankWaits {
    /// Collectives it took part in with another rank.
    pub joined: u64,
    /// Its communication kernels no other rank's matched.
    pub unmatched: u64,
    pub times_last: u64,
    /// Time it waited for the last rank, in steps.
    pub waited_ns: u64,
    /// ... per step window.
    pub step_waits: Vec<u64>,
    /// Median of how much later it joined than the others (negative: earlier).
    pub median_lateness_ns: i64,
    /// Rank index → time waited for it, in steps.
    pub waited_for: FxHashMap<usize, u64>,
}

/// `to_job[i]` puts rank i's times on the job's clock; `clocks` says whether that clock is common enough to
/// compare arrivals.
pub fn plan(ctxs: &[Ctx], to_job: &[ToJob], clocks: Clocks) -> JobPlan {
    let trusted = clocks.basis != "realtime";
    let residual = clocks.hosts.iter().map(|h| h.residual_ns).max().unwrap_or(0);
    let tolerance = MIN_TOLERANCE_NS.max(4 * residual.min(i64::MAX as u64 / 8) as i64);
    let mut names: Vec<String> = Vec::new();
    let mut ids: FxHashMap<String, u32> = FxHashMap::default();
    let ops: Vec<Vec<Op>> = ctxs
        .iter()
        .zip(to_job)
        .map(|(c, clock)| {
            c.plan
                .comm
                .iter()
                .enumerate()
                .map(|(k, op)| {
                    // The collective it ran where told ("all_to_all on ncclKernel_SendRecv_...": NCCL's SendRecv
                    // kernel carries any), so that only kernels of one collective are matched across ranks.
                    let kernel = c.p.string(op.name);
                    let text = match op.collective {
                        Some(coll) => format!("{} on {kernel}", coll.label()),
                        None => kernel.to_string(),
                    };
                    let name = *ids.entry(text.clone()).or_insert_with(|| {
                        names.push(text.to_string());
                        names.len() as u32 - 1
                    });
                    let start = clock.at(op.start);
                    let end = clock.at(op.start.saturating_add(op.duration)).max(start);
                    Op { ordinal: k as u32, name, own_start: op.start, start, end }
                })
                .collect()
        })
        .collect();
    let (method, (instances, unmatched)) = if ctxs.len() < 2 {
        (Method::Arrival, (Vec::new(), vec![0; ctxs.len()]))
    } else if trusted {
        (Method::Arrival, collectives::match_by_end(&ops, tolerance))
    } else {
        (Method::Duration, collectives::match_by_occurrence(&ops))
    };
    let mut waits = vec![FxHashMap::default(); ctxs.len()];
    let mut ranks: Vec<RankWaits> = ctxs
        .iter()
        .zip(&unmatched)
        .map(|(c, &u)| RankWaits { unmatched: u, step_waits: vec![0; c.steps.windows.len()], ..Default::default() })
        .collect();
    let mut lateness: Vec<Vec<i64>> = vec![Vec::new(); ctxs.len()];
    for inst in &instances {
        let last = inst.members[inst.last].rank;
        ranks[last].times_last += 1;
        for m in &inst.members {
            waits[m.rank].insert(m.op.ordinal, m.wait);
            let r = &mut ranks[m.rank];
            r.joined += 1;
            lateness[m.rank].extend(inst.lateness(m.rank));
            let windows = &ctxs[m.rank].steps.windows;
            let k = windows.partition_point(|w| w.0 <= m.op.own_start);
            if k > 0 && m.op.own_start < windows[k - 1].1 {
                r.waited_ns = r.waited_ns.saturating_add(m.wait);
                r.step_waits[k - 1] = r.step_waits[k - 1].saturating_add(m.wait);
                if m.rank != last && m.wait > 0 {
                    let w = r.waited_for.entry(last).or_default();
                    *w = w.saturating_add(m.wait);
                }
            }
        }
    }
    for (r, mut l) in ranks.iter_mut().zip(lateness) {
        if !l.is_empty() {
            let mid = (l.len() - 1) / 2;
            r.median_lateness_ns = *l.select_nth_unstable(mid).1;
        }
    }
    let mut job =
        JobPlan { clocks, method, tolerance_ns: tolerance as u64, instances, names, ranks, waits, finding: None };
    job.finding = straggler::finding(ctxs, &job);
    job
}

/// The ranks side by side, in the report.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobReport {
    /// How the ranks' clocks were put on one.
    pub clocks: Clocks,
    /// How arrivals were compared: "arrival" (starts on the common clock) or "duration".
    pub method: Method,
    /// Ends of one collective lie within this on the common clock (arrival method).
    pub tolerance_ns: u64,
    /// Collectives two ranks or more were matched in.
    pub collectives: u64,
    /// The job's world size as its traces say (the launcher's WORLD_SIZE, torch.profiler's `distributedInfo`);
    /// 0 unknown. More than the ranks given: the view covers those only.
    pub world_size: u32,
    /// One row per rank, in the order the traces were given.
    pub ranks: Vec<RankRow>,
    /// Step time and waits by rank and step.
    pub heatmap: Heatmap,
    /// The critical path through a typical step (the one of median span), when it could be found.
    pub critical_path: Option<critical::CriticalPath>,
    /// Why there is no critical path, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical_path_missing: Option<String>,
    /// Which run it is, where the traces given were of several (the report's `run_jobs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunOf>,
}

/// One run among traces of several (JSON `run_jobs[].run`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunOf {
    /// Its traces, in the order given.
    pub traces: Vec<String>,
    /// When it began (UTC); null for a trace that does not say when it ran.
    pub began: Option<String>,
}

impl RunOf {
    /// "the run of a.json and b.json at 2023-04-28 23:51:38 UTC" (a run of many traces named by its first three).
    pub fn words(&self) -> String {
        let mut names: Vec<&str> = self.traces.iter().take(3).map(String::as_str).collect();
        let more = self.traces.len().saturating_sub(3);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        let listed = match (names.pop(), more.is_empty()) {
            (Some(last), true) if !names.is_empty() => format!("{} and {last}", names.join(", ")),
            (Some(last), _) => {
                names.push(last);
                format!("{}{more}", names.join(", "))
            }
            (None, _) => String::new(),
        };
        match &self.began {
            Some(t) => format!("the run of {listed} at {t}"),
            None => format!("{listed}, which does not say when it ran"),
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RankRow {
    /// "rank R (local L) pid P", or "pid P".
    pub who: String,
    /// Its distributed rank, when known.
    pub rank: Option<u32>,
    /// Its process.
    pub pid: u32,
    /// The host it ran on.
    pub host: String,
    /// The GPUs (ordinals on its host) its work ran on.
    pub gpus: Vec<u32>,
    /// Added to its times to put them on the job's clock (its REALTIME offset and its host's shift), at its
    /// first event (a drifting host's shift changes through the run).
    pub clock_offset_ns: i64,
    /// Steady steps analysed.
    pub steps: usize,
    /// Its mean steady step time.
    pub mean_step_ns: u64,
    /// Kernel time over step time, 0 to 1 (None without steps).
    pub gpu_utilization: Option<f64>,
    /// HTA's temporal breakdown, in % of the GPU span.
    pub compute_pct: f64,
    /// Non-compute GPU time, in % of the GPU span.
    pub non_compute_pct: f64,
    /// GPU idle time, in % of the GPU span.
    pub idle_pct: f64,
    /// Union of communication kernels, and how much of it computation kernels overlapped (HTA's
    /// `get_comm_comp_overlap`).
    pub comm_ns: u64,
    /// The share of communication time that computation overlapped, in percent (None without communication).
    pub comm_overlap_pct: Option<f64>,
    /// Collectives it took part in with another rank.
    pub collectives: u64,
    /// Its communication kernels that no other rank's matched.
    pub unmatched_collectives: u64,
    /// Collectives it was the last to join: the others waited for it.
    pub times_last: u64,
    /// Time it waited in collectives for the last rank to join, in the steps.
    pub waited_ns: u64,
    /// The median of how much later it joined a collective than the others (negative: earlier).
    pub median_lateness_ns: i64,
    /// Whom it waited for, most first: (who, ns).
    pub waited_for: Vec<(String, u64)>,
}

/// Rank × step: each rank's step durations and the time it waited for others in each step, by step name in
/// the first rank's order.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Heatmap {
    /// The step names, one column each, in the order the ranks ran them.
    pub steps: Vec<String>,
    /// The ranks, one row each (as `ranks[].who`).
    pub ranks: Vec<String>,
    /// `[rank][step]`: that rank's duration of that step (None: it has no such step).
    pub step_ns: Vec<Vec<Option<u64>>>,
    /// `[rank][step]`: the time that rank waited in collectives for the last rank in that step (None: not known).
    pub waited_ns: Vec<Vec<Option<u64>>>,
}

/// What the report keeps of each rank's plan for the job view.
pub struct RankInput<'a> {
    pub ctx: &'a Ctx<'a>,
    pub clock: &'a ToJob,
    pub process: &'a ProcessReport,
}

impl JobReport {
    pub fn build(job: &JobPlan, inputs: &[RankInput]) -> JobReport {
        let who: Vec<String> = inputs.iter().map(|i| i.process.who.clone()).collect();
        let ranks = inputs
            .iter()
            .zip(&job.ranks)
            .map(|(i, w)| {
                let p = i.process;
                let b = &p.breakdown;
                let mut waited_for: Vec<(String, u64)> =
                    w.waited_for.iter().map(|(&r, &ns)| (who[r].clone(), ns)).collect();
                waited_for.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                RankRow {
                    who: p.who.clone(),
                    rank: p.rank,
                    pid: p.pid,
                    host: p.run.host.clone(),
                    gpus: i.ctx.plan.used_devices.iter().copied().collect(),
                    clock_offset_ns: i.clock.offset_at(i.ctx.plan.clock.span.map_or(0, |t| t.0)),
                    steps: p.steps.len(),
                    mean_step_ns: p.step_total.as_ref().map_or(0, |t| t.duration_ns / p.steps.len().max(1) as u64),
                    gpu_utilization: p.step_total.as_ref().map(|t| t.gpu_utilization),
                    compute_pct: b.percent(b.compute_ns),
                    non_compute_pct: b.percent(b.non_compute_ns),
                    idle_pct: b.percent(b.idle_ns),
                    comm_ns: p.comm_overlap.comm_ns,
                    comm_overlap_pct: p.comm_overlap.percent(),
                    collectives: w.joined,
                    unmatched_collectives: w.unmatched,
                    times_last: w.times_last,
                    waited_ns: w.waited_ns,
                    median_lateness_ns: w.median_lateness_ns,
                    waited_for,
                }
            })
            .collect();
        let heatmap = heatmap(job, inputs);
        let (critical_path, critical_path_missing) = match critical::critical_path(job, inputs) {
            Ok(c) => (Some(c), None),
            Err(why) => (None, Some(why)),
        };
        JobReport {
            clocks: job.clocks.clone(),
            method: job.method,
            tolerance_ns: job.tolerance_ns,
            collectives: job.instances.len() as u64,
            world_size: inputs.iter().map(|i| i.ctx.p.info.world_size).max().unwrap_or(0),
            ranks,
            heatmap,
            critical_path,
            critical_path_missing,
            run: None,
        }
    }
}

fn heatmap(job: &JobPlan, inputs: &[RankInput]) -> Heatmap {
    let mut steps: Vec<String> = Vec::new();
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    for i in inputs {
        for row in &i.process.steps {
            if !index.contains_key(row.name.as_str()) {
                index.insert(row.name.as_str(), steps.len());
                steps.push(row.name.clone());
            }
        }
    }
    let mut step_ns = vec![vec![None; steps.len()]; inputs.len()];
    let mut waited_ns = vec![vec![None; steps.len()]; inputs.len()];
    for (r, i) in inputs.iter().enumerate() {
        let waits = &job.ranks[r].step_waits;
        for (k, row) in i.process.steps.iter().enumerate() {
            let col = index[row.name.as_str()];
            step_ns[r][col].get_or_insert(row.duration_ns);
            // Rows are the step windows, one each, in order.
            if let Some(&w) = waits.get(k).filter(|_| waits.len() == i.process.steps.len()) {
                waited_ns[r][col].get_or_insert(w);
            }
        }
    }
    Heatmap { steps, ranks: inputs.iter().map(|i| i.process.who.clone()).collect(), step_ns, waited_ns }
}
