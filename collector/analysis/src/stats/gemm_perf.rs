//! `gemm_perf`: what each GEMM operator achieved, from its shapes, where the trace holds them (torch.profiler's
//! `Input Dims` and `Input type`, recorded with `record_shapes=True`): FLOPs and bytes from the shapes, time from
//! the GPU work the operator launched (its kernels and the memsets cuBLAS queues beside them: see
//! [`GemmPerfAcc`]), so TFLOP/s and TB/s per launch, averaged per (operator, shapes, types). The
//! definitions are TraceLens's (AMD's trace analyser, `perf_csvs/GEMM.csv`): `mm` 2·M·N·K FLOPs, `addmm` and
//! `baddbmm` M·N (per batch) more for the bias, bytes every operand read and the output written once.

use crate::table::Table;
use cuflight_format::RawEvent;
use cuflight_trace::model::gpu_peaks::{self, Math, Peaks};
use cuflight_trace::model::launches::Call;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// Operator instances held until the pass ends (each a few words): a run longer than this keeps its first ones.
const MAX_INSTANCES: usize = 1 << 20;

/// One operator call and the GPU time of the work it launched.
#[derive(Clone, Copy)]
struct Instance {
    key: u32,
    name: u32,
    text: u32,
    gpu_ns: u64,
    /// Its longest kernel: (name, ns), and the device it ran on.
    kernel: (u32, u64),
    device: u32,
}

/// Operator calls and the launches inside them. A launch belongs to the innermost GEMM operator open on its thread
/// when it was made (how TraceLens and HTA tie kernels to operators; older Kineto traces give runtime calls their
/// own correlation as "External id"), else to the operator whose external id it carries.
#[derive(Default)]
pub struct GemmPerfAcc {
    instances: Vec<Instance>,
    by_external: FxHashMap<(u32, u64), usize>,
    /// Per (process, thread): the GEMM operators open, innermost last: (end, instance).
    open: FxHashMap<(u32, u32), Vec<(u64, usize)>>,
    /// Launches made inside an operator: (process, correlation) -> instance.
    launches: FxHashMap<(u32, u32), usize>,
    /// Per process, whether each name is a GEMM operator.
    is_gemm: FxHashMap<(u32, u32), bool>,
    /// Per (process, device ordinal): the GPU's name (for its peaks).
    devices: FxHashMap<(u32, u32), u32>,
}

/// The ATen operators a GEMM's shapes can be read from.
fn gemm_op(name: &str) -> bool {
    matches!(name, "aten::mm" | "aten::addmm" | "aten::bmm" | "aten::baddbmm")
}

impl GemmPerfAcc {
    /// A host range: an operator with its argument text starts an instance.
    pub fn range(&mut self, key: u32, p: &Process, e: &RawEvent) {
        let r = e.as_range();
        if r.on_device || r.operator_text == 0 || self.instances.len() >= MAX_INSTANCES {
            return;
        }
        if !*self.is_gemm.entry((key, e.name)).or_insert_with(|| gemm_op(p.string(e.name))) {
            return;
        }
        let at = self.instances.len();
        self.instances.push(Instance {
            key,
            name: e.name,
            text: r.operator_text,
            gpu_ns: 0,
            kernel: (0, 0),
            device: 0,
        });
        if r.external != 0 {
            self.by_external.insert((key, r.external), at);
        }
        let open = self.open.entry((key, e.tid)).or_default();
        open.retain(|&(end, _)| end > e.start);
        open.push((e.end, at));
    }

    /// A device's facts: its name gives its peaks.
    pub fn device(&mut self, key: u32, e: &RawEvent) {
        self.devices.entry((key, e.device)).or_insert(e.name);
    }

    /// A CUDA call, in time order: a launch inside a GEMM operator belongs to it.
    pub fn call(&mut self, key: u32, e: &RawEvent) {
        let Some(open) = self.open.get_mut(&(key, e.tid)) else { return };
        open.retain(|&(end, _)| end > e.start);
        if let Some(&(_, at)) = open.last() {
            if self.launches.len() < MAX_INSTANCES {
                self.launches.insert((key, e.correlation), at);
            }
        }
    }

