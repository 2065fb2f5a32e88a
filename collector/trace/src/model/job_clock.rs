//! The job's clock, built one way for every command that puts several processes on one timeline (`report` over
//! ranks, `merge`, the Parquet export), from each process's facts (its host, clock pairs and collectives).
//!
//! A host's processes share its CLOCK_MONOTONIC, so they share one REALTIME offset: the first offset any of them
//! measured (its clock pairs); another's would only add its own reading error, and a process without pairs (an
//! import, a process that exited before its first pair) still lands where its host's others do. A host with no
//! offset at all keeps its times as recorded (0), which is already the epoch for imports whose times are epoch
//! based (Kineto). Hosts are then shifted onto the reference host by their collectives ([`super::align`]).
//! Processes that name no host share the host "unknown".

use super::align::{self, HostShift, Member, ToJob};
use super::runs::{RunSpan, Separated};
use super::source::EventSource;
use super::trace::{Process, TraceError};
use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;

pub use super::host::host_of;

/// Times at or after this (2001-09-09 in ns) are taken as epoch times already, as imports record them.
const EPOCH_FLOOR_NS: u64 = 1_000_000_000_000_000_000;

/// `own` (a process's time) on the epoch: through its REALTIME offset, else as it is when it is epoch-based
/// already; None when neither tells.
pub fn on_epoch(own: u64, realtime_offset: Option<i64>) -> Option<u64> {
    match realtime_offset {
        Some(r) => u64::try_from((own.min(i64::MAX as u64) as i64).saturating_add(r)).ok(),
        None => (own >= EPOCH_FLOOR_NS).then_some(own),
    }
}

/// What one process tells of the job's clock, gathered event by event in one cheap pass ([`ClockFacts::feed`]):
/// its REALTIME offset (its first clock pair that has one) and its collectives (NCCL's kernels and other libraries',
/// by [`super::kernel_category::is_collective_kernel`]), whose k-th end on every rank is the same instant. The report's planning
/// pass feeds one too, so that every command puts a job on the same clock.
#[derive(Clone, Debug, Default)]
pub struct ClockFacts {
    pub realtime_offset: Option<i64>,
    /// First start and last end of what the timeline draws ([`super::timeline::drawn`]), on its own clock: the
    /// span the separate-runs rule ([`super::runs`]) compares.
    pub span: Option<(u64, u64)>,
    /// (name's string id, end) of each collective on the process's own clock, in the order they ran.
    pub collectives: Vec<(u32, u64)>,
    /// Whether a kernel name is a collective's, once per name.
    comm_names: FxHashMap<u32, bool>,
}

impl ClockFacts {
    /// Takes in one event of process `p`, in the source's time order.
    pub fn feed(&mut self, p: &Process, e: &RawEvent) {
        if super::timeline::drawn(e) {
            let span = self.span.get_or_insert((e.start, e.end.max(e.start)));
            span.0 = span.0.min(e.start);
            span.1 = span.1.max(e.end.max(e.start));
        }
        match e.kind() {
            Some(EventKind::ClockSync) if self.realtime_offset.is_none() => {
                self.realtime_offset = e.as_clock_pair().realtime_offset();
            }
            Some(EventKind::Kernel) => {
                let comm = *self
                    .comm_names
                    .entry(e.name)
                    .or_insert_with(|| super::kernel_category::is_collective_kernel(p.string(e.name)));
                if comm {
                    self.collectives.push((e.name, e.end.max(e.start)));
                }
            }
            _ => {}
        }
    }

    /// Every process's facts, in one pass over `source`.
    pub fn of_source(source: &mut EventSource) -> Result<FxHashMap<u32, ClockFacts>, TraceError> {
        let mut facts: FxHashMap<u32, ClockFacts> = FxHashMap::default();
        source.for_each(|k, p, e| facts.entry(k).or_default().feed(p, e))?;
        Ok(facts)
    }
}

