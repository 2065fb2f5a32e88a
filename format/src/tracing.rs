//! What a recording traces, as nsys's `-t` chooses: `cuflight record --trace cuda,nvtx,...` (or `launch`), handed
//! to the agent as `CUFLIGHT_TRACE`. One rule for the collector, which checks the list, and the agent, which
//! subscribes to what it names and to nothing else.
//!
//! - `cuda` (always): the runtime calls, each subscribed by callback id rather than the whole runtime domain, but
//!   for those that only read state
//!   ([`crate::calls::CallEffects::recorded_by_default`]); the driver's launches, copies, memsets,
//!   allocations and synchronisations; kernel, copy and memset records.
//! - `queries`: the runtime calls that only read state too (`cudaGetDevice`, `cudaGetLastError`,
//!   `cudaStreamIsCapturing`, `cudaGetErrorString`...) and the few PyTorch makes around every operation
//!   (`cudaSetDevice`, event creation). PyTorch makes about ten a kernel; subscribed, each costs a callback on
//!   both sides of the call (Kineto leaves them out the same way).
//! - `nvtx`: NVTX ranges, marks and names.
//! - `memory`: CUPTI's MEMORY2 records (allocations as the device sees them, pools included).
//! - `sync`: CUPTI's SYNCHRONIZATION records (what each wait waited for). Off by default: with the kind enabled,
//!   CUPTI intercepts every runtime call, subscribed or not. On an H100 (CUDA 13.0, driver 580.159.04,
//!   2026-11-27, gpu-validate's kinds part) an unsubscribed `cudaGetDevice` took 34 ns with kernel records alone
//!   and 209 ns with SYNCHRONIZATION too (MEMCPY, MEMSET, MEMORY2 and OVERHEAD: 34 to 37 ns), and a PyTorch-like
//!   eager loop recorded with it ran 72.6% slower than without a tool, against 20.3% without it. The waits
//!   themselves are recorded either way: the synchronising calls are runtime and driver callbacks.
//! - `overhead`: CUPTI's OVERHEAD records (its own buffer flushes and instrumentation).
//! - `python`: the Python stack (file, line, function; 16 frames) of the thread behind each synchronising call,
//!   copy and allocation, and of every Nth launch per thread (`CUFLIGHT_PY_LAUNCH_EVERY`, default 1024), read
//!   from the interpreter's memory (CPython 3.9 to 3.14). A process without Python pays nothing.
//! - `graphs`: CUDA graphs traced at graph level, as nsys's `--cuda-graph-trace=graph`: one record per graph launch
//!   (CUPTI_ACTIVITY_KIND_GRAPH_TRACE: its first node's start to its last node's end, on the launch's stream)
//!   instead of a record per node. Enabling it "selects graph-level tracing for the CUPTI session"
//!   (cupti_activity.h): no node of any graph has a kernel, copy or memset record then, so per-node kernel names
//!   and times are gone. The cheaper form for a server replaying graphs of hundreds of kernels each iteration.
//! - `hes`: kernel, copy and memset timestamps from the GPU's Hardware Event System instead of CUPTI's software
//!   instrumentation: "lower overhead and more accurate timing" (cupti_activity.h, `cuptiActivityEnableHWTrace`,
//!   CUDA 12.8 and later, Blackwell and later GPUs only). It must be chosen before the program's CUDA context
//!   exists, so `record` and `launch` can use it and an attach cannot; where CUPTI refuses it (an older GPU or
//!   CUPTI, MIG, MPS, vGPU, WSL, confidential computing) the software path records as usual and the trace's
//!   `traced` list leaves `hes` out. Not yet measured on a Blackwell GPU, hence not a default.
//!
//! - `api-records`: the runtime and driver calls from CUPTI's API activity records (CUPTI_ACTIVITY_KIND_RUNTIME and
//!   DRIVER, each call enabled on its own with `cuptiActivityEnableRuntimeApi`, as Kineto records calls) instead
//!   of callbacks into the agent: no call of the program runs the agent's code. Taken only where no callback is
//!   wanted: not with `python` (refused together), `record --sample` or a flight recorder, whose windows use
//!   callbacks, and not where CUPTI lacks the per-call entry points (CUDA 12.5 and later have them); the trace's
//!   `traced` list says which it was. Allocation sizes then come from `memory`'s records only. Not yet measured
//!   against callbacks on a GPU, hence not a default.
//!
//! The default is everything but `queries`, `sync`, `graphs`, `hes` and `api-records`.

