//! `cuda_gpu_kern_gb_sum`, as `nsys stats` names it: kernel time by name and launch configuration (grid and block
//! dimensions), so that one kernel launched with shapes that differ (a padded and an unpadded batch, a tail
//! block) shows each shape's time.

use super::dist::Dist;
use super::DurationRow;
use crate::table::Table;
use cuflight_format::event::LaunchConfig;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One kernel name and launch configuration: its time as a [`DurationRow`] (the JSON keys of `kernels`) with the
/// grid and block beside them.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct KernGridRow {
    /// The grid's blocks in x, y, z.
    pub grid: [u32; 3],
    /// The block's threads in x, y, z.
    pub block: [u32; 3],
    #[serde(flatten)]
    pub kernel: DurationRow,
}

/// (process, name id, packed grid x/y, packed grid z and block) → durations.
#[derive(Default)]
pub struct KernGridAcc(FxHashMap<(u32, u32, u64, u64), Dist>);

impl KernGridAcc {
    pub fn feed(&mut self, key: u32, e: &RawEvent) {
        if e.kind() == Some(EventKind::Kernel) {
            // Grid and block (and not shared memory): the key's first two words.
            let [grid, block, _] = e.launch_key();
            self.0.entry((key, e.name, grid, block)).or_default().add(e.duration());
        }
    }

    pub fn finish(self, processes: &BTreeMap<u32, Process>, names: super::KernelNames) -> Vec<KernGridRow> {
        let mut merged: HashMap<(String, [u32; 3], [u32; 3]), Dist> = HashMap::new();
        for ((key, name, a, b), d) in self.0 {
            let Some(p) = processes.get(&key) else { continue };
            let c = LaunchConfig::unpack(a, b, 0);
            merged.entry((names.of(p, name).to_string(), c.grid, c.block)).or_default().merge(&d);
        }
        let all: u64 = merged.values().map(|d| d.total).sum();
        let mut rows: Vec<KernGridRow> = merged
            .into_iter()
            .map(|((name, grid, block), d)| KernGridRow { grid, block, kernel: DurationRow::of(name, &d, all) })
            .collect();
        rows.sort_by(|a, b| {
            (b.kernel.time.total_ns, &a.kernel.name, a.grid, a.block).cmp(&(
                a.kernel.time.total_ns,
                &b.kernel.name,
                b.grid,
                b.block,
            ))
        });
        rows
    }
}

/// The terminal and CSV table, with nsys's column names.
pub fn table(rows: &[KernGridRow]) -> Table {
    let columns = [&super::columns::DURATION_COLUMNS[..], &["GridXYZ", "BlockXYZ", "Name"]].concat();
    let mut t = Table::new("CUDA kernels by launch configuration [cuda_gpu_kern_gb_sum]", &columns);
    let xyz = |v: [u32; 3]| format!("{} {} {}", v[0], v[1], v[2]);
    for r in rows {
        let d = &r.kernel;
        let mut cells = vec![format!("{:.1}", d.percent)];
        cells.extend(d.time.cells());
        cells.extend([xyz(r.grid), xyz(r.block), d.name.clone()]);
        t.row(cells);
    }
    t
}
