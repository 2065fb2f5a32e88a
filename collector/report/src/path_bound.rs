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

/// The GPU's part of the paths walked (with `unseen`, and their waits on work the trace does not hold), each
/// group's weighted by its steps' time (a step with no GPU work has none); None where no group's path is whole
/// (steps of more ops than the sweep keeps).
fn weighted_gpu_share(walked: &Walked, unseen: bool) -> Option<f64> {
    let whole = walked.strata.iter().filter(|s| !s.partial);
    let total: u64 = whole.clone().map(|s| s.steps_ns).sum();
    let gpu: f64 = whole.map(|s| s.path.as_ref().map_or(0.0, |p| p.gpu_share_with(unseen)) * s.steps_ns as f64).sum();
    (total > 0).then(|| gpu / total as f64)
}

/// The finding about waits on GPU work the trace does not hold: the paths' such waits are its own time.
const UNSEEN_FINDING: &str = "unseen_gpu_work";

/// The host's largest part of a path, in words ("host work 100%"); None where the path holds no host time.
fn host_words(path: &StepPath) -> Option<String> {
    let host = path.by_kind.iter().filter(|g| HOST_GROUPS.contains(&g.what.as_str()) && g.ns > 0).max_by_key(|g| g.ns);
    host.map(|g| format!("{} {:.0}%", g.what, g.ns as f64 * 100.0 / path.step_ns.max(1) as f64))
}

/// Which paths hold `share` GPU time (with `unseen`, and waits on work not in the trace), in words.
fn paths_words(walked: &Walked, typical: &StepPath, share: f64, unseen: bool) -> String {
    let steps: usize = walked.strata.iter().map(|s| s.steps).sum();
    let groups = walked.strata.len();
    let pct = share * 100.0;
    let gpu_time = if unseen { "GPU time and waits on work not in the trace" } else { "GPU time" };
    let host = host_words(typical).map_or(String::new(), |h| format!(": {h}"));
    let of_typical = format!("the typical step, {} of {}{host}", typical.step, ms(typical.step_ns));
    let left_out = match walked.strata.iter().filter(|s| s.partial).count() {
        0 => String::new(),
        n => format!(", {n} of them left out (more GPU ops than a walk keeps)"),
    };
    let words = if groups <= 1 {
        format!(
            "the critical path of the typical step ({}, {}) holds {pct:.1}% {gpu_time}{}",
            typical.step,
            ms(typical.step_ns),
            host_words(typical).map_or(String::new(), |h| format!(" ({h})"))
        )
    } else if groups == steps {
        format!("the critical paths of all {steps} steps hold {pct:.1}% {gpu_time} ({of_typical})")
    } else {
        format!(
            "the critical paths of {groups} steps (the middle one of each of {groups} equal groups of the {steps} \
             steps by duration, weighted by its group's time) hold {pct:.1}% {gpu_time} ({of_typical})"
        )
    };
    words + &left_out
}

/// Caps each GPU-side finding's loss at the GPU's share of the steps' paths (for `unseen_gpu_work`, with their
/// waits on work not in the trace) times the analysed steps' time (`step_total_ns`), and says so in its evidence
/// (`critical_path_gpu_share`: that share); `steps`: how many steps that time holds.
pub fn bound_by_path(fs: &mut [Finding], walked: &Walked, step_total_ns: u64, steps: usize) {
    let Some(typical) = walked.typical.as_ref() else { return };
    if step_total_ns == 0 || typical.step_ns == 0 {
        return;
    }
    let (Some(gpu), Some(with_unseen)) = (weighted_gpu_share(walked, false), weighted_gpu_share(walked, true)) else {
        return;
    };
    let per_step = |ns: u64| ms(ns / steps.max(1) as u64);
    for f in fs.iter_mut().filter(|f| GPU_SIDE.contains(&f.kind)) {
        let unseen = f.kind == UNSEEN_FINDING;
        let share = if unseen { with_unseen } else { gpu };
        if f.share <= share + MARGIN {
            continue;
        }
        let cap = (share * step_total_ns as f64) as u64;
        let overlaps = match unseen {
            false => "this GPU time overlaps the host's",
            true => "these waits overlap the host's work",
        };
        f.evidence.facts.push(format!(
            "{}: {overlaps}, so fixing it shortens a step by at most about {} ({} in all), not the {} a step ({}) it \
             measures, until the host's part is shorter",
            paths_words(walked, typical, share, unseen),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step_path::{Share, Stratum};

    fn finding(kind: &'static str, lost: u64) -> Finding {
        Finding {
            kind,
            severity: Severity::of_share(lost as f64 / 1000.0),
            time_lost_ns: lost,
            share: lost as f64 / 1000.0,
            pid: 1,
            rank: None,
            trace: None,
            file: String::new(),
            summary: String::new(),
            evidence: Default::default(),
            fix: String::new(),
            sources: Vec::new(),
        }
    }

    /// A step held by waits on GPU work the trace does not hold (TraceLens's SGLang decode: 98% of its path): those
    /// waits are unseen_gpu_work's own time, which the path's GPU part left out ("holds 1.8% GPU time (host work
    /// 0%): this GPU time overlaps the host's" capped 463 ms to 8.5). Other GPU-side findings are still capped.
    #[test]
    fn waits_on_unseen_work_are_bounded_by_the_paths_waits_too() {
        let share = |what: &str, ns: u64| Share { what: what.into(), ns, share: ns as f64 / 1000.0 };
        let path = StepPath {
            step: "step".into(),
            step_ns: 1000,
            path_ns: 1000,
            by_kind: vec![
                share("waits on work not in the trace", 970),
                share("gemm kernels", 20),
                share("host work", 10),
            ],
            longest: vec![],
            links: 3,
            calls_sampled: false,
        };
        let walked = Walked {
            typical: Some(path.clone()),
            strata: vec![Stratum { path: Some(path), partial: false, steps_ns: 1000, steps: 1 }],
        };
        let mut fs = [finding("unseen_gpu_work", 960), finding("fp32_gemm", 300)];
        bound_by_path(&mut fs, &walked, 1000, 1);
        assert_eq!(fs[0].time_lost_ns, 960, "within the path's 99%: {:?}", fs[0].evidence.facts);
        assert_eq!(fs[1].time_lost_ns, 20, "the GEMM's 2%");
        let fact = &fs[1].evidence.facts[0];
        assert!(fact.contains("holds 2.0% GPU time (host work 1%)"), "{fact}");
    }
}
