//! The hot path: per-thread rings in the process's segment and interned strings.
//!
//! A thread claims a free ring on its first event and keeps it in a thread-local until it exits; after that a
//! push is a plain SPSC write (no lock, no allocation, no syscall). Only a full ring with a live collector makes
//! a push wait, by yielding its core for at most 2 ms (see [`wait_for_room`]). Strings are interned into the segment's
//! string region once: a lock-free open-addressing table maps a 64-bit hash of the bytes to the string's id,
//! verified against the stored bytes; only a miss takes the interning lock.

use crate::state;
use cuflight_format::ring::Producer;
use cuflight_format::segment::MappedSegment;
use cuflight_format::RawEvent;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

struct ThreadRing {
    generation: u64,
    tid: u32,
    producer: Option<Producer>,
    /// Events until a thread without a ring looks for a free one again (threads exit and give theirs back).
    retry_in: u32,
}

/// How often a ring-less thread retries [`claim`] (a scan of every ring): rare enough to cost nothing per event.
const RETRY_CLAIM_EVERY: u32 = 4096;

impl Drop for ThreadRing {
    fn drop(&mut self) {
        // Give the ring back only if it belongs to the live segment (not a parent's, after fork).
        if self.generation == state::generation() {
            if let Some(p) = &self.producer {
                p.ring().release();
            }
        }
    }
}

/// Everything the agent keeps per thread, in one thread-local: inside a dlopen'ed library every thread-local
/// access is a `__tls_get_addr` call, so each callback touches this once.
pub struct ThreadState {
    ring: RefCell<ThreadRing>,
    /// Depth of runtime API calls: driver callbacks inside one are the runtime's own work.
    pub runtime_depth: Cell<u32>,
    /// NVTX push/pop nesting depth of the default domain (what nvtxRangePush returns).
    pub nvtx_depth: Cell<i32>,
    /// The same for other domains, (domain, depth): NVTX keeps one push/pop stack per domain and thread. A thread
    /// nesting ranges in more domains than this gets depths counted together for the extra ones.
    pub nvtx_domain_depths: [Cell<(u32, i32)>; 8],
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            ring: RefCell::new(ThreadRing { generation: u64::MAX, tid: 0, producer: None, retry_in: 0 }),
            runtime_depth: Cell::new(0),
            nvtx_depth: Cell::new(0),
            nvtx_domain_depths: [const { Cell::new((0, 0)) }; 8],
        }
    };
}

/// Runs `f` with this thread's state; None once the thread's TLS is gone (thread or process exit).
#[inline]
pub fn with_thread<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
    THREAD.try_with(f).ok()
}

/// System thread id of the caller (cached per thread; refreshed after fork).
pub fn tid() -> u32 {
    with_thread(|t| t.ring.try_borrow().ok().filter(|r| r.generation == state::generation()).map(|r| r.tid))
        .flatten()
        // SAFETY: gettid has no preconditions.
        .unwrap_or_else(|| unsafe { libc::gettid() as u32 })
}

/// Rings kept back from per-thread claims for the [`SharedRings`] (none in segments too small to spare them).
fn kept_back(ring_count: u32) -> u32 {
    if ring_count >= 4 {
        SHARED_RINGS
    } else {
        0
    }
}
const SHARED_RINGS: u32 = 2;
/// The owner recorded in a shared ring's header (no thread id reaches it: pid_max is at most 2^22).
const SHARED_OWNER: u32 = u32::MAX;

/// A free ring for thread `tid`: a reserved one given back by an exited thread, else a newly reserved one (rings
/// are reserved on demand up to the segment's count less those kept for [`SharedRings`]; see `segment`). Cold:
/// once per thread.
fn claim(seg: &MappedSegment, tid: u32) -> Option<Producer> {
    let limit = seg.layout().ring_count - kept_back(seg.layout().ring_count);
    loop {
        let n = seg.reserved_rings();
        let found = (0..n).map(|i| (tid.wrapping_mul(2654435761) % n.max(1) + i) % n.max(1)).find_map(|i| {
            let ring = seg.ring(i)?;
            ring.try_claim(tid).then(|| ring.producer())
        });
        if found.is_some() {
            return found;
        }
        // Every reserved ring is taken: reserve another (None at the limit, or without memory: counted).
        let i = seg.reserve_ring_below(limit)?;
        let ring = seg.ring(i)?;
        if ring.try_claim(tid) {
            return Some(ring.producer());
        }
    }
}

