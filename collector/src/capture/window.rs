//! Which part of an attached process's stream a window keeps, when it is bounded by what the program does rather
//! than by the clock: `--capture-range cudaProfilerApi` (from `cudaProfilerStart` to `cudaProfilerStop`, as nsys
//! reads it), `--capture-range nvtx:NAME[@DOMAIN]` (the first NVTX range of that name) and `--steps N
//! [--skip-steps K]` (steps K+1..K+N, a step being a step-like NVTX range: `ProfilerStep#N`, `step`, `train_step`,
//! ... as the report finds them; torch.profiler's schedule calls these wait/warmup and active).
//!
//! The filter sees every drained batch before it is written. It finds the boundaries in the batch (host events
//! arrive within milliseconds), then keeps events that start inside the window: device records of work launched
//! before the window arrive late and are dropped by their start time. Facts that are not bound to a time (devices,
//! thread names, clock pairs, NVTX categories) are always kept.

use cuflight_format::segment::MappedSegment;
use cuflight_format::{EventKind, RawEvent};
use std::collections::HashMap;

/// What bounds the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Range {
    ProfilerApi,
    Nvtx { name: String, domain: Option<String> },
    Steps { skip: u32, count: u32 },
}

impl Range {
    /// `cudaProfilerApi` or `nvtx:NAME[@DOMAIN]`.
    pub fn parse(text: &str) -> Result<Range, String> {
        if text == "cudaProfilerApi" {
            return Ok(Range::ProfilerApi);
        }
        let Some(spec) = text.strip_prefix("nvtx:").filter(|s| !s.is_empty()) else {
            return Err(format!("'{text}': expected cudaProfilerApi or nvtx:NAME[@DOMAIN]"));
        };
        Ok(match spec.rsplit_once('@') {
            Some((name, domain)) if !name.is_empty() && !domain.is_empty() => {
                Range::Nvtx { name: name.into(), domain: Some(domain.into()) }
            }
            _ => Range::Nvtx { name: spec.into(), domain: None },
        })
    }
}

/// Where the window stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its start has not happened yet: nothing but timeless facts is kept.
    Waiting,
    /// Started at this time (CLOCK_MONOTONIC ns).
    Open(u64),
    /// Started and ended.
    Closed(u64, u64),
}

/// An NVTX range pushed and not yet popped: (name id, start, marks the window).
type Pushed = (u32, u64, bool);

pub struct Window {
    range: Range,
    pub phase: Phase,
    /// NVTX push stacks per (thread, domain).
    stacks: HashMap<(u32, u64), Vec<Pushed>>,
    /// Open start/end ranges by id: (name id, counted as a step).
    started: HashMap<u64, (u32, bool)>,
    /// Steps that started since the attach, and how many of the counted ones have ended.
    steps_started: u32,
    steps_ended: u32,
    /// Name ids already looked up (per process: ids are the segment's).
    names: HashMap<(u32, u32), String>,
    /// (pid, correlation) of the API calls kept: their device work is kept even past the window's end.
    launched: std::collections::HashSet<(u32, u32)>,
}

impl Window {
    pub fn new(range: Range) -> Window {
        Window {
            range,
            phase: Phase::Waiting,
            stacks: HashMap::new(),
            started: HashMap::new(),
            steps_started: 0,
            steps_ended: 0,
            names: HashMap::new(),
            launched: Default::default(),
        }
    }

    fn name(&mut self, seg: &MappedSegment, id: u32) -> &str {
        self.names.entry((seg.pid(), id)).or_insert_with(|| super::record::string_at(seg, id))
    }

    fn open(&mut self, at: u64) {
        if self.phase == Phase::Waiting {
            self.phase = Phase::Open(at);
        }
    }

    fn close(&mut self, at: u64) {
        if let Phase::Open(start) = self.phase {
            self.phase = Phase::Closed(start, at.max(start));
        }
    }

