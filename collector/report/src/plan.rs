//! What the report must know about each process before its window sweep ([`super::sweep`]), found in one or two
//! streamed passes that keep only what is small: candidate step ranges, the launching threads, the extent of the
//! GPU work, the communication kernels (for the straggler) and a few facts. Never a list of every event.
//!
//! Pass one reads everything but the windows; pass two gives each step its window (the GPU work it launched can
//! end later than its host range), and, for a program without step ranges, finds the steps from the repeating
//! pattern of launches (the one case that keeps one entry per GPU op: a fallback for unannotated programs).

use super::range_steps::{steps_from_ranges, Candidates, OpenKey, RangeSteps};
use super::requests::Requests;
use super::spans::Span;
use super::steps::{StepSource, Steps};
use super::warmup::SetupSeen;
use super::window::{HostRange, NameFlags};
use cuflight_format::calls::CallEffects;
use cuflight_format::view::SYNC_STREAM_WAIT_EVENT;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::range_roles::{self, LoaderWorkers};
use cuflight_trace::model::ranges::Pairer;
use cuflight_trace::model::trace::Process;
use cuflight_trace::model::{inductor, kernel_category};
use rustc_hash::{FxHashMap, FxHashSet};

use cuflight_analysis::stats::op_perf::gemm::GemmPerfRow;
use cuflight_analysis::stats::op_perf::OpPerfAcc;
use cuflight_trace::model::collectives::CollectiveSpans;
use cuflight_trace::model::job_clock::ClockFacts;
use cuflight_trace::model::launches::LaunchJoin;

/// A communication kernel, in the process's GPU-op order (the k-th one of every rank is the same collective).
#[derive(Clone, Copy, Debug)]
pub struct CommOp {
    pub start: u64,
    pub duration: u64,
    pub name: u32,
    /// Its launch call's (thread, start, end), until the plan tells [`CommOp::collective`] by it.
    launch: Option<(u32, u64, u64)>,
    /// The collective it ran, where the host's range around its launch or its name says.
    pub collective: Option<cuflight_trace::model::collectives::Collective>,
}

