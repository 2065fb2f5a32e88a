//! The launch↔work join for one process's events in time order: an API call that can queue device work
//! ([`crate::model::names::api_queues_work`]) waits, by correlation id, for the first kernel, copy or memset that carries
//! its id. A call starts before its work, so a time-ordered stream never needs to look back; what is kept is the
//! calls whose work has not appeared yet (in flight, or lost with a process killed before its last flush), never
//! the trace.

use crate::model::trace::Process;
use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;

/// How long a launch call waits for its device work before analyses stop waiting: the GPU's queue holds about
/// a thousand launches, so work that starts later than this after its call needs seconds-long kernels queued back
/// to back; keeping every call instead would keep the trace.
pub const LAUNCH_HORIZON_NS: u64 = 4_000_000_000;

/// The launching call of a piece of device work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub tid: u32,
    pub start: u64,
}

#[derive(Default)]
pub struct LaunchJoin {
    waiting: FxHashMap<u32, Launch>,
    /// Whether a name id (of this process) queues work: classified once per name.
    queues_work: FxHashMap<u32, bool>,
}

impl LaunchJoin {
    /// Feeds an API call of `p`; true when it may queue work (and now waits for it).
    pub fn api(&mut self, p: &Process, e: &RawEvent) -> bool {
        if e.kind() != Some(EventKind::Api) || e.correlation == 0 {
            return false;
        }
        let queues =
            *self.queues_work.entry(e.name).or_insert_with(|| crate::model::names::api_queues_work(p.string(e.name)));
        if queues {
            self.waiting.insert(e.correlation, Launch { tid: e.tid, start: e.start });
        }
        queues
    }

    /// Feeds device work; the call that launched it when this is the first work of that call (a graph launch's
    /// later kernels, and work whose call was never seen, get `None`).
    pub fn work(&mut self, e: &RawEvent) -> Option<Launch> {
        if e.correlation == 0 || !e.is_gpu_work() {
            return None;
        }
        self.waiting.remove(&e.correlation)
    }

    /// Calls still waiting for their work.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_joins_its_first_work_only_and_calls_without_work_wait() {
        let mut p = Process::default();
        p.strings.insert(1, "cudaLaunchKernel".into());
        p.strings.insert(2, "cudaStreamSynchronize".into());
        p.strings.insert(3, "cudaGraphLaunch".into());
        let api = |name, corr, t| RawEvent { name, correlation: corr, ..RawEvent::new(EventKind::Api, 7, t, t + 5) };
        let kernel = |corr, t| RawEvent { correlation: corr, ..RawEvent::new(EventKind::Kernel, 0, t, t + 5) };
        let mut j = LaunchJoin::default();
        assert!(j.api(&p, &api(1, 10, 100)));
        assert!(!j.api(&p, &api(2, 11, 110)), "a sync queues nothing");
        assert!(j.api(&p, &api(3, 12, 120)));
        assert!(j.api(&p, &api(1, 13, 130)));
        assert_eq!(j.work(&kernel(10, 150)), Some(Launch { tid: 7, start: 100 }));
        assert_eq!(j.work(&kernel(12, 160)), Some(Launch { tid: 7, start: 120 }));
        assert_eq!(j.work(&kernel(12, 170)), None, "the graph's second kernel: one flow per launch");
        assert_eq!(j.work(&kernel(99, 180)), None);
        assert_eq!(j.waiting(), 1, "launch 13's kernel never came");
    }
}
