//! Findings read off the GPU work itself: pageable and heavy copies, fp32 GEMMs, exposed communication, memory
//! growth and the hot kernels. Everything is measured inside the step windows.

use super::findings::{counted, ms, Ctx, Evidence, Finding, Fixes, KernelRow, Severity};
use super::idle::Example;
use super::short_names::short_name;
use super::sweep::Swept;
use super::tallies::KernelAgg;
use super::window::CommByCollective;
use super::words;
use cuflight_format::event::LaunchConfig;
use cuflight_format::RawEvent;
use cuflight_trace::model::collectives::Collective;
use cuflight_trace::model::kernel_category::Category;

pub const FIX_PAGEABLE: &str = "Copy from pinned memory: DataLoader(pin_memory=True) with tensor.to(device, \
     non_blocking=True); in CUDA code allocate host buffers with cudaMallocHost (or cudaHostRegister them) and use \
     cudaMemcpyAsync.";
pub const FIX_MEMCPY: &str = "Keep data on the GPU: create tensors on the device, avoid repeated .to()/.cpu() \
     round trips, and overlap the remaining copies with compute on a side stream.";
/// The same two for a program that neither trains nor serves (an HPC code, inference): CUDA's terms first, then
/// PyTorch's, where the CloverLeaf export had been told of a DataLoader first.
pub const FIX_PAGEABLE_GENERAL: &str = "Copy from pinned memory: allocate the host buffers once with \
     cudaMallocHost (or cudaHostRegister the existing ones) and copy with cudaMemcpyAsync, so that the copy runs at \
     full speed and the host does not wait for it; in PyTorch, pin_memory() the host tensors and copy them with \
     .to(device, non_blocking=True).";
pub const FIX_MEMCPY_GENERAL: &str = "Keep data on the GPU between steps: copy to the host only what the host \
     reads, and not every step; overlap the remaining copies with compute (cudaMemcpyAsync from pinned memory on a \
     stream of their own; in PyTorch, tensors created on the device and .to(device, non_blocking=True) on a side \
     stream).";
pub(crate) const PAGEABLE_FIXES: Fixes =
    Fixes { training: FIX_PAGEABLE, serving: FIX_PAGEABLE, general: FIX_PAGEABLE_GENERAL };
const MEMCPY_FIXES: Fixes = Fixes { training: FIX_MEMCPY, serving: FIX_MEMCPY, general: FIX_MEMCPY_GENERAL };
pub const FIX_FP32: &str = "Run matmuls and convolutions on Tensor Cores: torch.autocast(\"cuda\", \
     dtype=torch.bfloat16) (or fp16 with GradScaler); at least torch.set_float32_matmul_precision(\"high\") for TF32.";
/// Volta and Turing (compute capability 7.x) have fp16 Tensor Cores only: bf16 and TF32 came with Ampere (8.0), and
/// PyTorch's TF32 switch does nothing before it.
pub const FIX_FP32_FP16_ONLY: &str = "Run matmuls and convolutions on Tensor Cores in fp16: \
     torch.autocast(\"cuda\", dtype=torch.float16), with torch.amp.GradScaler(\"cuda\") when training (compute \
     capability 7.x has fp16 Tensor Cores only: bf16 and TF32 need 8.0 or newer).";
pub const FIX_NCCL: &str = "Overlap communication with compute: DDP bucket_cap_mb (fewer, larger buckets), \
     gradient_as_bucket_view=True, no_sync() during gradient accumulation; FSDP backward_prefetch/forward_prefetch; \
     check the interconnect with NCCL_DEBUG=INFO.";
/// Communication exposed where nothing trains (tensor-parallel inference, a server): DDP and FSDP have no say.
pub const FIX_NCCL_GENERAL: &str = "Overlap communication with compute: issue collectives early and asynchronously \
     (async_op=True, waited on just before the result is needed) with independent compute queued beside them; in \
     tensor-parallel inference, fewer GPUs per model replica where the model fits (less communication per token) \
     and the engine's custom all-reduce for small messages (vLLM and SGLang have one); check the interconnect with \
     NCCL_DEBUG=INFO and nvidia-smi topo -m.";
