//! Findings for idle time the GPU spent with work queued (what that work waited on), for host polling, and for the
//! host setting CUDA up (graph captures, CUDA's own set-up): the causes `idle.rs` tells apart beyond the host-side
//! ones of `findings.rs`.

use super::findings::{ms, rows_by_time, Ctx, Evidence, Finding};
use super::idle::{CauseKind, IdleCauses, FIRST_LAUNCH};
use super::words::counted;

const FIX_CROSS_STREAM: &str = "A stream waited on an event recorded in another stream while the GPU had nothing \
     else to run: record the event right after the work it guards (not after later work), launch that work \
     earlier or on a higher-priority stream (cudaStreamCreateWithPriority; torch.cuda.Stream(priority=-1)), and \
     queue independent work before the wait so the GPU has something to do.";
const FIX_COLLECTIVE: &str = "A collective started late with the GPU idle: it waited for its peers (see the job \
     view: which rank arrived last) or for the work its communication stream waits on. Balance the ranks' work \
     (for all-to-alls, the embedding tables or experts each rank holds), issue collectives earlier (for DDP's and \
     FSDP's all-reduces and all-gathers, bucket_cap_mb and forward/backward prefetch) and keep compute queued \
     behind them.";
const FIX_GRAPH: &str = "CUDA graph work waited with the GPU idle and queued: a graph that starts late waits for \
     its upload (call cudaGraphUpload once after instantiating; torch.compile's cudagraph trees re-record when \
     input shapes or addresses change) or for the stream's earlier dependencies; nodes that wait inside a graph \
     wait on something outside it (an event or external wait node, a host node). Print the graph \
     (cudaGraphDebugDotPrint) and capture the producer into the same graph. The GPU's own gaps between nodes (a \
     microsecond or so each) are a cost per node that graphs keep: fewer, larger kernels (torch.compile fuses \
     small ops) shrink them. Under node-level tracing CUPTI adds to each replay's start; `--trace ...,graphs` \
     (one record per launch) disturbs it less.";
const FIX_HOST_FN: &str = "Queued GPU work waited for a host function in its stream (cudaLaunchHostFunc, \
     cudaStreamAddCallback) while the GPU had nothing else to run: keep host functions short (signal a host \
     thread instead of working inside the callback), or move them to a side stream the GPU work does not wait on.";
const FIX_UNSEEN: &str = "Queued work waited a millisecond or more while no GPU op of this trace ran: the GPU was \
     busy with work the trace does not hold. Another process on the same GPU (see nvidia-smi; record it too: \
     cuflight record or attach to each, or give each its own GPU or MIG slice), work queued before the capture \
     began (start the capture earlier, or between steps), or a trace that samples its events (record it whole).";
const FIX_GRAPH_SETUP_ONCE: &str = "The GPU idled while the program captured and instantiated CUDA graphs: \
     their launches describe graph nodes and run nothing until the graph is replayed. A one-off start-up cost when \
     each graph is captured once and replayed (vLLM and SGLang capture every batch size at start-up, \
     torch.compile(mode=\"reduce-overhead\") on its first calls): profile the replays, after warm-up, to see \
     the steady state. Fewer captured sizes (vLLM cudagraph_capture_sizes, SGLang cuda-graph-max-bs) shorten it.";
const FIX_GRAPH_SETUP_EVERY_STEP: &str = "The program captures or instantiates CUDA graphs in step after step: \
     the GPU idles through every capture and the graphs save nothing. Capture once per input shape and replay: \
     keep shapes static (pad batches to the captured sizes, torch._dynamo.mark_static or \
     torch.compile(dynamic=False)), keep tensors at the same addresses (torch.compile's cudagraph trees \
     re-record when inputs move; static input buffers with torch.cuda.graphs), and update an instantiated graph \
     (cudaGraphExecUpdate) instead of instantiating a new one.";
const FIX_POLLING: &str = "The host polled (cudaEventQuery/cudaStreamQuery in a loop) while the GPU had nothing \
     queued: queue the dependent work behind the event on the device instead (cudaStreamWaitEvent), launch \
     independent work before waiting, or block once (cudaEventSynchronize on an event created with \
     cudaEventBlockingSync) instead of spinning.";

