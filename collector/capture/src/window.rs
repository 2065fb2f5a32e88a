//! Which part of an attached process's stream a window keeps, when it is bounded by what the program does rather
//! than by the clock: `--capture-range cudaProfilerApi` (from `cudaProfilerStart` to `cudaProfilerStop`, as nsys
//! reads it), `--capture-range nvtx:NAME[@DOMAIN]` (the first NVTX range of that name) and `--steps N
//! [--skip-steps K]` (steps K+1..K+N, a step being a step-like NVTX range: `ProfilerStep#N`, `step`, `train_step`,
//! ... as the report finds them; torch.profiler's schedule calls these wait/warmup and active).
//!
//! A window never begins before recording is armed: the agent stamps `armed_ns` in its segment once every source
//! delivers (CUPTI subscribed, callbacks and activity enabled); before that NVTX may flow while CUPTI is still
//! being set up (on an H100, ten 1 ms steps went by), so steps and ranges count only from the first one that
//! *begins* after arming, and a window of a duration ([`Range::Armed`]) starts at arming.
//!
//! The filter sees every drained batch before it is written. It finds the boundaries in the batch (host events
//! arrive within milliseconds), keeps API calls and host events that start inside the window, and keeps device
//! records (kernels, copies, memsets, graph nodes) by their launching call: CUPTI's correlation ids grow in
//! call order within a process, so the ids of the calls kept bound the work the window holds, however late
//! CUPTI delivers its records (even after the window ends). Facts that are not bound to a time (devices, thread
//! names, clock pairs, NVTX categories) are always kept.

use cuflight_format::segment::MappedSegment;
use cuflight_format::{EventKind, RawEvent};
use std::collections::HashMap;

/// What bounds the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Range {
    ProfilerApi,
    Nvtx {
        name: String,
        domain: Option<String>,
    },
    Steps {
        skip: u32,
        count: u32,
    },
    /// From arming plus `delay_ns`, for `ns` when given (an attach by duration: the collector's own clock ends
    /// it later; `record -y DELAY -d DURATION`).
    Armed {
        ns: Option<u64>,
        delay_ns: u64,
    },
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
    /// The end of an [`Range::Armed`] window of a given span, on the agent's clock.
    open_until: Option<u64>,
    /// Each process's arming time (0: not armed yet), read from its segment with every batch.
    armed: HashMap<u32, u64>,
    /// Step-like ranges (or ranges of the name asked for) that began before their process was armed: not counted.
    pub before_arming: u32,
    /// Per process, the lowest and highest correlation id of an API call kept: the device work of the window.
    calls: HashMap<u32, (u32, u32)>,
    /// NVTX push stacks per (thread, domain).
    stacks: HashMap<(u32, u64), Vec<Pushed>>,
    /// Open start/end ranges by id: (name id, counted as a step).
    started: HashMap<u64, (u32, bool)>,
    /// Steps that started since the attach, and how many of the counted ones have ended.
    steps_started: u32,
    steps_ended: u32,
    /// Name ids already looked up (per process: ids are the segment's).
    names: HashMap<(u32, u32), String>,
}

impl Window {
    pub fn new(range: Range) -> Window {
        Window {
            range,
            phase: Phase::Waiting,
            armed: HashMap::new(),
            open_until: None,
            before_arming: 0,
            calls: HashMap::new(),
            stacks: HashMap::new(),
            started: HashMap::new(),
            steps_started: 0,
            steps_ended: 0,
            names: HashMap::new(),
        }
    }

