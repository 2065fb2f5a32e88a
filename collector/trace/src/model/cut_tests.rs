use super::*;
use cuflight_format::view::{MemOp, Nvtx};

fn process() -> Process {
    let mut p = Process::default();
    p.strings.insert(1, "cudaLaunchKernel".into());
    p.strings.insert(2, "cudaGetDevice".into());
    p
}

/// The events the cut keeps of `events` (one process, key 1), as (kind, start) in the order they came out.
fn cut(spans: &[(u64, u64)], events: &[RawEvent]) -> Vec<RawEvent> {
    let p = process();
    let mut c = Cut::new(Windows::new(spans.to_vec()));
    let mut out = Vec::new();
    for e in events {
        c.feed(1, &p, e, &mut |_, e| out.push(*e));
    }
    c.finish(&mut |_, e| out.push(*e));
    assert!(out.windows(2).all(|w| w[0].start <= w[1].start), "kept in time order: {out:?}");
    out
}

fn starts(out: &[RawEvent]) -> Vec<(u8, u64)> {
    out.iter().map(|e| (e.kind, e.start)).collect()
}

fn ev(kind: EventKind, start: u64, end: u64) -> RawEvent {
    RawEvent::new(kind, 7, start, end)
}

fn call(start: u64, end: u64, correlation: u32) -> RawEvent {
    RawEvent { name: 1, correlation, ..ev(EventKind::Api, start, end) }
}

fn kernel(start: u64, end: u64, correlation: u32) -> RawEvent {
    RawEvent { correlation, tid: 0, ..ev(EventKind::Kernel, start, end) }
}

const API: u8 = EventKind::Api as u8;
const KERNEL: u8 = EventKind::Kernel as u8;
const PUSH: u8 = EventKind::NvtxPush as u8;
const POP: u8 = EventKind::NvtxPop as u8;

/// A slice is kept when it overlaps the stretch, whichever side it starts on; one that straddles the stretch's
/// start is held until the stretch begins and comes out in its place.
#[test]
fn slices_that_overlap_a_stretch_are_kept() {
    let events = [
        ev(EventKind::Sync, 10, 20),
        ev(EventKind::Sync, 40, 110),
        ev(EventKind::Range, 90, 95),
        ev(EventKind::Range, 100, 150),
        ev(EventKind::Sync, 190, 260),
        ev(EventKind::Sync, 201, 260),
    ];
    assert_eq!(
        starts(&cut(&[(100, 200)], &events)),
        [(EventKind::Sync as u8, 40), (EventKind::Range as u8, 100), (EventKind::Sync as u8, 190)]
    );
}

/// A kernel launched inside the stretch is kept though it runs after it (its flow keeps both ends); one that runs
/// inside is kept though its launch was before.
#[test]
fn device_work_goes_with_its_launch_or_its_own_time() {
    let events = [
        call(10, 20, 1),
        kernel(30, 40, 1),
        call(50, 60, 2),
        call(150, 160, 3),
        kernel(170, 400, 2),
        kernel(400, 500, 3),
        call(300, 310, 4),
        kernel(320, 330, 4),
    ];
    assert_eq!(starts(&cut(&[(100, 200)], &events)), [(API, 150), (KERNEL, 170), (KERNEL, 400)]);
}

/// A range is kept whole when it overlaps the stretch: a push before it whose pop is inside comes out before
/// anything inside; one popped before the stretch is dropped with its pop; one pushed after is dropped.
#[test]
fn nvtx_ranges_are_kept_whole_or_not_at_all() {
    let events = [
        ev(EventKind::NvtxPush, 10, 10),
        ev(EventKind::NvtxPush, 20, 20),
        ev(EventKind::NvtxPop, 30, 30),
        ev(EventKind::NvtxPush, 40, 40),
        ev(EventKind::NvtxMark, 50, 50),
        ev(EventKind::NvtxMark, 150, 150),
        ev(EventKind::NvtxPop, 160, 160),
        ev(EventKind::NvtxPush, 170, 170),
        ev(EventKind::NvtxPop, 300, 300),
        ev(EventKind::NvtxPop, 310, 310),
        ev(EventKind::NvtxPush, 400, 400),
        ev(EventKind::NvtxPop, 410, 410),
    ];
    let mark = EventKind::NvtxMark as u8;
    assert_eq!(
        starts(&cut(&[(100, 200)], &events)),
        [(PUSH, 10), (PUSH, 40), (mark, 150), (POP, 160), (PUSH, 170), (POP, 300), (POP, 310)]
    );
    let async_range = |kind, t, id| {
        let mut e = ev(kind, t, t);
        e.set_nvtx(kind, Nvtx { id, ..Default::default() });
        e
    };
    let events = [
        async_range(EventKind::NvtxStart, 10, 1),
        async_range(EventKind::NvtxStart, 20, 2),
        async_range(EventKind::NvtxEnd, 30, 1),
        async_range(EventKind::NvtxEnd, 250, 2),
    ];
    let kept: Vec<u64> = cut(&[(100, 200)], &events).iter().map(|e| e.as_nvtx().id).collect();
    assert_eq!(kept, [2, 2]);
}