/// Rings no single thread owns, each taken with a `try_lock` that never waits:
///
/// - **delivery**: CUPTI hands over device records (kernels, copies) in buffers, on its own thread or on whichever
///   thread flushes. Those records get a ring that idle or surplus application threads can never take, so a
///   process with more CUDA threads than rings still records every kernel.
/// - **overflow**: for events of threads that found every per-thread ring taken (more threads than rings, or
///   rings held by threads that went idle), instead of losing them.
///
/// Each is reserved on first use from the rings kept back for them (see [`kept_back`]). A `try_lock` that finds
/// the ring busy falls back (delivery: to the thread's own ring; overflow: counted as `no_ring`).
#[derive(Default)]
pub struct SharedRings {
    delivery: parking_lot::Mutex<Shared>,
    overflow: parking_lot::Mutex<Shared>,
}

#[derive(Default)]
struct Shared {
    producer: Option<Producer>,
    /// Reservation was tried and failed (no memory, or no ring left): do not retry on every buffer.
    failed: bool,
}

impl Shared {
    fn producer(&mut self, seg: &MappedSegment) -> Option<&mut Producer> {
        if self.producer.is_none() && !self.failed {
            let ring = seg.reserve_ring().and_then(|i| seg.ring(i)).filter(|r| r.try_claim(SHARED_OWNER));
            self.producer = ring.map(|r| r.producer());
            self.failed = self.producer.is_none();
        }
        self.producer.as_mut()
    }
}

/// Where one CUPTI buffer's records go: the delivery ring while this thread holds it, else the thread's own.
pub struct Delivery {
    shared: Option<parking_lot::MutexGuard<'static, Shared>>,
    tid: u32,
}

/// Takes the delivery ring for one buffer (see [`SharedRings`]); never waits.
pub fn delivery() -> Delivery {
    let shared = state::agent().and_then(|a| {
        let mut guard = a.shared.delivery.try_lock()?;
        guard.producer(&a.seg)?;
        Some(guard)
    });
    // SAFETY: gettid has no preconditions.
    Delivery { shared, tid: unsafe { libc::gettid() as u32 } }
}

impl Delivery {
    /// Writes `ev` (its `tid` filled in when 0); a full ring refuses and counts it.
    pub fn push(&mut self, mut ev: RawEvent) {
        match self.shared.as_mut().and_then(|s| s.producer.as_mut()) {
            Some(p) => {
                if ev.tid == 0 {
                    ev.tid = self.tid;
                }
                push_and_wake(p, &ev);
            }
            None => push(ev),
        }
    }

    /// (free slots, capacity) of the ring this delivery writes to.
    pub fn space(&self) -> Option<(u64, u64)> {
        match self.shared.as_ref().and_then(|s| s.producer.as_ref()) {
            Some(p) => Some(space_of(p)),
            None => ring_space(),
        }
    }
}

const OVERFLOW_TRIES: u32 = 256;

/// Pushes into the overflow ring; false when it stays busy or could not be had.
#[cold]
fn push_overflow(ev: &RawEvent) -> bool {
    let Some(a) = state::existing_agent() else { return false };
    // A push holds the lock for tens of nanoseconds: a few hundred tries (a few microseconds at most, even when
    // the holder was preempted) find it free almost always, and never sleep.
    let Some(mut guard) = (0..OVERFLOW_TRIES).find_map(|_| {
        let g = a.shared.overflow.try_lock();
        if g.is_none() {
            std::hint::spin_loop();
        }
        g
    }) else {
        return false;
    };
    let Some(p) = guard.producer(&a.seg) else { return false };
    push_and_wake(p, ev);
    true
}

/// A collector that has not drained for this long is gone or stuck: its rings are never waited on.
const COLLECTOR_SILENT_NS: u64 = 1_000_000_000;
/// Longest a thread yields its core to the collector for one event when its ring is full.
const FULL_RING_YIELD_NS: u64 = 2_000_000;