/// graph_capture: the GPU idle while the host built CUDA graphs, once (start-up) or step after step.
pub fn graph_setup(ctx: &Ctx, idle: &IdleCauses) -> Option<Finding> {
    let c = idle.get(CauseKind::GraphSetup);
    if c.total_ns == 0 {
        return None;
    }
    let steps = ctx.steps_count();
    let with_setup = c.per_step.iter().filter(|&&ns| ns > 0).count();
    // Steps that build graphs, two or more of them: not a start-up that happened to fall inside the steps.
    let every_step = !ctx.plan.no_steps && with_setup >= 2;
    let mut ev = Evidence { steps: ctx.worst_steps(&c.per_step), examples: c.worst.clone(), ..Default::default() };
    ev.facts.push(if every_step {
        format!(
            "{with_setup} of {steps} steps captured or instantiated CUDA graphs, the GPU idle {} in all",
            ms(c.total_ns)
        )
    } else {
        format!("the GPU idled {} while the host captured and instantiated CUDA graphs", ms(c.total_ns))
    });
    ev.metrics.insert("steps_with_graph_setup", with_setup as f64);
    let (summary, fix) = if every_step {
        (
            format!("CUDA graphs captured again step after step: {} per step", ms(c.total_ns / steps as u64)),
            FIX_GRAPH_SETUP_EVERY_STEP,
        )
    } else {
        (
            format!("the GPU idles while CUDA graphs are captured (a one-off set-up): {}", ms(c.total_ns)),
            FIX_GRAPH_SETUP_ONCE,
        )
    };
    Some(ctx.finding("graph_capture", c.total_ns, summary, ev, fix))
}

const FIX_CUDA_SETUP_ONCE: &str = "The GPU idled while CUDA set itself up inside calls that take microseconds \
     once it has: initialising, creating streams and library handles (cuBLAS, cuDNN), loading kernels. A start-up \
     cost, paid once: measure the steady state after it (torch.profiler's schedule(wait=1, warmup=1, active=3); a \
     warm-up iteration before timing or serving) rather than tuning it.";
/// NVIDIA's driver tears the GPUs' state down when no program holds them, unless persistence keeps it.
const FIX_CUDA_SETUP_PERSISTENCE: &str = " Seconds of initialising are the driver setting the GPUs up again for each \
     program: keep them initialised between programs (nvidia-persistenced, or persistence mode: nvidia-smi -pm 1).";
/// HIP loads a module's code objects at the first launch of one of its kernels unless told otherwise
/// (HIP_ENABLE_DEFERRED_LOADING, 1 by default: ROCm's HIP environment variables); there is no PTX to compile: a
/// fat binary without code for the GPU's architecture fails to launch.
const FIX_HIP_SETUP_LOADING: &str = " A kernel's first launch that takes long loads its module's code object (HIP \
     defers loading to the first launch; HIP_ENABLE_DEFERRED_LOADING=0 loads every code object at start-up \
     instead, out of the steps).";
const FIX_CUDA_SETUP_LOADING: &str = " Where CUDA loads every kernel of a library at its first call (no lazy \
     loading), CUDA_MODULE_LOADING=LAZY (CUDA 11.7 and later, the default on Linux from 12.2; PyTorch sets it from \
     1.13) loads each kernel at its first launch instead; a first launch that takes long compiles PTX for this GPU: \
     build for its architecture (TORCH_CUDA_ARCH_LIST, nvcc -gencode) or keep the JIT cache (CUDA_CACHE_MAXSIZE).";
const FIX_CUDA_SETUP_EVERY_STEP: &str = "CUDA sets itself up in step after step: the loop creates streams, events, \
     library handles or contexts, or loads modules, each time (a torch.cuda.Stream() or a new thread's first CUDA \
     call per step, a kernel compiled and loaded for each new input shape). Create them once before the loop and \
     reuse them; keep input shapes static so that no new kernel is built and loaded.";