/// One process's plan.
pub struct Plan {
    pub names: NameFlags,
    pub steps: Steps,
    /// Names of the step ranges: such ranges are neither data loading nor CPU work.
    pub step_names: FxHashSet<u32>,
    /// Step-like ranges opened and never closed: (name, start).
    pub unclosed: Vec<(String, u64)>,
    /// Other threads' step ranges left out, where they overlapped the steps' (said as a warning).
    pub other_threads_steps: Option<String>,
    /// Threads whose calls launched GPU work in the trace.
    pub launchers: FxHashSet<u32>,
    /// First start and last end of the GPU ops with a duration (the busy time's extent).
    pub busy_extent: Option<Span>,
    pub capability: Option<(u32, u32)>,
    pub device_memory: Option<u64>,
    /// Every device the trace lists (first record of each ordinal), and the CUDA driver's version.
    pub devices: Vec<super::run::RunDevice>,
    pub driver_version: u32,
    /// Recorded on ROCm ([`Process::rocm`]): no CUPTI traced its launches.
    pub rocm: bool,
    /// What the process tells of the job's clock: its first REALTIME offset, its collectives' ends, the span of
    /// what the timeline draws (the same facts `merge` and the Parquet export gather in a pass of their own).
    pub clock: ClockFacts,
    /// Streams wait on events recorded in other streams (cudaStreamWaitEvent): GPU gaps may be dependencies.
    pub has_stream_waits: bool,
    /// HTA's traced-iterations rule: with two or more distinct `ProfilerStep` ranges, the last one's start.
    pub last_profiler_step: Option<u64>,
    /// Correlations whose (last) copy goes device to pageable host memory: an "async" call for it blocks.
    pub pageable_dtoh: FxHashSet<u32>,
    pub comm: Vec<CommOp>,
    /// Whether any data-loading annotation (other than a step range) has a duration.
    pub loader_annotated: bool,
    /// Where the annotated DataLoader loads, where its annotations say and agree (two loaders of different kinds
    /// say nothing of which one the GPU waited for).
    pub loader_workers: Option<LoaderWorkers>,
    /// No steps were found: the one window is the whole trace.
    pub no_steps: bool,
    /// Without steps, how long the trace's first GPU op waited queued while nothing of the trace ran (ns; 0 when
    /// under [`super::idle::UNSEEN_WORK_NS`]): the GPU was busy with work the trace does not hold (started before it, or
    /// another process's), so the whole-trace window starts at that op, not at its launch.
    pub queued_before_first_op_ns: u64,
    /// Leading steps left out because they ended before the process's first CUDA call or GPU op.
    pub steps_before_cuda: usize,
    pub events: u64,
    pub gpu_ops: u64,
    /// Device ordinals its GPU work ran on.
    pub used_devices: std::collections::BTreeSet<u32>,
    /// CUDA calls in the trace per correlation id their ids span (None under 10,000 ids): a trace that holds 1
    /// in 50 or fewer was sampled or filtered, and GPU work is missing from it.
    pub api_id_coverage: Option<f64>,
    /// The leading steps that are warm-up ([`super::warmup`]); still in `steps` until [`Plan::leave_out_warmup`].
    pub warmup: super::warmup::Warmup,
    /// CUDA calls that returned an error, and a device fault's suspect launch.
    pub failed: super::failed_calls::FailedCalls,
    /// GEMM operators by shape, with their kernels and achieved rates (traces that recorded shapes).
    pub gemm_perf: Vec<GemmPerfRow>,
    /// Ranges around the requests a server handled ([`NameFlags::REQUEST`]): those that ended, and how many were
    /// still open when the trace ended.
    pub requests: Requests,
    /// A model server: its steps are iterations it names prefill, decode or mixed, or it annotates requests. Fixes
    /// then speak of serving (batching, scheduling), not of training.
    pub serving: bool,
    /// A training loop: an optimizer's kernels ran (PyTorch's foreach and fused optimizers, the default on CUDA;
    /// [`cuflight_trace::model::kernel_category`]), or a backward pass's
    /// ([`kernel_category::is_backward_kernel`]: a hand-written optimizer runs plain elementwise kernels). Fixes then speak of losses and optimizers; a program that is
    /// neither (inference, an HPC code) gets fixes in general terms.
    pub training: bool,
    /// What the agent recorded whole under `record --sample` (empty otherwise), and, once the recorded steps
    /// are chosen ([`super::sampled::choose`]), what the report says of them.
    pub sampled: super::sampled::SampledSpans,
    pub sampling: Option<super::sampled::Chosen>,
}

type DeviceFacts = (Option<(u32, u32)>, Option<u64>);

/// Pass one's state for one process.
struct First {
    names: NameFlags,
    launches: LaunchJoin,
    /// GEMM operators' calls with their shapes and GPU time (traces that recorded shapes).
    gemm_perf: OpPerfAcc,
    pairer: Pairer,
    /// Host ranges that could be steps, whatever the source chosen later.
    candidates: Candidates,
    has_stream_waits: bool,
    /// Each device's (compute capability, memory), from its first record, in order seen.
    device_facts: Vec<(u32, DeviceFacts)>,
    devices: Vec<super::run::RunDevice>,
    driver_version: u32,
    clock: ClockFacts,
    busy_extent: Option<Span>,
    /// The first GPU op's (launch call start, start), when its launch is in the trace.
    first_op_queued: Option<Span>,
    max_op_end: Option<u64>,
    sampled: super::sampled::SampledSpans,
    launchers: FxHashSet<u32>,
    /// Per thread: its API calls' first start and last end.
    api_extent: FxHashMap<u32, Span>,
    profiler_steps: (FxHashSet<u32>, u64),
    pageable_dtoh: FxHashSet<u32>,
    comm: Vec<CommOp>,
    /// The host's ranges that announce a collective, per thread: which one each of `comm` ran.
    collective_spans: CollectiveSpans,
    /// Names of data-loading ranges with a duration (whether they are steps is known only later).
    loader_names: FxHashSet<u32>,
    events: u64,
    gpu_ops: u64,
    used_devices: std::collections::BTreeSet<u32>,
    warm: super::warmup::Evidence,
    /// API calls with a correlation id: (count, lowest id, highest id).
    api_ids: (u64, u32, u32),
    failed: super::failed_calls::FailedCalls,
    requests: Requests,
}

