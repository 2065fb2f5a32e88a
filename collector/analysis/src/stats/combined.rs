//! nsys's combined summaries, the rows of other summaries side by side with a category, each row's share taken of
//! them all: `cuda_gpu_sum` (kernels and memory operations: the GPU's time, as `nvprof --print-gpu-summary`
//! printed it) and `cuda_api_gpu_sum` (CUDA API calls too). Rows are by name within a category, most time first.

use super::columns::DURATION_COLUMNS;
use super::DurationRow;
use crate::table::Table;
use serde::Serialize;

/// nsys's category names.
pub const KERNEL: &str = "CUDA_KERNEL";
pub const MEMORY: &str = "MEMORY_OPER";
pub const API: &str = "CUDA_API";

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct CombinedRow {
    /// CUDA_KERNEL, MEMORY_OPER or CUDA_API, as nsys's cuda_gpu_sum and cuda_api_gpu_sum say it.
    pub category: &'static str,
    /// `percent` is of every row of the combined table.
    #[serde(flatten)]
    pub operation: DurationRow,
}

/// The parts' rows, each with its category, shares of their sum.
pub fn combine(parts: &[(&'static str, &[DurationRow])]) -> Vec<CombinedRow> {
    let all: u64 = parts.iter().flat_map(|(_, rows)| rows.iter()).map(|r| r.time.total_ns).sum();
    let mut rows: Vec<CombinedRow> = parts
        .iter()
        .flat_map(|(category, rows)| rows.iter().map(move |r| (*category, r)))
        .map(|(category, r)| {
            let percent = if all == 0 { 0.0 } else { 100.0 * r.time.total_ns as f64 / all as f64 };
            CombinedRow { category, operation: DurationRow { percent, ..r.clone() } }
        })
        .collect();
    let key = |r: &CombinedRow| (r.operation.time.total_ns, r.category);
    rows.sort_by(|a, b| (key(b).0, key(a).1, &a.operation.name).cmp(&(key(a).0, key(b).1, &b.operation.name)));
    rows
}

/// The terminal and CSV table, with nsys's column names.
pub fn table(title: &str, rows: &[CombinedRow]) -> Table {
    let mut t = Table::new(title, &[&DURATION_COLUMNS[..], &["Category", "Operation"]].concat());
    for r in rows {
        let d = &r.operation;
        let mut cells = vec![format!("{:.1}", d.percent)];
        cells.extend(d.time.cells());
        cells.extend([r.category.to_string(), d.name.clone()]);
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, total_ns: u64, percent: f64) -> DurationRow {
        let time = crate::stats::Durations {
            count: 2,
            total_ns,
            avg_ns: total_ns / 2,
            median_ns: total_ns / 2,
            min_ns: 1,
            max_ns: total_ns,
            stddev_ns: 0,
        };
        DurationRow { name: name.into(), time, percent }
    }

    /// Each part's rows keep their figures; their shares are of the whole, and the whole is ordered by time.
    #[test]
    fn parts_share_one_whole() {
        let kernels = [row("gemm", 600, 75.0), row("relu", 200, 25.0)];
        let copies = [row("[CUDA memcpy Host-to-Device]", 200, 100.0)];
        let rows = combine(&[(KERNEL, &kernels), (MEMORY, &copies)]);
        let got: Vec<(&str, &str, f64)> =
            rows.iter().map(|r| (r.category, r.operation.name.as_str(), r.operation.percent)).collect();
        assert_eq!(
            got,
            [(KERNEL, "gemm", 60.0), (KERNEL, "relu", 20.0), (MEMORY, "[CUDA memcpy Host-to-Device]", 20.0)]
        );
        assert_eq!(rows[0].operation.time.median_ns, 300);
        assert!(combine(&[(API, &[])]).is_empty());
    }
}
