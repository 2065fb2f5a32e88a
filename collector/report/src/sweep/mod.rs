//! The report's pass over a process's events once its step windows are planned ([`super::plan`]): one window at
//! a time, as the events go by. GPU busy time, CUDA calls and host ranges are merged as they arrive and kept only
//! until the windows they overlap are done; a window is done when the stream has passed its end (and the call
//! stretch in progress cannot change it). What is kept per process is the open windows' share of the trace plus
//! bounded accumulators (per-name rows, distinct durations, five examples), so memory does not grow with the
//! trace, only with its longest step.

mod operators;
mod windows_done;

use super::breakdown::{Breakdown, Hta, IdleSplit};
use super::busy::{Growing, Utilization};
use super::idle::{first_launch_sets_cuda_up, sets_cuda_up, IdleCauses};
use super::plan::Plan;
use super::queue_deps::{Enders, StreamWaits};
use super::spans::Span;
use super::steps::StepRow;
use super::tallies::{add_call, CallTotals, Copies, Counts, KernelAgg, UnionTotal};
use super::window::{stream_key, Closer, CommByCollective, Ender, HostCall, HostRange, NameFlags, SetupCall};
use cuflight_format::calls::{CallClass, CallEffects};
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::launches::LaunchJoin;
use cuflight_trace::model::memory::LiveMemory;
use cuflight_trace::model::range_roles;
use cuflight_trace::model::ranges::Pairer;
use cuflight_trace::model::trace::Process;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;

/// What the sweep found in one process.
#[derive(Default)]
pub struct Swept {
    pub idle: IdleCauses,
    pub rows: Vec<StepRow>,
    pub breakdown: Breakdown,
    pub idle_split: IdleSplit,
    pub utilization: Vec<f64>,
    /// Kernels launched one by one that start in steps: durations, and their launch calls' durations.
    pub kernel_durations: Counts,
    pub launch_durations: Counts,
    /// Kernels that start in steps as nodes of replayed CUDA graphs.
    pub graph_kernels: u64,
    /// The launch calls of the CUDA graph replays whose first op starts in steps: their durations.
    pub graph_launch_durations: Counts,
    /// Those replays were traced at graph level (`--trace graphs`), one record each.
    pub graph_level: bool,
    /// Synchronising calls of the launching threads that start in steps, each thread's counted apart (a call
    /// nested in another of its thread's, the runtime's driver call, is the same wait).
    pub sync_calls: CallTotals,
    /// The threads those calls were made on.
    pub sync_threads: usize,
    /// `cudaMalloc`/`cudaFree` (not the stream-ordered ones) in steps after the first.
    pub alloc_calls: CallTotals,
    pub pageable: Copies,
    pub other_copies: Copies,
    pub fp32: KernelAgg,
    pub fp32_union_ns: u64,
    pub comm: KernelAgg,
    pub comm_union_ns: u64,
    /// Communication time in steps with no compute beside it (less each collective's wait for other ranks).
    pub comm_exposed_ns: u64,
    /// The same time by collective.
    pub comm_by_collective: CommByCollective,
    /// HTA's communication/computation overlap over the whole trace.
    pub comm_overlap: super::overlap::CommOverlap,
    pub kernels: KernelAgg,
    /// Kernel sequences in steps that one fused kernel would replace.
    pub fusable: super::fusion::Fusable,
    /// Live device memory at the end of each step (its host range: see `Sweep::memory_mark`).
    pub memory_at_end: Vec<i64>,
    /// The most spans, calls and ranges held at once when a window was done (what bounds the sweep's memory).
    pub peak_kept: usize,
    /// The critical path of the typical step, and of one step per group of steps by duration
    /// ([`super::step_path`]).
    pub step_paths: super::step_path::Walked,
    /// The Python lines behind synchronising calls, allocations and (sampled) launches in steps.
    pub sources: super::sources::Sources,
    /// What the Python stacks read in steps cost.
    pub stack_cost: super::stack_cost::StackCost,
    /// Device counters (`record --gpu-metrics`) by device, kind of work and kernel name, over the whole trace.
    pub gpu_metrics: Vec<cuflight_analysis::stats::gpu_metrics::GpuMetricsRow>,
}

/// Which piece a copy or collective leaves in the windows it overlaps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Piece {
    Pageable,
    OtherCopy,
    /// A collective's kernel, with its [`CommByCollective::slot`].
    Comm(u8),
}