fn is_candidate(name: &str, option: Option<&str>) -> bool {
    option.is_some_and(|o| name.starts_with(o)) || name.starts_with("ProfilerStep#") || range_roles::step_like(name)
}

impl First {
    fn new(p: &Process) -> First {
        First {
            failed: Default::default(),
            names: NameFlags::new(p),
            launches: LaunchJoin::default(),
            gemm_perf: OpPerfAcc::default(),
            pairer: Pairer::default(),
            candidates: Candidates::default(),
            has_stream_waits: false,
            device_facts: Vec::new(),
            devices: Vec::new(),
            driver_version: 0,
            clock: ClockFacts::default(),
            busy_extent: None,
            first_op_queued: None,
            max_op_end: None,
            sampled: Default::default(),
            launchers: FxHashSet::default(),
            api_extent: FxHashMap::default(),
            profiler_steps: (FxHashSet::default(), 0),
            pageable_dtoh: FxHashSet::default(),
            comm: Vec::new(),
            collective_spans: CollectiveSpans::default(),
            loader_names: FxHashSet::default(),
            events: 0,
            gpu_ops: 0,
            used_devices: Default::default(),
            warm: super::warmup::Evidence::new(),
            api_ids: (0, u32::MAX, 0),
            requests: Requests::default(),
        }
    }

    fn range(&mut self, p: &Process, option: Option<&str>, r: HostRange, key: Option<OpenKey>) {
        // Whether recorded as a range (an import) or as NVTX push/pop (a recording): the same steps, one rule.
        if self.names.has(r.name, NameFlags::PROFILER_STEP) {
            self.profiler_steps.0.insert(r.name);
            self.profiler_steps.1 = self.profiler_steps.1.max(r.start);
        }
        if is_candidate(p.string(r.name), option) {
            self.candidates.closed(r, key);
        }
        if r.end > r.start && self.names.has(r.name, NameFlags::LOADER) {
            self.loader_names.insert(r.name);
        }
        if self.names.has(r.name, NameFlags::REQUEST) {
            self.requests.add_ended(p.string(r.name), (r.start, r.end));
        }
        if let Some(c) = self.names.range_collective(r.name) {
            self.collective_spans.add(r.tid, (r.start, r.end), c, None);
        }
    }

