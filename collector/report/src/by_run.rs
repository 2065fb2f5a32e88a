//! Traces of separate runs given together (a directory that gathers several runs' traces, yesterday's eight
//! ranks beside today's): each run is reported as the job it was, with ranks by its own files' order, its own
//! job view and cross-rank findings; the runs' processes side by side, and all their findings, most costly
//! first, each naming its trace (every run may have a rank 0). Until this, such a directory had no job view at
//! all: every process was reported alone.
//!
//! Only runs apart in time are split so; one process's windows are one run, whose report keeps them apart
//! ([`crate::Report::compute`]).

use super::job::RunOf;
use super::job_roles::Plans;
use super::{name_traces, sort_findings, verdict, Options, Report, ReportError, RunVerdict};
use cuflight_trace::model::runs::{describe_runs, Separated};
use cuflight_trace::model::source::EventSource;
use rustc_hash::FxHashMap;

/// The files of one run, and when it began (None for a trace that does not say when it ran).
pub(crate) struct Group {
    files: Vec<usize>,
    began: Option<u64>,
}

/// The runs to report one by one, in time order, then the traces that do not say when they ran, each alone;
/// None unless the traces make several runs apart in time. The first reason found may be one process's windows:
/// they are one run.
pub(crate) fn groups(s: &Separated, n: usize) -> Option<Vec<Group>> {
    if s.runs.len() < 2 {
        return None;
    }
    let mut groups: Vec<Group> =
        s.runs.iter().map(|r| Group { files: r.files.clone(), began: Some(r.start) }).collect();
    let placed: rustc_hash::FxHashSet<usize> = groups.iter().flat_map(|g| g.files.iter().copied()).collect();
    // Files with no span are in no run: those that do not say when they ran, and those with no GPU work
    // (reported by no run: their report would be empty).
    groups.extend((0..n).filter(|f| !placed.contains(f)).map(|f| Group { files: vec![f], began: None }));
    Some(groups)
}

/// Reorders `v` so that `v[i]` is what `v[order[i]]` was (`order` a permutation of its indices).
fn permute<T>(v: &mut [T], order: &[usize]) {
    let mut done = vec![false; v.len()];
    for start in 0..v.len() {
        let mut i = start;
        while !done[i] {
            done[i] = true;
            let from = order[i];
            if from == start {
                break;
            }
            v.swap(i, from);
            i = from;
        }
    }
}

