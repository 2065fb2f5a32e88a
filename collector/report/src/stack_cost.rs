//! What reading Python stacks cost the program inside its steps (issue 29: stacks stay on by default while they
//! cost under 0.5% of a step). The agent writes each stack's read time on its innermost frame
//! ([`cuflight_format::EventKind::PyFrame`] `b`); the stacks read in steps are summed here, so the figure is the
//! steady state a user pays, not the cold reads of start-up (a first read of each code object costs more).
//!
//! A read delays the calling thread, but the step only if the GPU runs out of work meanwhile: a stack read at
//! `.item()`'s synchronisation while the GPU still works through the step's queue costs the step nothing. So the
//! part of each read during which the GPU was idle (no kernel, copy or memset of the process running) is summed
//! apart, `exposed_ns`: the step time the stacks cost, and what the 0.5% rule is checked against.

use super::spans::{merge, subtract, total, Span};
use serde::Serialize;
use std::collections::VecDeque;

/// The share of step time above which the report warns that stacks cost too much.
pub const MAX_SHARE: f64 = 0.005;

#[derive(Debug, Default, Clone, Copy, Serialize, schemars::JsonSchema, PartialEq)]
pub struct StackCost {
    /// Stacks read over the whole trace, and those read inside steps.
    pub stacks: u64,
    /// Stacks read inside steps.
    pub in_steps: u64,
    /// ns the program spent reading the stacks inside steps (0 from an agent that did not time its reads).
    pub in_steps_ns: u64,
    /// That per step, and as a share of the steps' time.
    pub per_step_ns: u64,
    /// `per_step_ns` as a share of step time, 0 to 1.
    pub share_of_steps: f64,
    /// The part of those reads during which the GPU was idle (see the module docs), and its share of step time.
    pub exposed_ns: u64,
    /// `exposed_ns` as a share of step time, 0 to 1.
    pub exposed_share_of_steps: f64,
}

impl StackCost {
    /// One stack (its innermost frame), read inside a step or not, in `read_ns`.
    pub fn stack(&mut self, in_step: bool, read_ns: u64) {
        self.stacks += 1;
        if in_step {
            self.in_steps += 1;
            self.in_steps_ns = self.in_steps_ns.saturating_add(read_ns);
        }
    }

    /// `ns` of the reads in a step fell where the GPU was idle.
    pub fn exposed(&mut self, ns: u64) {
        self.exposed_ns = self.exposed_ns.saturating_add(ns);
    }

    /// The figures over `steps` steps lasting `steps_ns` in all; None when no stack was read.
    pub fn finish(mut self, steps: usize, steps_ns: u64) -> Option<StackCost> {
        if self.stacks == 0 {
            return None;
        }
        if steps > 0 && steps_ns > 0 {
            self.per_step_ns = self.in_steps_ns / steps as u64;
            self.share_of_steps = self.in_steps_ns as f64 / steps_ns as f64;
            self.exposed_share_of_steps = self.exposed_ns as f64 / steps_ns as f64;
        }
        Some(self)
    }

    /// A warning when the stacks cost more than [`MAX_SHARE`] of step time (the reads' part with the GPU idle).
    pub fn warning(&self) -> Option<String> {
        (self.exposed_share_of_steps > MAX_SHARE).then(|| {
            format!(
                "reading Python stacks cost {:.2}% of step time ({} stacks in steps, {:.1} us a step, {:.1} us of it \
                 with the GPU idle): `--python-stacks=off` leaves them out, CUFLIGHT_PY_LAUNCH_EVERY=N samples fewer \
                 launches",
                self.exposed_share_of_steps * 100.0,
                self.in_steps,
                self.per_step_ns as f64 / 1e3,
                self.exposed_per_step_ns() as f64 / 1e3
            )
        })
    }

    /// The reads' time with the GPU idle, per step.
    pub fn exposed_per_step_ns(&self) -> u64 {
        match self.per_step_ns {
            0 => 0,
            per_step => (self.exposed_ns as u128 * per_step as u128 / self.in_steps_ns.max(1) as u128) as u64,
        }
    }
}

/// Stack reads (start, end) in step windows not done yet, in time order: their part with the GPU idle is known
/// once their window is.
#[derive(Default)]
pub struct PendingReads(VecDeque<Span>);

impl PendingReads {
    /// A read of `read_ns` from `start` (0 from an agent that did not time its reads: nothing to place).
    pub fn push(&mut self, start: u64, read_ns: u64) {
        if read_ns > 0 {
            self.0.push_back((start, start.saturating_add(read_ns)));
        }
    }

    /// The reads that began before `window_end`, forgotten: their time outside the GPU's busy stretches, which
    /// `busy(end)` gives from the window's start to `end` (the last read's end, past the window's if later).
    pub fn take_idle(&mut self, window_end: u64, busy: impl FnOnce(u64) -> Vec<Span>) -> u64 {
        let mut reads = Vec::new();
        while let Some(r) = self.0.front().copied().filter(|r| r.0 < window_end) {
            self.0.pop_front();
            reads.push(r);
        }
        let Some(end) = reads.iter().map(|r| r.1).max() else { return 0 };
        total(&subtract(&merge(reads), &busy(end.max(window_end))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stacks_in_steps_count_toward_the_share() {
        let mut c = StackCost::default();
        c.stack(false, 1_000_000); // start-up: cold, not charged to steps
        for _ in 0..20 {
            c.stack(true, 5_000);
        }
        let c = c.finish(10, 100_000_000).unwrap();
        assert_eq!((c.stacks, c.in_steps, c.in_steps_ns, c.per_step_ns), (21, 20, 100_000, 10_000));
        assert!((c.share_of_steps - 0.001).abs() < 1e-12);
        assert_eq!(c.warning(), None);
        // 1% of step time read, all of it while the GPU still had work: no cost to the step, no warning.
        let mut hidden = StackCost::default();
        hidden.stack(true, 1_000_000);
        assert_eq!(hidden.finish(1, 100_000_000).unwrap().warning(), None);
        let mut heavy = StackCost::default();
        heavy.stack(true, 1_000_000);
        heavy.exposed(800_000);
        let heavy = heavy.finish(1, 100_000_000).unwrap();
        assert!((heavy.exposed_share_of_steps - 0.008).abs() < 1e-12);
        let warning = heavy.warning().unwrap();
        assert!(
            warning.contains("0.80% of step time") && warning.contains("800.0 us of it with the GPU idle"),
            "{warning}"
        );
        assert_eq!(StackCost::default().finish(3, 10), None);
    }
}
