//! The writers' side of [`super`]'s layout: each setter makes the event that kind and writes the kind's own fields,
//! leaving the common ones (thread, times, correlation, name, device, stream) as they were; the constructors make
//! a whole event of one kind. Beside the readers' side in `view.rs`, one layout in two files.

use super::*;

impl RawEvent {
    #[inline]
    pub fn set_api(&mut self, call: ApiCall) {
        self.kind = EventKind::Api as u8;
        self.sub = if call.runtime { API_RUNTIME } else { API_DRIVER };
        (self.a, self.b, self.c) = (call.cbid as u64, call.result, call.external);
    }
    #[inline]
    pub fn set_launch_config(&mut self, config: &LaunchConfig) {
        self.kind = EventKind::Kernel as u8;
        (self.a, self.b, self.c) = config.pack();
    }
    #[inline]
    pub fn set_copy(&mut self, copy: Memcpy) {
        self.kind = EventKind::Memcpy as u8;
        self.sub = copy.kind.0;
        self.a = copy.bytes;
        self.b = copy.src.0 as u64 | (copy.dst.0 as u64) << 8;
        self.flags = if copy.is_async { self.flags | FLAG_ASYNC } else { self.flags & !FLAG_ASYNC };
    }
    #[inline]
    pub fn set_memset(&mut self, memset: Memset) {
        self.kind = EventKind::Memset as u8;
        (self.sub, self.a, self.b) = (memset.memory.0, memset.bytes, memset.value);
        self.flags = if memset.is_async { self.flags | FLAG_ASYNC } else { self.flags & !FLAG_ASYNC };
    }
    /// An allocation or a free (`kind`), of `op.memory` (an unknown kind is written as 0).
    #[inline]
    pub fn set_mem_op(&mut self, kind: EventKind, op: MemOp) {
        debug_assert!(matches!(kind, EventKind::Alloc | EventKind::Free));
        self.kind = kind as u8;
        (self.sub, self.a, self.b) = (op.memory.map_or(0, |m| m as u8), op.address, op.bytes);
    }
    #[inline]
    pub fn set_sync(&mut self, sync: SyncRecord) {
        self.kind = EventKind::Sync as u8;
        (self.sub, self.a) = (sync.kind, sync.event);
    }
    #[inline]
    pub fn set_device(&mut self, d: DeviceInfo) {
        self.kind = EventKind::Device as u8;
        self.a = d.memory_bytes;
        self.b = (d.compute_capability.0 as u64) << 8 | d.compute_capability.1 as u64;
        self.c = d.multiprocessors;
        self.stream = d.driver_version;
    }
    #[inline]
    pub fn set_named_thread(&mut self, os_tid: u64) {
        self.kind = EventKind::ThreadName as u8;
        self.a = os_tid;
    }
    /// An imported range (operator text and sequence only for host ranges).
    #[inline]
    pub fn set_range(&mut self, r: RangeRecord) {
        self.kind = EventKind::Range as u8;
        self.c = r.category as u64;
        self.a = r.external;
        self.b = r.operator_text as u64 | r.sequence_plus_one << 32;
        self.flags = if r.on_device { self.flags | FLAG_DEVICE } else { self.flags & !FLAG_DEVICE };
    }
    /// An NVTX event of `kind` (push, pop, start, end, mark, category).
    #[inline]
    pub fn set_nvtx(&mut self, kind: EventKind, n: Nvtx) {
        self.kind = kind as u8;
        (self.c, self.a) = (n.domain, n.id);
        self.b = n.category as u64 | (n.color as u64) << 32;
        self.flags = if n.global { self.flags | FLAG_GLOBAL } else { self.flags & !FLAG_GLOBAL };
        self.sub = n.payload_type;
        if n.payload_type != 0 {
            (self.device, self.stream) = (n.payload_bits as u32, (n.payload_bits >> 32) as u32);
        }
    }
    #[inline]
    pub fn set_memory_activity(&mut self, m: MemoryActivity) {
        self.kind = EventKind::MemoryActivity as u8;
        (self.sub, self.a, self.b, self.c) = (m.operation, m.address, m.bytes, m.memory.0 as u64);
    }
    #[inline]
    pub fn set_overhead(&mut self, o: Overhead) {
        self.kind = EventKind::Overhead as u8;
        self.sub = o.kind;
    }
    #[inline]
    pub fn set_graph_node(&mut self, node: GraphNode) {
        self.kind = EventKind::GraphNode as u8;
        (self.a, self.b) = (node.graph_id, node.node_id);
    }
    /// Says what ran as the node (see [`RawEvent::graph_node_op`]).
    pub fn set_graph_node_op(&mut self, op: EventKind) {
        self.sub = op as u8;
    }
    #[inline]
    pub fn set_py_frame(&mut self, f: PyFrameRecord) {
        self.kind = EventKind::PyFrame as u8;
        self.device = f.depth;
        (self.c, self.a, self.b) = (f.file as u64, f.line as u64, f.read_ns);
        self.sub = (f.truncated as u8 * PYFRAME_TRUNCATED)
            | (f.of_main_thread as u8 * PYFRAME_OF_MAIN_THREAD)
            | (f.imported as u8 * PYFRAME_IMPORTED);
    }
    pub fn set_gpu_sample(&mut self, s: GpuSample) {
        self.kind = EventKind::GpuSample as u8;
        self.a = pack_ratio(s.sm_active)
            | pack_ratio(s.tensor_active) << 16
            | pack_ratio(s.dram_read) << 32
            | pack_ratio(s.dram_write) << 48;
        self.c = pack_ratio(s.gpu_active);
        let (read, written) = s.pcie_bytes.unwrap_or((0, 0));
        self.b = read.min(u32::MAX as u64) | written.min(u32::MAX as u64) << 32;
        self.sub = if s.pcie_bytes.is_some() { GPU_SAMPLE_PCIE } else { 0 };
    }
    /// A sample of device `device`'s counters over `start`..`end`.
    /// An [`EventKind::Sampled`] span: step `index` of the run recorded whole, one in `one_in`.
    pub fn sampled(start: u64, end: u64, index: u64, one_in: u64) -> RawEvent {
        let mut e = RawEvent::new(EventKind::Sampled, 0, start, end);
        (e.a, e.b) = (index, one_in);
        e
    }

