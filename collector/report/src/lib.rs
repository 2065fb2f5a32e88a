//! `cuflight report`: names the bottleneck, how much time it costs and the fix.
//!
//! Per process (rank): HTA's temporal and idle breakdowns ([`breakdown`]), the training steps and their
//! TensorBoard-style breakdown ([`steps`]), and findings: why the GPU idles inside steps ([`idle`],
//! `findings.rs`), what the GPU work itself says (`gpu_findings.rs`) and, across ranks, the job view: clocks
//! aligned, collectives matched, the straggler, who waited for whom, the critical path ([`job`]). Findings are sorted by severity, then by the time they cost; the verdict names the first.

mod assemble;
pub mod breakdown;
mod busy;
mod busy_findings;
mod by_run;
#[cfg(test)]
mod collective_tests;
mod counter_findings;
pub mod diff;
pub mod failed_calls;
mod findings;
mod fusion;
mod gpu_findings;
mod html;
mod html_charts;
mod html_escape;
pub mod idle;
pub mod iterations;
pub mod job;
mod job_roles;
mod loading;
pub mod overlap;
mod path_bound;
mod pattern;
pub mod plan;
mod queue_deps;
mod range_steps;
mod requests;
pub mod run;
pub mod sampled;
#[cfg(test)]
mod setup_tests;
mod short_names;
pub mod sources;
pub mod spans;
pub mod stack_cost;
mod step_choice;
mod step_kinds;
pub mod step_path;
pub mod steps;
mod sweep;
mod sync_findings;
mod tallies;
#[cfg(test)]
mod tests;
mod text;
mod text_steps;
mod tracing_cost;
mod wait_findings;
pub mod warmup;
pub mod window;
pub mod windows;
mod words;

use cuflight_trace::model::cuda_errors::ErrorClass;
use findings::{Ctx, MIN_SHARE};
pub use findings::{Evidence, Finding, KernelRow, Severity};
pub use html_escape::esc as escape_html;
use job_roles::{claimed_twice, ctx, job_clocks, roles};
use serde::Serialize;
pub use short_names::shorten;
use steps::{StepRow, StepSource};

