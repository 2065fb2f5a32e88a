//! Why the GPU idles inside steps. Every idle stretch inside a step window is given to one cause by looking at
//! what the launching threads were doing at that moment:
//!
//! - the next GPU op had already been launched (from its launch on): under 30 µs, the per-kernel launch
//!   overhead of back-to-back kernels (HTA's "kernel wait") → **launch bound**; longer, the GPU waited on
//!   something other than the host (`device_wait`), except before a tiny kernel (under 10 µs) when the steps use
//!   a single stream and no event waits: nothing but the launch pipeline can hold the GPU → **launch bound**.
//!   What queued work waited on, by the op that ended the wait: a collective → **collective wait** (its peers,
//!   or the work its stream waits on); an op whose launching thread made its stream wait on an event since the
//!   previous launch into it → **cross-stream wait** (named by the waiting stream and the stream whose work
//!   ran last); an op queued after a host function its thread put in a stream → **host function wait**; an op
//!   of a CUDA graph → **graph wait** (the graph's own dependencies, short gaps included: the GPU issues a
//!   graph's nodes from one launch, so no gap before one is the host's launch overhead; but while the host is
//!   still inside the graph's launch call → **launch bound**); anything else is **unexplained**
//!   (`idle_unexplained_ns`), printed as such;
//! - the launching threads polling (three or more `cudaEventQuery`/`cudaStreamQuery` calls in one idle
//!   stretch) → **host polling**: the host waits by spinning instead of queueing the dependent work;
//! - where no queued op waits: inside a call in which CUDA set itself up (a call that creates a stream or context,
//!   loads a module, or has nothing of its own to do; or a kernel's first launch; which took a millisecond or more:
//!   CUDA initialising, a library's kernels loading) → **CUDA set-up**, whatever else the stretch holds;
//! - inside a data-loading annotation: **data loading**;
//! - (calls that only read state, such as `cudaGetDevice`, count as host time, not as CUDA calls: they neither queue
//!   nor wait, and PyTorch makes hundreds a step;)
//! - inside a CUDA call: a synchronising call → **sync stall**; `cudaMalloc`/`cudaFree` → **allocator churn**;
//!   any other call (launches) → **launch bound**; a queued op's own launch call still running (the host issuing it)
//!   too, however long the gap, but a copy's (the host staging it from pageable memory) → **sync stall**;
//! - outside CUDA, after a synchronising call (the queue was drained by it) → **sync stall**; after
//!   `cudaFree` → **allocator churn**; after the step began and before its first CUDA call (the host is
//!   preparing the step's input) → **data loading**, but inside the framework operator that makes that call
//!   where it launches work (the operator's own host work) → as between launches, next; otherwise the host is
//!   busy between launches: up to 100 µs at a time, per-op overhead (Python, dispatch, tiny kernels) →
//!   **launch bound**; longer, CPU work the GPU waits for → **CPU bound**.

use super::short_names::short_name;
use super::spans::{clip, subtract, Span};
use super::window::{Closer, HostCall, SetupCall, WindowView};
use super::words::ms;
use cuflight_format::calls::{CallClass, CallEffects};
use cuflight_format::tracing::GRAPH_NODE_TRACING_NS;
use serde::Serialize;

#[path = "idle_queued.rs"]
mod queued;
use queued::{queued_wait, wait_detail};

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Example {
    /// Its start on the trace's clock (subtract `run.trace_start_ns` for the time on the timeline).
    pub start_ns: u64,
    /// Its end on the same clock.
    pub end_ns: u64,
    /// Its length.
    pub duration_ns: u64,
    /// The analysed step it lies in (index from 0), when it lies in one.
    pub step: Option<usize>,
    /// What happened there, in words.
    pub what: String,
}