/// The collector drained this segment within the last second (its heartbeat; 0 once it stopped).
pub fn collector_draining(seg: &MappedSegment) -> bool {
    let last = seg.header().collector_drained_ns.load(Ordering::Relaxed);
    last != 0 && crate::clock::monotonic_ns().saturating_sub(last) < COLLECTOR_SILENT_NS
}

/// A full ring with a live collector: the collector was woken at the watermark but has not run yet, which on a
/// machine whose cores the program keeps busy takes milliseconds. Yield this core to it (never sleep) for at most
/// [`FULL_RING_YIELD_NS`]; a collector that is gone or stalled is never waited for, and what still does not fit
/// is counted by the ring.
/// A collector that has not drained for [`STALLED_NS`] although woken is stalled (stopped, killed, or starved):
/// no thread waits for it again until it drains, so a dead collector costs the program a few waits, not one per
/// event until its heartbeat goes stale.
#[cold]
#[inline(never)]
fn wait_for_room(seg: &MappedSegment, p: &mut Producer) {
    let beat = seg.header().collector_drained_ns.load(Ordering::Relaxed);
    if !collector_draining(seg) || GAVE_UP_AT.load(Ordering::Relaxed) == beat {
        return;
    }
    wake();
    let start = crate::clock::monotonic_ns();
    while p.is_full() {
        let now = crate::clock::monotonic_ns();
        if now.saturating_sub(start) >= FULL_RING_YIELD_NS {
            let latest = seg.header().collector_drained_ns.load(Ordering::Relaxed);
            if now.saturating_sub(latest) >= STALLED_NS {
                GAVE_UP_AT.store(latest, Ordering::Relaxed);
            }
            return;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}
static GAVE_UP_AT: AtomicU64 = AtomicU64::new(u64::MAX);
/// A woken collector drains within a millisecond or two even on a busy machine; ten is stalled.
const STALLED_NS: u64 = 10_000_000;

/// Writes `ev` into `p` and wakes the collector when the ring passes its watermark (once until the collector has
/// drained). A full ring refuses the event and counts it itself.
#[inline]
fn push_and_wake(p: &mut Producer, ev: &RawEvent) {
    if p.push(ev) && p.above_watermark() {
        wake();
    }
}

/// (free slots, capacity) of the ring `p` writes to.
fn space_of(p: &Producer) -> (u64, u64) {
    let ring = p.ring();
    (ring.capacity().saturating_sub(ring.len()), ring.capacity())
}

#[cold]
fn wake() {
    if let Some(a) = state::existing_agent() {
        if a.seg.header().wake_pending.swap(1, Ordering::Relaxed) == 0 {
            cuflight_format::channel::wake(std::os::fd::AsRawFd::as_raw_fd(&a.conn));
        }
    }
}

impl ThreadState {
    /// Writes `ev` (its `tid` filled in when 0) into this thread's ring; see [`push`].
    #[inline]
    pub fn push(&self, mut ev: RawEvent) {
        let Some(seg) = state::segment() else { return };
        if !self.try_push(seg, &mut ev) {
            fallback(seg, &mut ev);
        }
    }

    /// False when the event could not even be offered to a ring (no ring, or re-entered).
    fn try_push(&self, seg: &MappedSegment, ev: &mut RawEvent) -> bool {
        let Ok(mut r) = self.ring.try_borrow_mut() else { return false };
        let generation = state::generation();
        if r.generation != generation {
            // First event of this thread, or first after fork: never reuse a parent's ring.
            r.generation = generation;
            // SAFETY: gettid has no preconditions.
            r.tid = unsafe { libc::gettid() as u32 };
            r.producer = claim(seg, r.tid);
            r.retry_in = RETRY_CLAIM_EVERY;
        } else if r.producer.is_none() {
            r.retry_in = r.retry_in.saturating_sub(1);
            if r.retry_in == 0 {
                r.producer = claim(seg, r.tid);
                r.retry_in = RETRY_CLAIM_EVERY;
            }
        }
        if ev.tid == 0 {
            ev.tid = r.tid;
        }
        match r.producer.as_mut() {
            Some(p) => {
                if p.is_full() {
                    wait_for_room(seg, p);
                }
                push_and_wake(p, ev);
                true
            }
            None => false,
        }
    }
}

impl ThreadState {
    /// This thread's push/pop depth cell for `domain` (0 = the default domain).
    pub fn nvtx_depth_of(&self, domain: u32) -> NvtxDepth<'_> {
        if domain == 0 {
            return NvtxDepth::Default(&self.nvtx_depth);
        }
        let slots = &self.nvtx_domain_depths;
        let i = slots
            .iter()
            .position(|c| c.get().0 == domain)
            .or_else(|| slots.iter().position(|c| c.get().1 == 0))
            .unwrap_or(slots.len() - 1);
        if slots[i].get().1 == 0 {
            slots[i].set((domain, 0));
        }
        NvtxDepth::Domain(&slots[i])
    }
}

/// A push/pop depth of one domain on one thread.
pub enum NvtxDepth<'a> {
    Default(&'a Cell<i32>),
    Domain(&'a Cell<(u32, i32)>),
}

impl NvtxDepth<'_> {
    pub fn get(&self) -> i32 {
        match self {
            NvtxDepth::Default(c) => c.get(),
            NvtxDepth::Domain(c) => c.get().1,
        }
    }
    pub fn set(&self, v: i32) {
        match self {
            NvtxDepth::Default(c) => c.set(v),
            NvtxDepth::Domain(c) => c.set((c.get().0, v)),
        }
    }
}

/// (free slots, capacity) of the calling thread's ring (None before its first event or without TLS).
pub fn ring_space() -> Option<(u64, u64)> {
    with_thread(|t| {
        let r = t.ring.try_borrow().ok()?;
        Some(space_of(r.producer.as_ref()?))
    })
    .flatten()
}

/// Writes `ev` (its `tid` filled in when 0) into the calling thread's ring. Never blocks; a full ring or a
/// missing ring counts the loss.
pub fn push(mut ev: RawEvent) {
    let Some(seg) = state::segment() else { return };
    if with_thread(|t| t.try_push(seg, &mut ev)) != Some(true) {
        // The thread's TLS is gone (glibc destroys the main thread's TLS before atexit handlers, where the
        // final CUPTI flush runs) or busy: borrow a free ring for this one event.
        fallback(seg, &mut ev);
    }
}

/// For a thread without a ring of its own: the overflow ring, else a free ring borrowed for this one event, else
/// the event is counted as lost for want of a ring (a ring that refuses an event counts it itself: each loss is
/// counted exactly once).
#[cold]
fn fallback(seg: &MappedSegment, ev: &mut RawEvent) {
    if ev.tid == 0 {
        ev.tid = tid();
    }
    if !push_overflow(ev) && !push_borrowed(seg, ev) {
        seg.header().no_ring_drops.fetch_add(1, Ordering::Relaxed);
    }
}

/// Slow path: claims any free ring for one push and gives it back. False only when no ring could be claimed.
#[cold]
fn push_borrowed(seg: &MappedSegment, ev: &mut RawEvent) -> bool {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() as u32 };
    if ev.tid == 0 {
        ev.tid = tid;
    }
    let Some(mut producer) = claim(seg, tid) else {
        return false;
    };
    push_and_wake(&mut producer, ev);
    producer.ring().release();
    true
}

