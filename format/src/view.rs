//! The typed view of a [`RawEvent`]: what its generic fields (`a`, `b`, `c`, `sub`, `flags`) mean for its kind,
//! decoded in one place. Readers above `format` call these instead of reading the fields, so a change of layout
//! touches this file and [`crate::event`] only, and the code says `copy.bytes` where it once said `e.a`.
//!
//! Each view is a small `Copy` struct made from the event on demand (a few shifts: free next to reading the event);
//! the accessors do not check the kind, which callers have matched already, as they do today. The writers' side
//! of the same layout, setters and constructors, is `view_write.rs`.
//!
//! ```
//! use cuflight_format::{EventKind, RawEvent};
//! use cuflight_format::view::{CopyKind, MemoryKind};
//! let e = RawEvent::copy(0, 10, 20, CopyKind::DTOH, MemoryKind::DEVICE, MemoryKind::PAGEABLE, 4096, true);
//! let copy = e.as_copy();
//! assert_eq!((copy.kind, copy.bytes, copy.dst), (CopyKind::DTOH, 4096, MemoryKind::PAGEABLE));
//! assert!(copy.blocks_host());
//! ```

use crate::event::{
    LaunchConfig, MemKind, RawEvent, API_DRIVER, API_RUNTIME, FLAG_ASYNC, FLAG_DEVICE, FLAG_GLOBAL, GPU_RATIO_ABSENT,
    GPU_SAMPLE_PCIE, PYFRAME_IMPORTED, PYFRAME_OF_MAIN_THREAD, PYFRAME_TRUNCATED, SAMPLED_SLICE,
};
use crate::EventKind;

/// CUPTI's memcpy kind (`CUpti_ActivityMemcpyKind`), as a copy's `sub` holds it. Unknown values are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyKind(pub u8);

impl CopyKind {
    pub const HTOD: CopyKind = CopyKind(1);
    pub const DTOH: CopyKind = CopyKind(2);
    pub const DTOD: CopyKind = CopyKind(8);
    pub const HTOH: CopyKind = CopyKind(9);
    pub const PTOP: CopyKind = CopyKind(10);
}

/// CUPTI's memory kind (`CUpti_ActivityMemoryKind`: 1 pageable, 2 pinned, 3 device, 4 array, 5 managed, 6 device
/// static, 7 managed static). Unknown values are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemoryKind(pub u8);

impl MemoryKind {
    pub const PAGEABLE: MemoryKind = MemoryKind(1);
    pub const PINNED: MemoryKind = MemoryKind(2);
    pub const DEVICE: MemoryKind = MemoryKind(3);
}

/// An [`EventKind::Api`] call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiCall {
    /// A runtime call (false: a driver call).
    pub runtime: bool,
    /// CUPTI's callback id in its domain (0 where an import did not say).
    pub cbid: u32,
    /// The call's return code (`cudaError_t` or `CUresult`; 0 success) as the trace holds it: see [`ApiCall::code`].
    pub result: u64,
    /// The operator that made it (Kineto's `External id`; 0 none).
    pub external: u64,
}

impl ApiCall {
    /// The return code as CUDA's enums hold it (a trace's larger value saturates to u32::MAX).
    pub fn code(&self) -> u32 {
        u32::try_from(self.result).unwrap_or(u32::MAX)
    }
    pub fn failed(&self) -> bool {
        self.result != 0
    }
}

/// An [`EventKind::Memcpy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memcpy {
    pub kind: CopyKind,
    pub src: MemoryKind,
    pub dst: MemoryKind,
    pub bytes: u64,
    /// Issued with an `*Async` call.
    pub is_async: bool,
}

impl Memcpy {
    /// The host side's memory of a copy that has one (HtoD and HtoH: the source; DtoH: the destination); None for
    /// copies between devices or arrays.
    pub fn host_memory(&self) -> Option<MemoryKind> {
        match self.kind {
            CopyKind::HTOD | CopyKind::HTOH => Some(self.src),
            CopyKind::DTOH => Some(self.dst),
            _ => None,
        }
    }

    /// A device-to-host copy into pageable memory: the call that queues it blocks, "async" or not (the driver
    /// stages it through a pinned buffer).
    pub fn blocks_host(&self) -> bool {
        self.kind == CopyKind::DTOH && self.dst == MemoryKind::PAGEABLE
    }
}

/// An [`EventKind::Memset`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memset {
    pub memory: MemoryKind,
    pub bytes: u64,
    pub value: u64,
    /// Issued with an `*Async` call.
    pub is_async: bool,
}

/// An [`EventKind::Alloc`] or [`EventKind::Free`] seen by an API callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemOp {
    /// None for a value this build does not know.
    pub memory: Option<MemKind>,
    pub address: u64,
    /// An allocation's size (a free's, where the recorder knew it).
    pub bytes: u64,
}

