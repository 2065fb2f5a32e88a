//! Training steps: where they come from, the time window each one covers, and the per-step breakdown in the
//! manner of TensorBoard's profiler plugin.
//!
//! Steps come from, in order of preference: `--step NAME` (ranges named NAME or starting with it),
//! `ProfilerStep#N` annotations, NVTX ranges with a step-like name (`step`, `iteration`, `train_step`...), or
//! the repeating pattern of kernel launches. A step's **window** starts at its host start (or where the previous
//! window ended, if later) and ends at its host end or at the end of the last GPU op launched inside it,
//! whichever is later: the host usually runs ahead of the GPU, and a step's cost includes its GPU work.
//!
//! The **breakdown** gives each nanosecond of a window to one category, the first that applies: kernel,
//! memcpy, memset, CUDA runtime (any thread in a CUDA call), data loading (a DataLoader annotation), CPU exec
//! (inside any other host range or operator), other. GPU utilisation is the kernel-busy share of the window.

use super::spans::{clip, within, Span};
use super::timeline::{HostRange, Timeline};
use rustc_hash::FxHashMap;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    Option,
    ProfilerStep,
    Nvtx,
    Pattern,
    None,
}

#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    pub name: String,
    pub start_ns: u64,
    pub duration_ns: u64,
    pub kernel_ns: u64,
    pub memcpy_ns: u64,
    pub memset_ns: u64,
    pub runtime_ns: u64,
    pub dataloader_ns: u64,
    pub cpu_exec_ns: u64,
    pub other_ns: u64,
    pub gpu_utilization: f64,
}

pub struct Steps {
    pub source: StepSource,
    /// Host-side step ranges, sorted, not overlapping.
    pub host: Vec<HostRange>,
    /// Each step's window (see the module docs).
    pub windows: Vec<Span>,
    /// Display names.
    pub names: Vec<String>,
}

/// Keeps the outermost of nested or overlapping ranges, in time order.
fn top_level(mut v: Vec<HostRange>) -> Vec<HostRange> {
    v.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut out: Vec<HostRange> = Vec::new();
    for r in v {
        if out.last().is_none_or(|last| r.start >= last.end) {
            out.push(r);
        }
    }
    out
}

pub fn detect(tl: &Timeline, step_option: Option<&str>) -> Steps {
    let p = tl.p;
    let pick = |f: &dyn Fn(&str) -> bool| -> Vec<HostRange> {
        top_level(tl.ranges.iter().filter(|r| f(p.string(r.name))).copied().collect())
    };
    let (source, host) = if let Some(opt) = step_option {
        (StepSource::Option, pick(&|n| n.starts_with(opt)))
    } else {
        let profiler = pick(&|n| n.starts_with("ProfilerStep#"));
        if !profiler.is_empty() {
            (StepSource::ProfilerStep, profiler)
        } else {
            let nvtx = pick(&crate::model::names::step_like);
            if nvtx.len() >= 2 {
                (StepSource::Nvtx, nvtx)
            } else {
                let pattern = pattern_steps(tl);
                let source = if pattern.is_empty() { StepSource::None } else { StepSource::Pattern };
                (source, pattern)
            }
        }
    };
    let names = host
        .iter()
        .enumerate()
        .map(|(i, r)| if r.name == 0 { format!("step {i} (pattern)") } else { p.string(r.name).to_string() })
        .collect();
    let windows = windows(tl, &host);
    Steps { source, host, windows, names }
}

/// Step windows: host range extended to the end of the GPU work it launched, never overlapping the previous.
fn windows(tl: &Timeline, host: &[HostRange]) -> Vec<Span> {
    let mut gpu_end = vec![0u64; host.len()];
    for (&i, &(t, _)) in tl.ops.iter().zip(&tl.op_launch) {
        if t == u64::MAX {
            continue;
        }
        let op = tl.event(i);
        let k = host.partition_point(|r| r.start <= t);
        if k > 0 && t < host[k - 1].end {
            gpu_end[k - 1] = gpu_end[k - 1].max(op.end);
        }
    }
    let mut out: Vec<Span> = Vec::with_capacity(host.len());
    let mut prev_end = 0;
    for (r, g) in host.iter().zip(gpu_end) {
        let start = r.start.max(prev_end);
        let end = r.end.max(g).max(start);
        out.push((start, end));
        prev_end = end;
    }
    out
}

