//! The stages of [`crate::Report::compute`] that work one trace or one process at a time: each trace planned
//! (steps chosen, the warm-up left out or kept), every process of a trace swept in one pass, and each process's
//! sweep turned into its report (findings, run summary, tables). The job view across processes stays in `compute`.

use crate::findings::{self, Ctx, MIN_SHARE};
use crate::job_roles::Plans;
use crate::steps::StepRow;
use crate::{
    busy_findings, counter_findings, gpu_findings, iterations, plan, run, sampled, sort_findings, step_choice,
    step_path, steps, sweep, sync_findings, wait_findings, words, Finding, Options, ProcessReport, ReportError,
};
use cuflight_trace::model::source::EventSource;
use rustc_hash::FxHashMap;

/// What [`plan_traces`] makes of the traces.
pub(crate) struct Planned {
    pub plans: Plans,
    /// Per trace, what `--filter-*` chose in each process (by key).
    pub chosen: Vec<FxHashMap<u32, String>>,
    /// The traces left out, each with why.
    pub left_out: Vec<String>,
}

/// Every trace planned. Among several, a trace with nothing recorded (a rank killed before its first flush, its
/// agent off) is left out, with an empty plan, rather than ending the report of the others; alone, or all of them
/// so, it is an error.
pub(crate) fn plan_traces(traces: &mut [(String, EventSource)], opts: &Options) -> Result<Planned, ReportError> {
    let mut plans = Vec::with_capacity(traces.len());
    let mut chosen = Vec::with_capacity(traces.len());
    let mut left_out: Vec<ReportError> = Vec::new();
    for (file, source) in traces.iter_mut() {
        let mut plan = plan::plan(source, opts.step.as_deref())?;
        if plan.values().all(|p| p.events == 0) {
            // Not the program's fault when the agent was off: say why it was.
            let why = match source.processes.values().find(|p| !p.info.status.is_empty()) {
                Some(p) => ReportError::AgentOff { file: file.clone(), pid: p.info.pid, why: p.info.status.clone() },
                None => ReportError::Empty(file.clone()),
            };
            left_out.push(why);
            plans.push(FxHashMap::default());
            chosen.push(FxHashMap::default());
            continue;
        }
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
        plans.push(plan);
    }
    if left_out.len() == traces.len() && !left_out.is_empty() {
        return Err(left_out.swap_remove(0));
    }
    Ok(Planned { plans, chosen, left_out: left_out.iter().map(ToString::to_string).collect() })
}

/// What a process's plan warns of: step ranges never ended, no steps found, work queued before the trace.
pub(crate) fn plan_warnings(plan: &plan::Plan, file_plans: &FxHashMap<u32, plan::Plan>, opts: &Options) -> Vec<String> {
    let mut warn = Vec::new();
    // Times as the rest of the report gives them: from the start of the file's timeline.
    let origin = file_plans.values().filter_map(|q| q.clock.span.map(|t| t.0)).min().unwrap_or(0);
    for (name, start) in &plan.unclosed {
        if cuflight_trace::model::range_roles::step_like(name)
            || opts.step.as_deref().is_some_and(|o| name.starts_with(o))
        {
            let at = super::run::relative(*start, origin);
            warn.push(format!("step range \"{name}\" opened at {at} never ended; it was left out"));
        }
    }
    warn.extend(plan.other_threads_steps.clone());
    if plan.no_steps && plan.sampling.is_some() {
        // Said by the sampling section: the recorded time slices are what is analysed.
    } else if plan.no_steps && opts.filter.is_some() {
        warn.push("no steps found: findings cover the stretches the filter chose".into());
    } else if plan.no_steps {
        if opts.step.is_some() {
            warn.push(format!(
                "no range named {:?}: findings cover the whole trace",
                opts.step.as_deref().unwrap_or("")
            ));
        } else {
            warn.push(
                "no steps found (no ProfilerStep#N, no step-like NVTX range, no repeating launch pattern): findings \
                 cover the whole trace; name the step range with --step NAME"
                    .into(),
            );
        }
    }
    if plan.steps_before_cuda > 0 {
        warn.push(format!(
            "{} steps ended before the first CUDA call the trace holds, with nothing of CUDA in them (NVTX recorded \
             before CUDA was: an attach by an older cuflight, while CUPTI was being set up): left out",
            plan.steps_before_cuda
        ));
    }
    if plan.queued_before_first_op_ns > 0 {
        warn.push(format!(
            "the first GPU op waited {:.2} ms in its queue after its launch with nothing of this trace running: the \
             GPU was busy with work the trace does not hold (begun before the capture, or another process's); \
             findings start at that op",
            plan.queued_before_first_op_ns as f64 / 1e6
        ));
    }
    warn
}