/// Collects each process's clock facts (its host, rank, REALTIME offset, collectives), then builds the clock.
#[derive(Default)]
pub struct JobClockBuilder {
    /// Traces added by [`JobClockBuilder::add_source`] so far: the next one's file index.
    sources: usize,
    /// Per process (as `members`): where it was recorded, for the separate-runs rule.
    spans: Vec<Recorded>,
    /// Hosts in the order first seen, with the first REALTIME offset measured there.
    realtime: Vec<(String, Option<i64>)>,
    /// Per process, its collectives' ends on its own clock until [`JobClockBuilder::build`] adds its host's offset.
    members: Vec<Member>,
    /// Per process (as `members`), the epoch base of its own, if its trace gives one.
    own_base: Vec<Option<i64>>,
}

/// Where a process was recorded: its trace file's index, the host its trace names (maybe none) and its pid, and
/// the span of its events on its own clock.
struct Recorded {
    file: usize,
    host: String,
    pid: u32,
    span: Option<(u64, u64)>,
}

/// The epoch base `p`'s times count from, if its trace gives one ([`Process::epoch_base_ns`]).
fn own_base(p: &Process) -> Option<i64> {
    (p.epoch_base_ns != 0).then(|| p.epoch_base_ns.min(i64::MAX as u64) as i64)
}

impl JobClockBuilder {
    /// `p`, of trace file `file` (its index among those given), with what it told of the clock.
    pub fn add_facts(&mut self, file: usize, p: &Process, facts: &ClockFacts) {
        let ends = facts.collectives.iter().map(|&(name, end)| (p.string(name).to_string(), end as i64)).collect();
        self.push(p, facts.realtime_offset, ends, (file, facts.span));
    }

    /// As [`JobClockBuilder::add_facts`] without the collectives: what [`JobClockBuilder::separate_runs`] needs,
    /// without copying every collective's name for a clock that will not be built.
    pub fn add_span(&mut self, file: usize, p: &Process, facts: &ClockFacts) {
        self.push(p, facts.realtime_offset, Vec::new(), (file, facts.span));
    }

    /// Every process of `source`, the next trace file, in one pass over its events.
    pub fn add_source(&mut self, source: &mut EventSource) -> Result<(), TraceError> {
        let facts = ClockFacts::of_source(source)?;
        let file = self.sources;
        self.sources += 1;
        for (k, p) in &source.processes {
            self.add_facts(file, p, facts.get(k).unwrap_or(&ClockFacts::default()));
        }
        Ok(())
    }

    /// `p` with its REALTIME offset (None: no clock pair) and its collectives' (name, end on its own clock); no
    /// span, so it takes no part in the separate-runs rule.
    pub fn add(&mut self, p: &Process, realtime_offset: Option<i64>, ends: Vec<(String, i64)>) {
        self.push(p, realtime_offset, ends, (0, None));
    }

    /// `p` of trace file `file`, its events spanning `span` on its own clock.
    fn push(
        &mut self,
        p: &Process,
        realtime_offset: Option<i64>,
        ends: Vec<(String, i64)>,
        (file, span): (usize, Option<(u64, u64)>),
    ) {
        self.spans.push(Recorded { file, host: p.info.host.clone(), pid: p.info.pid, span });
        let host = host_of(p);
        // A process whose times count from an epoch base of its own (a torch.profiler trace) does not speak for
        // its host's CLOCK_MONOTONIC.
        let realtime_offset = realtime_offset.filter(|_| p.epoch_base_ns == 0);
        match self.realtime.iter_mut().find(|(h, _)| h == host) {
            Some((_, offset)) => *offset = offset.or(realtime_offset),
            None => self.realtime.push((host.to_string(), realtime_offset)),
        }
        self.members.push(Member { host: host.to_string(), rank: p.rank, collectives: ends });
        self.own_base.push(own_base(p));
    }

    /// Each added process's REALTIME offset as [`JobClock::realtime_offset`] finds it, without aligning hosts
    /// on collectives (which `build` does): for questions about wall-clock times alone.
    pub fn realtime_offsets(&self) -> Vec<Option<i64>> {
        let host = |h: &str| self.realtime.iter().find(|(name, _)| name == h).and_then(|(_, o)| *o);
        self.own_base.iter().zip(&self.members).map(|(own, m)| own.or_else(|| host(&m.host))).collect()
    }

