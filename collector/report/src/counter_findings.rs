//! Findings on a busy GPU that only device counters can make (a trace recorded with `record --gpu-metrics`):
//! kernels held back by DRAM bandwidth, and GEMMs that keep the Tensor Cores idle. A kernel name counts when its
//! kernels filled at least [`MIN_SAMPLES`] samples (the join is `cuflight_trace::model::gpu_counters`); its time
//! is its kernels' time in the analysed steps. Kernels another finding already judges by name (elementwise chains,
//! fallback and fp32 GEMMs) are left to it: a kernel's time counts in one finding.

use super::findings::{ms, Ctx, Evidence, Finding};
use super::sweep::Swept;
use super::tallies::KernelAgg;
use super::window::NameFlags;
use cuflight_analysis::stats::gpu_metrics::GpuMetricsRow;
use cuflight_trace::model::kernel_category::{gemm_alignment, gemm_arch};

/// The kinds of finding made from counters here.
pub const KINDS: [&str; 2] = ["memory_bound", "tensor_underused"];

/// Samples a kernel name needs before its counters are judged.
pub const MIN_SAMPLES: u64 = 10;
/// DRAM throughput (share of peak) from which a kernel is held back by memory, and Tensor Core activity below
/// which such a kernel is not also compute-heavy.
const MEMORY_BOUND_DRAM: f64 = 60.0;
const MEMORY_BOUND_TENSOR: f64 = 30.0;
/// Assumed share of a memory-bound kernel's time that fusing it with its producer or consumer saves: the tensor
/// it reads is then not written and read again, about half its traffic for a one-in, one-out kernel.
pub const FUSION_SAVING: f64 = 0.5;
/// Tensor Core activity (share of peak) below which a GEMM underuses them, and the activity a well-fed GEMM
/// reaches where the run has none to compare with: an 8192³ bf16 cuBLAS GEMM kept them 93% busy on an H200
/// (2026-11-28, `scripts/gpu-validate` part `counters`); 70% is what large training GEMMs commonly sustain.
const UNDERUSED_TENSOR: f64 = 40.0;
const WELL_FED_TENSOR: f64 = 70.0;

pub const FIX_MEMORY_BOUND: &str = "These kernels already move data near the GPU's DRAM bandwidth: only less \
     traffic makes them faster. Fuse them with the kernels before or after them, so the tensor between is never \
     written to memory: torch.compile(model) does this for normalisation, softmax, reductions and their \
     neighbours; without it, fused forms (fused LayerNorm/RMSNorm, fused cross-entropy, fused=True optimizers), \
     and keep activations in bf16 rather than fp32 to halve the bytes.";
pub const FIX_TENSOR_UNDERUSED: &str = "These GEMMs leave the Tensor Cores mostly idle: they are too small or too \
     thin to fill the GPU. Give each more work (a larger batch or sequence per step; torch.bmm or a grouped GEMM \
     for many small ones), let torch.compile(mode=\"max-autotune\") choose their tiles, capture them in CUDA \
     graphs when launches separate them, and check they run in bf16/fp16 (TF32 for fp32 matmuls: \
     torch.backends.cuda.matmul.allow_tf32 = True).";

/// A measured kernel name with its time in steps.
struct Measured<'a> {
    row: &'a GpuMetricsRow,
    name: u32,
    /// The name's row in the kernel tallies: (count, ns in steps, first launch configuration).
    tally: (u64, u64, [u64; 3]),
    ns: u64,
}

/// The kernel names with enough samples, by their name id in the process, that `keep` takes.
fn measured<'a>(ctx: &Ctx, swept: &'a Swept, keep: impl Fn(u32, &GpuMetricsRow) -> bool) -> Vec<Measured<'a>> {
    let rows = swept.gpu_metrics.iter().filter(|r| r.level == "kernel" && r.samples >= MIN_SAMPLES);
    let mut out: Vec<Measured<'a>> = rows
        .filter_map(|row| {
            let (&name, &tally) = swept.kernels.by_name.iter().find(|(&n, _)| ctx.p.string(n) == row.name)?;
            keep(name, row).then_some(Measured { row, name, tally, ns: tally.1 })
        })
        .collect();
    out.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.row.name.cmp(&b.row.name)));
    out
}

