//! Whether traces given together are one job's: the rule every command over several traces applies (`report`
//! reports separate runs alone, `merge`, `stats` and the exports warn and do not align their clocks on
//! collectives, which would match those of unrelated runs).
//!
//! Ranks of one job run together: their spans overlap, give or take NTP's milliseconds between hosts and seconds of
//! start-up. Traces whose wall-clock spans lie more than [`APART_NS`] apart were taken at different times (two runs
//! of a program, perhaps given to compare them, which `diff` does). One process's windows in several files (`record
//! --every`'s `<name>-N.cuf`) are not ranks either, however close: the same pid on the same named host, at times
//! that do not overlap. Spans are read through REALTIME offsets alone, never a job clock's alignment. Traces
//! without wall-clock times cannot tell, and are taken as one job.

/// Traces further apart than this (a minute: far beyond NTP's error and a job's start-up) are separate runs.
pub const APART_NS: u64 = 60_000_000_000;

/// One process's span on the epoch, and where it came from.
#[derive(Debug, Clone)]
pub struct RunSpan<'a> {
    /// Index of its trace file among those given.
    pub file: usize,
    /// The host its trace names ("" when none: such processes are never taken as one process's windows).
    pub host: &'a str,
    pub pid: u32,
    /// First start and last end of what it recorded, on the epoch.
    pub start: u64,
    pub end: u64,
}

/// Why traces are not one job's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Separate {
    /// `files` (two or more, in time order) hold windows of one process.
    Windows { files: Vec<usize>, host: String, pid: u32 },
    /// File `first`'s span ended at `first_end`, and file `second`'s began at `second_start`, more than
    /// [`APART_NS`] later, with nothing in between.
    Apart { first: usize, second: usize, first_end: u64, second_start: u64 },
}

impl Separate {
    /// What the times say, naming the files (`files[i]`: file `i`'s name), without what a command does of it.
    pub fn describe(&self, files: &[&str]) -> String {
        let name = |i: usize| files.get(i).copied().unwrap_or("?");
        match self {
            Separate::Windows { files, host, pid } => {
                let mut names: Vec<String> = files.iter().take(6).map(|&i| name(i).to_string()).collect();
                if files.len() > 6 {
                    names.push(format!("{} more", files.len() - 6));
                }
                let last = names.pop().unwrap_or_default();
                let listed = if names.is_empty() { last } else { format!("{} and {last}", names.join(", ")) };
                format!("{listed} are windows of one process (pid {pid} on {host}), not ranks of one job")
            }
            Separate::Apart { first, second, first_end, second_start } => format!(
                "{} ran at {} and {} at {}, {} apart: not at the same time, so not ranks of one job",
                name(*first),
                super::wall_clock::utc(*first_end),
                name(*second),
                super::wall_clock::utc(*second_start),
                super::wall_clock::duration_words(second_start - first_end)
            ),
        }
    }
}

/// One run among traces given together: files whose spans lie within [`APART_NS`] of one another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Its first instant on the epoch.
    pub start: u64,
    /// Its files' indices, in order.
    pub files: Vec<usize>,
}

/// The runs among the files of `spans` (their processes' spans joined per file), in time order: a run goes on
/// while the next file starts within [`APART_NS`] of the furthest end so far. Files with no span are in none.
pub fn runs(spans: &[RunSpan]) -> Vec<Run> {
    let mut files: Vec<(u64, u64, usize)> = Vec::new();
    for s in spans {
        match files.iter_mut().find(|f| f.2 == s.file) {
            Some(f) => (f.0, f.1) = (f.0.min(s.start), f.1.max(s.end)),
            None => files.push((s.start, s.end, s.file)),
        }
    }
    files.sort_unstable();
    let mut out: Vec<Run> = Vec::new();
    let mut reach = 0u64; // the current run's furthest end
    for (start, end, file) in files {
        match out.last_mut() {
            Some(run) if start <= reach.saturating_add(APART_NS) => {
                run.files.push(file);
                reach = reach.max(end);
            }
            _ => {
                out.push(Run { start, files: vec![file] });
                reach = end;
            }
        }
    }
    for run in &mut out {
        run.files.sort_unstable();
    }
    out
}