const NCCL_FIXES: Fixes = Fixes { training: FIX_NCCL, serving: FIX_NCCL_GENERAL, general: FIX_NCCL_GENERAL };
/// Communication exposed that is mostly all-to-alls (the host's annotations say so: NCCL runs them as grouped sends
/// and receives), which DDP's and FSDP's settings do not touch: HTA's sampled two-rank traces, TorchRec's embedding
/// all-to-all.
pub const FIX_NCCL_ALL_TO_ALL: &str = "Most of the exposed communication is all-to-all (sharded embeddings' input \
     and output distribution, as TorchRec's; expert parallelism's dispatch and combine). Overlap it with compute \
     rather than waiting on it at once: pipeline the next batch's input distribution behind this batch's compute \
     (TorchRec's TrainPipelineSparseDist), overlap dispatch and combine with expert compute (split the batch into \
     micro-batches); balance tables or experts across ranks so no rank's all-to-all waits on a heavier one; check \
     the links with NCCL_DEBUG=INFO and nvidia-smi topo -m.";
/// Communication exposed that is mostly sends and receives between two ranks: pipeline stages' transfers.
pub const FIX_NCCL_P2P: &str = "Most of the exposed communication is sends and receives between ranks (pipeline \
     stages' activations and gradients). Post them early (torch.distributed.batch_isend_irecv, or isend/irecv) and \
     wait just before use; in training, more micro-batches per step and an interleaved 1F1B schedule shrink the \
     pipeline's bubbles; in serving, fewer pipeline stages where the model fits; check the links with \
     NCCL_DEBUG=INFO and nvidia-smi topo -m.";
pub const FIX_GROWTH: &str = "Find what keeps tensors alive across steps: accumulate loss.item() or loss.detach(), \
     not loss; clear lists of outputs; check caches. torch.cuda.memory._record_memory_history() shows where the \
     growing blocks were allocated.";
pub const FIX_HOT: &str = "Optimise where the time goes: check the occupancy of the top kernels (block size, \
     registers, shared memory), fuse neighbouring elementwise kernels (torch.compile), use tuned libraries \
     (cuBLAS/cuDNN, FlashAttention).";

pub const FIX_CONCAT: &str = "Stop growing tensors by concatenation (each torch.cat copies the whole tensor again): \
     preallocate and write in place; in Hugging Face generation, a static KV cache \
     (generate(..., cache_implementation=\"static\")), which torch.compile can then fuse around.";
pub const FIX_CASTS: &str = "Fuse or remove casts and contiguous copies: torch.compile fuses them into the \
     kernels beside them (the fp32 upcasts of RMSNorm and rotary embeddings in Hugging Face models among them); keep \
     weights and inputs in one dtype (model.to(torch.bfloat16), not per-op .to()/.float()); avoid \
     .contiguous()/.clone() after transpose or slicing.";
pub const FIX_LAYOUT: &str = "Change layouts once, not per layer: channels_last for the whole model and its inputs \
     (model.to(memory_format=torch.channels_last)), or keep the permuted tensor instead of permuting back.";
pub const FIX_AMP_CASTS: &str = "Mixed precision casts the weights again in every forward: autocast turns each \
     fp32 weight into bf16/fp16 per forward pass and its gradient back to fp32, a cost per parameter, not per \
     sample, so larger micro-batches (fewer gradient-accumulation steps; activation checkpointing to fit them) shrink \
     its share; casts of activations (.float(), .to()) fuse into their neighbours under torch.compile.";
/// Copy kernels must take this share of step time to be a finding: below it they are the layout changes any model
/// makes, and how much of them can go depends on the code.
pub const COPY_MIN_SHARE: f64 = 0.05;
/// In a training step, casts must take this share: autocast casts every weight in each forward and every weight
/// gradient back, 12 bytes a parameter a micro-batch against the GEMMs' 6 FLOPs a parameter a token, so on an
/// H100/H200 (989 dense bf16 TFLOP/s, 3.35-4.8 TB/s) they cost 410-590/tokens of the GEMM time: 5-7% at 8192 tokens
/// a micro-batch, the price of mixed precision (the H200's clean planted loop: 6.2% of its step, 2026-11-28).
/// From 10% the micro-batch is small enough that growing it pays.
pub const AMP_CAST_MIN_SHARE: f64 = 0.10;

