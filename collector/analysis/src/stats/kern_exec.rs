//! `cuda_kern_exec_sum`, as `nsys stats` defines it: each kernel with the call that launched it, per (process,
//! thread, device, launching call, kernel name). For every kernel joined to its call (`LaunchJoin`, the join
//! every output uses): the call's own time (API), the time from the call's return to the kernel's start (queue:
//! only kernels that started at or after their call returned count, as QCount; a kernel the GPU started while the
//! call was still running waited in no queue), the kernel's run (kernel) and the whole, from the call's start to
//! whichever of the call and the kernel ended last (total). A queue time near zero with a long API time is a host
//! that cannot get ahead of the GPU; a long queue is a host that is ahead. [`LaunchTimes`] is the one rule, which
//! `cuda_kern_exec_trace` prints launch by launch. Rows are ordered by average total time, longest first, as
//! nsys orders them.

use super::dist::Dist;
use crate::table::Table;
use cuflight_format::RawEvent;
use cuflight_trace::model::launches::Call;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The phases of one kernel's launch, in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchTimes {
    pub api: u64,
    /// From the call's return to the kernel's start; None when the kernel started before the call returned.
    pub queue: Option<u64>,
    pub kernel: u64,
    /// From the call's start to the later of the call's and the kernel's end (the phases may overlap).
    pub total: u64,
}

impl LaunchTimes {
    pub fn of(call: &Call, kernel: &RawEvent) -> LaunchTimes {
        LaunchTimes {
            api: call.end.saturating_sub(call.start),
            queue: kernel.start.checked_sub(call.end),
            kernel: kernel.duration(),
            total: call.end.max(kernel.end).saturating_sub(call.start),
        }
    }
}

/// One (process, thread, device, launching call, kernel) group's launches.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct KernExecRow {
    /// The process.
    pub pid: u32,
    /// The thread that made the launching calls.
    pub tid: u32,
    /// The device the kernels ran on.
    pub device: u32,
    /// The launching call (cudaLaunchKernel, cuLaunchKernelEx, ...).
    pub api: String,
    /// The kernel's name.
    pub kernel: String,
    /// Kernels joined to their launch in the group.
    pub count: u64,
    /// Kernels that started at or after their call returned.
    pub queue_count: u64,
    /// From the call's start to the later of the call's and the kernel's end.
    pub total: Spread,
    /// The launching call's own duration.
    pub api_time: Spread,
    /// Over the `queue_count` kernels that queued.
    pub queue: Spread,
    /// The kernel's duration on the device.
    pub kernel_time: Spread,
}

/// Average, median, least, most and sample standard deviation, in ns.
#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Spread {
    /// The mean.
    pub avg_ns: u64,
    /// The median.
    pub median_ns: u64,
    /// The least.
    pub min_ns: u64,
    /// The most.
    pub max_ns: u64,
    /// The sample standard deviation.
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

/// (process, thread, device, call name id, kernel name id): what nsys groups by.
type GroupKey = (u32, u32, u32, u32, u32);

#[derive(Default)]
pub struct KernExecAcc {
    groups: FxHashMap<GroupKey, PairAcc>,
}

impl KernExecAcc {
    /// A kernel of process `key` joined to its launch (by the stats pass's one [`cuflight_trace::model::launches::LaunchJoin`]).
    pub fn kernel(&mut self, key: u32, e: &RawEvent, call: &Call) {
        let t = LaunchTimes::of(call, e);
        let acc = self.groups.entry((key, call.tid, e.device, call.name, e.name)).or_default();
        acc.total.add(t.total);
        acc.api.add(t.api);
        if let Some(q) = t.queue {
            acc.queue.add(q);
        }
        acc.kernel.add(t.kernel);
    }