/// The runs in a sentence, naming their files (`files[i]`: file `i`'s name), at most `most` of them: "The 7
/// traces are 5 runs: a.json, b.json at 2023-04-28 23:51:39 UTC; ..."; None when each run is one trace of two.
/// What a command does of them is its caller's to say.
/// `untimed`: the files given whose times do not say when they ran (in no run).
pub fn describe_runs(runs: &[Run], untimed: &[usize], files: &[&str], most: usize) -> Option<String> {
    let timed: usize = runs.iter().map(|r| r.files.len()).sum();
    if runs.len() < 2 || (runs.len() == 2 && timed == 2 && untimed.is_empty()) {
        return None;
    }
    let name = |i: &usize| files.get(*i).copied().unwrap_or("?");
    let mut listed: Vec<String> = runs
        .iter()
        .take(most)
        .map(|r| {
            // A run of a thousand ranks is named by its first few.
            let mut names: Vec<String> = r.files.iter().take(3).map(|f| name(f).to_string()).collect();
            if r.files.len() > 3 {
                names.push(format!("{} more", r.files.len() - 3));
            }
            format!("{} at {}", names.join(", "), super::wall_clock::utc(r.start))
        })
        .collect();
    if runs.len() > most {
        listed.push(format!("and {} more", runs.len() - most));
    }
    let traces = timed + untimed.len();
    let untimed = match untimed {
        [] => String::new(),
        [one] => format!(" and {}, which does not say when it ran", name(one)),
        many => format!(" and {} that do not say when they ran", many.len()),
    };
    Some(format!("The {traces} traces are {} runs{untimed}: {}", runs.len(), listed.join("; ")))
}

/// Traces that are not one job's: the first reason found, and the runs they make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Separated {
    pub why: Separate,
    pub runs: Vec<Run>,
    /// Files whose times do not say when they ran (in no run).
    pub untimed: Vec<usize>,
}

impl Separated {
    /// What the times say, and the runs the traces make where that tells more than the reason alone (traces
    /// apart in time; one process's windows are one run).
    pub fn describe(&self, files: &[&str]) -> String {
        let why = self.why.describe(files);
        let runs =
            describe_runs(&self.runs, &self.untimed, files, 6).filter(|_| matches!(self.why, Separate::Apart { .. }));
        runs.map_or(why.clone(), |runs| format!("{why}. {runs}"))
    }
}

