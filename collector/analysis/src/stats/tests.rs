use super::*;

/// Scripts written for older nsys releases pass their report names.
#[test]
fn reports_answer_to_nsys_older_names() {
    for (old, new) in
        [("gpukernsum", "cuda_gpu_kern_sum"), ("cudaapisum", "cuda_api_sum"), ("kernexecsum", "cuda_kern_exec_sum")]
    {
        assert_eq!(Report::parse(old).map(|r| r.names().0), Ok(new));
    }
    assert!(Report::parse("gpukernsumm").is_err());
}
use cuflight_format::{EventKind, RawEvent};

fn ev(kind: EventKind, tid: u32, t: u64) -> RawEvent {
    RawEvent::new(kind, tid, t, t)
}

/// A trace of one process (pid key 1) with `events` (sorted here) and `strings`.
pub(super) fn trace_of(events: Vec<RawEvent>, strings: &[(u32, &str)]) -> Trace {
    let mut p = Process { events, ..Default::default() };
    p.strings = strings.iter().map(|(id, s)| (*id, s.to_string())).collect();
    p.events.sort_by_key(|e| e.start);
    let mut t = Trace::default();
    t.processes.insert(1, p);
    t
}

#[test]
fn ranges_pair_across_threads_and_push_pop_per_thread() {
    use cuflight_format::view::Nvtx;
    let range = Nvtx { id: 9, ..Default::default() };
    let start = RawEvent { name: 4, ..RawEvent::nvtx(EventKind::NvtxStart, 1, 100, 100, range) };
    let end = RawEvent::nvtx(EventKind::NvtxEnd, 2, 700, 700, range);
    let push_a = RawEvent { name: 8, ..ev(EventKind::NvtxPush, 1, 200) };
    let push_b = RawEvent { name: 8, ..ev(EventKind::NvtxPush, 2, 250) };
    let pop_a = ev(EventKind::NvtxPop, 1, 300);
    let pop_b = ev(EventKind::NvtxPop, 2, 650);
    // Stored as two per-thread rings would deliver them: thread 2's ring first.
    let t = trace_of(vec![push_b, pop_b, end, start, push_a, pop_a], &[(4, "handoff"), (8, "step")]);
    let s = Stats::compute(&t);
    let handoff = s.nvtx.iter().find(|r| r.name == "handoff").unwrap();
    assert_eq!((handoff.time.count, handoff.time.total_ns), (1, 600));
    let step = s.nvtx.iter().find(|r| r.name == "step").unwrap();
    assert_eq!((step.time.count, step.time.total_ns, step.time.min_ns, step.time.max_ns), (2, 500, 100, 400));
    // nsys's Style and Time (%): a start/end range and push/pop ranges, shares of all ranges' time.
    assert_eq!((handoff.style, step.style), ("StartEnd", "PushPop"));
    assert!((handoff.percent - 54.545).abs() < 0.01 && (step.percent - 45.454).abs() < 0.01);
    // nvtx_startend_sum and nvtx_pushpop_sum: a style's rows, shares of that style's time.
    let json = s.render(&[Report::NvtxStartEnd, Report::NvtxPushPop], Style::Json);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (v["nvtx_startend"][0]["name"].as_str(), v["nvtx_startend"][0]["percent"].as_f64()),
        (Some("handoff"), Some(100.0))
    );
    assert_eq!(v["nvtx_pushpop"].as_array().map(|a| a.len()), Some(1));
    assert_eq!(Report::parse("nvtxsesum"), Ok(Report::NvtxStartEnd));
}

/// Streamed (`compute_source`, what every command uses) and loaded (`compute`) give the same tables.
#[test]
fn streamed_and_loaded_tables_agree() {
    let make = || {
        let launch = RawEvent { correlation: 3, name: 1, ..RawEvent::new(EventKind::Api, 1, 100, 120) };
        let kernel = RawEvent { correlation: 3, name: 2, stream: 7, ..RawEvent::new(EventKind::Kernel, 0, 130, 190) };
        let push = RawEvent { name: 4, ..ev(EventKind::NvtxPush, 1, 90) };
        let pop = ev(EventKind::NvtxPop, 1, 200);
        trace_of(vec![push, launch, kernel, pop], &[(1, "cudaLaunchKernel"), (2, "k"), (4, "step")])
    };
    let loaded = Stats::compute(&make());
    let streamed = Stats::compute_source(&mut EventSource::from_trace(make())).unwrap();
    assert_eq!(streamed, loaded);
    assert_eq!(loaded.kernels.len(), 1);
}

#[test]
fn memory_replay_tracks_peak_and_live_bytes_by_kind() {
    use cuflight_format::event::MemKind;
    let alloc = |t, addr, bytes, kind: MemKind| RawEvent::mem_op(false, 1, t, kind, addr, bytes);
    let free = |t, addr, kind: MemKind| RawEvent::mem_op(true, 1, t, kind, addr, 0);
    let t = trace_of(
        vec![
            alloc(1, 0x1000, 100, MemKind::Device),
            alloc(2, 0x2000, 50, MemKind::Device),
            free(3, 0x1000, MemKind::Device),
            alloc(4, 0x3000, 70, MemKind::DeviceAsync),
            alloc(5, 0x9000, 4096, MemKind::PinnedHost),
            free(6, 0xdead, MemKind::Device),
        ],
        &[],
    );
    let m = Stats::compute(&t).memory;
    assert_eq!((m.device.malloc_count, m.device.free_count), (3, 2));
    assert_eq!((m.device.peak_bytes, m.device.live_bytes_at_end, m.device.alloc_bytes), (150, 120, 220));
    assert_eq!((m.pinned_host.malloc_count, m.pinned_host.live_bytes_at_end), (1, 4096));
}

#[test]
fn memcpy_rows_split_by_kind_and_host_memory() {
    let copy = |t, kind: u8, src: u64, dst: u64, bytes| RawEvent {
        sub: kind,
        a: bytes,
        b: src | dst << 8,
        ..RawEvent::new(EventKind::Memcpy, 0, t, t + 1000)
    };
    let t = trace_of(
        vec![copy(1, 1, 1, 3, 4000), copy(2, 1, 2, 3, 8000), copy(3, 1, 2, 3, 8000), copy(4, 2, 3, 1, 10)],
        &[],
    );
    let s = Stats::compute(&t);
    let find = |k: &str, h: &str| s.memcpy.iter().find(|r| r.kind == k && r.host_memory == h).unwrap().clone();
    assert_eq!((find("HtoD", "pinned").count, find("HtoD", "pinned").bytes), (2, 16000));
    assert_eq!(find("HtoD", "pageable").bytes, 4000);
    assert_eq!(find("DtoH", "pageable").count, 1);
    assert!((find("HtoD", "pinned").gbps - 8.0).abs() < 1e-9);
}