fn agg(picked: &[Measured]) -> KernelAgg {
    let mut agg = KernelAgg::default();
    for m in picked {
        agg.by_name.insert(m.name, m.tally);
        agg.count += m.tally.0;
        agg.total_ns = agg.total_ns.saturating_add(m.ns);
    }
    agg
}

fn name_count(n: usize) -> String {
    if n == 1 {
        "1 name".into()
    } else {
        format!("{n} names")
    }
}

/// One line per name: its share of DRAM and Tensor Core peak, its samples.
fn lines(picked: &[Measured]) -> String {
    picked
        .iter()
        .take(3)
        .map(|m| {
            format!(
                "{} ({}: DRAM {:.0}%, Tensor Cores {:.0}%, SMs {:.0}% of peak over {} samples)",
                super::short_names::short_name(&m.row.name),
                ms(m.ns),
                m.row.dram_pct.unwrap_or(0.0),
                m.row.tensor_active_pct.unwrap_or(0.0),
                m.row.sm_active_pct.unwrap_or(0.0),
                m.row.samples
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Kernels (not GEMMs, not elementwise-chain kernels) at a high share of DRAM bandwidth with Tensor Cores idle.
pub fn memory_bound(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let names = &ctx.plan.names;
    let picked = measured(ctx, swept, |n, r| {
        !names.has(n, NameFlags::GEMM)
            && !names.has(n, NameFlags::ELEMENTWISE)
            && r.dram_pct.is_some_and(|d| d >= MEMORY_BOUND_DRAM)
            && r.tensor_active_pct.unwrap_or(0.0) < MEMORY_BOUND_TENSOR
    });
    if picked.is_empty() {
        return None;
    }
    let flagged = agg(&picked);
    let lost = (flagged.total_ns as f64 * FUSION_SAVING) as u64;
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} kernels of {} ran at {:.0}% or more of DRAM bandwidth with the Tensor Cores under {:.0}%: {} in \
         steps. The heaviest: {}",
        flagged.count,
        name_count(picked.len()),
        MEMORY_BOUND_DRAM,
        MEMORY_BOUND_TENSOR,
        ms(flagged.total_ns),
        lines(&picked)
    ));
    ev.facts.push(format!(
        "estimate: fusing each with a neighbour spares the write and re-read of the tensor between them, assumed \
         {:.0}% of their traffic and so of their time: {} of {}",
        FUSION_SAVING * 100.0,
        ms(lost),
        ms(flagged.total_ns)
    ));
    ev.metrics.insert("memory_bound_ns", flagged.total_ns as f64);
    ev.metrics.insert("kernel_names", picked.len() as f64);
    ev.kernels = super::gpu_findings::kernel_rows(ctx, &flagged, 5);
    let summary = format!(
        "Memory-bound kernels at the DRAM bandwidth limit (device counters): {}",
        ctx.per_step(flagged.total_ns)
    );
    Some(ctx.finding("memory_bound", lost, summary, ev, FIX_MEMORY_BOUND))
}

/// GEMMs whose Tensor Cores stay mostly idle while DRAM is not the limit either (GEMMs on fallback or fp32
/// kernels are their own findings').
pub fn tensor_underused(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let names = &ctx.plan.names;
    let gemm = |n: u32| {
        let name = ctx.p.string(n);
        names.has(n, NameFlags::GEMM)
            && !names.has(n, NameFlags::FP32_GEMM)
            && gemm_alignment(name).is_none_or(|a| a > 2)
            && gemm_arch(name).zip(ctx.plan.capability).is_none_or(|(a, (major, _))| a / 10 + 1 >= major)
    };
    let gemms = measured(ctx, swept, |n, r| gemm(n) && r.tensor_active_pct.is_some());
    let best = gemms
        .iter()
        .filter_map(|m| m.row.tensor_active_pct)
        .fold(None, |b: Option<f64>, t| Some(b.map_or(t, |b| b.max(t))));
    let (target, compared) = match best.filter(|&b| b >= WELL_FED_TENSOR) {
        Some(b) => (b, true),
        None => (WELL_FED_TENSOR, false),
    };
    let picked: Vec<Measured> = gemms
        .into_iter()
        .filter(|m| {
            m.row.tensor_active_pct.is_some_and(|t| t < UNDERUSED_TENSOR)
                && m.row.dram_pct.unwrap_or(0.0) < MEMORY_BOUND_DRAM
        })
        .collect();
    if picked.is_empty() {
        return None;
    }
    let flagged = agg(&picked);
    let lost: u64 = picked
        .iter()
        .map(|m| (m.ns as f64 * (1.0 - m.row.tensor_active_pct.unwrap_or(0.0) / target).max(0.0)) as u64)
        .sum();
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} GEMM kernels of {} kept the Tensor Cores under {:.0}% busy with DRAM not the limit either: {} in \
         steps. The heaviest: {}",
        flagged.count,
        name_count(picked.len()),
        UNDERUSED_TENSOR,
        ms(flagged.total_ns),
        lines(&picked)
    ));
    let against = if compared {
        format!("the {target:.0}% the run's best-fed GEMM reaches")
    } else {
        format!("an assumed {target:.0}% (no GEMM of the run reaches that; an 8192³ bf16 GEMM keeps 93% on an H200)")
    };
    ev.facts.push(format!(
        "estimate: at {against}, each would take its time times its activity over that: {} of {} saved",
        ms(lost),
        ms(flagged.total_ns)
    ));
    ev.metrics.insert("underused_gemm_ns", flagged.total_ns as f64);
    ev.metrics.insert("target_tensor_pct", target);
    ev.kernels = super::gpu_findings::kernel_rows(ctx, &flagged, 5);
    let summary =
        format!("GEMMs with the Tensor Cores mostly idle (device counters): {}", ctx.per_step(flagged.total_ns));
    Some(ctx.finding("tensor_underused", lost, summary, ev, FIX_TENSOR_UNDERUSED))
}

