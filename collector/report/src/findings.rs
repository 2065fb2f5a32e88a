//! Findings: one bottleneck each, with the time it costs, the evidence and the fix. This file holds the finding
//! model and the host-side findings (why the GPU idles); `gpu_findings.rs` holds those read off GPU work.

use super::idle::{Cause, CauseKind, Example, IdleCauses};
use super::plan::Plan;
use super::sources::SourceKind;
use super::steps::Steps;
use super::sweep::Swept;
use super::tallies::CallTotals;
use super::tracing_cost;
use cuflight_format::calls::CallEffects;
use cuflight_trace::model::inductor;
use cuflight_trace::model::trace::Process;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
}

impl Severity {
    /// From the share of step time lost.
    pub fn of_share(share: f64) -> Severity {
        match share {
            s if s >= 0.20 => Severity::High,
            s if s >= 0.05 => Severity::Medium,
            _ => Severity::Low,
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StepCost {
    /// The step's index among the analysed steps, from 0.
    pub step: usize,
    /// The step's name.
    pub name: String,
    /// What the finding cost in that step.
    pub lost_ns: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CallRow {
    /// The CUDA call's name.
    pub name: String,
    /// Calls blamed.
    pub count: u64,
    /// Their time: the calls' own durations, or the idle time they caused where the finding measures that.
    pub total_ns: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct KernelRow {
    /// The kernel's name.
    pub name: String,
    /// Calls of it in the analysed window.
    pub count: u64,
    /// Their device time, summed.
    pub total_ns: u64,
    /// Device time a call.
    pub mean_ns: u64,
    /// Share of all kernel time in the analysed window.
    pub share_of_kernel_time: f64,
    /// Its grid's blocks in x, y, z (of its first launch in the window).
    pub grid: [u32; 3],
    /// Its block's threads in x, y, z.
    pub block: [u32; 3],
    /// Registers a thread.
    pub registers_per_thread: u32,
    /// Shared memory a block, static and dynamic.
    pub shared_memory_bytes: u32,
    /// Theoretical occupancy (resident warps / maximum) from block size, registers and shared memory.
    pub occupancy: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Evidence {
    /// What was measured, in sentences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<String>,
    /// The steps that lost the most, worst first (at most 5).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepCost>,
    /// The longest stretches behind the finding, with where they are on the timeline (at most 5).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<Example>,
    /// The kernels the finding is about.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelRow>,
    /// The CUDA calls blamed, by name, most costly first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub api_calls: Vec<CallRow>,
    /// The finding's figures by name (ratios, counts, ns), for tools that compare them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<&'static str, f64>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Finding {
    /// What was found (data_loading, sync_stall, launch_bound, ...; docs/report.md lists every kind).
    pub kind: &'static str,
    /// info, low, medium or high: from the share of step time lost (medium from 5%, high from 20%) or, for a finding
    /// that costs no time, what it puts at risk.
    pub severity: Severity,
    /// The step time the finding costs in the analysed steps, summed: what fixing it could win back.
    pub time_lost_ns: u64,
    /// time_lost_ns as a fraction of step time (of the traced span when there are no steps).
    pub share: f64,
    /// The process it was found in.
    pub pid: u32,
    /// That process's distributed rank, when known.
    pub rank: Option<u32>,
    /// The trace file it was found in, where pid and rank do not tell its process apart (one process's windows
    /// in several files, `record --every`'s `<name>-N.cuf`; traces of separate runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The trace file it was found in, always (what [`Finding::trace`] shows where it must).
    #[serde(skip)]
    pub file: String,
    /// The finding in one sentence, with its figures.
    pub summary: String,
    /// What it rests on.
    pub evidence: Evidence,
    /// What to try, for this kind of program.
    pub fix: String,
    /// The Python lines behind the calls this finding blames, most costly first (recorded Python stacks).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<super::sources::Source>,
}

/// Findings below this share of step time are noise, not bottlenecks.
pub const MIN_SHARE: f64 = 0.01;

/// What every finding builder needs about one process.
pub struct Ctx<'a> {
    pub p: &'a Process,
    pub plan: &'a Plan,
    pub steps: &'a Steps,
    /// Σ step window durations (or the traced span).
    pub step_total_ns: u64,
    pub pid: u32,
    pub rank: Option<u32>,
    /// Index of its trace among those given.
    pub file: usize,
    /// That trace's name.
    pub trace: &'a str,
}

impl Ctx<'_> {
    pub fn share(&self, ns: u64) -> f64 {
        if self.step_total_ns == 0 {
            0.0
        } else {
            ns as f64 / self.step_total_ns as f64
        }
    }

    /// The fix that fits the program: a model server's, a training loop's, or in general terms (inference, an
    /// HPC code: "keep the loss on the GPU" means nothing there).
    pub fn fix<'f>(&self, fixes: Fixes<'f>) -> &'f str {
        if self.plan.serving {
            fixes.serving
        } else if self.plan.training {
            fixes.training
        } else {
            fixes.general
        }
    }

    pub fn finding(&self, kind: &'static str, lost: u64, summary: String, evidence: Evidence, fix: &str) -> Finding {
        let share = self.share(lost);
        Finding {
            kind,
            severity: Severity::of_share(share),
            time_lost_ns: lost,
            share,
            pid: self.pid,
            rank: self.rank,
            trace: None,
            file: self.trace.to_string(),
            summary,
            evidence,
            fix: fix.to_string(),
            sources: Vec::new(),
        }
    }

    /// The steps that lost the most, worst first (at most 5); none without steps ("worst steps: whole trace" said
    /// nothing).
    pub fn worst_steps(&self, per_step: &[u64]) -> Vec<StepCost> {
        if !self.has_steps() {
            return Vec::new();
        }
        let mut v: Vec<StepCost> = per_step
            .iter()
            .enumerate()
            .filter(|(_, &ns)| ns > 0)
            .map(|(step, &lost_ns)| StepCost { step, name: self.steps.names[step].clone(), lost_ns })
            .collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.lost_ns));
        v.truncate(5);
        v
    }