    fn event(&mut self, p: &Process, option: Option<&str>, e: &RawEvent) {
        self.events += 1;
        self.failed.feed(p, e);
        self.sampled.event(e);
        let kind = e.kind();
        self.clock.feed(p, e);
        if kind == Some(EventKind::Device) {
            self.gemm_perf.device(0, e);
        }
        if kind == Some(EventKind::Device) && self.devices.iter().all(|d| d.ordinal != e.device) {
            self.devices.push(super::run::device(e, p.string(e.name)));
            self.driver_version = self.driver_version.max(e.as_device().driver_version);
        }
        if kind == Some(EventKind::Range) && !e.as_range().on_device {
            self.gemm_perf.range(0, p, e);
            let r = HostRange { start: e.start, end: e.end.max(e.start), name: e.name, tid: e.tid };
            self.range(p, option, r, None);
        } else if let Some(r) = self.pairer.feed(e) {
            let key = (r.tid, r.domain, r.start, r.name, r.async_range);
            self.range(p, option, HostRange { start: r.start, end: r.end, name: r.name, tid: r.tid }, Some(key));
        } else if matches!(kind, Some(EventKind::NvtxPush | EventKind::NvtxStart))
            && is_candidate(p.string(e.name), option)
        {
            // A step range opens: the work launched inside it is counted from now on.
            let async_range = kind == Some(EventKind::NvtxStart);
            self.candidates.open((e.tid, e.as_nvtx().domain, e.start, e.name, async_range));
        }
        match kind {
            Some(EventKind::Api) => {
                self.launches.api(p, e);
                self.gemm_perf.call(0, e);
                if e.correlation != 0 {
                    let ids = &mut self.api_ids;
                    *ids = (ids.0 + 1, ids.1.min(e.correlation), ids.2.max(e.correlation));
                }
                let x = self.api_extent.entry(e.tid).or_insert((e.start, e.end.max(e.start)));
                x.1 = x.1.max(e.end.max(e.start));
                let call = self.names.call(e.name);
                if call.has(CallEffects::STREAM_WAIT) {
                    self.has_stream_waits = true;
                }
                if call.allocates() && !call.has(CallEffects::ASYNC) {
                    self.warm.alloc_call(e.start);
                }
                if call.has(CallEffects::BEGINS_CAPTURE) || call.has(CallEffects::INSTANTIATES_GRAPH) {
                    self.warm.graph_setup(e.start, call.has(CallEffects::INSTANTIATES_GRAPH));
                }
                if super::idle::sets_cuda_up(call, e.duration()) {
                    let span = (e.start, e.end.max(e.start));
                    self.warm.cuda_setup(SetupSeen { span, tid: e.tid, call: e.name, first_launch: false });
                }
            }
            Some(EventKind::Sync) if e.as_sync().kind == SYNC_STREAM_WAIT_EVENT => self.has_stream_waits = true,
            Some(EventKind::Device) if self.device_facts.iter().all(|(d, _)| *d != e.device) => {
                let d = e.as_device();
                let cc = Some(d.compute_capability).filter(|c| c.0 > 0);
                self.device_facts.push((e.device, (cc, Some(d.memory_bytes).filter(|&m| m > 0))));
            }
            Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset) => {
                self.gpu_ops += 1;
                self.used_devices.insert(e.device);
                if e.end > e.start {
                    let x = self.busy_extent.get_or_insert((e.start, e.end));
                    x.1 = x.1.max(e.end);
                }
                self.max_op_end = Some(self.max_op_end.unwrap_or(0).max(e.end));
                let joined = self.launches.work(e);
                // What a step launches tells a server's kinds of steps apart, as the sweep counts them.
                let graph = joined.is_some_and(|j| self.names.call(j.call.name).has(CallEffects::LAUNCHES_GRAPH));
                if graph && joined.is_some_and(|j| j.first) {
                    self.warm.graph_replays.push(e.start);
                } else if kind == Some(EventKind::Kernel) && !graph {
                    self.warm.eager_kernels.push(e.start);
                }
                if let Some(call) = joined.map(|w| w.call) {
                    if self.gpu_ops == 1 {
                        self.first_op_queued = Some((call.start, e.start));
                    }
                    self.gemm_perf.work(0, e, &call);
                    self.launchers.insert(call.tid);
                    self.candidates.work(call.start, e.end);
                }
                if kind == Some(EventKind::Memcpy) {
                    if super::window::is_dtoh_to_pageable(e) {
                        self.pageable_dtoh.insert(e.correlation);
                    } else {
                        self.pageable_dtoh.remove(&e.correlation);
                    }
                }
                if kind == Some(EventKind::Kernel) {
                    let first = !self.warm.kernels.contains_key(&e.name);
                    let call = joined.map(|j| j.call).filter(|_| first);
                    if let Some(c) =
                        call.filter(|c| super::idle::first_launch_sets_cuda_up(graph, c.end.saturating_sub(c.start)))
                    {
                        let span = (c.start, c.end);
                        self.warm.cuda_setup(SetupSeen { span, tid: c.tid, call: c.name, first_launch: true });
                    }
                    self.warm.kernel(e.name, e.start);
                }
                if kind == Some(EventKind::Kernel) && self.names.has(e.name, NameFlags::COLLECTIVE) {
                    let launch = joined.map(|j| (j.call.tid, j.call.start, j.call.end));
                    self.comm.push(CommOp {
                        start: e.start,
                        duration: e.duration(),
                        name: e.name,
                        launch,
                        collective: None,
                    });
                }
            }
            _ => {}
        }
    }
}

/// Pass two's state for a process whose steps come from its launch pattern: (launch time or start, name) of
/// every kernel, and (launch time, end) of every op whose launch is in the trace.
#[derive(Default)]
struct Pattern {
    launches: LaunchJoin,
    /// (launch time or start, name, launching thread) of every kernel.
    seq: Vec<(u64, u32, u32)>,
    /// (start, name, thread) of every call that makes the host wait for the GPU: where kernel names alone cannot
    /// tell the steps apart (one kernel repeating), the waits may ([`super::pattern::steps`]).
    waits: Vec<(u64, u32, u32)>,
    /// Where the last of them ended: a step cut at waits ends with its wait.
    waits_end: u64,
    launched: Vec<(u64, u64)>,
}

