//! `cuflight stats`: what `nsys stats` reports, from a cuflight trace: kernels, CUDA API calls, memcpy by kind
//! and host memory, memset, device and pinned memory, NVTX ranges and marks, synchronisation, drops, processes.

mod accumulate;

use crate::export::table::Table;
use crate::model::source::EventSource;
use crate::model::trace::{Process, Trace};
pub use accumulate::StatsAcc;
use serde::Serialize;

/// Count and duration summary of one name.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DurationRow {
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    pub avg_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Share of the table's total time, in percent.
    pub percent: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NvtxRow {
    pub domain: String,
    pub name: String,
    /// "range" or "mark".
    pub kind: &'static str,
    pub count: u64,
    pub total_ns: u64,
    pub avg_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemcpyRow {
    pub kind: String,
    /// Host side of the copy: pageable, pinned, managed; "device" when both sides are on the device.
    pub host_memory: String,
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
    pub gbps: f64,
    pub async_count: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemsetRow {
    pub kind: String,
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MemoryUse {
    pub malloc_count: u64,
    pub free_count: u64,
    pub alloc_bytes: u64,
    pub peak_bytes: u64,
    pub live_bytes_at_end: u64,
}

/// Device memory at top level (as the JSON schema promises), pinned host memory beside it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MemoryStats {
    #[serde(flatten)]
    pub device: MemoryUse,
    pub pinned_host: MemoryUse,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SyncRow {
    pub kind: String,
    pub count: u64,
    pub total_ns: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProcessRow {
    pub pid: u32,
    pub ppid: u32,
    pub command: String,
    pub host: String,
    pub cupti_version: u32,
    pub status: String,
    pub finished: bool,
    /// The agent was loaded into the running process (`attach --inject`): NVTX ranges come only from the
    /// libraries whose NVTX tables it found late (`nvtx_tables_late`); `nvtx_tables_foreign` were another tool's.
    pub injected_late: bool,
    pub nvtx_tables_late: u32,
    pub nvtx_tables_foreign: u32,
    /// Kernel launches of this process with no kernel record: for a process that ended without its final flush
    /// (SIGKILL, `_exit`), the device work lost with it (0 for a process that finished).
    pub launches_without_kernel: u64,
    /// For such a process: its flush period, the longest stretch of device records it can have lost.
    pub flush_period_ms: u32,
    pub events: u64,
    pub drops: cuflight_format::file::Drops,
    /// Threads that recorded nothing because shared memory for their ring could not be reserved.
    pub rings_refused: u64,
    /// Activity records kept out, by class: records too short to read, and records with zero or unfinished
    /// timestamps (e.g. from the forced flush at exit).
    pub records_unused: Vec<UnusedRow>,
    /// CUPTI buffers the agent allocated beyond its pool, and requests it refused at its cap.
    pub buffers_grown: u64,
    pub buffers_refused: u64,
    /// How device timestamps were put on the host clock: "monotonic" (CUPTI stamped CLOCK_MONOTONIC), "aligned"
    /// (piecewise-linear over the clock pairs), or "none" (no device work or no pair).
    pub device_clock: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UnusedRow {
    pub class: String,
    pub skipped: u64,
    pub incomplete: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceRow {
    pub pid: u32,
    pub device: u32,
    pub name: String,
    pub memory_bytes: u64,
    pub compute_capability: String,
    pub multiprocessors: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Stats {
    pub kernels: Vec<DurationRow>,
    pub api: Vec<DurationRow>,
    pub memcpy: Vec<MemcpyRow>,
    pub memset: Vec<MemsetRow>,
    pub memory: MemoryStats,
    pub nvtx: Vec<NvtxRow>,
    /// NVTX category names (`nvtxNameCategory*`), by domain and category id.
    pub nvtx_categories: Vec<NvtxCategoryRow>,
    /// CUDA graphs whose nodes ran: launches (distinct launch calls), kernels, their total time.
    pub graphs: Vec<GraphRow>,
    pub sync: Vec<SyncRow>,
    /// Total records lost, all causes and processes (see `processes[].drops`).
    pub dropped: u64,
    pub processes: Vec<ProcessRow>,
    pub devices: Vec<DeviceRow>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GraphRow {
    pub pid: u32,
    pub graph_id: u64,
    pub launches: u64,
    pub kernels: u64,
    pub nodes: u64,
    pub kernel_ns: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq, PartialOrd, Eq, Ord)]
pub struct NvtxCategoryRow {
    pub domain: String,
    pub category: u64,
    pub name: String,
}

impl Stats {
    /// The tables of a loaded trace.
    pub fn compute(trace: &Trace) -> Stats {
        let mut acc = StatsAcc::default();
        let mut merged: Vec<(u32, &Process, &cuflight_format::RawEvent)> =
            trace.processes.iter().flat_map(|(&k, p)| p.events.iter().map(move |e| (k, p, e))).collect();
        // The order of [`crate::model::source`]: start, then process key (a stable sort keeps file order within both).
        merged.sort_by_key(|(k, _, e)| (e.start, *k));
        for (k, p, e) in merged {
            acc.feed(k, p, e);
        }
        acc.finish(&trace.processes)
    }

    /// The tables of any trace, streamed: memory is bounded by the tables, not by the trace.
    pub fn compute_source(source: &mut EventSource) -> Result<Stats, crate::model::trace::TraceError> {
        let mut acc = StatsAcc::default();
        source.for_each(|k, p, e| acc.feed(k, p, e))?;
        Ok(acc.finish(&source.processes))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let dur = |title: &str, rows: &[DurationRow], out: &mut String| {
            let mut t = Table::new(
                title,
                &["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Min (ns)", "Max (ns)", "Name"],
            );
            for r in rows {
                t.row(vec![
                    format!("{:.1}", r.percent),
                    r.total_ns.to_string(),
                    r.count.to_string(),
                    r.avg_ns.to_string(),
                    r.min_ns.to_string(),
                    r.max_ns.to_string(),
                    r.name.clone(),
                ]);
            }
            t.render(out);
        };
        dur("CUDA kernels (GPU time)", &self.kernels, &mut out);
        dur("CUDA API calls (host time)", &self.api, &mut out);
        let mut t = Table::new(
            "Memory copies",
            &["Count", "Total (bytes)", "Total Time (ns)", "GB/s", "Async", "Host memory", "Kind"],
        );
        for r in &self.memcpy {
            t.row(vec![
                r.count.to_string(),
                r.bytes.to_string(),
                r.total_ns.to_string(),
                format!("{:.2}", r.gbps),
                r.async_count.to_string(),
                r.host_memory.clone(),
                r.kind.clone(),
            ]);
        }
        t.render(&mut out);
        let mut t = Table::new("Memsets", &["Count", "Total (bytes)", "Total Time (ns)", "Memory"]);
        for r in &self.memset {
            t.row(vec![r.count.to_string(), r.bytes.to_string(), r.total_ns.to_string(), r.kind.clone()]);
        }
        t.render(&mut out);
        let mut t = Table::new(
            "Memory",
            &["Allocs", "Frees", "Allocated (bytes)", "Peak (bytes)", "Live at end (bytes)", "Memory"],
        );
        for (name, m) in [("device", &self.memory.device), ("pinned host", &self.memory.pinned_host)] {
            t.row(vec![
                m.malloc_count.to_string(),
                m.free_count.to_string(),
                m.alloc_bytes.to_string(),
                m.peak_bytes.to_string(),
                m.live_bytes_at_end.to_string(),
                name.to_string(),
            ]);
        }
        t.render(&mut out);
        let mut t = Table::new("NVTX", &["Kind", "Count", "Total Time (ns)", "Avg (ns)", "Domain", "Name"]);
        for r in &self.nvtx {
            t.row(vec![
                r.kind.to_string(),
                r.count.to_string(),
                r.total_ns.to_string(),
                r.avg_ns.to_string(),
                r.domain.clone(),
                r.name.clone(),
            ]);
        }
        t.render(&mut out);
        let mut t = Table::new("Synchronization", &["Count", "Total Time (ns)", "Kind"]);
        for r in &self.sync {
            t.row(vec![r.count.to_string(), r.total_ns.to_string(), r.kind.clone()]);
        }
        t.render(&mut out);
        let mut t = Table::new("Processes", &["PID", "PPID", "CUPTI", "Events", "Dropped", "Finished", "Command"]);
        for p in &self.processes {
            let mut command = if p.status.is_empty() {
                p.command.clone()
            } else {
                format!("{} [agent off: {}]", p.command, p.status)
            };
            if p.rings_refused > 0 {
                command.push_str(&format!(" [{} threads got no ring: no shared memory]", p.rings_refused));
            }
            if p.drops.strings_full > 0 {
                command.push_str(&format!(" [{} names lost: string region full]", p.drops.strings_full));
            }
            for u in &p.records_unused {
                command
                    .push_str(&format!(" [{} records: {} skipped, {} unfinished]", u.class, u.skipped, u.incomplete));
            }
            if p.injected_late {
                command.push_str(&late_note(p.nvtx_tables_late, p.nvtx_tables_foreign));
            }
            t.row(vec![
                p.pid.to_string(),
                p.ppid.to_string(),
                p.cupti_version.to_string(),
                p.events.to_string(),
                p.drops.total().to_string(),
                match (p.finished, p.launches_without_kernel) {
                    (true, _) => "yes".to_string(),
                    (false, 0) => "no (killed?)".to_string(),
                    (false, n) => format!("no (killed?): {n} launches lost their kernel"),
                },
                command,
            ]);
        }
        t.render(&mut out);
        let mut t = Table::new("Devices", &["PID", "Device", "Memory (GiB)", "CC", "SMs", "Name"]);
        for d in &self.devices {
            t.row(vec![
                d.pid.to_string(),
                d.device.to_string(),
                format!("{:.1}", d.memory_bytes as f64 / (1u64 << 30) as f64),
                d.compute_capability.clone(),
                d.multiprocessors.to_string(),
                d.name.clone(),
            ]);
        }
        t.render(&mut out);
        out.push_str(&format!("\nDropped records: {}\n", self.dropped));
        out
    }
}

/// What an agent injected into a running process could do for NVTX, for the processes table.
fn late_note(found: u32, foreign: u32) -> String {
    let held = match foreign {
        0 => String::new(),
        1 => ", 1 held by another tool".into(),
        n => format!(", {n} held by other tools"),
    };
    match found {
        0 => format!(" [agent injected into the running process: no NVTX ranges{held}]"),
        1 => {
            format!(" [agent injected into the running process: NVTX ranges from the 1 library found using NVTX{held}]")
        }
        n => format!(
            " [agent injected into the running process: NVTX ranges from the {n} libraries found using NVTX{held}]"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::{EventKind, RawEvent};

    fn ev(kind: EventKind, tid: u32, t: u64) -> RawEvent {
        RawEvent::new(kind, tid, t, t)
    }

    fn trace_of(events: Vec<RawEvent>, strings: &[(u32, &str)]) -> Trace {
        let mut p = Process { events, ..Default::default() };
        p.strings = strings.iter().map(|(id, s)| (*id, s.to_string())).collect();
        p.events.sort_by_key(|e| e.start);
        let mut t = Trace::default();
        t.processes.insert(1, p);
        t
    }

    #[test]
    fn ranges_pair_across_threads_and_push_pop_per_thread() {
        let start = RawEvent { a: 9, name: 4, ..ev(EventKind::NvtxStart, 1, 100) };
        let end = RawEvent { a: 9, ..ev(EventKind::NvtxEnd, 2, 700) };
        let push_a = RawEvent { name: 8, ..ev(EventKind::NvtxPush, 1, 200) };
        let push_b = RawEvent { name: 8, ..ev(EventKind::NvtxPush, 2, 250) };
        let pop_a = ev(EventKind::NvtxPop, 1, 300);
        let pop_b = ev(EventKind::NvtxPop, 2, 650);
        // Stored as two per-thread rings would deliver them: thread 2's ring first.
        let t = trace_of(vec![push_b, pop_b, end, start, push_a, pop_a], &[(4, "handoff"), (8, "step")]);
        let s = Stats::compute(&t);
        let handoff = s.nvtx.iter().find(|r| r.name == "handoff").unwrap();
        assert_eq!((handoff.count, handoff.total_ns), (1, 600));
        let step = s.nvtx.iter().find(|r| r.name == "step").unwrap();
        assert_eq!((step.count, step.total_ns, step.min_ns, step.max_ns), (2, 500, 100, 400));
    }

    #[test]
    fn memory_replay_tracks_peak_and_live_bytes_by_kind() {
        use cuflight_format::event::MemKind;
        let alloc = |t, addr, bytes, kind: MemKind| RawEvent {
            a: addr,
            b: bytes,
            sub: kind as u8,
            ..ev(EventKind::Alloc, 1, t)
        };
        let free = |t, addr, kind: MemKind| RawEvent { a: addr, sub: kind as u8, ..ev(EventKind::Free, 1, t) };
        let t = trace_of(
            vec![
                alloc(1, 0x1000, 100, MemKind::Device),
                alloc(2, 0x2000, 50, MemKind::Device),
                free(3, 0x1000, MemKind::Device),
                alloc(4, 0x3000, 70, MemKind::DeviceAsync),
                alloc(5, 0x9000, 4096, MemKind::PinnedHost),
                free(6, 0xdead, MemKind::Device),
            ],
            &[],
        );
        let m = Stats::compute(&t).memory;
        assert_eq!((m.device.malloc_count, m.device.free_count), (3, 2));
        assert_eq!((m.device.peak_bytes, m.device.live_bytes_at_end, m.device.alloc_bytes), (150, 120, 220));
        assert_eq!((m.pinned_host.malloc_count, m.pinned_host.live_bytes_at_end), (1, 4096));
    }

    #[test]
    fn memcpy_rows_split_by_kind_and_host_memory() {
        let copy = |t, kind: u8, src: u64, dst: u64, bytes| RawEvent {
            sub: kind,
            a: bytes,
            b: src | dst << 8,
            ..RawEvent::new(EventKind::Memcpy, 0, t, t + 1000)
        };
        let t = trace_of(
            vec![copy(1, 1, 1, 3, 4000), copy(2, 1, 2, 3, 8000), copy(3, 1, 2, 3, 8000), copy(4, 2, 3, 1, 10)],
            &[],
        );
        let s = Stats::compute(&t);
        let find = |k: &str, h: &str| s.memcpy.iter().find(|r| r.kind == k && r.host_memory == h).unwrap().clone();
        assert_eq!((find("HtoD", "pinned").count, find("HtoD", "pinned").bytes), (2, 16000));
        assert_eq!(find("HtoD", "pageable").bytes, 4000);
        assert_eq!(find("DtoH", "pageable").count, 1);
        assert!((find("HtoD", "pinned").gbps - 8.0).abs() < 1e-9);
    }
}
