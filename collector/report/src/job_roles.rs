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
    }
}

/// Each process's way onto the job's clock ([`cuflight_trace::model::job_clock`]), and how that clock was made.
pub(crate) fn job_clocks(ctxs: &[Ctx]) -> (Vec<cuflight_trace::model::align::ToJob>, job::Clocks) {
    let mut builder = cuflight_trace::model::job_clock::JobClockBuilder::default();
    for c in ctxs {
        builder.add_facts(c.p, &c.plan.clock);
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

/// Traces whose wall-clock spans lie further apart than this were not taken at the same time, so they are not
/// ranks of one job. Ranks run together: their spans overlap, give or take NTP's milliseconds between hosts and
/// seconds of start-up. A minute is far beyond both.
const APART_NS: u64 = 60_000_000_000;

/// Why the primaries are not one job's ranks, if their times say so: two traces given together whose wall-clock
/// spans are more than [`APART_NS`] apart (two runs of a program, perhaps given to compare them, which `diff`
/// does), or one process's windows in several files. Spans are read through each process's REALTIME offset
/// alone, never the job clock's alignment, which would match collectives of unrelated runs. Traces without
/// wall-clock times cannot tell, and are taken as one job as before. `files[i]`: the trace file of `ctxs[i]`.
pub(crate) fn separate_runs(ctxs: &[Ctx], realtime_offsets: &[Option<i64>], files: &[&str]) -> Option<String> {
    use cuflight_trace::model::job_clock::on_epoch;
    let mut spans: Vec<(u64, u64, usize)> = Vec::new();
    for (i, (c, &offset)) in ctxs.iter().zip(realtime_offsets).enumerate() {
        let (start, end) = c.plan.timeline?;
        spans.push((on_epoch(start, offset)?, on_epoch(end, offset)?, i));
    }
    spans.sort_unstable();
    // One process in several files (the windows of `record --every`, `<name>-N.cuf`) is no job's ranks either,
    // however close its windows: the same pid on the same named host, at times that do not overlap.
    let mut seen: rustc_hash::FxHashMap<(&str, u32), (u64, usize)> = Default::default();
    for &(start, end, i) in &spans {
        let (host, pid) = (ctxs[i].p.info.host.as_str(), ctxs[i].p.info.pid);
        if host.is_empty() {
            continue;
        }
        if let Some(&(before_end, j)) = seen.get(&(host, pid)) {
            if files[j] != files[i] && start >= before_end {
                return Some(format!(
                    "{} and {} are windows of one process (pid {pid} on {host}), not ranks of one job. Each is \
                     reported alone",
                    files[j], files[i]
                ));
            }
        }
        seen.insert((host, pid), (end, i));
    }
    let mut reach = spans.first()?;
    for next in &spans[1..] {
        if next.0 > reach.1.saturating_add(APART_NS) {
            let (a, b) = (reach.2, next.2);
            return Some(format!(
                "{} ran at {} and {} at {}, {} apart: not at the same time, so not ranks of one job. Each is reported \
                 alone; `cuflight diff BASELINE CANDIDATE` compares two runs",
                files[a],
                super::run::utc(reach.0),
                files[b],
                super::run::utc(next.0),
                apart(next.0 - reach.1)
            ));
        }
        if next.1 > reach.1 {
            reach = next;
        }
    }
    None
}

fn apart(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    match s {
        0..=5_399 => format!("{} min", s / 60),
        5_400..=172_799 => format!("{:.0} h", s as f64 / 3600.0),
        _ => format!("{:.0} days", s as f64 / 86_400.0),
    }
}