/// Plans every process of `source` (keys as in `source.processes`): one pass, and a second for processes without
/// step ranges (their steps come from the pattern of launches).
pub fn plan(
    source: &mut cuflight_trace::model::source::EventSource,
    option: Option<&str>,
) -> Result<FxHashMap<u32, Plan>, cuflight_trace::model::trace::TraceError> {
    let mut first: FxHashMap<u32, First> = source.processes.iter().map(|(&k, p)| (k, First::new(p))).collect();
    source.for_each(|k, p, e| {
        if let Some(f) = first.get_mut(&k) {
            f.event(p, option, e);
        }
    })?;
    let mut host: FxHashMap<u32, Option<RangeSteps>> = FxHashMap::default();
    for (k, f) in &first {
        host.insert(*k, steps_from_ranges(&source.processes[k], &f.candidates.ranges(), option));
    }
    let mut pattern = launch_patterns(source, &first, &host)?;
    let mut plans = FxHashMap::default();
    for (k, f) in first {
        let (steps, left_out) = match host.remove(&k).flatten() {
            Some(RangeSteps { source, ranges, left_out }) => {
                ((source, ranges.iter().map(|r| r.0).collect(), ranges.iter().map(|r| r.1).collect()), left_out)
            }
            None => (pattern_steps(pattern.remove(&k).unwrap_or_default(), f.max_op_end.unwrap_or(0)), None),
        };
        let mut plan = plan_of(&source.processes[&k], f, steps);
        plan.other_threads_steps = left_out;
        plans.insert(k, plan);
    }
    Ok(plans)
}

/// The second pass, over the processes whose ranges make no steps: what their launch pattern needs.
fn launch_patterns(
    source: &mut cuflight_trace::model::source::EventSource,
    first: &FxHashMap<u32, First>,
    host: &FxHashMap<u32, Option<RangeSteps>>,
) -> Result<FxHashMap<u32, Pattern>, cuflight_trace::model::trace::TraceError> {
    let mut pattern: FxHashMap<u32, Pattern> =
        host.iter().filter(|(_, h)| h.is_none()).map(|(&k, _)| (k, Pattern::default())).collect();
    if pattern.is_empty() {
        return Ok(pattern);
    }
    source.for_each(|k, p, e| {
        let Some(s) = pattern.get_mut(&k) else { return };
        match e.kind() {
            Some(EventKind::Api) => {
                s.launches.api(p, e);
                // A synchronising call, or a copy that returns when it is done (cudaMemcpy: `.item()`).
                if first[&k].names.call(e.name).waits_for_gpu() {
                    s.waits.push((e.start, e.name, e.tid));
                    s.waits_end = s.waits_end.max(e.end);
                }
            }
            Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset) => {
                let joined = s.launches.work(e);
                let t = joined.map(|w| w.call.start);
                // One launch, one entry: a CUDA graph's replay is one launch of many kernels, all at the
                // launch's time (counted each, a replay of 421 kernels made "steps" of 0 ms), named by its
                // first kernel, or by the launch call where its first node is a copy or memset.
                let graph = joined.filter(|w| first[&k].names.call(w.call.name).has(CallEffects::LAUNCHES_GRAPH));
                // An op without its launch call in the trace has no launching thread (u32::MAX).
                let tid = joined.map_or(u32::MAX, |w| w.call.tid);
                if e.kind() == Some(EventKind::Kernel) && joined.is_none_or(|w| w.first) {
                    s.seq.push((t.unwrap_or(e.start), e.name, tid));
                } else if let Some(w) = graph.filter(|w| w.first) {
                    s.seq.push((w.call.start, w.call.name, tid));
                }
                if let Some(t) = t {
                    s.launched.push((t, e.end));
                }
            }
            _ => {}
        }
    })?;
    Ok(pattern)
}

