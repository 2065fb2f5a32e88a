//! What the recording itself cost the program, as the launch_bound finding tells it: CUPTI lengthens the launch
//! calls it traces, and where the GPU waits on those calls, part of the idle time the trace shows is the
//! profiler's. Graph launches traced node by node: estimated per node and set apart by the idle sweep; kernels
//! launched one by one: estimated per launch and only said.

use super::sweep::Swept;
use super::words::{format_us, ms};
use cuflight_format::tracing::{EAGER_LAUNCH_TRACING_NS, GRAPH_NODE_TRACING_NS};

/// Below this a step, what tracing eager launches may cost is not worth a line (two launches a step: 2 µs).
const MIN_SAID_NS: u64 = 10_000;

/// How much of the GPU's wait on the host's launches (`waited_ns` over `steps`) CUPTI's tracing of `kernels`
/// launches may be, where it is a twentieth of it or more and 10 µs a step or more; None where less. A sampled
/// recording measured it: `sampled`, how much longer its recorded steps ran than the others (their own ranges, ns
/// a step).
/// `steps` 0: the trace has none (one window), and the figures are its totals.
pub(crate) fn eager_launches(kernels: u64, steps: usize, waited_ns: u64, sampled: Option<u64>) -> Option<String> {
    let (a_step, per_step) = if steps == 0 { ("", "") } else { (" a step", " per step") };
    let steps = steps.max(1) as u64;
    let waited = waited_ns / steps;
    let launches = kernels as f64 / steps as f64;
    if kernels == 0 || waited == 0 {
        return None;
    }
    if let Some(longer) = sampled.filter(|&l| l.saturating_mul(20) >= waited) {
        let how_much = if longer >= waited { "all" } else { "that much" };
        return Some(format!(
            "the steps recorded ran {} longer than the steps not recorded (their own ranges; {launches:.0} launches a \
             step, each lengthened by CUPTI's tracing): up to {how_much} of the {} per step the GPU waited for the \
             host is the recording's, not the program's",
            ms(longer),
            ms(waited),
        ));
    }
    let most = (kernels.saturating_mul(EAGER_LAUNCH_TRACING_NS) / steps).min(waited);
    if most * 20 < waited || most < MIN_SAID_NS {
        return None;
    }
    let how_much = if most == waited { "all".to_string() } else { ms(most) };
    Some(format!(
        "CUPTI's tracing lengthens each launch call by about {} (measured on an H200: the recorded steps of a \
         launch-bound PyTorch loop ran 0.9-1.0 µs a launch slower than its steps not recorded); with {launches:.0} \
         launches{a_step}, up to {how_much} of the {}{per_step} the GPU waited for the host may be the profiler's, \
         not the program's (`record --sample 1/N` measures it: the steps it does not record run without it)",
        format_us(EAGER_LAUNCH_TRACING_NS),
        ms(waited),
    ))
}

/// What CUPTI's node-level tracing adds to each graph launch, where graph replays were traced per node: the time
/// the host spends in a launch call while the GPU idles is launch time, but up to
/// [`GRAPH_NODE_TRACING_NS`] a node of it is the profiler's, and the idle sweep put that apart (`traced_ns`).
/// `steps` 0: the trace has none, as for [`eager_launches`].
pub(crate) fn graph_launches(swept: &Swept, traced_ns: u64, steps: usize) -> Option<String> {
    let launches = &swept.graph_launch_durations;
    if launches.len() == 0 || swept.graph_level {
        return None;
    }
    let nodes = swept.graph_kernels as f64 / launches.len() as f64;
    let apart = match traced_ns {
        0 => String::new(),
        ns => format!(
            "; {}{} of the GPU's idle time inside those calls is put down to it and not counted here",
            ms(ns / steps.max(1) as u64),
            if steps == 0 { "" } else { " per step" }
        ),
    };
    Some(format!(
        "{} ({nodes:.0} kernel nodes a launch); CUPTI's node-level \
         tracing lengthens each launch call by about {:.1} µs a node (measured on an H200: a median of 156 µs traced \
         per node against 40 µs traced per launch, ~107-node graphs){apart}: `--trace cuda,nvtx,graphs` records \
         one record per launch",
        match launches.len() {
            1 => format!("its one CUDA graph launch took {}", format_us(launches.median())),
            n => format!("its {n} CUDA graph launches took a median of {} each", format_us(launches.median())),
        },
        GRAPH_NODE_TRACING_NS as f64 / 1e3,
    ))
}

#[cfg(test)]
mod tests {
    use super::eager_launches;

    /// The estimate is at most the wait, and said only where it is a twentieth of it or more; a sampled
    /// recording's measured difference takes its place.
    #[test]
    fn what_tracing_eager_launches_may_cost_is_said_where_it_matters() {
        // 2000 launches a step over 4 steps, 14 ms a step waited: up to 2 ms a step.
        let said = eager_launches(8000, 4, 56_000_000, None).unwrap();
        assert!(said.contains("with 2000 launches a step, up to 2.00 ms of the 14.00 ms per step"), "{said}");
        // Capped at the wait itself.
        let said = eager_launches(8000, 4, 4_000_000, None).unwrap();
        assert!(said.contains("up to all of the 1.00 ms per step"), "{said}");
        // 10 launches a step against 1 ms waited: 1%, not said.
        assert!(eager_launches(40, 4, 4_000_000, None).is_none());
        assert!(eager_launches(0, 4, 4_000_000, None).is_none());
        // Two launches a step against 30 µs waited: 2 µs a step, too little to say.
        assert!(eager_launches(8, 4, 120_000, None).is_none());
        // Measured by a sampled recording: its figure, not the estimate.
        let said = eager_launches(8000, 4, 56_000_000, Some(1_870_000)).unwrap();
        assert!(said.starts_with("the steps recorded ran 1.87 ms longer than the steps not recorded"), "{said}");
        assert!(said.contains("of the 14.00 ms per step the GPU waited"), "{said}");
        // More than the wait: all of it.
        let said = eager_launches(8000, 4, 4_000_000, Some(1_870_000)).unwrap();
        assert!(said.contains("up to all of the 1.00 ms per step"), "{said}");
        // A measured difference too small to matter falls back to the estimate.
        let said = eager_launches(8000, 4, 56_000_000, Some(10_000)).unwrap();
        assert!(said.starts_with("CUPTI's tracing lengthens each launch call by about 1.0 µs"), "{said}");
    }
}
