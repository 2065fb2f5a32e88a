//! Growing GPU busy time as the sweep sees it: spans merged as they arrive (kept until the windows they overlap
//! are done), and the kernel-busy share of 100 equal slices of the trace for the utilisation plot.

use super::spans::Span;
use std::collections::VecDeque;

/// Spans sorted by start merged as they arrive; finished ones wait in `done` for the windows they overlap.
#[derive(Default)]
pub struct Growing {
    current: Option<Span>,
    pub done: VecDeque<Span>,
}

impl Growing {
    /// Returns whether the span began a new stretch.
    pub fn push(&mut self, (s, e): Span) -> bool {
        if e <= s {
            return false;
        }
        match &mut self.current {
            Some(c) if s <= c.1 => {
                c.1 = c.1.max(e);
                false
            }
            Some(c) => {
                self.done.push_back(*c);
                *c = (s, e);
                true
            }
            None => {
                self.current = Some((s, e));
                true
            }
        }
    }

    /// Stretches that overlap `[s, e)` or start at `e`, in order.
    pub fn overlapping(&self, (s, e): Span) -> Vec<Span> {
        let first = self.done.partition_point(|x| x.1 <= s);
        let done = self.done.range(first..).take_while(|x| x.0 <= e).copied();
        done.chain(self.current.filter(|c| c.1 > s && c.0 <= e)).collect()
    }

    /// The end of the last stretch that ended at or before `t`.
    pub fn ended_before(&self, t: u64) -> Option<u64> {
        if let Some(c) = self.current.filter(|c| c.1 <= t) {
            return Some(c.1);
        }
        let n = self.done.partition_point(|x| x.1 <= t);
        n.checked_sub(1).map(|i| self.done[i].1)
    }

    /// Forgets what no window from `t` on needs; `keep_before`: keeps the last stretch ending at or before `t`.
    pub fn trim(&mut self, t: u64, keep_before: bool) {
        let keep = usize::from(keep_before);
        while self.done.get(keep).is_some_and(|x| x.1 <= t) {
            self.done.pop_front();
        }
    }
}

/// Kernel-busy share of each of 100 equal slices of the GPU busy extent.
pub struct Utilization {
    extent: Option<Span>,
    bin: u64,
    acc: [u64; 100],
    union: Growing,
}

impl Utilization {
    pub fn new(extent: Option<Span>) -> Utilization {
        let bin = extent.map_or(1, |(s, e)| e.saturating_sub(s).div_ceil(100).max(1));
        Utilization { extent, bin, acc: [0; 100], union: Growing::default() }
    }

    pub fn push(&mut self, span: Span) {
        self.union.push(span);
        while let Some(done) = self.union.done.pop_front() {
            self.add(done);
        }
    }

    fn add(&mut self, (a, b): Span) {
        let Some((s, _)) = self.extent else { return };
        let mut i = (a.saturating_sub(s) / self.bin) as usize;
        while i < 100 {
            let (bs, be) = (s.saturating_add(i as u64 * self.bin), s.saturating_add((i as u64 + 1) * self.bin));
            if bs >= b {
                break;
            }
            self.acc[i] += b.min(be).saturating_sub(a.max(bs));
            i += 1;
        }
    }

    pub fn finish(mut self) -> Vec<f64> {
        if self.extent.is_none() {
            return vec![];
        }
        if let Some(c) = self.union.current.take() {
            self.add(c);
        }
        self.acc.iter().map(|&ns| ns as f64 / self.bin as f64).collect()
    }
}