    /// GPU work joined to the call that launched it: counted to that call's operator.
    pub fn work(&mut self, key: u32, e: &RawEvent, call: &Call) {
        let at = self
            .launches
            .get(&(key, call.correlation))
            .or_else(|| (call.external != 0).then(|| self.by_external.get(&(key, call.external))).flatten());
        if let Some(&at) = at {
            let i = &mut self.instances[at];
            i.gpu_ns = i.gpu_ns.saturating_add(e.duration());
            if e.kind() == Some(cuflight_format::EventKind::Kernel) && e.duration() > i.kernel.1 {
                (i.kernel, i.device) = ((e.name, e.duration()), e.device);
            }
        }
    }

    /// Rows by (operator, shapes, types), most GPU time first.
    pub fn finish(self, processes: &BTreeMap<u32, Process>) -> Vec<GemmPerfRow> {
        self.finish_with(&|key| processes.get(&key))
    }

    /// The rows of one process's calls (fed with any one key).
    pub fn finish_one(self, p: &Process) -> Vec<GemmPerfRow> {
        self.finish_with(&|_| Some(p))
    }

    fn finish_with<'p>(self, process: &dyn Fn(u32) -> Option<&'p Process>) -> Vec<GemmPerfRow> {
        // Per group: the problem, each call's GPU time, its kernels' time by name, and its GPU's peaks.
        type Group = (Gemm, Vec<u64>, BTreeMap<String, u64>, Option<Peaks>);
        let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
        for i in self.instances {
            let Some(p) = process(i.key) else { continue };
            if i.gpu_ns == 0 {
                continue; // no work joined: the trace lost its launch or its kernels
            }
            let (name, text) = (p.string(i.name), p.string(i.text));
            let group = (name.to_string(), text.to_string());
            let g = match groups.get_mut(&group) {
                Some(g) => g,
                None => {
                    let Some(gemm) = Gemm::of(name, text) else { continue };
                    let gpu = self.devices.get(&(i.key, i.device)).and_then(|&n| gpu_peaks::of(p.string(n)));
                    groups.entry(group).or_insert((gemm, Vec::new(), BTreeMap::new(), gpu))
                }
            };
            g.1.push(i.gpu_ns);
            if i.kernel.1 > 0 {
                *g.2.entry(p.string(i.kernel.0).to_string()).or_default() += i.kernel.1;
            }
        }
        let mut rows: Vec<GemmPerfRow> = groups
            .into_iter()
            .map(|((op, _), (g, times, kernels, gpu))| {
                // The kernel that did most of the group's work (cuBLAS may pick another for a few calls).
                let kernel = kernels.into_iter().max_by_key(|k| k.1).map(|k| k.0).unwrap_or_default();
                let mut row = g.row(op, kernel, &times);
                row.roofline = gpu.and_then(|gpu| Roofline::of(&row, &gpu));
                row
            })
            .collect();
        rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.op.cmp(&b.op)));
        rows
    }
}

/// A GEMM's problem, from its operator's shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm {
    pub batch: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// Elements of the bias added (addmm, baddbmm; 0 none).
    pub bias_elements: u64,
    /// The operands' element type (`c10::BFloat16`, `float`...) and its size in bytes (0 unknown).
    pub dtype: String,
    pub element_bytes: u64,
}

