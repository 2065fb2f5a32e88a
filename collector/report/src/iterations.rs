//! A serving engine's iterations told apart: prefill, decode and mixed batches (from the names the engine gives
//! its iteration ranges, [`super::step_kinds`]), or, where it names none, steps that replay a CUDA graph
//! against steps that run eagerly; the GPU time and idle of each kind, and what each annotated request took.
//!
//! The iterations are the report's steps (an iteration name is step-like), after the warm-up is left out; each
//! kind's rows sum their steps' TensorBoard breakdown ([`super::steps`]): GPU busy is kernel, memcpy and memset
//! time, idle the rest of the window.

use super::findings::{ms, percent};
use super::requests::Requests;
use super::spans::Span;
pub use super::step_kinds::ToldBy;
use super::step_kinds::{self, Launched};
use super::steps::StepRow;
use serde::Serialize;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Iterations {
    /// How iterations were told apart: "names" (the engine's own names) or "launches" (whether a step replays a CUDA
    /// graph).
    pub told_by: ToldBy,
    /// One row per kind, most iterations first.
    pub kinds: Vec<KindRow>,
    /// Request latencies, where the program marked its requests with ranges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestStats>,
    /// What the report could not attribute, in words (engine's names missing, requests not annotated...).
    pub not_attributed: Vec<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct KindRow {
    /// "prefill", "decode", "mixed", "other" (names); "graph replay", "graph replay + eager", "eager", "no
    /// kernels" (launches: whether the step replays a CUDA graph, launches kernels one by one, or both).
    pub kind: String,
    /// Iterations of the kind.
    pub count: u64,
    /// Their durations, summed.
    pub time_ns: u64,
    /// The median iteration's duration.
    pub p50_ns: u64,
    /// The 99th percentile of their durations.
    pub p99_ns: u64,
    /// Kernel, memcpy and memset time in the kind's windows, and the rest of them.
    pub gpu_busy_ns: u64,
    /// The rest of their windows: no GPU work.
    pub idle_ns: u64,
    /// Kernels that started in them.
    pub kernels: u64,
    /// CUDA graph replays that started in them.
    pub graph_replays: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RequestStats {
    /// What the ranges are called ("request").
    pub name: String,
    /// Requests whose range ended in the trace (the ones below describe), and those still open at its end.
    pub ended: u64,
    /// Requests whose range was still open when the trace ended.
    pub open_at_end: u64,
    /// The median request's latency (its range's duration).
    pub latency_p50_ns: u64,
    /// The 99th percentile of request latency.
    pub latency_p99_ns: u64,
    /// Of the analysed iterations: how many each request was in flight for (median), and their kernels.
    pub iterations_p50: u64,
    /// Kernels that started in those iterations, for the median request.
    pub kernels_p50: u64,
    /// Each iteration's GPU busy time split evenly among the requests in flight in it, summed per request (mean).
    pub gpu_share_mean_ns: u64,
    /// Ended requests that overlap no analysed iteration (in the warm-up, or between iterations).
    pub outside_iterations: u64,
}

/// The kind of each step, by name or by launches ([`step_kinds::kinds`]).
fn kinds_of(rows: &[StepRow]) -> Option<(ToldBy, Vec<&'static str>)> {
    let launched: Vec<Launched> =
        rows.iter().map(|r| Launched { graph_replays: r.graph_replays, eager_kernels: r.eager_kernels }).collect();
    step_kinds::kinds(rows.iter().map(|r| r.name.as_str()), Some(&launched))
}

/// The kind of each step for a series kept across windows (serve's step histogram), where a window may hold one
/// kind only: the engine's names where it names its iterations; else, where any step replays a CUDA graph, what
/// each launched ("graph replay", "eager", ...); else "step" (a training loop).
pub fn kind_of_each(rows: &[StepRow]) -> Vec<&'static str> {
    match kinds_of(rows) {
        Some((ToldBy::Names, labels)) => labels,
        _ if rows.iter().any(|r| r.graph_replays > 0) => rows
            .iter()
            .map(|r| Launched { graph_replays: r.graph_replays, eager_kernels: r.eager_kernels }.label())
            .collect(),
        _ => vec!["step"; rows.len()],
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn busy(r: &StepRow) -> u64 {
    r.kernel_ns + r.memcpy_ns + r.memset_ns
}

/// The iterations of one process's analysed steps (`rows`, in time order, on `windows`), with its requests.
pub fn summarize(rows: &[StepRow], windows: &[Span], requests: &Requests) -> Option<Iterations> {
    let kinds = kinds_of(rows);
    let annotated = !requests.ended.is_empty() || requests.open_at_end > 0;
    if kinds.is_none() && !annotated {
        return None;
    }
    let mut not_attributed = Vec::new();
    let (told_by, rows_by_kind) = match &kinds {
        Some((told_by, labels)) => {
            let mut order: Vec<&str> = Vec::new();
            for &l in labels {
                if !order.contains(&l) {
                    order.push(l);
                }
            }
            let mut out: Vec<KindRow> = order.iter().map(|k| kind_row(k, rows, labels)).collect();
            out.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(&b.kind)));
            (*told_by, out)
        }
        None => (ToldBy::Launches, Vec::new()),
    };
    if kinds.is_none() {
        not_attributed.push(
            "iterations are not told apart: the engine names none, and its steps do not split into CUDA graph \
             replays and eager ones"
                .to_string(),
        );
    } else if told_by == ToldBy::Launches {
        not_attributed.push(
            "the engine names no iterations (NVTX or annotation ranges \"prefill\", \"decode\", \"mixed\"; vLLM's \
             execute_context_N_generation_M; SGLang's step[EXTEND|DECODE|MIXED]), so iterations are told apart only \
             by what they launch: where an engine graphs its decode and runs prefill eagerly, \"graph replay\" is \
             decode, \"eager\" prefill and both a mixed batch, but an engine that runs eager work beside its \
             decode graphs (sampling) or graphs its prefill makes them look alike"
                .to_string(),
        );
    }
    let requests_row = if annotated {
        Some(request_stats(rows, windows, requests))
    } else {
        not_attributed.push(
            "requests are not annotated (no range named \"request\" from admission to last token), so latency and \
             kernels per request cannot be attributed"
                .to_string(),
        );
        None
    };
    if annotated && requests.begun_before > 0 {
        not_attributed.push(format!(
            "{} start/end ranges ended in the trace that began before it (requests admitted before the capture \
             among them): their latency is not known, and iterations before the capture are not counted for them",
            requests.begun_before
        ));
    }
    if requests.not_kept > 0 {
        not_attributed.push(format!(
            "{} requests past the first {} were not kept",
            requests.not_kept,
            requests.ended.len()
        ));
    }
    Some(Iterations { told_by, kinds: rows_by_kind, requests: requests_row, not_attributed })
}

fn kind_row(kind: &str, rows: &[StepRow], labels: &[&str]) -> KindRow {
    let mine: Vec<&StepRow> = rows.iter().zip(labels).filter(|(_, l)| **l == kind).map(|(r, _)| r).collect();
    let mut durations: Vec<u64> = mine.iter().map(|r| r.duration_ns).collect();
    durations.sort_unstable();
    let time_ns = durations.iter().sum();
    let gpu_busy_ns = mine.iter().map(|r| busy(r)).sum::<u64>();
    KindRow {
        kind: kind.to_string(),
        count: mine.len() as u64,
        time_ns,
        p50_ns: percentile(&durations, 0.5),
        p99_ns: percentile(&durations, 0.99),
        gpu_busy_ns,
        idle_ns: time_ns - gpu_busy_ns.min(time_ns),
        kernels: mine.iter().map(|r| r.kernels).sum(),
        graph_replays: mine.iter().map(|r| r.graph_replays).sum(),
    }
}

/// The windows a request (start, end) overlaps: windows are in time order and do not overlap, so their ends are
/// ordered too.
fn overlapped(windows: &[Span], (s, e): Span) -> std::ops::Range<usize> {
    let first = windows.partition_point(|w| w.1 <= s);
    let last = first + windows[first..].partition_point(|w| w.0 < e);
    first..last
}

fn request_stats(rows: &[StepRow], windows: &[Span], requests: &Requests) -> RequestStats {
    let windows = &windows[..windows.len().min(rows.len())];
    // Requests in flight in each window: the ended ones and those still open at the trace's end.
    let mut in_flight = vec![0u64; windows.len()];
    let open = requests.open_starts.iter().map(|&s| (s, u64::MAX));
    for r in requests.ended.iter().copied().chain(open) {
        for k in overlapped(windows, r) {
            in_flight[k] += 1;
        }
    }
    let (mut latency, mut iterations, mut kernels) = (Vec::new(), Vec::new(), Vec::new());
    let (mut share_sum, mut outside) = (0u128, 0u64);
    for &(s, e) in &requests.ended {
        latency.push(e - s);
        let ks = overlapped(windows, (s, e));
        if ks.is_empty() {
            outside += 1;
            continue;
        }
        iterations.push(ks.len() as u64);
        kernels.push(ks.clone().map(|k| rows[k].kernels).sum());
        share_sum += ks.map(|k| u128::from(busy(&rows[k]) / in_flight[k].max(1))).sum::<u128>();
    }
    for v in [&mut latency, &mut iterations, &mut kernels] {
        v.sort_unstable();
    }
    let counted = iterations.len().max(1) as u128;
    RequestStats {
        name: requests.name.clone().unwrap_or_else(|| "request".into()),
        ended: requests.ended.len() as u64,
        open_at_end: requests.open_at_end,
        latency_p50_ns: percentile(&latency, 0.5),
        latency_p99_ns: percentile(&latency, 0.99),
        iterations_p50: percentile(&iterations, 0.5),
        kernels_p50: percentile(&kernels, 0.5),
        gpu_share_mean_ns: u64::try_from(share_sum / counted).unwrap_or(u64::MAX),
        outside_iterations: outside,
    }
}

/// The columns of the kinds' table, text and HTML alike.
pub const HEADERS: &[&str] =
    &["Kind", "Count", "Time (ms)", "p50 (ms)", "p99 (ms)", "GPU busy", "Idle", "Kernels/iter", "Replays/iter"];

impl Iterations {
    pub fn title(&self) -> String {
        let by = match self.told_by {
            ToldBy::Names => "by the names the engine gives them",
            ToldBy::Launches => "by what they launch (CUDA graph replays, eager kernels)",
        };
        format!("Iterations, told apart {by}")
    }

    /// One row of [`HEADERS`] per kind.
    pub fn rows(&self) -> Vec<Vec<String>> {
        let pct = |part: u64, whole: u64| percent(part, whole).map_or("-".into(), |p| format!("{p:.1}%"));
        self.kinds
            .iter()
            .map(|k| {
                let per = |v: u64| format!("{:.1}", v as f64 / k.count.max(1) as f64);
                vec![
                    k.kind.clone(),
                    k.count.to_string(),
                    format!("{:.3}", k.time_ns as f64 / 1e6),
                    format!("{:.3}", k.p50_ns as f64 / 1e6),
                    format!("{:.3}", k.p99_ns as f64 / 1e6),
                    pct(k.gpu_busy_ns, k.time_ns),
                    pct(k.idle_ns, k.time_ns),
                    per(k.kernels),
                    per(k.graph_replays),
                ]
            })
            .collect()
    }

    /// What the annotated requests took, in one line (None without request ranges).
    pub fn requests_line(&self) -> Option<String> {
        let r = self.requests.as_ref()?;
        let open =
            if r.open_at_end > 0 { format!(" ({} still open at the end)", r.open_at_end) } else { String::new() };
        let outside = if r.outside_iterations > 0 {
            format!("; {} in no analysed iteration", r.outside_iterations)
        } else {
            String::new()
        };
        Some(format!(
            "Requests (ranges \"{}\"): {} ended{open}: latency p50 {}, p99 {}; each in flight for {} iterations and \
             {} kernels (p50), {} of GPU time (mean; each iteration's busy time split among the requests in it){outside}",
            r.name,
            r.ended,
            ms(r.latency_p50_ns),
            ms(r.latency_p99_ns),
            r.iterations_p50,
            r.kernels_p50,
            ms(r.gpu_share_mean_ns),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, start: u64, duration: u64, kernel: u64, kernels: u64, replays: u64, eager: u64) -> StepRow {
        StepRow {
            name: name.into(),
            start_ns: start,
            duration_ns: duration,
            kernel_ns: kernel,
            memcpy_ns: 0,
            memset_ns: 0,
            runtime_ns: 0,
            dataloader_ns: 0,
            cpu_exec_ns: 0,
            other_ns: duration - kernel,
            gpu_utilization: kernel as f64 / duration as f64,
            kernels,
            eager_kernels: eager,
            graph_replays: replays,
            counters: None,
        }
    }

    #[test]
    fn requests_share_the_gpu_time_of_the_iterations_they_were_in() {
        // Iterations of 100 ns, 60 busy: a prefill, then decodes; request A in iterations 0-2, B in 1-3.
        let rows = vec![
            row("prefill", 0, 100, 60, 8, 0, 8),
            row("decode", 100, 100, 60, 6, 1, 0),
            row("decode", 200, 100, 60, 6, 1, 0),
            row("decode", 300, 100, 60, 6, 1, 0),
        ];
        let windows: Vec<Span> = rows.iter().map(|r| (r.start_ns, r.start_ns + r.duration_ns)).collect();
        let requests =
            Requests { ended: vec![(10, 290), (110, 390)], name: Some("request".into()), ..Default::default() };
        let it = summarize(&rows, &windows, &requests).unwrap();
        assert_eq!(it.told_by, ToldBy::Names);
        let decode = &it.kinds[0];
        assert_eq!((decode.kind.as_str(), decode.count, decode.kernels, decode.graph_replays), ("decode", 3, 18, 3));
        assert_eq!((decode.gpu_busy_ns, decode.idle_ns, decode.p50_ns), (180, 120, 100));
        let q = it.requests.unwrap();
        assert_eq!((q.ended, q.iterations_p50, q.kernels_p50, q.latency_p50_ns), (2, 3, 18, 280));
        // A: 60 alone + 30 + 30 (shared with B) = 120; B: 30 + 30 + 60 = 120.
        assert_eq!(q.gpu_share_mean_ns, 120);
        assert!(it.not_attributed.is_empty());
    }

    #[test]
    fn steps_that_all_launch_alike_are_not_iterations() {
        let rows = vec![row("step", 0, 100, 60, 6, 1, 0), row("step", 100, 100, 60, 6, 1, 0)];
        let windows: Vec<Span> = vec![(0, 100), (100, 200)];
        assert!(summarize(&rows, &windows, &Requests::default()).is_none());
        // Eager steps beside replaying ones: told apart by their launches, and the gaps said.
        let rows = vec![row("step", 0, 100, 60, 6, 1, 0), row("step", 100, 100, 60, 8, 0, 8)];
        let it = summarize(&rows, &windows, &Requests::default()).unwrap();
        assert_eq!(it.told_by, ToldBy::Launches);
        assert_eq!(it.not_attributed.len(), 2, "{:?}", it.not_attributed);
    }

    /// Kinds kept across serve's windows: a window of decodes alone is still decodes (by name) or graph replays
    /// (unnamed), never relabelled "step"; a training loop's steps are "step".
    #[test]
    fn each_step_has_a_kind_that_holds_across_windows() {
        let named = [row("decode", 0, 100, 60, 6, 1, 0), row("decode", 100, 100, 60, 6, 1, 0)];
        assert_eq!(kind_of_each(&named), ["decode", "decode"]);
        let unnamed = [row("step", 0, 100, 60, 6, 1, 0), row("step", 100, 100, 60, 6, 1, 0)];
        assert_eq!(kind_of_each(&unnamed), ["graph replay", "graph replay"]);
        let mixed = [row("step", 0, 100, 60, 6, 1, 0), row("step", 100, 100, 60, 14, 1, 8)];
        assert_eq!(kind_of_each(&mixed), ["graph replay", "graph replay + eager"]);
        let training = [row("train_step", 0, 100, 60, 8, 0, 8), row("train_step", 100, 100, 60, 8, 0, 8)];
        assert_eq!(kind_of_each(&training), ["step", "step"]);
    }
}