/// What the verdict of a busy GPU adds when no finding judged its kernels' work (by names, or by counters where
/// the processes' traces have them): empty when one did.
pub fn clean_busy_note(findings: &[Finding], processes: &[super::ProcessReport]) -> &'static str {
    let judged =
        |f: &Finding| super::busy_findings::KINDS.contains(&f.kind) || KINDS.contains(&f.kind) || f.kind == "fp32_gemm";
    let counted = processes.iter().any(|p| !p.gpu_metrics.is_empty());
    // cuflight records NVIDIA's GPUs alone, and fp32 GEMMs are not judged on AMD's (`fp32_gemm`).
    let rocm = !processes.is_empty() && processes.iter().all(|p| p.run.rocm);
    match (findings.iter().any(judged), counted) {
        (true, _) => "",
        (false, false) if rocm => {
            " Its kernels show no GEMMs on fallback kernels, no unfused elementwise chains and no unfused attention; \
             whether they are memory- or compute-bound needs device counters, which this trace has none of \
             (rocprofv3's counters, or rocprof-compute on the top kernels)."
        }
        (false, false) => {
            " Its kernels show no GEMMs on fallback or fp32 kernels, no unfused elementwise chains and no unfused \
             attention; whether they are memory- or compute-bound needs device counters, which this trace has none \
             of (record with `cuflight record --gpu-metrics`)."
        }
        (false, true) => {
            " Its kernels show no GEMMs on fallback or fp32 kernels, no unfused elementwise chains and no unfused \
             attention, and the device counters show no kernels held back by DRAM bandwidth or GEMMs leaving the \
             Tensor Cores idle: what remains is kernel-level work (Nsight Compute on the top kernels)."
        }
    }
}
