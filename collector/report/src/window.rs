//! One step window as the idle attribution and the step breakdown see it, and the vocabulary they share: what a
//! CUDA call does to the GPU's queue, the launching threads' call stretches, host ranges, and per-name flags.
//!
//! A window holds only what overlaps it (GPU busy time by kind, CUDA calls, host ranges, the op that ends each
//! GPU gap) and the two facts from before it that a gap at its start needs (where the GPU was last busy, the
//! last CUDA call): [`super::sweep`] builds windows one after another as the events go by.

use super::spans::Span;
use cuflight_format::calls::{CallClass, CallEffects};
use cuflight_format::RawEvent;
use cuflight_trace::model::collectives::{self, Collective};
use cuflight_trace::model::kernel_category::{self, Category};
use cuflight_trace::model::trace::Process;
use cuflight_trace::model::{inductor, range_roles};
use rustc_hash::FxHashMap;

/// A stretch of time in which a launching thread was inside CUDA calls.
#[derive(Clone, Copy, Debug)]
pub struct HostCall {
    pub start: u64,
    pub end: u64,
    pub class: CallClass,
    /// The name of the call that gives the stretch its class (the first of the most blocking).
    pub name: u32,
    /// The Python line that call was made from, where its stack was recorded.
    pub source: Option<cuflight_trace::model::pystacks::PyFrame>,
    /// The outermost framework operator around the stretch's first call, where that call launches GPU work: its
    /// start and name.
    pub in_op: Option<(u64, u32)>,
}

/// A launching thread inside a CUDA call while CUDA set itself up: a call that sets CUDA up (creates a stream or
/// context, loads a module) or that returns at once, which took [`crate::idle::SETUP_CALL_NS`] or more; or the
/// first launch of a kernel that took as long (its module loaded, or compiled from PTX, then).
#[derive(Clone, Copy, Debug)]
pub struct SetupCall {
    pub span: Span,
    /// The call's name.
    pub call: u32,
    /// The kernel whose first launch it was.
    pub kernel: Option<u32>,
}

/// A completed host range (NVTX range or imported annotation/operator).
#[derive(Clone, Copy, Debug)]
pub struct HostRange {
    pub start: u64,
    pub end: u64,
    pub name: u32,
    pub tid: u32,
}

/// The GPU op that ends a GPU gap: the first op (in start order) that starts where GPU busy time resumes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Closer {
    pub start: u64,
    pub duration: u64,
    /// Its launch call's start, when the call is in the trace.
    pub launched: Option<u64>,
    /// When that call had handed it to the GPU: the call's end (a blocking call's start: it issues, then waits).
    pub issued: Option<u64>,
    /// Its stream ([`stream_key`]) and name.
    pub stream: u64,
    pub name: u32,
    /// A communication kernel (it may wait for its peers).
    pub comm: bool,
    /// The collective it ran, where the host's range around its launch or its name says.
    pub collective: Option<Collective>,
    /// Queued by a graph launch (`cudaGraphLaunch`): it waits on the graph's own dependencies too.
    pub graph: bool,
    /// The first work of its launch call (for a graph: its first node to run).
    pub launch_first: bool,
    /// Its launching thread made its stream wait on an event (`cudaStreamWaitEvent`) since the previous launch
    /// into that stream: it may wait for work on another stream.
    pub after_wait: bool,
    /// ... or queued a host function since then: it may wait for that function to return.
    pub after_host_fn: bool,
    /// Its launch call, when that call blocks the host (a synchronous or pageable copy): (name, end).
    pub blocking_call: Option<(u32, u64)>,
    /// A memory copy: while its call still runs with the copy queued, the host stages it (pageable memory).
    pub copy: bool,
    /// ... one touching pageable host memory, which the driver stages through a bounce buffer.
    pub pageable: bool,
}

/// The GPU op that ends a busy stretch (the last to end), before the gap that follows.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ender {
    pub end: u64,
    pub stream: u64,
    pub name: u32,
}

/// A stream of a device as one number.
pub fn stream_key(device: u32, stream: u32) -> u64 {
    (device as u64) << 32 | stream as u64
}

/// How a report names a stream: "stream S", or "GPU D stream S" on a device other than the first.
pub fn stream_label(key: u64) -> String {
    let (device, stream) = ((key >> 32) as u32, key as u32);
    let s = if stream == u32::MAX { "-".to_string() } else { stream.to_string() };
    if device == 0 {
        format!("stream {s}")
    } else {
        format!("GPU {device} stream {s}")
    }
}

