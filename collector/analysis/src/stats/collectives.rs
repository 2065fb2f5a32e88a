//! Communication kernels' GPU time by the collective each ran (cuflight's table: nsys has none): what the host's
//! range around its launch asked for (PyTorch's `nccl:all_reduce`, NCCL's NVTX `ncclAllReduce`), else what the
//! kernel's name says ([`cuflight_trace::model::collectives`], the report's rule). NCCL 2.1x runs collectives that
//! have no kernel of their own on `ncclKernel_SendRecv_*`, so the kernel table alone cannot say where communication
//! time goes.
//!
//! Ranges recorded as NVTX push/pop close after the kernels launched inside them, so each communication kernel is
//! kept (with its launch) until the end and resolved then: a few per collective, at most [`MAX_KERNELS`].

use super::dist::Dist;
use super::{DurationRow, Durations};
use crate::table::Table;
use cuflight_format::RawEvent;
use cuflight_trace::model::collectives::{self, Collective, CollectiveSpans, Message};
use cuflight_trace::model::kernel_category::is_collective_kernel;
use cuflight_trace::model::launches::Call;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Communication kernels kept to resolve at the end, all processes together (40 bytes each: a job directory of
/// many ranks shares it); past it, they are read by their names alone.
pub const MAX_KERNELS: usize = 1 << 20;

/// The row of kernels neither a range nor their name told.
pub const NOT_TOLD: &str = "not told (no annotation around its launch in the trace; its name carries any collective)";

/// A communication kernel kept to resolve: its name, duration and its launch call's (thread, start, end).
type CommKernel = (u32, u64, Option<(u32, u64, u64)>);

/// One collective's communication kernels.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct CollectiveRow {
    /// all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send/recv, or not told.
    pub name: String,
    #[serde(flatten)]
    pub time: Durations,
    /// Share of all communication kernels' time, in percent.
    pub percent: f64,
    /// Kernels whose message the host's record gave (PyTorch 2.x's `record_param_comms`: sizes, dtype, group).
    pub sized: u64,
    /// Their messages summed, as nccl-tests sizes them (an all-gather's output, a reduce-scatter's input).
    pub bytes: u64,
    /// Algorithm bandwidth: those bytes over those kernels' time, GB/s (None without any). A lower bound: a
    /// kernel's time includes its wait for the other ranks to arrive.
    pub algbw_gbps: Option<f64>,
    /// Bus bandwidth (nccl-tests'): the algorithm bandwidth times the collective's factor for its ranks, what each
    /// link carried, comparable with the interconnect's peak.
    pub busbw_gbps: Option<f64>,
    /// The ranks taking part, where every sized kernel's group had as many.
    pub ranks: Option<u32>,
}

/// One collective's kernels' durations and messages.
#[derive(Default)]
struct Tally {
    time: Dist,
    sized: u64,
    bytes: u64,
    sized_ns: u64,
    /// Busbw numerator: each sized kernel's bytes times its factor.
    bus_bytes: f64,
    ranks: Option<Option<u32>>,
}

impl Tally {
    fn add(&mut self, c: Option<Collective>, duration: u64, message: Option<Message>) {
        self.time.add(duration);
        let (Some(c), Some(m)) = (c, message) else { return };
        self.sized += 1;
        self.bytes = self.bytes.saturating_add(m.bytes);
        self.sized_ns += duration;
        self.bus_bytes += m.bytes as f64 * c.bus_factor(m.ranks);
        self.ranks = Some(match self.ranks {
            None => Some(m.ranks),
            Some(r) => r.filter(|&r| r == m.ranks),
        });
    }

    fn row(&self, name: String, all: u64) -> CollectiveRow {
        let gbps = |bytes: f64| (self.sized_ns > 0).then(|| bytes / self.sized_ns as f64);
        let DurationRow { time, percent, .. } = DurationRow::of(String::new(), &self.time, all);
        CollectiveRow {
            name,
            time,
            percent,
            sized: self.sized,
            bytes: self.bytes,
            algbw_gbps: gbps(self.bytes as f64),
            busbw_gbps: gbps(self.bus_bytes),
            ranks: self.ranks.flatten(),
        }
    }
}

/// One process's ranges and communication kernels.
#[derive(Default)]
struct PerProcess {
    spans: CollectiveSpans,
    /// Per string id: whether a kernel of that name is a collective's; what a range of that name announces; what
    /// a `record_param_comms` argument text says.
    kernel_names: FxHashMap<u32, bool>,
    range_names: FxHashMap<u32, Option<Collective>>,
    params: FxHashMap<u32, Option<(Collective, Option<Message>)>>,
    kernels: Vec<CommKernel>,
    by_name_only: FxHashMap<Option<Collective>, Dist>,
}

#[derive(Default)]
pub struct CollectivesAcc {
    per: FxHashMap<u32, PerProcess>,
    kept: usize,
}

/// A host range: (thread, start, end, name, its operator's argument text: a string id, 0 none).
pub type HostRange = (u32, u64, u64, u32, u32);

impl CollectivesAcc {
    /// A host range of process `key` (an import's range, or an NVTX pair once closed).
    pub fn range(&mut self, key: u32, p: &Process, (tid, start, end, name, text): HostRange) {
        let pp = self.per.entry(key).or_default();
        let announced = *pp.range_names.entry(name).or_insert_with(|| collectives::of_range(p.string(name)));
        if let Some(c) = announced {
            pp.spans.add(tid, (start, end), c, None);
        } else if text != 0 && p.string(name) == "record_param_comms" {
            let said = *pp.params.entry(text).or_insert_with(|| collectives::of_params(p.string(text)));
            if let Some((c, message)) = said {
                pp.spans.add(tid, (start, end), c, message);
            }
        }
    }