use cuflight_trace::model::source::EventSource;
use cuflight_trace::model::trace::TraceError;

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--step NAME`: steps are the ranges named NAME (or starting with it).
    pub step: Option<String>,
    /// `--include-warmup`: the warm-up steps ([`warmup`]) are analysed with the rest.
    pub include_warmup: bool,
    /// `--filter-nvtx`, `--filter-time`: only the steps that start inside the stretches chosen (in each trace its
    /// own: its own ProfilerStep#5, its own first seconds); without steps, those stretches.
    pub filter: Option<cuflight_trace::model::filter::Filter>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ProcessReport {
    /// The trace file the process came from.
    pub file: String,
    /// In the recorded process's pid namespace.
    pub pid: u32,
    /// Its rank in a distributed job (RANK, or the trace's own), null outside one.
    pub rank: Option<u32>,
    /// Its command line.
    pub command: String,
    /// "rank R (local L) pid P", or "pid P".
    pub who: String,
    /// Another process of the same rank (a DataLoader or other worker with GPU work of its own): the pid of
    /// the rank's main process, the one in the job view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_of: Option<u32>,
    /// The run: command line, host, devices, versions, timeline span, drops.
    pub run: run::RunSummary,
    /// The GPU's time from its first op to its last as HTA splits it: idle, compute, and non-compute (copies,
    /// memsets, communication).
    pub breakdown: breakdown::Breakdown,
    /// The idle part of `breakdown` by what the GPU waited for: the host to queue work, back-to-back launches, or
    /// other (summed over streams).
    pub idle_breakdown: breakdown::IdleSplit,
    /// GPU idle time inside the steps, and the part of it no cause explains (also in `idle_causes`).
    pub idle_in_steps_ns: u64,
    /// The time the findings cover: the steps' windows, or without steps the one window of the whole trace.
    pub covered_ns: u64,
    /// The part of `idle_in_steps_ns` no cause explains.
    pub idle_unexplained_ns: u64,
    /// cuflight's attribution of the idle time inside steps (see [`idle`]).
    pub idle_causes: idle::IdleSummary,
    /// HTA's communication/computation overlap.
    pub comm_overlap: overlap::CommOverlap,
    /// Where the steps came from: `option` (`--step NAME`), `profiler_step` (torch.profiler's `ProfilerStep#N`),
    /// `nvtx` (step-like NVTX ranges), `pattern` (the repeating pattern of kernel launches), or `none`.
    pub step_source: StepSource,
    /// What `--filter-nvtx`/`--filter-time` kept: "the 1 of 600 steps that start inside 'ProfilerStep#552' ...".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filtered: Option<String>,
    /// The leading steps that were warm-up: left out of `steps` and everything below unless `included`.
    pub warmup: warmup::Warmup,
    /// Each analysed step, in order.
    pub steps: Vec<StepRow>,
    /// A trace recorded with `record --sample 1/N`: the recorded steps against every step run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<sampled::Sampling>,
    /// All steps together (sums; utilisation over their total time).
    pub step_total: Option<StepRow>,
    /// How the steps' times spread (two steps or more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_spread: Option<steps::StepSpread>,
    /// A serving engine's iterations by kind (prefill, decode, mixed, or graph replay against eager) and its
    /// annotated requests; absent where steps are not told apart that way ([`iterations`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iterations: Option<iterations::Iterations>,
    /// This process's findings, most costly first (also in the report's `findings`).
    pub findings: Vec<Finding>,
    /// The chain of GPU and host work that sets a typical step's time, across streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical_path: Option<step_path::StepPath>,
    /// The chain of work that sets a slow step's time, where the slowest steps take 1.5 times the typical one or more
    /// and are held otherwise (the GPU's part of the path, or its largest group's, 20 points of the step apart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_step_path: Option<step_path::SlowStepPath>,
    /// Kernel time of the analysed steps by kind of work (gemm, attention, ...), largest first.
    pub categories: Vec<tallies::CategoryShare>,
    /// The kernels with the most time in the analysed steps, most first.
    pub top_kernels: Vec<KernelRow>,
    /// Every kernel of the analysed steps by name, most time first (for `cuflight diff`; JSON has the top ones).
    #[serde(skip)]
    pub kernels: Vec<KernelRow>,
    /// Kernel-busy share of each of 100 equal slices of the traced GPU span (for plots)...
    pub utilization_over_time: Vec<f64>,
    /// ... that span: first GPU op start, last GPU op end.
    pub utilization_span_ns: Option<(u64, u64)>,
    /// What the reader should know about the trace itself: cut short, records lost, steps left out, ...
    pub warnings: Vec<String>,
    /// CUDA calls that returned an error: failures first, then expected answers such as "not ready" from a query
    /// (absent where none did, or where the trace holds no return codes: torch.profiler's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cuda_errors: Vec<cuflight_analysis::stats::ApiErrorRow>,
    /// What reading Python stacks cost inside the steps (absent where none were read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python_stacks: Option<stack_cost::StackCost>,
    /// Device counters (`record --gpu-metrics`) by device, kind of work and kernel name, over the whole trace
    /// (absent where the trace has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_metrics: Vec<cuflight_analysis::stats::gpu_metrics::GpuMetricsRow>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// One paragraph: what bounds the run, its most costly finding, and a failure where the run had one.
    pub verdict: String,
    /// Why the traces given together are not one job's ranks, when their times say so: runs more than a minute
    /// apart are reported run by run (`run_verdicts`, `run_jobs`), one process's windows each alone; no job view
    /// or cross-rank finding spans two runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub separate_runs: Option<String>,
    /// Traces of separate runs, reported run by run: each run's own verdict, in time order (`verdict` is the
    /// costliest across them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_verdicts: Vec<RunVerdict>,
    /// Traces given with others that hold nothing to report (nothing recorded, or the agent was off), each with
    /// why: the report is of the others.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub traces_left_out: Vec<String>,
    /// Every process's findings and the cross-rank ones, most costly first.
    pub findings: Vec<Finding>,
    /// Each process with GPU work, in trace order: its run, steps, breakdowns and findings.
    pub processes: Vec<ProcessReport>,
    /// With several ranks: the ranks side by side, on one clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<job::JobReport>,
    /// Traces of separate runs (`separate_runs`), of which a run has several: each such run's job view, in time
    /// order (`job.run` names its traces).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_jobs: Vec<job::JobReport>,
}

