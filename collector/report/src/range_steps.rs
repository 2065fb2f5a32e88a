//! Steps from host ranges: every range that could be a step, gathered as pass one of the plan goes
//! ([`super::plan`]), and the choice among them (`--step`, `ProfilerStep#N`, step-like or iteration names).

use super::steps::StepSource;
use super::window::HostRange;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;

/// How a range that opened is found again when it closes: (thread, domain, start, name, async).
pub type OpenKey = (u32, u64, u64, u32, bool);

/// Every range that could be a step, with the latest end of the GPU work launched inside it (its window may end
/// there): a step's work is seen while the step is open or soon after it closed, so the ranges that can still
/// take work are the open ones and the last ones to close.
#[derive(Default)]
pub struct Candidates {
    /// (range, end of the work launched inside it); open ranges end at u64::MAX.
    all: Vec<(HostRange, u64)>,
    open: FxHashMap<OpenKey, u32>,
    /// Closed ranges in the order they closed (the order ranges are reported in).
    closed: Vec<u32>,
    /// Closed ranges by end.
    by_end: Vec<u32>,
}

impl Candidates {
    pub fn open(&mut self, key: OpenKey) {
        let at = self.all.len() as u32;
        self.all.push((HostRange { start: key.2, end: u64::MAX, name: key.3, tid: key.0 }, 0));
        self.open.insert(key, at);
    }

    pub fn closed(&mut self, r: HostRange, key: Option<OpenKey>) {
        let at = match key.and_then(|k| self.open.remove(&k)) {
            Some(at) => {
                self.all[at as usize].0 = r;
                at
            }
            None => {
                self.all.push((r, 0));
                (self.all.len() - 1) as u32
            }
        };
        self.closed.push(at);
        let all = &self.all;
        let pos = self.by_end.partition_point(|&i| all[i as usize].0.end <= r.end);
        self.by_end.insert(pos, at);
    }

    /// Device work launched at `t` ends at `end`.
    pub fn work(&mut self, t: u64, end: u64) {
        for &i in self.open.values() {
            let c = &mut self.all[i as usize];
            if c.0.start <= t {
                c.1 = c.1.max(end);
            }
        }
        for &i in self.by_end.iter().rev() {
            let c = &mut self.all[i as usize];
            if c.0.end <= t {
                break;
            }
            if c.0.start <= t {
                c.1 = c.1.max(end);
            }
        }
    }

    /// The closed ranges, in the order they closed.
    pub fn ranges(&self) -> Vec<(HostRange, u64)> {
        self.closed.iter().map(|&i| self.all[i as usize]).collect()
    }
}

/// Keeps the outermost of nested or overlapping ranges, in time order.
fn top_level(mut v: Vec<(HostRange, u64)>) -> Vec<(HostRange, u64)> {
    v.sort_by_key(|(r, _)| (r.start, std::cmp::Reverse(r.end)));
    let mut out: Vec<(HostRange, u64)> = Vec::new();
    for r in v {
        if out.last().is_none_or(|last| r.0.start >= last.0.end) {
            out.push(r);
        }
    }
    out
}

/// Steps from ranges, in order of preference, each with the end of the work launched inside it (None: the
/// launch pattern must tell).
pub type RangeSteps = (StepSource, Vec<(HostRange, u64)>);

pub fn steps_from_ranges(p: &Process, candidates: &[(HostRange, u64)], option: Option<&str>) -> Option<RangeSteps> {
    let pick = |f: &dyn Fn(&str) -> bool| -> Vec<(HostRange, u64)> {
        top_level(candidates.iter().filter(|r| f(p.string(r.0.name))).copied().collect())
    };
    if let Some(opt) = option {
        return Some((StepSource::Option, pick(&|n| n.starts_with(opt))));
    }
    let profiler = pick(&|n| n.starts_with("ProfilerStep#"));
    if !profiler.is_empty() {
        return Some((StepSource::ProfilerStep, profiler));
    }
    let nvtx = pick(&cuflight_trace::model::range_roles::step_like);
    // One range is a step where it names a serving engine's iteration: a capture of one iteration (TraceLens
    // splits servers' traces so) is that iteration, not a trace without steps.
    let iteration =
        |r: &(HostRange, u64)| cuflight_trace::model::range_roles::iteration_kind(p.string(r.0.name)).is_some();
    (nvtx.len() >= 2 || nvtx.iter().any(iteration)).then_some((StepSource::Nvtx, nvtx))
}
