//! What each GEMM and attention operator achieved, from its shapes, where the trace holds them (torch.profiler's
//! `Input Dims`, `Input type` and `Concrete Inputs`, recorded with `record_shapes=True`): FLOPs and bytes from the
//! shapes, time from the GPU work the operator launched (its kernels and the memsets cuBLAS queues beside them:
//! see [`OpPerfAcc`]), so TFLOP/s and TB/s per call, averaged per (operator, shapes, types), and each group's
//! place on its GPU's roofline. The definitions are TraceLens's (AMD's trace analyser, `perf_csvs/GEMM.csv` and
//! `SDPA_fwd.csv`): [`gemm`], [`attention`].

pub mod attention;
pub mod gemm;

use attention::{Attention, AttentionPerfRow};
use cuflight_format::RawEvent;
use cuflight_trace::model::gpu_peaks::{self, Math, Peaks};
use cuflight_trace::model::launches::Call;
use cuflight_trace::model::trace::Process;
use gemm::{Gemm, GemmPerfRow};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// The tables, most GPU time first in each.
#[derive(Debug, Default)]
pub struct OpPerf {
    pub gemm: Vec<GemmPerfRow>,
    pub attention: Vec<AttentionPerfRow>,
}

/// What an operator does, by its name: the ones whose shapes give their FLOPs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Gemm,
    Attention,
}

fn op_kind(name: &str) -> Option<OpKind> {
    if gemm::is_op(name) {
        Some(OpKind::Gemm)
    } else if attention::is_op(name) {
        Some(OpKind::Attention)
    } else {
        None
    }
}

/// An operator's argument text (`"Input Dims":[...],"Input type":[...],"Concrete Inputs":[...]`) parsed.
pub struct Args {
    value: serde_json::Value,
}

impl Args {
    pub fn parse(text: &str) -> Option<Args> {
        serde_json::from_str(&format!("{{{text}}}")).ok().map(|value| Args { value })
    }

    fn list(&self, key: &str) -> Option<&Vec<serde_json::Value>> {
        self.value.get(key)?.as_array()
    }

    /// Argument `i`'s shape.
    pub fn shape(&self, i: usize) -> Option<Vec<u64>> {
        let dims = self.list("Input Dims").or_else(|| self.list("Input dims"))?;
        dims.get(i)?.as_array()?.iter().map(|d| d.as_u64()).collect()
    }

    /// Argument `i`'s type (`c10::BFloat16`, `float`, `Scalar`...).
    pub fn dtype(&self, i: usize) -> Option<&str> {
        self.list("Input type")?.get(i)?.as_str()
    }

    /// Argument `i`'s value as the trace wrote it ("True", "0.125"; "" for tensors).
    pub fn concrete(&self, i: usize) -> Option<&str> {
        self.list("Concrete Inputs")?.get(i)?.as_str()
    }
}

/// Bytes an element of a tensor of this type takes (0 unknown).
pub fn element_bytes(dtype: &str) -> u64 {
    match dtype {
        "c10::BFloat16" | "c10::Half" => 2,
        "float" | "int" => 4,
        "double" | "long int" => 8,
        "c10::Float8_e4m3fn" | "c10::Float8_e5m2" | "c10::Float8_e4m3fnuz" | "c10::Float8_e5m2fnuz" => 1,
        _ => 0,
    }
}

/// What a group of calls achieved: FLOPs and bytes of one call, each call's GPU time.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Achieved {
    /// Operator calls in the group.
    pub count: u64,
    /// GPU time of the work the calls launched, in all and per call.
    pub total_ns: u64,
    /// GPU time per call.
    pub mean_ns: f64,
    /// Floating-point operations of one call, in GFLOP.
    pub gflop: f64,
    /// MiB moved (TraceLens's "Data Moved (MB)" is MiB).
    pub data_mib: f64,
    /// Arithmetic intensity: FLOP over bytes moved.
    pub flops_per_byte: f64,
    /// Per call, averaged over the calls (as TraceLens's `TFLOPS/s_mean`).
    pub tflops_mean: f64,
    /// DRAM traffic (the operands read and the result written once) per call's GPU time, TB/s, averaged over the calls.
    pub tbps_mean: f64,
}

