//! CUPTI activity records: decoding, and delivery to the rings (buffers come from `activity_buffers`).
//!
//! **Layouts.** Record layouts only ever append fields: every field read here sits at the same offset in every
//! version from the oldest layout that holds it to the newest (checked in the tests below for Kernel5..13,
//! Memcpy4..7, Memset3..5, Memory2..4, Synchronization 1..2, Overhead 1..3). A record is decoded through that
//! oldest layout when it is at least that long, so CUDA 12.0's Memcpy5, 12.8's Synchronization2, 13.5's
//! Kernel13 and a future 13.x whose kernel record grows all decode. Shorter records are skipped and counted per
//! class, and so are records with zero or unfinished timestamps (forced flushes deliver those).
//!
//! CUPTI hands over thousands of records at once, on its own thread (or the flushing one). They go to a ring
//! reserved for delivery (see `rings::SharedRings`), which no application thread can hold. That is the one place
//! where the agent sleeps: when that ring is nearly full it gives the collector time to drain, instead of
//! dropping a burst that the collector would have absorbed; it waits only while the collector's drain heartbeat
//! is fresh, so a dead or stopped collector never slows the program. API threads never sleep: with a full ring
//! they yield their core for at most 2 ms (see `thread_rings::wait_for_room`).

use crate::name_cache::BufferNames;
use crate::{cupti, state, thread_rings};
use cuflight_format::event::LaunchConfig;
use cuflight_format::segment::record_class as class;
use cuflight_format::view::{CopyKind, GraphNode, Memcpy, MemoryActivity, MemoryKind, Memset, Overhead, SyncRecord};
use cuflight_format::{EventKind, RawEvent};
use cupti_sys::cuda13 as c;
use std::mem::size_of;
use std::sync::atomic::Ordering;

/// The same for one subscriber in multi-subscriber mode (`CUpti_BuffersCallbackCompleteFunc_v2`, which names no
/// context: dropped records are read for the subscriber as a whole).
///
/// # Safety
/// Called by CUPTI with a buffer from `buffer_requested_v2` holding `valid` bytes of records.
pub unsafe extern "C" fn buffer_completed_v2(
    buffer: *mut u8,
    size: usize,
    valid: usize,
    _info: *mut c::CUpti_BufferCallbackCompleteInfo,
) {
    // SAFETY: forwarded from CUPTI.
    unsafe { buffer_completed(std::ptr::null_mut(), 0, buffer, size, valid) }
}

/// # Safety
/// Called by CUPTI with a buffer from `buffer_requested` holding `valid` bytes of records.
pub unsafe extern "C" fn buffer_completed(ctx: c::CUcontext, stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    let _ = std::panic::catch_unwind(|| {
        let _in_flight = cupti::InFlight::begin();
        if let Some(l) = cupti::loaded() {
            drain(buffer, valid, l);
            cupti::collect_dropped(l, ctx, stream);
        }
        crate::activity_buffers::give_back(buffer);
    });
}

fn drain(buffer: *mut u8, valid: usize, l: &cupti::Loaded) {
    if buffer.is_null() {
        return;
    }
    let mut cursor: *mut c::CUpti_Activity = std::ptr::null_mut();
    let mut prev: Option<usize> = None;
    let mut unused = Unused::default();
    let end = buffer as usize + valid;
    let mut n = 0u32;
    let mut room = Room::default();
    let mut names = crate::name_cache::BufferNames::new();
    let mut out = thread_rings::delivery();
    let v2 = cupti::activity_v2();
    // Look at the ring often enough that a small ring cannot fill between two looks.
    let every = out.space().map_or(256, |(_, cap)| (cap / 4).clamp(16, 256) as u32);
    loop {
        n = n.wrapping_add(1);
        if n.is_multiple_of(every) {
            room.make(&out);
        }
        // CUPTI walks its own buffer; `cursor` is null or the record it returned last.
        let r = match v2 {
            // SAFETY: as said, through the v2 entry point for our subscriber.
            Some((v2, sub)) => unsafe { (v2.get_next_record)(sub, buffer, valid, &mut cursor) },
            // SAFETY: as said.
            None => unsafe { (l.api.activity_get_next_record)(buffer, valid, &mut cursor) },
        };
        if r != c::CUPTI_SUCCESS {
            break;
        }
        if let Some(p) = prev {
            handle(p, cursor as usize - p, &mut unused, &mut names, &mut out);
        }
        prev = Some(cursor as usize);
    }
    if let Some(p) = prev {
        handle(p, end.saturating_sub(p), &mut unused, &mut names, &mut out);
        // Completed GPU work: what a flight recorder's hang watch waits for.
        crate::flight::progress();
    }
    unused.publish();
}