const TABLE: usize = 1 << 16;

/// Interned strings of the current segment.
pub struct Interner {
    keys: Box<[AtomicU64]>,
    ids: Box<[AtomicU32]>,
    lock: parking_lot::Mutex<()>,
}

impl Interner {
    pub fn new() -> Self {
        Interner {
            keys: (0..TABLE).map(|_| AtomicU64::new(0)).collect(),
            ids: (0..TABLE).map(|_| AtomicU32::new(0)).collect(),
            lock: parking_lot::Mutex::new(()),
        }
    }

    /// Id of `s` in `seg`'s string region, appending it on first sight; 0 if the region or table is full.
    pub fn intern(&self, seg: &MappedSegment, s: &[u8]) -> u32 {
        let h = hash(s) | 1;
        if let Some(id) = self.find(seg, h, s) {
            return id;
        }
        let _guard = self.lock.lock();
        if let Some(id) = self.find(seg, h, s) {
            return id;
        }
        let mut slot = h as usize & (TABLE - 1);
        for _ in 0..64 {
            if self.keys[slot].load(Ordering::Relaxed) == 0 {
                let Some(id) = seg.append_string(s) else {
                    return 0;
                };
                self.ids[slot].store(id, Ordering::Relaxed);
                self.keys[slot].store(h, Ordering::Release);
                return id;
            }
            slot = (slot + 1) & (TABLE - 1);
        }
        // Table neighbourhood full: store the string anyway, uncached.
        seg.append_string(s).unwrap_or(0)
    }