    /// Whether the processes added are of separate runs ([`super::runs`]), by their spans on the epoch through
    /// their REALTIME offsets alone; if so, with the runs their files make ([`super::runs::runs`]) and the files
    /// whose times do not say when they ran.
    pub fn separate_runs(&self) -> Option<Separated> {
        let spans = self.run_spans();
        let why = super::runs::separate(&spans)?;
        let runs = super::runs::runs(&spans);
        let mut untimed: Vec<usize> =
            self.spans.iter().map(|r| r.file).filter(|f| !runs.iter().any(|r| r.files.contains(f))).collect();
        untimed.sort_unstable();
        untimed.dedup();
        Some(Separated { why, runs, untimed })
    }

    /// Each added process's span on the epoch, through its REALTIME offset alone; those with no span or offset
    /// are left out.
    fn run_spans(&self) -> Vec<RunSpan<'_>> {
        let offsets = self.realtime_offsets();
        (self.spans.iter().zip(offsets))
            .filter_map(|(r, offset)| {
                let (start, end) = r.span?;
                let (start, end) = (on_epoch(start, offset)?, on_epoch(end, offset)?);
                Some(RunSpan { file: r.file, host: &r.host, pid: r.pid, start, end })
            })
            .collect()
    }

    /// The clock. Hosts are aligned on their collectives only when the processes are of one run: the k-th
    /// collective of one run says nothing of another's clock.
    pub fn build(mut self) -> JobClock {
        let separate = self.separate_runs();
        if separate.is_some() {
            for m in &mut self.members {
                m.collectives.clear();
            }
        }
        for (m, own) in self.members.iter_mut().zip(&self.own_base) {
            let host = || self.realtime.iter().find(|(h, _)| *h == m.host).and_then(|(_, o)| *o).unwrap_or(0);
            let offset = own.unwrap_or_else(host);
            for (_, end) in &mut m.collectives {
                *end = end.saturating_add(offset);
            }
        }
        let hosts = align::align(&self.members);
        JobClock { realtime: self.realtime, hosts, separate }
    }
}

/// How a job's processes were put on one clock, for a command to say: each host's shift, and why the traces are
/// not one job's when their times say so.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    pub hosts: Vec<HostShift>,
    pub separate: Option<Separated>,
}

/// Every process's way onto the job's clock.
pub struct JobClock {
    realtime: Vec<(String, Option<i64>)>,
    /// Per host, the shift onto the reference host (the reference first).
    pub hosts: Vec<HostShift>,
    /// Why the processes are not one job's, when their times say so (their hosts then keep their REALTIME
    /// placement).
    pub separate: Option<Separated>,
}

impl JobClock {
    pub fn placement(&self) -> Placement {
        Placement { hosts: self.hosts.clone(), separate: self.separate.clone() }
    }

    /// What puts `p`'s times on the epoch: the base of its own trace, else its host's REALTIME offset if one was
    /// measured there.
    pub fn realtime_offset(&self, p: &Process) -> Option<i64> {
        if let Some(base) = own_base(p) {
            return Some(base);
        }
        let host = host_of(p);
        self.realtime.iter().find(|(h, _)| h == host).and_then(|(_, o)| *o)
    }

    /// How `p`'s own times go onto the job's clock.
    pub fn to_job(&self, p: &Process) -> ToJob {
        let host = host_of(p);
        ToJob::new(self.realtime_offset(p).unwrap_or(0), self.hosts.iter().find(|h| h.host == host))
    }

