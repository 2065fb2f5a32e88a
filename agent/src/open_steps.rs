//! The steps in progress where steps are only timed (the flight recorder's slow-step dumps, [`crate::slow_steps`]):
//! every thread's own. Threads that step at once (a server with a thread per GPU, a pipeline's stages) are each
//! watched; with one step open process-wide, a thread that began its next step as soon as its last ended held the
//! watch for good, and a straggler on any other thread was never seen. Sampling (`record --sample`) records one
//! step at a time process-wide instead, since CUPTI is armed for the whole process ([`crate::sampler`]).
//!
//! A step a thread pushed (NVTX push/pop) is known to that thread alone, through its [`Mark`] in the thread state:
//! a pop compares two thread-local numbers and asks nothing shared. A start/end step (`nvtxRangeStartA`,
//! `cuflight.step()`), whose end may come from another thread, is found by its range id among the open ones, read
//! without a lock and only while one is open. Only a step's beginning and end take the lock, as before. A thread
//! that exits with its step open gives the step up: it never ended, so it is not timed, and it holds no slot.

use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Steps open at once that are watched: a step begun while all are taken is not timed.
pub const SLOTS: usize = 32;

/// An open step: when it began, its kind ([`crate::slow_steps::kind_index`]) and the thread that began it.
#[derive(Clone, Copy)]
pub struct Open {
    pub started_ns: u64,
    pub class: u8,
    pub thread: u32,
}

static OPEN: Mutex<[Option<Open>; SLOTS]> = Mutex::new([None; SLOTS]);
/// The range ids of the open start/end steps by slot (0: none; NVTX range ids start at 1), and how many there are.
static STARTED_IDS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static STARTED_OPEN: AtomicU32 = AtomicU32::new(0);

/// Per thread: the slot of the step it pushed (0: none, else index + 1) and the domain and depth its pop returns to.
pub struct Mark {
    slot: Cell<u32>,
    domain: Cell<u32>,
    depth: Cell<i32>,
}

impl Mark {
    pub const fn new() -> Mark {
        Mark { slot: Cell::new(0), domain: Cell::new(0), depth: Cell::new(0) }
    }
}

impl Drop for Mark {
    /// The thread exits with its step open: the step is given up (run at thread exit, never on a call).
    fn drop(&mut self) {
        if let Some(i) = (self.slot.get() as usize).checked_sub(1) {
            let _ = std::panic::catch_unwind(|| OPEN.lock()[i] = None);
        }
    }
}

/// Which open step ended, from [`popping`] or [`ending`], for [`ended`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(usize);

fn claim(open: Open) -> Option<usize> {
    let mut all = OPEN.lock();
    let i = all.iter().position(Option::is_none)?;
    all[i] = Some(open);
    Some(i)
}

/// A range is pushed on this thread (`mark`; `thread` names it) at `at` in `domain`, whose depth was `depth`: it
/// begins a step if `step` says it is one (its kind) and the thread has none open (a step inside it is part of it).
pub fn pushed(
    mark: &Mark,
    thread: impl FnOnce() -> u32,
    (domain, depth, at): (u32, i32, u64),
    step: impl FnOnce() -> Option<u8>,
) {
    if mark.slot.get() != 0 {
        return;
    }
    let Some(class) = step() else { return };
    if let Some(i) = claim(Open { started_ns: at, class, thread: thread() }) {
        mark.slot.set(i as u32 + 1);
        mark.domain.set(domain);
        mark.depth.set(depth);
    }
}

/// A range is popped on this thread in `domain`, its depth falling to `depth`: the step it ends, if it ends one.
#[inline]
pub fn popping(mark: &Mark, domain: u32, depth: i32) -> Option<Slot> {
    let s = mark.slot.get();
    if s == 0 || mark.domain.get() != domain || mark.depth.get() != depth {
        return None;
    }
    mark.slot.set(0);
    Some(Slot(s as usize - 1))
}

/// A start/end range `id` starts (`thread` and `at` say where and when): it begins a step if `step` says it is one.
pub fn started(id: u64, thread: impl FnOnce() -> u32, at: impl FnOnce() -> u64, step: impl FnOnce() -> Option<u8>) {
    let Some(class) = step() else { return };
    if let Some(i) = claim(Open { started_ns: at(), class, thread: thread() }) {
        STARTED_IDS[i].store(id, Ordering::Release);
        STARTED_OPEN.fetch_add(1, Ordering::AcqRel);
    }
}

/// A start/end range `id` ends: the step it ends, if it is one (once: a second end of the same id ends nothing).
#[inline]
pub fn ending(id: u64) -> Option<Slot> {
    if id == 0 || STARTED_OPEN.load(Ordering::Acquire) == 0 {
        return None;
    }
    let i = STARTED_IDS.iter().position(|s| s.load(Ordering::Acquire) == id)?;
    STARTED_IDS[i].compare_exchange(id, 0, Ordering::AcqRel, Ordering::Acquire).ok()?;
    STARTED_OPEN.fetch_sub(1, Ordering::AcqRel);
    Some(Slot(i))
}

/// The step in `slot` ended (its pop or end is written): what it was, and its slot is free again.
pub fn ended(slot: Slot) -> Option<Open> {
    OPEN.lock().get_mut(slot.0).and_then(Option::take)
}

/// The steps open now (for the control thread's look at steps that run too long).
pub fn open_now() -> impl Iterator<Item = Open> {
    let all = *OPEN.lock();
    all.into_iter().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each thread's pushed step ends at its own pop, whatever other threads have open; a nested step-named range
    /// is part of the step; a step given up at thread exit frees its slot.
    #[test]
    fn threads_step_at_once() {
        let step = || Some(0u8);
        let handles: Vec<_> = (0..4u32)
            .map(|t| {
                std::thread::spawn(move || {
                    let mark = Mark::new();
                    for k in 0..100u64 {
                        pushed(&mark, || t, (7, 0, k), step);
                        pushed(&mark, || t, (7, 1, k), step);
                        assert_eq!(popping(&mark, 7, 1), None, "the nested range ends no step");
                        assert_eq!(popping(&mark, 8, 0), None, "another domain's pop ends no step");
                        let slot = popping(&mark, 7, 0).expect("its own pop ends its step");
                        let open = ended(slot).expect("open");
                        assert_eq!((open.thread, open.started_ns), (t, k));
                    }
                    pushed(&mark, || t, (7, 0, 1), step); // left open: given up when `mark` drops
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(open_now().filter(|o| o.thread < 4).count(), 0);
        // Start/end steps: ended once, by id, from any thread.
        started(1234, || 9, || 5, step);
        started(1235, || 9, || 6, || None);
        assert_eq!(ending(1235), None, "not a step");
        let slot = ending(1234).expect("a step");
        assert_eq!(ending(1234), None, "ended once");
        assert_eq!(ended(slot).map(|o| o.started_ns), Some(5));
    }
}
