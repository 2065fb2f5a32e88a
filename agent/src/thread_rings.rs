//! The hot path: where an event goes (the thread's own ring, CUPTI's delivery ring, the overflow ring) and what
//! happens when it is full.
//!
//! A thread claims a free ring on its first event ([`crate::rings`]) and keeps it in a thread-local until it
//! exits; after that a push is a plain SPSC write (no lock, no allocation, no syscall). Only a full ring with a
//! live collector makes a push wait, by yielding its core for at most 2 ms (see [`wait_for_room`]). Strings go
//! through the segment's interner ([`crate::interner`]).

use crate::rings::{claim, Shared};
use crate::state;
use cuflight_format::ring::Producer;
use cuflight_format::segment::MappedSegment;
use cuflight_format::RawEvent;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

struct ThreadRing {
    generation: u64,
    tid: u32,
    /// Of this process's segment, which lives as long as the process (`state`: leaked on purpose).
    producer: Option<Producer<'static>>,
    /// Events until a thread without a ring looks for a free one again (threads exit and give theirs back).
    retry_in: u32,
    /// The strings epoch ([`state::strings_epoch`]: a window, a fork) this thread last gave its OS name in.
    named_epoch: u64,
}

/// How often a ring-less thread retries [`claim`] (a scan of every ring): rare enough to cost nothing per event.
const RETRY_CLAIM_EVERY: u32 = 4096;

