//! Activity records in the layouts of the CUDA release the simulator models (see `release.rs` for the sources).

use crate::c;
use crate::release::{self, Release};
use cupti_sys::cuda12 as c12;
use std::ffi::c_char;

/// What happened on the simulated device, before it is laid out as a versioned CUPTI record.
#[derive(Clone, Copy)]
pub(crate) enum SimRecord {
    Kernel {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        grid: [i32; 3],
        block: [i32; 3],
        dynamic_shared: i32,
        name: *const c_char,
        /// (graphId, graphNodeId) of a kernel launched as a graph node; (0, 0) otherwise.
        graph: (u32, u64),
    },
    Memcpy {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        bytes: u64,
        copy_kind: u8,
        src_kind: u8,
        dst_kind: u8,
        is_async: bool,
        /// (graphId, graphNodeId) of a copy run as a graph node; (0, 0) otherwise: cupti_activity.h,
        /// CUpti_ActivityMemcpy4 to 7, "This field will be 0 if the memcpy is not done through graph launch".
        graph: (u32, u64),
    },
    Memset {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        bytes: u64,
        value: u32,
        memory_kind: u16,
        is_async: bool,
        /// (graphId, graphNodeId) of a memset run as a graph node; (0, 0) otherwise: cupti_activity.h,
        /// CUpti_ActivityMemset3 to 5, "This field will be 0 if the memset is not executed through graph launch".
        graph: (u32, u64),
    },
    /// One launch of a CUDA graph traced at graph level (CUPTI_ACTIVITY_KIND_GRAPH_TRACE, cupti_activity.h,
    /// CUpti_ActivityGraphTrace2: "represents execution for a graph without giving visibility about the execution
    /// of its nodes"; `correlation` is "identical to the correlation ID in the driver API activity record that
    /// launched the graph"): from its first node's start to its last node's end.
    GraphTrace {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        graph_id: u32,
    },
    Memory {
        release: bool,
        timestamp: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        address: u64,
        bytes: u64,
        memory_kind: u32,
        is_async: bool,
    },
    Sync {
        start: u64,
        end: u64,
        kind: u32,
        stream: u32,
        correlation: u32,
        event: u32,
    },
    /// A runtime or driver call (CUPTI_ACTIVITY_KIND_RUNTIME / DRIVER, `CUpti_ActivityAPI`: see `api_records.rs`).
    Api {
        kind: c::CUpti_ActivityKind,
        cbid: u32,
        start: u64,
        end: u64,
        thread: u32,
        correlation: u32,
        result: u32,
    },
}

/// Size of one record of `kind` in `rel`'s layout, rounded to CUPTI's 8-byte record alignment.
pub(crate) fn record_size(kind: c::CUpti_ActivityKind, rel: &Release) -> usize {
    use std::mem::size_of;
    let s = match kind {
        c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | c::CUPTI_ACTIVITY_KIND_KERNEL => match rel.kernel {
            release::Kernel::V9 => size_of::<c12::CUpti_ActivityKernel9>(),
            release::Kernel::V10 => size_of::<c::CUpti_ActivityKernel10>(),
            release::Kernel::V12 => size_of::<c::CUpti_ActivityKernel12>(),
            release::Kernel::V13 => size_of::<c::CUpti_ActivityKernel13>(),
        },
        c::CUPTI_ACTIVITY_KIND_MEMCPY => match rel.memcpy {
            release::Memcpy::V5 => size_of::<c12::CUpti_ActivityMemcpy5>(),
            release::Memcpy::V6 => size_of::<c12::CUpti_ActivityMemcpy6>(),
            release::Memcpy::V7 => size_of::<c::CUpti_ActivityMemcpy7>(),
        },
        c::CUPTI_ACTIVITY_KIND_MEMSET => match rel.memset {
            release::Memset::V4 => size_of::<c12::CUpti_ActivityMemset4>(),
            release::Memset::V5 => size_of::<c::CUpti_ActivityMemset5>(),
        },
        c::CUPTI_ACTIVITY_KIND_MEMORY2 => match rel.memory {
            release::Memory::V3 => size_of::<c12::CUpti_ActivityMemory3>(),
            release::Memory::V4 => size_of::<c::CUpti_ActivityMemory4>(),
        },
        c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => match rel.sync {
            release::Sync::V1 => size_of::<c12::CUpti_ActivitySynchronization>(),
            release::Sync::V2 => size_of::<c::CUpti_ActivitySynchronization2>(),
        },
        c::CUPTI_ACTIVITY_KIND_OVERHEAD => size_of::<c::CUpti_ActivityOverhead3>(),
        // The same layout in CUDA 12 and 13 (CUpti_ActivityGraphTrace2, 56 bytes in both headers).
        c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE => size_of::<c::CUpti_ActivityGraphTrace2>(),
        // The same layout in CUDA 12 and 13 (CUpti_ActivityAPI, 40 bytes in both headers).
        c::CUPTI_ACTIVITY_KIND_RUNTIME | c::CUPTI_ACTIVITY_KIND_DRIVER => size_of::<c::CUpti_ActivityAPI>(),
        _ => 8,
    };
    s.next_multiple_of(8)
}

