//! The hot path: per-thread rings in the process's segment and interned strings.
//!
//! A thread claims a free ring on its first event and keeps it in a thread-local until it exits; after that a
//! push is a plain SPSC write (no lock, no allocation, no syscall). Strings are interned into the segment's
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
}

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
            ring: RefCell::new(ThreadRing { generation: u64::MAX, tid: 0, producer: None }),
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

/// A free ring for thread `tid`: a reserved one given back by an exited thread, else a newly reserved one (rings
/// are reserved on demand up to the segment's count; see `segment`). Cold: once per thread.
fn claim(seg: &MappedSegment, tid: u32) -> Option<Producer> {
    loop {
        let n = seg.reserved_rings();
        let found = (0..n).map(|i| (tid.wrapping_mul(2654435761) % n.max(1) + i) % n.max(1)).find_map(|i| {
            let ring = seg.ring(i)?;
            ring.try_claim(tid).then(|| ring.producer())
        });
        if found.is_some() {
            return found;
        }
        // Every reserved ring is taken: reserve another (None at the count, or without memory: counted).
        let i = seg.reserve_ring()?;
        let ring = seg.ring(i)?;
        if ring.try_claim(tid) {
            return Some(ring.producer());
        }
    }
}

/// Wakes the collector when a ring passes its watermark, once until the collector has drained.
#[inline]
fn maybe_wake(p: &mut Producer) {
    if p.above_watermark() {
        wake();
    }
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
        }
        if ev.tid == 0 {
            ev.tid = r.tid;
        }
        match r.producer.as_mut() {
            Some(p) => {
                // A full ring refuses and counts the event itself.
                if p.push(ev) {
                    maybe_wake(p);
                }
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
        let ring = r.producer.as_ref()?.ring();
        Some((ring.capacity().saturating_sub(ring.len()), ring.capacity()))
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

/// Counts the event as lost for want of a ring, unless a borrowed ring took it (or refused it, which the ring
/// counted itself: each loss is counted exactly once).
#[cold]
fn fallback(seg: &MappedSegment, ev: &mut RawEvent) {
    if !push_borrowed(seg, ev) {
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
    if producer.push(ev) {
        maybe_wake(&mut producer);
    }
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
    fn hash_depends_on_every_byte() {
        assert_ne!(hash(b"abcdefgh1"), hash(b"abcdefgh2"));
        assert_ne!(hash(b"a"), hash(b"a\0"));
    }
}
