//! Findings on how a busy GPU spends its time, read off the kernels' names and order: GEMMs that run a library's
//! fallback kernels (misaligned operands, an older architecture's kernels), chains of elementwise kernels one
//! fused kernel would replace, and attention computed from separate kernels. Each estimate of the time to gain
//! says how it was made; none needs device counters.

use super::findings::{counted, ms, times, Ctx, Evidence, Finding, KernelRow};
use super::fusion::{ChainGroup, MIN_CHAIN};
use super::gpu_findings::example_at as example;
use super::sweep::Swept;
use super::tallies::KernelAgg;
use super::window::NameFlags;
use cuflight_trace::model::kernel_category::{gemm_alignment, gemm_arch, is_fp32_gemm};
use cuflight_trace::model::kernel_symbols::elementwise_op;

/// The kinds of finding read off a busy GPU's kernels here.
pub const KINDS: [&str; 3] = ["misaligned_gemm", "elementwise_chains", "unfused_attention"];

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
    let rule = Fallback { own, own_in_use: archs.clone().any(|a| a / 10 == own / 10) };
    let (mut misaligned, mut legacy) = (KernelAgg::default(), KernelAgg::default());
    let mut flagged = KernelAgg::default();
    for &(n, name) in &gemms {
        let (low_alignment, old) = rule.of(name);
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
    // The shapes' rates stand for the fallback GEMMs only when they cover most of their time, against a fair
    // share of other GEMMs (a few small calls' rate says nothing of the rest).
    let shapes = rates_from_shapes(ctx, &rule);
    let measured = shapes.as_ref().filter(|m| m.fallback_ns * 2 >= time && m.others_ns * 4 >= m.fallback_ns);
    let speedup = measured.as_ref().map_or(ALIGNMENT_SPEEDUP, |m| (m.others / m.fallback).max(1.0));
    let lost = (time as f64 * (1.0 - 1.0 / speedup)) as u64;
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
    if let Some(shapes) = fallback_shapes(ctx, &rule) {
        ev.facts.push(shapes);
    }
    match &measured {
        Some(m) => {
            ev.facts.push(format!(
                "from the shapes the trace recorded: the {} GEMM calls on fallback kernels achieved {:.1} TFLOP/s, \
                 the run's other {} GEMMs {:.1} TFLOP/s; at that rate {} of their {} would be saved",
                m.dtype,
                m.fallback,
                m.dtype,
                m.others,
                ms(lost),
                ms(time)
            ));
            ev.metrics.insert("fallback_tflops", m.fallback);
            ev.metrics.insert("other_tflops", m.others);
        }
        None => {
            let why = match &shapes {
                Some(m) => format!(
                    "the shapes the trace recorded cover {} of these GEMMs' time against {} of others, too little to \
                     measure by",
                    ms(m.fallback_ns),
                    ms(m.others_ns)
                ),
                None => "a trace recorded with shapes (torch.profiler's record_shapes=True) gives the other GEMMs' \
                         achieved rate instead"
                    .to_string(),
            };
            ev.facts.push(format!(
                "at an assumed {ALIGNMENT_SPEEDUP}x for the GPU's own aligned kernels, {} of their {} would be saved \
                 ({why})",
                ms(lost),
                ms(time)
            ))
        }
    }
    ev.metrics.insert("fallback_gemm_ns", time as f64);
    ev.metrics.insert("misaligned_gemm_ns", misaligned.total_ns as f64);
    ev.metrics.insert("legacy_arch_gemm_ns", legacy.total_ns as f64);
    ev.metrics.insert("speedup", speedup);
    ev.kernels = super::gpu_findings::kernel_rows(ctx, &flagged, 5);
    share_of_all(&mut ev.kernels, swept);
    let summary = format!("GEMMs on fallback kernels (misaligned, or built for an older GPU): {}", ctx.per_step(time));
    Some(ctx.finding("misaligned_gemm", lost, summary, ev, FIX_MISALIGNED))
}

/// Which fallback a GEMM kernel of a name is, on a GPU of architecture `own` (`major * 10 + minor`).
struct Fallback {
    own: u32,
    /// Some GEMM of the run was built for the GPU's own major architecture.
    own_in_use: bool,
}

impl Fallback {
    /// (operands aligned to 1 or 2 elements, built two or more generations before the GPU).
    fn of(&self, name: &str) -> (bool, bool) {
        let low_alignment = gemm_alignment(name).is_some_and(|a| a <= 2);
        let old = self.own_in_use && gemm_arch(name).is_some_and(|a| a / 10 + 1 < self.own / 10);
        (low_alignment, old)
    }
}

