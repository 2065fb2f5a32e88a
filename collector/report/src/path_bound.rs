//! What a fix on the GPU's side can win back, bounded by the critical path of the typical step.
//!
//! A finding about the GPU's own time (kernels slower than they could be, communication or copies with no compute
//! beside them, work queued and waiting) measures that GPU time. It shortens the step only where the GPU holds the
//! step: where the launching thread is what the step waits for, the same GPU time overlaps the host's and a faster
//! GPU finishes early and idles. The shared H100 attach window (a launch-bound PyTorch loop) read "fp32_gemm: 20.2%
//! of step time" beside its own critical path of "host work 97%": faster GEMMs could not shorten its steps before
//! its launches were cut. The GPU's part of the typical step's path caps such a finding's loss; the GPU time it
//! measures stays in its summary and metrics. The caller leaves out traces whose CUDA calls were sampled, whose
//! path misses launches and waits.

use super::findings::{ms, Finding, Severity};
use super::step_path::{StepPath, HOST_GROUPS};

/// Findings about the GPU's busy or queued time (docs/report.md describes each).
const GPU_SIDE: [&str; 14] = [
    "fp32_gemm",
    "misaligned_gemm",
    "elementwise_chains",
    "unfused_attention",
    "memory_bound",
    "tensor_underused",
    "copy_kernels",
    "memcpy_heavy",
    "nccl_exposed",
    "cross_stream_wait",
    "collective_wait",
    "graph_wait",
    "host_function_wait",
    "unseen_gpu_work",
];

/// A finding within this share of step time above the path's GPU part is left as it is: the path is one step's,
/// and a cap of a point or less would say more than it knows.
const MARGIN: f64 = 0.01;

/// The GPU's part of the typical step's path, as a share of that step.
fn gpu_share(path: &StepPath) -> f64 {
    let gpu: u64 = path.by_kind.iter().filter(|g| !HOST_GROUPS.contains(&g.what.as_str())).map(|g| g.ns).sum();
    gpu as f64 / path.step_ns.max(1) as f64
}

/// The host's largest part of the path, in words ("host work 100%").
fn host_words(path: &StepPath) -> String {
    let host = path.by_kind.iter().filter(|g| HOST_GROUPS.contains(&g.what.as_str())).max_by_key(|g| g.ns);
    host.map_or(String::new(), |g| format!("{} {:.0}%", g.what, g.ns as f64 * 100.0 / path.step_ns.max(1) as f64))
}

/// Caps each GPU-side finding's loss at the GPU's share of the typical step's path times the analysed steps'
/// time (`step_total_ns`), and says so in its evidence; `steps`: how many steps that time holds.
pub fn bound_by_path(fs: &mut [Finding], path: Option<&StepPath>, step_total_ns: u64, steps: usize) {
    let Some(path) = path else { return };
    if step_total_ns == 0 || path.step_ns == 0 {
        return;
    }
    let share = gpu_share(path);
    let cap = (share * step_total_ns as f64) as u64;
    let per_step = |ns: u64| ms(ns / steps.max(1) as u64);
    for f in fs.iter_mut().filter(|f| GPU_SIDE.contains(&f.kind)) {
        if f.share <= share + MARGIN {
            continue;
        }
        f.evidence.facts.push(format!(
            "the critical path of the typical step ({}, {}) holds {:.1}% GPU time ({}): this GPU time overlaps the \
             host's, so fixing it shortens a step by at most about {} ({} in all), not the {} a step ({}) it \
             measures, until the host's part is shorter",
            path.step,
            ms(path.step_ns),
            share * 100.0,
            host_words(path),
            per_step(cap),
            ms(cap),
            per_step(f.time_lost_ns),
            ms(f.time_lost_ns)
        ));
        f.evidence.metrics.insert("gpu_time_ns", f.time_lost_ns as f64);
        f.evidence.metrics.insert("critical_path_gpu_share", share);
        f.time_lost_ns = cap;
        f.share = cap as f64 / step_total_ns as f64;
        // Still listed (low at least): what it measures is true, and it is the next bound once the host's is cut.
        f.severity = f.severity.min(Severity::of_share(f.share));
    }
}
