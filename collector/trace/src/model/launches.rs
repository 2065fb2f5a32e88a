//! The launch↔work join, the one every analysis and export uses, for one process's events in time order.
//!
//! An API call that can queue device work ([`CallEffects::queues_work`]) waits, by correlation id, for
//! the kernels, copies and memsets that carry its id. A call starts before its work, so a time-ordered stream never
//! looks back. The first call with an id is the launch: CUPTI gives the runtime call and the driver call it makes
//! the same id, and the runtime call is the one the program made. Every piece of work with the id joins it (a
//! graph launch's many kernels); the first one is marked, as exports draw one flow per launch.
//!
//! Calls sit in a ring of slots indexed by correlation id: ids grow by one per call, so calls and their work touch
//! neighbouring slots (a hash table over millions of ids misses the cache on every access). The ring grows while
//! calls still waiting for their work would be pushed out, up to [`SLOTS`], so it holds what is in flight. When a
//! later id takes a slot over, a call whose work has come is forgotten (a graph's kernels come together, while
//! its launch is in flight); one still waiting for its work moves to a side table if it is younger than
//! [`LAUNCH_HORIZON_NS`]. The side table keeps two generations, each half the horizon long, and drops the older
//! one whole. What is kept is bounded by the launch rate, never by the trace.

use crate::model::trace::Process;
use cuflight_format::calls::CallEffects;
use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;

/// How long a launch call waits for its device work: the GPU's queue holds about a thousand launches, so work
/// that starts later than this after its call needs seconds-long kernels queued back to back; keeping every call
/// instead would keep the trace.
pub const LAUNCH_HORIZON_NS: u64 = 4_000_000_000;

/// Launches the ring keeps at most (2 MiB). It starts at [`MIN_SLOTS`] and doubles only when a call still
/// waiting for its work would be pushed out, so it follows how many launches are in flight at once, not how many
/// a process makes: a report over a thousand merged ranks holds a thousand rings.
pub const SLOTS: usize = 1 << 16;
const MIN_SLOTS: usize = 1 << 10;

/// The launching call of device work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Call {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    /// The operator's external id the call carried (Kineto imports; 0: none).
    pub external: u64,
    /// The call's name (a string id of the process): `cudaGraphLaunch` queues a whole graph.
    pub name: u32,
    /// The id CUPTI gave the call and its work (for display: a viewer finds both by it).
    pub correlation: u32,
}

/// Device work joined to its launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Joined {
    pub call: Call,
    /// The launch's first work (the one a flow ends at).
    pub first: bool,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    /// 0: empty.
    correlation: u32,
    /// Work with this id has been seen.
    joined: bool,
    call: Call,
}

#[derive(Default)]
pub struct LaunchJoin {
    /// Allocated at the first launch (a process that launches nothing costs nothing).
    slots: Vec<Slot>,
    young: FxHashMap<u32, Slot>,
    old: FxHashMap<u32, Slot>,
    /// When the young generation began.
    since: u64,
    /// Whether a name id (of this process) queues work: classified once per name.
    queues_work: FxHashMap<u32, bool>,
}

impl LaunchJoin {
    fn spilled(&mut self, correlation: u32) -> Option<&mut Slot> {
        if self.young.is_empty() && self.old.is_empty() {
            return None;
        }
        match self.young.get_mut(&correlation) {
            Some(s) => Some(s),
            None => self.old.get_mut(&correlation),
        }
    }

    /// Feeds an API call of `p`. When it may queue work: the launch its work will join, which is this call when it
    /// is the first with its id (it now waits for its work), else the call it is inside (a runtime call's driver
    /// call).
    pub fn api(&mut self, p: &Process, e: &RawEvent) -> Option<Call> {
        if e.kind() != Some(EventKind::Api) || e.correlation == 0 {
            return None;
        }
        let queues = *self.queues_work.entry(e.name).or_insert_with(|| CallEffects::of(p.string(e.name)).queues_work());
        if !queues {
            return None;
        }
        if self.slots.is_empty() {
            self.slots = vec![Slot::default(); MIN_SLOTS];
        }
        let mut at = e.correlation as usize % self.slots.len();
        if self.slots[at].correlation == e.correlation {
            return Some(self.slots[at].call); // the first call with this id (the runtime's) stays
        }
        if let Some(s) = self.spilled(e.correlation) {
            return Some(s.call);
        }
        while self.slots.len() < SLOTS && self.slots[at].correlation != 0 && !self.slots[at].joined {
            self.grow();
            at = e.correlation as usize % self.slots.len();
        }
        let (correlation, external) = (e.correlation, e.as_api().external);
        let call = Call { start: e.start, end: e.end, tid: e.tid, external, name: e.name, correlation };
        let taken = std::mem::replace(&mut self.slots[at], Slot { correlation: e.correlation, joined: false, call });
        if taken.correlation != 0 && !taken.joined && taken.call.start.saturating_add(LAUNCH_HORIZON_NS) > e.start {
            if e.start >= self.since.saturating_add(LAUNCH_HORIZON_NS / 2) {
                self.old = std::mem::take(&mut self.young);
                self.since = e.start;
            }
            self.young.entry(taken.correlation).or_insert(taken);
        }
        Some(call)
    }

