//! `cuflight report`: names the bottleneck, how much time it costs and the fix.
//!
//! Per process (rank): HTA's temporal and idle breakdowns ([`breakdown`]), the training steps and their
//! TensorBoard-style breakdown ([`steps`]), and findings: why the GPU idles inside steps ([`idle`],
//! `findings.rs`), what the GPU work itself says (`gpu_findings.rs`) and, across ranks, the job view: clocks
//! aligned, collectives matched, the straggler, who waited for whom, the critical path ([`job`]). Findings are sorted by severity, then by the time they cost; the verdict names the first.

pub mod breakdown;
mod busy;
mod busy_findings;
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
pub mod overlap;
mod pattern;
pub mod plan;
mod queue_deps;
mod range_steps;
pub mod run;
pub mod sampled;
mod short_names;
pub mod sources;
pub mod spans;
pub mod stack_cost;
mod step_choice;
pub mod step_path;
pub mod steps;
mod sweep;
mod tallies;
#[cfg(test)]
mod tests;
mod text;
mod wait_findings;
pub mod warmup;
pub mod window;

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

#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    pub file: String,
    pub pid: u32,
    pub rank: Option<u32>,
    pub command: String,
    /// "rank R (local L) pid P", or "pid P".
    pub who: String,
    /// Another process of the same rank (a DataLoader or other worker with GPU work of its own): the pid of
    /// the rank's main process, the one in the job view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_of: Option<u32>,
    /// The run: command line, host, devices, versions, timeline span, drops.
    pub run: run::RunSummary,
    pub breakdown: breakdown::Breakdown,
    pub idle_breakdown: breakdown::IdleSplit,
    /// GPU idle time inside the steps, and the part of it no cause explains (also in `idle_causes`).
    pub idle_in_steps_ns: u64,
    /// The time the findings cover: the steps' windows, or without steps the one window of the whole trace.
    pub covered_ns: u64,
    pub idle_unexplained_ns: u64,
    /// cuflight's attribution of the idle time inside steps (see [`idle`]).
    pub idle_causes: idle::IdleSummary,
    /// HTA's communication/computation overlap.
    pub comm_overlap: overlap::CommOverlap,
    pub step_source: StepSource,
    /// What `--filter-nvtx`/`--filter-time` kept: "the 1 of 600 steps that start inside 'ProfilerStep#552' ...".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filtered: Option<String>,
    /// The leading steps that were warm-up: left out of `steps` and everything below unless `included`.
    pub warmup: warmup::Warmup,
    pub steps: Vec<StepRow>,
    /// A trace recorded with `record --sample 1/N`: the recorded steps against every step run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<sampled::Sampling>,
    /// All steps together (sums; utilisation over their total time).
    pub step_total: Option<StepRow>,
    /// A serving engine's iterations by kind (prefill, decode, mixed, or graph replay against eager) and its
    /// annotated requests; absent where steps are not told apart that way ([`iterations`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iterations: Option<iterations::Iterations>,
    pub findings: Vec<Finding>,
    /// The chain of GPU and host work that sets a typical step's time, across streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical_path: Option<step_path::StepPath>,
    /// Kernel time of the analysed steps by kind of work (gemm, attention, ...), largest first.
    pub categories: Vec<tallies::CategoryShare>,
    pub top_kernels: Vec<KernelRow>,
    /// Every kernel of the analysed steps by name, most time first (for `cuflight diff`; JSON has the top ones).
    #[serde(skip)]
    pub kernels: Vec<KernelRow>,
    /// Kernel-busy share of each of 100 equal slices of the traced GPU span (for plots)...
    pub utilization_over_time: Vec<f64>,
    /// ... that span: first GPU op start, last GPU op end.
    pub utilization_span_ns: Option<(u64, u64)>,
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

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub verdict: String,
    /// Every process's findings and the cross-rank ones, most costly first.
    pub findings: Vec<Finding>,
    pub processes: Vec<ProcessReport>,
    /// With several ranks: the ranks side by side, on one clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<job::JobReport>,
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

