//! A timeline cut to the stretches a filter chose ([`Windows`]): what a viewer would draw there, in time order,
//! for the exports (`cuflight export --filter-nvtx ProfilerStep#5`: one step of a run too large to open whole).
//!
//! - A slice (API call, synchronisation, range, CUPTI overhead) is kept when it overlaps a stretch. Device work
//!   (kernels, copies, memsets, graph nodes) too, and also when the call that launched it was kept, so that the
//!   flow from a kept launch keeps its end ([`crate::model::launches`]' join). A call's Python frames go with it.
//! - An NVTX range, push/pop or start/end, is kept whole (both of its events) when it overlaps a stretch; a mark
//!   when it lies inside one.
//! - Device memory in use keeps its level: allocations and frees inside a stretch are kept, and those between
//!   stretches are replaced, at the next stretch's start, by what brings the drawn level to the trace's level
//!   there ([`crate::model::memory`]'s replay, run twice: once over the trace, once over what was kept). A
//!   counter then starts at its true value instead of at zero.
//! - Facts (devices, thread and category names, clock pairs) are always kept.
//!
//! Events between stretches are held until it is known whether they belong (a push waits for its pop, or for the
//! next stretch to begin while it is still open), then released in their order: what is held is what was in
//! flight at a stretch's edge, never the trace.

use crate::model::launches::LaunchJoin;
use crate::model::memory::LiveMemory;
use crate::model::trace::Process;
use crate::model::windows::Windows;
use cuflight_format::event::MemKind;
use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;

/// What became of a range's opening event.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fate {
    Shown,
    /// Held at this position until its end or the next stretch decides.
    Held(usize),
    Dropped,
}

/// Where an event's start lies.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Inside,
    /// Before the stretch that starts at this time.
    Before(u64),
    After,
}

/// The cut, fed a source's events in time order.
pub struct Cut {
    windows: Windows,
    /// The first stretch not yet left behind.
    next: usize,
    /// Whether that stretch has begun (its held events released).
    entered: bool,
    held: Vec<Option<(u32, RawEvent)>>,
    /// Open pushes per (process, thread, domain).
    pushes: FxHashMap<(u32, u32, u64), Vec<Fate>>,
    /// Open start/end ranges per (process, range id).
    starts: FxHashMap<(u32, u64), Fate>,
    joins: FxHashMap<u32, LaunchJoin>,
    /// Each thread's last call: its correlation id and whether it was kept (its Python frames follow it).
    last_call: FxHashMap<(u32, u32), (u32, bool)>,
    /// Live memory per process: over the whole trace, and over what was kept.
    truth: FxHashMap<u32, LiveMemory>,
    drawn: FxHashMap<u32, LiveMemory>,
    /// The last allocation or free per (process, address) since the last stretch ended.
    touched: FxHashMap<(u32, u64), RawEvent>,
}

impl Cut {
    pub fn new(windows: Windows) -> Cut {
        Cut {
            windows,
            next: 0,
            entered: false,
            held: Vec::new(),
            pushes: FxHashMap::default(),
            starts: FxHashMap::default(),
            joins: FxHashMap::default(),
            last_call: FxHashMap::default(),
            truth: FxHashMap::default(),
            drawn: FxHashMap::default(),
            touched: FxHashMap::default(),
        }
    }