    /// What `p`'s placed times are: "realtime" (the epoch, from clock pairs, or times that were epoch based
    /// already: after 2001-09-09 as recorded, `first_ns` being its first) or "as recorded".
    pub fn clock_name(&self, p: &Process, first_ns: u64) -> &'static str {
        if self.realtime_offset(p).is_some() || first_ns >= EPOCH_FLOOR_NS {
            "realtime"
        } else {
            "as recorded"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(host: &str, rank: u32) -> Process {
        let mut p = Process::default();
        p.info.host = host.into();
        p.rank = Some(rank);
        p
    }

    /// The rule report, merge and the Parquet export share: one REALTIME offset per host, the first measured
    /// there, whichever of its processes measured it; a host without one keeps its times.
    #[test]
    fn a_hosts_processes_share_its_first_measured_offset() {
        let (a0, a1, a2, b) = (process("a", 0), process("a", 1), process("a", 2), process("b", 3));
        let mut builder = JobClockBuilder::default();
        for (p, offset) in [(&a0, None), (&a1, Some(100)), (&a2, Some(130)), (&b, None)] {
            builder.add(p, offset, Vec::new());
        }
        let clock = builder.build();
        for p in [&a0, &a1, &a2] {
            assert_eq!(clock.realtime_offset(p), Some(100), "every process of host a");
            assert_eq!(clock.to_job(p).at(5), 105);
            assert_eq!(clock.clock_name(p, 5), "realtime");
        }
        assert_eq!(clock.realtime_offset(&b), None);
        assert_eq!(clock.to_job(&b).at(5), 5);
        assert_eq!(clock.clock_name(&b, 5), "as recorded");
        assert_eq!(clock.clock_name(&b, 1_700_000_000_000_000_000), "realtime", "epoch-based import");
        let nameless = process("", 4);
        assert_eq!(host_of(&nameless), "unknown");
    }

    /// Two hosts whose collectives would match, k-th to k-th: aligned when their traces ran together, left on
    /// their REALTIME clocks when they ran an hour apart (the k-th collective of one run says nothing of
    /// another's clock), and the clock says why.
    #[test]
    fn collectives_of_separate_runs_do_not_align_their_hosts() {
        let (mut a, mut b) = (process("a", 0), process("b", 1));
        (a.info.pid, b.info.pid) = (10, 20);
        a.strings.insert(1, "ncclKernel_AllReduce".into());
        b.strings.insert(1, "ncclKernel_AllReduce".into());
        let hour = 3_600_000_000_000u64;
        let clock = |b_offset: i64| {
            let mut builder = JobClockBuilder::default();
            let facts = |offset: i64, name: u32| ClockFacts {
                realtime_offset: Some(offset),
                span: Some((1_000, 10_000_000)),
                collectives: (1..=5).map(|k| (name, k * 1_000_000)).collect(),
                ..Default::default()
            };
            builder.add_facts(0, &a, &facts(0, 1));
            builder.add_facts(1, &b, &facts(b_offset, 1));
            builder.build()
        };
        let together = clock(3_000);
        assert!(together.separate.is_none());
        assert_eq!(together.hosts.iter().find(|h| h.host == "b").map(|h| (h.matched, h.shift_ns)), Some((5, -3_000)));
        let apart = clock(hour as i64);
        let why = apart.separate.as_ref().map(|s| &s.why);
        assert!(matches!(why, Some(crate::model::runs::Separate::Apart { first: 0, second: 1, .. })), "{why:?}");
        assert_eq!(apart.hosts.iter().find(|h| h.host == "b").map(|h| h.matched), Some(0), "{:?}", apart.hosts);
        assert_eq!(apart.to_job(&b).at(5), hour as i64 + 5, "on its REALTIME clock");
    }

    /// torch.profiler traces count from an epoch base of their own (`baseTimeNanoseconds`): two ranks whose bases
    /// differ (started on either side of libkineto's 3-month interval) each land by their own, and neither speaks
    /// for a recording's CLOCK_MONOTONIC on the same host.
    #[test]
    fn an_imported_trace_lands_by_its_own_epoch_base() {
        let (mut k0, mut k1, native) = (process("", 0), process("", 1), process("", 2));
        k0.epoch_base_ns = 1_751_410_836_000_000_000;
        k1.epoch_base_ns = 1_759_300_074_000_000_000;
        let mut builder = JobClockBuilder::default();
        for (p, offset) in [(&k0, None), (&k1, None), (&native, Some(7_000))] {
            builder.add(p, offset, Vec::new());
        }
        let clock = builder.build();
        assert_eq!(clock.to_job(&k0).at(5), 1_751_410_836_000_000_005);
        assert_eq!(clock.to_job(&k1).at(5), 1_759_300_074_000_000_005);
        assert_eq!(clock.to_job(&native).at(5), 7_005, "the host's own offset, not an import's base");
        assert_eq!(clock.clock_name(&k1, 5), "realtime");
    }
}