/// Assumed speed-up of a GEMM moved from fp32 SIMT to bf16 Tensor Cores: conservative next to the 8-16x peak
/// ratios of V100..H100, since real GEMMs are partly memory-bound.
pub const TENSOR_CORE_SPEEDUP: f64 = 4.0;

fn example(ctx: &Ctx, e: &RawEvent, what: String) -> Example {
    example_at(ctx, (e.start, e.end), what)
}

/// An example of GPU work over `(start, end)`, in the step it starts in.
pub fn example_at(ctx: &Ctx, (start, end): (u64, u64), what: String) -> Example {
    let step = ctx.steps.windows.partition_point(|w| w.0 <= start).checked_sub(1);
    Example { start_ns: start, end_ns: end, duration_ns: end.saturating_sub(start), step, what }
}

fn copy_label(e: &RawEvent) -> String {
    use cuflight_trace::model::cupti_labels::{memcpy_kind, memory_kind};
    let copy = e.as_copy();
    format!("{} {} bytes ({} -> {})", memcpy_kind(copy.kind), copy.bytes, memory_kind(copy.src), memory_kind(copy.dst))
}

pub fn pageable_memcpy(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let c = &swept.pageable;
    if c.count == 0 {
        return None;
    }
    let lost = c.lost_ns;
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} touching pageable host memory moved {:.1} MB at {:.2} GB/s and took {}; the driver stages them \
         through a bounce buffer and the host blocks on them",
        counted(c.count, "copy", "copies"),
        c.bytes as f64 / 1e6,
        if c.busy_ns == 0 { 0.0 } else { c.bytes as f64 / c.busy_ns as f64 },
        ms(lost)
    ));
    ev.metrics.insert("copies", c.count as f64);
    ev.metrics.insert("bytes", c.bytes as f64);
    ev.examples = c.longest.0.iter().map(|e| example(ctx, e, copy_label(e))).collect();
    let summary = format!("copies from/to pageable memory: {}", ctx.per_step(lost));
    let mut f = ctx.finding("pageable_memcpy", lost, summary, ev, ctx.fix(PAGEABLE_FIXES));
    f.sources = swept.sources.rows(super::sources::SourceKind::Pageable, ctx.p);
    Some(f)
}

/// Copies (other than pageable ones, reported above) not hidden behind compute.
pub fn memcpy_heavy(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let c = &swept.other_copies;
    let lost = c.lost_ns;
    if c.count == 0 || ctx.share(lost) < super::findings::MIN_SHARE {
        return None;
    }
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} ({:.1} MB) kept the GPU busy {} without compute running beside them",
        counted(c.count, "copy", "copies"),
        c.bytes as f64 / 1e6,
        ms(lost)
    ));
    ev.metrics.insert("bytes", c.bytes as f64);
    ev.examples = c.longest.0.iter().map(|e| example(ctx, e, copy_label(e))).collect();
    let summary = format!("copies with no compute beside them: {}", ctx.per_step(lost));
    Some(ctx.finding("memcpy_heavy", lost, summary, ev, ctx.fix(MEMCPY_FIXES)))
}

pub fn fp32_gemm(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    if ctx.plan.capability.is_some_and(|(major, _)| major < 7) {
        return None; // no Tensor Cores before Volta
    }
    // AMD's CDNA GPUs run fp32 matrix instructions on their Matrix Cores (MFMA F32: AMD's CDNA2 and CDNA3
    // instruction set references), so an fp32 GEMM there may keep them busy, and its "compute capability" is a
    // gfx number: the claim and the speed-up are NVIDIA's.
    if ctx.p.rocm {
        return None;
    }
    if swept.fp32.count == 0 {
        return None;
    }
    let time = swept.fp32_union_ns;
    let lost = (time as f64 * (1.0 - 1.0 / TENSOR_CORE_SPEEDUP)) as u64;
    let mut ev = Evidence::default();
    let gpu = match ctx.plan.capability {
        Some((major, minor)) => format!("compute capability {major}.{minor}, which has Tensor Cores"),
        None => "a GPU the trace does not name (assumed to have Tensor Cores)".to_string(),
    };
    ev.facts.push(format!(
        "{} fp32 GEMM/convolution kernels ran {} on CUDA cores of {gpu}; at a conservative {TENSOR_CORE_SPEEDUP}x \
         Tensor Core speed-up, {} would be saved",
        swept.fp32.count,
        ran(swept.fp32.total_ns, time),
        ms(lost)
    ));
    ev.metrics.insert("fp32_gemm_ns", time as f64);
    ev.metrics.insert("assumed_speedup", TENSOR_CORE_SPEEDUP);
    ev.kernels = kernel_rows(ctx, &swept.fp32, 5);
    let summary = format!("fp32 GEMMs with Tensor Cores idle: {}", ctx.per_step_of(time, "of GEMM time"));
    let fix = if ctx.plan.capability.is_some_and(|(major, _)| major == 7) { FIX_FP32_FP16_ONLY } else { FIX_FP32 };
    Some(ctx.finding("fp32_gemm", lost, summary, ev, fix))
}

