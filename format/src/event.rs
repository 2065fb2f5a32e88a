//! The fixed-size event record written by the agent's hot path.
//!
//! Every observation (an API call, a kernel, a copy, an NVTX push...) becomes one 64-byte [`RawEvent`]. Fields
//! whose meaning depends on the kind are documented on [`EventKind`] and decoded in one place, [`crate::view`]:
//! readers call `e.as_copy()`, `e.as_api()`... and writers `set_copy`, `set_api`..., never the raw fields. Names
//! are ids into the process's string region (see [`crate::segment`]), never pointers.

use bytemuck::{Pod, Zeroable};

/// What a [`RawEvent`] records. The comment on each variant says how the generic fields are used.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// A CUDA runtime (`sub` = 1) or driver (`sub` = 2) API call on host thread `tid`, `start`..`end` in CUPTI
    /// time. `name` = the callback name, `correlation` = CUPTI correlation id, `a` = callback id, `b` = the
    /// call's return code, `c` = the operator's External id (imports; 0 none).
    Api = 1,
    /// A kernel on `device`/`stream`. `name` = kernel name, `a` = grid x | grid y << 32, `b` = grid z | block x
    /// << 16 | block y << 32 | block z << 48, `c` = registers | static shared memory << 16 | dynamic shared
    /// memory << 40 (see [`LaunchConfig`]).
    Kernel = 2,
    /// A memcpy on `device`/`stream`. `sub` = CUPTI memcpy kind (1 HtoD, 2 DtoH, ... 8 DtoD, 10 PtoP), `a` =
    /// bytes, `b` = source memory kind | destination memory kind << 8 (CUPTI memory kinds: 1 pageable, 2
    /// pinned, 3 device, ...), `flags` bit 0 = asynchronous.
    Memcpy = 3,
    /// A memset on `device`/`stream`. `a` = bytes, `b` = value, `sub` = CUPTI memory kind, `flags` bit 0 =
    /// asynchronous.
    Memset = 4,
    /// An allocation seen by an API callback at time `start`. `sub` = [`MemKind`], `a` = address, `b` = bytes.
    Alloc = 5,
    /// A free seen by an API callback at time `start`. `sub` = [`MemKind`], `a` = address.
    Free = 6,
    /// A CUPTI synchronization activity: `sub` = CUPTI synchronization type (1 event sync, 2 stream wait
    /// event, 3 stream sync, 4 context/device sync), `stream`, `a` = CUDA event handle, `start`..`end`.
    Sync = 7,
    /// `nvtxRangePush*` at `start`: `name` = message, `c` = domain (string id, 0 = default domain). Push, start
    /// and mark events carry the NVTX payload, if any: `sub` = NVTX payload type (1 u64, 2 i64, 3 double, 4 u32,
    /// 5 i32, 6 float; 0 none), `device` | `stream` << 32 = its 64 bits; and `b` = category | ARGB color << 32.
    NvtxPush = 8,
    /// `nvtxRangePop` at `start`: `c` = domain.
    NvtxPop = 9,
    /// `nvtxRangeStart*` at `start`: `a` = range id, `name` = message, `c` = domain.
    NvtxStart = 10,
    /// `nvtxRangeEnd` at `start`: `a` = range id, `c` = domain.
    NvtxEnd = 11,
    /// `nvtxMark*` at `start`: `name` = message, `c` = domain.
    NvtxMark = 12,
    /// `nvtxNameOsThread*`: `a` = OS thread id, `name` = its name, `c` = domain.
    ThreadName = 13,
    /// CUPTI overhead activity: `sub` = CUPTI overhead kind, `start`..`end`.
    Overhead = 14,
    /// A clock pair: `start` = CUPTI timestamp, `end` = CLOCK_MONOTONIC ns, `a` = CLOCK_REALTIME ns.
    ClockSync = 15,
    /// CUPTI MEMORY2 activity: `sub` = operation (1 allocation, 2 release), `a` = address, `b` = bytes, `c` =
    /// CUPTI memory kind, at `start`.
    MemoryActivity = 16,
    /// A device: `device` = ordinal, `name` = device name, `a` = global memory bytes, `b` = major << 8 | minor,
    /// `c` = multiprocessor count, `stream` = the CUDA driver's version (`cuDriverGetVersion`, e.g. 13000; 0
    /// unknown).
    Device = 17,
    /// A complete range known by its start and end (imported annotations, operators): `name`, `c` = domain or
    /// category (string id), `start`..`end` on thread `tid`; with [`FLAG_DEVICE`] it lies on `device`/`stream`.
    /// A host range's `a` = its External id, `b` = argument text (string id) | (sequence number + 1) << 32.
    Range = 18,
    /// `nvtxNameCategory*` / `nvtxDomainNameCategory*`: `a` = category id, `name` = its name, `c` = domain.
    NvtxCategory = 19,
    /// The kernel, memcpy or memset recorded just before it on the same ring ran as a node of a CUDA graph: `a` =
    /// CUPTI graphId, `b` = graphNodeId, `correlation` = the graph launch's, `start`..`end` = the op's, `sub` = the
    /// op's [`EventKind`] (0 in traces written before copies and memsets had node events: a kernel).
    GraphNode = 20,
    /// One frame of the Python stack of the thread that made API call `correlation` (same `tid`, `start` = the
    /// call's start): `device` = depth (0 innermost), `name` = function (qualified name where the interpreter
    /// has one), `c` = file (string ids), `a` = line (0 unknown), `sub`: [`PYFRAME_TRUNCATED`] on the last frame
    /// written when deeper frames were left out, [`PYFRAME_OF_MAIN_THREAD`] on every frame of a stack borrowed
    /// from the main thread (the calling thread ran no Python); `b` on the innermost frame = ns the agent took
    /// to read the stack (0 from agents before 2026-11-27).
    PyFrame = 21,
    /// One sample of the device's counters (CUPTI PM sampling) over `start`..`end` on `device`: `a` = SM active
    /// | tensor pipes active << 16 | DRAM read throughput << 32 | DRAM write throughput << 48, `c` = graphics
    /// engine active, each a fraction of its peak in 1/10000 ([`GPU_RATIO_ABSENT`] where the set lacks it); `b` =
    /// PCIe bytes read | written << 32 (saturating), present when `sub` has [`GPU_SAMPLE_PCIE`]. Read it through
    /// `as_gpu_sample`.
    GpuSample = 22,
    /// `record --sample 1/N`: the agent recorded step `a` (its index from 0, counted from the run's first step)
    /// whole, `start`..`end`, one step chosen at random in each block of `b` = N; with `sub` =
    /// [`SAMPLED_SLICE`], time slice `a` instead (a program that had marked no step yet is sampled in one-second
    /// slices). Outside such spans only step ranges are in the trace. Read it through `as_sampled`.
    Sampled = 23,
}