/// One window `[span.0, span.1)` of one process.
pub struct WindowView<'a> {
    pub p: &'a Process,
    pub span: Span,
    /// Whole GPU busy stretches (all ops merged) that overlap the window or start at its end.
    pub busy: Vec<Span>,
    /// End of the last busy stretch that ended at or before the window's start.
    pub busy_before: Option<u64>,
    /// Busy time by kind and host time by kind, merged (at least the part inside the window).
    pub kernel_busy: Vec<Span>,
    pub compute_busy: Vec<Span>,
    pub memcpy_busy: Vec<Span>,
    pub memset_busy: Vec<Span>,
    /// CUDA API time of every thread.
    pub runtime_busy: Vec<Span>,
    /// Data-loading annotations.
    pub loader: Vec<Span>,
    /// Other host ranges and operators: TensorBoard's "CPU Exec".
    pub cpu: Vec<Span>,
    /// The op that starts each busy stretch inside the window (by its start).
    pub closers: Vec<Closer>,
    /// The op that ends each busy stretch that ends inside the window or just before it (by its end).
    pub enders: Vec<Ender>,
    /// The launching threads' call stretches that overlap the window, sorted.
    pub calls: Vec<HostCall>,
    /// The last call stretch that ended at or before the window's start.
    pub call_before: Option<HostCall>,
    /// The host building CUDA graphs (stream captures, begin to end, and instantiations), merged.
    pub graph_setup: Vec<Span>,
    /// The launching threads inside calls while CUDA set itself up, merged, by start.
    pub cuda_setup: Vec<SetupCall>,
    /// The CUDA graph launches traced node by node whose calls may overlap the window.
    pub graph_nodes: &'a GraphNodes,
}

/// CUDA graph launches whose nodes were traced one by one, by their launch call's start: (the call's end, how many
/// of its nodes the trace holds so far).
pub type GraphNodes = rustc_hash::FxHashMap<u64, (u64, u32)>;

impl WindowView<'_> {
    /// The last CUDA-call stretch that ended at or before `t` (`t` inside the window).
    pub fn call_before(&self, t: u64) -> Option<&HostCall> {
        let n = self.calls.partition_point(|c| c.end <= t);
        n.checked_sub(1).map(|i| &self.calls[i]).or(self.call_before.as_ref())
    }

    pub fn name(&self, id: u32) -> &str {
        self.p.string(id)
    }
}

/// What a call does to the GPU's queue (`copy`: the copy with the call's correlation id, if any).
pub fn classify_call(name: &str, copy: Option<&RawEvent>) -> CallClass {
    CallEffects::of(name).class(copy.is_some_and(is_dtoh_to_pageable))
}

/// A device-to-host copy into pageable memory: the call that queues it blocks, "async" or not.
pub fn is_dtoh_to_pageable(copy: &RawEvent) -> bool {
    copy.as_copy().blocks_host()
}

/// Communication kernels' time by the collective they ran ([`Collective::ALL`]'s order, then those no annotation
/// or name tells): in all, and with no compute beside it in steps.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommByCollective {
    pub total_ns: [u64; 8],
    pub exposed_ns: [u64; 8],
}

impl CommByCollective {
    /// The place of `c` (None: not told) in the arrays.
    pub fn slot(c: Option<Collective>) -> usize {
        c.map_or(Collective::ALL.len(), Collective::index)
    }
}

/// What the analyses need to know about each name, computed once per distinct string (not per event: a
/// 10M-event trace has a few thousand names): what a kernel or range of that name is ([`NameFlags::COMPUTE`]...)
/// and what a call of that name does ([`CallEffects`], the one classifier of CUDA calls).
#[derive(Default)]
pub struct NameFlags(FxHashMap<u32, NameFacts>);

/// What one name is, as [`NameFlags`] keeps it.
#[derive(Clone, Copy, Default)]
struct NameFacts {
    flags: u16,
    call: CallEffects,
    /// The collective a communication kernel of this name ran, where the name says
    /// ([`collectives::of_kernel`]).
    kernel_collective: Option<Collective>,
    /// The collective a host range of this name announces ([`collectives::of_range`]).
    range_collective: Option<Collective>,
}

/// The name of a whole graph replay traced at graph level (`--trace graphs`).
pub fn is_graph_level(name: &str) -> bool {
    cuflight_format::view::GRAPH_LEVEL_NAME.to_str().is_ok_and(|g| name == g)
}

impl NameFlags {
    pub const COMPUTE: u16 = 1;
    /// NCCL's kernels: HTA's communication, for its breakdown and overlap ([`NameFlags::COLLECTIVE`] for the
    /// report's own).
    pub const COMM: u16 = 2;
    pub const FP32_GEMM: u16 = 4;
    pub const PROFILER_STEP: u16 = 8;
    pub const STEP_LIKE: u16 = 16;
    pub const LOADER: u16 = 32;
    /// An elementwise kernel a fusing compiler would merge with its neighbours (ATen's, not Triton's: those are
    /// the fused ones).
    pub const ELEMENTWISE: u16 = 64;
    pub const GEMM: u16 = 128;
    /// A softmax as attention computes it (not the loss's log-softmax).
    pub const SOFTMAX: u16 = 256;
    /// A range around one request a server handles ([`range_roles::is_request_range`]).
    pub const REQUEST: u16 = 512;
    /// A whole graph replay traced at graph level (`--trace graphs`): one record for all its nodes.
    pub const GRAPH_LEVEL: u16 = 1024;
    /// A collective, NCCL's or another library's (vLLM's custom all-reduce, PyTorch's symmetric memory): the
    /// report's communication ([`Category::Communication`]).
    pub const COLLECTIVE: u16 = 2048;