use crate::{EventKind, RawEvent};

pub const CUDA: u32 = 1;
pub const QUERIES: u32 = 2;
pub const NVTX: u32 = 4;
pub const MEMORY: u32 = 8;
pub const SYNC: u32 = 16;
pub const OVERHEAD: u32 = 32;
pub const PYTHON: u32 = 64;
pub const GRAPHS: u32 = 128;
pub const HES: u32 = 256;
pub const API_RECORDS: u32 = 512;
pub const DEFAULT: u32 = CUDA | NVTX | MEMORY | OVERHEAD | PYTHON;

/// What CUPTI's node-level tracing adds to a CUDA graph's launch call for each node it records, on the launching
/// thread. Measured by gpu-validate's graphtrace part on an H200 (driver 580.159.04, CUDA 13.0, 2026-12-01:
/// `torch.compile(mode="reduce-overhead")`'s training loop, 608 launches of graphs of 107 kernel nodes each):
/// `cudaGraphLaunch` took a median of 156 µs traced per node and 40 µs traced per launch
/// (`CUPTI_ACTIVITY_KIND_GRAPH_TRACE`), so about (156 - 40) / 107 = 1.1 µs a node. The GPU idles meanwhile: in
/// that loop's trace the first node ran 40-220 µs into its launch call, and about 30 nodes more ran, with gaps,
/// before the call returned. The report gives idle time inside such a call, up to this much per node of the launch, to
/// the profiler rather than to the program's launch overhead; `record` and `serve` count it in what the recording
/// cost. `graphs` (graph-level records) is what avoids it.
pub const GRAPH_NODE_TRACING_NS: u64 = 1_100;

/// What CUPTI's tracing adds to a kernel launched one by one, on the launching thread: about 1 µs. Measured by
/// gpu-validate's sampled part on an H200 (driver 580.159.04, CUDA 13.0, 2026-12-01): in `record --sample 1/10`
/// of a launch-bound PyTorch loop (2042 launches a step, 400 steps, two runs) the steps recorded ran 0.91 and
/// 0.99 µs a launch slower than the steps not recorded (their own NVTX ranges: 24.96 against 23.10 ms, 23.31
/// against 21.29 ms). A tight loop of bare launches pays more (1.1 to 2.4 µs on a 3.9 µs launch with a no-op
/// subscriber, issue 26). Where the GPU waits on the host's launches, that time is mostly GPU idle the program
/// would not have: the report says how much of launch_bound it may be, and sets none of it apart (no record of
/// it, and unlike a graph launch's nodes, no call to find it in).
pub const EAGER_LAUNCH_TRACING_NS: u64 = 1_000;

/// What a recording traced that lengthens the program's launch calls, tallied event by event: kernels launched
/// one by one and CUDA graph nodes traced one by one. No record measures what tracing them cost the launching
/// threads; `record`, `attach` and `serve` tell it from the figures above, this one tally for all three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracedLaunches {
    kernels: u64,
    /// Kernel records that ran as a graph's node, or stand for a whole graph launch (graph-level tracing).
    graph_kernels: u64,
    graph_nodes: u64,
}

impl TracedLaunches {
    /// Counts one event of a recording (a kernel, or the graph node record that follows a graph's kernel).
    pub fn add(&mut self, e: &RawEvent) {
        match e.kind() {
            Some(EventKind::Kernel) => self.kernels += 1,
            Some(EventKind::GraphNode) => {
                self.graph_nodes += u64::from(e.as_graph_node().is_node_level());
                self.graph_kernels += u64::from(e.graph_node_op() == EventKind::Kernel);
            }
            _ => {}
        }
    }

    /// Adds another tally (another process's, another window's).
    pub fn merge(&mut self, other: TracedLaunches) {
        self.kernels = self.kernels.saturating_add(other.kernels);
        self.graph_kernels = self.graph_kernels.saturating_add(other.graph_kernels);
        self.graph_nodes = self.graph_nodes.saturating_add(other.graph_nodes);
    }

