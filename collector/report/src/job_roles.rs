//! Which process stands for each rank of a job in the report's job view, and what every finding needs to know
//! of a process ([`Ctx`]): its rank, its clock onto the job's.

use super::findings::Ctx;
use super::{job, plan};
use cuflight_trace::model::source::EventSource;

pub(crate) type Plans = Vec<rustc_hash::FxHashMap<u32, plan::Plan>>;

/// Which processes stand for a rank in the job view, and whose worker each other one is. A rank's DataLoader or
/// other workers inherit its rank and run on its host: of the processes of one rank and host, the one with the
/// most communication kernels, then the most GPU work, stands for the rank, and the others are its workers
/// unless they run collectives of their own (workers do not; a second job's rank does). Processes of one rank
/// on different hosts, and every process without a rank, stand for themselves.
/// Returns the primaries in order, and per process the index of the primary it works for.
pub(crate) fn roles(ctxs: &[Ctx]) -> (Vec<usize>, Vec<Option<usize>>) {
    let mut best: rustc_hash::FxHashMap<(u32, &str), usize> = Default::default();
    let weight = |c: &Ctx| (c.plan.comm.len(), c.plan.gpu_ops);
    for (i, c) in ctxs.iter().enumerate() {
        if let Some(r) = c.rank {
            let b = best.entry((r, c.p.info.host.as_str())).or_insert(i);
            if weight(c) > weight(&ctxs[*b]) {
                *b = i;
            }
        }
    }
    let main_of: Vec<Option<usize>> = ctxs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let main = *best.get(&(c.rank?, c.p.info.host.as_str()))?;
            (main != i && c.plan.comm.is_empty()).then_some(main)
        })
        .collect();
    let primary = (0..ctxs.len()).filter(|&i| main_of[i].is_none()).collect();
    (primary, main_of)
}

/// A warning for each primary whose rank another primary claims too (traces of two jobs, or a launcher that set
/// the same RANK twice): both stay in the job view, each as a rank of its own, and the report says so.
pub(crate) fn claimed_twice(
    ctxs: &[Ctx],
    primary: &[usize],
    procs: &[(usize, u32)],
    traces: &[(String, EventSource)],
) -> Vec<(usize, String)> {
    let mut by_rank: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for &i in primary {
        if let Some(r) = ctxs[i].rank {
            by_rank.entry(r).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    for (r, claimants) in by_rank.into_iter().filter(|(_, c)| c.len() > 1) {
        let where_ = |j: usize| {
            let host = ctxs[j].p.info.host.as_str();
            let host = if host.is_empty() { "an unknown host" } else { host };
            format!("pid {} on {host} in {}", ctxs[j].p.info.pid, traces[procs[j].0].0)
        };
        for &i in &claimants {
            let others: Vec<String> = claimants.iter().filter(|&&j| j != i).take(3).map(|&j| where_(j)).collect();
            let more = claimants.len().saturating_sub(4);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            out.push((
                i,
                format!(
                    "rank {r} is also claimed by {}{more}, which runs collectives of its own: are these one job's \
                     traces? Each is compared as a rank of its own",
                    others.join(", ")
                ),
            ));
        }
    }
    out
}

/// What every finding needs about process `k` of file `fi`, the `i`-th of `n` with GPU work.
pub(crate) fn ctx<'a>(
    traces: &'a [(String, EventSource)],
    plans: &'a Plans,
    (fi, k): (usize, u32),
    i: usize,
    several_files: bool,
    n: usize,
) -> Ctx<'a> {
    let p = &traces[fi].1.processes[&k];
    let plan = &plans[fi][&k];
    Ctx {
        p,
        plan,
        steps: &plan.steps,
        step_total_ns: plan.steps.windows.iter().map(|w| w.1 - w.0).sum(),
        pid: k,
        rank: straggler_rank(p, fi, i, several_files, n),
        file: fi,
        trace: &traces[fi].0,
    }
}

/// Each process's way onto the job's clock ([`cuflight_trace::model::job_clock`]), and how that clock was made.
pub(crate) fn job_clocks(ctxs: &[Ctx]) -> (Vec<cuflight_trace::model::align::ToJob>, job::Clocks) {
    let mut builder = cuflight_trace::model::job_clock::JobClockBuilder::default();
    for c in ctxs {
        builder.add_facts(c.file, c.p, &c.plan.clock);
    }
    let clock = builder.build();
    let clocks = ctxs.iter().map(|c| clock.to_job(c.p)).collect();
    let hosts = clock.hosts;
    // Three matched collectives at least per host before arrivals are compared across hosts.
    let basis = if hosts.len() <= 1 {
        "one host"
    } else if hosts.iter().all(|h| h.reference || h.matched >= 3) {
        "aligned"
    } else {
        "realtime"
    };
    (clocks, job::Clocks { basis, hosts })
}

/// A process's rank: the trace's, else its file's order when several files are ranks, else its order among several
/// GPU processes of one trace.
pub(crate) fn straggler_rank(
    p: &cuflight_trace::model::trace::Process,
    fi: usize,
    i: usize,
    several_files: bool,
    procs: usize,
) -> Option<u32> {
    p.rank.or(if several_files {
        Some(fi as u32)
    } else if procs > 1 {
        Some(i as u32)
    } else {
        None
    })
}