/// The recorded shapes of the GEMM calls on fallback kernels, the costliest three, each with the dimensions that are
/// not a multiple of the full vector (8 elements of 2 bytes, 4 of 4): what to pad. None without shapes.
fn fallback_shapes(ctx: &Ctx, rule: &Fallback) -> Option<String> {
    let mut rows: Vec<_> = ctx
        .plan
        .gemm_perf
        .iter()
        .filter(|r| {
            !is_fp32_gemm(&r.kernel) && {
                let (low, old) = rule.of(&r.kernel);
                low || old
            }
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.achieved.total_ns));
    let shown: Vec<String> = rows
        .iter()
        .take(3)
        .map(|r| {
            let g = &r.gemm;
            let vector = if g.element_bytes >= 4 { 4 } else { 8 };
            let odd: Vec<String> = [("M", g.m), ("N", g.n), ("K", g.k)]
                .iter()
                .filter(|(_, d)| d % vector != 0)
                .map(|(name, d)| format!("{name} = {d}"))
                .collect();
            let why = if odd.is_empty() {
                format!("its sizes are multiples of {vector}: a strided or offset operand is what is misaligned")
            } else {
                format!("{} not a multiple of {vector}", odd.join(", "))
            };
            let batch = if g.batch > 1 { format!("{}x", g.batch) } else { String::new() };
            format!(
                "{} {batch}{}x{}x{} {} ({}, {why})",
                r.op,
                g.m,
                g.n,
                g.k,
                g.dtype,
                counted(r.achieved.count, "call", "calls")
            )
        })
        .collect();
    Some(format!("the shapes on fallback kernels (M x N x K): {}", shown.join("; ")))
}

/// Achieved TFLOP/s of the GEMM calls on fallback kernels and of the run's other GEMM calls of the same element
/// type, from the shapes the trace recorded (the type with the most fallback time; fp32 SIMT kernels left out, as
/// above).
struct Rates {
    dtype: String,
    fallback: f64,
    others: f64,
    /// GPU time of the calls each rate comes from.
    fallback_ns: u64,
    others_ns: u64,
}