/// How long kernels ran: their summed time, and the wall time they covered where some ran at once (on several
/// streams), so that the figure a finding's loss is taken from (the wall time) and its kernel rows (sums) agree.
fn ran(sum_ns: u64, wall_ns: u64) -> String {
    if sum_ns <= wall_ns + wall_ns / 200 {
        return ms(wall_ns);
    }
    format!("{} ({} of wall time: some ran at once, on several streams)", ms(sum_ns), ms(wall_ns))
}

/// Communication kernels not overlapped by compute. `waited`: whether any collective waited for other ranks
/// (that time is reported as `straggler`, so left out here).
pub fn nccl_exposed(ctx: &Ctx, swept: &Swept, waited: bool) -> Option<Finding> {
    if swept.comm.count == 0 {
        return None;
    }
    let lost = swept.comm_exposed_ns;
    if ctx.share(lost) < super::findings::MIN_SHARE {
        return None;
    }
    let comm_time = swept.comm_union_ns;
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} communication kernels ran {}; {} of it had no compute beside it{}",
        swept.comm.count,
        ran(swept.comm.total_ns, comm_time),
        ms(lost),
        if !waited { "" } else { " (time spent waiting for a slower rank is counted under straggler)" }
    ));
    ev.metrics.insert("overlap", 1.0 - lost as f64 / comm_time.max(1) as f64);
    ev.kernels = kernel_rows(ctx, &swept.comm, 5);
    let by = &swept.comm_by_collective;
    if let Some(fact) = by_collective_fact(by) {
        ev.facts.push(fact);
    }
    for c in Collective::ALL.into_iter().filter(|c| by.total_ns[c.index()] > 0) {
        ev.metrics.insert(collective_metric(c), by.exposed_ns[c.index()] as f64 / lost.max(1) as f64);
    }
    let summary = format!("communication not overlapped with compute: {}", ctx.per_step(lost));
    Some(ctx.finding("nccl_exposed", lost, summary, ev, &nccl_fix(ctx, by, lost)))
}

/// Of the exposed communication, from this share a kind the general fix does not touch (all-to-all, sends and
/// receives) is named beside it; over half, its own fix ("most of the exposed communication is ...") is given.
const NAMED_SHARE: f64 = 0.2;
const NOTE_ALL_TO_ALL: &str = "all-to-all, which those settings do not touch: pipeline the next batch's input \
     distribution behind this batch's compute (TorchRec's TrainPipelineSparseDist) or overlap expert dispatch and \
     combine with compute, and balance tables or experts across ranks.";
const NOTE_P2P: &str = "sends and receives between pipeline stages: post them early (batch_isend_irecv) and wait \
     just before use; more micro-batches per step shrink the pipeline's bubbles.";

/// The fix for exposed communication by what ran exposed: a kind's own fix where it is most of it, else the
/// program's fix with the kinds it does not cover named beside it, each with its share (the shared two-rank job's
/// first rank: all-to-all 48% of its exposed time, all-reduce and all-gather the rest, had been told "most of the
/// exposed communication is all-to-all").
fn nccl_fix(ctx: &Ctx, by: &CommByCollective, lost: u64) -> String {
    let share = |c: Collective| by.exposed_ns[c.index()] as f64 / lost.max(1) as f64;
    let (all_to_all, p2p) = (share(Collective::AllToAll), share(Collective::PointToPoint));
    if all_to_all > 0.5 {
        return FIX_NCCL_ALL_TO_ALL.into();
    }
    if p2p > 0.5 {
        return FIX_NCCL_P2P.into();
    }
    let mut fix = ctx.fix(NCCL_FIXES).to_string();
    for (share, what) in [(all_to_all, NOTE_ALL_TO_ALL), (p2p, NOTE_P2P)] {
        if share >= NAMED_SHARE {
            fix.push_str(&format!(" {} of it is {what}", words::percent(share)));
        }
    }
    fix
}