impl Gemm {
    /// From an operator's name and its argument text (`"Input Dims":[[M,K],[K,N]],"Input type":[...]`).
    pub fn of(op: &str, text: &str) -> Option<Gemm> {
        let args: serde_json::Value = serde_json::from_str(&format!("{{{text}}}")).ok()?;
        let dims = args.get("Input Dims").or_else(|| args.get("Input dims"))?.as_array()?;
        let shape = |i: usize| -> Option<Vec<u64>> { dims.get(i)?.as_array()?.iter().map(|d| d.as_u64()).collect() };
        let types = args.get("Input type").and_then(|t| t.as_array());
        // The first matrix operand's place among the arguments: after the bias for addmm and baddbmm.
        let (a_at, bias) = match op {
            "aten::mm" | "aten::bmm" => (0, None),
            "aten::addmm" | "aten::baddbmm" => (1, Some(shape(0)?)),
            _ => return None,
        };
        let (a, b) = (shape(a_at)?, shape(a_at + 1)?);
        let (batch, m, k, n) = match (a.as_slice(), b.as_slice()) {
            ([m, k], [k2, n]) if k == k2 => (1, *m, *k, *n),
            ([ba, m, k], [bb, k2, n]) if ba == bb && k == k2 => (*ba, *m, *k, *n),
            _ => return None,
        };
        let dtype = types.and_then(|t| t.get(a_at)?.as_str()).unwrap_or("").to_string();
        let element_bytes = match dtype.as_str() {
            "c10::BFloat16" | "c10::Half" => 2,
            "float" | "int" => 4,
            "double" | "long int" => 8,
            "c10::Float8_e4m3fn" | "c10::Float8_e5m2" | "c10::Float8_e4m3fnuz" | "c10::Float8_e5m2fnuz" => 1,
            _ => 0,
        };
        let bias_elements = bias.map_or(0, |s| s.iter().product());
        Some(Gemm { batch, m, n, k, bias_elements, dtype, element_bytes })
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

    fn row(&self, op: String, kernel: String, times: &[u64]) -> GemmPerfRow {
        let (flops, bytes) = (self.flops(), self.bytes());
        let count = times.len() as u64;
        let total_ns = times.iter().fold(0u64, |a, &t| a.saturating_add(t));
        let mean = |f: &dyn Fn(f64) -> f64| times.iter().map(|&t| f(t as f64)).sum::<f64>() / count.max(1) as f64;
        GemmPerfRow {
            op,
            batch: self.batch,
            m: self.m,
            n: self.n,
            k: self.k,
            bias: self.bias_elements > 0,
            dtype: self.dtype.clone(),
            count,
            total_ns,
            mean_ns: total_ns as f64 / count.max(1) as f64,
            gflop: flops / 1e9,
            data_mib: bytes / (1 << 20) as f64,
            flops_per_byte: if bytes > 0.0 { flops / bytes } else { 0.0 },
            // FLOPs per ns are GFLOP/s: /1e3 for TFLOP/s; bytes per ns are GB/s: /1e3 for TB/s.
            tflops_mean: mean(&|ns| flops / ns / 1e3),
            tbps_mean: mean(&|ns| bytes / ns / 1e3),
            kernel,
            roofline: None,
        }
    }
}

/// One (operator, shapes, types) group of GEMM calls.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GemmPerfRow {
    pub op: String,
    pub batch: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub bias: bool,
    pub dtype: String,
    pub count: u64,
    /// GPU time of the work the calls launched, in all and per call.
    pub total_ns: u64,
    pub mean_ns: f64,
    pub gflop: f64,
    /// MiB moved (TraceLens's "Data Moved (MB)" is MiB).
    pub data_mib: f64,
    pub flops_per_byte: f64,
    /// Per call, averaged over the calls (as TraceLens's `TFLOPS/s_mean`).
    pub tflops_mean: f64,
    pub tbps_mean: f64,
    /// The kernel that ran most of the group's time.
    pub kernel: String,
    /// Where the calls sit against their GPU's peaks (GPUs with known peaks).
    pub roofline: Option<Roofline>,
}

/// A group's place on its GPU's roofline: its arithmetic intensity against the ridge (peak FLOP/s over peak
/// bytes/s: below it a kernel can at best be memory-bound), and what it achieved of each peak.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Roofline {
    /// The GPU (its datasheet's column) and the math the kernel ran (`bf16`, `tf32`, `fp32`, `fp8`).
    pub gpu: &'static str,
    pub math: &'static str,
    pub peak_tflops: f64,
    pub peak_tbps: f64,
    /// FLOP per byte where the two roofs meet.
    pub ridge_flops_per_byte: f64,
    /// "compute" at or above the ridge, else "memory".
    pub bound: &'static str,
    /// Achieved over peak, 0-1.
    pub compute_of_peak: f64,
    pub dram_of_peak: f64,
}