    fn find(&self, seg: &MappedSegment, h: u64, s: &[u8]) -> Option<u32> {
        let mut slot = h as usize & (TABLE - 1);
        for _ in 0..64 {
            let k = self.keys[slot].load(Ordering::Acquire);
            if k == 0 {
                return None;
            }
            if k == h {
                let id = self.ids[slot].load(Ordering::Relaxed);
                if stored_equals(seg, id, s) {
                    return Some(id);
                }
            }
            slot = (slot + 1) & (TABLE - 1);
        }
        None
    }
}

impl Default for Interner {
    fn default() -> Self {
        Self::new()
    }
}

fn stored_equals(seg: &MappedSegment, id: u32, s: &[u8]) -> bool {
    let bytes = seg.strings_since(id as u64);
    bytes.len() >= 4 + s.len() && bytes[..4] == (s.len() as u32).to_le_bytes() && &bytes[4..4 + s.len()] == s
}

/// A fast 64-bit hash (FxHash-style multiply-rotate over 8-byte words); quality is enough for a probe table
/// whose hits are verified byte for byte.
pub fn hash(s: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = s.len() as u64;
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    (h.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K)
}

/// Interns `s` in this process's segment (0 when not recording).
pub fn intern(s: &[u8]) -> u32 {
    state::intern(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::segment::Layout;

    #[test]
    fn interning_is_idempotent_and_distinguishes_strings() {
        let seg = MappedSegment::create(Layout { ring_count: 1, ring_capacity: 2, strings_capacity: 1 << 16 }, 1, 0, 0)
            .unwrap();
        let i = Interner::new();
        let a = i.intern(&seg, b"gemm_kernel");
        let b = i.intern(&seg, b"relu_kernel");
        assert_ne!(a, b);
        assert_eq!(i.intern(&seg, b"gemm_kernel"), a);
        assert_eq!(i.intern(&seg, b""), i.intern(&seg, b""));
    }

    #[test]
    fn threads_never_take_the_rings_kept_for_delivery_and_overflow() {
        let seg =
            MappedSegment::create(Layout { ring_count: 8, ring_capacity: 64, strings_capacity: 1 << 16 }, 1, 0, 0)
                .unwrap();
        let claimed = (1..=20).filter(|&tid| claim(&seg, tid).is_some()).count();
        assert_eq!(claimed, 6, "8 rings less the 2 kept back");
        let (mut delivery, mut overflow) = (Shared::default(), Shared::default());
        assert!(delivery.producer(&seg).is_some());
        assert!(overflow.producer(&seg).is_some());
        assert_eq!(seg.reserved_rings(), 8);
        assert_eq!(seg.ring(7).unwrap().owner(), SHARED_OWNER);
        // Nothing left: a third shared ring is refused once, then not retried.
        let mut third = Shared::default();
        assert!(third.producer(&seg).is_none() && third.failed);
        // A segment too small to spare rings gives them all to threads.
        let tiny =
            MappedSegment::create(Layout { ring_count: 2, ring_capacity: 64, strings_capacity: 1 << 16 }, 1, 0, 0)
                .unwrap();
        assert_eq!((1..=5).filter(|&tid| claim(&tiny, tid).is_some()).count(), 2);
    }

    #[test]
    fn hash_depends_on_every_byte() {
        assert_ne!(hash(b"abcdefgh1"), hash(b"abcdefgh2"));
        assert_ne!(hash(b"a"), hash(b"a\0"));
    }
}