/// Whether the processes of `spans` are of separate runs, and the first reason found.
pub fn separate(spans: &[RunSpan]) -> Option<Separate> {
    let mut order: Vec<&RunSpan> = spans.iter().collect();
    order.sort_unstable_by_key(|s| (s.start, s.end, s.file));
    let mut seen: rustc_hash::FxHashMap<(&str, u32), &RunSpan> = Default::default();
    for s in order.iter().filter(|s| !s.host.is_empty()) {
        if let Some(before) = seen.get(&(s.host, s.pid)) {
            if before.file != s.file && s.start >= before.end {
                let mut files: Vec<usize> = Vec::new();
                for w in order.iter().filter(|w| (w.host, w.pid) == (s.host, s.pid)) {
                    if !files.contains(&w.file) {
                        files.push(w.file);
                    }
                }
                return Some(Separate::Windows { files, host: s.host.to_string(), pid: s.pid });
            }
        }
        seen.insert((s.host, s.pid), s);
    }
    let mut reach = *order.first()?;
    for next in &order[1..] {
        if next.start > reach.end.saturating_add(APART_NS) {
            let (first, second) = (reach.file, next.file);
            return Some(Separate::Apart { first, second, first_end: reach.end, second_start: next.start });
        }
        if next.end > reach.end {
            reach = next;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(file: usize, host: &str, pid: u32, start_s: u64, end_s: u64) -> RunSpan<'_> {
        RunSpan { file, host, pid, start: start_s * 1_000_000_000, end: end_s * 1_000_000_000 }
    }

    #[test]
    fn ranks_that_overlap_or_start_within_a_minute_are_one_job() {
        let ranks = [span(0, "a", 1, 100, 200), span(1, "b", 1, 150, 260), span(2, "c", 7, 300, 400)];
        assert_eq!(separate(&ranks), None);
        // The same pid on two hosts is two processes.
        assert_eq!(separate(&[span(0, "a", 1, 0, 10), span(1, "b", 1, 20, 30)]), None);
        // A trace that names no host is never taken as another's window.
        assert_eq!(separate(&[span(0, "", 1, 0, 10), span(1, "", 1, 20, 30)]), None);
        assert_eq!(separate(&[]), None);
    }

    #[test]
    fn a_gap_of_over_a_minute_after_everything_before_it_separates_runs() {
        // File 1 reaches past file 2's start: the gap is counted from the furthest end.
        let spans =
            [span(0, "a", 1, 0, 10), span(1, "b", 2, 5, 500), span(2, "c", 3, 520, 530), span(3, "d", 4, 700, 710)];
        let s = separate(&spans).unwrap();
        assert_eq!(
            s,
            Separate::Apart { first: 2, second: 3, first_end: 530_000_000_000, second_start: 700_000_000_000 }
        );
        let said = s.describe(&["w", "x", "y.cuf", "z.cuf"]);
        assert!(
            said.starts_with("y.cuf ran at 1970-01-01 00:08:50 UTC and z.cuf at 1970-01-01 00:11:40 UTC, 2 min apart"),
            "{said}"
        );
    }

    #[test]
    fn traces_group_into_runs_by_time_and_are_named_when_it_tells_more_than_the_pair() {
        // Files 0 and 2 ran together (file 0's two processes joined), file 1 a day later, file 3 with no span.
        let day = 86_400;
        let spans = [
            span(0, "a", 1, 100, 200),
            span(0, "a", 2, 150, 400),
            span(1, "b", 3, day, day + 10),
            span(2, "c", 4, 430, 500),
        ];
        let r = runs(&spans);
        assert_eq!(
            r,
            vec![Run { start: 100_000_000_000, files: vec![0, 2] }, Run { start: day * 1_000_000_000, files: vec![1] }]
        );
        let names = ["r0.json", "other.json", "r1.json", "x.sqlite"];
        let said = describe_runs(&r, &[3], &names, 6).unwrap();
        assert_eq!(
            said,
            "The 4 traces are 2 runs and x.sqlite, which does not say when it ran: r0.json, r1.json at 1970-01-01 \
             00:01:40 UTC; other.json at 1970-01-02 00:00:00 UTC"
        );
        assert!(describe_runs(&r, &[], &names, 1).unwrap().ends_with("; and 1 more"));
        let big = [Run { start: 0, files: (0..1000).collect() }, Run { start: 1, files: vec![1000] }];
        let many: Vec<String> = (0..=1000).map(|i| format!("r{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let said = describe_runs(&big, &[], &many, 6).unwrap();
        assert!(said.starts_with("The 1001 traces are 2 runs: r0, r1, r2, 997 more at "), "{said}");
        // Two traces, two runs: the pair's own sentence says it all.
        assert_eq!(describe_runs(&runs(&spans[2..]), &[], &names, 6), None);
    }

    #[test]
    fn one_processes_windows_in_two_files_are_not_ranks() {
        let spans =
            [span(2, "h", 42, 30, 40), span(0, "h", 42, 0, 10), span(1, "h", 42, 12, 20), span(3, "g", 7, 0, 9)];
        let s = separate(&spans).unwrap();
        assert_eq!(s, Separate::Windows { files: vec![0, 1, 2], host: "h".into(), pid: 42 });
        let said = s.describe(&["a-1.cuf", "a-2.cuf", "a-3.cuf", "b.cuf"]);
        assert!(said.starts_with("a-1.cuf, a-2.cuf and a-3.cuf are windows of one process (pid 42 on h)"), "{said}");
        let many = Separate::Windows { files: (0..9).collect(), host: "h".into(), pid: 1 };
        let names: Vec<String> = (0..9).map(|i| format!("w{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(
            many.describe(&names).starts_with("w0, w1, w2, w3, w4, w5 and 3 more are windows"),
            "{}",
            many.describe(&names)
        );
        // Two processes of one file, or overlapping (a pid reused at once cannot be), are not windows.
        assert_eq!(separate(&[span(0, "h", 42, 0, 10), span(0, "h", 42, 12, 20)]), None);
        assert_eq!(separate(&[span(0, "h", 42, 0, 10), span(1, "h", 42, 5, 20)]), None);
    }
}