    /// Doubles the ring: each kept call moves to its id's slot in the larger one (ids apart by a multiple of
    /// the old size land in distinct slots of the new).
    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let mut bigger = vec![Slot::default(); n];
        for s in self.slots.iter().filter(|s| s.correlation != 0) {
            bigger[s.correlation as usize % n] = *s;
        }
        self.slots = bigger;
    }

    /// Feeds device work: its launch, if the call is in the trace (and not past the horizon).
    pub fn work(&mut self, e: &RawEvent) -> Option<Joined> {
        if e.correlation == 0 || !e.is_gpu_work() || self.slots.is_empty() {
            return None;
        }
        let at = e.correlation as usize % self.slots.len();
        let slot = match self.slots.get_mut(at) {
            Some(s) if s.correlation == e.correlation => s,
            _ => self.spilled(e.correlation)?,
        };
        let first = !slot.joined;
        slot.joined = true;
        Some(Joined { call: slot.call, first })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process() -> Process {
        let mut p = Process::default();
        p.strings.insert(1, "cudaLaunchKernel".into());
        p.strings.insert(2, "cudaStreamSynchronize".into());
        p.strings.insert(3, "cudaGraphLaunch".into());
        p.strings.insert(4, "cuLaunchKernel".into());
        p
    }

    fn api(name: u32, corr: u32, t: u64) -> RawEvent {
        RawEvent { name, correlation: corr, ..RawEvent::new(EventKind::Api, 7, t, t + 5) }
    }

    fn kernel(corr: u32, t: u64) -> RawEvent {
        RawEvent { correlation: corr, ..RawEvent::new(EventKind::Kernel, 0, t, t + 5) }
    }

    fn call(t: u64, name: u32, correlation: u32) -> Call {
        Call { start: t, end: t + 5, tid: 7, external: 0, name, correlation }
    }

    #[test]
    fn every_work_joins_the_first_call_and_the_first_work_is_marked() {
        let p = process();
        let mut j = LaunchJoin::default();
        assert_eq!(j.api(&p, &api(1, 10, 100)), Some(call(100, 1, 10)));
        assert_eq!(j.api(&p, &api(4, 10, 101)), Some(call(100, 1, 10)), "the driver call is inside the launch");
        assert_eq!(j.api(&p, &api(2, 11, 110)), None, "a sync queues nothing");
        assert!(j.api(&p, &api(3, 12, 120)).is_some());
        assert!(j.api(&p, &api(1, 13, 130)).is_some());
        assert_eq!(j.work(&kernel(10, 150)), Some(Joined { call: call(100, 1, 10), first: true }), "the runtime call");
        assert_eq!(j.work(&kernel(12, 160)), Some(Joined { call: call(120, 3, 12), first: true }));
        assert_eq!(
            j.work(&kernel(12, 170)),
            Some(Joined { call: call(120, 3, 12), first: false }),
            "the graph's second"
        );
        assert_eq!(j.work(&kernel(11, 180)), None);
        assert_eq!(j.work(&kernel(99, 180)), None);
        assert_eq!(j.work(&RawEvent { correlation: 13, ..RawEvent::new(EventKind::Api, 7, 190, 195) }), None);
    }

    #[test]
    fn the_ring_forgets_only_joined_or_stale_calls() {
        let p = process();
        let mut j = LaunchJoin::default();
        let corr = 5u32;
        j.api(&p, &api(1, corr, 100));
        assert_eq!(j.work(&kernel(corr, 200)).map(|w| w.call.start), Some(100));
        // Later ids take the slots over: the joined call goes, the one still waiting for its work stays.
        j.api(&p, &api(1, corr + 7, 300));
        j.api(&p, &api(1, corr + SLOTS as u32, 400));
        j.api(&p, &api(1, corr + 7 + SLOTS as u32, 500));
        assert!(j.work(&kernel(corr, 600)).is_none(), "joined, then taken over");
        assert_eq!(j.work(&kernel(corr + 7, 600)).map(|w| (w.call.start, w.first)), Some((300, true)));
        assert_eq!(j.work(&kernel(corr + 7, 601)).map(|w| w.first), Some(false), "spilled calls remember too");
        assert_eq!(j.work(&kernel(corr + 7 + SLOTS as u32, 600)).map(|w| w.call.start), Some(500));
        // A call past the horizon is not spilled when its slot is taken.
        j.api(&p, &api(1, corr + 1, 1_000));
        j.api(&p, &api(1, corr + 1 + SLOTS as u32, 1_000 + LAUNCH_HORIZON_NS));
        assert!(j.work(&kernel(corr + 1, 2_000 + LAUNCH_HORIZON_NS)).is_none());
    }

    #[test]
    fn the_ring_grows_with_the_launches_in_flight_not_with_the_trace() {
        let p = process();
        let mut j = LaunchJoin::default();
        // 100,000 launches, each joined before the next: the ring stays at its first size.
        for corr in 1..100_000u32 {
            j.api(&p, &api(1, corr, corr as u64 * 10));
            assert!(j.work(&kernel(corr, corr as u64 * 10 + 5)).is_some());
        }
        assert_eq!(j.slots.len(), MIN_SLOTS);
        // 3,000 launches queued before any work: it grows to hold them all, and every one joins.
        let base = 200_000u32;
        for k in 0..3_000u32 {
            j.api(&p, &api(1, base + k, 2_000_000 + k as u64));
        }
        assert_eq!(j.slots.len(), 4 * MIN_SLOTS);
        for k in 0..3_000u32 {
            assert_eq!(j.work(&kernel(base + k, 3_000_000)).map(|w| w.call.start), Some(2_000_000 + k as u64));
        }
    }
}