    /// Whether a range that starts now marks the window's start (and, for steps, whether it counts as one).
    fn range_starts(&mut self, seg: &MappedSegment, name: u32, domain: u64, at: u64, in_step: bool) -> bool {
        match self.range.clone() {
            Range::Nvtx { name: want, domain: want_domain } => {
                let matches = self.name(seg, name) == want
                    && want_domain.as_deref().is_none_or(|d| self.name(seg, domain as u32) == d);
                if matches && self.phase == Phase::Waiting {
                    self.open(at);
                    return true;
                }
                false
            }
            Range::Steps { skip, .. } => {
                if in_step || !crate::model::names::step_like(self.name(seg, name)) {
                    return false;
                }
                self.steps_started += 1;
                if self.steps_started == skip + 1 {
                    self.open(at);
                }
                self.steps_started > skip
            }
            Range::ProfilerApi => false,
        }
    }

    /// A range marked by [`Self::range_starts`] ended.
    fn range_ends(&mut self, at: u64) {
        match self.range {
            Range::Nvtx { .. } => self.close(at),
            Range::Steps { count, .. } => {
                self.steps_ended += 1;
                if self.steps_ended == count {
                    self.close(at);
                }
            }
            Range::ProfilerApi => {}
        }
    }

    /// Finds the window's boundaries in a batch drained from `seg` (events `from..`), then drops what lies
    /// outside the window.
    pub fn filter(&mut self, seg: &MappedSegment, events: &mut Vec<RawEvent>, from: usize) {
        for &e in &events[from..] {
            match e.kind() {
                Some(EventKind::Api) if self.range == Range::ProfilerApi => {
                    let name = self.name(seg, e.name);
                    if name.starts_with("cudaProfilerStart") || name.starts_with("cuProfilerStart") {
                        self.open(e.end);
                    } else if name.starts_with("cudaProfilerStop") || name.starts_with("cuProfilerStop") {
                        self.close(e.start);
                    }
                }
                Some(EventKind::NvtxPush) => {
                    let in_step = self.stacks.get(&(e.tid, e.c)).is_some_and(|s| s.iter().any(|r| r.2));
                    let marks = self.range_starts(seg, e.name, e.c, e.start, in_step);
                    self.stacks.entry((e.tid, e.c)).or_default().push((e.name, e.start, marks));
                }
                Some(EventKind::NvtxPop) => {
                    if let Some((_, _, true)) = self.stacks.get_mut(&(e.tid, e.c)).and_then(Vec::pop) {
                        self.range_ends(e.start);
                    }
                }
                Some(EventKind::NvtxStart) => {
                    let marks = self.range_starts(seg, e.name, e.c, e.start, false);
                    self.started.insert(e.a, (e.name, marks));
                }
                Some(EventKind::NvtxEnd) => {
                    if let Some((_, true)) = self.started.remove(&e.a) {
                        self.range_ends(e.start);
                    }
                }
                _ => {}
            }
        }
        let (start, end) = match self.phase {
            Phase::Waiting => (u64::MAX, u64::MAX),
            Phase::Open(s) => (s, u64::MAX),
            Phase::Closed(s, e) => (s, e),
        };
        let pid = seg.pid();
        let launched = &mut self.launched;
        let mut index = 0;
        events.retain(|e| {
            let keep = index < from || {
                let kind = e.kind();
                let timeless = matches!(
                    kind,
                    Some(EventKind::ThreadName | EventKind::ClockSync | EventKind::Device | EventKind::NvtxCategory)
                );
                let inside = (start..=end).contains(&e.start);
                if inside && kind == Some(EventKind::Api) && e.correlation != 0 {
                    launched.insert((pid, e.correlation));
                }
                // Device work launched inside the window belongs to it even when it runs past the end.
                let launched_inside = e.start >= start
                    && e.correlation != 0
                    && matches!(
                        kind,
                        Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset | EventKind::GraphNode)
                    )
                    && launched.contains(&(pid, e.correlation));
                timeless || inside || launched_inside
            };
            index += 1;
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_nsys_writes_them() {
        assert_eq!(Range::parse("cudaProfilerApi"), Ok(Range::ProfilerApi));
        assert_eq!(Range::parse("nvtx:train"), Ok(Range::Nvtx { name: "train".into(), domain: None }));
        assert_eq!(
            Range::parse("nvtx:fwd@torch"),
            Ok(Range::Nvtx { name: "fwd".into(), domain: Some("torch".into()) })
        );
        assert!(Range::parse("nvtx:").is_err());
        assert!(Range::parse("cudaProfiler").is_err());
    }
}
