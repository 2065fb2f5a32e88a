//! Warm-up steps: the first steps of a run that do not look like the rest (cuBLAS/cuDNN heuristics and
//! autotuning, `torch.compile`, the caching allocator growing to its working set, lazy module loading). Users
//! record them (torch.profiler users skip them by hand with `schedule(wait, warmup)`); left in, a 300 ms first
//! step decides the verdict of a run whose steady steps take 30 ms.
//!
//! A leading step is warm-up when any of these holds, against the steady half of the run (its later half):
//! - it takes more than 1.5× the steady steps' median time;
//! - it runs kernels that no later half step runs (autotuning candidates, set-up kernels);
//! - it makes more device allocation calls (`cudaMalloc`, `cuMemAlloc`; not the stream-ordered ones, which
//!   reuse a pool) than any steady step (the allocator growing).
//!
//! Warm-up is the run of such steps from the first one, at most half the steps, and only with three steps or
//! more (fewer have no steady pattern to compare against).
//!
//! A later step pays for first-time work again when it runs kernels that no step before it ran and takes more
//! than 1.5× the steady median: a `torch.compile` recompilation (a new shape or a guard that failed compiles
//! new Triton kernels; Inductor names them `triton_*`), a code path taken for the first time (the first
//! evaluation), a kernel autotuned for a new shape. Each is named with its cost, its time over the median, and
//! left out of the analyses with the warm-up ([`super::plan::Plan::leave_out_warmup`]).

use super::spans::Span;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// A step is slow when it takes more than this times the steady median.
const SLOW: f64 = 1.5;

/// Device allocation calls remembered per process for the allocation rule (their start times); past this many,
/// the rule is left out (the run allocates all the time, so allocations do not tell warm-up apart).
pub const MAX_ALLOC_CALLS: usize = 1 << 20;

/// What the plan pass collects for the rules.
#[derive(Default)]
pub struct Evidence {
    /// Kernel name → (first start, last start).
    pub kernels: FxHashMap<u32, (u64, u64)>,
    /// Start times of device allocation calls (None once there were more than [`MAX_ALLOC_CALLS`]).
    pub alloc_calls: Option<Vec<u64>>,
}

impl Evidence {
    pub fn new() -> Evidence {
        Evidence { kernels: FxHashMap::default(), alloc_calls: Some(Vec::new()) }
    }

    pub fn kernel(&mut self, name: u32, start: u64) {
        let k = self.kernels.entry(name).or_insert((start, start));
        k.0 = k.0.min(start);
        k.1 = k.1.max(start);
    }

    pub fn alloc_call(&mut self, start: u64) {
        if let Some(v) = self.alloc_calls.as_mut() {
            if v.len() >= MAX_ALLOC_CALLS {
                self.alloc_calls = None;
            } else {
                v.push(start);
            }
        }
    }
}

/// One warm-up step and why it is one.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct WarmupStep {
    /// The step's name.
    pub name: String,
    /// Its start on the trace's clock.
    pub start_ns: u64,
    /// Its duration.
    pub duration_ns: u64,
    /// Its time over the steady steps' median.
    pub slowdown: f64,
    /// Kernels (distinct names) it ran that no steady step runs.
    pub kernels_only_here: usize,
    /// Device allocation calls it made.
    pub alloc_calls: usize,
}

/// The warm-up steps of a process (JSON `warmup`).
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Warmup {
    /// The first steps judged warm-up (first-time kernels, allocations, or a time no later step takes).
    pub steps: usize,
    /// Their time, summed.
    pub ns: u64,
    /// Whether they are analysed with the rest (`--include-warmup`).
    pub included: bool,
    /// A filter (`--filter-nvtx`, `--filter-time`) chose the steps: warm-up ones are analysed where chosen.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub filtered: bool,
    /// Median time of the steady steps the rules compare against.
    pub steady_step_ns: u64,
    /// Each warm-up step and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<WarmupStep>,
    /// Up to five kernels that ran only in warm-up, the longest-lived first (ids into the process's strings).
    #[serde(skip)]
    pub example_kernels: Vec<u32>,
    /// ... their names, once resolved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels_only_in_warmup: Vec<String>,
    /// Steps after the warm-up that paid for first-time work again (see the module docs), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub later: Vec<FirstRun>,
}