fn rates_from_shapes(ctx: &Ctx, rule: &Fallback) -> Option<Rates> {
    let rows: Vec<_> = ctx.plan.gemm_perf.iter().filter(|r| !r.kernel.is_empty() && !is_fp32_gemm(&r.kernel)).collect();
    let is_fallback = |kernel: &str| {
        let (low, old) = rule.of(kernel);
        low || old
    };
    let mut by_dtype: Vec<(&str, u64)> = Vec::new();
    for r in rows.iter().filter(|r| is_fallback(&r.kernel)) {
        match by_dtype.iter_mut().find(|d| d.0 == r.gemm.dtype) {
            Some(d) => d.1 += r.achieved.total_ns,
            None => by_dtype.push((&r.gemm.dtype, r.achieved.total_ns)),
        }
    }
    let dtype = by_dtype.iter().max_by_key(|d| d.1)?.0;
    // FLOPs over GPU time: GFLOP per ns is 1e18 FLOP/s, a million TFLOP/s.
    let rate = |fallback: bool| -> Option<(f64, u64)> {
        let (flop, ns) = rows
            .iter()
            .filter(|r| r.gemm.dtype == dtype && is_fallback(&r.kernel) == fallback)
            .fold((0.0, 0u64), |(f, t), r| {
                (f + r.achieved.gflop * r.achieved.count as f64, t.saturating_add(r.achieved.total_ns))
            });
        (ns > 0 && flop > 0.0).then(|| (flop / ns as f64 * 1e6, ns))
    };
    let ((fallback, fallback_ns), (others, others_ns)) = (rate(true)?, rate(false)?);
    Some(Rates { dtype: dtype.to_string(), fallback, others, fallback_ns, others_ns })
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
        ev.facts.push(format!("{} kernels: {} ({}, {})", g.length, chain_ops(ctx, g), times(g.chains), ms(g.total_ns)));
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
    let summary = format!(
        "unfused elementwise chains: {}, of which fusing would save about {}",
        ctx.per_step(time),
        ms(lost / ctx.steps_count() as u64)
    );
    let fix = if super::findings::runs_compiled_code(ctx, swept) { FIX_CHAINS_COMPILED } else { FIX_CHAINS };
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
        "{} a GEMM, a softmax and a GEMM ran in a row on one stream with at most 3 elementwise kernels between \
         (scale, mask, dropout): attention computed from separate kernels, {} in steps, the score matrix written \
         to memory and read back by each",
        super::words::times(a.chains),
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
    let summary = format!("attention from separate GEMM and softmax kernels: {}", ctx.per_step(a.total_ns));
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

#[cfg(test)]
mod tests {
    use cuflight_format::view::{ApiCall, RangeRecord};
    use cuflight_format::{EventKind, RawEvent};
    use cuflight_trace::model::source::EventSource;
    use cuflight_trace::model::trace::{Process, Trace};

    /// Four steps, each a GEMM operator on an align1 kernel (400 us) and one on the GPU's own kernel (100 us),
    /// both bf16 and recorded with their shapes: the estimate comes from the rates the shapes give.
    #[test]
    fn recorded_shapes_measure_what_padding_would_gain() {
        let mut p = Process::default();
        p.info.pid = 7;
        let strings = [
            (1, "ProfilerStep#0"),
            (2, "aten::mm"),
            (3, r#""Input Dims":[[1024, 1000], [1000, 1024]],"Input type":["c10::BFloat16", "c10::BFloat16"]"#),
            (4, r#""Input Dims":[[1024, 1024], [1024, 1024]],"Input type":["c10::BFloat16", "c10::BFloat16"]"#),
            (5, "cudaLaunchKernel"),
            (6, "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align1"),
            (7, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
        ];
        for (id, s) in strings {
            p.strings.insert(id, s.to_string());
        }
        let range = |name, start, end, text, external| {
            let mut e = RawEvent { name, ..RawEvent::new(EventKind::Range, 1, start, end) };
            e.set_range(RangeRecord {
                category: 0,
                on_device: false,
                external,
                operator_text: text,
                sequence_plus_one: 0,
            });
            e
        };
        let launch = ApiCall { runtime: true, cbid: 211, result: 0, external: 0 };
        let (mut events, mut step, mut corr) = (Vec::new(), 1_000_000u64, 1u32);
        for _ in 0..4 {
            events.push(range(1, step, step + 600_000, 0, 0));
            // The host launches both GEMMs at once and the GPU runs them back to back: the GPU holds the step.
            let (mut host, mut gpu) = (step, step + 20_000);
            for (text, kernel, ns) in [(3, 6, 400_000), (4, 7, 100_000)] {
                events.push(range(2, host + 1_000, host + 20_000, text, corr as u64));
                events.push(RawEvent {
                    name: 5,
                    correlation: corr,
                    ..RawEvent::api_call(1, host + 2_000, host + 10_000, launch)
                });
                let k = RawEvent::new(EventKind::Kernel, 0, gpu, gpu + ns);
                events.push(RawEvent { name: kernel, correlation: corr, stream: 7, ..k });
                (host, gpu, corr) = (host + 20_000, gpu + ns, corr + 1);
            }
            step += 600_000;
        }
        events.sort_by_key(|e| e.start);
        p.events = events;
        let mut trace = Trace::default();
        trace.processes.insert(7, p);
        let mut traces = vec![("t".to_string(), EventSource::from_trace(trace))];
        let report = super::super::Report::compute(&mut traces, &Default::default()).unwrap();
        let f = report.findings.iter().find(|f| f.kind == "misaligned_gemm").expect("misaligned_gemm");
        // By hand: 2*1024*1024*1000 FLOP in 400 us against 2*1024^3 in 100 us.
        let (fallback, others) = (2.0 * 1024.0 * 1024.0 * 1000.0 / 400e3 / 1e3, 2.0 * 1024f64.powi(3) / 100e3 / 1e3);
        let m = &f.evidence.metrics;
        assert!((m["fallback_tflops"] - fallback).abs() < 1e-9 && (m["other_tflops"] - others).abs() < 1e-9, "{m:?}");
        let time = m["fallback_gemm_ns"];
        let steps = report.processes[0].steps.len() as f64;
        assert_eq!(time, steps * 400e3, "{m:?}");
        assert_eq!(f.time_lost_ns, (time * (1.0 - fallback / others)) as u64, "{m:?}");
        assert!(f.evidence.facts.iter().any(|x| x.contains("from the shapes the trace recorded")), "{f:?}");
        // The shapes to pad: 1000 is a multiple of 8, so the fallback is a strided or offset operand's.
        let shapes = f.evidence.facts.iter().find(|x| x.starts_with("the shapes on fallback kernels")).expect("shapes");
        assert!(
            shapes.contains("aten::mm 1024x1024x1000 c10::BFloat16 (4 calls, its sizes are multiples of 8"),
            "{shapes}"
        );
    }
}
