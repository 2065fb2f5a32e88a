//! A lock-free single-producer/single-consumer ring of [`RawEvent`]s over a caller-provided memory region.
//!
//! The index protocol is the classic one (as in rtrb): monotonically increasing 64-bit `write` and `read`
//! counters, slot = counter & mask, the producer publishes with a release store of `write`, the consumer frees
//! slots with a release store of `read`. Each counter sits on its own cache line and the producer keeps a cached
//! copy of `read` so a push touches the consumer's line only when the ring looks full.
//!
//! The storage is not owned: [`RingRef`] points into any region laid out as [`RingHeader`] followed by
//! `capacity` slots, which is how the agent's rings live in a shared-memory segment while the collector drains
//! them from another process. Atomics on `AtomicU64` are address-free, so they work across processes.
//!
//! The two ends are values, neither `Copy` nor `Clone`, and none outlives the memory it points into (every type
//! here carries its lifetime): a [`Producer`] comes only from a successful claim of the ring's owner word
//! ([`RingRef::try_claim`], which makes it the one producer across processes) and gives the claim back when
//! released; a [`Consumer`] comes from the segment that maps the ring, at most one at a time per ring and
//! process (`MappedSegment::consumer`), or, with the producer, from [`HeapRing::split`]. A [`RingRef`] itself
//! is a view: counters, mode and snapshots ([`RingRef::peek_into`]), never a position to move.
//! A full ring never blocks: the event is refused and counted in `dropped`, or, in a flight recorder's ring
//! (overwrite mode), the oldest event is discarded for it. Nobody drains a flight recorder's rings: its
//! producer owns `read` and advances it past the slot it is about to reuse, and a reader takes a snapshot
//! without advancing anything ([`RingRef::peek_into`]), checking `read` afterwards like a seqlock reader so
//! that slots reused while it copied are discarded rather than returned torn.

use crate::event::RawEvent;
use std::marker::PhantomData;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

#[repr(C, align(128))]
struct Padded<T>(T);

/// The shared part of a ring. Zeroed memory is a valid empty, unowned ring.
#[repr(C)]
pub struct RingHeader {
    write: Padded<AtomicU64>,
    read: Padded<AtomicU64>,
    /// Written by the producer only.
    producer_side: Padded<ProducerSide>,
    /// System tid of the thread that owns the producer side; 0 when free.
    owner: Padded<AtomicU32>,
}

#[repr(C)]
struct ProducerSide {
    /// Events refused because the ring was full.
    dropped: AtomicU64,
    /// Old events discarded for new ones (overwrite mode).
    overwritten: AtomicU64,
    /// 1: a full ring discards its oldest event instead of refusing the new one (a flight recorder's).
    overwrite: AtomicU32,
}

/// Bytes taken by a ring's header; slots follow it.
pub const RING_HEADER_SIZE: usize = std::mem::size_of::<RingHeader>();
const SLOT: usize = std::mem::size_of::<RawEvent>();

/// Bytes a ring of `capacity` slots takes (header included).
pub const fn ring_bytes(capacity: u32) -> usize {
    RING_HEADER_SIZE + capacity as usize * SLOT
}

/// A view of one ring in memory someone else owns, valid for `'a` (the mapping's or the heap ring's borrow).
#[derive(Clone, Copy, Debug)]
pub struct RingRef<'a> {
    header: *const RingHeader,
    slots: *mut RawEvent,
    mask: u64,
    _memory: PhantomData<&'a RingHeader>,
}

// SAFETY: a RingRef is a pair of pointers into memory that outlives every view of it (its lifetime says so); all
// shared state is accessed through atomics, and slot accesses follow the SPSC protocol.
unsafe impl Send for RingRef<'_> {}
// SAFETY: as above; `&RingRef` only exposes atomic operations and snapshot copies.
unsafe impl Sync for RingRef<'_> {}

