//! The event source's tests: order equal to the loader's, repeated passes, bounded open blocks, hostile
//! headers and clocks.

use super::*;
use cuflight_format::file::{ProcessInfo, TraceWriter};
use cuflight_format::view::MemOp;

/// A file with three processes whose blocks overlap in time as a recording's do (device records arrive a
/// flush later than host ones): one on CLOCK_MONOTONIC, one whose device clock runs 7 µs ahead (clock pairs
/// in its facts), and one without facts (its ClockSync events tell).
fn write_trace(path: &Path, cut: bool) {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    let mut strings = cuflight_format::strings::StringRegion::default();
    let (launch, kernel, step) = (strings.intern("cudaLaunchKernel"), strings.intern("gemm"), strings.intern("step"));
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for pid in [10u32, 20, 30] {
        w.write_strings(pid, 0, strings.bytes()).unwrap();
    }
    let offset = |pid: u32| if pid == 20 { 7_000 } else { 0 };
    for flush in 0..40u64 {
        for pid in [10u32, 20, 30] {
            let mut block = Vec::new();
            if pid == 30 && flush == 0 {
                block.push(RawEvent::new(EventKind::ClockSync, 0, 1_000, 1_000));
                block.push(RawEvent::new(EventKind::ClockSync, 0, 10_000_000, 10_000_000));
            }
            for i in 0..50u64 {
                let t = flush * 100_000 + i * 2_000 + next() % 500;
                let corr = (flush * 100 + i) as u32 + 1;
                block.push(RawEvent { name: step, ..RawEvent::new(EventKind::NvtxPush, pid, t, t) });
                let api =
                    RawEvent { name: launch, correlation: corr, ..RawEvent::new(EventKind::Api, pid, t, t + 900) };
                block.push(api);
                block.push(RawEvent::new(EventKind::NvtxPop, pid, t + 950, t + 950));
                let mut mem = RawEvent::new(EventKind::Alloc, pid, t + 100, t + 100);
                mem.set_mem_op(EventKind::Alloc, MemOp { memory: None, address: 0x1000 + i, bytes: 1 << (i % 20) });
                block.push(mem);
                // Device work from the previous flush (recorded on the device clock).
                if flush > 0 && next() % 8 != 0 {
                    let d = t - 100_000 + 1_500 + offset(pid);
                    let k = RawEvent {
                        name: kernel,
                        correlation: corr - 100,
                        ..RawEvent::new(EventKind::Kernel, 0, d, d + 300)
                    };
                    block.push(k);
                    let mut free = RawEvent::new(EventKind::Free, pid, t - 99_000, t - 99_000);
                    free.set_mem_op(EventKind::Free, MemOp { memory: None, address: 0x1000 + i, bytes: 0 });
                    block.push(free);
                }
            }
            w.write_events(pid, &block).unwrap();
        }
    }
    for pid in [10u32, 20] {
        let mut info = ProcessInfo { pid, finished: pid == 10, ..Default::default() };
        if pid == 10 {
            info.device_clock_monotonic = true;
        } else {
            info.clock_pairs = vec![(1_007_000, 1_000_000), (10_007_000, 10_000_000)];
            // (CUPTI, monotonic)
        }
        w.write_process(&info).unwrap();
    }
    let mut bytes = w.finish(Footer::default()).unwrap();
    if cut {
        bytes.truncate(bytes.len() / 2);
    }
    std::fs::write(path, bytes).unwrap();
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cuflight-source-{}-{name}", std::process::id()))
}

/// The in-memory loader's order: each process sorted by start (stable over file order), then processes
/// merged by (start, key).
fn loaded_order(trace: &Trace) -> Vec<(u32, RawEvent)> {
    let mut all: Vec<(u32, RawEvent)> =
        trace.processes.iter().flat_map(|(&k, p)| p.events.iter().map(move |e| (k, *e))).collect();
    all.sort_by_key(|(k, e)| (e.start, *k));
    all
}

fn streamed(path: &Path) -> (EventSource, Vec<(u32, RawEvent)>) {
    let mut source = EventSource::open(path).unwrap();
    assert!(matches!(source.events, Events::File { .. }), "a version 2 file streams");
    let mut out = Vec::new();
    source.for_each(|k, _, e| out.push((k, *e))).unwrap();
    (source, out)
}