/// A step after the warm-up that ran kernels no earlier step ran, slowly (JSON `warmup.later`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FirstRun {
    /// The step's name.
    pub name: String,
    /// Its start on the trace's clock.
    pub start_ns: u64,
    /// Its duration.
    pub duration_ns: u64,
    /// Its time over the steady steps' median.
    pub cost_ns: u64,
    /// Kernels (distinct names) first run in it.
    pub new_kernels: usize,
    /// All of them Triton's (`triton_*`): torch.compile compiled them, so the step recompiled.
    pub recompiled: bool,
    /// Their ids in the process's strings, in order of first run.
    #[serde(skip)]
    pub kernel_ids: Vec<u32>,
    /// The first three, by name.
    pub examples: Vec<String>,
}

/// Steps from `from` on that ran kernels first seen in them and took over [`SLOW`]× `median`.
fn first_runs(windows: &[Span], names: &[String], ev: &Evidence, from: usize, reference: &[u64]) -> Vec<FirstRun> {
    let in_window = |t: u64| windows.partition_point(|w| w.0 <= t).checked_sub(1).filter(|&i| t < windows[i].1);
    let mut firsts: Vec<(u64, u32)> = ev.kernels.iter().map(|(&k, &(first, _))| (first, k)).collect();
    firsts.sort_unstable();
    let mut per: FxHashMap<usize, Vec<u32>> = FxHashMap::default();
    for (first, k) in firsts {
        if let Some(i) = in_window(first).filter(|&i| i >= from && i > 0) {
            per.entry(i).or_default().push(k);
        }
    }
    let mut out: Vec<FirstRun> = per
        .into_iter()
        .filter_map(|(i, kernels)| {
            let (d, median) = (windows[i].1 - windows[i].0, reference[i]);
            (median > 0 && d as f64 > SLOW * median as f64).then(|| FirstRun {
                name: names.get(i).cloned().unwrap_or_default(),
                start_ns: windows[i].0,
                duration_ns: d,
                cost_ns: d - median,
                new_kernels: kernels.len(),
                recompiled: false,
                kernel_ids: kernels,
                examples: Vec::new(),
            })
        })
        .collect();
    out.sort_unstable_by_key(|r| r.start_ns);
    out
}

impl Warmup {
    /// One line for text and HTML: what the warm-up steps did.
    pub fn describe(&self) -> String {
        let mut what: Vec<String> = Vec::new();
        let kernels: usize = self.detail.iter().map(|d| d.kernels_only_here).sum();
        if kernels > 0 {
            let e = self.kernels_only_in_warmup.first().map_or(String::new(), |n| format!(", e.g. {n}"));
            what.push(format!("{kernels} kernels that steady steps never run (autotuning, set-up{e})"));
        }
        let allocs: usize = self.detail.iter().map(|d| d.alloc_calls).sum();
        if allocs > 0 {
            what.push(format!("{allocs} device allocation calls (the allocator growing)"));
        }
        let slowest = self.detail.iter().map(|d| d.slowdown).fold(0.0, f64::max);
        if slowest > SLOW {
            what.push(format!("up to {slowest:.1}x the steady step time"));
        }
        what.join("; ")
    }
}

