//! What part of a trace `stats` summarises, as nsys's `--filter-nvtx` and `--filter-time` choose it: the events
//! that start inside the instances of an NVTX range (or an imported annotation: torch.profiler's `ProfilerStep#5`),
//! or inside a stretch of the timeline. Device work counts where the call that launched it started (the kernels
//! a `forward` range launched are its kernels, though the GPU runs them after the range has closed on the host);
//! work whose launch is not in the trace, by its own start. Facts that are not timed events (devices, names,
//! clocks) always pass.

use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::launches::LaunchJoin;
use cuflight_trace::model::ranges::Pairer;
use cuflight_trace::model::source::EventSource;
use cuflight_trace::model::timeline::drawn;
use cuflight_trace::model::trace::{Process, TraceError};
use rustc_hash::FxHashMap;

/// Which part of the trace.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// The instances of the range with this name (every one, or the Nth, from 1, in start order).
    Nvtx { name: String, instance: Option<u32> },
    /// From and to, in ns after the timeline's start (the report's `+s` times).
    Time { from_ns: u64, to_ns: u64 },
}

impl Filter {
    /// `NAME` or `NAME/N` (nsys's form: the Nth instance).
    pub fn parse_nvtx(text: &str) -> Result<Filter, String> {
        let (name, instance) = match text.rsplit_once('/') {
            Some((name, n)) if !name.is_empty() && n.parse::<u32>().is_ok_and(|n| n > 0) => (name, n.parse().ok()),
            _ => (text, None),
        };
        if name.is_empty() {
            return Err("an NVTX range name is needed (NAME or NAME/N, the Nth instance from 1)".into());
        }
        Ok(Filter::Nvtx { name: name.to_string(), instance })
    }

    /// `FROM/TO`: seconds after the timeline's start (a unit may follow each: ns, us, ms, s).
    pub fn parse_time(text: &str) -> Result<Filter, String> {
        let bad = || format!("'{text}': give FROM/TO after the timeline's start, e.g. 1.5/2.5 or 1500ms/2500ms");
        let (from, to) = text.split_once('/').ok_or_else(bad)?;
        let (from_ns, to_ns) = (seconds_ns(from).ok_or_else(bad)?, seconds_ns(to).ok_or_else(bad)?);
        if to_ns <= from_ns {
            return Err(format!("'{text}': the stretch ends before it starts"));
        }
        Ok(Filter::Time { from_ns, to_ns })
    }

    /// The stretches of `source`'s timeline the filter keeps (one pass for an NVTX filter). An NVTX name that
    /// matches no range, or an instance past the last, is an error naming how many there are.
    pub fn windows(&self, source: &mut EventSource) -> Result<Windows, FilterError> {
        let mut origin: Option<u64> = None;
        let mut found: Vec<(u64, u64)> = Vec::new();
        let mut pairers: FxHashMap<u32, Pairer> = FxHashMap::default();
        source.for_each(|key, p, e| {
            if origin.is_none() && drawn(e) {
                origin = Some(e.start);
            }
            let Filter::Nvtx { name, .. } = self else { return };
            let range = match e.kind() {
                Some(EventKind::Range) => Some((e.name, e.start, e.end)),
                _ => pairers.entry(key).or_default().feed(e).map(|r| (r.name, r.start, r.end)),
            };
            if let Some((id, start, end)) = range {
                if p.string(id) == name {
                    found.push((start, end));
                }
            }
        })?;
        let spans = match self {
            Filter::Time { from_ns, to_ns } => {
                let origin = origin.unwrap_or(0);
                vec![(origin.saturating_add(*from_ns), origin.saturating_add(*to_ns))]
            }
            Filter::Nvtx { name, instance } => {
                found.sort_unstable();
                match instance {
                    None if found.is_empty() => return Err(FilterError::NoRange(name.clone())),
                    None => found,
                    Some(n) => match found.get(*n as usize - 1) {
                        Some(&span) => vec![span],
                        None => return Err(FilterError::NoInstance(name.clone(), *n, found.len())),
                    },
                }
            }
        };
        Ok(Windows::new(spans))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("no NVTX range or annotation named '{0}' in the trace (`cuflight stats --report nvtx_sum` lists them)")]
    NoRange(String),
    #[error("'{0}' has no instance {1}: the trace holds {2}")]
    NoInstance(String, u32, usize),
}

/// The stretches kept: disjoint, in start order (instances that overlap are joined).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Windows {
    pub spans: Vec<(u64, u64)>,
}