impl<'a> RingRef<'a> {
    /// # Safety
    /// `base` must be 128-byte aligned and point to at least [`ring_bytes`]`(capacity)` bytes that stay mapped
    /// and writable for `'a`. `capacity` must be a power of two.
    pub unsafe fn from_raw(base: *mut u8, capacity: u32) -> RingRef<'a> {
        debug_assert!(capacity.is_power_of_two());
        debug_assert!((base as usize).is_multiple_of(128));
        RingRef {
            header: base as *const RingHeader,
            // SAFETY: the caller guarantees the region holds the header followed by the slots.
            slots: unsafe { base.add(RING_HEADER_SIZE) } as *mut RawEvent,
            mask: capacity as u64 - 1,
            _memory: PhantomData,
        }
    }

    fn header(&self) -> &RingHeader {
        // SAFETY: from_raw's contract keeps the header mapped and aligned while the view is alive.
        unsafe { &*self.header }
    }

    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// Events refused because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.header().producer_side.0.dropped.load(Ordering::Relaxed)
    }

    /// Old events a full ring in overwrite mode discarded for new ones.
    pub fn overwritten(&self) -> u64 {
        self.header().producer_side.0.overwritten.load(Ordering::Relaxed)
    }

    /// Puts the ring in overwrite mode (a flight recorder's: nobody drains it, see the module comment), or back.
    pub fn set_overwrite(&self, on: bool) {
        self.header().producer_side.0.overwrite.store(on as u32, Ordering::Release);
    }

    /// The producer end, for thread `tid` (any non-zero owner id); None while another holds it. The claim is
    /// the ring's owner word, shared by every process that maps the ring, so there is one producer at a time.
    pub fn try_claim(&self, tid: u32) -> Option<Producer<'a>> {
        let h = self.header();
        h.owner.0.compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed).ok()?;
        Some(Producer { ring: *self, cached_read: h.read.0.load(Ordering::Acquire) })
    }

    /// Tid of the producer's owner, 0 when free.
    pub fn owner(&self) -> u32 {
        self.header().owner.0.load(Ordering::Relaxed)
    }

    /// Events written and not yet drained.
    pub fn len(&self) -> u64 {
        let h = self.header();
        h.write.0.load(Ordering::Acquire).wrapping_sub(h.read.0.load(Ordering::Acquire))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies every event still in the ring into `out` without taking any (`read` is left alone): a snapshot of
    /// a ring whose producer may be overwriting it. Copies of slots the producer reused meanwhile are discarded
    /// (it advanced `read` past them before writing, see [`Producer::push`]); returns how many were kept.
    pub fn peek_into(&self, out: &mut Vec<RawEvent>) -> usize {
        let h = self.header();
        let w = h.write.0.load(Ordering::Acquire);
        let r = h.read.0.load(Ordering::Acquire);
        let n = w.wrapping_sub(r).min(self.capacity());
        let r = w.wrapping_sub(n);
        let before = out.len();
        // A slot the producer rewrites while it is copied is detected below and its copy discarded (RawEvent is
        // plain data: any bit pattern is a value, validated downstream like everything read from another process).
        // The copy reads word by word with atomic loads, as the producer writes ([`store_slot`]): racing plain
        // accesses would be undefined behaviour, even for a copy that is thrown away (Miri found it).
        out.reserve(n as usize);
        for k in 0..n {
            let slot = self.slots.wrapping_add((r.wrapping_add(k) & self.mask) as usize);
            // SAFETY: the slot lies inside the slot array (masked index; from_raw's contract keeps it mapped).
            out.push(unsafe { load_slot(slot) });
        }
        fence(Ordering::Acquire);
        // Slots below the producer's `read` now may have been reused; `read` behind the copy (a counter another
        // process left inconsistent) means none were.
        let ahead = h.read.0.load(Ordering::Relaxed).wrapping_sub(r) as i64;
        let reused = (ahead.max(0) as u64).min(n) as usize;
        out.drain(before..before + reused);
        n as usize - reused
    }

    /// Appends the `n` (at most the capacity) slots from counter `r` on, wrapping at the end of the slot array.
    fn copy(&self, r: u64, n: u64, out: &mut Vec<RawEvent>) {
        let start = (r & self.mask) as usize;
        let n = n.min(self.capacity()) as usize;
        let first = n.min(self.capacity() as usize - start);
        out.reserve(n);
        // SAFETY: `start < capacity` and `first <= capacity - start`: the range lies inside the slot array
        // (from_raw's contract keeps it mapped while the view lives).
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(self.slots.wrapping_add(start), first) });
        // SAFETY: `n - first <= start`: the range lies at the start of the slot array.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(self.slots, n - first) });
    }
}

/// Words of a slot: a RawEvent is 64 bytes of plain data, 8-aligned.
const SLOT_WORDS: usize = std::mem::size_of::<RawEvent>() / 8;
const _: () = assert!(std::mem::size_of::<RawEvent>().is_multiple_of(8) && std::mem::align_of::<RawEvent>() >= 8);

