//! The stretches of a timeline a filter keeps ([`crate::model::filter`]), and the two rules that read them: an
//! event counts by its own start (`stats`), or is drawn where it overlaps one (`export`, [`crate::model::cut`]).

use crate::model::timeline::drawn;
use cuflight_format::RawEvent;

/// The stretches kept: disjoint, in start order (instances that overlap are joined).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Windows {
    pub spans: Vec<(u64, u64)>,
}

impl Windows {
    pub fn new(mut spans: Vec<(u64, u64)>) -> Windows {
        spans.sort_unstable();
        let mut joined: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for (s, e) in spans {
            match joined.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => joined.push((s, e.max(s))),
            }
        }
        Windows { spans: joined }
    }

    /// Whether `e` counts by its own start (`stats`' rule): facts always; a timed event when it starts inside a
    /// stretch (ends included).
    pub fn keeps(&self, e: &RawEvent) -> bool {
        !drawn(e) || self.holds(e.start)
    }

    /// Whether time `t` lies inside a stretch (ends included).
    pub fn holds(&self, t: u64) -> bool {
        let i = self.spans.partition_point(|s| s.0 <= t);
        i > 0 && t <= self.spans[i - 1].1
    }

    /// Whether `from..=to` meets a stretch (a timeline's rule: what is drawn there).
    pub fn overlaps(&self, from: u64, to: u64) -> bool {
        let i = self.spans.partition_point(|s| s.0 <= to);
        i > 0 && from <= self.spans[i - 1].1
    }

    /// The time they cover, ns.
    pub fn covered_ns(&self) -> u64 {
        self.spans.iter().map(|(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::EventKind;

    /// An event is kept when it starts inside a stretch, the ends included; facts always.
    #[test]
    fn events_starting_inside_a_stretch_are_kept() {
        let w = Windows::new(vec![(300, 400), (100, 200), (150, 160)]);
        assert_eq!(w.spans, [(100, 200), (300, 400)], "joined where they overlap");
        let at = |t| RawEvent::new(EventKind::Kernel, 0, t, t + 1000);
        let kept: Vec<u64> = [50, 100, 170, 200, 250, 300, 400, 401].into_iter().filter(|&t| w.keeps(&at(t))).collect();
        assert_eq!(kept, [100, 170, 200, 300, 400]);
        assert!(w.keeps(&RawEvent::new(EventKind::Device, 0, 0, 0)), "facts pass");
        assert_eq!(w.covered_ns(), 200);
        let meets: Vec<(u64, u64)> = [(0, 99), (0, 100), (201, 299), (250, 500), (400, 900), (401, 900), (150, 150)]
            .into_iter()
            .filter(|&(from, to)| w.overlaps(from, to))
            .collect();
        assert_eq!(meets, [(0, 100), (250, 500), (400, 900), (150, 150)]);
    }
}
