//! Stragglers: with several ranks (several files, or several GPU processes in one trace), the rank the others
//! wait for.
//!
//! With collectives in the trace, the k-th communication kernel of every rank is the same collective. It ends
//! on all ranks at about the same moment, once the last rank has joined, so each rank's kernel duration minus
//! the shortest one is how long that rank waited. This needs no clock alignment between hosts. The rank that
//! joins last most often is the straggler, and the others' waiting is the time it costs them.
//! Without collectives, ranks whose mean step is more than 5% above the others' median are reported.

use super::findings::{ms, Ctx, Evidence, Finding, MIN_SHARE};
use super::idle::Example;
use rustc_hash::FxHashMap;

pub struct Straggler {
    pub finding: Option<Finding>,
    /// Per rank (in the order given): communication kernel (by its order in the process) → time it only waited
    /// for others.
    pub waits: Vec<FxHashMap<u32, u64>>,
}

const FIX: &str = "Find out why this rank is slower: uneven input per rank (sequence lengths, shard sizes), a \
     throttled or shared GPU (nvidia-smi -q -d PERFORMANCE), host contention (CPU affinity, data-loader workers), \
     or a slower link; balance the work per rank.";

fn rank_label(c: &Ctx) -> String {
    match c.rank {
        Some(r) => format!("rank {r}"),
        None => format!("pid {}", c.pid),
    }
}

pub fn straggler(ctxs: &[Ctx]) -> Straggler {
    let mut waits = vec![FxHashMap::default(); ctxs.len()];
    if ctxs.len() < 2 {
        return Straggler { finding: None, waits };
    }
    let comm: Vec<&[super::plan::CommOp]> = ctxs.iter().map(|c| c.plan.comm.as_slice()).collect();
    let k_max = comm.iter().map(|c| c.len()).min().unwrap_or(0);
    if k_max == 0 {
        return Straggler { finding: by_step_time(ctxs), waits };
    }
    let mut last_count = vec![0usize; ctxs.len()];
    let mut wait_total = vec![0u64; ctxs.len()];
    let mut worst: Vec<(u64, usize, usize)> = Vec::new(); // (wait, collective, waiting rank)
    #[allow(clippy::needless_range_loop)] // k indexes every rank's list at once
    for k in 0..k_max {
        let durs: Vec<u64> = (0..ctxs.len()).map(|r| comm[r][k].duration).collect();
        let (last, &min) = durs.iter().enumerate().min_by_key(|(_, d)| **d).expect("two ranks or more");
        last_count[last] += 1;
        for r in 0..ctxs.len() {
            let w = durs[r] - min;
            waits[r].insert(k as u32, w);
            if super::spans::in_windows(&ctxs[r].steps.windows, comm[r][k].start) {
                wait_total[r] += w;
                worst.push((w, k, r));
            }
        }
    }
    let (slow, &times_last) = last_count.iter().enumerate().max_by_key(|(_, n)| **n).expect("ranks");
    let others: Vec<usize> = (0..ctxs.len()).filter(|&r| r != slow).collect();
    let lost = others.iter().map(|&r| wait_total[r]).sum::<u64>() / others.len() as u64;
    let others_steps = others.iter().map(|&r| ctxs[r].step_total_ns).sum::<u64>() / others.len() as u64;
    let share = lost as f64 / others_steps.max(1) as f64;
    if times_last * 2 < k_max || share < MIN_SHARE {
        return Straggler { finding: None, waits };
    }
    worst.sort_by_key(|w| std::cmp::Reverse(w.0));
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} joined last in {times_last} of {k_max} collectives; the other ranks waited {} per step on average inside \
         communication kernels",
        rank_label(&ctxs[slow]),
        ms(lost / ctxs[others[0]].steps_count() as u64)
    ));
    for (r, c) in ctxs.iter().enumerate() {
        ev.facts.push(format!(
            "{}: waited {} in all, last to join {} times",
            rank_label(c),
            ms(wait_total[r]),
            last_count[r]
        ));
    }
    ev.examples = worst
        .iter()
        .take(5)
        .map(|&(w, k, r)| {
            let e = comm[r][k];
            Example {
                start_ns: e.start,
                end_ns: e.start + w,
                duration_ns: w,
                step: None,
                what: format!("{} waited in collective #{k} ({})", rank_label(&ctxs[r]), ctxs[r].p.string(e.name)),
            }
        })
        .collect();
    ev.metrics.insert("collectives", k_max as f64);
    // The typical wait, robust to a one-off stall of the slow rank (its mean is time_lost / collectives).
    let typical = super::spans::median(worst.iter().filter(|w| w.2 != slow).map(|w| w.0).collect());
    ev.metrics.insert("median_wait_ns", typical as f64);
    let summary = format!(
        "{} is the straggler: the others wait {:.0}% of their step time",
        rank_label(&ctxs[slow]),
        share * 100.0
    );
    let mut f = ctxs[slow].finding("straggler", lost, summary, ev, FIX);
    f.share = share;
    f.severity = super::findings::Severity::of_share(share);
    Straggler { finding: Some(f), waits }
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
    let others = super::spans::median(known.iter().filter(|(i, _)| *i != slow).map(|(_, m)| *m).collect());
    if (slow_mean as f64) < others as f64 * 1.05 {
        return None;
    }
    let lost = (slow_mean - others) * ctxs[slow].steps.windows.len() as u64;
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} takes {} per step, the other ranks {} (median); no collectives in the trace to measure waiting",
        rank_label(&ctxs[slow]),
        ms(slow_mean),
        ms(others)
    ));
    let summary = format!(
        "{} steps are {:.0}% slower than the other ranks'",
        rank_label(&ctxs[slow]),
        100.0 * (slow_mean as f64 / others as f64 - 1.0)
    );
    Some(ctxs[slow].finding("straggler", lost, summary, ev, FIX))
}
