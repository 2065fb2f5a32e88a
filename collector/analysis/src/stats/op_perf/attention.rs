//! Attention operators (`scaled_dot_product_attention`'s flash, memory-efficient and cuDNN forms) by shape, as
//! TraceLens's `SDPA_fwd.csv` counts them: 2·B·H·N_q·N_kv·(d_qk + d_v) FLOPs (the two matrix products), half of
//! it when causal (the masked half is skipped); bytes Q, K, V read and the output written once.

use super::{achieved_cells, element_bytes, Achieved, Args, Roofline, ACHIEVED_COLUMNS};
use crate::table::Table;
use serde::Serialize;

/// The forward operators, with the place of `is_causal` among their arguments (ATen's native_functions.yaml:
/// flash (query, key, value, dropout_p, is_causal, ...), efficient and cuDNN (query, key, value, attn_bias,
/// compute_log_sumexp, dropout_p, is_causal, ...)).
const OPS: [(&str, usize); 3] = [
    ("aten::_scaled_dot_product_flash_attention", 4),
    ("aten::_scaled_dot_product_efficient_attention", 6),
    ("aten::_scaled_dot_product_cudnn_attention", 6),
];

pub fn is_op(name: &str) -> bool {
    OPS.iter().any(|(op, _)| *op == name)
}

/// An attention's problem: Q is (B, H_q, N_q, d_qk), K (B, H_kv, N_kv, d_qk), V (B, H_kv, N_kv, d_v).
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Attention {
    /// Sequences a call.
    pub batch: u64,
    /// Query tokens a sequence.
    pub n_q: u64,
    /// Query heads.
    pub heads_q: u64,
    /// Key and value tokens a sequence.
    pub n_kv: u64,
    /// Key and value heads (fewer than query heads with grouped-query attention).
    pub heads_kv: u64,
    /// Head dimension of queries and keys.
    pub d_qk: u64,
    /// Head dimension of values.
    pub d_v: u64,
    /// Causal masking (about half the score matrix computed).
    pub causal: bool,
    /// The operands' element type (`c10::BFloat16`, `c10::Half`, `float`...).
    pub dtype: String,
    #[serde(skip)]
    pub element_bytes: u64,
}

impl Attention {
    pub fn of(op: &str, args: &Args) -> Option<Attention> {
        let causal_at = OPS.iter().find(|(o, _)| *o == op)?.1;
        let (q, k, v) = (args.shape(0)?, args.shape(1)?, args.shape(2)?);
        let ([b, heads_q, n_q, d_qk], [bk, heads_kv, n_kv, dk], [bv, hv, nv, d_v]) =
            (q.as_slice(), k.as_slice(), v.as_slice())
        else {
            return None;
        };
        if b != bk || b != bv || d_qk != dk || heads_kv != hv || n_kv != nv {
            return None;
        }
        let causal = args.concrete(causal_at).is_some_and(|c| c.eq_ignore_ascii_case("true"));
        let dtype = args.dtype(0).unwrap_or("").to_string();
        Some(Attention {
            batch: *b,
            n_q: *n_q,
            heads_q: *heads_q,
            n_kv: *n_kv,
            heads_kv: *heads_kv,
            d_qk: *d_qk,
            d_v: *d_v,
            causal,
            element_bytes: element_bytes(&dtype),
            dtype,
        })
    }

    pub fn flops(&self) -> f64 {
        let full = 2.0
            * self.batch as f64
            * self.heads_q as f64
            * self.n_q as f64
            * self.n_kv as f64
            * (self.d_qk + self.d_v) as f64;
        if self.causal {
            full / 2.0
        } else {
            full
        }
    }

    pub fn bytes(&self) -> f64 {
        let (b, hq, hkv) = (self.batch as f64, self.heads_q as f64, self.heads_kv as f64);
        let q = b * hq * self.n_q as f64 * self.d_qk as f64;
        let kv = b * hkv * self.n_kv as f64 * (self.d_qk + self.d_v) as f64;
        let out = b * hq * self.n_q as f64 * self.d_v as f64;
        (q + kv + out) * self.element_bytes as f64
    }

    pub(super) fn row(
        self,
        op: String,
        achieved: Achieved,
        kernel: String,
        roofline: Option<Roofline>,
    ) -> AttentionPerfRow {
        AttentionPerfRow { op, attention: self, achieved, kernel, roofline }
    }
}

/// One (operator, shapes, types, arguments) group of attention calls.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct AttentionPerfRow {
    /// The operator (aten::_scaled_dot_product_flash_attention, _efficient_attention or _cudnn_attention).
    pub op: String,
    #[serde(flatten)]
    pub attention: Attention,
    #[serde(flatten)]
    pub achieved: Achieved,
    /// The kernel that ran most of the group's time.
    pub kernel: String,
    /// Where the calls sit against their GPU's peaks (GPUs with known peaks).
    pub roofline: Option<Roofline>,
}

pub fn table(rows: &[AttentionPerfRow]) -> Table {
    let own = ["B", "N_Q", "H_Q", "N_KV", "H_KV", "d_qk", "d_v", "Causal", "Dtype", "Op"];
    let columns: Vec<&str> = ACHIEVED_COLUMNS.into_iter().chain(own).collect();
    let mut t = Table::new("Attention operators by shape, from the trace's recorded shapes [attention_perf]", &columns);
    let all = rows.iter().map(|r| r.achieved.total_ns).sum::<u64>();
    for r in rows {
        let mut cells = achieved_cells(&r.achieved, all, r.roofline.as_ref());
        let a = &r.attention;
        let sizes = [a.batch, a.n_q, a.heads_q, a.n_kv, a.heads_kv, a.d_qk, a.d_v];
        cells.extend(sizes.iter().map(u64::to_string));
        cells.extend([a.causal.to_string(), a.dtype.clone(), r.op.clone()]);
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TraceLens's figures for the shared H100 Qwen trace's attention (its SDPA_fwd.csv): 10.239377408 GFLOPS
    /// (causal: half of the full 20.48), 69.875 MB moved.
    #[test]
    fn flops_and_bytes_follow_the_shapes_and_causality() {
        let text = r#""Input Dims":[[16, 16, 559, 64], [16, 16, 559, 64], [16, 16, 559, 64], [], [], [], []],"Input type":["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar", "Scalar", "Scalar"],"Concrete Inputs":["", "", "", "0.", "True", "False", "0.125"]"#;
        let a = Attention::of("aten::_scaled_dot_product_flash_attention", &Args::parse(text).unwrap()).unwrap();
        assert!(a.causal);
        assert_eq!(a.flops(), 10_239_377_408.0);
        assert!((a.bytes() / (1 << 20) as f64 - 69.875).abs() < 1e-9);
        let full = Attention { causal: false, ..a.clone() };
        assert_eq!(full.flops(), 2.0 * a.flops());
        assert_eq!(Attention::of("aten::mm", &Args::parse(text).unwrap()), None);
    }
}