/// One process's sweep state.
pub struct Sweep<'a> {
    plan: &'a Plan,
    /// Per communication kernel (by its order in the process): time it only waited for other ranks.
    waits: &'a FxHashMap<u32, u64>,
    step_starts: Vec<u64>,
    launches: LaunchJoin,
    pairer: Pairer,
    hta: Hta,
    overlap: super::overlap::OverlapSweep,
    hta_rounding: bool,
    utilization: Utilization,
    busy: Growing,
    kernel: Growing,
    compute: Growing,
    memcpy: Growing,
    memset: Growing,
    runtime: Growing,
    closers: VecDeque<Closer>,
    enders: Enders,
    stream_waits: StreamWaits,
    /// What the critical paths of the typical step and of one step per group by duration need.
    paths: super::step_path::PathSteps,
    /// The first op of the latest start time.
    group: Option<Closer>,
    calls: VecDeque<HostCall>,
    call: Option<HostCall>,
    /// Stream captures in progress: thread → when its `cudaStreamBeginCapture` began.
    capturing: FxHashMap<u32, u64>,
    /// Per launching thread, the end of its last synchronising call, and whether one was counted in `sync_calls`.
    sync_until: FxHashMap<u32, (u64, bool)>,
    /// Graph set-up done: stream captures (begin to end) and instantiations, not yet behind every window.
    graph_setup: Vec<Span>,
    /// The launching threads' calls in which CUDA set itself up, not yet behind every window (unsorted: a kernel's
    /// first launch is known when its kernel comes).
    cuda_setup: Vec<SetupCall>,
    /// The kernels launched so far (names), to tell a kernel's first launch.
    kernels_launched: FxHashSet<u32>,
    /// CUDA graph launches traced node by node, by their call's start: the call's end and the nodes seen so far,
    /// until no window left holds the call ([`cuflight_format::tracing::GRAPH_NODE_TRACING_NS`]: what tracing adds per node).
    graph_nodes: crate::window::GraphNodes,
    /// Closed host ranges (not steps): (span, data loading).
    ranges: Vec<(Span, bool)>,
    operators: operators::OpenOperators,
    pieces: Vec<(Span, Piece)>,
    /// Windows before this one are done.
    done: usize,
    /// (device, stream) of the first op in steps, and whether every op in steps used it.
    stream: Option<(u32, u32)>,
    single_stream: bool,
    /// The idle attribution as if the steps used one stream (kept while they may), and as if several.
    idle_single: Option<IdleCauses>,
    comm_seen: u32,
    fp32_union: UnionTotal,
    fusion: super::fusion::FusionSweep,
    comm_union: UnionTotal,
    live: LiveMemory,
    counters: cuflight_analysis::stats::gpu_metrics::GpuMetricsAcc,
    /// Device counter samples by the window they start in.
    step_counters: Vec<cuflight_trace::model::gpu_counters::CounterMeans>,
    /// Per window: (kernels, eager kernels, graph replays) that start in it (see [`StepRow::kernels`]).
    step_work: Vec<(u64, u64, u64)>,
    /// Python stack reads in windows not done yet ([`super::stack_cost`]).
    stack_reads: super::stack_cost::PendingReads,
    /// Histories this long are trimmed between windows (a power of two).
    trim_at: usize,
    out: Swept,
}