/// The sweep, file by file (every process of a file in one pass): one result per entry of `procs`.
pub(crate) fn sweep_traces(
    traces: &mut [(String, EventSource)],
    plans: &Plans,
    procs: &[(usize, u32)],
    waits: &[FxHashMap<u32, u64>],
) -> Result<Vec<sweep::Swept>, ReportError> {
    let mut swept: Vec<Option<sweep::Swept>> = (0..procs.len()).map(|_| None).collect();
    for (fi, (_, source)) in traces.iter_mut().enumerate() {
        let rounding = source.fractional_us_timestamps;
        let mut sweeps: FxHashMap<u32, (usize, sweep::Sweep)> = (0..procs.len())
            .filter(|&i| procs[i].0 == fi)
            .map(|i| {
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
    Ok(swept.into_iter().map(|s| s.expect("every process swept")).collect())
}

/// One process, as `compute` knows it after the sweep.
pub(crate) struct Part<'a> {
    pub file: &'a str,
    pub ctx: &'a Ctx<'a>,
    /// Every process's plan in the process's file (the file's timeline spans them all).
    pub file_plans: &'a FxHashMap<u32, plan::Plan>,
    pub warnings: Vec<String>,
    pub filtered: Option<String>,
    pub worker_of: Option<u32>,
    /// Its collectives' waits for other ranks are known (the job view matched them).
    pub waited_for_ranks: bool,
}

/// A process's report from its sweep.
pub(crate) fn process_report(part: Part, swept: sweep::Swept) -> ProcessReport {
    let Part { file, ctx, file_plans, mut warnings, filtered, worker_of, waited_for_ranks } = part;
    let (p, plan) = (ctx.p, ctx.plan);
    let idle = &swept.idle;
    let unexplained = idle.summary().idle_unexplained_ns;
    if let Some(cov) = plan.api_id_coverage.filter(|_| plan.calls_sampled()) {
        if unexplained * 20 > idle.idle_in_steps_ns {
            warnings.push(format!(
                "the trace holds 1 in {:.0} of the CUDA calls its correlation ids number: it was sampled or \
                 filtered, so GPU work is missing, and the {} of idle time no cause explains is likely that work",
                1.0 / cov.max(1e-9),
                findings::ms(unexplained)
            ));
        }
    }
    // The file's timeline spans all its processes (one Perfetto export per file).
    let file_span = file_plans.values().filter_map(|q| q.clock.span).reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    let (trace_start_ns, trace_end_ns) = file_span.unwrap_or((0, 0));
    let (fs, top_kernels) = findings_of(ctx, &swept, waited_for_ranks, (trace_start_ns, trace_end_ns));
    let step_total = (!swept.rows.is_empty()).then(|| total_row(&swept.rows));
    let iterations = iterations::summarize(&swept.rows, &plan.steps.windows, &plan.requests);
    let python_stacks = swept.stack_cost.finish(swept.rows.len(), step_total.as_ref().map_or(0, |t| t.duration_ns));
    warnings.extend(python_stacks.and_then(|c| c.warning()));
    // A Python process whose stacks the agent could not read: its findings name no source lines.
    if let Some(why) = cuflight_format::python_reader::describe(p.info.python_reader) {
        warnings.push(format!("no Python stacks: {why}, so findings name no source lines"));
    }
    let categories = swept.kernels.by_category(|id| p.string(id), swept.rows.len());
    let kernels = gpu_findings::kernel_rows(ctx, &swept.kernels, usize::MAX);
    let command = if p.name.is_empty() { p.info.cmdline.join(" ") } else { p.name.clone() };
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
        hip_runtime_version: p.hip_runtime_version,
        rocm: p.rocm,
        drops: p.info.drops,
        dropped_total: p.info.drops.total().saturating_add(p.refused),
        unseen_begin: p.info.unseen_begin,
        refused: p.refused,
        finished: p.info.finished,
        agent_status: p.info.status.clone(),
    };
    let mut report = ProcessReport {
        file: file.to_string(),
        pid: ctx.pid,
        rank: ctx.rank,
        command,
        who: cuflight_trace::model::trace::who(ctx.rank, p.info.local_rank, p.info.pid),
        worker_of,
        run,
        breakdown: swept.breakdown,
        idle_breakdown: swept.idle_split,
        idle_in_steps_ns: idle.idle_in_steps_ns,
        covered_ns: ctx.step_total_ns,
        idle_unexplained_ns: unexplained,
        idle_causes: idle.summary(),
        comm_overlap: swept.comm_overlap,
        step_source: plan.steps.source,
        filtered,
        warmup: plan.warmup.clone(),
        sampling: plan.sampling.as_ref().map(|c| sampled::Sampling::new(c, &swept.rows)),
        step_spread: super::steps::spread(&swept.rows),
        steps: swept.rows,
        step_total,
        iterations,
        findings: fs,
        slow_step_path: swept.step_paths.slow().map(|mut slow| {
            slow.path.calls_sampled = plan.calls_sampled();
            slow
        }),
        critical_path: swept
            .step_paths
            .typical
            .map(|path| step_path::StepPath { calls_sampled: plan.calls_sampled(), ..path }),
        categories,
        top_kernels,
        kernels,
        utilization_over_time: swept.utilization,
        utilization_span_ns: plan.busy_extent,
        warnings,
        cuda_errors,
        python_stacks,
        gpu_metrics: swept.gpu_metrics,
    };
    if p.rocm {
        in_rocm_terms(&mut report);
    }
    report
}

/// Says the prose of a process recorded on ROCm in HIP's terms ([`words::in_rocm_terms`]): its findings, its
/// warnings, its paths and what the iterations could not attribute. The names the trace holds stay as they are.
fn in_rocm_terms(r: &mut ProcessReport) {
    let say = |s: &mut String| *s = words::in_rocm_terms(s);
    for f in &mut r.findings {
        say(&mut f.summary);
        say(&mut f.fix);
        f.evidence.facts.iter_mut().for_each(say);
        f.evidence.examples.iter_mut().for_each(|e| say(&mut e.what));
    }
    r.warnings.iter_mut().for_each(say);
    let paths = r.critical_path.iter_mut().chain(r.slow_step_path.iter_mut().map(|s| &mut s.path));
    for path in paths {
        path.by_kind.iter_mut().for_each(|s| say(&mut s.what));
        path.longest.iter_mut().for_each(|l| say(&mut l.what));
    }
    if let Some(it) = &mut r.iterations {
        it.not_attributed.iter_mut().for_each(say);
    }
}

/// Every finding of one process, most severe and costly first, those under [`MIN_SHARE`] left out (but a memory
/// leak); and the hot kernels' rows. `span`: the file's timeline.
fn findings_of(
    ctx: &Ctx,
    swept: &sweep::Swept,
    waited_for_ranks: bool,
    span: (u64, u64),
) -> (Vec<Finding>, Vec<findings::KernelRow>) {
    let idle = &swept.idle;
    let mut fs: Vec<Finding> = crate::loading::data_loading(ctx, idle).into_iter().collect();
    fs.extend(sync_findings::sync_stall(ctx, idle, swept));
    fs.extend(findings::idle_findings(ctx, idle, swept));
    fs.extend(findings::allocator_churn(ctx, idle, swept));
    fs.extend(wait_findings::wait_findings(ctx, idle));
    fs.extend(wait_findings::graph_setup(ctx, idle));
    fs.extend(wait_findings::cuda_setup(ctx, idle, span));
    fs.extend(gpu_findings::pageable_memcpy(ctx, swept));
    fs.extend(gpu_findings::memcpy_heavy(ctx, swept));
    fs.extend(gpu_findings::fp32_gemm(ctx, swept));
    fs.extend(busy_findings::misaligned_gemm(ctx, swept));
    fs.extend(busy_findings::elementwise_chains(ctx, swept));
    fs.extend(busy_findings::unfused_attention(ctx, swept));
    fs.extend(counter_findings::memory_bound(ctx, swept));
    fs.extend(counter_findings::tensor_underused(ctx, swept));
    fs.extend(gpu_findings::copy_kernels(ctx, swept));
    fs.extend(gpu_findings::nccl_exposed(ctx, swept, waited_for_ranks));
    fs.extend(gpu_findings::memory_growth(ctx, swept));
    fs.retain(|f| f.share >= MIN_SHARE || f.kind == "memory_growth");
    // The path follows launches and synchronisations: with most calls missing it is not the step's.
    if !ctx.plan.calls_sampled() {
        super::path_bound::bound_by_path(&mut fs, &swept.step_paths, ctx.step_total_ns, ctx.steps_count());
    }
    let hot = gpu_findings::hot_kernels(ctx, swept);
    let top_kernels = hot.as_ref().map_or(vec![], |h| h.evidence.kernels.clone());
    fs.extend(hot);
    sort_findings(&mut fs);
    (fs, top_kernels)
}

/// All steps together: sums, and utilisation over their total time.
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