macro_rules! fill_kernel {
    ($ty:ty, $buf:expr, $start:expr, $end:expr, $device:expr, $stream:expr, $corr:expr, $grid:expr, $block:expr, $dyn:expr, $name:expr, $graph:expr) => {{
        // SAFETY: all-zero bytes are a valid value of this plain C struct.
        let mut r: $ty = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        r.start = $start;
        r.end = $end;
        r.completed = $end;
        r.deviceId = $device;
        r.contextId = $device + 1;
        r.streamId = $stream;
        r.correlationId = $corr;
        [r.gridX, r.gridY, r.gridZ] = $grid;
        [r.blockX, r.blockY, r.blockZ] = $block;
        r.dynamicSharedMemory = $dyn;
        r.registersPerThread = 32;
        r.name = $name;
        r.launchType = 0;
        (r.graphId, r.graphNodeId) = $graph;
        // SAFETY: the caller checked the record fits at this offset; unaligned writes are fine for memcpy.
        unsafe { ($buf as *mut $ty).write_unaligned(r) };
    }};
}

macro_rules! fill_memcpy {
    ($ty:ty, $buf:expr, $start:expr, $end:expr, $device:expr, $stream:expr, $corr:expr, $bytes:expr, $ck:expr, $sk:expr, $dk:expr, $async:expr, $graph:expr) => {{
        // SAFETY: all-zero bytes are a valid value of this plain C struct.
        let mut r: $ty = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_MEMCPY;
        r.copyKind = $ck;
        r.srcKind = $sk;
        r.dstKind = $dk;
        r.flags = if $async { 1 } else { 0 }; // CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC
        r.bytes = $bytes;
        r.start = $start;
        r.end = $end;
        r.deviceId = $device;
        r.contextId = $device + 1;
        r.streamId = $stream;
        r.correlationId = $corr;
        r.runtimeCorrelationId = $corr;
        (r.graphId, r.graphNodeId) = $graph;
        // SAFETY: the caller checked the record fits at this offset.
        unsafe { ($buf as *mut $ty).write_unaligned(r) };
    }};
}

macro_rules! fill_memset {
    ($ty:ty, $buf:expr, $start:expr, $end:expr, $device:expr, $stream:expr, $corr:expr, $bytes:expr, $value:expr, $mk:expr, $async:expr, $graph:expr) => {{
        // SAFETY: all-zero bytes are a valid value of this plain C struct.
        let mut r: $ty = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_MEMSET;
        r.value = $value;
        r.bytes = $bytes;
        r.start = $start;
        r.end = $end;
        r.deviceId = $device;
        r.contextId = $device + 1;
        r.streamId = $stream;
        r.correlationId = $corr;
        r.flags = if $async { 1 } else { 0 }; // CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC
        r.memoryKind = $mk;
        (r.graphId, r.graphNodeId) = $graph;
        // SAFETY: the caller checked the record fits at this offset.
        unsafe { ($buf as *mut $ty).write_unaligned(r) };
    }};
}

// SAFETY: the only pointer is a kernel name, a static string registered with the runtime.
unsafe impl Send for SimRecord {}

impl SimRecord {
    pub(crate) fn activity_kind(&self) -> c::CUpti_ActivityKind {
        match self {
            SimRecord::Kernel { .. } => c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            SimRecord::Memcpy { .. } => c::CUPTI_ACTIVITY_KIND_MEMCPY,
            SimRecord::Memset { .. } => c::CUPTI_ACTIVITY_KIND_MEMSET,
            SimRecord::Memory { .. } => c::CUPTI_ACTIVITY_KIND_MEMORY2,
            SimRecord::Sync { .. } => c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
            SimRecord::GraphTrace { .. } => c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
            SimRecord::Api { kind, .. } => *kind,
        }
    }