impl EventKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        use EventKind::*;
        Some(match v {
            1 => Api,
            2 => Kernel,
            3 => Memcpy,
            4 => Memset,
            5 => Alloc,
            6 => Free,
            7 => Sync,
            8 => NvtxPush,
            9 => NvtxPop,
            10 => NvtxStart,
            11 => NvtxEnd,
            12 => NvtxMark,
            13 => ThreadName,
            14 => Overhead,
            15 => ClockSync,
            16 => MemoryActivity,
            17 => Device,
            18 => Range,
            19 => NvtxCategory,
            20 => GraphNode,
            21 => PyFrame,
            22 => GpuSample,
            23 => Sampled,
            _ => return None,
        })
    }
}

/// Kind of memory an [`EventKind::Alloc`] / [`EventKind::Free`] refers to.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// `cudaMalloc`, `cuMemAlloc`.
    Device = 1,
    /// `cudaMallocHost`, `cudaHostAlloc`, `cuMemAllocHost`.
    PinnedHost = 2,
    /// `cudaMallocManaged`.
    Managed = 3,
    /// Stream-ordered `cudaMallocAsync` / `cudaFreeAsync`.
    DeviceAsync = 4,
}

impl MemKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => MemKind::Device,
            2 => MemKind::PinnedHost,
            3 => MemKind::Managed,
            4 => MemKind::DeviceAsync,
            _ => return None,
        })
    }
    /// True for memory that lives on the device.
    pub fn is_device(self) -> bool {
        matches!(self, MemKind::Device | MemKind::DeviceAsync | MemKind::Managed)
    }
}

/// `sub` of an [`EventKind::Api`] event.
/// [`EventKind::PyFrame`] `sub` bits.
pub const PYFRAME_TRUNCATED: u8 = 1;
pub const PYFRAME_OF_MAIN_THREAD: u8 = 2;
/// Taken at import from the trace's own Python ranges (torch.profiler's `python_function` events), which exports
/// write as they were: the frames are for the analyses, not to be exported again. They start 1 ns before their
/// call (so that they sort before it wherever the import stored its events) and carry no read time.
pub const PYFRAME_IMPORTED: u8 = 4;

/// [`EventKind::Sampled`] `sub`: the span is a time slice, not a step.
pub const SAMPLED_SLICE: u8 = 1;

/// [`EventKind::GpuSample`]: a ratio the sample does not carry.
pub const GPU_RATIO_ABSENT: u16 = u16::MAX;
/// [`EventKind::GpuSample`] `sub` bit: `b` holds PCIe bytes.
pub const GPU_SAMPLE_PCIE: u8 = 1;