/// Steps from the repeating pattern of kernel launches: the smallest period P such that the launch sequence
/// repeats with period P (90% of positions match) and some kernel name recurs every P launches; the step
/// boundary is put before the launch that follows the longest host pause within the period.
fn pattern_steps(tl: &Timeline) -> Vec<HostRange> {
    let mut seq: Vec<(u64, u32)> = tl
        .ops
        .iter()
        .zip(&tl.op_launch)
        .map(|(&i, &(t, _))| (tl.event(i), t))
        .filter(|(e, _)| e.kind() == Some(cuflight_format::EventKind::Kernel))
        .map(|(e, t)| (if t == u64::MAX { e.start } else { t }, e.name))
        .collect();
    seq.sort_by_key(|x| x.0);
    let n = seq.len();
    if n < 6 {
        return vec![];
    }
    let mut positions: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
    for (i, &(_, name)) in seq.iter().enumerate() {
        positions.entry(name).or_default().push(i);
    }
    let mut periods: Vec<usize> = positions
        .values()
        .filter(|pos| pos.len() >= 3)
        .filter_map(|pos| {
            let mut gaps: FxHashMap<usize, usize> = FxHashMap::default();
            for w in pos.windows(2) {
                *gaps.entry(w[1] - w[0]).or_default() += 1;
            }
            let (&period, &count) = gaps.iter().max_by_key(|(g, c)| (**c, std::cmp::Reverse(**g)))?;
            (count * 5 >= (pos.len() - 1) * 4).then_some(period)
        })
        .collect();
    periods.sort_unstable();
    periods.dedup();
    // A step holds every kernel that recurs (3 times or more); this rules out periods that only repeat one
    // kernel among many (1000 identical tiny kernels per step make a period of 1 otherwise).
    let recurring = positions.values().filter(|pos| pos.len() >= 3).count();
    let periodic = |p: usize| {
        let matches = (0..n - p).filter(|&i| seq[i].1 == seq[i + p].1).count();
        let distinct: rustc_hash::FxHashSet<u32> = seq[..p.min(n)].iter().map(|x| x.1).collect();
        n >= 3 * p && matches * 10 >= (n - p) * 9 && distinct.len() * 10 >= recurring * 9
    };
    let Some(period) = periods.into_iter().find(|&p| periodic(p)) else { return vec![] };
    // The boundary: the in-period offset with the longest total pause before its launch.
    let offset = (0..period)
        .max_by_key(|&o| (o..n).step_by(period).filter(|&i| i > 0).map(|i| seq[i].0 - seq[i - 1].0).sum::<u64>())
        .unwrap_or(0);
    let starts: Vec<usize> = (offset..n).step_by(period).collect();
    let last_end = tl.ops.iter().map(|&i| tl.event(i).end).max().unwrap_or(0);
    starts
        .iter()
        .enumerate()
        .filter(|(_, &s)| s + period <= n)
        .map(|(k, &s)| {
            let end = starts.get(k + 1).map_or(last_end, |&next| seq[next].0);
            HostRange { start: seq[s].0, end, name: 0, tid: 0 }
        })
        .collect()
}

/// TensorBoard-style breakdown of one window.
pub fn breakdown(tl: &Timeline, name: &str, (s, e): Span) -> StepRow {
    let cats: [&[Span]; 6] = [&tl.kernel_busy, &tl.memcpy_busy, &tl.memset_busy, &tl.runtime_busy, &tl.loader, &tl.cpu];
    let mut bounds: Vec<(u64, usize, bool)> = Vec::new();
    for (c, u) in cats.iter().enumerate() {
        for (a, b) in clip(u, s, e) {
            bounds.push((a, c, true));
            bounds.push((b, c, false));
        }
    }
    bounds.sort_unstable_by_key(|b| (b.0, !b.2));
    let mut acc = [0u64; 7];
    let mut active = [0i32; 6];
    let mut t = s;
    for (at, c, open) in bounds {
        let top = active.iter().position(|&n| n > 0).unwrap_or(6);
        acc[top] += at - t;
        t = at;
        active[c] += if open { 1 } else { -1 };
    }
    acc[6] += e - t;
    let duration = e - s;
    StepRow {
        name: name.to_string(),
        start_ns: s,
        duration_ns: duration,
        kernel_ns: acc[0],
        memcpy_ns: acc[1],
        memset_ns: acc[2],
        runtime_ns: acc[3],
        dataloader_ns: acc[4],
        cpu_exec_ns: acc[5],
        other_ns: acc[6],
        gpu_utilization: if duration == 0 { 0.0 } else { within(&tl.kernel_busy, s, e) as f64 / duration as f64 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trace::Process;
    use cuflight_format::{EventKind, RawEvent};

    fn kernel(name: u32, start: u64, dur: u64, corr: u32) -> RawEvent {
        RawEvent { name, correlation: corr, ..RawEvent::new(EventKind::Kernel, 0, start, start + dur) }
    }

    #[test]
    fn pattern_steps_cut_at_the_longest_pause() {
        let mut p = Process::default();
        // Per step: a pause of 1000 (data), then kernels 1,2,3,2 launched 10 apart.
        let mut t = 0;
        let mut corr = 1;
        for _ in 0..5 {
            t += 1000;
            for name in [1, 2, 3, 2] {
                p.events.push(kernel(name, t + 5, 5, corr));
                let mut api = RawEvent::new(EventKind::Api, 7, t, t + 2);
                api.correlation = corr;
                p.events.push(api);
                corr += 1;
                t += 10;
            }
        }
        let tl = Timeline::new(&p);
        let steps = detect(&tl, None);
        assert_eq!(steps.source, StepSource::Pattern);
        assert_eq!(steps.host.len(), 5);
        assert_eq!(steps.host[0].start, 1000);
        assert_eq!(steps.host[1].start, 2040);
    }

    #[test]
    fn breakdown_gives_each_instant_to_the_first_category_that_applies() {
        let mut p = Process::default();
        p.events.push(kernel(1, 10, 20, 1)); // kernel 10..30
        let mut copy = RawEvent::new(EventKind::Memcpy, 0, 25, 40); // memcpy 30..40 beyond the kernel
        copy.correlation = 2;
        p.events.push(copy);
        p.events.push(RawEvent::new(EventKind::Api, 1, 0, 12)); // runtime 0..10 before the kernel
        let tl = Timeline::new(&p);
        let row = breakdown(&tl, "s", (0, 50));
        assert_eq!((row.kernel_ns, row.memcpy_ns, row.runtime_ns, row.other_ns), (20, 10, 10, 10));
        assert!((row.gpu_utilization - 0.4).abs() < 1e-9);
    }
}