impl Windows {
    pub fn new(mut spans: Vec<(u64, u64)>) -> Windows {
        spans.sort_unstable();
        let mut joined: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for (s, e) in spans {
            match joined.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => joined.push((s, e.max(s))),
            }
        }
        Windows { spans: joined }
    }

    /// Whether `e` is summarised by its own time: facts always; a timed event when it starts inside a stretch
    /// (ends included).
    pub fn keeps(&self, e: &RawEvent) -> bool {
        !drawn(e) || self.holds(e.start)
    }

    /// Whether time `t` lies inside a stretch (ends included).
    pub fn holds(&self, t: u64) -> bool {
        let i = self.spans.partition_point(|s| s.0 <= t);
        i > 0 && t <= self.spans[i - 1].1
    }

    /// The time they cover, ns.
    pub fn covered_ns(&self) -> u64 {
        self.spans.iter().map(|(s, e)| e - s).sum()
    }
}

/// [`Windows`] over a pass in time order: device work by its launching call's start.
pub struct Kept<'w> {
    windows: &'w Windows,
    joins: FxHashMap<u32, LaunchJoin>,
}

impl<'w> Kept<'w> {
    pub fn new(windows: &'w Windows) -> Kept<'w> {
        Kept { windows, joins: FxHashMap::default() }
    }

    /// Whether event `e` of process `key` is summarised.
    pub fn keeps(&mut self, key: u32, p: &Process, e: &RawEvent) -> bool {
        match e.kind() {
            Some(EventKind::Api) => {
                self.joins.entry(key).or_default().api(p, e);
                self.windows.holds(e.start)
            }
            Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset) => {
                let launched = self.joins.entry(key).or_default().work(e).map_or(e.start, |j| j.call.start);
                self.windows.holds(launched)
            }
            _ => self.windows.keeps(e),
        }
    }
}

/// `1.5`, `1.5s`, `1500ms`, `1500000us`, `1500000000ns`: ns.
fn seconds_ns(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.trim().parse().ok()?;
    let scale = match unit {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        _ => return None,
    };
    let ns = value * scale;
    (ns.is_finite() && ns >= 0.0 && ns < u64::MAX as f64).then_some(ns as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_read_as_nsys_and_the_report_write_them() {
        assert_eq!(
            Filter::parse_nvtx("ProfilerStep#5").unwrap(),
            Filter::Nvtx { name: "ProfilerStep#5".into(), instance: None }
        );
        assert_eq!(Filter::parse_nvtx("step/3").unwrap(), Filter::Nvtx { name: "step".into(), instance: Some(3) });
        assert_eq!(Filter::parse_nvtx("a/b").unwrap(), Filter::Nvtx { name: "a/b".into(), instance: None });
        assert!(Filter::parse_nvtx("").is_err());
        assert_eq!(
            Filter::parse_time("1.5/2500ms").unwrap(),
            Filter::Time { from_ns: 1_500_000_000, to_ns: 2_500_000_000 }
        );
        assert!(Filter::parse_time("2/1").is_err() && Filter::parse_time("1").is_err());
        assert!(Filter::parse_time("1x/2").is_err() && Filter::parse_time("-1/2").is_err());
    }

    /// An event is kept when it starts inside a stretch, the ends included; facts always.
    #[test]
    fn events_starting_inside_a_stretch_are_kept() {
        let w = Windows::new(vec![(300, 400), (100, 200), (150, 160)]);
        assert_eq!(w.spans, [(100, 200), (300, 400)], "joined where they overlap");
        let at = |t| RawEvent::new(EventKind::Kernel, 0, t, t + 1000);
        let kept: Vec<u64> = [50, 100, 170, 200, 250, 300, 400, 401].into_iter().filter(|&t| w.keeps(&at(t))).collect();
        assert_eq!(kept, [100, 170, 200, 300, 400]);
        assert!(w.keeps(&RawEvent::new(EventKind::Device, 0, 0, 0)), "facts pass");
        assert_eq!(w.covered_ns(), 200);
    }

    /// A kernel counts where its launch started: inside the stretch though it ran after, outside though it ran
    /// inside; work whose launch is not in the trace, by its own start.
    #[test]
    fn device_work_counts_where_it_was_launched() {
        let mut p = Process::default();
        p.strings.insert(1, "cudaLaunchKernel".into());
        let w = Windows::new(vec![(100, 200)]);
        let mut kept = Kept::new(&w);
        let call = |t, corr| RawEvent { name: 1, correlation: corr, ..RawEvent::new(EventKind::Api, 7, t, t + 5) };
        let kernel = |t, corr| RawEvent { correlation: corr, ..RawEvent::new(EventKind::Kernel, 0, t, t + 50) };
        let mut keeps = |e: RawEvent| kept.keeps(3, &p, &e);
        assert!(!keeps(call(50, 1)) && keeps(call(150, 2)));
        assert!(!keeps(kernel(160, 1)), "launched before the stretch");
        assert!(keeps(kernel(300, 2)), "launched inside, run after");
        assert!(keeps(kernel(120, 9)) && !keeps(kernel(250, 9)), "no launch: its own start");
    }
}