pub const API_RUNTIME: u8 = 1;
/// `sub` of an [`EventKind::Api`] event.
pub const API_DRIVER: u8 = 2;
/// `flags` bit of a memcpy/memset: issued with an `*Async` call.
pub const FLAG_ASYNC: u16 = 1;
/// `flags` bit of a [`EventKind::Range`]: the range lies on a device stream, not a host thread.
pub const FLAG_DEVICE: u16 = 2;
/// On an [`EventKind::NvtxMark`]: a trace-wide instant (Kineto's `"s":"g"`, such as "Iteration Start"), tied to
/// no thread; it is kept with the main process.
pub const FLAG_GLOBAL: u16 = 4;

/// One observation. 64 bytes, one cache line, no padding, so it can be copied as bytes into a ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RawEvent {
    pub kind: u8,
    pub sub: u8,
    pub flags: u16,
    /// System thread id of the host thread (0 for device-side events).
    pub tid: u32,
    pub start: u64,
    pub end: u64,
    pub correlation: u32,
    /// String id (see [`crate::segment`]); 0 = none.
    pub name: u32,
    pub device: u32,
    pub stream: u32,
    pub a: u64,
    pub b: u64,
    pub c: u64,
}

const _: () = assert!(std::mem::size_of::<RawEvent>() == 64);

impl RawEvent {
    pub fn new(kind: EventKind, tid: u32, start: u64, end: u64) -> Self {
        RawEvent { kind: kind as u8, tid, start, end, ..Default::default() }
    }
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::from_u8(self.kind)
    }

    /// A memcpy's (source, destination) CUPTI memory kinds (1 pageable, 2 pinned, 3 device, ...): `b`'s low bytes.
    #[inline]
    pub fn copy_memory_kinds(&self) -> (u8, u8) {
        (self.b as u8, (self.b >> 8) as u8)
    }

    /// A device's (major, minor) compute capability (`b` = major << 8 | minor).
    #[inline]
    pub fn compute_capability(&self) -> (u32, u32) {
        ((self.b >> 8) as u32, (self.b & 0xff) as u32)
    }

    /// Work the GPU did: a kernel, a copy or a memset (HTA's GPU ops; what occupies a stream).
    #[inline]
    pub fn is_gpu_work(&self) -> bool {
        matches!(self.kind(), Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset))
    }
    pub fn duration(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// A kernel's launch configuration, packed into `a`, `b`, `c` of an [`EventKind::Kernel`] event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub registers: u16,
    pub static_shared: u32,
    pub dynamic_shared: u32,
}

impl LaunchConfig {
    /// Packs into (a, b, c). Grid y/z and block dimensions fit 16 bits (CUDA limits: 65535 and 1024); shared
    /// memory sizes are clamped to 24 bits (16 MiB, far above any GPU's per-block limit).
    pub fn pack(&self) -> (u64, u64, u64) {
        let a = self.grid[0] as u64 | (self.grid[1] as u64) << 32;
        let b = (self.grid[2] as u64 & 0xffff)
            | (self.block[0] as u64 & 0xffff) << 16
            | (self.block[1] as u64 & 0xffff) << 32
            | (self.block[2] as u64 & 0xffff) << 48;
        let c = self.registers as u64
            | (self.static_shared.min(0xff_ffff) as u64) << 16
            | (self.dynamic_shared.min(0xff_ffff) as u64) << 40;
        (a, b, c)
    }
    pub fn unpack(a: u64, b: u64, c: u64) -> Self {
        LaunchConfig {
            grid: [a as u32, (a >> 32) as u32, (b & 0xffff) as u32],
            block: [(b >> 16 & 0xffff) as u32, (b >> 32 & 0xffff) as u32, (b >> 48) as u32],
            registers: c as u16,
            static_shared: (c >> 16 & 0xff_ffff) as u32,
            dynamic_shared: (c >> 40 & 0xff_ffff) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_config_round_trips_at_cuda_limits() {
        let cfg = LaunchConfig {
            grid: [0x7fff_ffff, 65535, 65535],
            block: [1024, 1024, 64],
            registers: 255,
            static_shared: 48 * 1024,
            dynamic_shared: 227 * 1024,
        };
        let (a, b, c) = cfg.pack();
        assert_eq!(LaunchConfig::unpack(a, b, c), cfg);
    }

    #[test]
    fn every_kind_round_trips_through_u8() {
        for v in 0..=255u8 {
            if let Some(k) = EventKind::from_u8(v) {
                assert_eq!(k as u8, v);
            }
        }
        assert_eq!(EventKind::from_u8(0), None);
    }
}
