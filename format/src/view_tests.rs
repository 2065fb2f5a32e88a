//! The typed views read back what the typed constructors and setters wrote.

use super::*;

#[test]
fn views_read_what_the_constructors_wrote() {
    let call = ApiCall { runtime: false, cbid: 305, result: 700, external: 42 };
    assert_eq!(RawEvent::api_call(7, 1, 2, call).as_api(), call);
    let huge = RawEvent::api_call(7, 1, 2, ApiCall { result: u64::MAX, ..call });
    assert_eq!(huge.as_api().code(), u32::MAX);

    let e = RawEvent::copy(1, 2, 9, CopyKind::HTOD, MemoryKind::PINNED, MemoryKind::DEVICE, 1 << 20, false);
    let c = e.as_copy();
    assert_eq!(
        (c.kind, c.src, c.dst, c.bytes, c.is_async),
        (CopyKind::HTOD, MemoryKind::PINNED, MemoryKind::DEVICE, 1 << 20, false)
    );
    assert!(!c.blocks_host());
    assert_eq!(e.correlation, 9);

    let m = RawEvent::mem_op(false, 3, 5, MemKind::PinnedHost, 0x1000, 64).as_mem_op();
    assert_eq!((m.memory, m.address, m.bytes, m.on_device()), (Some(MemKind::PinnedHost), 0x1000, 64, false));

    let pair = ClockPair { cupti_ns: 10, monotonic_ns: 1_000, realtime_ns: 5_000 };
    assert_eq!(RawEvent::clock_pair(pair).as_clock_pair().realtime_offset(), Some(4_000));
    assert_eq!(ClockPair { realtime_ns: 0, ..pair }.realtime_offset(), None);
}

/// Merging traces rewrites every string id an event holds, a Python frame's file among them (merge once kept
/// the old file ids, naming other strings of the merged region).
#[test]
fn string_ids_are_mapped_wherever_a_kind_keeps_one() {
    let shift = |id: u32| id + 100;
    let mut frame = RawEvent::new(EventKind::PyFrame, 1, 5, 5);
    frame.name = 1;
    frame.set_py_frame(PyFrameRecord {
        depth: 0,
        file: 2,
        line: 9,
        truncated: false,
        of_main_thread: false,
        imported: false,
        read_ns: 0,
    });
    frame.map_string_ids(shift);
    assert_eq!((frame.name, frame.as_py_frame().file, frame.as_py_frame().line), (101, 102, 9));
    let mut op = RawEvent::new(EventKind::Range, 1, 5, 6);
    op.set_range(RangeRecord { category: 3, on_device: false, external: 7, operator_text: 4, sequence_plus_one: 2 });
    op.map_string_ids(shift);
    let r = op.as_range();
    assert_eq!((r.category, r.operator_text, r.sequence_plus_one, r.external), (103, 104, 2, 7));
    let mut copy = RawEvent::copy(1, 2, 3, CopyKind::HTOD, MemoryKind::PINNED, MemoryKind::DEVICE, 99, true);
    copy.map_string_ids(shift);
    assert_eq!(copy.as_copy().bytes, 99);
}

#[test]
fn every_setter_round_trips_through_its_view() {
    let mut e = RawEvent::default();
    let d =
        DeviceInfo { memory_bytes: 80 << 30, compute_capability: (9, 0), multiprocessors: 132, driver_version: 13000 };
    e.set_device(d);
    assert_eq!((e.kind(), e.as_device()), (Some(EventKind::Device), d));
    let r = RangeRecord { category: 7, on_device: false, external: 9, operator_text: 11, sequence_plus_one: 4 };
    e.set_range(r);
    assert_eq!(e.as_range(), r);
    let n = Nvtx {
        domain: 3,
        id: 5,
        global: true,
        category: 2,
        color: 0xff00ff00,
        payload_type: 3,
        payload_bits: 2.5f64.to_bits(),
    };
    e.set_nvtx(EventKind::NvtxMark, n);
    assert_eq!(e.as_nvtx(), n);
    let f = PyFrameRecord {
        depth: 2,
        file: 4,
        line: 77,
        truncated: true,
        of_main_thread: false,
        imported: true,
        read_ns: 0,
    };
    e.set_py_frame(f);
    assert_eq!(e.as_py_frame(), f);
    let s = SyncRecord { kind: SYNC_STREAM_WAIT_EVENT, event: 0xdead };
    e.set_sync(s);
    assert_eq!(e.as_sync(), s);
    let m = Memset { memory: MemoryKind::DEVICE, bytes: 64, value: 0xff, is_async: true };
    e.set_memset(m);
    assert_eq!(e.as_memset(), m);
    let g = GraphNode { graph_id: 1, node_id: 2 };
    e.set_graph_node(g);
    assert_eq!(e.as_graph_node(), g);
    let cfg =
        LaunchConfig { grid: [132, 1, 1], block: [256, 1, 1], registers: 32, static_shared: 0, dynamic_shared: 1024 };
    e.set_launch_config(&cfg);
    assert_eq!(e.launch_config(), cfg);
    let m = MemoryActivity { operation: 1, address: 0x7000, bytes: 1 << 21, memory: MemoryKind::DEVICE };
    e.set_memory_activity(m);
    assert_eq!(e.as_memory_activity(), m);
    e.set_overhead(Overhead { kind: 3 });
    assert_eq!(e.as_overhead(), Overhead { kind: 3 });
    e.set_named_thread(1 << 40);
    assert_eq!(e.named_thread(), 1 << 40);
}

/// A counter sample keeps each ratio to 1/10000 of peak, tells an absent ratio from zero, and saturates what does
/// not fit (a ratio above 6.5, PCIe bytes above 4 GiB) rather than wrap.
#[test]
fn gpu_sample_round_trips_to_a_hundredth_of_a_percent() {
    let s = GpuSample {
        sm_active: Some(0.98765),
        tensor_active: Some(0.0),
        dram_read: None,
        dram_write: Some(1.02),
        gpu_active: Some(1.0),
        pcie_bytes: Some((4096, 1 << 20)),
    };
    let e = RawEvent::gpu_sample(3, 100, 200, s);
    let back = e.as_gpu_sample();
    assert_eq!(
        (e.device, e.kind(), back.tensor_active, back.dram_read),
        (3, Some(EventKind::GpuSample), Some(0.0), None)
    );
    assert!((back.sm_active.unwrap() - 0.9877).abs() < 1e-9);
    assert_eq!((back.dram_write, back.gpu_active, back.pcie_bytes), (Some(1.02), Some(1.0), Some((4096, 1 << 20))));
    assert_eq!(back.dram(), Some(1.02));
    let huge = GpuSample { sm_active: Some(1e9), tensor_active: Some(f64::NAN), pcie_bytes: Some((u64::MAX, 0)), ..s };
    let back = RawEvent::gpu_sample(0, 0, 1, huge).as_gpu_sample();
    assert_eq!((back.sm_active, back.tensor_active), (Some(6.5534), None));
    assert_eq!(back.pcie_bytes, Some((u32::MAX as u64, 0)));
    let none = RawEvent::gpu_sample(0, 0, 1, GpuSample::default()).as_gpu_sample();
    assert_eq!(none, GpuSample::default());
}