/// Per-class counts of records not turned into events, published once per buffer.
#[derive(Default)]
struct Unused {
    skipped: [u64; class::COUNT],
    incomplete: [u64; class::COUNT],
}

impl Unused {
    fn publish(&self) {
        if self.skipped.iter().chain(&self.incomplete).all(|&n| n == 0) {
            return;
        }
        let Some(seg) = state::segment() else { return };
        let h = seg.header();
        for i in 0..class::COUNT {
            if self.skipped[i] > 0 {
                h.skipped_by_class[i].fetch_add(self.skipped[i], Ordering::Relaxed);
                h.records_skipped.fetch_add(self.skipped[i], Ordering::Relaxed);
            }
            if self.incomplete[i] > 0 {
                h.incomplete_by_class[i].fetch_add(self.incomplete[i], Ordering::Relaxed);
            }
        }
    }
}

const WAIT_STEP: std::time::Duration = std::time::Duration::from_millis(1);
/// Longest wait for one buffer: a second. A collector that is alive but starved of CPU (a debug build, the
/// test suite in parallel on two cores) drained a 2,000-record buffer more slowly than 200 ms once in a while and
/// the rest of the burst was counted as lost; the wait is on CUPTI's thread (or a flush), never an API call.
const MAX_WAIT_STEPS: u32 = 1000;

/// Backpressure for bursts on the delivery thread.
#[derive(Default)]
struct Room {
    waited: u32,
}

