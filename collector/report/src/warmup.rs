//! Warm-up steps: the first steps of a run that do not look like the rest (cuBLAS/cuDNN heuristics and
//! autotuning, `torch.compile`, the caching allocator growing to its working set, lazy module loading). Users
//! record them (torch.profiler users skip them by hand with `schedule(wait, warmup)`); left in, a 300 ms first
//! step decides the verdict of a run whose steady steps take 30 ms.
//!
//! A leading step is warm-up when any of these holds, against the steady half of the run (its later half):
//! - it takes more than 1.5× the steady steps' median time: of its own kind where a server's steps have kinds
//!   ([`super::step_kinds`]: a prefill is not a slow decode; a kind the steady half never runs, see
//!   [`reference()`]);
//! - it runs kernels that no later half step runs (autotuning candidates, set-up kernels);
//! - it makes more device allocation calls (`cudaMalloc`, `cuMemAlloc`; not the stream-ordered ones, which
//!   reuse a pool) than any steady step (the allocator growing).
//!
//! Warm-up is the run of such steps from the first one, at most half the steps, and only with three steps or
//! more (fewer have no steady pattern to compare against).
//!
//! A later step pays for first-time work again when it runs kernels that no step before it ran and takes more
//! than 1.5× the steady median (of its kind): a `torch.compile` recompilation (a new shape or a guard that failed compiles
//! new Triton kernels; Inductor names them `triton_*`), a code path taken for the first time (the first
//! evaluation), a kernel autotuned for a new shape. Each is named with its cost, its time over the median, and
//! left out of the analyses with the warm-up ([`super::plan::Plan::leave_out_warmup`]). So is a later step that
//! instantiates a CUDA graph: one captured lazily, the first time its batch size or input shape came
//! (torch.compile's CUDA graph trees; a server that captures its decode buckets as it meets them). Slow, always;
//! at any speed where such steps are rare ([`RARE_CAPTURES`]): a server's capture step runs the batch eagerly
//! before it records it, so it holds eager kernels and a replay as a mixed step does, and is told apart from one
//! by the instantiation, not by its time (a loaded host stretches the mixed steps it is compared with). A loop
//! that instantiates in most steps is not lazy but re-capturing, for the `graph_capture` finding.

use super::spans::{window_of, Span};
use super::step_kinds::{self, Launched, ToldBy};
use super::words::{counted, ms};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// A step is slow when it takes more than this times the steady median (the critical paths' rule too).
pub(crate) const SLOW: f64 = 1.5;

/// A later step that instantiates a CUDA graph is named at any speed where at most one in this many steps after
/// the warm-up does.
pub const RARE_CAPTURES: usize = 8;

/// Times remembered per process for each rule that needs them (device allocation calls, graph replays, eager
/// kernels); past this many, the rule is left out (a run that allocates all the time is not told apart by its
/// allocations; past a million eager kernels, steps are compared with all steps, not with their kind's).
pub const MAX_TIMES: usize = 1 << 20;

/// What the plan pass collects for the rules.
#[derive(Default)]
pub struct Evidence {
    /// Kernel name → (first start, last start).
    pub kernels: FxHashMap<u32, (u64, u64)>,
    /// Start times of device allocation calls.
    pub alloc_calls: Times,
    /// Where each CUDA graph replay's first op starts, and each kernel launched one by one: what a server's
    /// steps launch tells its kinds apart ([`super::step_kinds`]).
    pub graph_replays: Times,
    pub eager_kernels: Times,
    /// The earliest start of a stream capture or a graph instantiation: steps launched one by one before it
    /// are a loop's eager runs before it is captured, those after it are other work than the graph's
    /// ([`reference()`]).
    pub first_graph_setup: Option<u64>,
    /// Start times of graph instantiations: a later step that makes one pays for a graph captured lazily.
    pub graph_instantiations: Times,
    /// Calls in which CUDA set itself up, on any thread (the launching threads are known only after the pass), up
    /// to [`MAX_SETUP_SEEN`].
    pub cuda_setup: Vec<SetupSeen>,
}