    pub fn steps_count(&self) -> usize {
        self.steps.names.len().max(1)
    }

    /// Without steps the whole trace is one window: a figure "per step" is over the time it covers.
    pub fn has_steps(&self) -> bool {
        self.steps.source != super::steps::StepSource::None
    }

    /// `total_ns` over the steps as a reader takes it: "1.57 ms per step", or without steps "141.69 ms in all"
    /// (the one window is no step).
    pub fn per_step(&self, total_ns: u64) -> String {
        self.per_step_of(total_ns, "")
    }

    /// As [`Ctx::per_step`], with `what` between the time and the "per step": "0.12 ms idle per step".
    pub fn per_step_of(&self, total_ns: u64, what: &str) -> String {
        let what = if what.is_empty() { String::new() } else { format!(" {what}") };
        if self.has_steps() {
            format!("{}{what} per step", ms(total_ns / self.steps_count() as u64))
        } else {
            format!("{}{what} in all", ms(total_ns))
        }
    }

    /// Where a count was taken: `said` ("in steps", "inside steps"), or without steps "in the time covered".
    pub fn in_steps(&self, said: &'static str) -> &'static str {
        if self.has_steps() {
            said
        } else {
            "in the time covered"
        }
    }

    /// " (2.0 per step)" after a count, with `decimals`, or nothing without steps.
    pub fn count_per_step(&self, count: u64, decimals: usize) -> String {
        if self.has_steps() {
            format!(" ({:.decimals$} per step)", count as f64 / self.steps_count() as f64)
        } else {
            String::new()
        }
    }
}

pub use super::words::{counted, format_us, ms, times};

/// `part` as a percentage of `whole`; None when `whole` is 0 (no share to speak of): the one rule for the
/// report's percentages.
pub fn percent(part: u64, whole: u64) -> Option<f64> {
    (whole != 0).then(|| 100.0 * part as f64 / whole as f64)
}

/// (name, (count, total ns)) pairs as call rows, most time first.
pub fn rows_by_time<S: ToString>(calls: impl IntoIterator<Item = (S, (u64, u64))>) -> Vec<CallRow> {
    let mut v: Vec<CallRow> =
        calls.into_iter().map(|(n, (count, total_ns))| CallRow { name: n.to_string(), count, total_ns }).collect();
    v.sort_by_key(|r| std::cmp::Reverse(r.total_ns));
    v
}

fn call_rows(c: &Cause) -> Vec<CallRow> {
    let mut v = rows_by_time(c.calls.iter().map(|(name, &counts)| (name, counts)));
    v.truncate(5);
    v
}

pub(crate) fn idle_evidence(ctx: &Ctx, c: &Cause) -> Evidence {
    Evidence {
        steps: ctx.worst_steps(&c.per_step),
        examples: c.worst.clone(),
        api_calls: call_rows(c),
        ..Default::default()
    }
}

/// A finding's fix for each kind of program ([`Ctx::fix`]).
#[derive(Clone, Copy)]
pub struct Fixes<'f> {
    pub training: &'f str,
    pub serving: &'f str,
    pub general: &'f str,
}