#[test]
fn streamed_events_come_in_the_loaders_order_with_device_time_aligned() {
    for (name, cut) in [("whole", false), ("cut", true)] {
        let path = temp(name);
        write_trace(&path, cut);
        let trace = Trace::load(&path).unwrap();
        let (source, events) = streamed(&path);
        assert!(events.len() > 1000, "{name}: {} events", events.len());
        assert_eq!(events, loaded_order(&trace), "{name}");
        assert!(events.windows(2).all(|w| w[0].1.start <= w[1].1.start));
        assert_eq!(source.cut_short.is_some(), cut, "{name}");
        // Process 20's kernels moved back onto the host clock: 1.5 µs (± the launches' jitter) after their launch
        // (in the whole file: the cut one lost the facts that hold the clock pairs, written last).
        for (k, e) in events.iter().filter(|(k, e)| !cut && *k == 20 && e.kind() == Some(EventKind::Kernel)) {
            let is_launch = |(pk, l): &&(u32, RawEvent)| {
                pk == k && l.kind() == Some(EventKind::Api) && l.correlation == e.correlation
            };
            let launch = events.iter().find(is_launch).unwrap();
            assert!((1_000..=2_000).contains(&(e.start - launch.1.start)), "{name}: {e:?} after {launch:?}");
        }
        for (key, p) in &trace.processes {
            let s = &source.processes[key];
            assert_eq!((s.info.pid, s.strings.len()), (p.info.pid, p.strings.len()), "{name}");
        }
        let streamed_load = load_trace(&path).unwrap();
        assert_eq!(streamed_load.processes.len(), trace.processes.len());
        for (key, p) in &trace.processes {
            assert_eq!(streamed_load.processes[key].events, p.events, "{name}: process {key}");
        }
        assert_eq!((&streamed_load.footer, &streamed_load.cut_short), (&trace.footer, &trace.cut_short), "{name}");
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn every_pass_sees_every_event_again_from_a_file_or_a_loaded_trace() {
    let path = temp("again");
    write_trace(&path, false);
    let mut trace = Trace::load(&path).unwrap();
    trace.processes.entry(99).or_default(); // a process without events keeps its place
    for mut source in [EventSource::open(&path).unwrap(), EventSource::from_trace(trace)] {
        let pass = |s: &mut EventSource| {
            let mut out = Vec::new();
            s.for_each(|k, _, e| out.push((k, *e))).unwrap();
            out
        };
        let first = pass(&mut source);
        assert!(first.len() > 1000);
        assert_eq!(pass(&mut source), first);
        assert_eq!(pass(&mut source), first);
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn only_blocks_that_overlap_in_time_are_open_at_once() {
    let path = temp("overlap");
    write_trace(&path, false);
    let mut source = EventSource::open(&path).unwrap();
    let Events::File { blocks, .. } = &source.events else { panic!("streams") };
    assert_eq!(blocks.len(), 120);
    source.for_each(|_, _, _| {}).unwrap();
    // A block holds one flush of a process plus the previous flush's device work: each overlaps the next
    // block of every process, so at most about three per process are open, never the file.
    assert!(source.peak_open_blocks <= 9, "{} blocks open at once", source.peak_open_blocks);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_block_whose_header_lies_about_its_time_is_refused_not_misordered() {
    let path = temp("lying");
    write_trace(&path, false);
    let mut bytes = std::fs::read(&path).unwrap();
    let (index, _) = read_index(&mut std::io::Cursor::new(&bytes)).unwrap();
    // A block of process 10, whose device clock is the host's (a process on CUPTI's own clock has its blocks'
    // earliest times computed after alignment, never taken from the header).
    let second = index.iter().filter(|e| e.tag == TAG_EVENT_COLUMNS && e.pid == 10).nth(1).unwrap().offset as usize;
    let at = second + cuflight_format::file::BLOCK_HEAD;
    bytes[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    bytes.truncate(bytes.len() - 16); // no trailer: the index is rebuilt from the (lying) headers
    std::fs::write(&path, &bytes).unwrap();
    let mut source = EventSource::open(&path).unwrap();
    let err = source.for_each(|_, _, _| {}).unwrap_err().to_string();
    assert!(err.contains("earlier than its header declares"), "{err}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_device_clock_that_steps_back_still_streams_in_order() {
    // Pairs whose monotonic side goes back (a stepped CUPTI clock, or crafted): the map decreases, so a block's
    // mapped first start is no lower bound; its blocks open first and the order is still the loader's.
    let path = temp("stepped");
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    let host: Vec<RawEvent> = (0..100)
        .map(|i| RawEvent::new(EventKind::Api, 7, 1_500_000 + i * 10_000, 1_500_000 + i * 10_000 + 5))
        .collect();
    let device: Vec<RawEvent> = (0..100)
        .map(|i| RawEvent::new(EventKind::Kernel, 0, 5_000_000 + i * 10_000, 5_000_000 + i * 10_000 + 5))
        .collect();
    w.write_events(20, &host).unwrap();
    w.write_events(20, &device).unwrap();
    let pairs = vec![(5_000_000, 3_000_000), (6_000_000, 1_000_000)];
    assert!(!cuflight_format::file::ClockMap::from_pairs(pairs.clone()).is_increasing());
    w.write_process(&ProcessInfo { pid: 20, clock_pairs: pairs, ..Default::default() }).unwrap();
    std::fs::write(&path, w.finish(Footer::default()).unwrap()).unwrap();
    let loaded = Trace::load(&path).unwrap();
    let (_, events) = streamed(&path);
    assert_eq!(events.len(), 200);
    assert_eq!(events, loaded_order(&loaded));
    std::fs::remove_file(&path).unwrap();
}

/// A trace an older agent wrote on an H100: calls in flight when it was armed start at 0 and last the machine's
/// uptime. The reader never shows them (nor an event ending before it starts), counts them per process, and
/// shows everything else.
#[test]
fn events_with_impossible_times_are_refused_and_counted() {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    let mut strings = cuflight_format::strings::StringRegion::default();
    let launch = strings.intern("cudaLaunchKernel");
    w.write_strings(7, 0, strings.bytes()).unwrap();
    w.write_process(&ProcessInfo { pid: 7, device_clock_monotonic: true, finished: true, ..Default::default() })
        .unwrap();
    let uptime = 359_920_017_000_000u64;
    let call =
        |start, end, corr| RawEvent { name: launch, correlation: corr, ..RawEvent::new(EventKind::Api, 7, start, end) };
    let events = vec![
        RawEvent::new(EventKind::ClockSync, 0, 0, 0), // a fact: never refused
        call(0, uptime, 67),                          // seen end, not begin
        call(uptime + 10, uptime + 5, 68),            // ends before it starts
        call(uptime + 100, uptime + 900, 69),
        RawEvent { correlation: 69, ..RawEvent::new(EventKind::Kernel, 0, uptime + 1_000, uptime + 3_000) },
    ];
    w.write_events(7, &events).unwrap();
    let bytes = w.finish(Footer::default()).unwrap();
    let mut source = EventSource::from_bytes(bytes, "h100.cuf").unwrap().unwrap();
    for _ in 0..2 {
        let mut seen = Vec::new();
        source.for_each(|_, _, e| seen.push((e.kind(), e.start))).unwrap();
        assert_eq!(
            seen,
            [
                (Some(EventKind::ClockSync), 0),
                (Some(EventKind::Api), uptime + 100),
                (Some(EventKind::Kernel), uptime + 1_000)
            ]
        );
        assert_eq!(source.processes[&7].refused, 2, "counted once per pass, not added up");
    }
}

/// The block sort keeps equal starts in their order whether the block is nearly sorted (insertion) or not (the
/// keyed sort after insertion gave up part way), checked against the standard stable sort.
#[test]
fn blocks_sort_stably_by_start_nearly_sorted_or_not() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut scratch = SortScratch::default();
    for case in 0..200u64 {
        let n = (next() % 3000) as usize;
        let spread = [1, 4, 1000, u64::MAX][case as usize % 4];
        let mut events: Vec<RawEvent> = (0..n as u64)
            .map(|i| {
                // Nearly sorted (small spread), runs concatenated (two halves), or random; few distinct starts so
                // that ties are common.
                let start = match case % 3 {
                    0 => i / 3 + next() % spread.min(1 << 20),
                    1 => (i % (n as u64 / 2 + 1)) / 2,
                    _ => next() % 50,
                };
                RawEvent { correlation: i as u32, ..RawEvent::new(EventKind::Kernel, 0, start, start) }
            })
            .collect();
        let mut expected = events.clone();
        expected.sort_by_key(|e| e.start);
        scratch.stable_by_start(&mut events);
        let order = |v: &[RawEvent]| v.iter().map(|e| (e.start, e.correlation)).collect::<Vec<_>>();
        assert_eq!(order(&events), order(&expected), "case {case}, {n} events");
    }
}
