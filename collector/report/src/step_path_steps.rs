//! Which steps' critical paths the sweep keeps, what it keeps of each, and the walk of each kept step.

use super::{walk, PathCall, PathOp, StepCapture, Stratum, Walked, MAX_OPS, MAX_STRATUM_OPS, STRATA};
use crate::spans::Span;
use cuflight_format::calls::CallClass;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;

/// Threads' names by thread id: string ids of the process.
pub type ThreadNames = FxHashMap<u32, u32>;

/// The steps whose critical paths the sweep keeps: the typical one (median duration), whose path the report shows,
/// and the middle step of each of up to [`STRATA`] groups of the steps sorted by duration. A run's steps may differ in
/// what holds them (a server's long prefills beside its decodes, a loop's evaluation steps): what a fix on the
/// GPU's side can win back is bounded by every group's path, each weighted by its steps' time
/// ([`crate::path_bound`]), not by the typical step's alone.
#[derive(Default)]
pub struct PathSteps {
    /// (window, what is kept of it, whether ops of it were left out), by window.
    kept: Vec<(usize, StepCapture, bool)>,
    typical: Option<usize>,
    /// Per group: the window walked for it, its steps' time and count.
    groups: Vec<(usize, u64, usize)>,
    /// Threads' names (thread id, string id), as the trace gave them: what the path calls a launching thread.
    threads: ThreadNames,
}

impl PathSteps {
    /// The steps to keep of `windows` (the analysed steps, in time order) named `names`.
    pub fn new(windows: &[Span], names: &[String]) -> PathSteps {
        let n = windows.len();
        let len = |i: usize| windows[i].1.saturating_sub(windows[i].0);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (len(i), i));
        let typical = order.get(n / 2).copied();
        let count = STRATA.min(n);
        let groups: Vec<(usize, u64, usize)> = (0..count)
            .map(|g| {
                let members = &order[g * n / count..(g + 1) * n / count];
                (members[members.len() / 2], members.iter().map(|&i| len(i)).sum(), members.len())
            })
            .collect();
        let mut ks: Vec<usize> = groups.iter().map(|g| g.0).chain(typical).collect();
        ks.sort_unstable();
        ks.dedup();
        let kept = ks
            .into_iter()
            .map(|k| {
                let name = names.get(k).cloned().unwrap_or_default();
                (k, StepCapture { window: windows[k], name, ..Default::default() }, false)
            })
            .collect();
        PathSteps { kept, typical, groups, threads: ThreadNames::default() }
    }

    /// Whether window `k`'s ops are kept.
    pub fn keeps(&self, k: usize) -> bool {
        self.kept.binary_search_by_key(&k, |c| c.0).is_ok()
    }

    /// Keeps an op of window `k`.
    pub fn op(&mut self, k: usize, op: PathOp) {
        if let Ok(i) = self.kept.binary_search_by_key(&k, |c| c.0) {
            let limit = if Some(k) == self.typical { MAX_OPS } else { MAX_STRATUM_OPS };
            let (_, cap, partial) = &mut self.kept[i];
            if cap.ops.len() < limit {
                cap.op(op);
            } else {
                *partial = true;
            }
        }
    }

    /// Keeps a call of a launching thread (each kept step takes those in its window).
    pub fn call(&mut self, class: CallClass, c: PathCall) {
        for (_, cap, _) in &mut self.kept {
            cap.call(class, c);
        }
    }

    /// Thread `tid` is named by the string `name` (the latest name stands).
    pub fn thread_named(&mut self, tid: u32, name: u32) {
        self.threads.insert(tid, name);
    }

    /// Walks every kept step.
    pub fn walk(&self, p: &Process) -> Walked {
        let walk = |p, cap| walk(p, cap, &self.threads);
        let kept = |k: usize| self.kept.binary_search_by_key(&k, |c| c.0).ok().map(|i| &self.kept[i]);
        let typical = self.typical.and_then(kept).and_then(|(_, cap, _)| walk(p, cap));
        let strata = self
            .groups
            .iter()
            .map(|&(k, steps_ns, steps)| Stratum {
                path: if Some(k) == self.typical {
                    typical.clone()
                } else {
                    kept(k).and_then(|(_, cap, _)| walk(p, cap))
                },
                partial: kept(k).is_some_and(|(_, _, partial)| *partial),
                steps_ns,
                steps,
            })
            .collect();
        Walked { typical, strata }
    }
}