/// Writes `ev` into `slot` as relaxed 64-bit atomic stores (plain moves on x86-64 and AArch64): a flight
/// recorder's snapshot ([`RingRef::peek_into`]) may read a slot while the producer rewrites it, which with plain
/// accesses would be a data race; atomic ones give at worst a torn copy, which the snapshot detects and drops.
/// The release store of `write` that follows publishes the slot to the consumer as before.
///
/// # Safety
/// `slot` points to a slot of a mapped ring, 8-aligned.
#[inline(always)]
unsafe fn store_slot(slot: *mut RawEvent, ev: &RawEvent) {
    let words: [u64; SLOT_WORDS] = bytemuck::cast(*ev);
    let base = slot as *const AtomicU64;
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: word `i` of the slot, aligned (the caller's contract); AtomicU64 has u64's layout.
        let word = unsafe { &*base.wrapping_add(i) };
        word.store(w, Ordering::Relaxed);
    }
}

/// The event in `slot`, read as [`store_slot`] writes it.
///
/// # Safety
/// As [`store_slot`].
#[inline]
unsafe fn load_slot(slot: *const RawEvent) -> RawEvent {
    let base = slot as *const AtomicU64;
    let mut words = [0u64; SLOT_WORDS];
    for (i, w) in words.iter_mut().enumerate() {
        // SAFETY: word `i` of the slot, aligned (the caller's contract).
        *w = unsafe { &*base.wrapping_add(i) }.load(Ordering::Relaxed);
    }
    bytemuck::cast(words)
}

/// Writes events: the one producer of its ring ([`RingRef::try_claim`]).
#[derive(Debug)]
pub struct Producer<'a> {
    ring: RingRef<'a>,
    cached_read: u64,
}