impl MemOp {
    /// Memory on the device (an unknown kind counts as device memory, as the analyses always counted it).
    pub fn on_device(&self) -> bool {
        self.memory.is_none_or(MemKind::is_device)
    }
}

/// An [`EventKind::ClockSync`] pair: the same instant on three clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockPair {
    pub cupti_ns: u64,
    pub monotonic_ns: u64,
    /// CLOCK_REALTIME (0: not taken).
    pub realtime_ns: u64,
}

impl ClockPair {
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC at this pair, where both were taken: what turns a trace's monotonic
    /// times into wall-clock times.
    pub fn realtime_offset(&self) -> Option<i64> {
        (self.realtime_ns != 0 && self.monotonic_ns != 0).then(|| self.realtime_ns as i64 - self.monotonic_ns as i64)
    }
}

/// An [`EventKind::Device`]: `device` is its ordinal, `name` its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub memory_bytes: u64,
    /// (major, minor) compute capability.
    pub compute_capability: (u32, u32),
    pub multiprocessors: u64,
    /// `cuDriverGetVersion` (13000 for 13.0; 0 unknown).
    pub driver_version: u32,
}

/// An [`EventKind::Sync`] record of CUPTI's SYNCHRONIZATION kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncRecord {
    /// CUPTI's synchronization type: 1 event sync, 2 stream wait event, 3 stream sync, 4 context sync.
    pub kind: u8,
    /// The CUDA event waited for (0 none).
    pub event: u64,
}

/// CUPTI's synchronization type of a stream waiting for an event ([`SyncRecord::kind`]:
/// CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, cupti_activity.h).
pub const SYNC_STREAM_WAIT_EVENT: u8 = 2;

/// An NVTX event (push, pop, start, end, mark, category).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nvtx {
    /// The domain's string id (0: the default domain).
    pub domain: u64,
    /// A start/end range's id, a category's id.
    pub id: u64,
    /// A mark for the whole trace (Kineto's global instants), tied to no thread.
    pub global: bool,
    /// A push's, start's or mark's NVTX category and ARGB color (0 none).
    pub category: u32,
    pub color: u32,
    /// A push's, start's or mark's NVTX payload type (1 u64, 2 i64, 3 double, 4 u32, 5 i32, 6 float; 0 none) and
    /// its 64 bits.
    pub payload_type: u8,
    pub payload_bits: u64,
}

/// An [`EventKind::Range`]: a complete range from an import (operators, annotations, GPU user annotations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeRecord {
    /// The category's (or domain's) string id.
    pub category: u32,
    /// It lies on `device`/`stream`, not a host thread.
    pub on_device: bool,
    /// The operator's `External id` (0 none).
    pub external: u64,
    /// An operator's argument text (string id; 0 none) and its sequence number + 1 (0 none).
    pub operator_text: u32,
    pub sequence_plus_one: u64,
}

/// An [`EventKind::MemoryActivity`]: CUPTI's MEMORY2 record, the device's view of an allocation or release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryActivity {
    /// CUPTI's memory operation type: 1 allocation, 2 release.
    pub operation: u8,
    pub address: u64,
    pub bytes: u64,
    pub memory: MemoryKind,
}

/// An [`EventKind::Overhead`]: CUPTI's own overhead (`CUpti_ActivityOverheadKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overhead {
    pub kind: u8,
}

/// The node id of an [`EventKind::GraphNode`] that stands for a whole graph launch traced at graph level (`--trace
/// graphs`, CUPTI_ACTIVITY_KIND_GRAPH_TRACE): the kernel event before it is the graph's execution, named "CUDA
/// graph (graph-level trace)", and no node of the launch has an event.
pub const WHOLE_GRAPH: u64 = u64::MAX;

/// The name of the kernel event that stands for a graph launch traced at graph level ([`WHOLE_GRAPH`]).
pub const GRAPH_LEVEL_NAME: &std::ffi::CStr = c"CUDA graph (graph-level trace)";

/// An [`EventKind::GraphNode`]: the kernel before it ran as a node of a CUDA graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphNode {
    pub graph_id: u64,
    pub node_id: u64,
}

impl GraphNode {
    /// A node CUPTI traced on its own (node-level tracing, each lengthening its launch call), not a whole launch
    /// traced at graph level ([`WHOLE_GRAPH`]).
    pub fn is_node_level(&self) -> bool {
        self.node_id != WHOLE_GRAPH
    }
}

/// Frames kept per Python stack, innermost first: the agent reads no more, and an import keeps as many (deeper
/// ones are left out; the last kept frame says so).
pub const MAX_PY_FRAMES: usize = 16;