/// One run's verdict among separate runs (JSON `run_verdicts`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunVerdict {
    /// Which run: its traces, when it began.
    pub run: job::RunOf,
    /// Its verdict, as its traces given alone would have.
    pub verdict: String,
}

/// Why a report cannot be made (one line each, for the CLI).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{0}: the trace holds no events (was the program run under `cuflight record`, and did it use CUDA?)")]
    Empty(String),
    #[error(
        "{file}: nothing was recorded: the agent was off in process {pid} ({why}); this says nothing about the program"
    )]
    AgentOff { file: String, pid: u32, why: String },
    #[error("{0}: no GPU kernels, copies or memsets in the trace: nothing ran on the GPU while it was recorded")]
    NoGpuWork(String),
    #[error("{0}: no GPU kernels, copies or memsets in the trace: {1}")]
    OtherAccelerator(String, String),
    #[error(
        "{0}: no GPU kernels, copies or memsets in the trace: its process ended before CUPTI delivered them (a crash's \
         dump cannot flush CUPTI); `cuflight stats` lists the CUDA calls it made"
    )]
    NoGpuWorkDelivered(String),
    #[error("{0}: {1}")]
    Filter(String, cuflight_trace::model::filter::FilterError),
    #[error("{0}: no step starts inside {1} (the filter chooses steps by their start)")]
    NoStepChosen(String, String),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

fn sort_findings(v: &mut [Finding]) {
    v.sort_by(|a, b| b.severity.cmp(&a.severity).then(b.time_lost_ns.cmp(&a.time_lost_ns)));
}

impl ProcessReport {
    /// Whether `f` was found in this process.
    pub fn holds(&self, f: &Finding) -> bool {
        self.pid == f.pid && self.rank == f.rank && self.file == f.file
    }

    /// How a report heads this process: "COMMAND (WHO, a worker of pid M)", or WHO alone where the trace names
    /// no command (TraceLens's B200 trace has no process_name: it read "==  (rank 0 pid 6583)").
    pub fn title(&self) -> String {
        let worker = self.worker_of.map_or(String::new(), |m| format!(", a worker of pid {m}"));
        match self.command.trim() {
            "" => format!("{}{worker}", self.who),
            command => format!("{command} ({}{worker})", self.who),
        }
    }
}

/// Names the trace of every finding whose pid and rank another process of the report has too (one process's
/// windows in several files): "pid 11394" three times over tells a reader nothing. With `every` (separate runs,
/// whose files are all that tells their processes apart: each may have a rank 0), every finding's.
fn name_traces(all: &mut [Finding], processes: &mut [ProcessReport], every: bool) {
    let named = trace_named(processes, every);
    let in_processes = processes.iter_mut().flat_map(|p| p.findings.iter_mut());
    for f in all.iter_mut().chain(in_processes).filter(|f| named(f.pid, f.rank)) {
        f.trace = Some(f.file.clone());
    }
}

/// Whether what a process of pid and rank says must name its trace ([`name_traces`]).
fn trace_named(processes: &[ProcessReport], every: bool) -> impl Fn(u32, Option<u32>) -> bool {
    let shared: rustc_hash::FxHashSet<(u32, Option<u32>)> =
        windows::shared_pids(processes).iter().map(|m| (processes[m[0]].pid, processes[m[0]].rank)).collect();
    move |pid, rank| every || shared.contains(&(pid, rank))
}