impl Room {
    /// While the ring records go to has fewer than 1024 free slots (half of a smaller ring), sleep in 1 ms steps
    /// so the collector can drain it (the ring's watermark has woken it): at most 1000 steps per buffer, and only
    /// while the collector is draining (its heartbeat in the segment is under a second old, and 0 once it
    /// stopped), never for a ring nobody drains.
    fn make(&mut self, out: &thread_rings::Delivery) {
        let Some((space, capacity)) = out.space() else { return };
        let want = 1024.min(capacity / 2);
        if space >= want {
            return;
        }
        let Some(seg) = state::segment() else { return };
        let start = crate::clock::monotonic_ns();
        let mut slept = false;
        while self.waited < MAX_WAIT_STEPS
            && thread_rings::collector_draining(seg)
            && out.space().is_some_and(|(free, _)| free < want)
        {
            std::thread::sleep(WAIT_STEP);
            self.waited += 1;
            slept = true;
        }
        if slept {
            let held = crate::clock::monotonic_ns().saturating_sub(start);
            seg.header().delivery_held_ns.fetch_add(held, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Decodes and emits one record, counting it when it cannot be used.
fn handle(at: usize, size: usize, unused: &mut Unused, names: &mut BufferNames, out: &mut thread_rings::Delivery) {
    // SAFETY: `at` points at a record inside the buffer CUPTI handed us, `size` bytes long.
    let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, size) };
    let decoded = decode(bytes, names);
    if matches!(decoded, Decoded::GraphOp(..)) {
        // Graph replays seen by their records too: a window whose callbacks missed the launches (sampling).
        crate::teardown::saw_graphs();
    }
    match decoded {
        // Sampling (`record --sample`): device work of calls made outside the recorded steps is not kept.
        Decoded::Event(ev) | Decoded::GraphOp(ev, _) if !crate::sampler::keeps_device_work(&ev) => {}
        Decoded::Event(ev) => out.push(ev),
        Decoded::GraphOp(op, node) => {
            out.push(op);
            out.push(node);
        }
        Decoded::Ignored => {}
        Decoded::Skipped(k) => unused.skipped[k] += 1,
        Decoded::Incomplete(k) => unused.incomplete[k] += 1,
    }
}

/// What a record became.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    Event(RawEvent),
    /// A kernel, copy or memset run as a CUDA graph node, and its [`EventKind::GraphNode`] event.
    GraphOp(RawEvent, RawEvent),
    /// A kind we did not ask for (harmless).
    Ignored,
    /// Too short for the oldest layout holding the fields we read: not read (record class).
    Skipped(usize),
    /// Zero or unfinished timestamps (record class): kept out of the trace, counted.
    Incomplete(usize),
}

/// Reads the first `size_of::<T>()` bytes of `bytes` as a `T` if the record is at least that long: `T` is the
/// oldest layout that holds every field read, and later layouts only append.
fn prefix<T: Copy>(bytes: &[u8]) -> Option<T> {
    (bytes.len() >= size_of::<T>()).then(|| {
        // SAFETY: the slice holds at least size_of::<T>() bytes; T is a plain C struct; unaligned read is fine.
        unsafe { (bytes.as_ptr() as *const T).read_unaligned() }
    })
}

/// Whether a device interval is usable: CUPTI writes 0 for both when it could not collect them, and a forced
/// flush hands over records still being written (end 0, or before start).
fn finished(start: u64, end: u64) -> bool {
    start != 0 && end != 0 && end >= start
}

/// The activity class a record kind is counted under.
pub fn class_of(kind: c::CUpti_ActivityKind) -> usize {
    match kind {
        c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
        | c::CUPTI_ACTIVITY_KIND_KERNEL
        | c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE => class::KERNEL,
        c::CUPTI_ACTIVITY_KIND_MEMCPY => class::MEMCPY,
        c::CUPTI_ACTIVITY_KIND_MEMSET => class::MEMSET,
        c::CUPTI_ACTIVITY_KIND_MEMORY2 => class::MEMORY,
        c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => class::SYNC,
        c::CUPTI_ACTIVITY_KIND_OVERHEAD => class::OVERHEAD,
        _ => class::OTHER,
    }
}

/// The shortest record of `kind` the decoder accepts (the oldest layout holding the fields read).
pub fn min_size(kind: c::CUpti_ActivityKind) -> Option<usize> {
    Some(match kind {
        c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | c::CUPTI_ACTIVITY_KIND_KERNEL => {
            size_of::<c::CUpti_ActivityKernel5>()
        }
        c::CUPTI_ACTIVITY_KIND_MEMCPY => size_of::<c::CUpti_ActivityMemcpy4>(),
        c::CUPTI_ACTIVITY_KIND_MEMSET => size_of::<c::CUpti_ActivityMemset3>(),
        c::CUPTI_ACTIVITY_KIND_MEMORY2 => size_of::<c::CUpti_ActivityMemory2>(),
        c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => size_of::<c::CUpti_ActivitySynchronization>(),
        c::CUPTI_ACTIVITY_KIND_OVERHEAD => size_of::<c::CUpti_ActivityOverhead>(),
        c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE => size_of::<c::CUpti_ActivityGraphTrace2>(),
        c::CUPTI_ACTIVITY_KIND_RUNTIME | c::CUPTI_ACTIVITY_KIND_DRIVER => size_of::<c::CUpti_ActivityAPI>(),
        _ => return None,
    })
}

/// The [`EventKind::GraphNode`] event of `op` (a kernel, copy or memset event), when it ran as a node of graph
/// `graph_id` (CUPTI writes 0 for work not launched through a graph).
fn graph_node(op: &RawEvent, graph_id: u32, node_id: u64) -> Option<RawEvent> {
    (graph_id != 0).then(|| {
        let mut ev = RawEvent::new(EventKind::GraphNode, 0, op.start, op.end);
        (ev.device, ev.stream, ev.correlation) = (op.device, op.stream, op.correlation);
        ev.set_graph_node(GraphNode { graph_id: graph_id as u64, node_id });
        ev.set_graph_node_op(op.kind().unwrap_or(EventKind::Kernel));
        ev
    })
}

/// `op` alone, or with its graph node event.
fn maybe_graph_op(op: RawEvent, graph_id: u32, node_id: u64) -> Decoded {
    match graph_node(&op, graph_id, node_id) {
        Some(node) => Decoded::GraphOp(op, node),
        None => Decoded::Event(op),
    }
}

fn kernel(r: c::CUpti_ActivityKernel5, names: &mut BufferNames) -> RawEvent {
    let mut ev = RawEvent::new(EventKind::Kernel, 0, r.start, r.end);
    ev.device = r.deviceId;
    ev.stream = r.streamId;
    ev.correlation = r.correlationId;
    // SAFETY: CUPTI's kernel name is NULL or a NUL-terminated string valid while the buffer is processed.
    ev.name = unsafe { names.id(r.name) };
    let cfg = LaunchConfig {
        grid: [r.gridX as u32, r.gridY as u32, r.gridZ as u32],
        block: [r.blockX as u32, r.blockY as u32, r.blockZ as u32],
        registers: r.registersPerThread,
        static_shared: r.staticSharedMemory as u32,
        dynamic_shared: r.dynamicSharedMemory as u32,
    };
    ev.set_launch_config(&cfg);
    ev
}

/// A graph launch traced at graph level (`--trace graphs`): its nodes have no records, so its execution is a
/// kernel event named [`cuflight_format::view::GRAPH_LEVEL_NAME`] on the launch's stream, followed by a [`EventKind::GraphNode`] event
/// whose node is [`cuflight_format::view::WHOLE_GRAPH`]. CUPTI writes INT_MAX as the device of a graph whose first
/// node runs on the host; such a launch is kept on device 0's clock domain with its stream.
fn graph_launch(r: c::CUpti_ActivityGraphTrace2, names: &mut BufferNames) -> Decoded {
    let mut ev = RawEvent::new(EventKind::Kernel, 0, r.start, r.end);
    ev.device = if r.deviceId == i32::MAX as u32 { r.endDeviceId } else { r.deviceId };
    ev.stream = r.streamId;
    ev.correlation = r.correlationId;
    // SAFETY: a NUL-terminated static string.
    ev.name = unsafe { names.id(cuflight_format::view::GRAPH_LEVEL_NAME.as_ptr()) };
    match graph_node(&ev, r.graphId, cuflight_format::view::WHOLE_GRAPH) {
        Some(node) => Decoded::GraphOp(ev, node),
        None => Decoded::Event(ev),
    }
}

fn memcpy(r: c::CUpti_ActivityMemcpy4) -> RawEvent {
    let mut ev = RawEvent::new(EventKind::Memcpy, 0, r.start, r.end);
    ev.device = r.deviceId;
    ev.stream = r.streamId;
    ev.correlation = r.correlationId;
    ev.set_copy(Memcpy {
        kind: CopyKind(r.copyKind),
        src: MemoryKind(r.srcKind),
        dst: MemoryKind(r.dstKind),
        bytes: r.bytes,
        // CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC (cupti_activity.h).
        is_async: r.flags & 1 != 0,
    });
    ev
}

fn memset(r: c::CUpti_ActivityMemset3) -> RawEvent {
    let mut ev = RawEvent::new(EventKind::Memset, 0, r.start, r.end);
    ev.device = r.deviceId;
    ev.stream = r.streamId;
    ev.correlation = r.correlationId;
    ev.set_memset(Memset {
        memory: MemoryKind(r.memoryKind as u8),
        bytes: r.bytes,
        value: r.value as u64,
        // CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC (cupti_activity.h).
        is_async: r.flags & 1 != 0,
    });
    ev
}

/// Decodes one activity record of any layout from CUDA 12.0 to 13.5 (and later ones that append); kernel names
/// through `names`, the names already resolved in this record's buffer.
pub fn decode(bytes: &[u8], names: &mut BufferNames) -> Decoded {
    let Some(&[k0, k1, k2, k3]) = bytes.get(..4) else {
        return Decoded::Skipped(class::OTHER);
    };
    let kind = u32::from_le_bytes([k0, k1, k2, k3]);
    let cls = class_of(kind);
    let ev = match kind {
        c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | c::CUPTI_ACTIVITY_KIND_KERNEL => {
            let Some(r) = prefix::<c::CUpti_ActivityKernel5>(bytes) else { return Decoded::Skipped(cls) };
            if !finished(r.start, r.end) {
                return Decoded::Incomplete(cls);
            }
            return maybe_graph_op(kernel(r, names), r.graphId, r.graphNodeId);
        }
        c::CUPTI_ACTIVITY_KIND_MEMCPY => match prefix::<c::CUpti_ActivityMemcpy4>(bytes) {
            Some(r) if finished(r.start, r.end) => return maybe_graph_op(memcpy(r), r.graphId, r.graphNodeId),
            r => r.map(memcpy),
        },
        c::CUPTI_ACTIVITY_KIND_MEMSET => match prefix::<c::CUpti_ActivityMemset3>(bytes) {
            Some(r) if finished(r.start, r.end) => return maybe_graph_op(memset(r), r.graphId, r.graphNodeId),
            r => r.map(memset),
        },
        c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE => {
            let Some(r) = prefix::<c::CUpti_ActivityGraphTrace2>(bytes) else { return Decoded::Skipped(cls) };
            if !finished(r.start, r.end) {
                return Decoded::Incomplete(cls);
            }
            return graph_launch(r, names);
        }
        c::CUPTI_ACTIVITY_KIND_MEMORY2 => prefix::<c::CUpti_ActivityMemory2>(bytes).map(|r| {
            let mut ev = RawEvent::new(EventKind::MemoryActivity, 0, r.timestamp, r.timestamp);
            ev.device = r.deviceId;
            ev.stream = r.streamId;
            ev.correlation = r.correlationId;
            ev.set_memory_activity(MemoryActivity {
                operation: r.memoryOperationType as u8,
                address: r.address,
                bytes: r.bytes,
                memory: MemoryKind(r.memoryKind as u8),
            });
            ev
        }),
        c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => prefix::<c::CUpti_ActivitySynchronization>(bytes).map(|r| {
            let mut ev = RawEvent::new(EventKind::Sync, 0, r.start, r.end);
            ev.stream = r.streamId;
            ev.correlation = r.correlationId;
            ev.set_sync(SyncRecord { kind: r.type_ as u8, event: r.cudaEventId as u64 });
            ev
        }),
        c::CUPTI_ACTIVITY_KIND_RUNTIME | c::CUPTI_ACTIVITY_KIND_DRIVER => {
            let Some(r) = prefix::<c::CUpti_ActivityAPI>(bytes) else { return Decoded::Skipped(cls) };
            return crate::api_records::event(&r).map_or(Decoded::Incomplete(cls), Decoded::Event);
        }
        c::CUPTI_ACTIVITY_KIND_OVERHEAD => prefix::<c::CUpti_ActivityOverhead>(bytes).map(|r| {
            let mut ev = RawEvent::new(EventKind::Overhead, 0, r.start, r.end);
            ev.set_overhead(Overhead { kind: r.overheadKind as u8 });
            ev
        }),
        _ => return Decoded::Ignored,
    };
    match ev {
        None => Decoded::Skipped(cls),
        Some(ev) if !finished(ev.start, ev.end) => Decoded::Incomplete(cls),
        Some(ev) => Decoded::Event(ev),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cupti_sys::cuda12 as c12;
    use std::mem::offset_of;

    fn bytes_of<T>(r: &T) -> Vec<u8> {
        let mut v = vec![0u8; size_of::<T>().next_multiple_of(8)];
        // SAFETY: copying a plain C struct into a large enough byte buffer.
        unsafe { std::ptr::copy_nonoverlapping(r as *const T as *const u8, v.as_mut_ptr(), size_of::<T>()) };
        v
    }

    /// The premise of prefix decoding: every field read sits at the same offset in every later layout.
    #[test]
    fn layouts_only_append_the_fields_we_read() {
        macro_rules! fields {
            ($base:ty, $t:ty, [$($f:ident),+]) => {$(
                assert_eq!(offset_of!($base, $f), offset_of!($t, $f), "{} {}", stringify!($t), stringify!($f));
            )+};
        }
        macro_rules! same {
            ($base:ty => $($t:ty),+ ; $fs:tt) => {$( fields!($base, $t, $fs); )+};
        }
        same!(c::CUpti_ActivityKernel5 => c::CUpti_ActivityKernel8, c12::CUpti_ActivityKernel9, c::CUpti_ActivityKernel10,
            c::CUpti_ActivityKernel11, c::CUpti_ActivityKernel12, c::CUpti_ActivityKernel13;
            [start, end, deviceId, streamId, correlationId, gridX, gridY, gridZ, blockX, blockY, blockZ,
            registersPerThread, staticSharedMemory, dynamicSharedMemory, name, graphId, graphNodeId]);
        same!(c::CUpti_ActivityMemcpy4 => c12::CUpti_ActivityMemcpy5, c12::CUpti_ActivityMemcpy6, c::CUpti_ActivityMemcpy7;
            [copyKind, srcKind, dstKind, flags, bytes, start, end, deviceId, streamId, correlationId, graphId, graphNodeId]);
        same!(c::CUpti_ActivityMemset3 => c12::CUpti_ActivityMemset4, c::CUpti_ActivityMemset5;
            [value, bytes, start, end, deviceId, streamId, correlationId, flags, memoryKind, graphId, graphNodeId]);
        same!(c::CUpti_ActivityMemory2 => c12::CUpti_ActivityMemory3, c::CUpti_ActivityMemory4;
            [memoryOperationType, memoryKind, correlationId, address, bytes, timestamp, deviceId, streamId]);
        same!(c::CUpti_ActivitySynchronization => c::CUpti_ActivitySynchronization2;
            [type_, start, end, correlationId, streamId, cudaEventId]);
        same!(c::CUpti_ActivityOverhead => c::CUpti_ActivityOverhead2, c::CUpti_ActivityOverhead3;
            [overheadKind, start, end]);
    }

    macro_rules! record {
        ($t:ty, $kind:expr) => {{
            // SAFETY: zeroed plain C struct.
            let mut r: $t = unsafe { std::mem::zeroed() };
            r.kind = $kind;
            r.start = 100;
            r.end = 250;
            bytes_of(&r)
        }};
    }

    #[test]
    fn every_layout_from_cuda_12_0_to_13_5_decodes() {
        let k = c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        let (m, s, y, o) = (
            c::CUPTI_ACTIVITY_KIND_MEMCPY,
            c::CUPTI_ACTIVITY_KIND_MEMSET,
            c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
            c::CUPTI_ACTIVITY_KIND_OVERHEAD,
        );
        let all = [
            record!(c12::CUpti_ActivityKernel9, k),
            record!(c::CUpti_ActivityKernel10, k),
            record!(c::CUpti_ActivityKernel11, k),
            record!(c::CUpti_ActivityKernel12, k),
            record!(c::CUpti_ActivityKernel13, k),
            record!(c12::CUpti_ActivityMemcpy5, m),
            record!(c12::CUpti_ActivityMemcpy6, m),
            record!(c::CUpti_ActivityMemcpy7, m),
            record!(c12::CUpti_ActivityMemset4, s),
            record!(c::CUpti_ActivityMemset5, s),
            record!(c::CUpti_ActivitySynchronization, y),
            record!(c::CUpti_ActivitySynchronization2, y),
            record!(c::CUpti_ActivityOverhead, o),
            record!(c::CUpti_ActivityOverhead2, o),
            record!(c::CUpti_ActivityOverhead3, o),
        ];
        for b in &all {
            let Decoded::Event(ev) = decode(b, &mut BufferNames::new()) else {
                panic!("{} bytes of kind {} not decoded", b.len(), b[0])
            };
            assert_eq!((ev.start, ev.end), (100, 250));
        }
        for (v, size) in [(3u32, size_of::<c12::CUpti_ActivityMemory3>()), (4, size_of::<c::CUpti_ActivityMemory4>())] {
            let mut b = vec![0u8; size];
            b[..4].copy_from_slice(&c::CUPTI_ACTIVITY_KIND_MEMORY2.to_le_bytes());
            b[32..40].copy_from_slice(&77u64.to_le_bytes()); // timestamp
            assert!(matches!(decode(&b, &mut BufferNames::new()), Decoded::Event(e) if e.start == 77), "Memory{v}");
        }
    }

    #[test]
    fn a_longer_future_kernel_record_still_decodes() {
        // SAFETY: zeroed plain C struct.
        let mut r: c::CUpti_ActivityKernel13 = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        (r.start, r.end) = (100, 250);
        (r.gridX, r.gridY, r.gridZ) = (128, 2, 1);
        (r.blockX, r.blockY, r.blockZ) = (256, 1, 1);
        r.registersPerThread = 40;
        r.dynamicSharedMemory = 1024;
        let mut b = bytes_of(&r);
        b.extend_from_slice(&[0xAB; 64]); // fields a later 13.x appends
        let Decoded::Event(ev) = decode(&b, &mut BufferNames::new()) else { panic!("not decoded") };
        let cfg = ev.launch_config();
        assert_eq!((cfg.grid, cfg.block, cfg.registers, cfg.dynamic_shared), ([128, 2, 1], [256, 1, 1], 40, 1024));
    }

    #[test]
    fn short_records_are_skipped_and_unfinished_ones_are_incomplete_per_class() {
        let b = record!(c12::CUpti_ActivityMemcpy6, c::CUPTI_ACTIVITY_KIND_MEMCPY);
        assert_eq!(
            decode(&b[..size_of::<c::CUpti_ActivityMemcpy4>() - 8], &mut BufferNames::new()),
            Decoded::Skipped(class::MEMCPY)
        );
        // SAFETY: zeroed plain C struct.
        let mut k: c::CUpti_ActivityKernel13 = unsafe { std::mem::zeroed() };
        k.kind = c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k.start = 500; // a forced flush: started, never finished
        assert_eq!(decode(&bytes_of(&k), &mut BufferNames::new()), Decoded::Incomplete(class::KERNEL));
        k.start = 0; // CUPTI could not collect timestamps
        assert_eq!(decode(&bytes_of(&k), &mut BufferNames::new()), Decoded::Incomplete(class::KERNEL));
    }

    /// A graph launch traced at graph level becomes the kernel event that stands for it and its whole-graph node.
    #[test]
    fn a_graph_level_record_is_one_launch_of_a_whole_graph() {
        let r = c::CUpti_ActivityGraphTrace2 {
            kind: c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
            correlationId: 42,
            start: 1000,
            end: 9000,
            deviceId: 1,
            graphId: 7,
            streamId: 13,
            endDeviceId: 1,
            ..Default::default()
        };
        let Decoded::GraphOp(op, node) = decode(&bytes_of(&r), &mut BufferNames::new()) else { panic!("not decoded") };
        assert_eq!((op.kind(), op.start, op.end, op.device, op.stream), (Some(EventKind::Kernel), 1000, 9000, 1, 13));
        assert_eq!((node.correlation, node.as_graph_node().graph_id), (42, 7));
        assert_eq!(node.as_graph_node().node_id, cuflight_format::view::WHOLE_GRAPH);
        let unfinished = c::CUpti_ActivityGraphTrace2 { end: 0, ..r };
        assert_eq!(decode(&bytes_of(&unfinished), &mut BufferNames::new()), Decoded::Incomplete(class::KERNEL));
    }

    #[test]
    fn unknown_kinds_are_ignored_and_garbage_is_skipped() {
        // CUPTI_ACTIVITY_KIND_EVENT (6): not a kind the agent enables.
        assert_eq!(decode(&[6, 0, 0, 0, 0, 0, 0, 0], &mut BufferNames::new()), Decoded::Ignored);
        // A runtime call record too short for CUpti_ActivityAPI.
        assert_eq!(decode(&[5, 0, 0, 0, 0, 0, 0, 0], &mut BufferNames::new()), Decoded::Skipped(class::OTHER));
        assert_eq!(decode(&[1, 0], &mut BufferNames::new()), Decoded::Skipped(class::OTHER));
    }
}