/// A call in which CUDA set itself up ([`super::idle::sets_cuda_up`], [`super::idle::first_launch_sets_cuda_up`]).
#[derive(Clone, Copy, Debug)]
pub struct SetupSeen {
    pub span: Span,
    pub tid: u32,
    pub call: u32,
    /// A kernel's first launch (its module loaded), not a call that only sets up.
    pub first_launch: bool,
}

/// Set-up calls remembered per process: a program makes a few dozen; a trace with more is told by its first ones.
pub const MAX_SETUP_SEEN: usize = 1 << 16;

/// Start times, up to [`MAX_TIMES`] (None once there were more).
pub struct Times(Option<Vec<u64>>);

impl Default for Times {
    fn default() -> Times {
        Times(Some(Vec::new()))
    }
}

impl Times {
    pub fn push(&mut self, t: u64) {
        if let Some(v) = self.0.as_mut() {
            if v.len() >= MAX_TIMES {
                self.0 = None;
            } else {
                v.push(t);
            }
        }
    }

    /// How many fall in each of `windows` (in time order, not overlapping); None past the cap.
    fn per_window(&self, windows: &[Span]) -> Option<Vec<u64>> {
        let mut per = vec![0u64; windows.len()];
        for &t in self.0.as_ref()? {
            if let Some(i) = window_of(windows, t) {
                per[i] += 1;
            }
        }
        Some(per)
    }
}

impl Evidence {
    pub fn new() -> Evidence {
        Evidence::default()
    }

    pub fn kernel(&mut self, name: u32, start: u64) {
        let k = self.kernels.entry(name).or_insert((start, start));
        k.0 = k.0.min(start);
        k.1 = k.1.max(start);
    }

    pub fn alloc_call(&mut self, start: u64) {
        self.alloc_calls.push(start);
    }

    pub fn cuda_setup(&mut self, seen: SetupSeen) {
        if self.cuda_setup.len() < MAX_SETUP_SEEN {
            self.cuda_setup.push(seen);
        }
    }

