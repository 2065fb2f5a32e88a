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

/// Threads whose step ranges overlap each other's (at least this share of them, 1 in 8) run loops of their own.
const OVERLAPPING_SHARE: usize = 8;

/// The ranges of one loop. Where several threads' step ranges overlap each other (a server with a thread per GPU,
/// a pipeline's stages, each marking its own steps), their union is no sequence of steps: the outermost-first rule
/// would keep whichever began first, a step of one thread here and of another there. One thread's are kept then:
/// the one whose ranges cover the most time (its work and the others' land in its steps' windows by time), as the
/// launch pattern keeps the busiest thread's loop ([`super::pattern::steps_of_threads`]); with what was left out.
/// Ranges that pass from thread to thread without overlapping (a pool running one iteration at a time) are one loop.
fn one_loop(mut v: Vec<(HostRange, u64)>) -> (Vec<(HostRange, u64)>, Option<String>) {
    v.sort_by_key(|(r, _)| (r.start, std::cmp::Reverse(r.end)));
    // For each range, whether a range of another thread that began before it is still open: the latest end seen
    // of the two threads with the latest ends.
    let mut overlapping = 0;
    let mut latest: [(u64, u32); 2] = [(0, u32::MAX); 2];
    for (r, _) in &v {
        if latest.iter().any(|&(end, tid)| tid != r.tid && tid != u32::MAX && end > r.start) {
            overlapping += 1;
        }
        match latest.iter().position(|l| l.1 == r.tid) {
            Some(i) => latest[i].0 = latest[i].0.max(r.end),
            None if r.end > latest[1].0 => latest[1] = (r.end, r.tid),
            None => {}
        }
        if latest[1].0 > latest[0].0 {
            latest.swap(0, 1);
        }
    }
    if overlapping < 2 || overlapping * OVERLAPPING_SHARE < v.len() {
        return (v, None);
    }
    let mut covered: FxHashMap<u32, (u64, usize)> = FxHashMap::default();
    for (r, _) in &v {
        let c = covered.entry(r.tid).or_default();
        (c.0, c.1) = (c.0 + r.end.saturating_sub(r.start), c.1 + 1);
    }
    let Some((&kept, &(_, kept_n))) = covered.iter().max_by_key(|(&tid, &(ns, n))| (ns, n, std::cmp::Reverse(tid)))
    else {
        return (v, None);
    };
    let mut others: Vec<(u32, usize)> =
        covered.iter().filter(|(&t, _)| t != kept).map(|(&t, &(_, n))| (t, n)).collect();
    others.sort_unstable();
    let shown: Vec<String> = others.iter().take(4).map(|(t, n)| format!("thread {t}'s {n}")).collect();
    let more = if others.len() > 4 { format!(" and {} more threads'", others.len() - 4) } else { String::new() };
    let note = format!(
        "step ranges of {} threads overlap one another: the steps are thread {kept}'s {kept_n} ranges (the most step time), \
         and {}{more} are left out (`--step NAME` chooses the ranges by name)",
        others.len() + 1,
        shown.join(", ")
    );
    v.retain(|(r, _)| r.tid == kept);
    (v, Some(note))
}

/// Steps from ranges, in order of preference, each with the end of the work launched inside it, and what
/// [`one_loop`] left out.
pub struct RangeSteps {
    pub source: StepSource,
    pub ranges: Vec<(HostRange, u64)>,
    pub left_out: Option<String>,
}

/// None: the launch pattern must tell.
pub fn steps_from_ranges(p: &Process, candidates: &[(HostRange, u64)], option: Option<&str>) -> Option<RangeSteps> {
    let pick = |source: StepSource, f: &dyn Fn(&str) -> bool| -> RangeSteps {
        let (ranges, left_out) = one_loop(candidates.iter().filter(|r| f(p.string(r.0.name))).copied().collect());
        RangeSteps { source, ranges: top_level(ranges), left_out }
    };
    if let Some(opt) = option {
        return Some(pick(StepSource::Option, &|n| n.starts_with(opt)));
    }
    let profiler = pick(StepSource::ProfilerStep, &|n| n.starts_with("ProfilerStep#"));
    if !profiler.ranges.is_empty() {
        return Some(profiler);
    }
    let nvtx = pick(StepSource::Nvtx, &cuflight_trace::model::range_roles::step_like);
    // One range is a step where it names a serving engine's iteration: a capture of one iteration (TraceLens
    // splits servers' traces so) is that iteration, not a trace without steps.
    let iteration =
        |r: &(HostRange, u64)| cuflight_trace::model::range_roles::iteration_kind(p.string(r.0.name)).is_some();
    (nvtx.ranges.len() >= 2 || nvtx.ranges.iter().any(iteration)).then_some(nvtx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(tid: u32, start: u64, len: u64, gap: u64, n: u64) -> Vec<(HostRange, u64)> {
        (0..n)
            .map(|i| {
                (HostRange { start: start + i * (len + gap), end: start + i * (len + gap) + len, name: 1, tid }, 0)
            })
            .collect()
    }

    /// Two threads stepping at once: the one whose steps cover the most time is the loop, and the other is said.
    #[test]
    fn threads_stepping_at_once_keep_one_loop() {
        let mut v = ranges(7, 0, 25, 1, 30);
        v.extend(ranges(9, 5, 3, 0, 200));
        let (kept, note) = one_loop(v);
        assert!(kept.iter().all(|r| r.0.tid == 7) && kept.len() == 30, "{}", kept.len());
        let note = note.expect("said");
        assert!(note.contains("thread 7's 30") && note.contains("thread 9's 200"), "{note}");
    }

    /// Steps handed from thread to thread without overlapping, and one thread's nested ranges, are one loop.
    #[test]
    fn handed_over_or_nested_steps_are_one_loop() {
        let mut v = ranges(7, 0, 10, 10, 20);
        v.extend(ranges(9, 10, 10, 10, 20));
        let (kept, note) = one_loop(v);
        assert_eq!((kept.len(), note), (40, None));
        let mut v = ranges(7, 0, 10, 0, 20);
        v.extend(ranges(7, 1, 2, 8, 20));
        let (kept, note) = one_loop(v);
        assert_eq!((kept.len(), note), (40, None));
    }
}
