//! `cuda_kern_exec_sum`, as `nsys stats` names it: each kernel with the call that launched it, per (launching
//! call, kernel name). For every kernel joined to its call ([`LaunchJoin`], the join every output uses): the
//! call's own time (API), the time from the call's return to the kernel's start (queue: only kernels that
//! started after their call returned count, as QCount; a kernel the GPU started while the call was still running
//! waited in no queue), the kernel's run (kernel) and the whole, from the call's start to the kernel's end
//! (total). A queue time near zero with a long API time is a host that cannot get ahead of the GPU; a long queue
//! is a host that is ahead.

use super::dist::Dist;
use crate::table::Table;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::launches::LaunchJoin;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One (launching call, kernel) pair's launches.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KernExecRow {
    pub api: String,
    pub kernel: String,
    pub count: u64,
    /// Kernels that started after their call returned.
    pub queue_count: u64,
    pub total: Spread,
    pub api_time: Spread,
    /// Over the `queue_count` kernels that queued.
    pub queue: Spread,
    pub kernel_time: Spread,
}

/// Average, median, least, most and sample standard deviation, in ns.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Spread {
    pub avg_ns: u64,
    pub median_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub stddev_ns: u64,
}

impl From<&Dist> for Spread {
    fn from(d: &Dist) -> Spread {
        let min_ns = if d.count == 0 { 0 } else { d.min };
        Spread { avg_ns: d.avg(), median_ns: d.median(), min_ns, max_ns: d.max, stddev_ns: d.stddev() }
    }
}

#[derive(Default)]
struct PairAcc {
    total: Dist,
    api: Dist,
    queue: Dist,
    kernel: Dist,
}

#[derive(Default)]
pub struct KernExecAcc {
    joins: FxHashMap<u32, LaunchJoin>,
    /// (process, call name id, kernel name id) → its launches.
    pairs: FxHashMap<(u32, u32, u32), PairAcc>,
}

impl KernExecAcc {
    /// One event of process `key`, in time order.
    pub fn feed(&mut self, key: u32, p: &Process, e: &RawEvent) {
        let join = self.joins.entry(key).or_default();
        match e.kind() {
            Some(EventKind::Api) => {
                join.api(p, e);
            }
            Some(EventKind::Kernel) => {
                let Some(j) = join.work(e) else { return };
                let call = j.call;
                let acc = self.pairs.entry((key, call.name, e.name)).or_default();
                acc.total.add(e.end.saturating_sub(call.start));
                acc.api.add(call.end.saturating_sub(call.start));
                if e.start > call.end {
                    acc.queue.add(e.start - call.end);
                }
                acc.kernel.add(e.duration());
            }
            // Copies and memsets join too, so that a later kernel with a reused id is not taken for theirs.
            Some(EventKind::Memcpy | EventKind::Memset) => {
                join.work(e);
            }
            _ => {}
        }
    }

    /// Rows by (call, kernel) name across processes, most total time first.
    pub fn finish(self, processes: &BTreeMap<u32, Process>) -> Vec<KernExecRow> {
        let mut merged: HashMap<(String, String), PairAcc> = HashMap::new();
        for ((key, call, kernel), acc) in self.pairs {
            let Some(p) = processes.get(&key) else { continue };
            let row = merged.entry((p.string(call).to_string(), p.string(kernel).to_string())).or_default();
            row.total.merge(&acc.total);
            row.api.merge(&acc.api);
            row.queue.merge(&acc.queue);
            row.kernel.merge(&acc.kernel);
        }
        let mut rows: Vec<KernExecRow> = merged
            .into_iter()
            .map(|((api, kernel), a)| KernExecRow {
                api,
                kernel,
                count: a.kernel.count,
                queue_count: a.queue.count,
                total: (&a.total).into(),
                api_time: (&a.api).into(),
                queue: (&a.queue).into(),
                kernel_time: (&a.kernel).into(),
            })
            .collect();
        let total = |r: &KernExecRow| r.total.avg_ns.saturating_mul(r.count);
        rows.sort_by(|a, b| total(b).cmp(&total(a)).then_with(|| (&a.kernel, &a.api).cmp(&(&b.kernel, &b.api))));
        rows
    }
}

/// The terminal and CSV table, with nsys's column names.
pub fn table(rows: &[KernExecRow]) -> Table {
    let mut t = Table::new(
        "CUDA kernel launch and execution time [cuda_kern_exec_sum]",
        &[
            "Count",
            "QCount",
            "TAvg (ns)",
            "TMed (ns)",
            "TMax (ns)",
            "AAvg (ns)",
            "AMed (ns)",
            "AMax (ns)",
            "QAvg (ns)",
            "QMed (ns)",
            "QMax (ns)",
            "KAvg (ns)",
            "KMed (ns)",
            "KMax (ns)",
            "API Name",
            "Kernel Name",
        ],
    );
    for r in rows {
        let mut cells = vec![r.count.to_string(), r.queue_count.to_string()];
        for s in [&r.total, &r.api_time, &r.queue, &r.kernel_time] {
            cells.extend([s.avg_ns.to_string(), s.median_ns.to_string(), s.max_ns.to_string()]);
        }
        cells.extend([r.api.clone(), r.kernel.clone()]);
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(kind: EventKind, start: u64, end: u64, name: u32, correlation: u32) -> RawEvent {
        let mut e = RawEvent::new(kind, 1, start, end);
        e.name = name;
        e.correlation = correlation;
        e
    }

    /// A kernel that starts after its call returned queued from the return to its start; one the GPU started
    /// during the call queued for nothing and is left out of QCount.
    #[test]
    fn api_queue_and_kernel_times_of_each_launch() {
        let mut p = Process::default();
        for (id, s) in [(1, "cudaLaunchKernel"), (2, "gemm")] {
            p.strings.insert(id, s.to_string());
        }
        let mut acc = KernExecAcc::default();
        let events = [
            at(EventKind::Api, 100, 110, 1, 7),
            at(EventKind::Api, 200, 210, 1, 8),
            at(EventKind::Kernel, 150, 190, 2, 7), // queued 40 after the call's end at 110, ran 40
            at(EventKind::Kernel, 205, 305, 2, 8), // started inside its call: no queue
        ];
        for e in &events {
            acc.feed(3, &p, e);
        }
        let rows = acc.finish(&BTreeMap::from([(3, p)]));
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.api.as_str(), r.kernel.as_str(), r.count, r.queue_count), ("cudaLaunchKernel", "gemm", 2, 1));
        assert_eq!((r.api_time.avg_ns, r.queue.avg_ns, r.queue.max_ns), (10, 40, 40));
        assert_eq!((r.kernel_time.min_ns, r.kernel_time.max_ns), (40, 100));
        assert_eq!((r.total.min_ns, r.total.max_ns), (90, 105));
    }
}