/// The exposed communication by collective, largest first (at most four), and how they were told: "by collective,
/// exposed of the time each ran: all_to_all 40.12 ms of 182.40 ms, ...". None where only one kind ran and a name
/// said it (the kernel rows say as much).
fn by_collective_fact(by: &CommByCollective) -> Option<String> {
    let not_told = CommByCollective::slot(None);
    let mut told: Vec<(String, usize)> = Collective::ALL.iter().map(|c| (c.label().to_string(), c.index())).collect();
    told.push(("not told".to_string(), not_told));
    told.retain(|(_, i)| by.total_ns[*i] > 0);
    told.sort_by_key(|(_, i)| std::cmp::Reverse((by.exposed_ns[*i], by.total_ns[*i])));
    if told.len() < 2 && by.total_ns[not_told] == 0 {
        return None;
    }
    let parts: Vec<String> = told
        .iter()
        .take(4)
        .map(|(label, i)| format!("{label} {} of {}", ms(by.exposed_ns[*i]), ms(by.total_ns[*i])))
        .collect();
    let unsaid = if by.total_ns[not_told] > 0 {
        "; \"not told\": no annotation around the launch in the trace (PyTorch's process groups write \
         nccl:all_reduce...), and a kernel name that carries any collective (NCCL's SendRecv, RCCL's Generic)"
    } else {
        ""
    };
    Some(format!(
        "by collective, exposed of the time each ran: {} (a kernel's collective is what the host's range around its \
         launch asked for, else what its name says){unsaid}",
        parts.join(", ")
    ))
}

/// The metric that holds a collective's share of the exposed time: `all_to_all_share`, `send_recv_share`.
fn collective_metric(c: Collective) -> &'static str {
    match c {
        Collective::AllReduce => "all_reduce_share",
        Collective::AllGather => "all_gather_share",
        Collective::ReduceScatter => "reduce_scatter_share",
        Collective::AllToAll => "all_to_all_share",
        Collective::Broadcast => "broadcast_share",
        Collective::Reduce => "reduce_share",
        Collective::PointToPoint => "send_recv_share",
    }
}

/// Live device memory at the end of each step (its host range) rising step over step, after a warm-up. Seen from
/// the driver, a leak in a program with a caching allocator (PyTorch's) can rise in bursts: the allocator reserves
/// ahead and the leak consumes the surplus before the next cudaMalloc. On an H100, a planted 256 MiB-per-step leak
/// rose in 8 to 15 of the 27 steps after warm-up when read at window ends (5 runs); read at host step ends, in all
/// 17 steady steps by 256 MiB each (2026-11-27). So: the first tenth of the steps (at least one) is warm-up, where
/// allocators and caches fill; after it, memory must still grow, in at least a fifth of the steps. A warm-up alone
/// never rises after it.
pub fn memory_growth(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let at_end = &swept.memory_at_end;
    if ctx.steps.windows.len() < 4 || at_end.len() < 4 {
        return None;
    }
    let n = at_end.len();
    let after = &at_end[(n / 10).max(1) - 1..];
    let rises = after.windows(2).filter(|w| w[1] > w[0]).count();
    let steady = after[after.len() - 1] - after[0];
    let growth = at_end[n - 1] - at_end[0];
    let per_step = growth / (n as i64 - 1);
    let peak = *at_end.iter().max().unwrap_or(&0);
    if growth <= 0 || rises * 5 < after.len() - 1 || steady < (1 << 20).max(peak / 100) {
        return None;
    }
    let capacity = ctx.plan.device_memory.unwrap_or(0).min(i64::MAX as u64) as i64;
    let steps_left = (capacity > 0).then(|| (capacity - at_end[at_end.len() - 1]).max(0) / per_step.max(1));
    let severity = match steps_left {
        Some(n) if n < 10_000 => Severity::High,
        Some(n) if n < 1_000_000 => Severity::Medium,
        Some(_) => Severity::Low,
        None => Severity::Medium,
    };
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "live device memory grew from {:.1} MiB to {:.1} MiB over {} steps ({:.2} MiB per step, rising in {rises} of \
         the {} steps after warm-up){}",
        at_end[0] as f64 / 1048576.0,
        at_end[n - 1] as f64 / 1048576.0,
        n,
        per_step as f64 / 1048576.0,
        after.len() - 1,
        steps_left.map_or(String::new(), |n| format!("; at this rate the device runs out in about {n} steps"))
    ));
    ev.metrics.insert("growth_per_step_bytes", per_step as f64);
    if let Some(n) = steps_left {
        ev.metrics.insert("steps_to_out_of_memory", n as f64);
    }
    let summary = format!("device memory grows {:.2} MiB per step", per_step as f64 / 1048576.0);
    let mut f = ctx.finding("memory_growth", 0, summary, ev, FIX_GROWTH);
    f.severity = severity;
    Some(f)
}

