//! GEMM operators (`aten::mm`, `addmm`, `bmm`, `baddbmm`) by shape, as TraceLens's `GEMM.csv` counts them: 2·M·N·K
//! FLOPs a batch, M·N more a batch for a bias; bytes every operand read and the output written once.

use super::{achieved_cells, element_bytes, Achieved, Args, Roofline, ACHIEVED_COLUMNS};
use crate::table::Table;
use serde::Serialize;

/// The ATen operators a GEMM's shapes can be read from.
pub fn is_op(name: &str) -> bool {
    matches!(name, "aten::mm" | "aten::addmm" | "aten::bmm" | "aten::baddbmm")
}

/// A GEMM's problem, from its operator's shapes.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Gemm {
    /// Matrices multiplied a call (1 for mm and addmm).
    pub batch: u64,
    /// Rows of the result (and of the left operand).
    pub m: u64,
    /// Columns of the result (and of the right operand).
    pub n: u64,
    /// The shared dimension summed over.
    pub k: u64,
    /// Elements of the bias added (addmm, baddbmm; 0 none).
    pub bias_elements: u64,
    /// The operands' element type (`c10::BFloat16`, `float`...) and its size in bytes (0 unknown).
    pub dtype: String,
    #[serde(skip)]
    pub element_bytes: u64,
}

impl Gemm {
    /// From an operator's name and its arguments (`"Input Dims":[[M,K],[K,N]],"Input type":[...]`).
    pub fn of(op: &str, args: &Args) -> Option<Gemm> {
        // The first matrix operand's place among the arguments: after the bias for addmm and baddbmm.
        let (a_at, bias) = match op {
            "aten::mm" | "aten::bmm" => (0, None),
            "aten::addmm" | "aten::baddbmm" => (1, Some(args.shape(0)?)),
            _ => return None,
        };
        let (a, b) = (args.shape(a_at)?, args.shape(a_at + 1)?);
        let (batch, m, k, n) = match (a.as_slice(), b.as_slice()) {
            ([m, k], [k2, n]) if k == k2 => (1, *m, *k, *n),
            ([ba, m, k], [bb, k2, n]) if ba == bb && k == k2 => (*ba, *m, *k, *n),
            _ => return None,
        };
        let dtype = args.dtype(a_at).unwrap_or("").to_string();
        // A trace's numbers are not trusted: a product that overflows is no shape.
        let bias_elements = match bias {
            Some(s) => s.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?,
            None => 0,
        };
        Some(Gemm { batch, m, n, k, bias_elements, element_bytes: element_bytes(&dtype), dtype })
    }

    /// 2·M·N·K a batch, plus M·N a batch for the bias (addmm, baddbmm).
    pub fn flops(&self) -> f64 {
        let bias = if self.bias_elements > 0 { self.m * self.n } else { 0 };
        self.batch as f64 * (2.0 * self.m as f64 * self.n as f64 * self.k as f64 + bias as f64)
    }

    /// Each operand read once and the output written once (0 when the element type is unknown).
    pub fn bytes(&self) -> f64 {
        let (m, n, k) = (self.m as f64, self.n as f64, self.k as f64);
        let elements = self.batch as f64 * (m * k + k * n + m * n) + self.bias_elements as f64;
        elements * self.element_bytes as f64
    }

    pub(super) fn row(self, op: String, achieved: Achieved, kernel: String, roofline: Option<Roofline>) -> GemmPerfRow {
        GemmPerfRow { op, gemm: self, achieved, kernel, roofline }
    }
}

/// One (operator, shapes, types) group of GEMM calls.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct GemmPerfRow {
    /// The operator: aten::mm, aten::addmm, aten::bmm or aten::baddbmm.
    pub op: String,
    #[serde(flatten)]
    pub gemm: Gemm,
    #[serde(flatten)]
    pub achieved: Achieved,
    /// The kernel that ran most of the group's time.
    pub kernel: String,
    /// Where the calls sit against their GPU's peaks (GPUs with known peaks).
    pub roofline: Option<Roofline>,
}

pub fn table(rows: &[GemmPerfRow]) -> Table {
    let columns: Vec<&str> = ACHIEVED_COLUMNS.into_iter().chain(["Op", "B", "M", "N", "K", "Dtype"]).collect();
    let mut t = Table::new("GEMM operators by shape, from the trace's recorded shapes [gemm_perf]", &columns);
    let all = rows.iter().map(|r| r.achieved.total_ns).sum::<u64>();
    for r in rows {
        let mut cells = achieved_cells(&r.achieved, all, r.roofline.as_ref());
        let g = &r.gemm;
        cells.extend([r.op.clone(), g.batch.to_string(), g.m.to_string(), g.n.to_string(), g.k.to_string()]);
        cells.push(g.dtype.clone());
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(op: &str, text: &str) -> Option<Gemm> {
        Gemm::of(op, &Args::parse(text)?)
    }

    /// Shapes as torch.profiler records them, with TraceLens's figures for the same shapes in its test data
    /// (tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005_perf_report_csvs/GEMM.csv): GFLOPS and MB moved.
    #[test]
    fn flops_and_bytes_follow_the_shapes() {
        let bf16 = r#""Input type":["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]"#;
        let mm = gemm("aten::mm", &format!(r#""Input Dims":[[8944, 1024], [1024, 2816]],{bf16}"#)).unwrap();
        assert_eq!((mm.batch, mm.m, mm.n, mm.k, mm.element_bytes), (1, 8944, 2816, 1024, 2));
        assert_eq!(mm.flops(), 51_581_550_592.0);
        assert!((mm.bytes() / (1 << 20) as f64 - 71.0078125).abs() < 1e-9);
        let addmm =
            gemm("aten::addmm", &format!(r#""Input Dims":[[1024], [8944, 1024], [1024, 1024], [], []],{bf16}"#))
                .unwrap();
        assert_eq!(addmm.flops(), 18_766_086_144.0);
        assert!((addmm.bytes() / (1 << 20) as f64 - 36.939453125).abs() < 1e-9);
        let bmm =
            gemm("aten::bmm", r#""Input Dims":[[1, 32, 1], [1, 1, 559]],"Input type":["float", "float"]"#).unwrap();
        assert_eq!((bmm.batch, bmm.m, bmm.n, bmm.k), (1, 32, 559, 1));
        assert_eq!(bmm.flops(), 35_776.0);
        assert!((bmm.bytes() / (1 << 20) as f64 - 0.07049179077148438).abs() < 1e-12);
        // Shapes that do not multiply, and operators that are not GEMMs, give nothing.
        assert_eq!(gemm("aten::mm", r#""Input Dims":[[4, 3], [5, 6]]"#), None);
        assert_eq!(gemm("aten::add", r#""Input Dims":[[4, 3], [4, 3]]"#), None);
        assert_eq!(gemm("aten::mm", "not json"), None);
    }
}