    /// A kernel of process `key`, with the call that launched it where the trace holds it.
    pub fn kernel(&mut self, key: u32, p: &Process, e: &RawEvent, call: Option<&Call>) {
        let pp = self.per.entry(key).or_default();
        if !*pp.kernel_names.entry(e.name).or_insert_with(|| is_collective_kernel(p.string(e.name))) {
            return;
        }
        if self.kept < MAX_KERNELS {
            self.kept += 1;
            pp.kernels.push((e.name, e.duration(), call.map(|c| (c.tid, c.start, c.end))));
        } else {
            pp.by_name_only.entry(collectives::of_kernel(p.string(e.name))).or_default().add(e.duration());
        }
    }

    /// The rows, largest first, their shares of all communication time; none where no collective ran.
    pub fn finish(self, processes: &BTreeMap<u32, Process>) -> Vec<CollectiveRow> {
        let mut by: HashMap<Option<Collective>, Tally> = HashMap::new();
        for (key, mut pp) in self.per {
            let Some(p) = processes.get(&key) else { continue };
            pp.spans.finish();
            for (name, duration, launch) in pp.kernels {
                let around = launch.and_then(|(tid, start, end)| pp.spans.around_with_message(tid, (start, end)));
                let (told, message) = match around {
                    Some((c, m)) => (Some(c), m),
                    None => (collectives::of_kernel(p.string(name)), None),
                };
                by.entry(told).or_default().add(told, duration, message);
            }
            for (told, d) in pp.by_name_only {
                by.entry(told).or_default().time.merge(&d);
            }
        }
        let all: u64 = by.values().map(|t| t.time.total).sum();
        let label = |c: Option<Collective>| c.map_or(NOT_TOLD, Collective::label).to_string();
        let mut rows: Vec<CollectiveRow> = by.iter().map(|(c, t)| t.row(label(*c), all)).collect();
        rows.sort_by(|a, b| b.time.total_ns.cmp(&a.time.total_ns).then_with(|| a.name.cmp(&b.name)));
        rows
    }
}

/// The `collectives` report's table.
pub fn table(rows: &[CollectiveRow]) -> Table {
    let columns = [
        &super::columns::DURATION_COLUMNS[..],
        &["Sized", "Bytes", "AlgBW (GB/s)", "BusBW (GB/s)", "Ranks", "Collective"],
    ]
    .concat();
    let mut t = Table::new(
        "Communication kernels by collective (GPU time; each told by the host's annotation around its launch, else \
         by its name; bandwidths over the kernels whose record gave their message, lower bounds: a kernel's time \
         includes its wait for the other ranks) [collectives]",
        &columns,
    );
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for r in rows {
        let mut cells = vec![format!("{:.1}", r.percent)];
        cells.extend(r.time.cells());
        cells.extend([
            r.sized.to_string(),
            r.bytes.to_string(),
            or_dash(r.algbw_gbps.map(|g| format!("{g:.2}"))),
            or_dash(r.busbw_gbps.map(|g| format!("{g:.2}"))),
            or_dash(r.ranks.map(|n| n.to_string())),
            r.name.clone(),
        ]);
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::NOT_TOLD;
    use crate::stats::tests::trace_of;
    use crate::stats::Stats;
    use cuflight_format::{EventKind, RawEvent};

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
        let events = vec![
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
        let rows = Stats::compute(&trace_of(events, &strings)).collectives;
        let got: Vec<(&str, u64, u64)> =
            rows.iter().map(|r| (r.name.as_str(), r.time.count, r.time.total_ns)).collect();
        assert_eq!(got, [("all_reduce", 1, 60), ("all_gather", 1, 30), (NOT_TOLD, 1, 20)]);
        assert!((rows[0].percent - 60.0 / 110.0 * 100.0).abs() < 1e-9);
    }

    /// PyTorch 2.x's `record_param_comms` around the launch gives the message: nccl-tests' bandwidths.
    #[test]
    fn a_sized_collective_gets_its_bandwidths() {
        let strings = [
            (1, "cudaLaunchKernel"),
            (2, "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"),
            (3, "record_param_comms"),
            (
                4,
                r#""Collective name":"allreduce","In msg nelems":1000000,"Out msg nelems":1000000,"dtype":"BFloat16","Group size":8"#,
            ),
            (5, "nccl:all_reduce"),
        ];
        let events = vec![
            RawEvent { name: 3, b: 4, ..RawEvent::new(EventKind::Range, 7, 100, 400) },
            RawEvent { name: 5, ..RawEvent::new(EventKind::Range, 7, 110, 300) },
            RawEvent { name: 1, correlation: 1, ..RawEvent::new(EventKind::Api, 7, 150, 160) },
            RawEvent { name: 2, correlation: 1, stream: 3, ..RawEvent::new(EventKind::Kernel, 0, 200, 20_200) },
        ];
        let rows = Stats::compute(&trace_of(events, &strings)).collectives;
        let r = &rows[0];
        assert_eq!((r.name.as_str(), r.sized, r.bytes, r.ranks), ("all_reduce", 1, 2_000_000, Some(8)));
        // 2 MB in 20 µs: 100 GB/s, on the bus 2(n-1)/n = 1.75 times that.
        assert!((r.algbw_gbps.unwrap() - 100.0).abs() < 1e-9 && (r.busbw_gbps.unwrap() - 175.0).abs() < 1e-9);
    }
}