/// Steps from a launch pattern (`max_op_end`: the process's last GPU op's end): their source, host ranges, and
/// the end of the last GPU op launched in each.
fn pattern_steps(s: Pattern, max_op_end: u64) -> (StepSource, Vec<HostRange>, Vec<u64>) {
    let ranges = super::pattern::steps_of_threads(s.seq, s.waits, s.waits_end, max_op_end);
    let mut gpu_end = vec![0; ranges.len()];
    for (t, end) in s.launched {
        let k = ranges.partition_point(|r| r.start <= t);
        if k > 0 && t < ranges[k - 1].end {
            gpu_end[k - 1] = gpu_end[k - 1].max(end);
        }
    }
    let src = if ranges.is_empty() { StepSource::None } else { StepSource::Pattern };
    (src, ranges, gpu_end)
}

/// A trace without steps is one window: from the first GPU op or launching call to the last one's end, unless the
/// first op waited long in its queue with nothing of the trace running: the GPU was busy with unseen work (a
/// capture that began mid-run), which is no gap of this program's making. Returns the window and that wait.
fn whole_trace(f: &First, launcher_extent: Option<Span>) -> (Span, u64) {
    let mut first = f.busy_extent.map_or(0, |b| b.0).min(launcher_extent.map_or(u64::MAX, |c| c.0));
    let mut queued_ns = 0;
    if let Some((queued, started)) = f.first_op_queued {
        if started.saturating_sub(queued) >= super::idle::UNSEEN_WORK_NS {
            queued_ns = started - queued;
            first = started;
        }
    }
    let last = f.busy_extent.map_or(0, |b| b.1).max(launcher_extent.map_or(0, |c| c.1));
    ((first, last.max(first)), queued_ns)
}

/// The requests a server annotated, with those still open at the trace's end.
fn requests_of(p: &Process, f: &First, mut requests: Requests) -> Requests {
    requests.begun_before = f.pairer.ends_without_start() as u64;
    for (name, start) in f.pairer.unclosed().filter(|&(name, _)| f.names.has(name, NameFlags::REQUEST)) {
        requests.add_open(p.string(name), start);
    }
    requests
}

/// The warm-up of `steps`, its kernels named.
fn warmup_of(p: &Process, f: &First, steps: &Steps, no_steps: bool) -> super::warmup::Warmup {
    let mut warmup = if no_steps {
        super::warmup::Warmup::default()
    } else {
        super::warmup::detect(&steps.windows, &steps.names, &f.warm)
    };
    warmup.kernels_only_in_warmup = warmup.example_kernels.iter().map(|&k| p.string(k).to_string()).collect();
    warmup.run_again_example = warmup.kernels_run_again.first().map(|&k| p.string(k).to_string());
    for later in &mut warmup.later {
        later.examples = later.kernel_ids.iter().take(3).map(|&k| p.string(k).to_string()).collect();
        later.recompiled =
            !later.kernel_ids.is_empty() && later.kernel_ids.iter().all(|&k| inductor::is_inductor_kernel(p.string(k)));
    }
    warmup.account_cuda_setup(&f.warm.cuda_setup, &f.launchers, |id| p.string(id));
    warmup.compiled = warmup.steps > 0 && f.warm.kernels.keys().any(|&k| inductor::is_inductor_kernel(p.string(k)));
    warmup
}