pub const FIX_SYNC: &str = "Take host synchronisation off the hot path: keep the loss on the GPU and call .item(), \
     print() or .cpu() every N steps; replace torch.cuda.synchronize() with CUDA events; avoid data-dependent \
     shapes (nonzero, boolean masks) that force a sync.";
pub const FIX_LAUNCH: &str = "Cut per-kernel launch overhead: torch.compile (fuses small ops), CUDA Graphs \
     (torch.cuda.graphs, or torch.compile(mode=\"reduce-overhead\")), fused/foreach optimizers, larger batches.";
/// launch_bound in a training loop that replays CUDA graphs already: what is left is launched outside them.
pub const FIX_LAUNCH_GRAPHED: &str = "Most kernels already replay as CUDA graphs; the launch overhead left is the \
     kernels still launched one by one and the graph launch calls. Under torch.compile(mode=\"reduce-overhead\") \
     those are usually the optimizer step and zero_grad outside the compiled function: compile the whole step \
     (torch.compile the optimizer step too, or a capturable optimizer captured with the model), and keep the eager \
     ops between replays few; fused/foreach optimizers launch fewer kernels.";
/// launch_bound where every kernel in the steps replays from CUDA graphs: the time is in the graph launch calls.
pub const FIX_LAUNCH_GRAPH_CALLS: &str = "Every kernel already replays as CUDA graphs; the GPU waits while the host \
     is inside the graph launch calls (where graphs were traced per node, what CUPTI's tracing is estimated to add \
     is already set apart: see the facts; `--trace cuda,nvtx,graphs` measures the launches without it). Queue the next replay before waiting on \
     the last one's results, upload each graph once after instantiating it (cudaGraphUpload), and launch fewer, \
     larger graphs (one per step rather than several).";
/// The same three for a program that neither trains nor names a server's iterations (inference, an HPC code).
pub const FIX_SYNC_GENERAL: &str = "Take host synchronisation off the hot path: wait only where the host needs a \
     result, and read results back once per batch or every N iterations rather than after each (in PyTorch \
     .item(), .tolist(), .cpu() and print() of a GPU tensor each wait); wait on an event for the work that matters \
     (cudaEventSynchronize, cudaStreamWaitEvent) rather than on the whole device (cudaDeviceSynchronize, \
     torch.cuda.synchronize()); avoid data-dependent shapes (nonzero, boolean masks) that force a sync.";
pub const FIX_LAUNCH_GENERAL: &str = "Cut per-kernel launch overhead: fewer, larger kernels (torch.compile fuses \
     small ops; in CUDA code, one kernel for a run of small ones), the launch sequence replayed as a CUDA graph \
     (stream capture; torch.cuda.graphs or torch.compile(mode=\"reduce-overhead\")), more work per kernel (larger \
     batches).";
pub const FIX_CPU_GENERAL: &str = "Find the host hot spot between launches (py-spy or perf on the process); move \
     preprocessing off the launching thread or onto the GPU; replace Python loops over tensors with batched ops; \
     torch.compile removes per-op Python overhead.";