impl Report {
    /// `traces`: (display name, source); several traces are several ranks of one job, or of separate runs
    /// ([`by_run`]). Each source is read in two or three passes: the plan (steps and their windows), then the
    /// window sweep.
    pub fn compute(traces: &mut [(String, EventSource)], opts: &Options) -> Result<Report, ReportError> {
        let assemble::Planned { plans, chosen, left_out } = assemble::plan_traces(traces, opts)?;
        let procs = gpu_processes(traces, &plans)?;
        let mut report =
            match separated(traces, &plans, &procs).and_then(|s| by_run::groups(&s, traces.len()).map(|g| (s, g))) {
                Some((s, groups)) => by_run::compute(traces, plans, chosen, (&s, groups), opts)?,
                None => Report::compute_planned(traces, &plans, &chosen, opts)?,
            };
        report.traces_left_out = left_out;
        Ok(report)
    }

    /// The report of planned traces, taken as one run: processes apart in time or one process's windows are
    /// reported alone.
    fn compute_planned(
        traces: &mut [(String, EventSource)],
        plans: &job_roles::Plans,
        chosen: &[rustc_hash::FxHashMap<u32, String>],
        opts: &Options,
    ) -> Result<Report, ReportError> {
        let procs = gpu_processes(traces, plans)?;
        let n = procs.len();
        // Traces of different times are not one job: no job view, no cross-rank findings, files not taken as
        // ranks, and the report says why.
        // Runs apart in time come here one by one ([`by_run`]): what is left is one process's windows.
        let separate = separated(traces, plans, &procs).map(|s| {
            let files: Vec<&str> = traces.iter().map(|(f, _)| f.as_str()).collect();
            format!("{}. Each is reported alone", s.describe(&files))
        });
        let several_files = traces.len() > 1 && separate.is_none();
        // Ranks by order (of files, or of GPU processes) only for one job: separate runs keep their own or none.
        let ranked = if separate.is_some() { 1 } else { n };
        let mut warnings: Vec<Vec<String>> =
            procs.iter().map(|&(fi, k)| assemble::plan_warnings(&plans[fi][&k], &plans[fi], opts)).collect();
        let ctxs: Vec<Ctx> = procs
            .iter()
            .enumerate()
            .map(|(i, &(fi, k))| ctx(traces, plans, (fi, k), i, several_files, ranked))
            .collect();
        // One process per rank takes part in the job view; its DataLoader or other workers with GPU work of
        // their own (same rank, from the launcher's environment they inherit) are reported beside it.
        let (primary, main_of) = roles(&ctxs);
        if separate.is_none() {
            for (i, w) in claimed_twice(&ctxs, &primary, &procs, traces) {
                warnings[i].push(w);
            }
        }
        // One rank of a job that communicates: who its collectives wait for is in the other ranks' traces.
        if let [only] = primary[..] {
            let (c, world) = (&ctxs[only], ctxs[only].p.info.world_size);
            if world > 1 && !c.plan.comm.is_empty() {
                let rank = c.rank.map_or_else(|| "one rank".to_string(), |r| format!("rank {r}"));
                warnings[only].push(format!(
                    "{rank} of a {world}-rank job: which rank its collectives wait for is in the others' traces; \
                     report them together (several files, or their directory) for the job view"
                ));
            }
        }
        let job_ctxs: Vec<Ctx> =
            primary.iter().map(|&i| ctx(traces, plans, procs[i], i, several_files, ranked)).collect();
        let (offsets, clocks) = job_clocks(&job_ctxs);
        let mut job_plan = job::plan(&job_ctxs, &offsets, clocks);
        if separate.is_some() {
            // What the collectives matched across unrelated runs is noise: no finding, and no one waited for them.
            job_plan.finding = None;
            job_plan.waits.iter_mut().for_each(|w| w.clear());
        }
        let mut waits: Vec<rustc_hash::FxHashMap<u32, u64>> = vec![Default::default(); n];
        for (j, &i) in primary.iter().enumerate() {
            waits[i] = std::mem::take(&mut job_plan.waits[j]);
        }
        let worker_of: Vec<Option<u32>> = main_of.iter().map(|m| m.map(|j| ctxs[j].p.info.pid)).collect();
        drop(job_ctxs);
        drop(ctxs);
        let swept = assemble::sweep_traces(traces, plans, &procs, &waits)?;
        let mut all = Vec::new();
        let mut processes = Vec::new();
        for (i, (&(fi, k), swept)) in procs.iter().zip(swept).enumerate() {
            let ctx = ctx(traces, plans, (fi, k), i, several_files, ranked);
            let part = assemble::Part {
                file: &traces[fi].0,
                ctx: &ctx,
                file_plans: &plans[fi],
                warnings: std::mem::take(&mut warnings[i]),
                filtered: chosen[fi].get(&k).cloned(),
                worker_of: worker_of[i],
                waited_for_ranks: !waits[i].is_empty(),
            };
            let report = assemble::process_report(part, swept);
            all.extend(report.findings.iter().filter(|f| f.severity > Severity::Info).cloned());
            processes.push(report);
        }
        let job = (primary.len() > 1 && separate.is_none()).then(|| {
            let ctxs: Vec<Ctx> =
                primary.iter().map(|&i| ctx(traces, plans, procs[i], i, several_files, ranked)).collect();
            let inputs: Vec<job::RankInput> = ctxs
                .iter()
                .zip(&offsets)
                .zip(&primary)
                .map(|((ctx, clock), &i)| job::RankInput { ctx, clock, process: &processes[i] })
                .collect();
            job::JobReport::build(&job_plan, &inputs)
        });
        let mut job = job;
        if let Some(c) = job.as_mut().and_then(|j| j.critical_path.as_mut()) {
            let owners: Vec<(usize, u32)> = primary.iter().map(|&i| procs[i]).collect();
            job::critical::fill_gpu_work(c, traces, &owners, &offsets)?;
        }
        all.extend(job_plan.finding);
        sort_findings(&mut all);
        name_traces(&mut all, &mut processes, separate.is_some());
        let verdict = verdict(&all, &processes, separate.is_some());
        let (run_verdicts, run_jobs) = (Vec::new(), Vec::new());
        Ok(Report {
            verdict,
            separate_runs: separate,
            run_verdicts,
            traces_left_out: Vec::new(),
            findings: all,
            processes,
            job,
            run_jobs,
        })
    }