/// What a copy kernel does, from its name (kernels of the copy category, `model::kernel_category`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CopyKind {
    /// `torch.cat`/`torch.stack`: ATen's `CatArrayBatchedCopy`.
    Concatenation,
    /// Casts and contiguous copies: ATen's `direct_copy_kernel_cuda`, `bfloat16_copy_kernel_cuda`, ...
    Casts,
    /// Transposes and permutes (`nchwToNhwc`, `permute_*`).
    Layout,
}

impl CopyKind {
    fn of(name: &str) -> Option<CopyKind> {
        if cuflight_trace::model::kernel_category::kernel_category(name) != Category::Copy {
            return None;
        }
        let l = name.to_ascii_lowercase();
        Some(if l.contains("catarraybatchedcopy") {
            CopyKind::Concatenation
        } else if l.contains("copy_kernel") {
            CopyKind::Casts
        } else {
            CopyKind::Layout
        })
    }

    fn describe(self) -> &'static str {
        match self {
            CopyKind::Concatenation => "concatenation (torch.cat, torch.stack)",
            CopyKind::Casts => "casts and contiguous copies (.to(dtype), .float(), .contiguous())",
            CopyKind::Layout => "layout changes (transpose, permute, channels-last conversion)",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            CopyKind::Concatenation => FIX_CONCAT,
            CopyKind::Casts => FIX_CASTS,
            CopyKind::Layout => FIX_LAYOUT,
        }
    }
}

/// Kernels that only move data on the device (casts, contiguous copies, concatenation, layout changes), when they
/// take [`COPY_MIN_SHARE`] of step time: the time is an upper bound of what removing them saves (some copies a
/// model needs), so the finding is never more than medium; the fix is the one for the kind that takes most.
pub fn copy_kernels(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    let mut copies = KernelAgg::default();
    let mut kinds: Vec<(CopyKind, u64, u64)> = Vec::new();
    for (&name, &(count, ns, config)) in &swept.kernels.by_name {
        let Some(kind) = CopyKind::of(ctx.p.string(name)) else { continue };
        copies.by_name.insert(name, (count, ns, config));
        copies.count += count;
        copies.total_ns = copies.total_ns.saturating_add(ns);
        match kinds.iter_mut().find(|k| k.0 == kind) {
            Some(k) => (k.1, k.2) = (k.1 + count, k.2.saturating_add(ns)),
            None => kinds.push((kind, count, ns)),
        }
    }
    let time = copies.total_ns;
    // A training loop: autocast casts every weight in each step.
    let training = ctx.plan.training;
    let casts_ns = kinds.iter().find(|k| k.0 == CopyKind::Casts).map_or(0, |k| k.2);
    let enough = if training {
        ctx.share(time - casts_ns) >= COPY_MIN_SHARE || ctx.share(time) >= AMP_CAST_MIN_SHARE
    } else {
        ctx.share(time) >= COPY_MIN_SHARE
    };
    if !enough {
        return None;
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.2));
    let mut ev = Evidence::default();
    ev.facts.push(format!(
        "{} copy kernels ran {} in steps ({:.0}% of kernel time), moving data on the device without computing",
        copies.count,
        ms(time),
        100.0 * time as f64 / swept.kernels.total_ns.max(1) as f64
    ));
    for &(kind, count, ns) in &kinds {
        ev.facts.push(format!("{}: {} in {count} kernels", kind.describe(), ms(ns)));
        ev.metrics.insert(
            match kind {
                CopyKind::Concatenation => "concatenation_ns",
                CopyKind::Casts => "casts_ns",
                CopyKind::Layout => "layout_ns",
            },
            ns as f64,
        );
    }
    if training && casts_ns > 0 {
        ev.facts.push(format!(
            "a training loop (optimizer kernels in the steps): the casts include autocast's weight casts, which \
             every mixed-precision loop pays in each forward (reported from {:.0}% of step time)",
            100.0 * AMP_CAST_MIN_SHARE
        ));
        ev.metrics.insert("training", 1.0);
    }
    ev.kernels = kernel_rows(ctx, &copies, 5);
    for r in &mut ev.kernels {
        r.share_of_kernel_time = r.total_ns as f64 / swept.kernels.total_ns.max(1) as f64;
    }
    let summary = format!(
        "GPU time in kernels that only copy data (casts, concatenation, layout changes): up to {}",
        ctx.per_step(time)
    );
    // The fix of each kind that takes a quarter of the copy time or more, the largest first.
    let fixes: Vec<&str> = kinds
        .iter()
        .filter(|k| k.2.saturating_mul(4) >= time)
        .map(|k| if training && k.0 == CopyKind::Casts { FIX_AMP_CASTS } else { k.0.fix() })
        .collect();
    let mut f = ctx.finding("copy_kernels", time, summary, ev, &fixes.join(" "));
    f.severity = f.severity.min(Severity::Medium);
    Some(f)
}

