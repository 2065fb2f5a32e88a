//! Which part of a timeline a command keeps, as nsys's `--filter-nvtx` and `--filter-time` choose it: the
//! instances of an NVTX range (or an imported annotation: torch.profiler's `ProfilerStep#5`), or a stretch of the
//! timeline counted from its first drawn event (the report's `+s` times). `stats` summarises what started inside
//! them (`cuflight_analysis::stats::filter`); `export` draws what overlaps them ([`crate::model::cut`]).

use crate::model::ranges::Pairer;
use crate::model::source::EventSource;
use crate::model::timeline::drawn;
use crate::model::trace::TraceError;
use crate::model::windows::Windows;
use cuflight_format::EventKind;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// Which part of the trace.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// The instances of the range with this name, or of every range whose name starts as a name ending in `*`
    /// does (every one, or the Nth, from 1, in start order).
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

    /// The stretches of `source`'s timeline the filter keeps (one pass). An NVTX name that matches no range (the
    /// error names up to [`ALIKE_SHOWN`] that look like it), an instance past the last, or a stretch that starts
    /// after the timeline ends is an error.
    pub fn windows(&self, source: &mut EventSource) -> Result<Windows, FilterError> {
        let mut origin: Option<u64> = None;
        let mut last = 0u64;
        let mut found: Vec<(u64, u64)> = Vec::new();
        let mut alike: BTreeSet<String> = BTreeSet::new();
        let stem = match self {
            Filter::Nvtx { name, .. } => name.trim_end_matches(|c: char| c.is_ascii_digit() || "#*".contains(c)),
            Filter::Time { .. } => "",
        };
        let mut pairers: FxHashMap<u32, Pairer> = FxHashMap::default();
        source.for_each(|key, p, e| {
            if drawn(e) {
                origin.get_or_insert(e.start);
                last = last.max(e.end).max(e.start);
            }
            if !matches!(self, Filter::Nvtx { .. }) {
                return;
            }
            let range = match e.kind() {
                Some(EventKind::Range) => Some((e.name, e.start, e.end)),
                _ => pairers.entry(key).or_default().feed(e).map(|r| (r.name, r.start, r.end)),
            };
            if let Some((id, start, end)) = range {
                let text = p.string(id);
                if self.names(text) {
                    found.push((start, end));
                } else if alike.len() < ALIKE_KEPT && looks_like(text, stem) && !alike.contains(text) {
                    alike.insert(text.to_string());
                }
            }
        })?;
        let spans = match self {
            Filter::Time { from_ns, to_ns } => {
                let origin = origin.unwrap_or(0);
                if origin.saturating_add(*from_ns) > last {
                    return Err(FilterError::PastTheEnd {
                        from_s: *from_ns as f64 / 1e9,
                        length_s: (last - origin) as f64 / 1e9,
                    });
                }
                vec![(origin.saturating_add(*from_ns), origin.saturating_add(*to_ns))]
            }
            Filter::Nvtx { name, instance } => {
                found.sort_unstable();
                match instance {
                    None if found.is_empty() => {
                        let shown: Vec<String> = alike.into_iter().take(ALIKE_SHOWN).collect();
                        let alike =
                            if shown.is_empty() { String::new() } else { format!("; like it: {}", shown.join(", ")) };
                        return Err(FilterError::NoRange(name.clone(), alike));
                    }
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

impl Filter {
    /// Whether an NVTX filter takes ranges named `text`: its name, or what starts as a name ending in `*` does
    /// (`ProfilerStep#*`: every step).
    pub fn names(&self, text: &str) -> bool {
        match self {
            Filter::Nvtx { name, .. } => match name.strip_suffix('*') {
                Some(prefix) => text.starts_with(prefix),
                None => text == name,
            },
            Filter::Time { .. } => false,
        }
    }
}

/// Names like a missing one, named in its error: at most this many.
pub const ALIKE_SHOWN: usize = 5;
/// Kept while looking (the first in name order are shown).
const ALIKE_KEPT: usize = 1000;

/// Whether range name `text` starts as `stem` does (a missing name without its trailing number), in any case:
/// `ProfilerStep#3` when the trace holds `ProfilerStep#550` to `#554`.
fn looks_like(text: &str, stem: &str) -> bool {
    !stem.is_empty() && text.len() >= stem.len() && text.as_bytes()[..stem.len()].eq_ignore_ascii_case(stem.as_bytes())
}

impl Filter {
    /// A short name for what the filter keeps, for default output names: `ProfilerStep_5`, `forward-2`,
    /// `1.5s-2.5s` (a name's characters other than letters, digits, `-` and `_` become `_`).
    pub fn tag(&self) -> String {
        match self {
            Filter::Nvtx { name, instance } => {
                let safe = |c: char| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' };
                let name: String = name.chars().map(safe).take(64).collect();
                match instance {
                    Some(n) => format!("{name}-{n}"),
                    None => name,
                }
            }
            Filter::Time { from_ns, to_ns } => format!("{}s-{}s", *from_ns as f64 / 1e9, *to_ns as f64 / 1e9),
        }
    }

    /// What `windows` (this filter's) hold, for a line on standard error: "instance 3 of 'step' (12.500 ms)".
    pub fn kept(&self, windows: &Windows) -> String {
        let ms = windows.covered_ns() as f64 / 1e6;
        let n = windows.spans.len();
        match self {
            Filter::Nvtx { name, instance: Some(i) } => format!("instance {i} of '{name}' ({ms:.3} ms)"),
            Filter::Nvtx { name, .. } if n == 1 => format!("'{name}' (1 stretch, {ms:.3} ms)"),
            Filter::Nvtx { name, .. } => format!("'{name}' ({n} stretches, {ms:.3} ms)"),
            Filter::Time { from_ns, to_ns } => {
                format!("+{:.3} s to +{:.3} s of the timeline ({ms:.3} ms)", *from_ns as f64 / 1e9, *to_ns as f64 / 1e9)
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("no NVTX range or annotation named '{0}' in the trace{1} (`cuflight stats --report nvtx_sum` lists them)")]
    NoRange(String, String),
    #[error("the timeline is {length_s:.3} s long: nothing starts {from_s:.3} s or more after its start")]
    PastTheEnd { from_s: f64, length_s: f64 },
    #[error("'{0}' has no instance {1}: the trace holds {2}")]
    NoInstance(String, u32, usize),
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
        let steps = Filter::parse_nvtx("ProfilerStep#*").unwrap();
        assert!(steps.names("ProfilerStep#12") && !steps.names("ProfilerStep") && !steps.names("optimizer"));
        assert!(
            Filter::parse_nvtx("step").unwrap().names("step") && !Filter::parse_nvtx("step").unwrap().names("steps")
        );
        assert!(looks_like("ProfilerStep#550", "profilerstep") && !looks_like("Profiler", "profilerstep"));
        assert_eq!(Filter::parse_nvtx("ProfilerStep#5").unwrap().tag(), "ProfilerStep_5");
        assert_eq!(Filter::parse_nvtx("forward/2").unwrap().tag(), "forward-2");
        assert_eq!(Filter::parse_nvtx("../a b").unwrap().tag(), "___a_b", "never a path");
        assert_eq!(Filter::parse_time("1.5/2500ms").unwrap().tag(), "1.5s-2.5s");
    }
}
