//! Turns NVTX push/pop and start/end events into completed ranges: one mechanism for `stats` and both exports.
//!
//! Push/pop pair per (thread, domain) stack. Start/end pair by range id across threads; an end seen before its
//! start (their threads' rings were drained in the other order) waits for the start.

use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;

/// A range whose start and end are both known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub start: u64,
    pub end: u64,
    /// String id of the message.
    pub name: u32,
    /// String id of the domain (0: the default domain).
    pub domain: u64,
    /// The thread it opened on.
    pub tid: u32,
    /// From a start/end pair (may overlap others), not a push/pop (nests on its thread).
    pub async_range: bool,
    /// The NVTX payload its opening event carried.
    pub payload: Option<Payload>,
}

/// An NVTX payload (nvtxEventAttributes_t::payload), by its declared type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Payload {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
}

impl Payload {
    /// The payload of an NVTX push, start or mark event (see `EventKind::NvtxPush`).
    pub fn of(e: &RawEvent) -> Option<Payload> {
        let nvtx = e.as_nvtx();
        let bits = nvtx.payload_bits;
        Some(match nvtx.payload_type {
            1 => Payload::Unsigned(bits),
            2 => Payload::Signed(bits as i64),
            3 => Payload::Float(f64::from_bits(bits)),
            4 => Payload::Unsigned(bits as u32 as u64),
            5 => Payload::Signed(bits as u32 as i32 as i64),
            6 => Payload::Float(f32::from_bits(bits as u32) as f64),
            _ => return None,
        })
    }

    pub fn to_json(self) -> serde_json::Value {
        match self {
            Payload::Unsigned(v) => v.into(),
            Payload::Signed(v) => v.into(),
            Payload::Float(v) => v.into(),
        }
    }
}

type Opened = (u64, u32, Option<Payload>);

#[derive(Default)]
pub struct Pairer {
    /// Per (thread, domain): the open pushes, (start, name, payload).
    stacks: FxHashMap<(u32, u64), Vec<Opened>>,
    open: FxHashMap<u64, (u64, u32, u64, u32, Option<Payload>)>,
    early_ends: FxHashMap<u64, u64>,
}

impl Pairer {
    /// Feeds one event; returns the range it completes, if any. Other event kinds are ignored.
    pub fn feed(&mut self, e: &RawEvent) -> Option<Range> {
        match e.kind()? {
            EventKind::NvtxPush => {
                let domain = e.as_nvtx().domain;
                self.stacks.entry((e.tid, domain)).or_default().push((e.start, e.name, Payload::of(e)));
                None
            }
            EventKind::NvtxPop => {
                let domain = e.as_nvtx().domain;
                let (start, name, payload) = self.stacks.get_mut(&(e.tid, domain))?.pop()?;
                Some(Range { start, end: e.start, name, domain, tid: e.tid, async_range: false, payload })
            }
            EventKind::NvtxStart => {
                let nvtx = e.as_nvtx();
                match self.early_ends.remove(&nvtx.id) {
                    Some(end) => Some(Range {
                        start: e.start,
                        end: end.max(e.start),
                        name: e.name,
                        domain: nvtx.domain,
                        tid: e.tid,
                        async_range: true,
                        payload: Payload::of(e),
                    }),
                    None => {
                        self.open.insert(nvtx.id, (e.start, e.name, nvtx.domain, e.tid, Payload::of(e)));
                        None
                    }
                }
            }
            EventKind::NvtxEnd => match self.open.remove(&e.as_nvtx().id) {
                Some((start, name, domain, tid, payload)) => {
                    Some(Range { start, end: e.start.max(start), name, domain, tid, async_range: true, payload })
                }
                None => {
                    self.early_ends.insert(e.as_nvtx().id, e.start);
                    None
                }
            },
            _ => None,
        }
    }

    /// Start/end ranges whose end was seen and whose start never was: begun before the trace (an attached window
    /// into a server that was already serving). An end names no range, so these are of any name.
    pub fn ends_without_start(&self) -> usize {
        self.early_ends.len()
    }

    /// Ranges opened and never closed (push without pop, start without end): (name, start).
    pub fn unclosed(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let pushed = self.stacks.values().flatten().map(|&(start, name, _)| (name, start));
        pushed.chain(self.open.values().map(|&(start, name, _, _, _)| (name, start)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NVTX event of `kind`; `id` is a start/end range's.
    fn ev(kind: EventKind, tid: u32, t: u64, id: u64) -> RawEvent {
        let mut e = RawEvent { name: 5, ..RawEvent::new(kind, tid, t, t) };
        e.set_nvtx(kind, cuflight_format::view::Nvtx { id, ..Default::default() });
        e
    }

    #[test]
    fn pairs_nesting_per_thread_and_ranges_across_threads_in_any_order() {
        let mut p = Pairer::default();
        assert_eq!(p.feed(&ev(EventKind::NvtxPush, 1, 10, 0)), None);
        assert_eq!(p.feed(&ev(EventKind::NvtxPush, 1, 20, 0)), None);
        assert_eq!(p.feed(&ev(EventKind::NvtxPop, 1, 30, 0)).map(|r| (r.start, r.end)), Some((20, 30)));
        assert_eq!(p.feed(&ev(EventKind::NvtxPop, 2, 35, 0)), None, "another thread's pop closes nothing here");
        assert_eq!(p.feed(&ev(EventKind::NvtxPop, 1, 40, 0)).map(|r| (r.start, r.end)), Some((10, 40)));
        // End (thread 3) seen before its start (thread 4).
        assert_eq!(p.feed(&ev(EventKind::NvtxEnd, 3, 90, 77)), None);
        let r = p.feed(&ev(EventKind::NvtxStart, 4, 50, 77)).unwrap();
        assert_eq!((r.start, r.end, r.tid, r.async_range), (50, 90, 4, true));
    }
}
