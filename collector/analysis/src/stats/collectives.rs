//! Communication kernels' GPU time by the collective each ran (cuflight's table: nsys has none): what the host's
//! range around its launch asked for (PyTorch's `nccl:all_reduce`, NCCL's NVTX `ncclAllReduce`), else what the
//! kernel's name says ([`cuflight_trace::model::collectives`], the report's rule). NCCL 2.1x runs collectives that
//! have no kernel of their own on `ncclKernel_SendRecv_*`, so the kernel table alone cannot say where communication
//! time goes.
//!
//! Ranges recorded as NVTX push/pop close after the kernels launched inside them, so each communication kernel is
//! kept (with its launch) until the end and resolved then: a few per collective, at most [`MAX_KERNELS`].

use super::dist::Dist;
use super::DurationRow;
use cuflight_format::RawEvent;
use cuflight_trace::model::collectives::{self, Collective, CollectiveSpans};
use cuflight_trace::model::kernel_category::is_collective_kernel;
use cuflight_trace::model::launches::Call;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};

/// Communication kernels kept per process to resolve at the end (40 bytes each); past it, they are read by their
/// names alone.
pub const MAX_KERNELS: usize = 1 << 20;

/// The row of kernels neither a range nor their name told.
pub const NOT_TOLD: &str = "not told (no annotation around its launch in the trace; its name carries any collective)";

/// A communication kernel kept to resolve: its name, duration and its launch call's (thread, start, end).
type CommKernel = (u32, u64, Option<(u32, u64, u64)>);

/// One process's ranges and communication kernels.
#[derive(Default)]
struct PerProcess {
    spans: CollectiveSpans,
    /// Per string id: whether a kernel of that name is a collective's; what a range of that name announces.
    kernel_names: FxHashMap<u32, bool>,
    range_names: FxHashMap<u32, Option<Collective>>,
    kernels: Vec<CommKernel>,
    by_name_only: FxHashMap<Option<Collective>, Dist>,
}

#[derive(Default)]
pub struct CollectivesAcc {
    per: FxHashMap<u32, PerProcess>,
}

impl CollectivesAcc {
    /// A host range of process `key` (an import's range, or an NVTX pair once closed).
    pub fn range(&mut self, key: u32, p: &Process, (tid, start, end, name): (u32, u64, u64, u32)) {
        let pp = self.per.entry(key).or_default();
        let announced = *pp.range_names.entry(name).or_insert_with(|| collectives::of_range(p.string(name)));
        if let Some(c) = announced {
            pp.spans.add(tid, start, end, c);
        }
    }

    /// A kernel of process `key`, with the call that launched it where the trace holds it.
    pub fn kernel(&mut self, key: u32, p: &Process, e: &RawEvent, call: Option<&Call>) {
        let pp = self.per.entry(key).or_default();
        if !*pp.kernel_names.entry(e.name).or_insert_with(|| is_collective_kernel(p.string(e.name))) {
            return;
        }
        if pp.kernels.len() < MAX_KERNELS {
            pp.kernels.push((e.name, e.duration(), call.map(|c| (c.tid, c.start, c.end))));
        } else {
            pp.by_name_only.entry(collectives::of_kernel(p.string(e.name))).or_default().add(e.duration());
        }
    }

    /// The rows, largest first, their shares of all communication time; none where no collective ran.
    pub fn finish(self, processes: &BTreeMap<u32, Process>) -> Vec<DurationRow> {
        let mut by: HashMap<Option<Collective>, Dist> = HashMap::new();
        for (key, mut pp) in self.per {
            let Some(p) = processes.get(&key) else { continue };
            pp.spans.finish();
            for (name, duration, launch) in pp.kernels {
                let around = launch.and_then(|(tid, start, end)| pp.spans.around(tid, (start, end)));
                let told = around.or_else(|| collectives::of_kernel(p.string(name)));
                by.entry(told).or_default().add(duration);
            }
            for (told, d) in pp.by_name_only {
                by.entry(told).or_default().merge(&d);
            }
        }
        let all: u64 = by.values().map(|d| d.total).sum();
        let label = |c: Option<Collective>| c.map_or(NOT_TOLD, Collective::label).to_string();
        let mut rows: Vec<DurationRow> = by.iter().map(|(c, d)| DurationRow::of(label(*c), d, all)).collect();
        rows.sort_by(|a, b| b.time.total_ns.cmp(&a.time.total_ns).then_with(|| a.name.cmp(&b.name)));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::NOT_TOLD;
    use crate::stats::Stats;
    use cuflight_format::{EventKind, RawEvent};
    use cuflight_trace::model::trace::{Process, Trace};

    /// NCCL's NVTX range closes after the kernel launched inside it started: the kernel is still told by it. A
    /// SendRecv kernel launched outside any is not told; a specialised kernel names its own.
    #[test]
    fn each_communication_kernel_is_told_by_the_range_around_its_launch() {
        let strings = [
            (1, "cudaLaunchKernel"),
            (2, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"),
            (3, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            (4, "ncclAllReduce"),
            (5, "gemm_kernel"),
        ];
        let api =
            |corr: u32, t: u64| RawEvent { name: 1, correlation: corr, ..RawEvent::new(EventKind::Api, 7, t, t + 10) };
        let kernel = |name: u32, corr: u32, t: u64, d: u64| RawEvent {
            name,
            correlation: corr,
            stream: 3,
            ..RawEvent::new(EventKind::Kernel, 0, t, t + d)
        };
        let mut events = vec![
            RawEvent { name: 4, ..RawEvent::new(EventKind::NvtxPush, 7, 100, 100) },
            api(1, 150),
            kernel(2, 1, 200, 60),
            RawEvent::new(EventKind::NvtxPop, 7, 300, 300),
            api(2, 400),
            kernel(2, 2, 420, 20),
            api(3, 500),
            kernel(3, 3, 520, 30),
            api(4, 600),
            kernel(5, 4, 620, 500),
        ];
        events.sort_by_key(|e| e.start);
        let mut p = Process { events, ..Default::default() };
        p.strings = strings.iter().map(|(id, s)| (*id, s.to_string())).collect();
        let mut t = Trace::default();
        t.processes.insert(1, p);
        let rows = Stats::compute(&t).collectives;
        let got: Vec<(&str, u64, u64)> =
            rows.iter().map(|r| (r.name.as_str(), r.time.count, r.time.total_ns)).collect();
        assert_eq!(got, [("all_reduce", 1, 60), ("all_gather", 1, 30), (NOT_TOLD, 1, 20)]);
        assert!((rows[0].percent - 60.0 / 110.0 * 100.0).abs() < 1e-9);
    }
}