    /// An API record's (domain, cbid): driver 0, runtime 1.
    pub(crate) fn api_call(&self) -> Option<(usize, u32)> {
        match *self {
            SimRecord::Api { kind, cbid, .. } => crate::api_records::domain_of_kind(kind).map(|d| (d, cbid)),
            _ => None,
        }
    }

    /// A kernel, copy or memset run as a node of a graph launch.
    pub(crate) fn graph_node(&self) -> bool {
        match self {
            SimRecord::Kernel { graph, .. } | SimRecord::Memcpy { graph, .. } | SimRecord::Memset { graph, .. } => {
                graph.0 != 0
            }
            _ => false,
        }
    }

    /// The same record with every timestamp passed through `f` (device clock to CUPTI's clock), or with `end`
    /// zeroed for a record handed over unfinished by a forced flush.
    pub(crate) fn map_times(mut self, f: impl Fn(u64) -> u64) -> Self {
        match &mut self {
            SimRecord::Kernel { start, end, .. }
            | SimRecord::Memcpy { start, end, .. }
            | SimRecord::Memset { start, end, .. }
            | SimRecord::Sync { start, end, .. }
            | SimRecord::GraphTrace { start, end, .. }
            | SimRecord::Api { start, end, .. } => {
                *start = f(*start);
                *end = f(*end);
            }
            SimRecord::Memory { timestamp, .. } => *timestamp = f(*timestamp),
        }
        self
    }

    /// Writes the record at `buf + at` in `rel`'s layout.
    ///
    /// # Safety
    /// `buf + at .. + record_size(kind, rel)` must be writable.
    pub(crate) unsafe fn write(&self, buf: *mut u8, at: usize, rel: &Release) {
        // SAFETY: guaranteed by the caller.
        let p = unsafe { buf.add(at) };
        match *self {
            SimRecord::Kernel { start, end, device, stream, correlation, grid, block, dynamic_shared, name, graph } => {
                macro_rules! k {
                    ($t:ty) => {
                        fill_kernel!(
                            $t,
                            p,
                            start,
                            end,
                            device,
                            stream,
                            correlation,
                            grid,
                            block,
                            dynamic_shared,
                            name,
                            graph
                        )
                    };
                }
                match rel.kernel {
                    release::Kernel::V9 => k!(c12::CUpti_ActivityKernel9),
                    release::Kernel::V10 => k!(c::CUpti_ActivityKernel10),
                    release::Kernel::V12 => k!(c::CUpti_ActivityKernel12),
                    release::Kernel::V13 => k!(c::CUpti_ActivityKernel13),
                }
            }
            SimRecord::Memcpy {
                start,
                end,
                device,
                stream,
                correlation,
                bytes,
                copy_kind,
                src_kind,
                dst_kind,
                is_async,
                graph,
            } => {
                macro_rules! m {
                    ($t:ty) => {
                        fill_memcpy!(
                            $t,
                            p,
                            start,
                            end,
                            device,
                            stream,
                            correlation,
                            bytes,
                            copy_kind,
                            src_kind,
                            dst_kind,
                            is_async,
                            graph
                        )
                    };
                }
                match rel.memcpy {
                    release::Memcpy::V5 => m!(c12::CUpti_ActivityMemcpy5),
                    release::Memcpy::V6 => m!(c12::CUpti_ActivityMemcpy6),
                    release::Memcpy::V7 => m!(c::CUpti_ActivityMemcpy7),
                }
            }
            SimRecord::Memset {
                start,
                end,
                device,
                stream,
                correlation,
                bytes,
                value,
                memory_kind,
                is_async,
                graph,
            } => {
                macro_rules! s {
                    ($t:ty) => {
                        fill_memset!(
                            $t,
                            p,
                            start,
                            end,
                            device,
                            stream,
                            correlation,
                            bytes,
                            value,
                            memory_kind,
                            is_async,
                            graph
                        )
                    };
                }
                match rel.memset {
                    release::Memset::V4 => s!(c12::CUpti_ActivityMemset4),
                    release::Memset::V5 => s!(c::CUpti_ActivityMemset5),
                }
            }
            SimRecord::Memory { .. } => {
                // SAFETY: guaranteed by the caller.
                unsafe { self.write_memory(p, rel) }
            }
            SimRecord::Sync { .. } => {
                // SAFETY: guaranteed by the caller.
                unsafe { self.write_sync(p, rel) }
            }
            SimRecord::GraphTrace { .. } => {
                // SAFETY: guaranteed by the caller.
                unsafe { self.write_graph_trace(p) }
            }
            SimRecord::Api { kind, cbid, start, end, thread, correlation, result } => {
                let r = c::CUpti_ActivityAPI {
                    kind,
                    cbid,
                    start,
                    end,
                    processId: std::process::id(),
                    threadId: thread,
                    correlationId: correlation,
                    returnValue: result,
                };
                // SAFETY: guaranteed by the caller; unaligned writes are fine.
                unsafe { (p as *mut c::CUpti_ActivityAPI).write_unaligned(r) };
            }
        }
    }