    /// Rows by (pid, thread, device, call, kernel), longest average total first.
    pub fn finish(self, processes: &BTreeMap<u32, Process>, kernel_names: super::KernelNames) -> Vec<KernExecRow> {
        // Processes of several files may share a pid (ranks on two hosts): their groups merge, as their names do.
        let mut merged: HashMap<(u32, u32, u32, String, String), PairAcc> = HashMap::new();
        for ((key, tid, device, call, kernel), acc) in self.groups {
            let Some(p) = processes.get(&key) else { continue };
            let names = (p.string(call).to_string(), kernel_names.of(p, kernel).to_string());
            let row = merged.entry((p.info.pid, tid, device, names.0, names.1)).or_default();
            row.total.merge(&acc.total);
            row.api.merge(&acc.api);
            row.queue.merge(&acc.queue);
            row.kernel.merge(&acc.kernel);
        }
        let mut rows: Vec<KernExecRow> = merged
            .into_iter()
            .map(|((pid, tid, device, api, kernel), a)| KernExecRow {
                pid,
                tid,
                device,
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
        rows.sort_by(|a, b| {
            (b.total.avg_ns, &a.kernel, &a.api, a.pid, a.tid, a.device).cmp(&(
                a.total.avg_ns,
                &b.kernel,
                &b.api,
                b.pid,
                b.tid,
                b.device,
            ))
        });
        rows
    }
}

/// The terminal and CSV table, with nsys's column names (all of them: its table prints min and deviation too).
pub fn table(rows: &[KernExecRow]) -> Table {
    #[rustfmt::skip]
    let headers = [
        "PID", "TID", "DevId", "Count", "QCount",
        "TAvg (ns)", "TMed (ns)", "TMin (ns)", "TMax (ns)", "TStdDev (ns)",
        "AAvg (ns)", "AMed (ns)", "AMin (ns)", "AMax (ns)", "AStdDev (ns)",
        "QAvg (ns)", "QMed (ns)", "QMin (ns)", "QMax (ns)", "QStdDev (ns)",
        "KAvg (ns)", "KMed (ns)", "KMin (ns)", "KMax (ns)", "KStdDev (ns)",
        "API Name", "Kernel Name",
    ];
    let mut t = Table::new("CUDA kernel launch and execution time [cuda_kern_exec_sum]", &headers);
    for r in rows {
        let mut cells = vec![
            r.pid.to_string(),
            r.tid.to_string(),
            r.device.to_string(),
            r.count.to_string(),
            r.queue_count.to_string(),
        ];
        for s in [&r.total, &r.api_time, &r.queue, &r.kernel_time] {
            cells.extend([s.avg_ns, s.median_ns, s.min_ns, s.max_ns, s.stddev_ns].map(|v| v.to_string()));
        }
        cells.extend([r.api.clone(), r.kernel.clone()]);
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::EventKind;

    fn at(kind: EventKind, start: u64, end: u64, name: u32, correlation: u32) -> RawEvent {
        let mut e = RawEvent::new(kind, 1, start, end);
        e.name = name;
        e.correlation = correlation;
        e
    }

    /// A kernel that starts at or after its call returned queued from the return to its start; one the GPU
    /// started during the call queued for nothing and is left out of QCount; the whole runs to whichever ended
    /// last (nsys's `max(r.end, k.end) - r.start`).
    #[test]
    fn api_queue_and_kernel_times_of_each_launch() {
        let mut p = Process::default();
        for (id, s) in [(1, "cudaLaunchKernel"), (2, "gemm")] {
            p.strings.insert(id, s.to_string());
        }
        let (mut acc, mut join) = (KernExecAcc::default(), cuflight_trace::model::launches::LaunchJoin::default());
        let events = [
            at(EventKind::Api, 100, 110, 1, 7),
            at(EventKind::Api, 200, 210, 1, 8),
            at(EventKind::Kernel, 150, 190, 2, 7), // queued 40 after the call's end at 110, ran 40
            at(EventKind::Kernel, 205, 305, 2, 8), // started inside its call: no queue
            at(EventKind::Api, 400, 450, 1, 9),
            at(EventKind::Kernel, 450, 460, 2, 9), // started as its call returned: queued 0
            at(EventKind::Api, 500, 600, 1, 10),
            at(EventKind::Kernel, 510, 520, 2, 10), // ended inside its call: the whole is the call
        ];
        for e in &events {
            if e.kind() == Some(EventKind::Api) {
                join.api(&p, e);
            } else if let Some(j) = join.work(e) {
                acc.kernel(3, e, &j.call);
            }
        }
        let rows = acc.finish(&BTreeMap::from([(3, p)]), super::super::KernelNames::Full);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.api.as_str(), r.kernel.as_str(), r.count, r.queue_count), ("cudaLaunchKernel", "gemm", 4, 2));
        assert_eq!((r.api_time.min_ns, r.api_time.max_ns, r.queue.min_ns, r.queue.max_ns), (10, 100, 0, 40));
        assert_eq!((r.kernel_time.min_ns, r.kernel_time.max_ns), (10, 100));
        assert_eq!((r.total.min_ns, r.total.max_ns), (60, 105));
        assert_eq!((r.pid, r.tid, r.device), (0, 1, 0));
    }
}