/// The same three for a model server ([`Plan::serving`]): its loop is the engine's iterations, not a training step.
pub const FIX_SYNC_SERVING: &str = "Overlap the engine's scheduling with the GPU: it reads each iteration's tokens \
     back (a synchronisation) and only then prepares the next batch, so the GPU waits for the host every iteration; \
     prepare iteration N+1 while N runs (vLLM's async scheduling, SGLang's overlap scheduler), or copy the tokens \
     with non_blocking=True and wait on an event just before they are needed.";
pub const FIX_LAUNCH_SERVING: &str = "Replay more of each iteration as CUDA graphs: capture decode for the batch \
     sizes actually served (graph buckets that cover them, so no batch falls back to eager), and prefill and mixed \
     batches piecewise (vLLM's piecewise CUDA graphs); torch.compile fuses the small ops that stay eager.";
pub const FIX_CPU_SERVING: &str = "Find the host hot spot in the engine's loop (py-spy on the server process): \
     scheduling, sampling or tokenisation on the CPU between iterations; move detokenisation and request handling \
     off the engine's thread and overlap scheduling with the GPU (async scheduling).";
/// launch_bound and cpu_bound in a program that already runs torch.compile'd code (Inductor's kernels), not replayed
/// as CUDA graphs: compiling it is done; what is left is launching the compiled kernels one by one.
pub const FIX_LAUNCH_COMPILED_GENERAL: &str = "The program already runs torch.compile'd code (Inductor's Triton \
     kernels); what is left is its kernels launched one by one and the eager ops between graph breaks. Replay them \
     as CUDA graphs: torch.compile(mode=\"reduce-overhead\") (static shapes; mark the dynamic ones or pad to a few \
     sizes); remove graph breaks so more ops fuse (TORCH_LOGS=graph_breaks lists them); give each kernel more work \
     (larger batches).";
/// The same in a training loop, whose optimizer step usually runs eagerly after the compiled model.
pub const FIX_LAUNCH_COMPILED: &str = "The training step already runs torch.compile'd code (Inductor's Triton \
     kernels); what is left is its kernels launched one by one, the eager ops between graph breaks and the optimizer \
     step outside the compiled function. Replay them as CUDA graphs: torch.compile(mode=\"reduce-overhead\") \
     (static shapes); compile the optimizer step too, or use a fused/foreach optimizer; remove graph breaks \
     (TORCH_LOGS=graph_breaks lists them); larger batches.";
pub const FIX_CPU_COMPILED: &str = "The program already runs torch.compile'd code: the host work between launches \
     is outside the compiled graphs (graph breaks: TORCH_LOGS=graph_breaks lists them; input preparation, logging, \
     eager ops) or the compiled code's own wrapper and guards. Find the hot spot with py-spy on the process; move \
     input preparation off the launching thread (DataLoader workers); where the compiled code is not replayed as \
     CUDA graphs yet, torch.compile(mode=\"reduce-overhead\") removes the wrapper's work per kernel.";
const LAUNCH_FIXES: Fixes = Fixes { training: FIX_LAUNCH, serving: FIX_LAUNCH_SERVING, general: FIX_LAUNCH_GENERAL };
const CPU_FIXES: Fixes = Fixes { training: FIX_CPU, serving: FIX_CPU_SERVING, general: FIX_CPU_GENERAL };

pub const FIX_CHURN: &str = "Stop allocating in steady state: reuse buffers, let PyTorch's caching allocator keep \
     memory (no torch.cuda.empty_cache() in the loop), PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; in CUDA \
     code use cudaMallocAsync or a memory pool.";

/// Allocator churn whose costliest calls pin host memory (`cudaHostAlloc`, `cudaMallocHost`).
pub const FIX_PINNED_CHURN: &str = "Allocate pinned staging buffers once and reuse them: pinning host memory takes \
     milliseconds a call. In PyTorch let the DataLoader pin batches (pin_memory=True) or keep a pinned buffer and \
     copy into it; tensor.pin_memory() in the loop allocates anew each time.";

pub const FIX_CPU: &str = "Find the host hot spot between launches (py-spy or perf on the training process); move \
     preprocessing into DataLoader workers or onto the GPU; replace Python loops over tensors with batched ops; \
     torch.compile removes per-op Python overhead.";