    /// A stream capture began or a graph was instantiated (`instantiates`) at `start`.
    pub fn graph_setup(&mut self, start: u64, instantiates: bool) {
        self.first_graph_setup = Some(self.first_graph_setup.map_or(start, |t| t.min(start)));
        if instantiates {
            self.graph_instantiations.push(start);
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
    /// Its kind, where the steps have kinds (a serving engine's iterations, [`step_kinds`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Its time over the median it is compared with (`compared_with_ns`).
    pub slowdown: f64,
    /// The steady steps' median of its kind, or of all steps where steps have no kinds; 0 where none compares.
    pub compared_with_ns: u64,
    /// Kernels (distinct names) it ran that no steady step runs.
    pub kernels_only_here: usize,
    /// Device allocation calls it made.
    pub alloc_calls: usize,
    /// CUDA graphs instantiated in it (captured as the program warmed up, or lazily for a batch size first met
    /// while the warm-up still ran).
    #[serde(skip_serializing_if = "is_zero")]
    pub graphs_instantiated: u64,
    /// Time a launching thread spent in it inside calls in which CUDA set itself up (the `cuda_setup` idle
    /// cause's calls: kernels' first launches that loaded their modules, streams, handles and events created,
    /// CUDA initialised), merged across threads.
    #[serde(skip_serializing_if = "is_zero")]
    pub cuda_setup_ns: u64,
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
    /// Median time of the steady steps (the later half's).
    pub steady_step_ns: u64,
    /// Where steps have kinds (a server's prefill, decode...): each kind's steady median, which its steps are
    /// compared with, fastest first (a kind the steady half never runs: with the slowest where its steps are a
    /// loop's eager runs before the loop was captured as a CUDA graph, else with none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steady_by_kind: Vec<KindMedian>,
    /// Each warm-up step and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<WarmupStep>,
    /// Up to five kernels that ran only in warm-up, the longest-lived first (ids into the process's strings).
    #[serde(skip)]
    pub example_kernels: Vec<u32>,
    /// Of the kernels the warm-up ran first that no steady step runs, those that steps after the warm-up run
    /// again (ids; a server's prefill kernels, run by the pre-serving warm-up, then by the prefills before the
    /// steady half): work of the program, not set-up.
    #[serde(skip)]
    pub kernels_run_again: Vec<u32>,
    /// The first of them by name, once resolved.
    #[serde(skip)]
    pub run_again_example: Option<String>,
    /// ... their names, once resolved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels_only_in_warmup: Vec<String>,
    /// Steps after the warm-up that paid for first-time work again (see the module docs), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub later: Vec<FirstRun>,
    /// The program runs kernels torch.compile generated: its first steps compiled them on the host (Dynamo's
    /// tracing, Inductor's code generation, Triton's compiling), which is what makes them slow.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compiled: bool,
    /// The calls behind the warm-up steps' `cuda_setup_ns`: kernels' first launches, and the other calls by name
    /// with their counts, most first.
    #[serde(skip)]
    pub setup_first_launches: u64,
    #[serde(skip)]
    pub setup_calls: Vec<(String, u64)>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One kind's steady median (JSON `warmup.steady_by_kind`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct KindMedian {
    /// The kind ("decode", "graph replay"...).
    pub kind: &'static str,
    /// The median duration of its steps in the steady half.
    pub steady_step_ns: u64,
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
    /// Its kind, where the steps have kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Its time over the steady median it is compared with (its kind's, where steps have kinds); 0 where it is no
    /// slower (a rare capture at steady speed) or no steady step compares.
    pub cost_ns: u64,
    /// Kernels (distinct names) first run in it.
    pub new_kernels: usize,
    /// All of them Triton's (`triton_*`): torch.compile compiled them, so the step recompiled.
    pub recompiled: bool,
    /// CUDA graphs instantiated in it: a graph captured lazily, for a batch size or input shape first seen then
    /// (torch.compile's CUDA graph trees, a server that captures its buckets as it meets them).
    #[serde(skip_serializing_if = "is_zero")]
    pub graphs_instantiated: u64,
    /// Their ids in the process's strings, in order of first run.
    #[serde(skip)]
    pub kernel_ids: Vec<u32>,
    /// The first three, by name.
    pub examples: Vec<String>,
}

/// Steps from `from` on that ran kernels first seen in them, or instantiated a CUDA graph, and took over [`SLOW`]×
/// their reference; and those that instantiated one at any speed, where few steps do ([`RARE_CAPTURES`]). `graphs`:
/// the instantiations in each step.
fn first_runs(
    windows: &[Span],
    names: &[String],
    ev: &Evidence,
    graphs: &[u64],
    from: usize,
    reference: &Reference,
) -> Vec<FirstRun> {
    let mut firsts: Vec<(u64, u32)> = ev.kernels.iter().map(|(&k, &(first, _))| (first, k)).collect();
    firsts.sort_unstable();
    let mut per: FxHashMap<usize, Vec<u32>> = FxHashMap::default();
    for (first, k) in firsts {
        if let Some(i) = window_of(windows, first).filter(|&i| i >= from && i > 0) {
            per.entry(i).or_default().push(k);
        }
    }
    let capturing: Vec<usize> =
        graphs.iter().enumerate().filter(|&(i, &n)| n > 0 && i >= from && i > 0).map(|(i, _)| i).collect();
    let rare = capturing.len() * RARE_CAPTURES <= windows.len().saturating_sub(from);
    for &i in &capturing {
        per.entry(i).or_default();
    }
    let mut out: Vec<FirstRun> = per
        .into_iter()
        .filter_map(|(i, kernels)| {
            let (d, median) = (windows[i].1 - windows[i].0, reference.per_step[i]);
            let slow = median > 0 && d as f64 > SLOW * median as f64;
            let instantiated = graphs.get(i).copied().unwrap_or(0);
            (slow || (rare && instantiated > 0)).then(|| FirstRun {
                name: names.get(i).cloned().unwrap_or_default(),
                start_ns: windows[i].0,
                duration_ns: d,
                kind: reference.kind(i),
                cost_ns: if median > 0 { d.saturating_sub(median) } else { 0 },
                new_kernels: kernels.len(),
                recompiled: false,
                graphs_instantiated: instantiated,
                kernel_ids: kernels,
                examples: Vec::new(),
            })
        })
        .collect();
    out.sort_unstable_by_key(|r| r.start_ns);
    out
}

impl Warmup {
    /// Each kind's steady median in words ("decode 0.35 ms, prefill 1.01 ms"); None where steps have no kinds.
    pub fn steady_by_kind_words(&self, ms: impl Fn(u64) -> String) -> Option<String> {
        let kinds: Vec<String> =
            self.steady_by_kind.iter().map(|k| format!("{} {}", k.kind, ms(k.steady_step_ns))).collect();
        (!kinds.is_empty()).then(|| kinds.join(", "))
    }

    /// Puts down to each warm-up step the time its launching threads spent in calls in which CUDA set itself up
    /// (`seen`, kept for the threads in `launchers`; `name` resolves a call's name).
    pub fn account_cuda_setup<'a>(
        &mut self,
        seen: &[SetupSeen],
        launchers: &rustc_hash::FxHashSet<u32>,
        name: impl Fn(u32) -> &'a str,
    ) {
        let mut calls: FxHashMap<&str, u64> = FxHashMap::default();
        // The launching threads' calls by start, so that each step reads its own (a step holds only those that
        // started before its end; one that began before it and runs into it is found by its end).
        let mut seen: Vec<&SetupSeen> = seen.iter().filter(|x| launchers.contains(&x.tid)).collect();
        seen.sort_unstable_by_key(|x| x.span.0);
        let longest = seen.iter().map(|x| x.span.1.saturating_sub(x.span.0)).max().unwrap_or(0);
        for d in &mut self.detail {
            let step = (d.start_ns, d.start_ns.saturating_add(d.duration_ns));
            let mut spans: Vec<Span> = Vec::new();
            let from = seen.partition_point(|x| x.span.0 < step.0.saturating_sub(longest));
            let to = seen.partition_point(|x| x.span.0 < step.1);
            for x in seen[from..to].iter().filter(|x| x.span.1 > step.0) {
                spans.push((x.span.0.max(step.0), x.span.1.min(step.1)));
                if x.first_launch {
                    self.setup_first_launches += 1;
                } else {
                    *calls.entry(name(x.call)).or_default() += 1;
                }
            }
            d.cuda_setup_ns = super::spans::merge(spans).iter().map(|s| s.1 - s.0).sum();
        }
        let mut calls: Vec<(String, u64)> = calls.into_iter().map(|(n, c)| (n.to_string(), c)).collect();
        calls.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self.setup_calls = calls;
    }

    /// What CUDA's own set-up took in the warm-up steps, in words ("CUDA set itself up for 28.00 ms of it (...)").
    fn cuda_setup_words(&self) -> Option<String> {
        let total: u64 = self.detail.iter().map(|d| d.cuda_setup_ns).sum();
        if total == 0 {
            return None;
        }
        let mut what = Vec::new();
        match self.setup_first_launches {
            0 => {}
            1 => what.push("a kernel's first launch, its module loaded".to_string()),
            n => what.push(format!("{n} kernels' first launches, their modules loaded")),
        }
        let shown = self.setup_calls.iter().take(3).map(|(name, n)| format!("{name} x{n}"));
        what.extend(shown);
        if self.setup_calls.len() > 3 {
            what.push(format!("{} more calls", self.setup_calls.len() - 3));
        }
        Some(format!("CUDA set itself up for {} of it ({})", ms(total), what.join("; ")))
    }

    /// One line for text and HTML: what the warm-up steps did.
    pub fn describe(&self) -> String {
        let mut what: Vec<String> = Vec::new();
        let kernels: usize = self.detail.iter().map(|d| d.kernels_only_here).sum();
        let again = self.kernels_run_again.len();
        let only = kernels.saturating_sub(again);
        if only > 0 {
            let e = self.kernels_only_in_warmup.first().map_or(String::new(), |n| format!(", e.g. {n}"));
            what.push(format!(
                "{} that only the warm-up runs (autotuning, set-up{e})",
                counted(only as u64, "kernel", "kernels")
            ));
        }
        if again > 0 {
            let e = self.run_again_example.as_ref().map_or(String::new(), |n| format!(" (e.g. {n})"));
            what.push(format!(
                "{} run for the first time{e}, which later steps run again but no steady step",
                counted(again as u64, "kernel", "kernels")
            ));
        }
        let allocs: usize = self.detail.iter().map(|d| d.alloc_calls).sum();
        if allocs > 0 {
            what.push(format!(
                "{} (the allocator growing)",
                counted(allocs as u64, "device allocation call", "device allocation calls")
            ));
        }
        let graphs: u64 = self.detail.iter().map(|d| d.graphs_instantiated).sum();
        if graphs > 0 {
            what.push(format!("{} captured and instantiated", counted(graphs, "CUDA graph", "CUDA graphs")));
        }
        let slowest = self.detail.iter().map(|d| d.slowdown).fold(0.0, f64::max);
        if slowest > SLOW {
            let of = if self.steady_by_kind.is_empty() { "" } else { " of its kind" };
            // A compiled loop that replays CUDA graphs (mode="reduce-overhead") also records them as it warms up.
            let graphed = self.detail.iter().any(|d| d.kind.is_some_and(|k| k.contains("graph")));
            let why = match (self.compiled, graphed) {
                (false, _) => "",
                (true, false) => {
                    ": torch.compile compiling (Dynamo's tracing, Inductor's code generation, Triton's compiling)"
                }
                (true, true) => {
                    ": torch.compile compiling (Dynamo's tracing, Inductor's code generation, Triton's compiling) \
                     and recording its CUDA graphs"
                }
            };
            what.push(format!("up to {slowest:.1}x the steady step time{of}{why}"));
        }
        what.extend(self.cuda_setup_words());
        what.join("; ")
    }
}

/// What each step's time is compared with.
struct Reference {
    /// Per step: the median it is compared with.
    per_step: Vec<u64>,
    /// Per step: its kind, where steps have kinds.
    kinds: Option<Vec<&'static str>>,
    /// Each kind's steady median, fastest first.
    medians: Vec<KindMedian>,
}

impl Reference {
    fn kind(&self, i: usize) -> Option<&'static str> {
        self.kinds.as_ref().map(|k| k[i])
    }
}

