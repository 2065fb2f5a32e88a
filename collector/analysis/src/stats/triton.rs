//! Kernels torch.compile generated with Triton, grouped by what they fuse. Inductor names each kernel
//! `triton_<kind>_fused_<ops>_<index>` (the kind: [`cuflight_trace::model::inductor`]), the ATen operations it fuses
//! joined by `_` (up to Inductor's `kernel_name_max_ops`, 10), and an index telling apart kernels that fuse the same
//! operations. One row per kind and operations: every graph's copy of a fused chain together.

use super::DurationRow;
use serde::Serialize;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct TritonRow {
    /// pointwise, reduction, persistent reduction, template, foreach.
    pub kind: &'static str,
    /// The fused operations as the names give them (`_to_copy_add_mean_mul`); empty where a name gives none.
    pub fused: String,
    /// Distinct kernel names in the row (the same chain generated more than once).
    pub kernels: u64,
    /// Kernels run.
    pub count: u64,
    /// Their device time, summed.
    pub total_ns: u64,
    /// Of all kernel time in the trace.
    pub percent: f64,
}

/// A Triton kernel's kind and fused operations, from its name; None for other kernels and for Triton names that
/// follow no Inductor pattern (`triton__0d1d2d`, a hand-written kernel's own name).
pub fn fused_chain(name: &str) -> Option<(&'static str, &str)> {
    let (kind, rest) = cuflight_trace::model::inductor::kind_of(name)?;
    let kind = kind.as_str();
    // The index: digits after the last `_`.
    let ops = match rest.rsplit_once('_') {
        Some((ops, index)) if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) => ops,
        _ if rest.bytes().all(|b| b.is_ascii_digit()) => "",
        _ => rest,
    };
    Some((kind, ops.strip_prefix("fused_").or_else(|| ops.strip_prefix("fused")).unwrap_or(ops)))
}

/// One row per kind and fused operations, most time first; `kernels` are the kernel rows by full name.
pub fn triton_rows(kernels: &[DurationRow]) -> Vec<TritonRow> {
    let all: u64 = kernels.iter().map(|k| k.time.total_ns).sum();
    let mut rows: std::collections::BTreeMap<(&'static str, &str), TritonRow> = Default::default();
    for k in kernels {
        let Some((kind, fused)) = fused_chain(&k.name) else { continue };
        let row = rows.entry((kind, fused)).or_insert_with(|| TritonRow {
            kind,
            fused: fused.to_string(),
            kernels: 0,
            count: 0,
            total_ns: 0,
            percent: 0.0,
        });
        row.kernels += 1;
        row.count += k.time.count;
        row.total_ns = row.total_ns.saturating_add(k.time.total_ns);
    }
    let mut rows: Vec<TritonRow> = rows.into_values().collect();
    for r in &mut rows {
        r.percent = if all == 0 { 0.0 } else { 100.0 * r.total_ns as f64 / all as f64 };
    }
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| (a.kind, &a.fused).cmp(&(b.kind, &b.fused))));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Durations;

    #[test]
    fn inductor_names_give_kind_and_fused_operations() {
        assert_eq!(fused_chain("triton_poi_fused_add_mul_0"), Some(("pointwise", "add_mul")));
        assert_eq!(
            fused_chain("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_12"),
            Some(("reduction", "_to_copy_add_mean_mul_pow_rsqrt"))
        );
        assert_eq!(fused_chain("triton_per_fused__softmax_1"), Some(("persistent reduction", "_softmax")));
        assert_eq!(fused_chain("triton_tem_fused_mm_0"), Some(("template", "mm")));
        assert_eq!(fused_chain("triton_poi_0"), Some(("pointwise", "")));
        assert_eq!(fused_chain("triton__0d1d2d3d"), None);
        assert_eq!(fused_chain("ampere_sgemm_128x64_nn"), None);
    }

    #[test]
    fn copies_of_one_chain_share_a_row() {
        let row = |name: &str, count: u64, total_ns: u64| DurationRow {
            name: name.into(),
            time: Durations { count, total_ns, ..Default::default() },
            percent: 0.0,
        };
        let kernels = [
            row("triton_poi_fused_add_mul_0", 10, 100),
            row("triton_poi_fused_add_mul_3", 10, 200),
            row("triton_red_fused_sum_1", 5, 500),
            row("sm90_xmma_gemm", 4, 200),
        ];
        let rows = triton_rows(&kernels);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].kind, rows[0].fused.as_str(), rows[0].kernels, rows[0].count), ("reduction", "sum", 1, 5));
        assert_eq!((rows[1].fused.as_str(), rows[1].kernels, rows[1].count, rows[1].total_ns), ("add_mul", 2, 20, 300));
        assert!((rows[1].percent - 30.0).abs() < 1e-9);
    }
}
