//! `cuda_gpu_kern_gb_sum`, as `nsys stats` names it: kernel time by name and launch configuration (grid and block
//! dimensions), so that one kernel launched with shapes that differ (a padded and an unpadded batch, a tail
//! block) shows each shape's time.

use super::dist::Dist;
use crate::table::Table;
use cuflight_format::event::LaunchConfig;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KernGridRow {
    pub name: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub count: u64,
    pub total_ns: u64,
    pub avg_ns: u64,
    pub median_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub stddev_ns: u64,
    /// Share of the table's total time, in percent.
    pub percent: f64,
}

/// (process, name id, packed grid x/y, packed grid z and block) → durations.
#[derive(Default)]
pub struct KernGridAcc(FxHashMap<(u32, u32, u64, u64), Dist>);

impl KernGridAcc {
    pub fn feed(&mut self, key: u32, e: &RawEvent) {
        if e.kind() == Some(EventKind::Kernel) {
            // A kernel's `a` and `b` hold its grid and block ([`LaunchConfig::pack`]).
            self.0.entry((key, e.name, e.a, e.b)).or_default().add(e.duration());
        }
    }

    pub fn finish(self, processes: &BTreeMap<u32, Process>) -> Vec<KernGridRow> {
        let mut merged: HashMap<(String, [u32; 3], [u32; 3]), Dist> = HashMap::new();
        for ((key, name, a, b), d) in self.0 {
            let Some(p) = processes.get(&key) else { continue };
            let c = LaunchConfig::unpack(a, b, 0);
            merged.entry((p.string(name).to_string(), c.grid, c.block)).or_default().merge(&d);
        }
        let all: u64 = merged.values().map(|d| d.total).sum();
        let mut rows: Vec<KernGridRow> = merged
            .into_iter()
            .map(|((name, grid, block), d)| KernGridRow {
                name,
                grid,
                block,
                count: d.count,
                total_ns: d.total,
                avg_ns: d.avg(),
                median_ns: d.median(),
                min_ns: d.min,
                max_ns: d.max,
                stddev_ns: d.stddev(),
                percent: if all == 0 { 0.0 } else { 100.0 * d.total as f64 / all as f64 },
            })
            .collect();
        rows.sort_by(|a, b| {
            b.total_ns.cmp(&a.total_ns).then_with(|| (&a.name, a.grid, a.block).cmp(&(&b.name, b.grid, b.block)))
        });
        rows
    }
}

/// The terminal and CSV table, with nsys's column names.
pub fn table(rows: &[KernGridRow]) -> Table {
    let mut t = Table::new(
        "CUDA kernels by launch configuration [cuda_gpu_kern_gb_sum]",
        &[
            "Time (%)",
            "Total Time (ns)",
            "Instances",
            "Avg (ns)",
            "Med (ns)",
            "Min (ns)",
            "Max (ns)",
            "StdDev (ns)",
            "GridXYZ",
            "BlockXYZ",
            "Name",
        ],
    );
    let xyz = |v: [u32; 3]| format!("{} {} {}", v[0], v[1], v[2]);
    for r in rows {
        t.row(vec![
            format!("{:.1}", r.percent),
            r.total_ns.to_string(),
            r.count.to_string(),
            r.avg_ns.to_string(),
            r.median_ns.to_string(),
            r.min_ns.to_string(),
            r.max_ns.to_string(),
            r.stddev_ns.to_string(),
            xyz(r.grid),
            xyz(r.block),
            r.name.clone(),
        ]);
    }
    t
}