/// cuda_setup: the GPU idle while CUDA set itself up inside the launching threads' calls, once (start-up, a library's
/// first use) or step after step. `span`: the trace's timeline (start, end), for the `--filter-time` that leaves a
/// start-up out of a trace without steps.
pub fn cuda_setup(ctx: &Ctx, idle: &IdleCauses, span: (u64, u64)) -> Option<Finding> {
    let c = idle.get(CauseKind::CudaSetup);
    if c.total_ns == 0 {
        return None;
    }
    let steps = ctx.steps_count();
    let with_setup = c.per_step.iter().filter(|&&ns| ns > 0).count();
    // Steady steps that set CUDA up, two or more of them: not a first use that happened to fall inside the steps.
    let every_step = ctx.has_steps() && with_setup >= 2;
    let mut ev = Evidence { steps: ctx.worst_steps(&c.per_step), examples: c.worst.clone(), ..Default::default() };
    let mut rows = rows_by_time(c.calls.iter().map(|(n, &counts)| (n, counts)));
    rows.truncate(5);
    let first_launches = c.calls.iter().filter(|(n, _)| n.ends_with(FIRST_LAUNCH)).map(|(_, &(k, _))| k).sum::<u64>();
    ev.facts.push(format!(
        "the GPU idled {} while a launching thread was inside calls in which CUDA set itself up{}: {}",
        ms(c.total_ns),
        if every_step { format!(", in {with_setup} of {steps} steps") } else { String::new() },
        rows.first().map_or(String::from("-"), |r| format!("most in {} ({})", r.name, ms(r.total_ns)))
    ));
    if first_launches > 0 {
        let launches = counted(first_launches, "kernel's first launch", "kernels' first launches");
        // CUDA may compile PTX at a first launch; HIP has no such JIT (its words are said at the end).
        let loaded = if ctx.p.rocm { "" } else { " (or compiled it from PTX)" };
        ev.facts.push(format!("{launches} took 1 ms or more: CUDA loaded the kernel's module then{loaded}"));
    }
    ev.api_calls = rows;
    ev.metrics.insert("steps_with_cuda_setup", with_setup as f64);
    let summary = if every_step {
        format!("CUDA set itself up again step after step: {}", ctx.per_step(c.total_ns))
    } else {
        format!("the GPU idles while CUDA sets itself up (a one-off start-up cost): {}", ms(c.total_ns))
    };
    let fix = if every_step {
        FIX_CUDA_SETUP_EVERY_STEP.to_string()
    } else {
        let after = c.worst.iter().map(|w| w.end_ns).max().unwrap_or(0);
        // Without steps the whole trace is analysed: the same trace from after its start-up is the steady state.
        let filter = (!ctx.has_steps() && after > span.0 && span.1 > after).then(|| {
            let ms_after = |t: u64| (t - span.0).div_ceil(1_000_000);
            let (from, to) = (ms_after(after), ms_after(span.1) + 1);
            format!(
                " Here: `cuflight report --filter-time {from}ms/{to}ms {}` analyses what follows the longest of these \
                 stretches.",
                ctx.trace
            )
        });
        let platform = if ctx.p.rocm {
            FIX_HIP_SETUP_LOADING.to_string()
        } else {
            format!("{FIX_CUDA_SETUP_PERSISTENCE}{FIX_CUDA_SETUP_LOADING}")
        };
        format!("{FIX_CUDA_SETUP_ONCE}{platform}{}", filter.unwrap_or_default())
    };
    Some(ctx.finding("cuda_setup", c.total_ns, summary, ev, &fix))
}

/// cross_stream_wait, collective_wait, host_function_wait, graph_wait, unseen_gpu_work, host_polling.
pub fn wait_findings(ctx: &Ctx, idle: &IdleCauses) -> Vec<Finding> {
    let steps = ctx.steps_count() as u64;
    let kinds: [(CauseKind, &'static str, &str, &str); 6] = [
        (CauseKind::CrossStream, "cross_stream_wait", "queued work waited on another stream's event", FIX_CROSS_STREAM),
        (CauseKind::Collective, "collective_wait", "collectives started late with the GPU idle", FIX_COLLECTIVE),
        (CauseKind::HostFunction, "host_function_wait", "queued work waited for a host function", FIX_HOST_FN),
        (CauseKind::Graph, "graph_wait", "CUDA graph work waited with the GPU idle", FIX_GRAPH),
        (
            CauseKind::UnseenWork,
            "unseen_gpu_work",
            "queued work waited on GPU work the trace does not hold",
            FIX_UNSEEN,
        ),
        (CauseKind::HostPolling, "host_polling", "the host polls for completion while the GPU idles", FIX_POLLING),
    ];
    let mut out = Vec::new();
    for (kind, name, what, fix) in kinds {
        let c = idle.get(kind);
        if c.total_ns == 0 {
            continue;
        }
        let mut ev = Evidence { steps: ctx.worst_steps(&c.per_step), examples: c.worst.clone(), ..Default::default() };
        let mut rows = rows_by_time(c.calls.iter().map(|(n, &counts)| (n, counts)));
        rows.truncate(5);
        let (count, _) = c.calls.values().fold((0, 0), |a, &(n, t)| (a.0 + n, a.1 + t));
        ev.facts.push(format!(
            "the GPU idled {}, in {}: {}",
            ctx.per_step(c.total_ns),
            counted(count, "stretch", "stretches"),
            rows.first().map_or(String::from("-"), |r| format!("most in \"{}\" ({})", r.name, ms(r.total_ns)))
        ));
        ev.api_calls = rows;
        ev.metrics.insert("idle_per_step_ns", (c.total_ns / steps) as f64);
        let summary = format!("{what}: {}", ctx.per_step(c.total_ns));
        out.push(ctx.finding(name, c.total_ns, summary, ev, fix));
    }
    out
}