/// Two stretches: what lies between is held and sorted out when the second begins; a stretch with no event
/// inside still releases what straddles it.
#[test]
fn stretches_with_gaps_and_without_events() {
    let events = [
        ev(EventKind::NvtxPush, 110, 110),
        ev(EventKind::Sync, 150, 250),
        ev(EventKind::NvtxPop, 260, 260),
        ev(EventKind::Sync, 270, 280),
        ev(EventKind::Sync, 290, 310),
        ev(EventKind::Sync, 320, 330),
        ev(EventKind::Sync, 390, 520),
        ev(EventKind::Sync, 600, 610),
    ];
    let sync = EventKind::Sync as u8;
    assert_eq!(
        starts(&cut(&[(100, 200), (300, 350), (500, 510)], &events)),
        [(PUSH, 110), (sync, 150), (POP, 260), (sync, 290), (sync, 320), (sync, 390)]
    );
    // The trace ends before the second stretch begins: what straddles it is still released.
    assert_eq!(
        starts(&cut(&[(100, 200), (300, 350)], &events[..5])),
        [(PUSH, 110), (sync, 150), (POP, 260), (sync, 290)]
    );
}

/// The memory drawn inside a stretch is the trace's: blocks allocated before it and between stretches are
/// accounted for at its start, and so are frees of blocks it showed alive.
#[test]
fn memory_in_use_keeps_its_level() {
    let mem = |kind, t, address, bytes| {
        let mut e = ev(kind, t, t);
        e.set_mem_op(kind, MemOp { memory: Some(MemKind::Device), address, bytes });
        e
    };
    use EventKind::{Alloc, Free};
    let events = [
        mem(Alloc, 10, 0x100, 1000),
        mem(Alloc, 20, 0x200, 200),
        mem(Free, 30, 0x200, 0),
        mem(Alloc, 40, 0, 30), // no address: torch.profiler's, sometimes
        mem(Alloc, 150, 0x300, 5),
        mem(Alloc, 250, 0x400, 7),
        mem(Free, 260, 0x300, 0),
        mem(Free, 270, 0x100, 0),
        mem(Free, 280, 0, 10),
        mem(Alloc, 400, 0x500, 1),
        mem(Alloc, 900, 0x600, 1),
    ];
    let out = cut(&[(100, 200), (300, 500)], &events);
    let mut trace_level = LiveMemory::default();
    let level_at = |t: u64| {
        let mut m = LiveMemory::default();
        events.iter().filter(|e| e.start <= t).for_each(|e| {
            m.apply(1, e);
        });
        m.device()
    };
    let mut drawn = Vec::new();
    for e in &out {
        trace_level.apply(1, e);
        drawn.push((e.start, trace_level.device()));
    }
    // At 100: 1000 + 30 alive; 150: +5; at 300: 0x100 and 0x300 freed, 0x400 alive, 10 of the 30 freed.
    assert_eq!(drawn.last(), Some(&(400, level_at(400))));
    for &(t, level) in drawn.iter().filter(|d| d.0 != 100 && d.0 != 300) {
        assert_eq!(level, level_at(t), "level at {t}");
    }
    let at = |t: u64| drawn.iter().filter(|d| d.0 == t).map(|d| d.1).next_back();
    assert_eq!((at(100), at(300)), (Some(level_at(100)), Some(level_at(300))));
    assert_eq!(level_at(300), 7 + 20);
    assert!(out.iter().all(|e| (100..=500).contains(&e.start)), "nothing drawn outside: {out:?}");
}

/// Calls are kept by their time, and their Python frames with them; facts always.
#[test]
fn frames_follow_their_call_and_facts_pass() {
    let frame = |t, correlation| RawEvent { correlation, ..ev(EventKind::PyFrame, t, t) };
    let events = [
        ev(EventKind::Device, 0, 0),
        call(10, 20, 1),
        frame(10, 1),
        call(90, 120, 2),
        frame(90, 2),
        frame(90, 2),
        call(300, 310, 3),
        frame(300, 3),
        ev(EventKind::ThreadName, 400, 400),
    ];
    let frame = EventKind::PyFrame as u8;
    assert_eq!(
        starts(&cut(&[(100, 200)], &events)),
        [(EventKind::Device as u8, 0), (API, 90), (frame, 90), (frame, 90), (EventKind::ThreadName as u8, 400)]
    );
}

/// Ranges opened and closed before a stretch hold nothing once closed, however many there are; one left open
/// over them is still drawn.
#[test]
fn closed_ranges_before_a_stretch_hold_nothing() {
    let p = process();
    let mut c = Cut::new(Windows::new(vec![(10_000_000, 10_000_100)]));
    let mut out = Vec::new();
    c.feed(1, &p, &ev(EventKind::NvtxPush, 0, 0), &mut |_, e| out.push(*e));
    for t in 1..=1_000_000u64 {
        let (kind, domain) = if t % 2 == 1 { (EventKind::NvtxPush, t % 3) } else { (EventKind::NvtxPop, (t - 1) % 3) };
        let mut e = ev(kind, t, t);
        e.set_nvtx(kind, Nvtx { domain, ..Default::default() });
        c.feed(1, &p, &e, &mut |_, e| out.push(*e));
        assert!(c.held.len() <= 2, "{} held at {t}", c.held.len());
    }
    c.feed(1, &p, &ev(EventKind::NvtxPop, 10_000_050, 10_000_050), &mut |_, e| out.push(*e));
    c.finish(&mut |_, e| out.push(*e));
    assert_eq!(starts(&out), [(PUSH, 0), (POP, 10_000_050)]);
}
