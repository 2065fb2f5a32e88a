//! Rings of this process's segment and who may write them: a thread claims one of its own ([`claim`]); two are
//! kept back as [`SharedRings`] for CUPTI's record delivery and for threads that found none. Nothing here knows the
//! agent's state: [`crate::thread_rings`] decides which ring an event goes to.

use cuflight_format::ring::Producer;
use cuflight_format::segment::MappedSegment;

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
pub(crate) fn claim(seg: &MappedSegment, tid: u32) -> Option<Producer<'_>> {
    let limit = seg.layout().ring_count - kept_back(seg.layout().ring_count);
    loop {
        let n = seg.reserved_rings();
        let found = (0..n)
            .map(|i| (tid.wrapping_mul(2654435761) % n.max(1) + i) % n.max(1))
            .find_map(|i| seg.ring(i)?.try_claim(tid));
        if found.is_some() {
            return found;
        }
        // Every reserved ring is taken: reserve another (None at the limit, or without memory: counted).
        let i = seg.reserve_ring_below(limit)?;
        if let Some(producer) = seg.ring(i)?.try_claim(tid) {
            return Some(producer);
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
    /// Of this process's segment, which lives as long as the process (`state`: leaked on purpose).
    pub(crate) delivery: parking_lot::Mutex<Shared<'static>>,
    pub(crate) overflow: parking_lot::Mutex<Shared<'static>>,
}

#[derive(Default)]
pub(crate) struct Shared<'a> {
    pub(crate) producer: Option<Producer<'a>>,
    /// Reservation was tried and failed (no memory, or no ring left): do not retry on every buffer.
    failed: bool,
}

impl<'a> Shared<'a> {
    pub(crate) fn producer(&mut self, seg: &'a MappedSegment) -> Option<&mut Producer<'a>> {
        if self.producer.is_none() && !self.failed {
            self.producer = seg.reserve_ring().and_then(|i| seg.ring(i)).and_then(|r| r.try_claim(SHARED_OWNER));
            self.failed = self.producer.is_none();
        }
        self.producer.as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::segment::Layout;

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
}