impl Achieved {
    pub fn of(flops: f64, bytes: f64, times: &[u64]) -> Achieved {
        let count = times.len() as u64;
        let total_ns = times.iter().fold(0u64, |a, &t| a.saturating_add(t));
        let mean = |f: &dyn Fn(f64) -> f64| times.iter().map(|&t| f(t as f64)).sum::<f64>() / count.max(1) as f64;
        Achieved {
            count,
            total_ns,
            mean_ns: total_ns as f64 / count.max(1) as f64,
            gflop: flops / 1e9,
            data_mib: bytes / (1 << 20) as f64,
            flops_per_byte: if bytes > 0.0 { flops / bytes } else { 0.0 },
            // FLOPs per ns are GFLOP/s: /1e3 for TFLOP/s; bytes per ns are GB/s: /1e3 for TB/s.
            tflops_mean: mean(&|ns| flops / ns / 1e3),
            tbps_mean: mean(&|ns| bytes / ns / 1e3),
        }
    }
}

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

/// Operator calls and the launches inside them. A launch belongs to the innermost measured operator open on its thread
/// when it was made (how TraceLens and HTA tie kernels to operators; older Kineto traces give runtime calls their
/// own correlation as "External id"), else to the operator whose external id it carries.
#[derive(Default)]
pub struct OpPerfAcc {
    instances: Vec<Instance>,
    by_external: FxHashMap<(u32, u64), usize>,
    /// Per (process, thread): the measured operators open, innermost last: (end, instance).
    open: FxHashMap<(u32, u32), Vec<(u64, usize)>>,
    /// Launches made inside an operator: (process, correlation) -> instance.
    launches: FxHashMap<(u32, u32), usize>,
    /// Per process, what each name's operator is (None: not one measured here).
    kinds: FxHashMap<(u32, u32), Option<OpKind>>,
    /// Per (process, device ordinal): the GPU's name (for its peaks).
    devices: FxHashMap<(u32, u32), u32>,
}

impl OpPerfAcc {
    /// A host range: an operator with its argument text starts an instance.
    pub fn range(&mut self, key: u32, p: &Process, e: &RawEvent) {
        let r = e.as_range();
        if r.on_device || r.operator_text == 0 || self.instances.len() >= MAX_INSTANCES {
            return;
        }
        if self.kinds.entry((key, e.name)).or_insert_with(|| op_kind(p.string(e.name))).is_none() {
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

    /// A CUDA call, in time order: a launch inside a measured operator belongs to it.
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
    pub fn finish(self, processes: &BTreeMap<u32, Process>) -> OpPerf {
        self.finish_with(&|key| processes.get(&key))
    }

    /// The rows of one process's calls (fed with any one key).
    pub fn finish_one(self, p: &Process) -> OpPerf {
        self.finish_with(&|_| Some(p))
    }

    fn finish_with<'p>(self, process: &dyn Fn(u32) -> Option<&'p Process>) -> OpPerf {
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
                    let Some(args) = Args::parse(text) else { continue };
                    let problem = match op_kind(name) {
                        Some(OpKind::Gemm) => Gemm::of(name, &args).map(Problem::Gemm),
                        Some(OpKind::Attention) => Attention::of(name, &args).map(Problem::Attention),
                        None => None,
                    };
                    let Some(problem) = problem else { continue };
                    let gpu = self.devices.get(&(i.key, i.device)).and_then(|&n| gpu_peaks::of(p.string(n)));
                    groups.entry(group).or_insert(Group { problem, times: Vec::new(), kernels: BTreeMap::new(), gpu })
                }
            };
            g.times.push(i.gpu_ns);
            if i.kernel.1 > 0 {
                *g.kernels.entry(p.string(i.kernel.0).to_string()).or_default() += i.kernel.1;
            }
        }
        let mut out = OpPerf::default();
        for ((op, _), g) in groups {
            // The kernel that did most of the group's work (cuBLAS may pick another for a few calls).
            let kernel = g.kernels.into_iter().max_by_key(|k| k.1).map(|k| k.0).unwrap_or_default();
            match g.problem {
                Problem::Gemm(p) => {
                    let achieved = Achieved::of(p.flops(), p.bytes(), &g.times);
                    let roofline = g.gpu.and_then(|gpu| Roofline::of(&achieved, &p.dtype, &kernel, &gpu));
                    out.gemm.push(p.row(op, achieved, kernel, roofline));
                }
                Problem::Attention(p) => {
                    let achieved = Achieved::of(p.flops(), p.bytes(), &g.times);
                    let roofline = g.gpu.and_then(|gpu| Roofline::of(&achieved, &p.dtype, &kernel, &gpu));
                    out.attention.push(p.row(op, achieved, kernel, roofline));
                }
            }
        }
        out.gemm.sort_by(|a, b| b.achieved.total_ns.cmp(&a.achieved.total_ns).then_with(|| a.op.cmp(&b.op)));
        out.attention.sort_by(|a, b| b.achieved.total_ns.cmp(&a.achieved.total_ns).then_with(|| a.op.cmp(&b.op)));
        out
    }
}

