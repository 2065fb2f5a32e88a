//! What a fix on the GPU's side can win back, bounded by the steps' critical paths.
//!
//! A finding about the GPU's own time (kernels slower than they could be, communication or copies with no compute
//! beside them, work queued and waiting) measures that GPU time. It shortens the step only where the GPU holds the
//! step: where the launching thread is what the step waits for, the same GPU time overlaps the host's and a faster
//! GPU finishes early and idles. The shared H100 attach window (a launch-bound PyTorch loop) read "fp32_gemm: 20.2%
//! of step time" beside its own critical path of "host work 97%": faster GEMMs could not shorten its steps before
//! its launches were cut.
//!
//! The GPU's part of the steps' paths caps such a finding's loss; the GPU time it measures stays in its summary and
//! metrics. One step per group of steps by duration is walked ([`super::step_path::PathSteps`]), each group's
//! path weighted by its steps' time: a server whose long prefills are the GPU's and whose decodes are the host's
//! keeps its prefills' GPU findings, which its typical (decode) step alone would cap. The caller leaves out traces
//! whose CUDA calls were sampled, whose paths miss launches and waits.

use super::findings::{ms, Finding, Severity};
use super::step_path::{StepPath, Walked, HOST_GROUPS};

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

/// A finding within this share of step time above the paths' GPU part is left as it is: each path is one step's,
/// and a cap of a point or less would say more than it knows.
const MARGIN: f64 = 0.01;

/// The GPU's part of the paths walked, each group's weighted by its steps' time (a step with no GPU work has
/// none); None where no group's path is whole (steps of more ops than the sweep keeps).
fn weighted_gpu_share(walked: &Walked) -> Option<f64> {
    let whole = walked.strata.iter().filter(|s| !s.partial);
    let total: u64 = whole.clone().map(|s| s.steps_ns).sum();
    let gpu: f64 = whole.map(|s| s.path.as_ref().map_or(0.0, StepPath::gpu_share) * s.steps_ns as f64).sum();
    (total > 0).then(|| gpu / total as f64)
}

/// The host's largest part of a path, in words ("host work 100%"); None where the path holds no host time.
fn host_words(path: &StepPath) -> Option<String> {
    let host = path.by_kind.iter().filter(|g| HOST_GROUPS.contains(&g.what.as_str()) && g.ns > 0).max_by_key(|g| g.ns);
    host.map(|g| format!("{} {:.0}%", g.what, g.ns as f64 * 100.0 / path.step_ns.max(1) as f64))
}

/// Which paths hold `share` GPU time, in words.
fn paths_words(walked: &Walked, typical: &StepPath, share: f64) -> String {
    let steps: usize = walked.strata.iter().map(|s| s.steps).sum();
    let groups = walked.strata.len();
    let pct = share * 100.0;
    let host = host_words(typical).map_or(String::new(), |h| format!(": {h}"));
    let of_typical = format!("the typical step, {} of {}{host}", typical.step, ms(typical.step_ns));
    let left_out = match walked.strata.iter().filter(|s| s.partial).count() {
        0 => String::new(),
        n => format!(", {n} of them left out (more GPU ops than a walk keeps)"),
    };
    let words = if groups <= 1 {
        format!(
            "the critical path of the typical step ({}, {}) holds {pct:.1}% GPU time{}",
            typical.step,
            ms(typical.step_ns),
            host_words(typical).map_or(String::new(), |h| format!(" ({h})"))
        )
    } else if groups == steps {
        format!("the critical paths of all {steps} steps hold {pct:.1}% GPU time ({of_typical})")
    } else {
        format!(
            "the critical paths of {groups} steps (the middle one of each of {groups} equal groups of the {steps} \
             steps by duration, weighted by its group's time) hold {pct:.1}% GPU time ({of_typical})"
        )
    };
    words + &left_out
}

/// Caps each GPU-side finding's loss at the GPU's share of the steps' paths times the analysed steps' time
/// (`step_total_ns`), and says so in its evidence; `steps`: how many steps that time holds.
pub fn bound_by_path(fs: &mut [Finding], walked: &Walked, step_total_ns: u64, steps: usize) {
    let Some(typical) = walked.typical.as_ref() else { return };
    if step_total_ns == 0 || typical.step_ns == 0 {
        return;
    }
    let Some(share) = weighted_gpu_share(walked) else { return };
    let cap = (share * step_total_ns as f64) as u64;
    let per_step = |ns: u64| ms(ns / steps.max(1) as u64);
    for f in fs.iter_mut().filter(|f| GPU_SIDE.contains(&f.kind)) {
        if f.share <= share + MARGIN {
            continue;
        }
        f.evidence.facts.push(format!(
            "{}: this GPU time overlaps the host's, so fixing it shortens a step by at most about {} ({} in all), \
             not the {} a step ({}) it measures, until the host's part is shorter",
            paths_words(walked, typical, share),
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