    fn name(&mut self, seg: &MappedSegment, id: u32) -> &str {
        self.names.entry((seg.pid(), id)).or_insert_with(|| super::recorded_process::string_at(seg, id))
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

    /// Whether `at` lies after the arming of process `pid`.
    fn armed_at(&self, pid: u32, at: u64) -> bool {
        self.armed.get(&pid).is_some_and(|&armed| armed != 0 && at >= armed)
    }

    /// Whether a range that starts now marks the window's start (and, for steps, whether it counts as one).
    fn range_starts(&mut self, seg: &MappedSegment, name: u32, domain: u64, at: u64, in_step: bool) -> bool {
        let armed = self.armed_at(seg.pid(), at);
        match self.range.clone() {
            Range::Nvtx { name: want, domain: want_domain } => {
                let matches = self.name(seg, name) == want
                    && want_domain.as_deref().is_none_or(|d| self.name(seg, domain as u32) == d);
                if matches && self.phase == Phase::Waiting {
                    if !armed {
                        self.before_arming += 1;
                        return false;
                    }
                    self.open(at);
                    return true;
                }
                false
            }
            Range::Steps { skip, .. } => {
                if in_step || !cuflight_trace::model::range_roles::step_like(self.name(seg, name)) {
                    return false;
                }
                if !armed {
                    // Begun before CUPTI delivers: its calls and kernels would be missing. Not a step of the window.
                    if self.steps_started == 0 {
                        self.before_arming += 1;
                    }
                    return false;
                }
                self.steps_started += 1;
                if self.steps_started == skip + 1 {
                    self.open(at);
                }
                self.steps_started > skip
            }
            Range::ProfilerApi | Range::Armed { .. } => false,
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
            Range::ProfilerApi | Range::Armed { .. } => {}
        }
    }

    /// Finds the window's boundaries in a batch drained from `seg` (events `from..`), then drops what lies
    /// outside the window.
    pub fn filter(&mut self, seg: &MappedSegment, events: &mut Vec<RawEvent>, from: usize) {
        let pid = seg.pid();
        // Read after the batch was drained: an event in it that began after arming finds the stamp.
        let armed = seg.header().armed_ns.load(std::sync::atomic::Ordering::Acquire);
        self.armed.insert(pid, armed);
        if let Range::Armed { ns, delay_ns } = self.range {
            if armed != 0 && self.phase == Phase::Waiting {
                // Stays open for the collector, which ends an attach by its own clock; what comes after the
                // span (the detach takes a moment) is left out.
                let start = armed.saturating_add(delay_ns);
                self.phase = Phase::Open(start);
                self.open_until = ns.map(|ns| start.saturating_add(ns));
            }
        }
        for &e in &events[from..] {
            self.find_boundaries(seg, &e);
        }
        let (start, end) = self.bounds();
        // The calls kept, by correlation id: the device work they launched is the window's, late or not.
        for e in &events[from..] {
            if e.kind() == Some(EventKind::Api) && e.correlation != 0 && (start..=end).contains(&e.start) {
                let span = self.calls.entry(pid).or_insert((e.correlation, e.correlation));
                *span = (span.0.min(e.correlation), span.1.max(e.correlation));
            }
        }
        let calls = self.calls.get(&pid).copied();
        let mut index = 0;
        events.retain(|e| {
            let keep = index < from || {
                match e.kind() {
                    Some(
                        EventKind::ThreadName | EventKind::ClockSync | EventKind::Device | EventKind::NvtxCategory,
                    ) => true,
                    Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset | EventKind::GraphNode)
                        if e.correlation != 0 =>
                    {
                        calls.is_some_and(|(low, high)| (low..=high).contains(&e.correlation))
                    }
                    _ => (start..=end).contains(&e.start),
                }
            };
            index += 1;
            keep
        });
    }

    /// The window's span so far (empty while waiting).
    fn bounds(&self) -> (u64, u64) {
        match self.phase {
            Phase::Waiting => (u64::MAX, 0),
            Phase::Open(s) => (s, self.open_until.unwrap_or(u64::MAX)),
            Phase::Closed(s, e) => (s, e),
        }
    }

    fn find_boundaries(&mut self, seg: &MappedSegment, e: &RawEvent) {
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
                let in_step = self.stacks.get(&(e.tid, e.as_nvtx().domain)).is_some_and(|s| s.iter().any(|r| r.2));
                let marks = self.range_starts(seg, e.name, e.as_nvtx().domain, e.start, in_step);
                self.stacks.entry((e.tid, e.as_nvtx().domain)).or_default().push((e.name, e.start, marks));
            }
            Some(EventKind::NvtxPop) => {
                if let Some((_, _, true)) = self.stacks.get_mut(&(e.tid, e.as_nvtx().domain)).and_then(Vec::pop) {
                    self.range_ends(e.start);
                }
            }
            Some(EventKind::NvtxStart) => {
                let marks = self.range_starts(seg, e.name, e.as_nvtx().domain, e.start, false);
                self.started.insert(e.as_nvtx().id, (e.name, marks));
            }
            Some(EventKind::NvtxEnd) => {
                if let Some((_, true)) = self.started.remove(&e.as_nvtx().id) {
                    self.range_ends(e.start);
                }
            }
            _ => {}
        }
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