impl Drop for ThreadRing {
    fn drop(&mut self) {
        // Give the ring back only if it belongs to the live segment (not a parent's, after fork).
        if self.generation == state::generation() {
            if let Some(p) = self.producer.take() {
                p.release();
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
    /// The recording window `runtime_depth` was counted in ([`crate::callbacks::new_window`]): a call in flight
    /// when a window ended never delivers its exit (a detach finalizes CUPTI), so a depth from an earlier window
    /// is stale.
    pub depth_window: Cell<u32>,
    /// NVTX push/pop nesting depth of the default domain (what nvtxRangePush returns).
    pub nvtx_depth: Cell<i32>,
    /// The same for other domains, (domain, depth): NVTX keeps one push/pop stack per domain and thread. A thread
    /// nesting ranges in more domains than this gets depths counted together for the extra ones.
    pub nvtx_domain_depths: [Cell<(u32, i32)>; 8],
    /// The Python stack reader's cache and launch count.
    pub py: crate::pystack::ThreadPy,
    /// The step this thread pushed, where steps are timed for slow-step dumps.
    pub open_step: crate::open_steps::Mark,
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            ring: RefCell::new(ThreadRing {
                generation: u64::MAX,
                tid: 0,
                producer: None,
                retry_in: 0,
                named_epoch: 0,
            }),
            runtime_depth: Cell::new(0),
            depth_window: Cell::new(0),
            nvtx_depth: Cell::new(0),
            nvtx_domain_depths: [const { Cell::new((0, 0)) }; 8],
            py: crate::pystack::ThreadPy::new(),
            open_step: crate::open_steps::Mark::new(),
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
        .unwrap_or_else(cuflight_format::channel::thread_id)
}

/// Where one CUPTI buffer's records go: the delivery ring while this thread holds it, else the thread's own.
pub struct Delivery {
    shared: Option<parking_lot::MutexGuard<'static, Shared<'static>>>,
    tid: u32,
}

/// Takes the delivery ring for one buffer (see [`crate::rings::SharedRings`]); never waits.
pub fn delivery() -> Delivery {
    let shared = state::agent().and_then(|a| {
        let mut guard = a.shared.delivery.try_lock()?;
        guard.producer(&a.seg)?;
        Some(guard)
    });
    Delivery { shared, tid: cuflight_format::channel::thread_id() }
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
/// A thread whose ring is full first yields its core to the collector for this long...
const FULL_RING_YIELD_NS: u64 = 2_000_000;
/// ... then sleeps in short steps, up to this long in all for one event: on a machine whose cores other processes
/// keep busy the woken collector may wait tens of milliseconds for a core (measured on cudasim, 2 cores, two CPU
/// hogs: 3 of 10 three-second floods lost 633 to 44,743 events with a 2 ms limit).
const FULL_RING_WAIT_NS: u64 = 100_000_000;
const FULL_RING_SLEEP: std::time::Duration = std::time::Duration::from_micros(100);

/// The collector drained this segment within the last second (its heartbeat; 0 once it stopped).
pub fn collector_draining(seg: &MappedSegment) -> bool {
    let last = seg.header().collector_drained_ns.load(Ordering::Relaxed);
    last != 0 && crate::clock::monotonic_ns().saturating_sub(last) < COLLECTOR_SILENT_NS
}

/// A full ring with a live collector: the collector was woken at the watermark but has not run yet, which on a
/// machine whose cores the program keeps busy takes milliseconds. Yield this core to it for
/// [`FULL_RING_YIELD_NS`], then give the core up in 100 µs sleeps, up to [`FULL_RING_WAIT_NS`]: backpressure,
/// the price of losing nothing, added up in the segment (`program_held_ns`) and reported. A collector that is
/// gone or stalled is never waited for, and what still does not fit is counted by the ring.
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
    let mut now = start;
    while p.is_full() {
        now = crate::clock::monotonic_ns();
        let waited = now.saturating_sub(start);
        if waited >= FULL_RING_WAIT_NS {
            let latest = seg.header().collector_drained_ns.load(Ordering::Relaxed);
            if now.saturating_sub(latest) >= STALLED_NS {
                GAVE_UP_AT.store(latest, Ordering::Relaxed);
            }
            break;
        }
        if waited < FULL_RING_YIELD_NS {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        } else {
            std::thread::sleep(FULL_RING_SLEEP);
        }
    }
    // What losing nothing cost, stated beside the drops: the program's threads, or the agent's own (the counter
    // sampler), whose waits hold nothing of the program's and are told apart from its.
    let held = now.saturating_sub(start);
    let header = seg.header();
    if AGENT_THREAD.with(Cell::get) {
        header.delivery_held_ns.fetch_add(held, Ordering::Relaxed);
    } else {
        header.program_held_ns.fetch_add(held, Ordering::Relaxed);
    }
}

thread_local! {
    /// Set on the agent's own threads that write through [`push`] (the counter sampler).
    static AGENT_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one of the agent's own: its waits for room are not counted as the program's.
pub fn mark_agent_thread() {
    AGENT_THREAD.with(|a| a.set(true));
}
static GAVE_UP_AT: AtomicU64 = AtomicU64::new(u64::MAX);
/// A woken collector that has not drained for this long, a full wait included, is stalled (stopped, killed).
const STALLED_NS: u64 = 100_000_000;

/// Writes `ev` into `p` and wakes the collector when the ring passes its watermark (once until the collector has
/// drained). A full ring refuses the event and counts it itself.
#[inline]
fn push_and_wake(p: &mut Producer, ev: &RawEvent) {
    let above = match p.push_fast(ev) {
        Some(above) => above,
        None => p.push(ev) && p.above_watermark(),
    };
    if above {
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
    fn try_push(&self, seg: &'static MappedSegment, ev: &mut RawEvent) -> bool {
        let Ok(mut r) = self.ring.try_borrow_mut() else { return false };
        let generation = state::generation();
        if r.generation != generation {
            // First event of this thread, or first after fork: never reuse a parent's ring.
            r.generation = generation;
            r.tid = cuflight_format::channel::thread_id();
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
        let epoch = state::strings_epoch();
        if r.named_epoch != epoch && r.producer.is_some() {
            // This thread's first event of the window: its OS name first ([`crate::thread_names`]).
            r.named_epoch = epoch;
            let tid = r.tid;
            if let (Some(mut name), Some(p)) = (crate::thread_names::first_event_name(tid), r.producer.as_mut()) {
                name.tid = tid;
                push_and_wake(p, &name);
            }
        }
        match r.producer.as_mut() {
            Some(p) => {
                match p.push_fast(ev) {
                    Some(false) => {}
                    Some(true) => wake(),
                    None => {
                        if p.is_full() {
                            wait_for_room(seg, p);
                        }
                        push_and_wake(p, ev);
                    }
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
    let tid = cuflight_format::channel::thread_id();
    if ev.tid == 0 {
        ev.tid = tid;
    }
    let Some(mut producer) = claim(seg, tid) else {
        return false;
    };
    push_and_wake(&mut producer, ev);
    producer.release();
    true
}

/// Interns `s` in this process's segment (0 when not recording).
pub fn intern(s: &[u8]) -> u32 {
    state::intern(s)
}
