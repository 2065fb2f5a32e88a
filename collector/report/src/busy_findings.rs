//! Findings on how a busy GPU spends its time, read off the kernels' names and order: GEMMs that run a library's
//! fallback kernels (misaligned operands, an older architecture's kernels), chains of elementwise kernels one
//! fused kernel would replace, and attention computed from separate kernels. Each estimate of the time to gain
//! says how it was made; none needs device counters.

use super::findings::{ms, Ctx, Evidence, Finding, KernelRow};
use super::fusion::{ChainGroup, MIN_CHAIN};
use super::gpu_findings::example_at as example;
use super::sweep::Swept;
use super::tallies::KernelAgg;
use super::window::NameFlags;
use cuflight_trace::model::kernel_category::{gemm_alignment, gemm_arch};
use cuflight_trace::model::kernel_symbols::elementwise_op;

pub const FIX_MISALIGNED: &str = "Pad the dimensions of these GEMMs to a multiple of 8 elements (16 bytes for \
     bf16/fp16; 4 elements for fp32 and TF32), of 64 for the best tiles: a vocabulary of 50257 becomes 50304 \
     (nn.Embedding and the output layer, the extra logits never targeted), hidden and feed-forward sizes and \
     sequence lengths likewise. The kernels' names then lose `_align1`/`_align2` (`cuflight stats`).";
pub const FIX_CHAINS: &str = "Fuse the chains: torch.compile(model) turns each into one Triton kernel; without \
     it, use the fused form of the function (F.gelu(x, approximate=\"tanh\") for a hand-written tanh GELU, a fused \
     LayerNorm/RMSNorm such as Apex's or Transformer Engine's, torch._foreach_* or fused=True optimizers for \
     per-parameter updates).";
pub const FIX_CHAINS_COMPILED: &str = "These ATen kernels ran outside the compiled graphs (Triton kernels are in \
     the same steps): find the graph breaks that leave them out with torch._dynamo.explain(model)(inputs) or \
     TORCH_LOGS=graph_breaks, and compile the module they run in.";
pub const FIX_ATTENTION: &str = "Use fused attention: torch.nn.functional.scaled_dot_product_attention(q, k, v, \
     is_causal=...) picks a FlashAttention or memory-efficient kernel and never writes the score matrix to memory; \
     in Hugging Face models, attn_implementation=\"sdpa\" (or \"flash_attention_2\").";

/// Assumed speed-up of a GEMM moved from a fallback kernel (alignment 1 or 2, or two architectures old) to the
/// GPU's own aligned kernels: conservative next to what padding shows (nanoGPT's vocabulary padded from 50257 to
/// 50304 made its whole training step about 25% faster, Karpathy 2023, where those GEMMs were about a third of
/// it: 3-4x on them). An estimate from the aligned GEMMs' achieved rate needs the GEMMs' shapes.
pub const ALIGNMENT_SPEEDUP: f64 = 2.0;
/// Assumed speed-up of attention fused into one kernel over a GEMM, softmax and GEMM with elementwise kernels
/// between: the low end of the 2-4x FlashAttention-2 reports over PyTorch's standard attention (Dao, 2023).
pub const ATTENTION_SPEEDUP: f64 = 2.0;

