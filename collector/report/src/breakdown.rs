//! The temporal breakdown, with Holistic Trace Analysis' definitions (HTA 0.5, `get_temporal_breakdown`), so
//! that the numbers equal HTA's on the same Kineto trace:
//!
//! - **GPU ops**: kernels, memcpys, memsets and synchronisation records on a stream (HTA: every event with a
//!   `stream`; Kineto's `cuda_sync`, CUPTI's SYNCHRONIZATION records). A context synchronisation has no stream
//!   and is left out, as HTA leaves it when the file says -1 (cuflight's export); Kineto writes 4294967295,
//!   which HTA counts, as it counts host operators with a stream argument: neither is GPU work, the import
//!   counts them ([`NotGpuWork`]) and the report names them. HTA types them by name like kernels: a stream wait ("Stream Wait
//!   Event", no "Sync" in it) is computation, the others are not.
//! - **Traced iterations**: when the trace holds at least two `ProfilerStep#N` ranges, the last step is left
//!   out, as HTA does: host events must start before the last step starts, and a GPU op counts only if a kept
//!   host event (its launch) has the same correlation id. With fewer steps everything counts.
//! - **Span** (`kernel_time`): from the first GPU op's start to the last one's end.
//! - **Idle**: the span minus the union of all GPU ops' intervals.
//! - **Compute**: the union of compute kernels' intervals. A kernel is not compute when its name starts with
//!   `nccl` and contains `Kernel` (communication), or contains `Memcpy`, starts with `Memset`, or contains
//!   `Sync`; memcpys and memsets are never compute.
//! - **Non-compute**: span - idle - compute (communication, memory and other GPU work not overlapped by compute).
//! - **Rounding**: HTA rounds traces whose timestamps have fractions of a microsecond (start up to the next whole
//!   µs, end down to the previous one, a workaround for overlapping events in PyTorch's ns-resolution traces).
//!   A torch.profiler trace with such timestamps is broken down the same way, so the numbers equal HTA's;
//!   cuflight's own captures, and their Kineto export, keep exact nanoseconds (HTA equals them with
//!   `HTA_DISABLE_NS_ROUNDING=1`).
//! - **Merging** follows HTA's arithmetic: intervals sorted by start are grouped while a start does not pass the
//!   running maximum end; busy time is Σ(group end - group start), signed (rounding can make an interval
//!   negative), and the span runs from the first group's start to the last group's end.

use cuflight_format::RawEvent;
use cuflight_trace::model::trace::NotGpuWork;
use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Breakdown {
    /// The span minus the union of every GPU op's interval: no GPU work running (HTA's idle time).
    pub idle_ns: u64,
    /// The union of compute kernels' intervals (not communication, copies or memsets).
    pub compute_ns: u64,
    /// The span minus idle and compute: communication, copies and other GPU work that no compute kernel overlapped.
    pub non_compute_ns: u64,
    /// First GPU op start to last GPU op end (HTA's `kernel_time`).
    pub span_ns: u64,
    /// GPU ops counted (after the last-step rule).
    pub gpu_ops: u64,
    /// What HTA counts as GPU ops in the trace and cuflight leaves out, being no GPU work; with any, HTA's figures
    /// differ from these.
    pub not_gpu_work: NotGpuWork,
}

impl Breakdown {
    pub fn percent(&self, part: u64) -> f64 {
        if self.span_ns == 0 {
            0.0
        } else {
            100.0 * part as f64 / self.span_ns as f64
        }
    }
}

/// Merged intervals as HTA computes them: (busy time, first group's start, last group's end).
#[cfg(test)]
fn merge(mut v: Vec<(i64, i64)>) -> (i64, i64, i64) {
    v.sort_unstable();
    let mut m = OnlineMerge::new();
    v.into_iter().for_each(|iv| m.step(iv));
    m.result()
}

/// `merge` (the tests' reference) over intervals that arrive sorted by start (events are): only the current group is kept, and
/// intervals with equal starts are held until the start moves on and taken by end, as the sort orders them.
struct OnlineMerge {
    total: i64,
    first: i64,
    group: Option<(i64, i64)>,
    running_max: i64,
    ties: Vec<(i64, i64)>,
}

impl OnlineMerge {
    fn new() -> OnlineMerge {
        OnlineMerge { total: 0, first: 0, group: None, running_max: i64::MIN, ties: Vec::new() }
    }

    fn push(&mut self, iv: (i64, i64)) {
        if self.ties.first().is_some_and(|t| t.0 != iv.0) {
            self.flush_ties();
        }
        self.ties.push(iv);
    }