/// One process's plan from its first pass and its steps (their source, host ranges, and the end of the last GPU
/// op launched in each).
fn plan_of(
    p: &Process,
    mut f: First,
    (source_kind, mut ranges, mut gpu_end): (StepSource, Vec<HostRange>, Vec<u64>),
) -> Plan {
    // Steps that ended before the process's first CUDA call or GPU op hold nothing of CUDA: a trace that
    // recorded NVTX before CUDA (an `attach --inject` of an older cuflight, while CUPTI was being set up: 143
    // steps of 1.2 ms in the shared H100 window) would count each as a step of 0% GPU. Left out and said.
    let cuda_from = f.api_extent.values().map(|x| x.0).chain(f.busy_extent.map(|b| b.0)).min();
    // Not in a sampled trace, whose unsampled steps keep their ranges and nothing else by design.
    let before_cuda =
        cuda_from.filter(|_| f.sampled.one_in == 0).map_or(0, |from| ranges.partition_point(|r| r.end <= from));
    let steps_before_cuda = if before_cuda < ranges.len() { before_cuda } else { 0 };
    ranges.drain(..steps_before_cuda);
    gpu_end.drain(..steps_before_cuda);
    let names = ranges
        .iter()
        .enumerate()
        .map(|(i, r)| if r.name == 0 { format!("step {i} (pattern)") } else { p.string(r.name).to_string() })
        .collect();
    let windows = windows(&ranges, &gpu_end);
    let step_names: FxHashSet<u32> = ranges.iter().map(|r| r.name).collect();
    let launcher_extent = f
        .launchers
        .iter()
        .filter_map(|t| f.api_extent.get(t))
        .fold(None, |acc: Option<Span>, x| Some(acc.map_or(*x, |a| (a.0.min(x.0), a.1.max(x.1)))));
    let unclosed = f.pairer.unclosed().map(|(name, start)| (p.string(name).to_string(), start)).collect();
    // The device the work ran on decides (the lowest used ordinal): a trace lists every GPU it could see.
    let ran_on = f.used_devices.first().and_then(|u| f.device_facts.iter().find(|(d, _)| d == u));
    let (capability, device_memory) = ran_on.or(f.device_facts.first()).map_or((None, None), |(_, facts)| *facts);
    let mut steps = Steps { source: source_kind, host: ranges, windows, names };
    let serving = steps.names.iter().any(|n| range_roles::iteration_kind(n).is_some());
    let no_steps = steps.windows.is_empty();
    let mut queued_before_first_op_ns = 0;
    if no_steps {
        let (window, queued) = whole_trace(&f, launcher_extent);
        (steps.windows, steps.names, queued_before_first_op_ns) = (vec![window], vec!["whole trace".into()], queued);
    }
    let loaders: Vec<u32> = f.loader_names.iter().copied().filter(|n| !step_names.contains(n)).collect();
    let loader_annotated = !loaders.is_empty();
    let mut kinds = loaders.iter().filter_map(|&n| range_roles::loader_workers(p.string(n)));
    let loader_workers = kinds.next().filter(|first| kinds.all(|k| k == *first));
    let warmup = warmup_of(p, &f, &steps, no_steps);
    let requests = std::mem::take(&mut f.requests);
    let requests = requests_of(p, &f, requests);
    f.collective_spans.finish();
    for op in &mut f.comm {
        let around = op.launch.and_then(|(tid, start, end)| f.collective_spans.around(tid, (start, end)));
        op.collective = around.or_else(|| f.names.kernel_collective(op.name));
    }
    Plan {
        names: f.names,
        steps,
        step_names,
        unclosed,
        other_threads_steps: None,
        launchers: f.launchers,
        busy_extent: f.busy_extent,
        capability,
        device_memory,
        devices: f.devices,
        driver_version: f.driver_version,
        rocm: p.rocm,
        clock: f.clock,
        has_stream_waits: f.has_stream_waits,
        last_profiler_step: (f.profiler_steps.0.len() >= 2).then_some(f.profiler_steps.1),
        pageable_dtoh: f.pageable_dtoh,
        comm: f.comm,
        loader_annotated,
        loader_workers,
        no_steps,
        queued_before_first_op_ns,
        steps_before_cuda,
        events: f.events,
        gpu_ops: f.gpu_ops,
        used_devices: f.used_devices,
        api_id_coverage: {
            let (n, lo, hi) = f.api_ids;
            let span = hi.saturating_sub(lo) as u64 + 1;
            (n > 0 && span >= 10_000).then(|| n as f64 / span as f64)
        },
        warmup,
        failed: f.failed,
        gemm_perf: f.gemm_perf.finish_one(p).gemm,
        serving: serving || !requests.ended.is_empty() || requests.open_at_end > 0,
        training: f.warm.kernels.keys().any(|&n| {
            let name = p.string(n);
            kernel_category::kernel_category(name) == kernel_category::Category::Optimizer
                || kernel_category::is_backward_kernel(name)
        }),
        requests,
        sampled: f.sampled,
        sampling: None,
    }
}

/// Step windows: host range extended to the end of the GPU work it launched, never overlapping the previous.
fn windows(host: &[HostRange], gpu_end: &[u64]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::with_capacity(host.len());
    let mut prev_end = 0;
    for (r, &g) in host.iter().zip(gpu_end) {
        let start = r.start.max(prev_end);
        let end = r.end.max(g).max(start);
        out.push((start, end));
        prev_end = end;
    }
    out
}