impl<'a> Producer<'a> {
    /// Appends `ev`; returns false (and counts a drop) when the ring is full. Never blocks, never allocates.
    #[inline]
    pub fn push(&mut self, ev: &RawEvent) -> bool {
        let h = self.ring.header();
        let w = h.write.0.load(Ordering::Relaxed);
        if w.wrapping_sub(self.cached_read) > self.ring.mask {
            self.cached_read = h.read.0.load(Ordering::Acquire);
            if w.wrapping_sub(self.cached_read) > self.ring.mask {
                let side = &h.producer_side.0;
                if side.overwrite.load(Ordering::Relaxed) == 0 {
                    side.dropped.store(side.dropped.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    return false;
                }
                // Discard the oldest event, whose slot this push reuses: `read` moves past it before the slot is
                // written (the fence orders the two, as a seqlock writer's), so a reader that copied the slot
                // while it changed sees `read` past it afterwards and drops its copy.
                self.cached_read = w.wrapping_sub(self.ring.mask);
                h.read.0.store(self.cached_read, Ordering::Relaxed);
                fence(Ordering::Release);
                side.overwritten.store(side.overwritten.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        }
        // SAFETY: slot `w & mask` lies inside the region (from_raw's contract) and is free: the consumer has
        // read everything below `cached_read` and never touches slots at or above `write`.
        unsafe { store_slot(self.ring.slots.wrapping_add((w & self.ring.mask) as usize), ev) };
        h.write.0.store(w.wrapping_add(1), Ordering::Release);
        true
    }

    /// The common push in one pass: room by the cached read counter, the write, and the watermark test on the same
    /// counters ([`Producer::push`] then [`Producer::above_watermark`] read them twice each). `Some(above)` when
    /// written, `above` saying the ring passed its watermark; `None` when the cached counter says full, written
    /// nothing: the caller takes the slow path (refresh, wait or count a drop).
    #[inline]
    pub fn push_fast(&mut self, ev: &RawEvent) -> Option<bool> {
        let h = self.ring.header();
        let w = h.write.0.load(Ordering::Relaxed);
        let mask = self.ring.mask;
        if w.wrapping_sub(self.cached_read) > mask {
            return None;
        }
        // SAFETY: slot `w & mask` lies inside the region (from_raw's contract) and is free: the consumer has
        // read everything below `cached_read` and never touches slots at or above `write`.
        unsafe { store_slot(self.ring.slots.wrapping_add((w & mask) as usize), ev) };
        let w = w.wrapping_add(1);
        h.write.0.store(w, Ordering::Release);
        if w.wrapping_sub(self.cached_read) <= mask / 4 {
            return Some(false);
        }
        self.cached_read = h.read.0.load(Ordering::Acquire);
        Some(w.wrapping_sub(self.cached_read) > mask / 4)
    }

    pub fn ring(&self) -> RingRef<'a> {
        self.ring
    }

    /// Gives the claim back: the ring's events stay for the consumer, and another thread may claim it.
    pub fn release(self) {
        self.ring.header().owner.0.store(0, Ordering::Release);
    }

    /// Whether a push now would be refused (reads the consumer's counter only when the cached one says full).
    #[inline]
    pub fn is_full(&mut self) -> bool {
        let w = self.ring.header().write.0.load(Ordering::Relaxed);
        if w.wrapping_sub(self.cached_read) <= self.ring.mask {
            return false;
        }
        self.cached_read = self.ring.header().read.0.load(Ordering::Acquire);
        w.wrapping_sub(self.cached_read) > self.ring.mask
    }

    /// Whether the ring is more than a quarter full (the watermark at which the agent wakes its collector, as
    /// perf's `wakeup_events` does): three quarters of the ring are left for the time the collector takes to be
    /// scheduled, which on a machine whose cores the program keeps busy is milliseconds. Costs a subtraction
    /// while the cached fill is below; reads the consumer's counter only above it.
    #[inline]
    pub fn above_watermark(&mut self) -> bool {
        let h = self.ring.header();
        let w = h.write.0.load(Ordering::Relaxed);
        if w.wrapping_sub(self.cached_read) <= self.ring.mask / 4 {
            return false;
        }
        self.cached_read = h.read.0.load(Ordering::Acquire);
        w.wrapping_sub(self.cached_read) > self.ring.mask / 4
    }
}

/// Drains events: the one consumer of its ring in this process (`MappedSegment::consumer`, [`HeapRing::split`]).
#[derive(Debug)]
pub struct Consumer<'a> {
    ring: RingRef<'a>,
    /// The flag that makes this the only consumer of its ring in this process, cleared on drop (None: the
    /// borrow of a [`HeapRing`] does it).
    taken: Option<&'a AtomicBool>,
}

impl<'a> Consumer<'a> {
    /// The consumer of `ring` unless `taken` says one is live; it clears `taken` when dropped.
    pub(crate) fn take(ring: RingRef<'a>, taken: &'a AtomicBool) -> Option<Consumer<'a>> {
        taken.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).ok()?;
        Some(Consumer { ring, taken: Some(taken) })
    }

    pub fn ring(&self) -> RingRef<'a> {
        self.ring
    }

    /// Discards every published event (what a collector that died left unread, before the next one takes over
    /// the segment) and forgets the drops counted so far (they were the last window's); returns how many events.
    /// Only while no producer writes (an agent between windows): the producer's own counter is reset here.
    pub fn skip_all(&mut self) -> u64 {
        let h = self.ring.header();
        h.producer_side.0.dropped.store(0, Ordering::Relaxed);
        let r = h.read.0.load(Ordering::Relaxed);
        let w = h.write.0.load(Ordering::Acquire);
        h.read.0.store(w, Ordering::Release);
        w.wrapping_sub(r).min(self.ring.capacity())
    }

    /// Moves every published event into `out`; returns how many. The producer's counters are untrusted (another
    /// process wrote them): an impossible distance is clamped to the capacity instead of reading out of bounds.
    pub fn drain_into(&mut self, out: &mut Vec<RawEvent>) -> usize {
        let h = self.ring.header();
        let mut r = h.read.0.load(Ordering::Relaxed);
        let w = h.write.0.load(Ordering::Acquire);
        let mut n = w.wrapping_sub(r);
        if n > self.ring.capacity() {
            r = w.wrapping_sub(self.ring.capacity());
            n = self.ring.capacity();
        }
        // The producer published these with its release store of `write` (acquired above) and will not overwrite
        // them until we advance `read` below.
        self.ring.copy(r, n, out);
        h.read.0.store(w, Ordering::Release);
        n as usize
    }
}

impl Drop for Consumer<'_> {
    fn drop(&mut self) {
        if let Some(taken) = self.taken {
            taken.store(false, Ordering::Release);
        }
    }
}

/// A ring in ordinary heap memory, for tests and benchmarks.
pub struct HeapRing {
    _mem: Vec<Align128>,
    /// The ring's memory, taken once from `_mem` (whose buffer never moves) and only used through views.
    base: *mut u8,
    capacity: u32,
}