/// The report of `traces`, planned, run by run (`groups` of [`groups`]; `s` says why they are not one job).
pub(crate) fn compute(
    traces: &mut [(String, EventSource)],
    plans: Plans,
    chosen: Vec<FxHashMap<u32, String>>,
    (s, groups): (&Separated, Vec<Group>),
    opts: &Options,
) -> Result<Report, ReportError> {
    let names: Vec<String> = traces.iter().map(|(f, _)| f.clone()).collect();
    let why = {
        let files: Vec<&str> = names.iter().map(String::as_str).collect();
        // Two traces of two runs: the pair's own sentence says when each ran.
        let runs = describe_runs(&s.runs, &s.untimed, &files, 6)
            .map_or_else(|| s.why.describe(&files), |runs| format!("{runs}: runs apart in time are not one job"));
        let each = if s.runs.iter().any(|r| r.files.len() > 1) {
            "Each run is reported apart: a run of several traces as one job, the others alone"
        } else {
            "Each is reported alone"
        };
        format!("{runs}. {each}; `cuflight diff BASELINE CANDIDATE` compares two runs")
    };
    // Each run's traces side by side, as one run's report needs them; put back in the caller's order after.
    let order: Vec<usize> = groups.iter().flat_map(|g| g.files.iter().copied()).collect();
    permute(traces, &order);
    let (mut plans, mut chosen): (Vec<_>, Vec<_>) = (plans.into_iter().map(Some).collect(), chosen);
    let mut parts: Vec<(Report, RunOf)> = Vec::new();
    let mut at = 0;
    let mut failed = None;
    for g in &groups {
        let range = at..at + g.files.len();
        at = range.end;
        let group_plans: Plans = g.files.iter().map(|&f| plans[f].take().unwrap_or_default()).collect();
        let group_chosen: Vec<_> = g.files.iter().map(|&f| std::mem::take(&mut chosen[f])).collect();
        match Report::compute_planned(&mut traces[range], &group_plans, &group_chosen, opts) {
            Ok(r) => {
                let run = RunOf {
                    traces: g.files.iter().map(|&f| names[f].clone()).collect(),
                    began: g.began.map(cuflight_trace::model::wall_clock::utc),
                };
                parts.push((r, run));
            }
            // A trace with no GPU work is in no run's report.
            Err(ReportError::NoGpuWork(_) | ReportError::NoGpuWorkDelivered(_) | ReportError::OtherAccelerator(..)) => {
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let mut back = vec![0; order.len()];
    for (i, &f) in order.iter().enumerate() {
        back[f] = i;
    }
    permute(traces, &back);
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(merge(parts, why))
}

/// The runs' reports as one: their processes in run order, their findings together, each run's verdict and job
/// view.
fn merge(parts: Vec<(Report, RunOf)>, why: String) -> Report {
    let (mut processes, mut findings, mut run_jobs, mut within) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut run_verdicts = Vec::new();
    for (r, run) in parts {
        processes.extend(r.processes);
        findings.extend(r.findings);
        run_verdicts.push(RunVerdict { run: run.clone(), verdict: r.verdict });
        if let Some(mut job) = r.job {
            job.run = Some(run);
            run_jobs.push(job);
        }
        // One process's windows within a run.
        within.extend(r.separate_runs);
    }
    sort_findings(&mut findings);
    name_traces(&mut findings, &mut processes, true);
    let separate_runs = Some(std::iter::once(why).chain(within).collect::<Vec<_>>().join(". "));
    let verdict = verdict(&findings, &processes, true);
    Report {
        verdict,
        separate_runs,
        run_verdicts,
        traces_left_out: Vec::new(),
        findings,
        processes,
        job: None,
        run_jobs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_trace::model::runs::Separate;

    #[test]
    fn runs_are_split_only_when_apart_in_time() {
        use cuflight_trace::model::runs::Run;
        let apart = Separate::Apart { first: 0, second: 1, first_end: 0, second_start: 1 };
        let runs = vec![Run { start: 5, files: vec![0, 2] }, Run { start: 9, files: vec![1] }];
        let s = Separated { why: apart.clone(), runs, untimed: vec![3] };
        let g = groups(&s, 5).unwrap();
        let files: Vec<(Vec<usize>, Option<u64>)> = g.into_iter().map(|g| (g.files, g.began)).collect();
        // File 3 says not when it ran, file 4 has no GPU work: each alone, after the runs.
        assert_eq!(files, vec![(vec![0, 2], Some(5)), (vec![1], Some(9)), (vec![3], None), (vec![4], None)]);
        // Each run one trace: each reported alone, with its own verdict.
        let one_each = vec![Run { start: 5, files: vec![0] }, Run { start: 9, files: vec![1] }];
        assert_eq!(groups(&Separated { why: apart, runs: one_each, untimed: vec![] }, 2).map(|g| g.len()), Some(2));
        // One process's windows are one run; beside another run of several traces, the runs are split.
        let windows = Separate::Windows { files: vec![0, 1], host: "h".into(), pid: 7 };
        let one = vec![Run { start: 5, files: vec![0, 1] }];
        assert!(groups(&Separated { why: windows.clone(), runs: one, untimed: vec![] }, 2).is_none());
        let two = vec![Run { start: 5, files: vec![0, 1] }, Run { start: 9, files: vec![2, 3] }];
        assert_eq!(groups(&Separated { why: windows, runs: two, untimed: vec![] }, 4).map(|g| g.len()), Some(2));
    }

    #[test]
    fn a_permutation_and_its_inverse() {
        let mut v = vec!['a', 'b', 'c', 'd', 'e'];
        let order = [3, 0, 4, 1, 2];
        permute(&mut v, &order);
        assert_eq!(v, vec!['d', 'a', 'e', 'b', 'c']);
        let mut back = [0; 5];
        for (i, &f) in order.iter().enumerate() {
            back[f] = i;
        }
        permute(&mut v, &back);
        assert_eq!(v, vec!['a', 'b', 'c', 'd', 'e']);
    }
}