/// GEMM kernels that run a library's fallback: operands aligned to 1 or 2 elements, or kernels built for an
/// architecture two generations older than the GPU's (`cutlass_75_*` on a 9.0) where the run's other GEMMs use
/// the GPU's own.
pub fn misaligned_gemm(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let gemms: Vec<(u32, &str)> = swept
        .kernels
        .by_name
        .keys()
        // fp32 GEMMs on CUDA cores are `fp32_gemm`'s: their fix (Tensor Cores) comes first, and a kernel's time
        // counts in one finding.
        .filter(|&&n| ctx.plan.names.has(n, NameFlags::GEMM) && !ctx.plan.names.has(n, NameFlags::FP32_GEMM))
        .map(|&n| (n, ctx.p.string(n)))
        .collect();
    let archs = gemms.iter().filter_map(|(_, name)| gemm_arch(name));
    // The GPU's own architecture: its compute capability, else the newest any GEMM of the run was built for.
    let own = ctx.plan.capability.map(|(major, minor)| major * 10 + minor).or(archs.clone().max())?;
    let own_in_use = archs.clone().any(|a| a / 10 == own / 10);
    let (mut misaligned, mut legacy) = (KernelAgg::default(), KernelAgg::default());
    let mut flagged = KernelAgg::default();
    for &(n, name) in &gemms {
        let low_alignment = gemm_alignment(name).is_some_and(|a| a <= 2);
        let old = own_in_use && gemm_arch(name).is_some_and(|a| a / 10 + 1 < own / 10);
        let row = swept.kernels.by_name[&n];
        for (agg, yes) in [(&mut misaligned, low_alignment), (&mut legacy, old), (&mut flagged, low_alignment || old)] {
            if yes {
                agg.by_name.insert(n, row);
                agg.count += row.0;
                agg.total_ns = agg.total_ns.saturating_add(row.1);
            }
        }
    }
    if flagged.count == 0 {
        return None;
    }
    let time = flagged.total_ns;
    let lost = (time as f64 * (1.0 - 1.0 / ALIGNMENT_SPEEDUP)) as u64;
    let all_gemm_ns: u64 = gemms.iter().map(|(n, _)| swept.kernels.by_name[n].1).sum();
    let mut ev = Evidence::default();
    if misaligned.count > 0 {
        ev.facts.push(format!(
            "{} GEMM kernels ({}) ran with operands aligned to 1 or 2 elements (`_align1`/`_align2`): {} in \
             steps, {:.0}% of GEMM time. cuBLAS and CUTLASS choose these when a matrix dimension (or leading \
             dimension) is not a multiple of 8 elements (4 for fp32): a vocabulary of 50257 is the classic case",
            misaligned.count,
            names(misaligned.by_name.len()),
            ms(misaligned.total_ns),
            100.0 * misaligned.total_ns as f64 / all_gemm_ns.max(1) as f64
        ));
    }
    if legacy.count > 0 {
        ev.facts.push(format!(
            "{} GEMM kernels ({}, {}) were built for an architecture two or more generations older than this \
             GPU's {}.{}, whose own kernels the run's other GEMMs use: the library's fallback for a shape its own \
             kernels do not take",
            legacy.count,
            names(legacy.by_name.len()),
            ms(legacy.total_ns),
            own / 10,
            own % 10
        ));
    }
    ev.facts.push(format!(
        "at an assumed {ALIGNMENT_SPEEDUP}x for the GPU's own aligned kernels, {} of their {} would be saved (the \
         figure from the aligned GEMMs' achieved rate needs the GEMMs' shapes)",
        ms(lost),
        ms(time)
    ));
    ev.metrics.insert("fallback_gemm_ns", time as f64);
    ev.metrics.insert("misaligned_gemm_ns", misaligned.total_ns as f64);
    ev.metrics.insert("legacy_arch_gemm_ns", legacy.total_ns as f64);
    ev.metrics.insert("assumed_speedup", ALIGNMENT_SPEEDUP);
    ev.kernels = super::gpu_findings::kernel_rows(ctx, &flagged, 5);
    share_of_all(&mut ev.kernels, swept);
    let summary = format!(
        "GEMMs on fallback kernels (misaligned, or built for an older GPU): {} per step",
        ms(time / ctx.steps_count() as u64)
    );
    Some(ctx.finding("misaligned_gemm", lost, summary, ev, FIX_MISALIGNED))
}