// SAFETY: the ring's memory is owned by the HeapRing and only reached through views bound to its borrows.
unsafe impl Send for HeapRing {}
// SAFETY: as above; `&HeapRing` only hands out views, which use atomics.
unsafe impl Sync for HeapRing {}

#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct Align128([u8; 128]);

impl HeapRing {
    /// `capacity` is rounded up to a power of two.
    pub fn new(capacity: u32) -> HeapRing {
        let capacity = capacity.max(2).next_power_of_two();
        let mut mem = vec![Align128([0; 128]); ring_bytes(capacity).div_ceil(128)];
        let base = mem.as_mut_ptr() as *mut u8;
        HeapRing { _mem: mem, base, capacity }
    }

    /// A view of the ring (counters, mode, snapshots), for as long as the ring is borrowed.
    pub fn view(&self) -> RingRef<'_> {
        // SAFETY: `base` is 128-byte aligned, zeroed at first (a valid empty ring), large enough, and owned by
        // the HeapRing for the view's lifetime (moving a Vec does not move its buffer).
        unsafe { RingRef::from_raw(self.base, self.capacity) }
    }

    /// The two ends, for as long as the ring is borrowed: exactly one of each.
    pub fn split(&mut self) -> (Producer<'_>, Consumer<'_>) {
        let ring = self.view();
        let cached_read = ring.header().read.0.load(Ordering::Acquire);
        (Producer { ring, cached_read }, Consumer { ring, taken: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    fn ev(i: u64) -> RawEvent {
        RawEvent { a: i, ..RawEvent::new(EventKind::Api, 7, i, i + 1) }
    }

    #[test]
    fn full_ring_refuses_and_counts() {
        let mut ring = HeapRing::new(8);
        let (mut p, mut c) = ring.split();
        for i in 0..8 {
            assert!(p.push(&ev(i)));
        }
        assert!(!p.push(&ev(8)));
        assert!(!p.push(&ev(9)));
        assert_eq!(p.ring().dropped(), 2);
        let mut out = Vec::new();
        assert_eq!(c.drain_into(&mut out), 8);
        assert_eq!(out.iter().map(|e| e.a).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
        assert!(p.push(&ev(10)), "space freed by the drain is reused");
        // A new window: what was left and what was dropped are the last window's.
        assert_eq!(c.skip_all(), 1);
        assert_eq!(p.ring().dropped(), 0);
        assert_eq!(c.drain_into(&mut out), 0);
    }

    #[test]
    fn the_fast_push_agrees_with_push_and_watermark_and_leaves_full_to_the_slow_path() {
        let mut ring = HeapRing::new(16);
        let (mut p, mut c) = ring.split();
        for i in 0..16 {
            // Watermark: more than a quarter of the ring (mask 15 / 4 = 3 events) waiting.
            assert_eq!(p.push_fast(&ev(i)), Some(i + 1 > 3), "push {i}");
        }
        assert_eq!(p.push_fast(&ev(16)), None, "full: nothing written");
        assert_eq!(p.ring().dropped(), 0, "the slow path, not the fast one, counts drops");
        let mut out = Vec::new();
        assert_eq!(c.drain_into(&mut out), 16);
        assert_eq!(p.push_fast(&ev(17)), None, "a stale read counter sends it to the slow path");
        assert!(!p.is_full() && p.push(&ev(17)), "which refreshes the counter and writes");
        assert_eq!(p.push_fast(&ev(18)), Some(false));
        c.drain_into(&mut out);
        assert_eq!(out.iter().map(|e| e.a).collect::<Vec<_>>(), (0..16).chain([17, 18]).collect::<Vec<_>>());
    }

    #[test]
    fn wraps_around_in_order() {
        let mut ring = HeapRing::new(4);
        let (mut p, mut c) = ring.split();
        let mut out = Vec::new();
        for i in 0..103 {
            assert!(p.push(&ev(i)));
            if i % 3 == 2 {
                c.drain_into(&mut out);
            }
        }
        c.drain_into(&mut out);
        assert_eq!(out.iter().map(|e| e.a).collect::<Vec<_>>(), (0..103).collect::<Vec<_>>());
    }

    #[test]
    fn concurrent_producer_and_consumer_lose_nothing_but_counted_drops() {
        let mut ring = HeapRing::new(256);
        let (mut p, mut c) = ring.split();
        let view = p.ring();
        // Miri (scripts/test) interprets every access: fewer events, the same interleavings to explore.
        const N: u64 = if cfg!(miri) { 1_000 } else { 200_000 };
        std::thread::scope(|s| {
            let producer = s.spawn(move || {
                let mut pushed = Vec::new();
                for i in 0..N {
                    if p.push(&ev(i)) {
                        pushed.push(i);
                    }
                }
                pushed
            });
            let mut out = Vec::new();
            while !producer.is_finished() {
                c.drain_into(&mut out);
            }
            let pushed = producer.join().unwrap();
            c.drain_into(&mut out);
            assert_eq!(out.iter().map(|e| e.a).collect::<Vec<_>>(), pushed);
            assert_eq!(pushed.len() as u64 + view.dropped(), N);
        });
    }

    #[test]
    fn corrupt_counters_are_clamped_not_followed() {
        let mut ring = HeapRing::new(8);
        let (_, mut c) = ring.split();
        let view = c.ring();
        // Simulate a producer that scribbled its write counter far ahead.
        // SAFETY: the header is valid for the HeapRing's lifetime; tests poke the counter directly.
        unsafe { (*view.header).write.0.store(1 << 40, Ordering::Relaxed) };
        let mut out = Vec::new();
        assert_eq!(view.peek_into(&mut out), 8, "a snapshot is clamped the same way");
        out.clear();
        assert_eq!(c.drain_into(&mut out), 8);
        // A read counter claimed past the write counter: nothing to take, and nothing read out of bounds.
        // SAFETY: as above.
        unsafe { (*view.header).read.0.store((1 << 40) + 5, Ordering::Relaxed) };
        out.clear();
        assert!(view.peek_into(&mut out) <= 8);
    }

    #[test]
    fn overwrite_mode_keeps_the_newest_and_a_peek_takes_nothing() {
        let mut ring = HeapRing::new(8);
        ring.view().set_overwrite(true);
        let (mut p, _) = ring.split();
        let view = p.ring();
        for i in 0..21 {
            assert!(p.push(&ev(i)));
        }
        assert_eq!((view.dropped(), view.overwritten()), (0, 13));
        let mut out = Vec::new();
        assert_eq!(view.peek_into(&mut out), 8);
        assert_eq!(out.iter().map(|e| e.a).collect::<Vec<_>>(), (13..21).collect::<Vec<_>>());
        out.clear();
        assert_eq!(view.peek_into(&mut out), 8, "a peek leaves the events where they were");
        view.set_overwrite(false);
        assert!(!p.push(&ev(99)), "back in normal mode a full ring refuses");
        assert_eq!(view.dropped(), 1);
    }

    #[test]
    fn peeks_during_overwrites_return_only_whole_events_in_order() {
        let mut ring = HeapRing::new(64);
        ring.view().set_overwrite(true);
        let (mut p, _) = ring.split();
        let view = p.ring();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Every field derived from i: a torn copy would mix two events.
                    p.push(&RawEvent { a: i, b: !i, ..RawEvent::new(EventKind::Api, 7, i, i + 1) });
                    i += 1;
                }
            });
            for _ in 0..if cfg!(miri) { 50 } else { 20_000 } {
                let mut out = Vec::new();
                view.peek_into(&mut out);
                for pair in out.windows(2) {
                    assert_eq!(pair[0].a + 1, pair[1].a, "a snapshot is consecutive");
                }
                for e in &out {
                    assert_eq!((e.b, e.start, e.end), (!e.a, e.a, e.a + 1), "no torn event");
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    }

    #[test]
    fn one_owner_at_a_time() {
        let ring = HeapRing::new(8);
        let first = ring.view().try_claim(11).expect("free");
        assert!(ring.view().try_claim(12).is_none(), "one producer at a time");
        first.release();
        assert!(ring.view().try_claim(12).is_some());
        assert_eq!(ring.view().owner(), 12);
    }

    #[test]
    fn one_consumer_at_a_time_per_flag() {
        let ring = HeapRing::new(8);
        let taken = AtomicBool::new(false);
        let c = Consumer::take(ring.view(), &taken).expect("free");
        assert!(Consumer::take(ring.view(), &taken).is_none(), "one consumer at a time");
        drop(c);
        assert!(Consumer::take(ring.view(), &taken).is_some(), "given back on drop");
    }
}