/// An [`EventKind::PyFrame`]: one frame of a call's Python stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyFrameRecord {
    /// 0 innermost.
    pub depth: u32,
    /// The function's name is the event's `name`; its file's string id here.
    pub file: u32,
    /// 0 unknown.
    pub line: u32,
    /// Deeper frames were left out after this one.
    pub truncated: bool,
    /// Borrowed from the main thread (the calling thread ran no Python).
    pub of_main_thread: bool,
    /// Taken from a trace's own Python ranges at import, not read by the agent.
    pub imported: bool,
    /// On the innermost frame: ns the agent took to read the stack (0 before 2026-11-27 agents).
    pub read_ns: u64,
}

/// An [`EventKind::GpuSample`]: what the device's counters say of one sampling interval. Each ratio is a
/// fraction of its peak (1.0 = the peak; counters may read a little above it), None where the sample lacks it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuSample {
    /// SMs active (`sm__cycles_active.avg` over `sm__cycles_elapsed.avg`).
    pub sm_active: Option<f64>,
    /// Tensor pipes active (`sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed`).
    pub tensor_active: Option<f64>,
    /// DRAM read and write throughput (`dram__{read,write}_throughput.avg.pct_of_peak_sustained_elapsed`).
    pub dram_read: Option<f64>,
    pub dram_write: Option<f64>,
    /// The graphics engine busy (`gr__cycles_active.avg` over `gr__cycles_elapsed.max`): any work on the device.
    pub gpu_active: Option<f64>,
    /// PCIe bytes read and written by the device in the interval (`pcie__{read,write}_bytes.sum`), if sampled.
    pub pcie_bytes: Option<(u64, u64)>,
}

impl GpuSample {
    /// DRAM throughput, reads and writes together, as a fraction of peak (the peak is shared by both).
    pub fn dram(&self) -> Option<f64> {
        match (self.dram_read, self.dram_write) {
            (None, None) => None,
            (r, w) => Some(r.unwrap_or(0.0) + w.unwrap_or(0.0)),
        }
    }
}

/// A ratio in 1/10000 of its peak, [`GPU_RATIO_ABSENT`] for none; above 6.5 times the peak it saturates.
fn pack_ratio(r: Option<f64>) -> u64 {
    match r {
        Some(v) if v.is_finite() => (v.max(0.0) * 10_000.0).round().min((GPU_RATIO_ABSENT - 1) as f64) as u64,
        _ => GPU_RATIO_ABSENT as u64,
    }
}

fn unpack_ratio(bits: u64) -> Option<f64> {
    let v = bits as u16;
    (v != GPU_RATIO_ABSENT).then(|| v as f64 / 10_000.0)
}