pub fn hot_kernels(ctx: &Ctx, swept: &Swept) -> Option<Finding> {
    if swept.kernels.count == 0 {
        return None;
    }
    let rows = kernel_rows(ctx, &swept.kernels, 5);
    let mut ev = Evidence::default();
    let top: f64 = rows.iter().map(|r| r.share_of_kernel_time).sum();
    ev.facts.push(format!("the top {} kernels take {:.0}% of kernel time", rows.len(), 100.0 * top));
    let summary =
        format!("{} takes {:.0}% of kernel time", short_name(&rows[0].name), 100.0 * rows[0].share_of_kernel_time);
    ev.kernels = rows;
    let mut f = ctx.finding("hot_kernels", 0, summary, ev, FIX_HOT);
    f.severity = Severity::Info;
    Some(f)
}

/// Kernels grouped by name, most time first.
pub fn kernel_rows(ctx: &Ctx, agg: &KernelAgg, top: usize) -> Vec<KernelRow> {
    let all = agg.total_ns;
    let mut rows: Vec<KernelRow> = agg
        .by_name
        .iter()
        .map(|(&name, &(count, total_ns, [a, b, c]))| {
            let cfg = LaunchConfig::unpack(a, b, c);
            let shared = cfg.static_shared + cfg.dynamic_shared;
            KernelRow {
                name: ctx.p.string(name).to_string(),
                count,
                total_ns,
                mean_ns: total_ns / count,
                share_of_kernel_time: total_ns as f64 / all.max(1) as f64,
                grid: cfg.grid,
                block: cfg.block,
                registers_per_thread: cfg.registers as u32,
                shared_memory_bytes: shared,
                occupancy: ctx.plan.capability.and_then(|cc| cuflight_trace::model::occupancy::estimate(cc, &cfg)),
            }
        })
        .collect();
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    rows.truncate(top);
    rows
}

#[cfg(test)]
mod tests {
    use cuflight_trace::model::kernel_category::is_fp32_gemm;

    #[test]
    fn fp32_gemms_are_told_from_tensor_core_ones_by_name() {
        for n in [
            "volta_sgemm_128x64_nn",
            "ampere_sgemm_128x32_tn",
            "void cutlass::Kernel<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)",
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3",
            "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true>(cublasGemmSmallNParams<float>)",
            "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, true, false, true>(int, int)",
        ] {
            assert!(is_fp32_gemm(n), "{n}");
        }
        for n in [
            "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",
            "volta_h884gemm_64x64_ldg8_nn",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
            "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4",
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)",
            "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize64x128x32",
        ] {
            assert!(!is_fp32_gemm(n), "{n}");
        }
    }
}