    /// Kernels launched one by one, each lengthened by [`EAGER_LAUNCH_TRACING_NS`].
    pub fn eager_kernels(&self) -> u64 {
        self.kernels.saturating_sub(self.graph_kernels)
    }

    /// Graph nodes CUPTI traced on their own, each lengthening its launch by [`GRAPH_NODE_TRACING_NS`].
    pub fn graph_nodes(&self) -> u64 {
        self.graph_nodes
    }

    /// What tracing the eager launches is estimated to have added to the launching threads, ns.
    pub fn eager_ns(&self) -> u64 {
        self.eager_kernels().saturating_mul(EAGER_LAUNCH_TRACING_NS)
    }

    /// What tracing the graph nodes is estimated to have added to the graph launch calls, ns.
    pub fn graph_node_ns(&self) -> u64 {
        self.graph_nodes.saturating_mul(GRAPH_NODE_TRACING_NS)
    }
}

/// The names `--trace` takes, with their bits, in the order `--help` lists them.
pub const NAMES: [(&str, u32); 10] = [
    ("cuda", CUDA),
    ("queries", QUERIES),
    ("nvtx", NVTX),
    ("memory", MEMORY),
    ("sync", SYNC),
    ("overhead", OVERHEAD),
    ("python", PYTHON),
    ("graphs", GRAPHS),
    ("hes", HES),
    ("api-records", API_RECORDS),
];

/// `cuda,nvtx,...` as a mask; `cuda` must be named (cuflight always traces CUDA), unknown names are refused.
pub fn parse(list: &str) -> Result<u32, String> {
    let mut mask = 0;
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(&(_, bit)) = NAMES.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
            return Err(format!("'{name}' is not something cuflight traces (choose from {})", known.join(", ")));
        };
        mask |= bit;
    }
    if mask & CUDA == 0 {
        return Err(format!("'{list}': cuflight always traces CUDA, so the list must name cuda (e.g. cuda,nvtx)"));
    }
    if mask & API_RECORDS != 0 && mask & PYTHON != 0 {
        return Err(format!(
            "'{list}': api-records takes the calls from CUPTI's records, which carry no Python stack: leave python out"
        ));
    }
    Ok(mask)
}

/// The mask as the names it holds, comma-separated.
pub fn describe(mask: u32) -> String {
    NAMES.iter().filter(|(_, bit)| mask & bit != 0).map(|(n, _)| *n).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::WHOLE_GRAPH;

    fn event(kind: EventKind, sub: u8, node: u64) -> RawEvent {
        RawEvent { kind: kind as u8, sub, a: 7, b: node, ..RawEvent::default() }
    }

    /// A graph's kernel nodes and a graph-level launch are not launched one by one; copies in graphs are nodes
    /// too; a graph-level launch traces no node.
    #[test]
    fn launches_are_told_apart_from_graph_nodes() {
        let mut t = TracedLaunches::default();
        for _ in 0..5 {
            t.add(&event(EventKind::Kernel, 0, 0));
        }
        t.add(&event(EventKind::GraphNode, 0, 1));
        t.add(&event(EventKind::GraphNode, EventKind::Memcpy as u8, 2));
        t.add(&event(EventKind::GraphNode, 0, WHOLE_GRAPH));
        t.add(&event(EventKind::Memcpy, 0, 0));
        assert_eq!((t.eager_kernels(), t.graph_nodes()), (3, 2));
        assert_eq!((t.eager_ns(), t.graph_node_ns()), (3 * EAGER_LAUNCH_TRACING_NS, 2 * GRAPH_NODE_TRACING_NS));
        let mut sum = t;
        sum.merge(t);
        assert_eq!((sum.eager_kernels(), sum.graph_nodes()), (6, 4));
    }

    #[test]
    fn lists_parse_as_nsys_lists_do() {
        assert_eq!(parse("cuda,nvtx"), Ok(CUDA | NVTX));
        assert_eq!(parse(" cuda , queries "), Ok(CUDA | QUERIES));
        assert_eq!(describe(DEFAULT), "cuda,nvtx,memory,overhead,python");
        assert!(parse("cuda,osrt").unwrap_err().contains("'osrt' is not"));
        assert!(parse("nvtx").unwrap_err().contains("must name cuda"));
    }
}