/// Idle time given to one cause.
#[derive(Debug, Clone, Default)]
pub struct Cause {
    pub total_ns: u64,
    pub per_step: Vec<u64>,
    /// Longest stretches (at most 5).
    pub worst: Vec<Example>,
    /// The CUDA call blamed (inside or just before), by name: (count, ns).
    pub calls: std::collections::BTreeMap<String, (u64, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseKind {
    DataLoading = 0,
    SyncStall = 1,
    LaunchBound = 2,
    AllocatorChurn = 3,
    /// Queued work waited and nothing in the trace says on what.
    DeviceWait = 4,
    CpuBound = 5,
    CrossStream = 6,
    Collective = 7,
    Graph = 8,
    HostPolling = 9,
    HostFunction = 10,
    /// Queued work waited a millisecond or more with no op of the trace running: on work it does not hold (imports).
    UnseenWork = 11,
    /// The host captured CUDA graphs (its launches run nothing meanwhile) or instantiated them.
    GraphSetup = 12,
    /// The host was inside a CUDA graph's launch call that CUPTI lengthened to trace each node: the profiler's.
    GraphTracing = 13,
    /// A launching thread was inside a call in which CUDA set itself up (a [`crate::window::SetupCall`]).
    CudaSetup = 14,
}

const CAUSES: usize = 15;

/// A call that returns at once ([`CallEffects::returns_at_once`]), or a kernel's first launch, that takes this long
/// or longer did CUDA's own set-up inside it (initialisation, modules loaded): no launch or host work of the program
/// takes a millisecond inside such a call (a launch takes microseconds).
pub const SETUP_CALL_NS: u64 = 1_000_000;

/// Whether a call with `effects` that took `duration_ns` did CUDA's own set-up inside it ([`SETUP_CALL_NS`]): the
/// one rule for the idle causes (the sweep) and the warm-up's account of its steps (the plan pass).
pub fn sets_cuda_up(effects: CallEffects, duration_ns: u64) -> bool {
    (effects.only_sets_up() || effects.returns_at_once()) && duration_ns >= SETUP_CALL_NS
}

/// Whether a kernel's first launch (`graph`: as a node of a replayed graph, issued by the GPU) whose call took
/// `duration_ns` loaded the kernel's module inside it (lazy loading) or compiled it from PTX.
pub fn first_launch_sets_cuda_up(graph: bool, duration_ns: u64) -> bool {
    !graph && duration_ns >= SETUP_CALL_NS
}

/// How a kernel's first launch is named among the CUDA set-up calls ("cudaLaunchKernel (a kernel's first launch)").
pub const FIRST_LAUNCH: &str = " (a kernel's first launch)";

/// A queued wait this long with the GPU idle cannot be the launch pipeline or a dependency the trace holds (that
/// would be running): the GPU ran work the trace does not hold. A launch takes microseconds to reach an idle GPU;
/// the plan reads a trace's first op so, the critical path an op's wait after its launch.
pub const UNSEEN_WORK_NS: u64 = 1_000_000;

/// Where the GPU's idle time inside steps went (JSON `idle_causes`).
#[derive(Debug, Clone, Copy, Default, Serialize, schemars::JsonSchema)]
pub struct IdleSummary {
    /// GPU idle time inside the analysed steps, in all; the rest of the members split it by cause.
    pub idle_in_steps_ns: u64,
    /// ... while the host loaded data: inside a data-loading annotation, or from the step's start to its first CUDA
    /// call.
    pub data_loading_ns: u64,
    /// ... while the host was in a synchronising call, or working after one drained the queue.
    pub sync_stall_ns: u64,
    /// ... on per-op overhead: the next op queued under 30 µs before, the host in a launch call, or host work of up
    /// to 100 µs at a time between launches (Python, dispatch).
    pub launch_bound_ns: u64,
    /// ... while the host did its own work for longer than 100 µs at a time before the next launch.
    pub cpu_bound_ns: u64,
    /// ... while the host was in cudaMalloc or cudaFree, or working after a cudaFree.
    pub allocator_churn_ns: u64,
    /// Work was queued but waited (the four below).
    pub device_wait_ns: u64,
    /// ... on an event recorded in another stream (`cudaStreamWaitEvent`).
    pub cross_stream_wait_ns: u64,
    /// ... a collective that started late (its peers, or its stream's dependencies).
    pub collective_wait_ns: u64,
    /// ... work of a CUDA graph on the graph's dependencies.
    pub graph_wait_ns: u64,
    /// ... behind a host function queued in its stream (`cudaLaunchHostFunc`).
    pub host_function_wait_ns: u64,
    /// ... for a millisecond or more with no op of the trace running: on GPU work the trace does not hold (begun
    /// before the capture, another process's, or left out of a sampled trace).
    pub unseen_work_ns: u64,
    /// ... and nothing in the trace says on what.
    pub idle_unexplained_ns: u64,
    /// The host polled (`cudaEventQuery` loops) while the GPU idled.
    pub host_polling_ns: u64,
    /// The host captured CUDA graphs (between `cudaStreamBeginCapture` and its end the launches run nothing) or
    /// instantiated them while the GPU idled.
    pub graph_setup_ns: u64,
    /// The host was inside CUDA graph launch calls that CUPTI's node-level tracing lengthened: the profiler's time,
    /// estimated as up to 1.1 µs per node of each launch (measured on an H200), and not in `launch_bound_ns`.
    /// Zero where graphs were traced one record per launch (`--trace ...,graphs`) or none ran.
    pub graph_tracing_ns: u64,
    /// ... while a launching thread was inside a call in which CUDA set itself up, with no queued op waiting: one
    /// that creates a stream or context, loads a module or library or sets a limit, or has nothing of its own to do
    /// (event creation, setting the device), or a kernel's first launch (its module loaded), which took 1 ms or
    /// more. Zero in most steady steps: CUDA initialises, and loads a library's kernels, at their first use.
    pub cuda_setup_ns: u64,
}

#[derive(Debug, Default)]
pub struct IdleCauses {
    pub causes: [Cause; CAUSES],
    pub idle_in_steps_ns: u64,
    /// The part of the launch-bound time in which the next op was already queued: the GPU's own gap between
    /// ops, which the host issuing faster would not shorten.
    pub launch_queued_ns: u64,
    /// The part of the sync-stall time in which a copy's own call was still running before the copy began: the
    /// driver preparing it, and staging it where it touches pageable memory (through a bounce buffer).
    pub staged: StagedCopies,
}

/// Copies whose own call kept the GPU idle before they began ([`IdleCauses::staged`]).
#[derive(Debug, Default)]
pub struct StagedCopies {
    /// Copies, each counted once however many stretches its call was cut into.
    pub copies: u64,
    pub idle_ns: u64,
    /// ... of them, those touching pageable host memory (staged through the driver's bounce buffer).
    pub pageable: u64,
    pub pageable_idle_ns: u64,
    /// By call name: (copies, idle ns).
    pub calls: std::collections::BTreeMap<String, (u64, u64)>,
    /// The last copy counted (its start on the GPU): stretches of one copy come one after another.
    last_copy: Option<u64>,
}

impl StagedCopies {
    fn add(&mut self, copy: &Closer, call: &str, idle_ns: u64) {
        if idle_ns == 0 {
            return;
        }
        let new = self.last_copy != Some(copy.start);
        self.last_copy = Some(copy.start);
        self.copies += u64::from(new);
        self.idle_ns += idle_ns;
        if copy.pageable {
            self.pageable += u64::from(new);
            self.pageable_idle_ns += idle_ns;
        }
        let added = (u64::from(new), idle_ns);
        match self.calls.get_mut(call) {
            Some(e) => *e = (e.0 + added.0, e.1 + added.1),
            None => _ = self.calls.insert(call.to_string(), added),
        }
    }
}

impl IdleCauses {
    pub fn summary(&self) -> IdleSummary {
        let t = |k: CauseKind| self.get(k).total_ns;
        IdleSummary {
            idle_in_steps_ns: self.idle_in_steps_ns,
            data_loading_ns: t(CauseKind::DataLoading),
            sync_stall_ns: t(CauseKind::SyncStall),
            launch_bound_ns: t(CauseKind::LaunchBound),
            cpu_bound_ns: t(CauseKind::CpuBound),
            allocator_churn_ns: t(CauseKind::AllocatorChurn),
            device_wait_ns: t(CauseKind::DeviceWait)
                + t(CauseKind::CrossStream)
                + t(CauseKind::Collective)
                + t(CauseKind::Graph)
                + t(CauseKind::HostFunction)
                + t(CauseKind::UnseenWork),
            cross_stream_wait_ns: t(CauseKind::CrossStream),
            collective_wait_ns: t(CauseKind::Collective),
            graph_wait_ns: t(CauseKind::Graph),
            host_function_wait_ns: t(CauseKind::HostFunction),
            unseen_work_ns: t(CauseKind::UnseenWork),
            idle_unexplained_ns: t(CauseKind::DeviceWait),
            host_polling_ns: t(CauseKind::HostPolling),
            graph_setup_ns: t(CauseKind::GraphSetup),
            graph_tracing_ns: t(CauseKind::GraphTracing),
            cuda_setup_ns: t(CauseKind::CudaSetup),
        }
    }

    pub fn get(&self, k: CauseKind) -> &Cause {
        &self.causes[k as usize]
    }

    fn add(&mut self, k: CauseKind, span: Span, step: Option<usize>, call: Option<&str>, steps: usize) {
        self.add_detailed(k, span, step, call, None, steps);
    }

    /// As `add`; `detail` describes this stretch in its example (the key `call` groups stretches).
    fn add_detailed(
        &mut self,
        k: CauseKind,
        (a, b): Span,
        step: Option<usize>,
        call: Option<&str>,
        detail: Option<&dyn Fn() -> String>,
        steps: usize,
    ) {
        if b <= a {
            return;
        }
        let c = &mut self.causes[k as usize];
        c.total_ns += b - a;
        if c.per_step.len() < steps {
            c.per_step.resize(steps, 0);
        }
        if let Some(s) = step {
            c.per_step[s] += b - a;
        }
        if let Some(name) = call {
            match c.calls.get_mut(name) {
                Some(e) => *e = (e.0 + 1, e.1 + (b - a)),
                None => _ = c.calls.insert(name.to_string(), (1, b - a)),
            }
        }
        // Only the five longest stretches are described.
        let at = c.worst.partition_point(|w| w.duration_ns >= b - a);
        if at >= 5 {
            return;
        }
        let what = match (detail, call, k) {
            (Some(d), _, _) => format!("GPU idle: {}", d()),
            (None, Some(name), CauseKind::DeviceWait | CauseKind::CrossStream | CauseKind::Collective)
            | (None, Some(name), CauseKind::Graph | CauseKind::HostFunction) => format!("GPU idle: {name}"),
            (None, Some(name), CauseKind::HostPolling) => format!("GPU idle, host polling with {name}"),
            (None, Some(name), _) => format!("GPU idle, host in or after {name}"),
            (None, None, CauseKind::LaunchBound | CauseKind::DeviceWait) => "GPU idle with work already queued".into(),
            (None, None, _) => "GPU idle, host outside CUDA".to_string(),
        };
        c.worst.insert(at, Example { start_ns: a, end_ns: b, duration_ns: b - a, step, what });
        c.worst.truncate(5);
    }
}

/// Host time between launches up to this long is per-op overhead (Python, framework dispatch) of a launch-bound
/// loop; longer stretches are CPU work the GPU waits for.
const HOST_OVERHEAD_NS: u64 = 100_000;

/// At a step's start, with no DataLoader annotation around it, host time outside CUDA this long or longer is the
/// host getting the step's input ready (data_loading); shorter, it is the loop's own host work between one step's
/// last launch and the next one's first, told as the gaps between launches are. An H100 training loop with its
/// inputs on the GPU (tests/gpu/train_torch.py, the shared attached window) spent about 110 µs there a step, and
/// was told "GPU waits for input data" with the DataLoader's settings as the fix; the planted stalls (cudasim's
/// `dataload` scenario, the demo) are 1.5 ms and more.
pub const STEP_START_INPUT_NS: u64 = 1_000_000;

/// Kernels shorter than this are "tiny": their launch costs about as much as their work.
const TINY_KERNEL_NS: u64 = 10_000;

/// Gaps between queued GPU ops shorter than this are launch overhead (HTA's `consecutive_kernel_delay`).
const KERNEL_WAIT_NS: u64 = 30_000;

/// Attributes the idle time inside window `k` (of `n`), adding to `out`. `single_stream`: the steps' GPU ops
/// all run on one stream and no stream waits on an event. `step_starts`: every step's host start.
pub fn attribute(v: &WindowView, k: usize, n: usize, single_stream: bool, step_starts: &[u64], out: &mut IdleCauses) {
    // Idle stretches window by window (windows do not overlap), so that no stretch crosses a step boundary.
    let idle = subtract(&[v.span], &v.busy);
    out.idle_in_steps_ns += idle.iter().map(|(a, b)| b - a).sum::<u64>();
    // While the host builds CUDA graphs, its launches describe nodes and run nothing: the idle time is the
    // set-up's, whatever calls it is made of.
    for piece in clip_all(&idle, &v.graph_setup) {
        out.add(CauseKind::GraphSetup, piece, Some(k), Some("CUDA graph capture and instantiation"), n);
    }
    let idle = if v.graph_setup.is_empty() { idle } else { subtract(&idle, &v.graph_setup) };
    // Per graph launch traced node by node (by its call's start): the idle time already put down to the tracing.
    let mut tracing_taken: rustc_hash::FxHashMap<u64, u64> = rustc_hash::FxHashMap::default();
    for (a, b) in idle {
        let step = Some(k);
        // The op that ends this stretch: already launched before it began → the GPU waited on itself.
        let next_busy = v.busy.partition_point(|x| x.0 < b);
        let next_op = v.busy.get(next_busy).filter(|x| x.0 == b).and_then(|_| {
            let i = v.closers.partition_point(|c| c.start < b);
            v.closers.get(i).filter(|c| c.start == b)
        });
        // The whole GPU gap (the piece may be clipped by a step boundary).
        let before = next_busy.checked_sub(1).map(|i| v.busy[i].1).or(v.busy_before);
        let gap_start = before.map_or(a, |end| end.min(a));
        // Once the next op is launched, the GPU waits on itself, not on the host.
        let launched = next_op.and_then(|op| op.launched).unwrap_or(b);
        if launched < b {
            // Short gaps between queued ops are the per-kernel launch overhead (HTA's "kernel wait"); long ones
            // are waits on other streams or events. With one stream and no event waits there is nothing else to
            // wait on, so a gap before a tiny kernel is the front end working through a stream of launches:
            // launch overhead too.
            let queued = (a.max(launched), b);
            let tiny_next = next_op.is_some_and(|op| op.duration < TINY_KERNEL_NS);
            // A graph's nodes are issued by the GPU from one launch, not by the host one by one: whatever held
            // them once the launch call returned (the replay's start, the gaps between nodes) is the graph's.
            let graph_next = next_op.is_some_and(|op| op.graph);
            // No front end takes a millisecond over one op: a gap that long waited on something else (in an
            // import, work cut out of the trace: a vLLM iteration's first copy waited 7.8 ms for the previous
            // iteration's kernels, which TraceLens's one-iteration slice does not hold).
            let gap = b - gap_start.max(launched);
            if !graph_next && (gap < KERNEL_WAIT_NS || single_stream && tiny_next && gap < UNSEEN_WORK_NS) {
                out.add(CauseKind::LaunchBound, queued, step, None, n);
                // Queued from when its launch call returned (inside the call the host was still issuing it).
                let issued = next_op.and_then(|op| op.issued).unwrap_or(launched).max(queued.0);
                out.launch_queued_ns = out.launch_queued_ns.saturating_add(b.saturating_sub(issued));
            } else if let Some(op) = next_op {
                // How long it waited once its launch call had returned: inside the call the host was still issuing it
                // (a thread descheduled in cudaLaunchKernel holds its kernel back, and that is host time).
                let waited = b.saturating_sub(gap_start.max(op.issued.unwrap_or(launched)));
                let (kind, label) = queued_wait(v, op, gap_start, waited);
                let detail = || wait_detail(v, op, gap_start, &label);
                // Until its launch call returned the host was still issuing the op: launch time, not a wait (a
                // cudaGraphLaunch of a hundred nodes takes 100-400 µs under CUPTI on an H200; a thread descheduled in
                // cudaLaunchKernel holds its kernel back; a pageable copy is staged: 3 ms calls of cudaMemcpyAsync
                // in Kineto's ResNet-50 sample with 4 DataLoader workers, which read as unexplained waits).
                let issued = op.issued.unwrap_or(launched).clamp(queued.0, b);
                if issued > queued.0 {
                    let first = v.calls.partition_point(|c| c.end <= queued.0);
                    let call =
                        v.calls[first..].iter().take_while(|c| c.start <= queued.0).find(|c| c.start == launched);
                    let name = call.map(|c| v.name(c.name));
                    // CUPTI's share of a graph's launch first: what tracing its nodes added to the call, not yet given.
                    let budget = v.graph_nodes.get(&launched).filter(|_| op.graph).map_or(0, |&(_, nodes)| {
                        let taken = tracing_taken.entry(launched).or_default();
                        let left = (u64::from(nodes) * GRAPH_NODE_TRACING_NS).saturating_sub(*taken);
                        let share = left.min(issued - queued.0);
                        *taken += share;
                        share
                    });
                    let traced = queued.0 + budget;
                    out.add(CauseKind::GraphTracing, (queued.0, traced), step, name, n);
                    // A copy's call that has not returned with the copy queued is staging it from pageable memory.
                    let kind = if op.copy { CauseKind::SyncStall } else { CauseKind::LaunchBound };
                    let stalled = out.get(CauseKind::SyncStall).total_ns;
                    host_add(v, out, kind, (traced, issued), step, name, n);
                    if op.copy {
                        let staged = out.get(CauseKind::SyncStall).total_ns - stalled;
                        out.staged.add(op, name.unwrap_or("a copy's call"), staged);
                    }
                }
                let queued = (issued, b);
                if queued.1 > queued.0 {
                    out.add_detailed(kind, queued, step, Some(&label), Some(&detail), n);
                    if kind == CauseKind::SyncStall {
                        out.staged.add(op, &label, queued.1 - queued.0); // its blocking call, still running
                    }
                }
            }
            if launched <= a {
                continue;
            }
        }
        let b = b.min(launched);
        let mut t = a;
        let first = v.calls.partition_point(|c| c.end <= a);
        let calls = || v.calls[first..].iter().take_while(|c| c.start < b);
        // A loop of queries while the GPU idles: the host waits by polling.
        let poll = calls().filter(|c| c.class == CallClass::Poll).nth(POLL_LOOP - 1).map(|c| v.name(c.name));
        for c in calls() {
            if c.start > t {
                match poll {
                    Some(name) => host_add(v, out, CauseKind::HostPolling, (t, c.start), step, Some(name), n),
                    None => outside(v, out, (t, c.start), step, step_starts, n),
                }
            }
            let piece = (c.start.max(t), c.end.min(b));
            let kind = match c.class {
                CallClass::Sync => CauseKind::SyncStall,
                CallClass::Alloc => CauseKind::AllocatorChurn,
                CallClass::Poll if poll.is_some() => CauseKind::HostPolling,
                CallClass::Poll | CallClass::Launch => CauseKind::LaunchBound,
            };
            host_add(v, out, kind, piece, step, Some(v.name(c.name)), n);
            t = t.max(c.end.min(b));
        }
        if t < b {
            match poll {
                Some(name) => host_add(v, out, CauseKind::HostPolling, (t, b), step, Some(name), n),
                None => outside(v, out, (t, b), step, step_starts, n),
            }
        }
    }
}

/// The parts of `spans` inside `within` (both sorted and merged).
fn clip_all(spans: &[Span], within: &[Span]) -> Vec<Span> {
    within.iter().flat_map(|w| clip(spans, w.0, w.1)).filter(|x| x.1 > x.0).collect()
}

/// One stretch inside a call in which CUDA set itself up, in words.
fn setup_detail(v: &WindowView, s: &SetupCall) -> String {
    let (call, took) = (v.name(s.call), ms(s.span.1 - s.span.0));
    match s.kernel {
        Some(k) => format!("host in {call} for {took}, the first launch of {}", short_name(v.name(k))),
        None => format!("host in {call} for {took}, CUDA setting itself up"),
    }
}

/// Query calls in one idle stretch from which the host counts as polling.
const POLL_LOOP: usize = 3;

/// Idle time while the launching threads were outside CUDA.
fn outside(v: &WindowView, out: &mut IdleCauses, (a, b): Span, step: Option<usize>, starts: &[u64], n: usize) {
    let mut t = a;
    let loading: Vec<Span> = clip(&v.loader, a, b).collect();
    for piece in loading {
        if piece.0 > t {
            by_previous_call(v, out, (t, piece.0), step, starts, n);
        }
        host_add(v, out, CauseKind::DataLoading, piece, step, None, n);
        t = piece.1;
    }
    if t < b {
        by_previous_call(v, out, (t, b), step, starts, n);
    }
}

fn by_previous_call(v: &WindowView, out: &mut IdleCauses, (a, b): Span, step: Option<usize>, starts: &[u64], n: usize) {
    let prev = v.call_before(a);
    let prev_end = prev.map_or(0, |c| c.end);
    // Only a sync inside the loop drains the queue step after step; one before the steps (setup) does not count.
    let in_loop = |c: &HostCall| starts.first().is_some_and(|&s| c.start >= s);
    // A sync made with the GPU idle already drained nothing: the host's time after it is its own, as before it
    // (TraceLens's timesformer trace: a benchmark's torch.cuda.synchronize() at the step's start, then 218 ms of
    // the host's work before the first launch, read as a sync stall).
    let drained = |c: &HostCall| {
        let i = v.busy.partition_point(|x| x.1 <= a);
        i.checked_sub(1).map(|i| v.busy[i].1).or(v.busy_before).is_some_and(|idle_from| idle_from > c.start)
    };
    let (kind, call, b) = match prev {
        Some(c) if c.class == CallClass::Sync && in_loop(c) && drained(c) => {
            (CauseKind::SyncStall, Some(v.name(c.name)), b)
        }
        Some(c)
            if c.class == CallClass::Alloc && CallEffects::of(v.name(c.name)).has(CallEffects::FREES) && in_loop(c) =>
        {
            (CauseKind::AllocatorChurn, Some(v.name(c.name)), b)
        }
        _ => {
            // A step began since the last CUDA call: the host's time in the framework operator that then launches
            // the step's first work is that operator's own (its dispatch, an allocator growing: HTA's event_sync
            // trace spent 2.2 ms in aten::ones, inside aten::empty, before aten::fill_'s launch, and read as the
            // GPU waiting for input data); before it, a stretch of [`STEP_START_INPUT_NS`] or more is the host
            // getting the step's input ready.
            let k = starts.partition_point(|&s| s <= prev_end);
            let step_start = starts.get(k).is_some_and(|&s| s < b);
            let next = v.calls.get(v.calls.partition_point(|c| c.start < b)).filter(|c| c.start == b);
            let op = next.and_then(|c| c.in_op).filter(|&(start, _)| step_start && start < b);
            let t = op.map_or(b, |(start, _)| start.max(a));
            let host_work =
                |len: u64| if len < HOST_OVERHEAD_NS { CauseKind::LaunchBound } else { CauseKind::CpuBound };
            if let Some((_, name)) = op {
                host_add(v, out, host_work(b - t), (t, b), step, Some(v.name(name)), n);
            }
            if t == a {
                return;
            }
            if step_start && t - a >= STEP_START_INPUT_NS {
                (CauseKind::DataLoading, None, t)
            } else {
                (host_work(t - a), prev.map(|c| v.name(c.name)), t)
            }
        }
    };
    host_add(v, out, kind, (a, b), step, call, n);
}

/// Gives the stretch `(a, b)` of host-side idle time to `kind`, less what a launching thread spent inside calls in
/// which CUDA set itself up: the GPU waited for CUDA there, whatever the call (host time, a launch, a poll).
fn host_add(
    v: &WindowView,
    out: &mut IdleCauses,
    kind: CauseKind,
    (a, b): Span,
    step: Option<usize>,
    call: Option<&str>,
    n: usize,
) {
    let mut t = a;
    // Merged and sorted by start: their ends rise too.
    let first = v.cuda_setup.partition_point(|s| s.span.1 <= a);
    for s in v.cuda_setup[first..].iter().take_while(|s| s.span.0 < b) {
        let (from, to) = (s.span.0.max(t), s.span.1.min(b));
        out.add(kind, (t, from), step, call, n);
        let label = match s.kernel {
            Some(_) => format!("{}{FIRST_LAUNCH}", v.name(s.call)),
            None => v.name(s.call).to_string(),
        };
        out.add_detailed(CauseKind::CudaSetup, (from, to), step, Some(&label), Some(&|| setup_detail(v, s)), n);
        t = to;
    }
    out.add(kind, (t, b), step, call, n);
}