    /// Where the timeline of the file that holds `f`'s process starts (times in a finding are relative to it).
    /// What a finding's share is of: "step time", or "the time covered" for a process without steps (its whole
    /// trace is one window).
    pub fn share_of(&self, f: &Finding) -> &'static str {
        let p = self.processes.iter().find(|p| p.holds(f));
        match p.or_else(|| self.processes.iter().find(|p| p.pid == f.pid)) {
            Some(p) if p.step_total.is_none() => "the time covered",
            _ => "step time",
        }
    }

    pub fn origin_of(&self, f: &Finding) -> u64 {
        let p = self.processes.iter().find(|p| p.holds(f));
        p.or_else(|| self.processes.iter().find(|p| p.pid == f.pid)).map_or(0, |p| p.run.trace_start_ns)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The JSON form, streamed into `w` with a final newline.
    pub fn write_json(&self, mut w: impl std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut w, self)?;
        w.write_all(b"\n")
    }
}

/// The processes with GPU work, in file order, then by process key.
fn gpu_processes(traces: &[(String, EventSource)], plans: &job_roles::Plans) -> Result<Vec<(usize, u32)>, ReportError> {
    let mut procs: Vec<(usize, u32)> = Vec::new();
    for (fi, (_, source)) in traces.iter().enumerate() {
        procs.extend(
            source.processes.keys().filter(|k| plans[fi].get(k).is_some_and(|p| p.gpu_ops > 0)).map(|&k| (fi, k)),
        );
    }
    if procs.is_empty() {
        let names = traces.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>().join(", ");
        let ended_abruptly = traces.iter().any(|(_, s)| s.processes.values().any(|p| !p.info.finished));
        let accelerator = traces.iter().flat_map(|(_, s)| s.processes.values()).find_map(|p| {
            p.info.not_recorded.iter().find(|(kind, _)| kind == cuflight_trace::import::kineto::ACCELERATOR)
        });
        return Err(if let Some((_, why)) = accelerator {
            ReportError::OtherAccelerator(names, why.clone())
        } else if ended_abruptly {
            ReportError::NoGpuWorkDelivered(names)
        } else {
            ReportError::NoGpuWork(names)
        });
    }
    Ok(procs)
}