/// The median steady step (the second half's) of each step's own kind where a serving engine's steps have
/// kinds ([`step_kinds::kinds`]: a prefill is slower than a decode by nature, not for warming up), else of all
/// steps. A step of a kind the steady half never runs is compared with the slowest steady kind, slower than all
/// the program does steadily, only where it is a loop's eager run before the loop was captured as a CUDA graph:
/// kinds told by launches, and the step began before the trace's first capture or instantiation
/// (`torch.compile(mode="reduce-overhead")` warms up eagerly, then records). Otherwise it is compared with
/// nothing, and is warm-up only for first-time kernels or allocations:
/// - named by the engine (the prefills of a batch that then only decodes): the engine says it is other work;
/// - told by its launches after the graphs were built, in the trace or before it began (a server captures its
///   decode graphs at start-up, then prefills eagerly: an offline batch's leading prefills are not slow decodes).
fn reference(windows: &[Span], names: &[String], ev: &Evidence, half: usize, median: u64) -> Reference {
    let launched: Option<Vec<Launched>> =
        ev.graph_replays.per_window(windows).zip(ev.eager_kernels.per_window(windows)).map(|(g, e)| {
            g.into_iter()
                .zip(e)
                .map(|(graph_replays, eager_kernels)| Launched { graph_replays, eager_kernels })
                .collect()
        });
    let names = (0..windows.len()).map(|i| names.get(i).map_or("", String::as_str));
    let Some((told_by, kinds)) = step_kinds::kinds(names, launched.as_deref()) else {
        return Reference { per_step: vec![median; windows.len()], kinds: None, medians: Vec::new() };
    };
    let mut by_kind: FxHashMap<&'static str, Vec<u64>> = FxHashMap::default();
    for i in half..windows.len() {
        by_kind.entry(kinds[i]).or_default().push(windows[i].1 - windows[i].0);
    }
    let mut medians: Vec<KindMedian> = by_kind
        .into_iter()
        .map(|(kind, mut v)| {
            v.sort_unstable();
            KindMedian { kind, steady_step_ns: v[v.len() / 2] }
        })
        .collect();
    medians.sort_unstable_by_key(|m| (m.steady_step_ns, m.kind));
    let slowest = medians.last().map_or(median, |m| m.steady_step_ns);
    let before_capture = |i: usize| ev.first_graph_setup.is_some_and(|t| t >= windows[i].0);
    let per_step = (0..windows.len())
        .map(|i| match medians.iter().find(|m| m.kind == kinds[i]) {
            Some(m) => m.steady_step_ns,
            None if told_by == ToldBy::Launches && before_capture(i) => slowest,
            None => 0,
        })
        .collect();
    Reference { per_step, kinds: Some(kinds), medians }
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
    let reference = reference(windows, names, ev, half, median);
    let steady_start = windows[half].0;
    // Kernels introduced in a leading step and never run again once the steady half begins.
    let mut only_before: Vec<(u32, u64, u64)> =
        ev.kernels.iter().filter(|(_, &(_, last))| last < steady_start).map(|(&k, &(f, l))| (k, f, l)).collect();
    only_before.sort_unstable_by_key(|&(k, f, l)| (std::cmp::Reverse(l - f), f, k));
    let mut new_kernels = vec![0usize; n];
    for &(_, first, _) in &only_before {
        if let Some(i) = window_of(windows, first) {
            new_kernels[i] += 1;
        }
    }
    let allocs = ev.alloc_calls.per_window(windows);
    let steady_allocs = allocs.as_ref().map_or(0, |a| a[half..].iter().copied().max().unwrap_or(0) as usize);
    let graphs = ev.graph_instantiations.per_window(windows).unwrap_or_default();
    let mut detail = Vec::new();
    for i in 0..half {
        let d = windows[i].1 - windows[i].0;
        let compared_with_ns = reference.per_step[i];
        let slowdown = if compared_with_ns == 0 { 1.0 } else { d as f64 / compared_with_ns as f64 };
        let alloc_calls = allocs.as_ref().map_or(0, |a| a[i] as usize);
        let allocating = allocs.is_some() && alloc_calls > steady_allocs;
        if !(slowdown > SLOW || new_kernels[i] > 0 || allocating) {
            break;
        }
        detail.push(WarmupStep {
            name: names.get(i).cloned().unwrap_or_default(),
            start_ns: windows[i].0,
            duration_ns: d,
            kind: reference.kind(i),
            slowdown,
            compared_with_ns,
            kernels_only_here: new_kernels[i],
            alloc_calls: if allocating { alloc_calls } else { 0 },
            graphs_instantiated: graphs.get(i).copied().unwrap_or(0),
            cuda_setup_ns: 0,
        });
    }
    let warm_end = detail.last().map_or(0, |d| d.start_ns + d.duration_ns);
    let (only_warmup, run_again): (Vec<_>, Vec<_>) =
        only_before.iter().filter(|&&(_, first, _)| first < warm_end).partition(|&&(_, _, last)| last < warm_end);
    let example_kernels = only_warmup.iter().take(5).map(|&&(k, _, _)| k).collect();
    let later = first_runs(windows, names, ev, &graphs, detail.len(), &reference);
    Warmup {
        steps: detail.len(),
        ns: detail.iter().map(|d| d.duration_ns).sum(),
        included: false,
        filtered: false,
        steady_step_ns: median,
        steady_by_kind: reference.medians,
        detail,
        example_kernels,
        kernels_run_again: run_again.iter().map(|&&(k, _, _)| k).collect(),
        run_again_example: None,
        kernels_only_in_warmup: Vec::new(),
        later,
        // Told by the kernels' names, which the plan resolves.
        compiled: false,
        // The launching threads' set-up calls, which the plan gives once it knows those threads.
        setup_first_launches: 0,
        setup_calls: Vec::new(),
    }
}

#[cfg(test)]
#[path = "warmup_tests.rs"]
mod tests;