    fn flush_ties(&mut self) {
        let mut ties = std::mem::take(&mut self.ties);
        ties.sort_unstable();
        ties.iter().for_each(|&iv| self.step(iv));
        ties.clear();
        self.ties = ties;
    }

    fn step(&mut self, (s, e): (i64, i64)) {
        match self.group {
            Some((gs, ge)) if s <= self.running_max => self.group = Some((gs, ge.max(e))),
            Some((gs, ge)) => {
                self.total = self.total.saturating_add(ge.saturating_sub(gs));
                self.group = Some((s, e));
            }
            None => {
                self.first = s;
                self.group = Some((s, e));
            }
        }
        self.running_max = self.running_max.max(e);
    }

    fn result(mut self) -> (i64, i64, i64) {
        self.flush_ties();
        match self.group {
            Some((gs, ge)) => (self.total.saturating_add(ge.saturating_sub(gs)), self.first, ge),
            None => (self.total, self.first, 0),
        }
    }
}

/// HTA's idle time breakdown (`get_idle_time_breakdown`, default `consecutive_kernel_delay` 30 µs), over the
/// GPU ops the traced-iterations filter keeps (as the temporal breakdown): on each
/// stream, the gap before each GPU op (its start minus the previous op's end, in start order) is **host wait**
/// when the op's launch call started after the previous op ended (the host had not queued it yet), else
/// **kernel wait** when shorter than 30 µs (back-to-back launch overhead), else **other** (e.g. waiting on
/// another stream). Summed over streams, so it can exceed the breakdown's idle time on multi-stream ranks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct IdleSplit {
    /// Gaps before an op whose launch call began after the previous op on its stream ended: the host had not queued it
    /// yet.
    pub host_wait_ns: i64,
    /// Other gaps shorter than 30 µs: back-to-back launch overhead.
    pub kernel_wait_ns: i64,
    /// The remaining gaps (e.g. waiting on another stream).
    pub other_ns: i64,
}

const CONSECUTIVE_KERNEL_DELAY_NS: i64 = 30_000;
use cuflight_format::view::SYNC_STREAM_WAIT_EVENT;

/// An op's interval in signed ns (HTA's arithmetic), saturating: a crafted trace's times past i64 stay ordered.
pub(super) fn interval(start: u64, end: u64, hta_rounding: bool) -> (i64, i64) {
    let signed = |ns: u64| ns.min(i64::MAX as u64) as i64;
    if hta_rounding {
        let ts = start as f64 / 1000.0;
        let end = ts + end.saturating_sub(start) as f64 / 1000.0;
        ((ts.ceil() as i64).saturating_mul(1000), (end.floor() as i64).saturating_mul(1000))
    } else {
        (signed(start), signed(end.max(start)))
    }
}

/// Both HTA breakdowns of one process, accumulated over its GPU ops in start order (as events stream).
pub struct Hta {
    rounding: bool,
    /// The traced-iterations rule: ops count only if their launch starts before this (see the module docs).
    last_step: Option<u64>,
    all: OnlineMerge,
    compute: OnlineMerge,
    gpu_ops: u64,
    /// Per stream, the previous op's end.
    prev_end: rustc_hash::FxHashMap<u32, i64>,
    split: IdleSplit,
}

impl Hta {
    /// `hta_rounding` rounds to whole µs as HTA does for ns-resolution Kineto traces; `last_profiler_step`: with
    /// two or more distinct `ProfilerStep` ranges, the last one's start.
    pub fn new(hta_rounding: bool, last_profiler_step: Option<u64>) -> Hta {
        Hta {
            rounding: hta_rounding,
            last_step: last_profiler_step,
            all: OnlineMerge::new(),
            compute: OnlineMerge::new(),
            gpu_ops: 0,
            prev_end: Default::default(),
            split: IdleSplit::default(),
        }
    }

    /// One GPU op (kernel, copy, memset), in start order; `launch`: its launch call's (start, end).
    pub fn op(&mut self, e: &RawEvent, launch: Option<(u64, u64)>, compute: bool) {
        if !self.traced(e, launch) {
            return;
        }
        // HTA holds µs in float64 (0.25 µs resolution at epoch magnitudes), adds dur, then rounds.
        let (start, end) = interval(e.start, e.end, self.rounding);
        self.all.push((start, end));
        self.gpu_ops += 1;
        if compute {
            self.compute.push((start, end));
        }
        let launched = launch.filter(|_| e.correlation != 0).map(|(s, e)| interval(s, e, self.rounding).0);
        if let Some(prev) = self.prev_end.insert(e.stream, end) {
            let gap = start.saturating_sub(prev);
            if launched.is_some_and(|t| t > prev) {
                self.split.host_wait_ns = self.split.host_wait_ns.saturating_add(gap);
            } else if gap < CONSECUTIVE_KERNEL_DELAY_NS {
                self.split.kernel_wait_ns = self.split.kernel_wait_ns.saturating_add(gap);
            } else {
                self.split.other_ns = self.split.other_ns.saturating_add(gap);
            }
        }
    }