    /// A memory record (an allocation or a release), in the release's layout.
    ///
    /// # Safety
    /// As [`SimRecord::write`], at `p`.
    unsafe fn write_memory(&self, p: *mut u8, rel: &Release) {
        let SimRecord::Memory {
            release: is_release,
            timestamp,
            device,
            stream,
            correlation,
            address,
            bytes,
            memory_kind,
            is_async,
        } = *self
        else {
            return;
        };
        macro_rules! mem {
            ($t:ty) => {{
                // SAFETY: all-zero bytes are a valid value of this plain C struct.
                let mut r: $t = unsafe { std::mem::zeroed() };
                r.kind = c::CUPTI_ACTIVITY_KIND_MEMORY2;
                r.memoryOperationType = if is_release {
                    c::CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
                } else {
                    c::CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                };
                r.memoryKind = memory_kind;
                r.correlationId = correlation;
                r.address = address;
                r.bytes = bytes;
                r.timestamp = timestamp;
                r.processId = std::process::id();
                r.deviceId = device;
                r.contextId = device + 1;
                r.streamId = stream;
                r.isAsync = is_async as u32;
                // SAFETY: the caller checked the record fits at this offset.
                unsafe { (p as *mut $t).write_unaligned(r) };
            }};
        }
        match rel.memory {
            release::Memory::V3 => mem!(c12::CUpti_ActivityMemory3),
            release::Memory::V4 => mem!(c::CUpti_ActivityMemory4),
        }
    }

    /// A synchronisation record, in the release's layout.
    ///
    /// # Safety
    /// As [`SimRecord::write`], at `p`.
    unsafe fn write_sync(&self, p: *mut u8, rel: &Release) {
        let SimRecord::Sync { start, end, kind, stream, correlation, event } = *self else { return };
        macro_rules! y {
            ($t:ty) => {{
                // SAFETY: all-zero bytes are a valid value of this plain C struct.
                let mut r: $t = unsafe { std::mem::zeroed() };
                r.kind = c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
                r.type_ = kind;
                r.start = start;
                r.end = end;
                r.correlationId = correlation;
                r.contextId = 1;
                r.streamId = stream;
                r.cudaEventId = event;
                // SAFETY: the caller checked the record fits at this offset.
                unsafe { (p as *mut $t).write_unaligned(r) };
            }};
        }
        match rel.sync {
            release::Sync::V1 => y!(c12::CUpti_ActivitySynchronization),
            release::Sync::V2 => y!(c::CUpti_ActivitySynchronization2),
        }
    }

    /// A graph-level record (one per graph launch).
    ///
    /// # Safety
    /// As [`SimRecord::write`], at `p`.
    unsafe fn write_graph_trace(&self, p: *mut u8) {
        let SimRecord::GraphTrace { start, end, device, stream, correlation, graph_id } = *self else { return };
        let r = c::CUpti_ActivityGraphTrace2 {
            kind: c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
            correlationId: correlation,
            start,
            end,
            deviceId: device,
            graphId: graph_id,
            contextId: device + 1,
            streamId: stream,
            endDeviceId: device,
            endContextId: device + 1,
            ..Default::default()
        };
        // SAFETY: the caller checked the record fits at this offset.
        unsafe { (p as *mut c::CUpti_ActivityGraphTrace2).write_unaligned(r) };
    }
}