impl<'a> Sweep<'a> {
    pub fn new(plan: &'a Plan, waits: &'a FxHashMap<u32, u64>, hta_rounding: bool) -> Sweep<'a> {
        let windows = &plan.steps.windows;
        // Without steps the one window is the whole trace: no step to walk (and nothing to keep for it).
        let paths = if plan.no_steps {
            Default::default()
        } else {
            super::step_path::PathSteps::new(windows, &plan.steps.names)
        };
        Sweep {
            plan,
            waits,
            step_starts: plan.steps.host.iter().map(|r| r.start).collect(),
            launches: LaunchJoin::default(),
            pairer: Pairer::default(),
            hta: Hta::new(hta_rounding, plan.last_profiler_step),
            overlap: Default::default(),
            hta_rounding,
            utilization: Utilization::new(plan.busy_extent),
            busy: Growing::default(),
            kernel: Growing::default(),
            compute: Growing::default(),
            memcpy: Growing::default(),
            memset: Growing::default(),
            runtime: Growing::default(),
            closers: VecDeque::new(),
            enders: Enders::default(),
            stream_waits: StreamWaits::default(),
            paths,
            group: None,
            calls: VecDeque::new(),
            call: None,
            capturing: FxHashMap::default(),
            sync_until: FxHashMap::default(),
            graph_setup: Vec::new(),
            cuda_setup: Vec::new(),
            kernels_launched: FxHashSet::default(),
            graph_nodes: Default::default(),
            ranges: Vec::new(),
            operators: Default::default(),
            pieces: Vec::new(),
            done: 0,
            stream: None,
            single_stream: !plan.has_stream_waits,
            idle_single: (!plan.has_stream_waits).then(IdleCauses::default),
            comm_seen: 0,
            fp32_union: UnionTotal::default(),
            fusion: super::fusion::FusionSweep::default(),
            comm_union: UnionTotal::default(),
            live: LiveMemory::default(),
            stack_reads: Default::default(),
            counters: Default::default(),
            step_counters: Vec::new(),
            step_work: vec![(0, 0, 0); if plan.no_steps { 0 } else { windows.len() }],
            trim_at: 1 << 14,
            out: Swept::default(),
        }
    }

    /// Trims histories from this length on (tests use tiny ones; the result must not change).
    #[cfg(test)]
    pub fn trim_at(mut self, n: usize) -> Self {
        self.trim_at = n.next_power_of_two();
        self
    }

    fn windows(&self) -> &'a [Span] {
        &self.plan.steps.windows
    }

    /// When step `k`'s live memory is read: the end of its host range. Allocations are host calls, and a program
    /// whose CPU runs ahead of its GPU issues several steps' allocations within one window (an H100 run of a
    /// 256 MiB-per-step leak put all 30 steps' allocations in the first 15 windows, and the rest looked flat).
    /// Without host ranges (no steps), the window's end.
    fn memory_mark(&self, k: usize) -> Option<u64> {
        let host = &self.plan.steps.host;
        if host.len() == self.windows().len() {
            host.get(k).map(|r| r.end)
        } else {
            self.windows().get(k).map(|w| w.1)
        }
    }

    /// The window `t` falls in.
    fn window_of(&self, t: u64) -> Option<usize> {
        let w = self.windows();
        // Most questions are about the window being filled (the first not done) or the next one.
        for k in [self.done, self.done + 1] {
            match w.get(k) {
                Some(x) if x.0 <= t && t < x.1 && w.get(k + 1).is_none_or(|n| n.0 > t) => return Some(k),
                _ => {}
            }
        }
        let k = w.partition_point(|x| x.0 <= t).checked_sub(1)?;
        (t < w[k].1).then_some(k)
    }

    /// The next event of process `p` (the process this sweep was planned for), in time order.
    pub fn event(&mut self, p: &Process, e: &RawEvent) {
        self.advance(p, e.start);
        self.counters.feed(0, p, e);
        if e.kind() == Some(EventKind::GpuSample) {
            if let Some(k) = self.window_of(e.start) {
                if self.step_counters.len() <= k {
                    self.step_counters.resize_with(k + 1, Default::default);
                }
                self.step_counters[k].add(&e.as_gpu_sample());
            }
        }
        let source = self.out.sources.feed(p, e);
        let names = &self.plan.names;
        match e.kind() {
            Some(EventKind::Api) => {
                let launch = self.launches.api(p, e);
                let span = (e.start, e.end.max(e.start));
                self.runtime.push(span);
                let call = names.call(e.name);
                if call.has(CallEffects::STREAM_WAIT) {
                    self.stream_waits.wait_call(e.tid, e.start);
                }
                if call.has(CallEffects::HOST_FUNCTION) {
                    self.stream_waits.host_fn_call(e.tid, e.start);
                }
                self.graph_setup_call(call, e);
                if self.plan.launchers.contains(&e.tid) {
                    self.cuda_setup_call(call, e);
                }
                // State queries and set-up neither queue nor wait: the time in them is the host's own (idle.rs).
                if self.plan.launchers.contains(&e.tid) && !call.only_queries() && !call.only_sets_up() {
                    let class = call.class(self.plan.pageable_dtoh.contains(&e.correlation));
                    // Computes on the GPU (a copy may be the step's input arriving: no operator's own work).
                    let computes = call.queues_work() && !call.has(CallEffects::COPIES);
                    let in_op = computes.then(|| self.operators.around(e.tid, span)).flatten();
                    let call = super::step_path::PathCall {
                        start: span.0,
                        end: span.1,
                        tid: e.tid,
                        name: e.name,
                        poll: false,
                    };
                    self.paths.call(class, call);
                    if class == CallClass::Sync {
                        self.sync_call(p, e, source);
                    }
                    self.host_call(HostCall { start: span.0, end: span.1, class, name: e.name, source, in_op });
                }
                let alloc = call.manages_memory() && !call.has(CallEffects::ASYNC);
                if alloc && self.window_of(e.start).is_some_and(|k| k > 0) {
                    add_call(&mut self.out.alloc_calls, p.string(e.name), e.duration());
                    self.out.sources.add(super::sources::SourceKind::Alloc, source, e.duration());
                }
                if source.is_some() && self.window_of(e.start).is_some() {
                    self.out.sources.launch(p, e, source);
                    if let Some(l) = launch.filter(|_| call.has(CallEffects::COPIES)) {
                        self.out.sources.copy_call(&l, source);
                    }
                }
            }
            Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset) => self.op(e),
            Some(EventKind::ThreadName) => self.paths.thread_named(e.named_thread() as u32, e.name),
            // A stack's innermost frame carries its read time (one the agent read: not a trace's own at import).
            Some(EventKind::PyFrame) if e.as_py_frame().depth == 0 && !e.as_py_frame().imported => {
                let (in_step, read_ns) = (self.window_of(e.start).is_some(), e.as_py_frame().read_ns);
                self.out.stack_cost.stack(in_step, read_ns);
                if in_step {
                    self.stack_reads.push(e.start, read_ns);
                }
            }
            // HTA counts every event with a stream as GPU time (non-compute): synchronisation records with one too.
            Some(EventKind::Sync) if e.stream != u32::MAX => {
                let launch = self.launches.work(e).map(|w| (w.call.start, w.call.end));
                self.hta.sync(e, launch);
            }
            Some(EventKind::Alloc | EventKind::Free) => {
                while self.memory_mark(self.out.memory_at_end.len()).is_some_and(|end| e.start >= end) {
                    self.out.memory_at_end.push(self.live.device().min(i64::MAX as u64) as i64);
                }
                self.live.apply(p.info.pid, e);
            }
            _ => {}
        }
        if e.kind() == Some(EventKind::Range) && !e.as_range().on_device {
            // An imported range: TensorBoard's categories decide (see `range_roles::cpu_exec_category`).
            let category = p.string(e.as_range().category);
            if self.plan.launchers.contains(&e.tid) {
                self.operators.range(e.tid, category, (e.start, e.end), e.name);
            }
            let loader = if range_roles::is_kineto_host_category(category) {
                range_roles::is_tensorboard_loader(p.string(e.name))
            } else {
                self.plan.names.has(e.name, NameFlags::LOADER)
            };
            if loader || range_roles::cpu_exec_category(category) {
                self.range(HostRange { start: e.start, end: e.end.max(e.start), name: e.name, tid: e.tid }, loader);
            }
        } else if let Some(r) = self.pairer.feed(e) {
            let loader = self.plan.names.has(r.name, NameFlags::LOADER);
            self.range(HostRange { start: r.start, end: r.end, name: r.name, tid: r.tid }, loader);
        }
        self.trim_if_long();
    }

    fn range(&mut self, r: HostRange, loader: bool) {
        if r.end > r.start && !self.plan.step_names.contains(&r.name) {
            self.ranges.push(((r.start, r.end), loader));
        }
    }

    /// Launching threads' calls, nested or overlapping (runtime over driver, two threads), become disjoint
    /// stretches named by their most blocking call.
    fn host_call(&mut self, c: HostCall) {
        match &mut self.call {
            Some(last) if c.start < last.end => {
                last.end = last.end.max(c.end);
                if c.class > last.class {
                    last.class = c.class;
                    last.name = c.name;
                    last.source = c.source;
                }
            }
            Some(last) => {
                let done = std::mem::replace(last, c);
                self.calls.push_back(done);
            }
            None => self.call = Some(c),
        }
    }

    /// A stream capture's begin or end, or a graph's instantiation: the host building graphs, whose launches run
    /// nothing meanwhile.
    fn graph_setup_call(&mut self, call: CallEffects, e: &RawEvent) {
        if call.has(CallEffects::BEGINS_CAPTURE) {
            self.capturing.entry(e.tid).or_insert(e.start);
        } else if call.has(CallEffects::ENDS_CAPTURE) {
            if let Some(began) = self.capturing.remove(&e.tid) {
                self.graph_setup.push((began, e.end.max(began)));
            }
        } else if call.has(CallEffects::INSTANTIATES_GRAPH) {
            self.graph_setup.push((e.start, e.end.max(e.start)));
        }
    }

    /// A launching thread's call in which CUDA set itself up ([`SetupCall`], by [`sets_cuda_up`]).
    fn cuda_setup_call(&mut self, call: CallEffects, e: &RawEvent) {
        if sets_cuda_up(call, e.duration()) {
            self.cuda_setup.push(SetupCall { span: (e.start, e.end.max(e.start)), call: e.name, kernel: None });
        }
    }

    /// Counts a launching thread's synchronising call that starts in a step, by thread: the host timeline merges
    /// the threads' calls (`host_call`), and where several threads call CUDA at once a merged stretch can begin
    /// before the steps and hold every wait of the run, which then went uncounted beside the idle time blamed on
    /// them (400 threads launching and each synchronising its stream: "0 synchronising calls").
    fn sync_call(&mut self, p: &Process, e: &RawEvent, source: Option<cuflight_trace::model::pystacks::PyFrame>) {
        let end = e.end.max(e.start);
        let in_step = self.window_of(e.start).is_some();
        let (until, counted) = self.sync_until.entry(e.tid).or_default();
        if e.start < *until {
            return; // inside the thread's previous synchronising call: the same wait
        }
        *until = end;
        if in_step {
            if !std::mem::replace(counted, true) {
                self.out.sync_threads += 1;
            }
            add_call(&mut self.out.sync_calls, p.string(e.name), end - e.start);
            self.out.sources.add(super::sources::SourceKind::Sync, source, end - e.start);
        }
    }

    fn op(&mut self, e: &RawEvent) {
        let names = &self.plan.names;
        let kind = e.kind();
        let joined = self.launches.work(e);
        let launch = joined.map(|w| w.call);
        // Run as a node of a replayed CUDA graph: the GPU issues it, not a launch call of its own.
        let graph = launch.is_some_and(|c| names.call(c.name).has(CallEffects::LAUNCHES_GRAPH));
        let is_kernel = kind == Some(EventKind::Kernel);
        // A kernel's first launch that took a millisecond or more: its module loaded in the call (lazy loading).
        if is_kernel && self.kernels_launched.insert(e.name) {
            let slow = launch.filter(|c| first_launch_sets_cuda_up(graph, c.end.saturating_sub(c.start)));
            if let Some(c) = slow.filter(|c| self.plan.launchers.contains(&c.tid)) {
                self.cuda_setup.push(SetupCall { span: (c.start, c.end), call: c.name, kernel: Some(e.name) });
            }
        }
        // A node recorded on its own (not one record for the whole replay): its launch call did CUPTI's work for it
        // (measured on an H200; roctracer's cost on ROCm is not known, so none is put down to it).
        let per_node = graph && !self.plan.rocm && !names.has(e.name, NameFlags::GRAPH_LEVEL);
        if let Some(c) = launch.filter(|_| per_node) {
            let nodes = &mut self.graph_nodes.entry(c.start).or_insert((c.end, 0)).1;
            *nodes = nodes.saturating_add(1);
        }
        // The report's communication is any collective's (vLLM's custom all-reduce too), which is no compute; HTA's
        // breakdown and overlap count NCCL's alone, and other collectives as compute.
        let hta_compute = is_kernel && names.has(e.name, NameFlags::COMPUTE);
        let nccl = is_kernel && names.has(e.name, NameFlags::COMM);
        let comm = is_kernel && names.has(e.name, NameFlags::COLLECTIVE);
        let compute = hta_compute && !comm;
        // The k-th collective kernel here is the plan's k-th (its waits are keyed so too): the plan told which
        // collective it ran, once.
        let ordinal = self.comm_seen;
        self.comm_seen += u32::from(comm);
        let collective = self.plan.comm.get(ordinal as usize).filter(|_| comm).and_then(|op| op.collective);
        let stream = stream_key(e.device, e.stream);
        let (after_wait, after_host_fn) =
            launch.map_or((false, false), |c| self.stream_waits.launched(stream, c.tid, c.start));
        // A call that blocks until its work is done (a synchronous or pageable copy) issued it when it began.
        let blocking = launch.filter(|c| {
            let pageable = self.plan.pageable_dtoh.contains(&e.correlation);
            names.call(c.name).class(pageable) == CallClass::Sync
        });
        let issued = launch.map(|c| if blocking.is_some() { c.start } else { c.end });
        if self.group.is_none_or(|g| g.start != e.start) {
            self.group = Some(Closer {
                start: e.start,
                duration: e.duration(),
                launched: launch.map(|c| c.start),
                issued,
                stream,
                name: e.name,
                comm,
                collective,
                graph,
                launch_first: joined.is_some_and(|w| w.first),
                after_wait,
                after_host_fn,
                blocking_call: blocking.map(|c| (c.name, c.end)),
                copy: kind == Some(EventKind::Memcpy),
                pageable: kind == Some(EventKind::Memcpy) && touches_pageable(e),
            });
        }
        let span = (e.start, e.end.max(e.start));
        if span.1 > span.0 {
            let new_stretch = self.busy.push(span);
            if new_stretch {
                self.closers.push_back(self.group.expect("set above"));
            }
            self.enders.op(new_stretch, Ender { end: span.1, stream, name: e.name });
        }
        match kind {
            Some(EventKind::Kernel) => {
                self.kernel.push(span);
                self.utilization.push(span);
                if compute {
                    self.compute.push(span);
                }
            }
            Some(EventKind::Memcpy) => _ = self.memcpy.push(span),
            _ => _ = self.memset.push(span),
        }
        self.hta.op(e, launch.map(|c| (c.start, c.end)), hta_compute);
        if is_kernel && self.hta.traced(e, launch.map(|c| (c.start, c.end))) {
            self.overlap.kernel(super::breakdown::interval(e.start, e.end, self.hta_rounding), nccl, hta_compute);
        }
        let Some(k) = self.window_of(e.start) else {
            return;
        };
        if self.paths.keeps(k) {
            self.paths.op(
                k,
                super::step_path::PathOp {
                    start: span.0,
                    end: span.1,
                    stream,
                    name: e.name,
                    copy: match kind {
                        Some(EventKind::Memcpy) => Some("memcpy"),
                        Some(EventKind::Memset) => Some("memset"),
                        _ => None,
                    },
                    launch: launch.zip(issued).map(|(c, issued)| (c.start, issued, c.tid)),
                    after_wait,
                    after_host_fn,
                    graph,
                    blocking: blocking.is_some(),
                },
            );
        }
        // The first op of a graph replay: one a launch.
        let replay = graph && joined.is_some_and(|j| j.first);
        if let Some(w) = self.step_work.get_mut(k) {
            w.0 += u64::from(is_kernel);
            w.1 += u64::from(is_kernel && !graph);
            w.2 += u64::from(replay);
        }
        self.out.graph_kernels += u64::from(is_kernel && graph);
        if let Some(c) = launch.filter(|_| replay) {
            self.out.graph_launch_durations.add(c.end.saturating_sub(c.start));
            self.out.graph_level |= names.has(e.name, NameFlags::GRAPH_LEVEL);
        }
        let s = (e.device, e.stream);
        if *self.stream.get_or_insert(s) != s {
            self.single_stream = false;
            self.idle_single = None;
        }
        match kind {
            Some(EventKind::Kernel) => {
                // Launch overhead is the host's per kernel it launches itself: graph nodes are counted apart.
                if !graph {
                    self.out.kernel_durations.add(e.duration());
                    if let Some(c) = launch {
                        self.out.launch_durations.add(c.end.saturating_sub(c.start));
                    }
                }
                self.out.kernels.add(e);
                self.fusion.kernel(names, (e.device, e.stream), e.name, e.start, e.end);
                if names.has(e.name, NameFlags::FP32_GEMM) {
                    self.out.fp32.add(e);
                    self.fp32_union.push((e.start, e.end));
                }
                if comm {
                    self.out.comm.add(e);
                    self.comm_union.push((e.start, e.end));
                    let slot = CommByCollective::slot(collective);
                    self.out.comm_by_collective.total_ns[slot] += e.duration();
                    let wait = self.waits.get(&ordinal).copied().unwrap_or(0);
                    self.pieces.push(((e.start.saturating_add(wait).min(e.end), e.end), Piece::Comm(slot as u8)));
                }
            }
            Some(EventKind::Memcpy) => {
                let (acc, piece) = if touches_pageable(e) {
                    self.out.sources.pageable_copy(launch.as_ref(), e.duration());
                    (&mut self.out.pageable, Piece::Pageable)
                } else {
                    self.out.sources.other_copy(launch.as_ref());
                    (&mut self.out.other_copies, Piece::OtherCopy)
                };
                acc.add(e);
                self.pieces.push(((e.start, e.end), piece));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;

/// A copy to or from pageable host memory (memory kind 1, CUPTI's `CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE`).
fn touches_pageable(copy: &RawEvent) -> bool {
    let (src, dst) = copy.copy_memory_kinds();
    src == 1 || dst == 1
}