impl RawEvent {
    /// An [`EventKind::Api`] call.
    pub fn as_api(&self) -> ApiCall {
        ApiCall { runtime: self.sub != API_DRIVER, cbid: self.a as u32, result: self.b, external: self.c }
    }
    /// A kernel's launch configuration.
    pub fn launch_config(&self) -> LaunchConfig {
        LaunchConfig::unpack(self.a, self.b, self.c)
    }
    /// A kernel's launch configuration as packed (grid, block and shared memory words): a key that is the same
    /// for the same configuration.
    pub fn launch_key(&self) -> [u64; 3] {
        [self.a, self.b, self.c]
    }
    pub fn as_copy(&self) -> Memcpy {
        let (src, dst) = self.copy_memory_kinds();
        Memcpy {
            kind: CopyKind(self.sub),
            src: MemoryKind(src),
            dst: MemoryKind(dst),
            bytes: self.a,
            is_async: self.flags & FLAG_ASYNC != 0,
        }
    }
    pub fn as_memset(&self) -> Memset {
        Memset { memory: MemoryKind(self.sub), bytes: self.a, value: self.b, is_async: self.flags & FLAG_ASYNC != 0 }
    }
    /// An [`EventKind::Alloc`] or [`EventKind::Free`].
    pub fn as_mem_op(&self) -> MemOp {
        MemOp { memory: MemKind::from_u8(self.sub), address: self.a, bytes: self.b }
    }
    pub fn as_clock_pair(&self) -> ClockPair {
        ClockPair { cupti_ns: self.start, monotonic_ns: self.end, realtime_ns: self.a }
    }
    pub fn as_device(&self) -> DeviceInfo {
        DeviceInfo {
            memory_bytes: self.a,
            compute_capability: self.compute_capability(),
            multiprocessors: self.c,
            driver_version: self.stream,
        }
    }
    pub fn as_sync(&self) -> SyncRecord {
        SyncRecord { kind: self.sub, event: self.a }
    }
    pub fn as_nvtx(&self) -> Nvtx {
        Nvtx {
            domain: self.c,
            id: self.a,
            global: self.flags & FLAG_GLOBAL != 0,
            category: self.b as u32,
            color: (self.b >> 32) as u32,
            payload_type: self.sub,
            payload_bits: self.device as u64 | (self.stream as u64) << 32,
        }
    }
    pub fn as_range(&self) -> RangeRecord {
        RangeRecord {
            category: self.c as u32,
            on_device: self.flags & FLAG_DEVICE != 0,
            external: self.a,
            operator_text: self.b as u32,
            sequence_plus_one: self.b >> 32,
        }
    }
    pub fn as_memory_activity(&self) -> MemoryActivity {
        MemoryActivity { operation: self.sub, address: self.a, bytes: self.b, memory: MemoryKind(self.c as u8) }
    }
    pub fn as_overhead(&self) -> Overhead {
        Overhead { kind: self.sub }
    }
    pub fn as_graph_node(&self) -> GraphNode {
        GraphNode { graph_id: self.a, node_id: self.b }
    }
    /// What ran as the node of an [`EventKind::GraphNode`]: a kernel (also `sub` 0, written before copies and
    /// memsets had theirs), a memcpy or a memset.
    pub fn graph_node_op(&self) -> EventKind {
        match self.sub {
            s if s == EventKind::Memcpy as u8 => EventKind::Memcpy,
            s if s == EventKind::Memset as u8 => EventKind::Memset,
            _ => EventKind::Kernel,
        }
    }
    pub fn as_py_frame(&self) -> PyFrameRecord {
        PyFrameRecord {
            depth: self.device,
            file: self.c as u32,
            line: self.a as u32,
            truncated: self.sub & PYFRAME_TRUNCATED != 0,
            of_main_thread: self.sub & PYFRAME_OF_MAIN_THREAD != 0,
            imported: self.sub & PYFRAME_IMPORTED != 0,
            read_ns: self.b,
        }
    }
    pub fn as_gpu_sample(&self) -> GpuSample {
        GpuSample {
            sm_active: unpack_ratio(self.a),
            tensor_active: unpack_ratio(self.a >> 16),
            dram_read: unpack_ratio(self.a >> 32),
            dram_write: unpack_ratio(self.a >> 48),
            gpu_active: unpack_ratio(self.c),
            pcie_bytes: (self.sub & GPU_SAMPLE_PCIE != 0).then_some((self.b & 0xffff_ffff, self.b >> 32)),
        }
    }
    /// An [`EventKind::Sampled`]'s step or slice: (index from the run's first, N of one in N).
    pub fn as_sampled(&self) -> (u64, u64) {
        (self.a, self.b)
    }

    /// Whether an [`EventKind::Sampled`] span is a time slice (the program had marked no step yet).
    pub fn is_sampled_slice(&self) -> bool {
        self.sub == SAMPLED_SLICE
    }

    /// An [`EventKind::ThreadName`]'s OS thread id (64 bits: an import keeps its trace's ids whole).
    pub fn named_thread(&self) -> u64 {
        self.a
    }

    /// The string id annotations are grouped by: an NVTX event's domain, an imported range's category.
    pub fn annotation_domain(&self) -> u64 {
        self.c
    }

    /// Sets [`RawEvent::annotation_domain`] (a string id).
    pub fn set_annotation_domain(&mut self, id: u32) {
        self.c = id as u64;
    }

    /// What a fact (a device, a thread's name, an NVTX category) is about, with its kind: a later event with the
    /// same key restates the same fact.
    pub fn fact_key(&self) -> (u8, u32, u64, u64) {
        (self.kind, self.device, self.a, self.c)
    }

    /// Rewrites every string id the event holds with `map`: its name, and by kind an NVTX event's domain, a
    /// range's category and operator text, a Python frame's file. For writing events into another string region
    /// (merging traces).
    pub fn map_string_ids(&mut self, map: impl Fn(u32) -> u32) {
        self.name = map(self.name);
        match self.kind() {
            Some(
                EventKind::NvtxPush
                | EventKind::NvtxPop
                | EventKind::NvtxStart
                | EventKind::NvtxEnd
                | EventKind::NvtxMark
                | EventKind::NvtxCategory
                | EventKind::PyFrame,
            ) => self.c = map(self.c as u32) as u64,
            Some(EventKind::Range) => {
                self.c = map(self.c as u32) as u64;
                if self.flags & FLAG_DEVICE == 0 {
                    // An imported operator's argument text: a string id in the low half (see the Kineto importer).
                    self.b = (self.b & !0xffff_ffff) | map(self.b as u32) as u64;
                }
            }
            _ => {}
        }
    }
}

#[path = "view_write.rs"]
mod write;

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