enum Problem {
    Gemm(Gemm),
    Attention(Attention),
}

/// One (operator, argument text) group: its problem, each call's GPU time, its kernels' time by name, its GPU's
/// peaks.
struct Group {
    problem: Problem,
    times: Vec<u64>,
    kernels: BTreeMap<String, u64>,
    gpu: Option<Peaks>,
}

/// A group's place on its GPU's roofline: its arithmetic intensity against the ridge (peak FLOP/s over peak
/// bytes/s: below it a kernel can at best be memory-bound), and what it achieved of each peak.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Roofline {
    /// The GPU (its datasheet's column) and the math the kernel ran (`bf16`, `tf32`, `fp32`, `fp8`).
    pub gpu: &'static str,
    /// The math the kernel ran: bf16, tf32, fp32 or fp8.
    pub math: &'static str,
    /// The GPU's datasheet peak for that math, TFLOP/s.
    pub peak_tflops: f64,
    /// The GPU's datasheet DRAM bandwidth, TB/s.
    pub peak_tbps: f64,
    /// FLOP per byte where the two roofs meet.
    pub ridge_flops_per_byte: f64,
    /// "compute" at or above the ridge, else "memory".
    pub bound: &'static str,
    /// Achieved over peak, 0-1.
    pub compute_of_peak: f64,
    /// Achieved DRAM throughput over the peak, 0-1.
    pub dram_of_peak: f64,
}

impl Roofline {
    /// Where calls that achieved `a` with operands of `dtype` on `kernel` sit on `gpu`'s roofline.
    pub fn of(a: &Achieved, dtype: &str, kernel: &str, gpu: &Peaks) -> Option<Roofline> {
        let math = gpu_peaks::gemm_math(dtype, kernel)?;
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
            bound: if a.flops_per_byte >= ridge { "compute" } else { "memory" },
            compute_of_peak: a.tflops_mean / peak_tflops,
            dram_of_peak: a.tbps_mean / gpu.dram_tbps,
        })
    }
}

/// The columns every operator table starts with, before the operator's own parameters.
pub const ACHIEVED_COLUMNS: [&str; 9] =
    ["Time (%)", "Count", "Avg (us)", "TFLOP/s", "TB/s", "FLOP/B", "Peak (%)", "Bound", "GFLOP"];

/// Those columns of a group: its share of `all_ns` (the table's GPU time), what it achieved, and where it sits on
/// its roofline (the peak (%) on the side it is on, and that side with the math).
pub fn achieved_cells(a: &Achieved, all_ns: u64, roofline: Option<&Roofline>) -> Vec<String> {
    let (peak, bound) = match roofline {
        Some(f) => {
            let of = if f.bound == "compute" { f.compute_of_peak } else { f.dram_of_peak };
            (format!("{:.0}", 100.0 * of), format!("{} {}", f.bound, f.math))
        }
        None => (String::new(), String::new()),
    };
    vec![
        format!("{:.1}", 100.0 * a.total_ns as f64 / all_ns.max(1) as f64),
        a.count.to_string(),
        format!("{:.1}", a.mean_ns / 1e3),
        format!("{:.1}", a.tflops_mean),
        format!("{:.3}", a.tbps_mean),
        format!("{:.0}", a.flops_per_byte),
        peak,
        bound,
        format!("{:.3}", a.gflop),
    ]
}
