//! Device time by kind of work ([`cuflight_trace::model::kernel_category`]): kernels by their names' category,
//! the copy engines' transfers as memcpy, memsets as memset.

use super::{DurationRow, MemcpyRow, MemsetRow};
use cuflight_trace::model::kernel_category::{kernel_category, Category};
use serde::Serialize;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct CategoryRow {
    /// The kind of work: gemm, attention, convolution, normalization, softmax, elementwise, reduction, optimizer,
    /// communication, copy (copy kernels), other; memcpy and memset for the copies and memsets.
    pub category: &'static str,
    /// Kernels (or copies, memsets) of the kind.
    pub count: u64,
    /// Their device time, summed.
    pub total_ns: u64,
    /// Of all device time in the table.
    pub percent: f64,
}

/// One row per category with any time or count, largest first.
pub fn category_rows(kernels: &[DurationRow], memcpy: &[MemcpyRow], memset: &[MemsetRow]) -> Vec<CategoryRow> {
    let mut sums = [(0u64, 0u64); Category::ALL.len()];
    let mut add = |c: Category, count: u64, ns: u64| {
        let at = Category::ALL.iter().position(|&k| k == c).expect("listed");
        sums[at].0 += count;
        sums[at].1 = sums[at].1.saturating_add(ns);
    };
    for k in kernels {
        add(kernel_category(&k.name), k.time.count, k.time.total_ns);
    }
    for m in memcpy {
        add(Category::Memcpy, m.count, m.total_ns);
    }
    for m in memset {
        add(Category::Memset, m.count, m.total_ns);
    }
    let all: u64 = sums.iter().map(|s| s.1).sum();
    let mut rows: Vec<CategoryRow> = Category::ALL
        .iter()
        .zip(sums)
        .filter(|(_, (count, ns))| *count > 0 || *ns > 0)
        .map(|(c, (count, total_ns))| CategoryRow {
            category: c.as_str(),
            count,
            total_ns,
            percent: if all == 0 { 0.0 } else { 100.0 * total_ns as f64 / all as f64 },
        })
        .collect();
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.category.cmp(b.category)));
    rows
}