    /// A synchronisation record on a stream (Kineto's `cuda_sync`): HTA's temporal breakdown takes every event
    /// with a stream as GPU time, so it is busy time, never compute, and not part of the idle split (whose
    /// gaps are between GPU work on a stream).
    pub fn sync(&mut self, e: &RawEvent, launch: Option<(u64, u64)>) {
        if !self.traced(e, launch) {
            return;
        }
        let iv = interval(e.start, e.end, self.rounding);
        self.all.push(iv);
        self.gpu_ops += 1;
        // HTA's kernel types go by name: a record named without "Sync" ("Stream Wait Event", which Kineto and
        // cuflight's export name `cudaStreamWaitEvent`) is neither communication nor memory, so it is computation.
        if e.as_sync().kind == SYNC_STREAM_WAIT_EVENT {
            self.compute.push(iv);
        }
    }

    /// HTA's filter for traced iterations, applied to every analysis when it loads a trace: a GPU op counts only
    /// if a host call with its correlation id (the first, which starts earliest) starts before the last step.
    pub fn traced(&self, e: &RawEvent, launch: Option<(u64, u64)>) -> bool {
        self.last_step.is_none_or(|last| e.correlation != 0 && launch.is_some_and(|l| l.0 < last))
    }

    pub fn finish(self) -> (Breakdown, IdleSplit) {
        if self.gpu_ops == 0 {
            return (Breakdown::default(), self.split);
        }
        let (busy, first, last) = self.all.result();
        let (compute_ns, _, _) = self.compute.result();
        let span = (last - first).max(0);
        let idle = (span - busy).max(0);
        // With HTA's rounding, compute can exceed busy time by a few µs; HTA asserts there (that is why it fails on
        // kineto-h100-qwen-inference). Capping keeps idle + compute + non-compute = span.
        let compute_ns = compute_ns.min(span - idle).max(0);
        let clamp = |v: i64| v.max(0) as u64;
        let b = Breakdown {
            idle_ns: clamp(idle),
            compute_ns: clamp(compute_ns),
            non_compute_ns: clamp(span - idle - compute_ns),
            span_ns: clamp(span),
            gpu_ops: self.gpu_ops,
            not_gpu_work: NotGpuWork::default(),
        };
        (b, self.split)
    }
}

#[cfg(test)]
fn union_ns(v: Vec<(u64, u64)>) -> u64 {
    merge(v.into_iter().map(|(s, e)| (s as i64, e as i64)).collect()).0.max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::EventKind;
    use cuflight_trace::model::kernel_category::is_compute_kernel;

    #[test]
    fn unions_merge_overlaps() {
        assert_eq!(union_ns(vec![(0, 10), (5, 15), (20, 30), (30, 31)]), 26);
        assert_eq!(union_ns(vec![]), 0);
    }

    #[test]
    fn hta_rounding_can_make_tiny_ops_negative_and_merging_keeps_the_sign() {
        // 10.2..10.7 µs rounds to 11..10: a negative interval, which HTA's merge sums as is.
        assert_eq!(merge(vec![(11_000, 10_000), (20_000, 25_000)]), (4_000, 11_000, 25_000));
    }

    #[test]
    fn kernel_kinds_follow_hta() {
        assert!(is_compute_kernel("void gemm_kernel<float>(...)"));
        assert!(!is_compute_kernel("ncclKernel_AllReduce_RING_LL_Sum_float"));
        assert!(!is_compute_kernel("Memcpy DtoD (Device -> Device)"));
        assert!(!is_compute_kernel("Memset (Device)"));
        assert!(!is_compute_kernel("cudaStreamSync helper"));
    }

    #[test]
    fn idle_compute_and_non_compute_add_up_to_the_span() {
        let k = |s, e| RawEvent::new(EventKind::Kernel, 0, s, e);
        let mut h = Hta::new(false, None);
        h.op(&k(0, 100), None, true);
        h.op(&k(50, 200), None, false);
        h.op(&k(300, 400), None, true);
        h.op(&RawEvent::new(EventKind::Memcpy, 0, 450, 500), None, false);
        let (b, _) = h.finish();
        assert_eq!((b.span_ns, b.idle_ns, b.compute_ns, b.non_compute_ns), (500, 150, 200, 150));
    }
}