    pub fn of(name: &str) -> u16 {
        let mut f = 0;
        let mut set = |cond: bool, flag: u16| {
            if cond {
                f |= flag;
            }
        };
        set(kernel_category::is_compute_kernel(name), Self::COMPUTE);
        set(kernel_category::is_comm_kernel(name), Self::COMM);
        set(kernel_category::is_fp32_gemm(name), Self::FP32_GEMM);
        set(name.contains("ProfilerStep"), Self::PROFILER_STEP);
        set(range_roles::step_like(name), Self::STEP_LIKE);
        set(range_roles::is_loader_range(name), Self::LOADER);
        set(range_roles::is_request_range(name), Self::REQUEST);
        set(is_graph_level(name), Self::GRAPH_LEVEL);
        let category = kernel_category::kernel_category(name);
        set(category == Category::Elementwise && !inductor::is_inductor_kernel(name), Self::ELEMENTWISE);
        set(category == Category::Gemm, Self::GEMM);
        set(category == Category::Softmax && !kernel_category::is_log_softmax(name), Self::SOFTMAX);
        set(kernel_category::is_collective_kernel(name), Self::COLLECTIVE);
        f
    }

    pub fn new(p: &Process) -> NameFlags {
        let facts = |s: &str| {
            let flags = Self::of(s);
            let kernel_collective = (flags & Self::COLLECTIVE != 0).then(|| collectives::of_kernel(s)).flatten();
            NameFacts { flags, call: CallEffects::of(s), kernel_collective, range_collective: collectives::of_range(s) }
        };
        NameFlags(p.strings.iter().map(|(&id, s)| (id, facts(s))).collect())
    }

    /// What a call named by string `id` does.
    pub fn call(&self, id: u32) -> CallEffects {
        self.0.get(&id).map_or_else(CallEffects::default, |f| f.call)
    }

    pub fn has(&self, id: u32, flag: u16) -> bool {
        self.0.get(&id).is_some_and(|f| f.flags & flag != 0)
    }

    /// The collective a communication kernel named by `id` ran, where its name says.
    pub fn kernel_collective(&self, id: u32) -> Option<Collective> {
        self.0.get(&id).and_then(|f| f.kernel_collective)
    }

    /// The collective a host range named by `id` announces.
    pub fn range_collective(&self, id: u32) -> Option<Collective> {
        self.0.get(&id).and_then(|f| f.range_collective)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::view::{CopyKind, MemoryKind};
    use cuflight_trace::model::{kernel_category::is_comm_kernel, range_roles::is_loader_range};

    #[test]
    fn calls_are_classified_by_their_effect_on_the_queue() {
        assert_eq!(classify_call("cudaStreamSynchronize", None), CallClass::Sync);
        assert_eq!(classify_call("cuCtxSynchronize", None), CallClass::Sync);
        assert_eq!(classify_call("cudaMemcpy", None), CallClass::Sync);
        assert_eq!(classify_call("cudaMemcpyAsync", None), CallClass::Launch);
        let dtoh_pageable = RawEvent::copy(0, 1, 0, CopyKind::DTOH, MemoryKind::DEVICE, MemoryKind::PAGEABLE, 8, true);
        assert_eq!(classify_call("cudaMemcpyAsync", Some(&dtoh_pageable)), CallClass::Sync);
        assert_eq!(classify_call("cudaFree", None), CallClass::Alloc);
        assert_eq!(classify_call("cudaMallocAsync", None), CallClass::Launch);
        assert_eq!(classify_call("cudaLaunchKernel", None), CallClass::Launch);
        assert!(is_loader_range("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"));
        assert!(is_comm_kernel("ncclKernel_AllReduce_RING_LL_Sum_float"));
        assert!(is_comm_kernel("ncclDevKernel_AllGather_RING_LL"));
        assert!(is_comm_kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"
        ));
        assert!(is_comm_kernel("void ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"));
        // One class a kernel: a communication kernel is never computation too, however it is spelled.
        for name in ["void ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "ncclDevKernel_AllGather_RING_LL"] {
            assert!(!cuflight_trace::model::kernel_category::is_compute_kernel(name), "{name}");
        }
    }
}