impl Roofline {
    fn of(row: &GemmPerfRow, gpu: &Peaks) -> Option<Roofline> {
        let math = gpu_peaks::gemm_math(&row.dtype, &row.kernel)?;
        let peak_tflops = gpu.tflops(math)?;
        let ridge = peak_tflops / gpu.dram_tbps;
        Some(Roofline {
            gpu: gpu.name,
            math: match math {
                Math::Fp32 => "fp32",
                Math::Tf32 => "tf32",
                Math::Bf16 => "bf16",
                Math::Fp8 => "fp8",
            },
            peak_tflops,
            peak_tbps: gpu.dram_tbps,
            ridge_flops_per_byte: ridge,
            bound: if row.flops_per_byte >= ridge { "compute" } else { "memory" },
            compute_of_peak: row.tflops_mean / peak_tflops,
            dram_of_peak: row.tbps_mean / gpu.dram_tbps,
        })
    }
}

pub fn table(rows: &[GemmPerfRow]) -> Table {
    let mut t = Table::new(
        "GEMM operators by shape, from the trace's recorded shapes [gemm_perf]",
        &[
            "Time (%)", "Count", "Avg (us)", "TFLOP/s", "TB/s", "FLOP/B", "Peak (%)", "Bound", "GFLOP", "Op", "B", "M",
            "N", "K", "Dtype",
        ],
    );
    let all = rows.iter().map(|r| r.total_ns).sum::<u64>().max(1) as f64;
    for r in rows {
        t.row(vec![
            format!("{:.1}", 100.0 * r.total_ns as f64 / all),
            r.count.to_string(),
            format!("{:.1}", r.mean_ns / 1e3),
            format!("{:.1}", r.tflops_mean),
            format!("{:.3}", r.tbps_mean),
            format!("{:.0}", r.flops_per_byte),
            // The peak of the side it is on: compute above the ridge, DRAM below.
            r.roofline.as_ref().map_or(String::new(), |f| {
                let of = if f.bound == "compute" { f.compute_of_peak } else { f.dram_of_peak };
                format!("{:.0}", 100.0 * of)
            }),
            r.roofline.as_ref().map_or(String::new(), |f| format!("{} {}", f.bound, f.math)),
            format!("{:.3}", r.gflop),
            r.op.clone(),
            r.batch.to_string(),
            r.m.to_string(),
            r.n.to_string(),
            r.k.to_string(),
            r.dtype.clone(),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shapes as torch.profiler records them, with TraceLens's figures for the same shapes in its test data
    /// (tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005_perf_report_csvs/GEMM.csv): GFLOPS and MB moved.
    #[test]
    fn flops_and_bytes_follow_the_shapes() {
        let mm = Gemm::of(
            "aten::mm",
            r#""Input Dims":[[8944, 1024], [1024, 2816]],"Input type":["c10::BFloat16", "c10::BFloat16"]"#,
        )
        .unwrap();
        assert_eq!((mm.batch, mm.m, mm.n, mm.k, mm.element_bytes), (1, 8944, 2816, 1024, 2));
        assert_eq!(mm.flops(), 51_581_550_592.0);
        assert!((mm.bytes() / (1 << 20) as f64 - 71.0078125).abs() < 1e-9);
        let addmm = Gemm::of(
            "aten::addmm",
            r#""Input Dims":[[1024], [8944, 1024], [1024, 1024], [], []],"Input type":["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]"#,
        )
        .unwrap();
        assert_eq!(addmm.flops(), 18_766_086_144.0);
        assert!((addmm.bytes() / (1 << 20) as f64 - 36.939453125).abs() < 1e-9);
        let bmm =
            Gemm::of("aten::bmm", r#""Input Dims":[[1, 32, 1], [1, 1, 559]],"Input type":["float", "float"]"#).unwrap();
        assert_eq!((bmm.batch, bmm.m, bmm.n, bmm.k), (1, 32, 559, 1));
        assert_eq!(bmm.flops(), 35_776.0);
        assert!((bmm.bytes() / (1 << 20) as f64 - 0.07049179077148438).abs() < 1e-12);
        // Shapes that do not multiply, and operators that are not GEMMs, give nothing.
        assert_eq!(Gemm::of("aten::mm", r#""Input Dims":[[4, 3], [5, 6]]"#), None);
        assert_eq!(Gemm::of("aten::add", r#""Input Dims":[[4, 3], [4, 3]]"#), None);
        assert_eq!(Gemm::of("aten::mm", "not json"), None);
    }
}