/// launch_bound, cpu_bound (sync_stall is `sync_findings.rs`'s, data_loading is `loading.rs`'s; the idle part of allocator_churn is in its own
/// finding).
pub fn idle_findings(ctx: &Ctx, idle: &IdleCauses, swept: &Swept) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(launch_bound(ctx, idle, swept));
    let c = idle.get(CauseKind::CpuBound);
    if c.total_ns > 0 {
        let mut ev = idle_evidence(ctx, c);
        ev.facts.push(format!(
            "the GPU idled {} while the launching threads ran CPU work (outside CUDA, stretches over \
             100 µs) between launches",
            ctx.per_step(c.total_ns)
        ));
        let summary = format!("GPU waits for host CPU work between launches: {}", ctx.per_step(c.total_ns));
        let fix = match ctx.fix(CPU_FIXES) {
            FIX_CPU | FIX_CPU_GENERAL if runs_compiled_code(ctx, swept) => FIX_CPU_COMPILED,
            fix => fix,
        };
        out.push(ctx.finding("cpu_bound", c.total_ns, summary, ev, fix));
    }
    out
}

/// launch_bound: the GPU idle while the host issues work one launch at a time (graph nodes counted apart).
fn launch_bound(ctx: &Ctx, idle: &IdleCauses, swept: &Swept) -> Option<Finding> {
    let c = idle.get(CauseKind::LaunchBound);
    if c.total_ns == 0 {
        return None;
    }
    let steps = ctx.steps_count();
    let mut ev = idle_evidence(ctx, c);
    let (kernels, short, median_kernel, median_launch) = launch_stats(swept);
    // What the host issuing faster would win, against the GPU's own gaps between queued kernels.
    let queued = idle.launch_queued_ns.min(c.total_ns);
    let waited_for_host = c.total_ns - queued;
    // Graph nodes are issued by the GPU from one launch: their gaps are graph waits, told apart here.
    let graphed = match swept.graph_kernels {
        0 => String::new(),
        g if swept.graph_level => {
            format!("{g} CUDA graph replays ran traced whole (--trace graphs), their gaps counted as graph waits; ")
        }
        g => format!(
            "{g} {}ran as nodes of replayed CUDA graphs, their gaps counted as graph waits; ",
            if kernels > 0 { "more " } else { "" }
        ),
    };
    let in_steps = ctx.in_steps("in steps");
    let one_by_one = if kernels == 0 {
        format!("no kernel was launched one by one {in_steps}; ")
    } else {
        let per_step = ctx.count_per_step(kernels, 0);
        format!(
            "{} launched one by one {in_steps}{per_step}, {short} of them shorter than the median launch call ({}); \
             median kernel {:.1} µs; ",
            counted(kernels, "kernel", "kernels"),
            format_us(median_launch),
            median_kernel as f64 / 1e3,
        )
    };
    let gaps = match kernels {
        0 => String::new(),
        k => format!(" (the GPU's own gap between kernels, {} per kernel)", format_us(queued / k)),
    };
    ev.facts.push(format!(
        "{one_by_one}{graphed}the GPU idled {} between launches: {} waiting for the host to issue the next kernel, \
         {} with it already queued{gaps}",
        ctx.per_step(c.total_ns),
        ms(waited_for_host / steps as u64),
        ms(queued / steps as u64),
    ));
    let sampled = ctx.plan.sampling.as_ref().and_then(|c| c.recorded_steps_longer_ns());
    let steps_said = if ctx.has_steps() { steps } else { 0 };
    // What CUPTI's tracing costs was measured on an H200; nothing is said of roctracer's.
    if !ctx.p.rocm {
        ev.facts.extend(tracing_cost::eager_launches(kernels, steps_said, waited_for_host, sampled));
        let traced = idle.get(CauseKind::GraphTracing).total_ns;
        ev.facts.extend(tracing_cost::graph_launches(swept, traced, steps_said));
    }
    ev.metrics.insert("queued_gap_ns_per_step", queued as f64 / steps as f64);
    ev.metrics.insert("kernels_per_step", kernels as f64 / steps as f64);
    ev.metrics.insert("median_kernel_ns", median_kernel as f64);
    ev.metrics.insert("median_launch_ns", median_launch as f64);
    // Mostly queued: the gaps are the GPU's own, per kernel, whatever the host does (fewer kernels or graphs).
    let summary = if queued * 2 > c.total_ns {
        format!("GPU idles in the gaps between queued kernels: {}", ctx.per_step(c.total_ns))
    } else if kernels == 0 {
        format!("GPU waits while the host launches CUDA graphs: {}", ctx.per_step_of(c.total_ns, "idle"))
    } else {
        format!("GPU waits for kernel launches: {}", ctx.per_step_of(c.total_ns, "idle"))
    };
    let fix = launch_fix(ctx.fix(LAUNCH_FIXES), kernels, swept.graph_kernels, || runs_compiled_code(ctx, swept));
    let mut f = ctx.finding("launch_bound", c.total_ns, summary, ev, fix);
    f.sources = swept.sources.rows(SourceKind::Launch, ctx.p);
    Some(f)
}