    /// Feeds event `e` of process `key`; `emit` receives what is kept, in time order.
    pub fn feed(&mut self, key: u32, p: &Process, e: &RawEvent, emit: &mut impl FnMut(u32, &RawEvent)) {
        let at = self.place(e.start, emit);
        let overlaps = match at {
            Place::Inside => true,
            Place::Before(next) => e.end >= next,
            Place::After => false,
        };
        match e.kind() {
            Some(EventKind::Api) => {
                self.joins.entry(key).or_default().api(p, e);
                self.last_call.insert((key, e.tid), (e.correlation, overlaps));
                if overlaps {
                    self.keep(key, e, at, emit);
                }
            }
            Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset | EventKind::GraphNode) => {
                let join = self.joins.entry(key).or_default().work(e);
                if overlaps || join.is_some_and(|j| self.windows.overlaps(j.call.start, j.call.end)) {
                    self.keep(key, e, at, emit);
                }
            }
            Some(
                EventKind::Sync | EventKind::Range | EventKind::Overhead | EventKind::GpuSample | EventKind::Sampled,
            ) if overlaps => self.keep(key, e, at, emit),
            Some(EventKind::NvtxMark | EventKind::MemoryActivity) if at == Place::Inside => emit(key, e),
            Some(EventKind::PyFrame) => {
                let call = self.last_call.get(&(key, e.tid));
                if call.map_or(at == Place::Inside, |&(correlation, kept)| kept && correlation == e.correlation) {
                    self.keep(key, e, at, emit);
                }
            }
            Some(EventKind::NvtxPush) => {
                let fate = self.open(key, e, at, emit);
                self.pushes.entry((key, e.tid, e.as_nvtx().domain)).or_default().push(fate);
            }
            Some(EventKind::NvtxPop) => {
                let fate = self.pushes.get_mut(&(key, e.tid, e.as_nvtx().domain)).and_then(Vec::pop);
                self.close(key, e, fate, at, emit);
            }
            Some(EventKind::NvtxStart) => {
                let fate = self.open(key, e, at, emit);
                self.starts.insert((key, e.as_nvtx().id), fate);
            }
            Some(EventKind::NvtxEnd) => {
                let fate = self.starts.remove(&(key, e.as_nvtx().id));
                self.close(key, e, fate, at, emit);
            }
            Some(EventKind::Alloc | EventKind::Free) => {
                self.truth.entry(key).or_default().apply(key, e);
                match at {
                    Place::Inside => {
                        self.drawn.entry(key).or_default().apply(key, e);
                        emit(key, e);
                    }
                    Place::Before(_) => {
                        self.touched.insert((key, e.as_mem_op().address), *e);
                    }
                    Place::After => {}
                }
            }
            Some(
                EventKind::Sync
                | EventKind::Range
                | EventKind::Overhead
                | EventKind::NvtxMark
                | EventKind::MemoryActivity
                | EventKind::GpuSample
                | EventKind::Sampled,
            ) => {}
            Some(EventKind::ThreadName | EventKind::ClockSync | EventKind::Device | EventKind::NvtxCategory) | None => {
                self.keep(key, e, at, emit)
            }
        }
    }

    /// Releases what is still held: the trace ended before the next stretch began, so what was held straddles it
    /// or was in flight (ranges still open).
    pub fn finish(&mut self, emit: &mut impl FnMut(u32, &RawEvent)) {
        for (key, e) in self.held.drain(..).flatten() {
            emit(key, &e);
        }
    }

    /// Where time `t` lies, entering (and leaving) stretches on the way.
    fn place(&mut self, t: u64, emit: &mut impl FnMut(u32, &RawEvent)) -> Place {
        while let Some(&(start, end)) = self.windows.spans.get(self.next) {
            if t < start {
                return Place::Before(start);
            }
            if !self.entered {
                self.enter(start, emit);
                self.entered = true;
            }
            if t <= end {
                return Place::Inside;
            }
            self.next += 1;
            self.entered = false;
        }
        Place::After
    }

    /// A stretch begins at `start`: what was held is released (every range still open overlaps it), and the
    /// memory level is brought to the trace's.
    fn enter(&mut self, start: u64, emit: &mut impl FnMut(u32, &RawEvent)) {
        self.finish(emit);
        let shown = |f: &mut Fate| {
            if let Fate::Held(_) = f {
                *f = Fate::Shown;
            }
        };
        self.pushes.values_mut().flatten().for_each(shown);
        self.starts.values_mut().for_each(shown);
        self.level_memory(start, emit);
    }

    /// Allocations and frees between stretches, replaced at `at` by those that make the kept replay equal the
    /// trace's: each address as it is (alive with its size, or freed), then one change per process and kind of
    /// memory for what no address accounts for (frees without one, blocks allocated before the trace).
    fn level_memory(&mut self, at: u64, emit: &mut impl FnMut(u32, &RawEvent)) {
        if self.touched.is_empty() {
            return;
        }
        let mut touched: Vec<((u32, u64), RawEvent)> = self.touched.drain().collect();
        touched.sort_unstable_by_key(|t| t.0);
        let retimed = |e: &RawEvent| RawEvent { start: at, end: at, ..*e };
        for &((key, address), e) in &touched {
            let (truth, drawn) = (self.truth.entry(key).or_default(), self.drawn.entry(key).or_default());
            let (now, shown) = (truth.block(key, address), drawn.block(key, address));
            // The last event at an address left it alive (an allocation) or not (a free): it says so again.
            if address != 0 && now != shown {
                let e = retimed(&e);
                drawn.apply(key, &e);
                emit(key, &e);
            }
        }
        touched.dedup_by_key(|t| t.0 .0);
        for ((key, _), last) in touched {
            let (truth, drawn) = (self.truth.entry(key).or_default(), self.drawn.entry(key).or_default());
            for (kind, now, shown) in [
                (MemKind::Device, truth.device(), drawn.device()),
                (MemKind::PinnedHost, truth.pinned(), drawn.pinned()),
            ] {
                let (change, bytes) = match now.cmp(&shown) {
                    std::cmp::Ordering::Equal => continue,
                    std::cmp::Ordering::Greater => (EventKind::Alloc, now - shown),
                    std::cmp::Ordering::Less => (EventKind::Free, shown - now),
                };
                let mut e = RawEvent::new(change, last.tid, at, at);
                e.device = last.device;
                e.set_mem_op(change, cuflight_format::view::MemOp { memory: Some(kind), address: 0, bytes });
                drawn.apply(key, &e);
                emit(key, &e);
            }
        }
    }

    /// Keeps `e`: now, or held when it lies before a stretch.
    fn keep(&mut self, key: u32, e: &RawEvent, at: Place, emit: &mut impl FnMut(u32, &RawEvent)) {
        self.put(key, e, at, emit);
    }

    /// [`Cut::keep`], saying where `e` went.
    fn put(&mut self, key: u32, e: &RawEvent, at: Place, emit: &mut impl FnMut(u32, &RawEvent)) -> Fate {
        match at {
            Place::Before(_) => {
                self.held.push(Some((key, *e)));
                Fate::Held(self.held.len() - 1)
            }
            Place::Inside | Place::After => {
                emit(key, e);
                Fate::Shown
            }
        }
    }

    /// A range opens: shown inside a stretch, held before one (until it closes or the stretch begins), dropped
    /// after the last.
    fn open(&mut self, key: u32, e: &RawEvent, at: Place, emit: &mut impl FnMut(u32, &RawEvent)) -> Fate {
        match at {
            Place::After => Fate::Dropped,
            _ => self.put(key, e, at, emit),
        }
    }

    /// A range closes: with its opening if that was shown; both withdrawn if it was held (it closed before the
    /// next stretch began). A close without an opening is kept only inside a stretch.
    fn close(
        &mut self,
        key: u32,
        e: &RawEvent,
        opened: Option<Fate>,
        at: Place,
        emit: &mut impl FnMut(u32, &RawEvent),
    ) {
        match opened {
            Some(Fate::Shown) => self.keep(key, e, at, emit),
            Some(Fate::Held(i)) => {
                self.held[i] = None;
                // Withdrawn at the end (a range closed with nothing held inside it, the usual case) gives the room
                // back: a long stretch of pushes and pops before a stretch holds nothing. No fate names a withdrawn
                // slot, so positions past the end are free to be taken again.
                while self.held.last().is_some_and(Option::is_none) {
                    self.held.pop();
                }
            }
            Some(Fate::Dropped) => {}
            None if at == Place::Inside => emit(key, e),
            None => {}
        }
    }
}

#[cfg(test)]
#[path = "cut_tests.rs"]
mod tests;