impl Report {
    /// `traces`: (display name, source); several traces are several ranks of one job. Each source is read in
    /// two or three passes: the plan (steps and their windows), then the window sweep.
    pub fn compute(traces: &mut [(String, EventSource)], opts: &Options) -> Result<Report, ReportError> {
        let mut plans = Vec::with_capacity(traces.len());
        let mut chosen: Vec<rustc_hash::FxHashMap<u32, String>> = Vec::with_capacity(traces.len());
        for (file, source) in traces.iter_mut() {
            let mut plan = plan::plan(source, opts.step.as_deref())?;
            let said = match &opts.filter {
                Some(f) => step_choice::choose(&mut plan, f, source, file)?,
                None => {
                    for p in plan.values_mut() {
                        // `record --sample`: the recorded steps, warm-up apart (the other steps hold no GPU work).
                        if p.keep_sampled_steps() {
                            continue;
                        }
                        if opts.include_warmup {
                            p.warmup.included = true;
                        } else {
                            p.leave_out_warmup();
                        }
                    }
                    Default::default()
                }
            };
            chosen.push(said);
            if plan.values().all(|p| p.events == 0) {
                // Not the program's fault when the agent was off: say why it was.
                if let Some(p) = source.processes.values().find(|p| !p.info.status.is_empty()) {
                    return Err(ReportError::AgentOff {
                        file: file.clone(),
                        pid: p.info.pid,
                        why: p.info.status.clone(),
                    });
                }
                return Err(ReportError::Empty(file.clone()));
            }
            plans.push(plan);
        }
        // Processes with GPU work, in file order, then by process key.
        let mut procs: Vec<(usize, u32)> = Vec::new();
        for (fi, (_, source)) in traces.iter().enumerate() {
            procs.extend(
                source.processes.keys().filter(|k| plans[fi].get(k).is_some_and(|p| p.gpu_ops > 0)).map(|&k| (fi, k)),
            );
        }
        if procs.is_empty() {
            let names: Vec<&str> = traces.iter().map(|(f, _)| f.as_str()).collect();
            return Err(ReportError::NoGpuWork(names.join(", ")));
        }
        let several_files = traces.len() > 1;
        let warnings: Vec<Vec<String>> = procs
            .iter()
            .map(|&(fi, k)| {
                let plan = &plans[fi][&k];
                let mut warn = Vec::new();
                for (name, start) in &plan.unclosed {
                    if cuflight_trace::model::range_roles::step_like(name) || opts.step.as_deref().is_some_and(|o| name.starts_with(o)) {
                        warn.push(format!("step range \"{name}\" opened at {start} ns never ended; it was left out"));
                    }
                }
                if plan.no_steps && plan.sampling.is_some() {
                    // Said by the sampling section: the recorded time slices are what is analysed.
                } else if plan.no_steps && opts.filter.is_some() {
                    warn.push("no steps found: findings cover the stretches the filter chose".into());
                } else if plan.no_steps {
                    if opts.step.is_some() {
                        warn.push(format!("no range named {:?}: findings cover the whole trace", opts.step.as_deref().unwrap_or("")));
                    } else {
                        warn.push("no steps found (no ProfilerStep#N, no step-like NVTX range, no repeating launch pattern): findings cover the whole trace; name the step range with --step NAME".into());
                    }
                }
                if plan.queued_before_first_op_ns > 0 {
                    warn.push(format!(
                        "the first GPU op waited {:.2} ms in its queue after its launch with nothing of this trace running: the GPU was busy with work the trace does not hold (begun before the capture, or another process's); findings start at that op",
                        plan.queued_before_first_op_ns as f64 / 1e6
                    ));
                }
                warn
            })
            .collect();
        let n = procs.len();
        let ctxs: Vec<Ctx> =
            procs.iter().enumerate().map(|(i, &(fi, k))| ctx(traces, &plans, (fi, k), i, several_files, n)).collect();
        // One process per rank takes part in the job view; its DataLoader or other workers with GPU work of
        // their own (same rank, from the launcher's environment they inherit) are reported beside it.
        let (primary, main_of) = roles(&ctxs);
        let mut warnings = warnings;
        for (i, w) in claimed_twice(&ctxs, &primary, &procs, traces) {
            warnings[i].push(w);
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
        let job_ctxs: Vec<Ctx> = primary.iter().map(|&i| ctx(traces, &plans, procs[i], i, several_files, n)).collect();
        let (offsets, clocks) = job_clocks(&job_ctxs);
        let mut job_plan = job::plan(&job_ctxs, &offsets, clocks);
        let mut waits: Vec<rustc_hash::FxHashMap<u32, u64>> = vec![Default::default(); n];
        for (j, &i) in primary.iter().enumerate() {
            waits[i] = std::mem::take(&mut job_plan.waits[j]);
        }
        let worker_of: Vec<Option<u32>> = main_of.iter().map(|m| m.map(|j| ctxs[j].p.info.pid)).collect();
        drop(job_ctxs);
        drop(ctxs);
        // The sweep, file by file (every process of a file in one pass).
        let mut swept: Vec<Option<sweep::Swept>> = (0..procs.len()).map(|_| None).collect();
        for (fi, (_, source)) in traces.iter_mut().enumerate() {
            let mine: Vec<usize> = (0..procs.len()).filter(|&i| procs[i].0 == fi).collect();
            let rounding = source.fractional_us_timestamps;
            let mut sweeps: rustc_hash::FxHashMap<u32, (usize, sweep::Sweep)> = mine
                .iter()
                .map(|&i| {
                    let k = procs[i].1;
                    (k, (i, sweep::Sweep::new(&plans[fi][&k], &waits[i], rounding)))
                })
                .collect();
            source.for_each(|k, p, e| {
                if let Some((_, s)) = sweeps.get_mut(&k) {
                    s.event(p, e);
                }
            })?;
            for (k, (i, s)) in sweeps {
                swept[i] = Some(s.finish(&source.processes[&k]));
            }
        }
        let mut all = Vec::new();
        let mut processes = Vec::new();
        for (i, &(fi, k)) in procs.iter().enumerate() {
            let p = &traces[fi].1.processes[&k];
            let plan = &plans[fi][&k];
            let ctx = ctx(traces, &plans, (fi, k), i, several_files, n);
            let swept = swept[i].take().expect("every process swept");
            let idle = &swept.idle;
            let mut warnings = warnings[i].clone();
            let unexplained = idle.summary().idle_unexplained_ns;
            if let Some(cov) = plan.api_id_coverage.filter(|&c| c < 0.02) {
                if unexplained * 20 > idle.idle_in_steps_ns {
                    warnings.push(format!(
                        "the trace holds 1 in {:.0} of the CUDA calls its correlation ids number: it was sampled or \
                         filtered, so GPU work is missing, and the {} of idle time no cause explains is likely that \
                         work",
                        1.0 / cov.max(1e-9),
                        findings::ms(unexplained)
                    ));
                }
            }
            let mut fs = findings::idle_findings(&ctx, idle, &swept);
            fs.extend(findings::allocator_churn(&ctx, idle, &swept));
            fs.extend(wait_findings::wait_findings(&ctx, idle));
            fs.extend(wait_findings::graph_setup(&ctx, idle));
            fs.extend(gpu_findings::pageable_memcpy(&ctx, &swept));
            fs.extend(gpu_findings::memcpy_heavy(&ctx, &swept));
            fs.extend(gpu_findings::fp32_gemm(&ctx, &swept));
            fs.extend(busy_findings::misaligned_gemm(&ctx, &swept));
            fs.extend(busy_findings::elementwise_chains(&ctx, &swept));
            fs.extend(busy_findings::unfused_attention(&ctx, &swept));
            fs.extend(counter_findings::memory_bound(&ctx, &swept));
            fs.extend(counter_findings::tensor_underused(&ctx, &swept));
            fs.extend(gpu_findings::copy_kernels(&ctx, &swept));
            fs.extend(gpu_findings::nccl_exposed(&ctx, &swept, !waits[i].is_empty()));
            fs.extend(gpu_findings::memory_growth(&ctx, &swept));
            fs.retain(|f| f.share >= MIN_SHARE || f.kind == "memory_growth");
            let hot = gpu_findings::hot_kernels(&ctx, &swept);
            let top_kernels = hot.as_ref().map_or(vec![], |h| h.evidence.kernels.clone());
            fs.extend(hot);
            sort_findings(&mut fs);
            all.extend(fs.iter().filter(|f| f.severity > Severity::Info).cloned());
            let step_total = (!swept.rows.is_empty()).then(|| total_row(&swept.rows));
            let iterations = iterations::summarize(&swept.rows, &plan.steps.windows, &plan.requests);
            let python_stacks =
                swept.stack_cost.finish(swept.rows.len(), step_total.as_ref().map_or(0, |t| t.duration_ns));
            warnings.extend(python_stacks.and_then(|c| c.warning()));
            // A Python process whose stacks the agent could not read: its findings name no source lines.
            if let Some(why) = cuflight_format::python_reader::describe(p.info.python_reader) {
                warnings.push(format!("no Python stacks: {why}, so findings name no source lines"));
            }
            let categories = swept.kernels.by_category(|id| p.string(id), swept.rows.len());
            let kernels = gpu_findings::kernel_rows(&ctx, &swept.kernels, usize::MAX);
            let command = if p.name.is_empty() { p.info.cmdline.join(" ") } else { p.name.clone() };
            // The file's timeline spans all its processes (one Perfetto export per file).
            let file_span = plans[fi].values().filter_map(|q| q.timeline).reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
            let (trace_start_ns, trace_end_ns) = file_span.unwrap_or((0, 0));
            // A device fault or a failed allocation is what the reader must know first.
            let (cuda_errors, failures) = plan.failed.finish(p, trace_start_ns, plan.device_memory);
            warnings.splice(0..0, failures);
            let run = run::RunSummary {
                command_line: p.info.cmdline.clone(),
                host: p.info.host.clone(),
                started_realtime_ns: p.info.start_realtime_ns,
                trace_start_ns,
                trace_end_ns,
                devices: plan.devices.clone(),
                used_devices: plan.used_devices.iter().copied().collect(),
                cuda_driver_version: plan.driver_version,
                cuda_runtime_version: p.cuda_runtime_version,
                cupti_version: p.info.cupti_version,
                drops: p.info.drops,
                dropped_total: p.info.drops.total().saturating_add(p.refused),
                unseen_begin: p.info.unseen_begin,
                refused: p.refused,
                finished: p.info.finished,
                agent_status: p.info.status.clone(),
            };
            processes.push(ProcessReport {
                file: traces[fi].0.clone(),
                pid: k,
                rank: ctx.rank,
                command,
                who: cuflight_trace::model::trace::who(ctx.rank, p.info.local_rank, p.info.pid),
                worker_of: worker_of[i],
                run,
                breakdown: swept.breakdown,
                idle_breakdown: swept.idle_split,
                idle_in_steps_ns: idle.idle_in_steps_ns,
                covered_ns: ctx.step_total_ns,
                idle_unexplained_ns: idle.summary().idle_unexplained_ns,
                idle_causes: idle.summary(),
                comm_overlap: swept.comm_overlap,
                step_source: plan.steps.source,
                filtered: chosen[fi].get(&k).cloned(),
                warmup: plan.warmup.clone(),
                sampling: plan.sampling.as_ref().map(|c| sampled::Sampling::new(c, &swept.rows)),
                steps: swept.rows,
                step_total,
                iterations,
                findings: fs,
                critical_path: swept.step_path,
                categories,
                top_kernels,
                kernels,
                utilization_over_time: swept.utilization,
                utilization_span_ns: plan.busy_extent,
                warnings,
                cuda_errors,
                python_stacks,
                gpu_metrics: swept.gpu_metrics,
            });
        }
        let job = (primary.len() > 1).then(|| {
            let ctxs: Vec<Ctx> = primary.iter().map(|&i| ctx(traces, &plans, procs[i], i, several_files, n)).collect();
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
        let verdict = verdict(&all, &processes);
        Ok(Report { verdict, findings: all, processes, job })
    }

    /// Where the timeline of the file that holds `f`'s process starts (times in a finding are relative to it).
    pub fn origin_of(&self, f: &Finding) -> u64 {
        let p = self.processes.iter().find(|p| p.pid == f.pid && p.rank == f.rank);
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
        kernels: sum(|r| r.kernels),
        eager_kernels: sum(|r| r.eager_kernels),
        graph_replays: sum(|r| r.graph_replays),
        counters: steps::StepCounters::combine(rows.iter().filter_map(|r| r.counters)),
    }
}

fn verdict(findings: &[Finding], processes: &[ProcessReport]) -> String {
    let performance = performance_verdict(findings, processes);
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

fn performance_verdict(findings: &[Finding], processes: &[ProcessReport]) -> String {
    let in_steps = processes
        .iter()
        .filter_map(|p| p.step_total.as_ref())
        .map(|t| t.gpu_utilization)
        .fold(None, |m: Option<f64>, u| Some(m.map_or(u, |m| m.min(u))));
    // Without steps anywhere: the GPU's busy share of the time the findings cover (the whole trace's window),
    // the denominator of their shares, so that a verdict never reads "cpu_bound 71%" beside "busy 100%".
    let covered = || {
        processes
            .iter()
            .filter(|p| p.covered_ns > 0)
            .map(|p| 1.0 - p.idle_in_steps_ns.min(p.covered_ns) as f64 / p.covered_ns as f64)
            .fold(None, |m: Option<f64>, u| Some(m.map_or(u, |m| m.min(u))))
    };
    let (util, label) = match in_steps {
        Some(u) => (Some(u), "GPU utilisation in steps"),
        None => (covered(), "GPU busy in the time covered"),
    };
    // A busy GPU whose kernels show none of the waste read off names: said, so that "no bottleneck" is not read
    // as "nothing to gain".
    let graph_level = cuflight_format::view::GRAPH_LEVEL_NAME.to_str().unwrap_or_default();
    let graph_level = processes.iter().any(|p| p.kernels.iter().any(|k| k.name == graph_level));
    let busy = util.filter(|&u| u >= BUSY_UTILIZATION && !graph_level).map_or("", |_| {
        counter_findings::clean_busy_note(findings, processes.iter().any(|p| !p.gpu_metrics.is_empty()))
    });
    // Graph-level tracing hides the kernels inside graphs, and their replays count as busy from first node to last.
    let hidden = if graph_level {
        " CUDA graphs were traced at graph level (--trace graphs): the kernels inside them are not seen, and each \
         replay counts as busy from its first node's start to its last node's end."
    } else {
        ""
    };
    let util = util.map_or(String::new(), |u| format!(" {label}: {:.0}%.{busy}{hidden}", u * 100.0));
    // What the shares are of: step time, or without steps the time covered.
    let of = if in_steps.is_some() { "step time" } else { "the time covered" };
    match findings.first() {
        Some(f) if f.severity >= Severity::Medium => {
            let who = if processes.len() > 1 {
                f.rank.map_or(format!(" (pid {})", f.pid), |r| format!(" (rank {r})"))
            } else {
                String::new()
            };
            let cost = if f.time_lost_ns > 0 { format!(", {:.0}% of {of}", f.share * 100.0) } else { String::new() };
            format!("{}: {}{who}{cost}.{util}", f.kind, f.summary)
        }
        Some(f) => format!(
            "No major bottleneck; the largest is {}: {} ({:.1}% of {of}).{util}",
            f.kind,
            f.summary,
            f.share * 100.0
        ),
        None => format!("No bottleneck above {:.0}% of {of}.{util}", MIN_SHARE * 100.0),
    }
}
