//! What `cuflight serve` counts: each followed process's counters, folded from its recorded windows (written out
//! by [`super::exposition`]).

use cuflight_format::calls::CallEffects;
use cuflight_format::tracing::TracedLaunches;
use cuflight_format::EventKind;
use cuflight_trace::model::cuda_errors::{error_name, ErrorClass};
use cuflight_trace::model::cupti_labels;
use cuflight_trace::model::kernel_category::kernel_category;
use cuflight_trace::model::memory::LiveMemory;
use cuflight_trace::model::source::EventSource;
use std::collections::{BTreeMap, HashMap};

/// One process's counters (totals over its windows) and gauges (as of its last window).
#[derive(Default, Clone)]
pub struct ProcessMetrics {
    pub command: String,
    pub host: String,
    pub rank: Option<u32>,
    pub state: &'static str,
    /// Windows folded in (a continuous recording's parts, a flight recorder's snapshots), and those wanted but not
    /// folded, by why ([`LOST_WINDOWS`]).
    pub windows: u64,
    pub windows_lost: BTreeMap<&'static str, u64>,
    pub window_ns: u64,
    /// Device time covered by some kernel, copy or memset, per device (the union over its streams).
    pub busy_ns: BTreeMap<u32, u64>,
    pub kernel_ns: BTreeMap<(u32, &'static str), u64>,
    pub launches: BTreeMap<u32, u64>,
    pub memcpy_bytes: BTreeMap<(&'static str, &'static str), u64>,
    pub sync_wait_ns: u64,
    pub device_memory: Option<u64>,
    pub dropped: u64,
    /// Calls in flight when a window was armed (left out, not lost: their start is unknown).
    pub in_flight_at_arming: u64,
    /// GPU idle time inside the windows' steps by the report's causes (`unexplained` for what none explains).
    pub idle_ns: BTreeMap<String, u64>,
    /// The durations of the steps (or a server's iterations, by kind) that ran whole inside the windows.
    pub steps: BTreeMap<&'static str, StepHistogram>,
    /// Calls that returned an error, by class and CUDA's name for the code.
    pub call_errors: BTreeMap<(&'static str, String), u64>,
    /// CUPTI sessions the agent has had (its own count: serve's windows and any other collector's).
    pub cupti_sessions: u64,
    /// The round of serve's last window of the process, and the time between its windows now (0: continuous).
    pub last_window_round: Option<u64>,
    pub window_period_ns: u64,
    /// Device counters (`launch --gpu-metrics`) per device, averaged over the last window's samples.
    pub gpu_counters: BTreeMap<u32, cuflight_format::view::GpuSample>,
    /// What the recording cost the program, by where it was measured ([`OVERHEAD_SOURCES`]), over every window,
    /// and the share of the last window's time it took.
    pub overhead_ns: BTreeMap<&'static str, u64>,
    pub overhead_ratio: f64,
    /// The agent's tallies of the continuous recording being folded, as of its last part (each part repeats them).
    session_seen: SessionTotals,
}

/// Where the recording's cost to the program is measured or estimated: CUPTI's own overhead records (its buffer
/// flushes and instrumentation, on the program's threads), the program's threads waiting for room in a full ring,
/// the agent reading Python stacks; and, estimated from what the window traced (no clock in the process sees it
/// without adding to it), CUPTI lengthening each kernel launched one by one and each CUDA graph node it traced.
pub const OVERHEAD_SOURCES: [&str; 5] = ["cupti", "ring_wait", "python_stacks", "launch_tracing", "graph_node_tracing"];

/// Why a window was not folded: it could not be recorded (another collector held the agent, it never armed), its
/// file could not be written (a full temporary directory), or what was written could not be read back.
pub const LOST_WINDOWS: [&str; 3] = ["not_recorded", "unwritten", "unreadable"];

/// What the agent tallies for a session (a window, or a continuous recording so far).
#[derive(Default, Clone, Copy, Debug, PartialEq)]
struct SessionTotals {
    dropped: u64,
    in_flight: u64,
    ring_wait_ns: u64,
    python_ns: u64,
}

impl SessionTotals {
    fn of(p: &cuflight_trace::model::trace::Process) -> SessionTotals {
        SessionTotals {
            dropped: p.info.drops.total().saturating_add(p.refused),
            in_flight: p.info.unseen_begin,
            ring_wait_ns: p.info.program_held_ns,
            python_ns: p.info.python_stack_ns,
        }
    }

    /// What is new since `seen`, and the running totals to remember.
    fn since(self, seen: SessionTotals) -> (SessionTotals, SessionTotals) {
        let new = SessionTotals {
            dropped: self.dropped.saturating_sub(seen.dropped),
            in_flight: self.in_flight.saturating_sub(seen.in_flight),
            ring_wait_ns: self.ring_wait_ns.saturating_sub(seen.ring_wait_ns),
            python_ns: self.python_ns.saturating_sub(seen.python_ns),
        };
        let kept = SessionTotals {
            dropped: self.dropped.max(seen.dropped),
            in_flight: self.in_flight.max(seen.in_flight),
            ring_wait_ns: self.ring_wait_ns.max(seen.ring_wait_ns),
            python_ns: self.python_ns.max(seen.python_ns),
        };
        (new, kept)
    }
}

/// The upper bounds of the step histogram's buckets, seconds: from a server's decode iteration (about a millisecond)
/// to a large model's training step (seconds); Prometheus' default buckets with 1 and 2.5 ms added.
pub const STEP_BUCKETS_S: [f64; 13] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Step durations as a Prometheus histogram: how many fell at or under each bound (not yet cumulative), their
/// sum and count.
#[derive(Default, Clone, Debug)]
pub struct StepHistogram {
    in_bucket: [u64; STEP_BUCKETS_S.len()],
    pub sum_ns: u64,
    pub count: u64,
}

impl StepHistogram {
    pub fn add(&mut self, ns: u64) {
        let s = ns as f64 / 1e9;
        if let Some(i) = STEP_BUCKETS_S.iter().position(|&le| s <= le) {
            self.in_bucket[i] += 1;
        }
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.count += 1;
    }

    /// (bound, steps at or under it), cumulative as Prometheus' `_bucket` series are; `+Inf` is the count.
    pub fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        STEP_BUCKETS_S.iter().zip(self.in_bucket.iter()).scan(0u64, |sum, (&le, &n)| {
            *sum += n;
            Some((le, *sum))
        })
    }
}

impl ProcessMetrics {
    /// Every how many periods the process gets a window: doubled after every `budget` CUPTI sessions (the agent's
    /// count, or serve's own windows where an older agent does not count), at most 2^20; 1 when `budget` is 0.
    pub fn stride(&self, budget: u32) -> u64 {
        if budget == 0 {
            return 1;
        }
        1 << (self.cupti_sessions.max(self.windows) / u64::from(budget)).min(20)
    }
}

impl ProcessMetrics {
    /// A continuous recording begins: the agent's tallies start again from zero.
    pub fn new_session(&mut self) {
        self.session_seen = SessionTotals::default();
    }