/// Runs of [`MIN_CHAIN`] or more elementwise kernels in a row on one stream that compute one function in steps
/// (a GELU, a norm's pieces, a rotary embedding). Runs of one operation over many tensors (a per-parameter loop:
/// `mul` 21 times) are not chains: fusing them saves only each kernel's fixed cost, and their fix is another.
pub fn elementwise_chains(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let (groups, loops): (Vec<&ChainGroup>, Vec<&ChainGroup>) =
        swept.fusable.chains.iter().partition(|g| !is_loop_over_tensors(ctx, g));
    if groups.is_empty() {
        return None;
    }
    let sum = |f: fn(&ChainGroup) -> u64| groups.iter().map(|g| f(g)).fold(0u64, u64::saturating_add);
    let (chains, time, lost) = (sum(|g| g.chains), sum(|g| g.total_ns), sum(|g| g.fusable_ns));
    let kernels = sum(|g| g.chains.saturating_mul(g.length as u64));
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{chains} chains of {MIN_CHAIN} or more elementwise kernels in a row on one stream ({kernels} kernels, {} in \
         steps), each kernel reading from memory what the one before it wrote. One fused kernel a chain would read \
         its inputs and write its output once: about {} saved (each chain's time less its longest kernel)",
        ms(time),
        ms(lost)
    ));
    for g in groups.iter().take(3) {
        ev.facts.push(format!("{} kernels: {} ({} times, {})", g.length, chain_ops(ctx, g), g.chains, ms(g.total_ns)));
    }
    if !loops.is_empty() {
        let n: u64 = loops.iter().map(|g| g.chains).sum();
        let t = loops.iter().map(|g| g.total_ns).fold(0u64, u64::saturating_add);
        ev.facts.push(format!(
            "left out: {n} runs of one operation over many tensors ({}), a loop over parameters or tensors (its fix: \
             torch._foreach_* or a fused optimizer, fused=True)",
            ms(t)
        ));
    }
    ev.examples = groups
        .iter()
        .take(3)
        .map(|g| example(ctx, g.longest, format!("{} elementwise kernels in a row", g.length)))
        .collect();
    ev.metrics.insert("chains", chains as f64);
    ev.metrics.insert("chain_kernels", kernels as f64);
    ev.metrics.insert("chain_ns", time as f64);
    let compiled = swept.kernels.by_name.keys().any(|&n| ctx.p.string(n).starts_with("triton_"));
    let summary = format!(
        "unfused elementwise chains: {} per step, of which fusing would save about {}",
        ms(time / ctx.steps_count() as u64),
        ms(lost / ctx.steps_count() as u64)
    );
    let fix = if compiled { FIX_CHAINS_COMPILED } else { FIX_CHAINS };
    Some(ctx.finding("elementwise_chains", lost, summary, ev, fix))
}

/// A run of eight or more kernels, most of them one operation: a loop applying it to many tensors.
fn is_loop_over_tensors(ctx: &Ctx, g: &ChainGroup) -> bool {
    if g.length < 8 {
        return false;
    }
    let ops: Vec<String> = g.names.iter().map(|&n| elementwise_op(ctx.p.string(n))).collect();
    let most = ops.iter().map(|op| ops.iter().filter(|o| *o == op).count()).max().unwrap_or(0);
    most * 2 > ops.len()
}

/// Attention computed as a GEMM, a softmax and a GEMM (elementwise kernels between) where one fused kernel would do.
pub fn unfused_attention(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let a = &swept.fusable.attention;
    if a.chains == 0 {
        return None;
    }
    let lost = (a.total_ns as f64 * (1.0 - 1.0 / ATTENTION_SPEEDUP)) as u64;
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} times a GEMM, a softmax and a GEMM ran in a row on one stream with at most 3 elementwise kernels between \
         (scale, mask, dropout): attention computed from separate kernels, {} in steps, the score matrix written \
         to memory and read back by each",
        a.chains,
        ms(a.total_ns)
    ));
    ev.facts.push(format!(
        "at an assumed {ATTENTION_SPEEDUP}x for a fused attention kernel (the low end of FlashAttention-2's 2-4x over \
         standard attention), {} would be saved",
        ms(lost)
    ));
    ev.examples = vec![example(ctx, a.longest, "GEMM, softmax, GEMM".to_string())];
    ev.metrics.insert("patterns", a.chains as f64);
    ev.metrics.insert("pattern_ns", a.total_ns as f64);
    ev.metrics.insert("assumed_speedup", ATTENTION_SPEEDUP);
    let summary = format!(
        "attention from separate GEMM and softmax kernels: {} per step",
        ms(a.total_ns / ctx.steps_count() as u64)
    );
    Some(ctx.finding("unfused_attention", lost, summary, ev, FIX_ATTENTION))
}

fn names(n: usize) -> String {
    if n == 1 {
        "1 name".to_string()
    } else {
        format!("{n} names")
    }
}

/// A chain's operations, ATen's elementwise kernels named by what they compute (`pow -> mul -> add -> ...`).
fn chain_ops(ctx: &Ctx, g: &ChainGroup) -> String {
    let ops: Vec<String> = g.names.iter().map(|&n| elementwise_op(ctx.p.string(n))).collect();
    let more = if g.length > ops.len() { format!(" -> ... ({} more)", g.length - ops.len()) } else { String::new() };
    format!("{}{more}", ops.join(" -> "))
}

/// Rows' shares of all kernel time in steps, not of the flagged kernels' time.
fn share_of_all(rows: &mut [KernelRow], swept: &Swept) {
    for r in rows {
        r.share_of_kernel_time = r.total_ns as f64 / swept.kernels.total_ns.max(1) as f64;
    }
}
