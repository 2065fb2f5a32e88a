//! Communication/computation overlap, as Holistic Trace Analysis defines it (HTA 0.5,
//! `CommunicationAnalysis.get_comm_comp_overlap`): of the time communication kernels run (the union of their
//! intervals), the share during which a computation kernel runs too. Kernel kinds are HTA's (see
//! `kernel_category::is_compute_kernel`, `kernel_category::is_comm_kernel`), over the traced iterations (HTA drops the GPU work
//! launched in or after the last `ProfilerStep` when it loads a trace, see [`super::breakdown`]), with HTA's
//! rounding of fractional-µs traces.
//!
//! Computed in one pass over kernels that arrive by start: the ends of the kernels running at the moment are
//! held in two heaps (bounded by how many run at once), and time is credited between consecutive boundaries
//! while both heaps are non-empty.

use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct CommOverlap {
    /// Union of communication kernels' intervals.
    pub comm_ns: u64,
    /// Of it, the time computation kernels ran too.
    pub overlapped_ns: u64,
}

impl CommOverlap {
    /// HTA's `comp_comm_overlap_pctg`; `None` without communication.
    pub fn percent(&self) -> Option<f64> {
        (self.comm_ns > 0).then(|| 100.0 * self.overlapped_ns as f64 / self.comm_ns as f64)
    }
}

#[derive(Default)]
pub struct OverlapSweep {
    comm: BinaryHeap<Reverse<i64>>,
    comp: BinaryHeap<Reverse<i64>>,
    now: i64,
    out: CommOverlap,
}

impl OverlapSweep {
    /// The next kernel (in start order): `comm` or `compute` (HTA's kinds; others are ignored).
    pub fn kernel(&mut self, (start, end): (i64, i64), comm: bool, compute: bool) {
        if !(comm || compute) || end <= start {
            return;
        }
        self.advance(start);
        if comm {
            self.comm.push(Reverse(end));
        } else {
            self.comp.push(Reverse(end));
        }
    }

    /// Moves time to `t`, closing every kernel that ends by then.
    fn advance(&mut self, t: i64) {
        loop {
            let next = match (self.comm.peek(), self.comp.peek()) {
                (Some(a), Some(b)) => a.0.min(b.0),
                (Some(a), None) => a.0,
                (None, Some(b)) => b.0,
                (None, None) => break,
            };
            if next > t {
                break;
            }
            self.credit(next);
            while self.comm.peek().is_some_and(|e| e.0 <= next) {
                self.comm.pop();
            }
            while self.comp.peek().is_some_and(|e| e.0 <= next) {
                self.comp.pop();
            }
        }
        self.credit(t);
    }

    fn credit(&mut self, t: i64) {
        if t > self.now {
            let d = (t - self.now) as u64;
            if !self.comm.is_empty() {
                self.out.comm_ns += d;
                if !self.comp.is_empty() {
                    self.out.overlapped_ns += d;
                }
            }
        }
        self.now = self.now.max(t);
    }

    pub fn finish(mut self) -> CommOverlap {
        self.advance(i64::MAX);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_the_shared_time_over_the_communication_union() {
        let mut o = OverlapSweep::default();
        o.kernel((0, 100), false, true); // compute 0..100
        o.kernel((50, 150), true, false); // comm 50..150: 50 overlapped
        o.kernel((60, 80), true, false); // inside the first comm: the union does not count it twice
        o.kernel((120, 130), false, true); // compute inside comm: 10 more
        o.kernel((200, 300), true, false); // comm alone
        o.kernel((250, 260), false, false); // a memcpy: neither
        let r = o.finish();
        assert_eq!(r, CommOverlap { comm_ns: 200, overlapped_ns: 60 });
        assert_eq!(r.percent(), Some(30.0));
        assert_eq!(OverlapSweep::default().finish().percent(), None);
    }
}