    /// Adds one window's trace to the totals; `window_ns` is how long the window lasted. `carried` is the live
    /// memory of the parts before this one of one continuous recording (`--duty continuous`): allocations and
    /// frees are then replayed across parts. Windows with gaps between them start from nothing (what happened
    /// between them is unseen).
    pub fn fold(
        &mut self,
        source: &mut EventSource,
        window_ns: u64,
        carried: Option<&mut LiveMemory>,
    ) -> Result<(), String> {
        self.windows += 1;
        self.window_ns += window_ns;
        let mut busy_until: BTreeMap<u32, u64> = BTreeMap::new();
        let mut own = LiveMemory::default();
        let carrying = carried.is_some();
        let live = carried.unwrap_or(&mut own);
        let mut memory_seen = carrying && self.device_memory.is_some();
        let mut info = None;
        let mut counters: BTreeMap<u32, cuflight_trace::model::gpu_counters::CounterMeans> = BTreeMap::new();
        let mut cupti_overhead_ns = 0u64;
        // Kernels launched one by one and CUDA graph nodes traced one by one: CUPTI lengthened their launch calls.
        let mut traced = TracedLaunches::default();
        // What a name says (a kernel's category, a call's effects) is worked out once a fold, not once an event:
        // matching a name against the tables took half of serve's time on a flight recorder at 290k events/s.
        let mut categories: HashMap<(u32, u32), &'static str> = HashMap::new();
        let mut effects: HashMap<(u32, u32), CallEffects> = HashMap::new();
        source
            .for_each(|_, p, e| {
                if info.is_none() {
                    info = Some((p.info.host.clone(), p.info.rank, SessionTotals::of(p)));
                }
                match e.kind() {
                    Some(k @ (EventKind::Kernel | EventKind::Memcpy | EventKind::Memset)) => {
                        // Events come by start: the part of each past what its device already had busy is new.
                        let until = busy_until.entry(e.device).or_default();
                        let end = e.end.max(e.start);
                        if end > *until {
                            *self.busy_ns.entry(e.device).or_default() += end - e.start.max(*until);
                            *until = end;
                        }
                        match k {
                            EventKind::Kernel => {
                                let category = *categories
                                    .entry((p.info.pid, e.name))
                                    .or_insert_with(|| kernel_category(p.string(e.name)).as_str());
                                *self.kernel_ns.entry((e.device, category)).or_default() += e.duration();
                                *self.launches.entry(e.device).or_default() += 1;
                                traced.add(e);
                            }
                            EventKind::Memcpy => {
                                let copy = e.as_copy();
                                let host = copy.host_memory().map_or("device", cupti_labels::memory_kind);
                                *self.memcpy_bytes.entry((cupti_labels::memcpy_kind(copy.kind), host)).or_default() +=
                                    copy.bytes;
                            }
                            _ => {}
                        }
                    }
                    Some(EventKind::Api) => {
                        let call_effects =
                            *effects.entry((p.info.pid, e.name)).or_insert_with(|| CallEffects::of(p.string(e.name)));
                        if call_effects.waits_for_gpu() {
                            self.sync_wait_ns += e.duration();
                        }
                        let call = e.as_api();
                        if let Some(class) = ErrorClass::of(p.string(e.name), call.code()) {
                            let name = error_name(call.runtime, call.code());
                            *self.call_errors.entry((class.key(), name)).or_default() += 1;
                        }
                    }
                    Some(EventKind::Overhead) => cupti_overhead_ns += e.duration(),
                    Some(EventKind::GraphNode) => traced.add(e),
                    Some(EventKind::Alloc | EventKind::Free) => {
                        memory_seen = true;
                        live.apply(p.info.pid, e);
                    }
                    Some(EventKind::GpuSample) => counters.entry(e.device).or_default().add(&e.as_gpu_sample()),
                    _ => {}
                }
            })
            .map_err(|e| e.to_string())?;
        // Gauges: the last window's samples (a window without any keeps the previous values).
        for (device, means) in counters {
            self.gpu_counters.insert(device, means.means());
        }
        // Estimated from what was traced, as the report does: no record measures it.
        *self.overhead_ns.entry("launch_tracing").or_default() += traced.eager_ns();
        *self.overhead_ns.entry("graph_node_tracing").or_default() += traced.graph_node_ns();
        let mut overhead = cupti_overhead_ns.saturating_add(traced.eager_ns()).saturating_add(traced.graph_node_ns());
        if let Some((host, rank, totals)) = info {
            (self.host, self.rank) = (host, rank);
            // Each window is a session of its own; the parts of a continuous recording repeat its totals.
            let seen = if carrying { self.session_seen } else { SessionTotals::default() };
            let (new, kept) = totals.since(seen);
            self.session_seen = kept;
            self.dropped = self.dropped.saturating_add(new.dropped);
            self.in_flight_at_arming = self.in_flight_at_arming.saturating_add(new.in_flight);
            *self.overhead_ns.entry("ring_wait").or_default() += new.ring_wait_ns;
            *self.overhead_ns.entry("python_stacks").or_default() += new.python_ns;
            overhead = overhead.saturating_add(new.ring_wait_ns).saturating_add(new.python_ns);
        }
        *self.overhead_ns.entry("cupti").or_default() += cupti_overhead_ns;
        self.overhead_ratio = if window_ns > 0 { overhead as f64 / window_ns as f64 } else { 0.0 };
        // Allocations made before the first window are unseen: the gauge is what the windows saw allocated (in
        // a continuous recording, everything since the attach).
        if memory_seen {
            self.device_memory = Some(live.device());
        }
        Ok(())
    }
}

impl ProcessMetrics {
    /// Adds the report's idle causes of one window (its steps, or the window as one step).
    pub fn fold_idle(&mut self, source: EventSource) -> Result<(), String> {
        use cuflight_report::{Options, Report, ReportError};
        let mut sources = vec![("window".to_string(), source)];
        // A window is steady state: its first steps are not the program's warm-up.
        let opts = Options { step: None, include_warmup: true, filter: None };
        let report = match Report::compute(&mut sources, &opts) {
            Ok(r) => r,
            // A part with no GPU work (a server between requests, a program before its first kernel): the GPU had
            // nothing queued, so no idle time is blamed on a cause; its coverage and calls were folded already.
            Err(ReportError::NoGpuWork(_) | ReportError::NoGpuWorkDelivered(_) | ReportError::Empty(_)) => {
                return Ok(())
            }
            Err(e) => return Err(e.to_string()),
        };
        for p in &report.processes {
            let causes = serde_json::to_value(p.idle_causes).map_err(|e| e.to_string())?;
            for (key, v) in causes.as_object().into_iter().flatten() {
                let (Some(cause), Some(ns)) = (key.strip_suffix("_ns"), v.as_u64()) else { continue };
                if cause != "idle_in_steps" && cause != "idle_unexplained" {
                    *self.idle_ns.entry(cause.to_string()).or_default() += ns;
                }
            }
            *self.idle_ns.entry("unexplained".into()).or_default() += p.idle_unexplained_ns;
            // Steps the report found (ranges or the launch pattern), not the window taken as one.
            use cuflight_report::steps::StepSource;
            if matches!(p.step_source, StepSource::ProfilerStep | StepSource::Nvtx | StepSource::Pattern) {
                let kinds = cuflight_report::iterations::kind_of_each(&p.steps);
                for (row, kind) in p.steps.iter().zip(kinds) {
                    self.steps.entry(kind).or_default().add(row.duration_ns);
                }
            }
        }
        Ok(())
    }
}