/// launch_bound's fix: `by_kind` ([`Ctx::fix`]) unless the steps replay CUDA graphs (`graphed`: their kernel nodes,
/// or their replays where traced whole) or run compiled code. "Most kernels already replay as CUDA graphs" only
/// where they do: the A100 NCCL trace's 108 graph nodes beside 4174 kernels launched one by one had been told so.
fn launch_fix(by_kind: &'static str, eager: u64, graphed: u64, compiled: impl Fn() -> bool) -> &'static str {
    match by_kind {
        _ if eager == 0 && graphed > 0 => FIX_LAUNCH_GRAPH_CALLS,
        FIX_LAUNCH if graphed >= eager => FIX_LAUNCH_GRAPHED,
        FIX_LAUNCH if compiled() => FIX_LAUNCH_COMPILED,
        FIX_LAUNCH_GENERAL if compiled() => FIX_LAUNCH_COMPILED_GENERAL,
        fix => fix,
    }
}

/// Whether the steps ran kernels torch.compile generated: the program is compiled already, so a fix says what to
/// do next rather than to compile it.
pub fn runs_compiled_code(ctx: &Ctx, swept: &Swept) -> bool {
    swept.kernels.by_name.keys().any(|&n| inductor::is_inductor_kernel(ctx.p.string(n)))
}

/// (kernels launched one by one in steps, how many are shorter than the median launch call, median kernel ns,
/// median launch ns).
fn launch_stats(swept: &Swept) -> (u64, u64, u64, u64) {
    let median_launch = swept.launch_durations.median();
    let k = &swept.kernel_durations;
    (k.len(), k.below(median_launch), k.median(), median_launch)
}

/// allocator_churn: allocation calls inside steady-state steps (every step but the first), and the GPU idle
/// time they caused.
pub fn allocator_churn(ctx: &Ctx, idle: &IdleCauses, swept: &Swept) -> Option<Finding> {
    let steady = ctx.steps.windows.get(1..).unwrap_or(&[]);
    let rows: &CallTotals = &swept.alloc_calls;
    if rows.is_empty() {
        return None;
    }
    // The first step's allocations are the caching allocator warming up: the calls were counted from the second
    // step, and so is the idle time they caused, its worst steps and its examples.
    let all = idle.get(CauseKind::AllocatorChurn);
    let mut c = all.clone();
    if let Some(first) = c.per_step.first_mut() {
        c.total_ns = c.total_ns.saturating_sub(std::mem::take(first));
    }
    c.worst.retain(|e| e.step.is_some_and(|s| s > 0));
    let c = &c;
    let host_ns: u64 = rows.values().map(|r| r.1).sum();
    let count: u64 = rows.values().map(|r| r.0).sum();
    let mut ev = idle_evidence(ctx, c);
    ev.api_calls = rows_by_time(rows.iter().map(|(n, &c)| (n, c)));
    let steady_steps = steady.len().max(1) as f64;
    ev.facts.push(format!(
        "{count} allocation calls in {} steady-state steps ({:.1} per step) took {} of host time; the GPU idled {} \
         because of them",
        steady.len(),
        count as f64 / steady_steps,
        ms(host_ns),
        ms(c.total_ns)
    ));
    ev.metrics.insert("allocation_calls_per_step", count as f64 / steady_steps);
    let lost = c.total_ns;
    // The calls named as they were made (cudaHostAlloc is no cudaMalloc), costliest first.
    let named: Vec<&str> = ev.api_calls.iter().take(2).map(|r| r.name.as_str()).collect();
    let summary = format!("{} inside steps: {:.1} calls per step", named.join("/"), count as f64 / steady_steps);
    let pinned = ev.api_calls.first().is_some_and(|r| CallEffects::of(&r.name).has(CallEffects::PINNED_HOST));
    let fix = if pinned { FIX_PINNED_CHURN } else { FIX_CHURN };
    let mut f = ctx.finding("allocator_churn", lost, summary, ev, fix);
    f.sources = swept.sources.rows(SourceKind::Alloc, ctx.p);
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{api, kernel, report_of_all_steps};

    /// A trace without steps is one window: its findings speak of the time covered and totals "in all", not of
    /// steps it does not have (400 threads launching at once read "141.69 ms per step" and "% of step time").
    #[test]
    fn a_trace_without_steps_says_what_its_figures_are_of() {
        // Twenty kernels of different names, each launched 20 µs after the one before runs 1 µs: no launch pattern
        // repeats, and the GPU idles between launches.
        let mut events = Vec::new();
        let mut strings = vec![(99, "cudaLaunchKernel".to_string())];
        for k in 0..20u32 {
            let t = 1_000_000 + u64::from(k) * 20_000;
            events.push(api(99, t, 3_000, k + 1));
            events.push(kernel(k + 1, t + 3_500, 1_000, k + 1));
            strings.push((k + 1, format!("kernel_{k}")));
        }
        let strings: Vec<(u32, &str)> = strings.iter().map(|(id, s)| (*id, s.as_str())).collect();
        let r = report_of_all_steps(&strings, events);
        assert!(r.processes[0].step_total.is_none(), "no steps");
        let f = r.findings.iter().find(|f| f.kind == "launch_bound").expect("launch_bound");
        assert_eq!(r.share_of(f), "the time covered");
        assert!(f.summary.ends_with(" in all"), "{}", f.summary);
        assert!(f.evidence.facts.iter().all(|x| !x.contains("per step")), "{:?}", f.evidence.facts);
        let text = r.to_text();
        assert!(text.contains("% of the time covered,") && !text.contains("of step time"), "{text}");
        assert!(f.evidence.steps.is_empty() && !text.contains("worst steps"), "{text}");
    }

    /// The graphed fix says most kernels replay as graphs: only where they do.
    #[test]
    fn launch_bounds_fix_says_graphs_only_where_most_kernels_replay_from_them() {
        let no = || false;
        assert_eq!(launch_fix(FIX_LAUNCH, 0, 300, no), FIX_LAUNCH_GRAPH_CALLS);
        assert_eq!(launch_fix(FIX_LAUNCH, 100, 300, no), FIX_LAUNCH_GRAPHED);
        assert_eq!(launch_fix(FIX_LAUNCH, 300, 300, no), FIX_LAUNCH_GRAPHED);
        // A few graph nodes beside thousands of eager launches: the eager fix (it names CUDA graphs too).
        assert_eq!(launch_fix(FIX_LAUNCH, 4174, 108, no), FIX_LAUNCH);
        assert_eq!(launch_fix(FIX_LAUNCH, 4174, 108, || true), FIX_LAUNCH_COMPILED);
        assert_eq!(launch_fix(FIX_LAUNCH_GENERAL, 4174, 0, || true), FIX_LAUNCH_COMPILED_GENERAL);
        // A server's fix speaks of graph buckets whatever the mix.
        assert_eq!(launch_fix(FIX_LAUNCH_SERVING, 4174, 108, || true), FIX_LAUNCH_SERVING);
    }
}