    /// An [`EventKind::Sampled`] time slice: slice `index` of the run (before its first step), one in `one_in`.
    pub fn sampled_slice(start: u64, end: u64, index: u64, one_in: u64) -> RawEvent {
        let mut e = RawEvent::sampled(start, end, index, one_in);
        e.sub = SAMPLED_SLICE;
        e
    }

    pub fn gpu_sample(device: u32, start: u64, end: u64, s: GpuSample) -> RawEvent {
        let mut e = RawEvent::new(EventKind::GpuSample, 0, start, end);
        e.device = device;
        e.set_gpu_sample(s);
        e
    }
    #[inline]
    pub fn set_clock_pair(&mut self, pair: ClockPair) {
        self.kind = EventKind::ClockSync as u8;
        (self.start, self.end, self.a) = (pair.cupti_ns, pair.monotonic_ns, pair.realtime_ns);
    }

    /// An API call on thread `tid`.
    pub fn api_call(tid: u32, start: u64, end: u64, call: ApiCall) -> RawEvent {
        let mut e = RawEvent::new(EventKind::Api, tid, start, end);
        e.set_api(call);
        e
    }
    /// A memcpy with its correlation id (set `device` and `stream` after).
    #[allow(clippy::too_many_arguments)]
    pub fn copy(
        start: u64,
        end: u64,
        correlation: u32,
        kind: CopyKind,
        src: MemoryKind,
        dst: MemoryKind,
        bytes: u64,
        is_async: bool,
    ) -> RawEvent {
        let mut e = RawEvent::new(EventKind::Memcpy, 0, start, end);
        e.correlation = correlation;
        e.set_copy(Memcpy { kind, src, dst, bytes, is_async });
        e
    }
    /// An allocation (`free`: false) or free of `bytes` at `address`, seen at `at` on thread `tid`.
    pub fn mem_op(free: bool, tid: u32, at: u64, memory: MemKind, address: u64, bytes: u64) -> RawEvent {
        let kind = if free { EventKind::Free } else { EventKind::Alloc };
        let mut e = RawEvent::new(kind, tid, at, at);
        e.set_mem_op(kind, MemOp { memory: Some(memory), address, bytes });
        e
    }
    /// An NVTX event of `kind` (push, pop, start, end, mark, category) on thread `tid`.
    pub fn nvtx(kind: EventKind, tid: u32, start: u64, end: u64, n: Nvtx) -> RawEvent {
        let mut e = RawEvent::new(kind, tid, start, end);
        e.set_nvtx(kind, n);
        e
    }
    /// A Python frame read on thread `tid` at `at` (its function's name and its call's correlation set after).
    pub fn py_frame(tid: u32, at: u64, f: PyFrameRecord) -> RawEvent {
        let mut e = RawEvent::new(EventKind::PyFrame, tid, at, at);
        e.set_py_frame(f);
        e
    }
    /// A clock pair.
    pub fn clock_pair(pair: ClockPair) -> RawEvent {
        let mut e = RawEvent::default();
        e.set_clock_pair(pair);
        e
    }
}
