//! The straggler: the rank the others wait for. With collectives matched across ranks ([`super::collectives`]),
//! the rank that joins last most often is the straggler, and the others' waiting inside their communication
//! kernels is the time it costs them. Without collectives, ranks whose mean step is more than 5% above the
//! others' median are reported.

use super::super::findings::{ms, times, Ctx, Evidence, Finding, Severity, MIN_SHARE};
use super::super::idle::Example;
use super::collectives::Method;
use super::JobPlan;

const FIX: &str = "Find out why this rank is slower: uneven input per rank (sequence lengths, shard sizes), a \
     throttled or shared GPU (nvidia-smi -q -d PERFORMANCE), host contention (CPU affinity, data-loader workers), \
     or a slower link; balance the work per rank.";

pub fn label(c: &Ctx) -> String {
    match c.rank {
        Some(r) => format!("rank {r}"),
        None => format!("pid {}", c.pid),
    }
}

pub fn finding(ctxs: &[Ctx], job: &JobPlan) -> Option<Finding> {
    if ctxs.len() < 2 {
        return None;
    }
    if job.instances.is_empty() {
        return by_step_time(ctxs);
    }
    let ranks = &job.ranks;
    let slow = (0..ctxs.len()).max_by_key(|&r| (ranks[r].times_last, std::cmp::Reverse(r)))?;
    let times_last = ranks[slow].times_last;
    let joined = ranks[slow].joined;
    let others: Vec<usize> = (0..ctxs.len()).filter(|&r| r != slow && ranks[r].joined > 0).collect();
    if others.is_empty() {
        return None;
    }
    let lost = others.iter().fold(0u64, |a, &r| a.saturating_add(ranks[r].waited_ns)) / others.len() as u64;
    let others_steps = others.iter().fold(0u64, |a, &r| a.saturating_add(ctxs[r].step_total_ns)) / others.len() as u64;
    let share = lost as f64 / others_steps.max(1) as f64;
    if times_last * 2 < joined || share < MIN_SHARE {
        return None;
    }
    // The waits behind the evidence: (wait, collective, waiting rank), in steps.
    let mut worst: Vec<(u64, usize, usize)> = Vec::new();
    for (k, inst) in job.instances.iter().enumerate() {
        for m in &inst.members {
            if super::super::spans::in_windows(&ctxs[m.rank].steps.windows, m.op.own_start) {
                worst.push((m.wait, k, m.rank));
            }
        }
    }
    worst.sort_by_key(|w| std::cmp::Reverse(w.0));
    let how = match job.method {
        Method::Arrival => "arrivals compared on the common clock",
        Method::Duration => "clocks not aligned: arrivals inferred from kernel durations",
    };
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} joined last in {times_last} of its {joined} collectives, a median {} after the others ({how}); the \
         other ranks waited {} per step on average inside communication kernels",
        label(&ctxs[slow]),
        ms(ranks[slow].median_lateness_ns.max(0) as u64),
        ms(lost / ctxs[others[0]].steps_count() as u64)
    ));
    for (r, c) in ctxs.iter().enumerate() {
        ev.facts.push(format!(
            "{}: waited {} in all, last to join {}",
            label(c),
            ms(ranks[r].waited_ns),
            times(ranks[r].times_last)
        ));
    }
    ev.examples = worst
        .iter()
        .take(5)
        .map(|&(w, k, r)| {
            let m = job.instances[k].members.iter().find(|m| m.rank == r).expect("a member");
            Example {
                start_ns: m.op.own_start,
                end_ns: m.op.own_start + w,
                duration_ns: w,
                step: None,
                what: format!(
                    "{} waited in collective #{} ({})",
                    label(&ctxs[r]),
                    m.op.ordinal,
                    job.names[job.instances[k].name as usize]
                ),
            }
        })
        .collect();
    ev.metrics.insert("collectives", job.instances.len() as f64);
    // The typical wait, robust to a one-off stall of the slow rank (its mean is time_lost / collectives).
    let typical = super::super::spans::median(worst.iter().filter(|w| w.2 != slow).map(|w| w.0).collect());
    ev.metrics.insert("median_wait_ns", typical as f64);
    ev.metrics.insert("median_lag_ns", ranks[slow].median_lateness_ns as f64);
    let mut summary =
        format!("{} is the straggler: the others wait {:.0}% of their step time", label(&ctxs[slow]), share * 100.0);
    let world = ctxs.iter().map(|c| c.p.info.world_size as usize).max().unwrap_or(0);
    if world > ctxs.len() {
        // A slower rank may be among those not given.
        summary.push_str(&format!(" (of the {} ranks given; the job has {world})", ctxs.len()));
    }
    let mut f = ctxs[slow].finding("straggler", lost, summary, ev, FIX);
    f.share = share;
    f.severity = Severity::of_share(share);
    Some(f)
}

fn by_step_time(ctxs: &[Ctx]) -> Option<Finding> {
    let means: Vec<Option<u64>> = ctxs
        .iter()
        .map(|c| (!c.steps.host.is_empty()).then(|| c.step_total_ns / c.steps.windows.len() as u64))
        .collect();
    let known: Vec<(usize, u64)> = means.iter().enumerate().filter_map(|(i, m)| m.map(|m| (i, m))).collect();
    if known.len() < 2 {
        return None;
    }
    let (slow, slow_mean) = *known.iter().max_by_key(|(_, m)| *m)?;
    let others = super::super::spans::median(known.iter().filter(|(i, _)| *i != slow).map(|(_, m)| *m).collect());
    if (slow_mean as f64) < others as f64 * 1.05 {
        return None;
    }
    let lost = (slow_mean - others).saturating_mul(ctxs[slow].steps.windows.len() as u64);
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} takes {} per step, the other ranks {} (median); no collectives in the trace to measure waiting",
        label(&ctxs[slow]),
        ms(slow_mean),
        ms(others)
    ));
    let summary = format!(
        "{} steps are {:.0}% slower than the other ranks'",
        label(&ctxs[slow]),
        100.0 * (slow_mean as f64 / others as f64 - 1.0)
    );
    Some(ctxs[slow].finding("straggler", lost, summary, ev, FIX))
}