/// What each step's time is compared with: the median steady step (the second half's) of its own kind where a
/// serving engine names its iterations (a prefill is slower than a decode by nature, not for warming up; 0 for a
/// kind the steady half does not run), else of all steps.
fn like_steps_median(windows: &[Span], names: &[String], half: usize, median: u64) -> Vec<u64> {
    use cuflight_trace::model::range_roles::iteration_kind;
    let kinds: Vec<_> = (0..windows.len()).map(|i| names.get(i).and_then(|n| iteration_kind(n))).collect();
    if kinds.iter().all(Option::is_none) {
        return vec![median; windows.len()];
    }
    let mut by_kind: FxHashMap<_, Vec<u64>> = FxHashMap::default();
    for i in half..windows.len() {
        by_kind.entry(kinds[i]).or_default().push(windows[i].1 - windows[i].0);
    }
    let medians: FxHashMap<_, u64> = by_kind
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_unstable();
            (k, v[v.len() / 2])
        })
        .collect();
    // A kind the steady half never runs has nothing to be compared with: only first-time kernels or allocations
    // can make it warm-up (0: no reference).
    kinds.iter().map(|k| medians.get(k).copied().unwrap_or(0)).collect()
}

/// How many leading steps of `windows` (with `names`) are warm-up, and what they did.
pub fn detect(windows: &[Span], names: &[String], ev: &Evidence) -> Warmup {
    let n = windows.len();
    if n < 3 {
        return Warmup::default();
    }
    let half = n / 2;
    let mut steady: Vec<u64> = windows[half..].iter().map(|w| w.1 - w.0).collect();
    steady.sort_unstable();
    let median = steady[steady.len() / 2];
    let reference = like_steps_median(windows, names, half, median);
    let steady_start = windows[half].0;
    // Kernels introduced in a leading step and never run again once the steady half begins.
    let mut only_before: Vec<(u32, u64, u64)> =
        ev.kernels.iter().filter(|(_, &(_, last))| last < steady_start).map(|(&k, &(f, l))| (k, f, l)).collect();
    only_before.sort_unstable_by_key(|&(k, f, l)| (std::cmp::Reverse(l - f), f, k));
    let in_window = |t: u64| windows.partition_point(|w| w.0 <= t).checked_sub(1).filter(|&i| t < windows[i].1);
    let mut new_kernels = vec![0usize; n];
    for &(_, first, _) in &only_before {
        if let Some(i) = in_window(first) {
            new_kernels[i] += 1;
        }
    }
    let allocs: Option<Vec<usize>> = ev.alloc_calls.as_ref().map(|calls| {
        let mut per = vec![0usize; n];
        for &t in calls {
            if let Some(i) = in_window(t) {
                per[i] += 1;
            }
        }
        per
    });
    let steady_allocs = allocs.as_ref().map_or(0, |a| a[half..].iter().copied().max().unwrap_or(0));
    let mut detail = Vec::new();
    for i in 0..half {
        let d = windows[i].1 - windows[i].0;
        let slowdown = if reference[i] == 0 { 1.0 } else { d as f64 / reference[i] as f64 };
        let alloc_calls = allocs.as_ref().map_or(0, |a| a[i]);
        let allocating = allocs.is_some() && alloc_calls > steady_allocs;
        if !(slowdown > SLOW || new_kernels[i] > 0 || allocating) {
            break;
        }
        detail.push(WarmupStep {
            name: names.get(i).cloned().unwrap_or_default(),
            start_ns: windows[i].0,
            duration_ns: d,
            slowdown,
            kernels_only_here: new_kernels[i],
            alloc_calls: if allocating { alloc_calls } else { 0 },
        });
    }
    let warm_end = detail.last().map_or(0, |d| d.start_ns + d.duration_ns);
    let example_kernels =
        only_before.iter().filter(|&&(_, first, _)| first < warm_end).take(5).map(|&(k, _, _)| k).collect();
    let later = first_runs(windows, names, ev, detail.len(), &reference);
    Warmup {
        steps: detail.len(),
        ns: detail.iter().map(|d| d.duration_ns).sum(),
        included: false,
        filtered: false,
        steady_step_ns: median,
        detail,
        example_kernels,
        kernels_only_in_warmup: Vec::new(),
        later,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(durations: &[u64]) -> (Vec<Span>, Vec<String>) {
        let mut t = 1_000;
        let w = durations
            .iter()
            .map(|&d| {
                let s = (t, t + d);
                t += d;
                s
            })
            .collect();
        (w, (0..durations.len()).map(|i| format!("ProfilerStep#{i}")).collect())
    }

    #[test]
    fn slow_first_steps_are_warmup_and_a_steady_run_has_none() {
        // The H100 transformer run: 315 and 51 ms first steps, then about 30 ms each.
        let mut d = vec![315_000_000, 51_000_000];
        d.extend([30_000_000u64, 31_000_000, 29_000_000].iter().cycle().take(20));
        let (w, names) = windows(&d);
        let r = detect(&w, &names, &Evidence::new());
        assert_eq!((r.steps, r.ns), (2, 366_000_000));
        assert_eq!(r.detail[0].name, "ProfilerStep#0");
        let (w, names) = windows(&[30, 31, 29, 30, 30, 32]);
        assert_eq!(detect(&w, &names, &Evidence::new()).steps, 0);
        // Too few steps to tell a pattern.
        let (w, names) = windows(&[300, 30]);
        assert_eq!(detect(&w, &names, &Evidence::new()).steps, 0);
    }

    #[test]
    fn autotuning_kernels_and_allocator_growth_make_warmup_at_steady_speed() {
        let (w, names) = windows(&[100, 100, 100, 100, 100, 100, 100, 100]);
        let mut ev = Evidence::new();
        for (i, win) in w.iter().enumerate() {
            ev.kernel(1, win.0 + 10); // the model's kernel, every step
            if i == 0 {
                ev.kernel(2, win.0 + 20); // an autotuning candidate, step 0 only
                ev.alloc_call(win.0 + 5);
            }
            if i == 1 {
                ev.alloc_call(win.0 + 5); // the allocator still growing
                ev.alloc_call(win.0 + 6);
            }
        }
        let r = detect(&w, &names, &ev);
        assert_eq!(r.steps, 2, "{r:?}");
        assert_eq!((r.detail[0].kernels_only_here, r.detail[0].alloc_calls), (1, 1));
        assert_eq!((r.detail[1].kernels_only_here, r.detail[1].alloc_calls), (0, 2));
        assert_eq!(r.example_kernels, vec![2]);
        // A program that allocates in every step: allocations tell nothing.
        let mut ev = Evidence::new();
        for win in &w {
            ev.alloc_call(win.0 + 5);
        }
        assert_eq!(detect(&w, &names, &ev).steps, 0);
    }

    #[test]
    fn a_later_step_that_compiles_new_kernels_is_named_with_its_cost() {
        // 12 steady steps of 100; step 8 recompiles: 400, and runs kernel 3 from then on.
        let mut d = vec![100u64; 12];
        d[8] = 400;
        let (w, names) = windows(&d);
        let mut ev = Evidence::new();
        for (i, win) in w.iter().enumerate() {
            ev.kernel(1, win.0 + 10);
            if i >= 8 {
                ev.kernel(3, win.0 + 350.min(win.1 - win.0 - 1));
            }
        }
        let r = detect(&w, &names, &ev);
        assert_eq!(r.steps, 0);
        assert_eq!(r.later.len(), 1, "{r:?}");
        let f = &r.later[0];
        assert_eq!((f.name.as_str(), f.cost_ns, f.new_kernels, &f.kernel_ids), ("ProfilerStep#8", 300, 1, &vec![3]));
        // New kernels at steady speed (a second model's first call, cheap) or a slow step with none: neither.
        d[8] = 100;
        let (w, names) = windows(&d);
        assert!(detect(&w, &names, &ev).later.is_empty());
        d[8] = 400;
        let (w, names) = windows(&d);
        let mut ev = Evidence::new();
        for win in &w {
            ev.kernel(1, win.0 + 10);
        }
        assert!(detect(&w, &names, &ev).later.is_empty());
    }

    #[test]
    fn warmup_never_takes_more_than_half_the_steps() {
        let (w, names) = windows(&[900, 800, 700, 600, 500, 400, 300, 200]);
        let r = detect(&w, &names, &Evidence::new());
        assert!(r.steps <= 4, "{r:?}");
    }
}