/// Whether the processes `procs` are of separate runs ([`cuflight_trace::model::runs`]), by their spans.
fn separated(
    traces: &[(String, EventSource)],
    plans: &job_roles::Plans,
    procs: &[(usize, u32)],
) -> Option<cuflight_trace::model::runs::Separated> {
    let mut clock = cuflight_trace::model::job_clock::JobClockBuilder::default();
    for &(fi, k) in procs {
        clock.add_span(fi, &traces[fi].1.processes[&k], &plans[fi][&k].clock);
    }
    clock.separate_runs()
}

/// The verdict; `every_trace`: what a process says names its trace ([`name_traces`]).
fn verdict(findings: &[Finding], processes: &[ProcessReport], every_trace: bool) -> String {
    let performance = performance_verdict(findings, processes, every_trace);
    let faults = processes.iter().filter_map(|p| {
        let r = p.cuda_errors.iter().filter(|r| r.class == ErrorClass::Sticky).min_by_key(|r| r.first_ns)?;
        Some((r, p))
    });
    match faults.min_by_key(|(r, _)| r.first_ns) {
        Some((r, p)) => format!(
            "The run failed: a device fault ({}) reported by {} at +{:.6} s ({}): see its warning. {performance}",
            r.error,
            r.api,
            r.first_ns as f64 / 1e9,
            p.who
        ),
        None => performance,
    }
}

/// From this share of step time with kernels running, the GPU counts as busy: its idle time is not where the time
/// goes.
const BUSY_UTILIZATION: f64 = 0.80;

fn performance_verdict(findings: &[Finding], processes: &[ProcessReport], every_trace: bool) -> String {
    // The lowest of the processes', and whose it is.
    let lowest = |of: &dyn Fn(&ProcessReport) -> Option<f64>| {
        processes.iter().filter_map(|p| Some((of(p)?, p))).min_by(|a, b| a.0.total_cmp(&b.0))
    };
    let in_steps = lowest(&|p| p.step_total.as_ref().map(|t| t.gpu_utilization));
    // Without steps anywhere: the GPU's busy share of the time the findings cover (the whole trace's window),
    // the denominator of their shares, so that a verdict never reads "cpu_bound 71%" beside "busy 100%".
    let covered = || {
        lowest(&|p| (p.covered_ns > 0).then(|| 1.0 - p.idle_in_steps_ns.min(p.covered_ns) as f64 / p.covered_ns as f64))
    };
    let (lowest, label) = match in_steps {
        Some(u) => (Some(u), "GPU utilisation in steps"),
        None => (covered(), "GPU busy in the time covered"),
    };
    let util = lowest.map(|(u, _)| u);
    // A GPU mostly idle whose findings are all small: they explain little of its idle time, which "no major
    // bottleneck" would hide (TraceLens's one-iteration SGLang decode: utilisation 2%, its largest finding 1.8%).
    let mostly_idle = util.is_some_and(|u| u < BUSY_UTILIZATION);
    // Of several processes, the lowest figure names its own: it need not be the finding's process.
    let whose = match lowest {
        Some((_, p)) if processes.len() > 1 => {
            let named = trace_named(processes, every_trace)(p.pid, p.rank);
            let trace = if named { format!(" in {}", p.file) } else { String::new() };
            format!(" at the lowest ({}{trace})", p.rank.map_or(format!("pid {}", p.pid), |r| format!("rank {r}")))
        }
        _ => String::new(),
    };
    // A busy GPU whose kernels show none of the waste read off names: said, so that "no bottleneck" is not read
    // as "nothing to gain".
    let graph_level = processes.iter().any(|p| p.kernels.iter().any(|k| window::is_graph_level(&k.name)));
    let busy = util
        .filter(|&u| u >= BUSY_UTILIZATION && !graph_level)
        .map_or("", |_| counter_findings::clean_busy_note(findings, processes));
    // Graph-level tracing hides the kernels inside graphs, and their replays count as busy from first node to last.
    let hidden = if graph_level {
        " CUDA graphs were traced at graph level (--trace graphs): the kernels inside them are not seen, and each \
         replay counts as busy from its first node's start to its last node's end."
    } else {
        ""
    };
    let util = util.map_or(String::new(), |u| format!(" {label}: {}{whose}.{busy}{hidden}", words::percent(u)));
    // What the shares are of: step time, or without steps the time covered.
    let of = if in_steps.is_some() { "step time" } else { "the time covered" };
    match findings.first() {
        Some(f) if f.severity >= Severity::Medium => {
            let who = if processes.len() > 1 {
                let who = f.rank.map_or(format!("pid {}", f.pid), |r| format!("rank {r}"));
                format!(" ({who}{})", f.trace.as_ref().map_or(String::new(), |t| format!(" in {t}")))
            } else {
                String::new()
            };
            let cost = if f.time_lost_ns > 0 { format!(", {:.0}% of {of}", f.share * 100.0) } else { String::new() };
            format!("{}: {}{who}{cost}.{util}", f.kind, f.summary)
        }
        Some(f) => format!(
            "{}; the largest is {}: {} ({:.1}% of {of}).{util}",
            if mostly_idle { "No finding explains much of the GPU's idle time" } else { "No major bottleneck" },
            f.kind,
            f.summary,
            f.share * 100.0
        ),
        None if mostly_idle => format!(
            "No finding explains the GPU's idle time (none reaches {:.0}% of {of}; see the idle causes under each \
             process).{util}",
            MIN_SHARE * 100.0
        ),
        None => format!("No bottleneck above {:.0}% of {of}.{util}", MIN_SHARE * 100.0),
    }
}

#[cfg(test)]
mod verdict_tests {
    use super::{performance_verdict, Severity};
    use crate::tests::{api, kernel, report_of_all_steps};
    use cuflight_format::{EventKind, RawEvent};

    /// Small findings beside a GPU that idles half its steps explain little of that idle time; beside a busy GPU
    /// they are "no major bottleneck".
    #[test]
    fn a_mostly_idle_gpu_is_never_told_there_is_no_major_bottleneck() {
        // Steps of 100 ns, each with one kernel of `busy` ns.
        let verdict = |busy: u64, keep_findings: bool| {
            let strings = [(1, "gemm_kernel"), (8, "step#0"), (9, "cudaLaunchKernel")];
            let mut events = Vec::new();
            for step in 0..8u64 {
                let t = 1000 + step * 100;
                events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 100) });
                events.push(api(9, t + 1, 2, step as u32 + 1));
                events.push(kernel(1, t + 5, busy, step as u32 + 1));
            }
            let mut r = report_of_all_steps(&strings, events);
            r.findings.iter_mut().for_each(|f| f.severity = Severity::Low);
            r.findings.truncate(usize::from(keep_findings));
            performance_verdict(&r.findings, &r.processes, false)
        };
        let idle = verdict(50, true);
        assert!(idle.starts_with("No finding explains much of the GPU's idle time; the largest is"), "{idle}");
        let busy = verdict(90, true);
        assert!(busy.starts_with("No major bottleneck; the largest is"), "{busy}");
        let idle = verdict(50, false);
        assert!(idle.starts_with("No finding explains the GPU's idle time (none reaches 1% of step time"), "{idle}");
        assert!(verdict(90, false).starts_with("No bottleneck above 1% of step time"), "{}", verdict(90, false));
    }
}
