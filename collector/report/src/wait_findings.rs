//! Findings for idle time the GPU spent with work queued (what that work waited on) and for host polling:
//! the causes `idle.rs` tells apart beyond the host-side ones of `findings.rs`.

use super::findings::{ms, rows_by_time, Ctx, Evidence, Finding};
use super::idle::{CauseKind, IdleCauses};

const FIX_CROSS_STREAM: &str = "A stream waited on an event recorded in another stream while the GPU had nothing \
     else to run: record the event right after the work it guards (not after later work), launch that work \
     earlier or on a higher-priority stream (cudaStreamCreateWithPriority; torch.cuda.Stream(priority=-1)), and \
     queue independent work before the wait so the GPU has something to do.";
const FIX_COLLECTIVE: &str = "A collective started late with the GPU idle: it waited for its peers (see the job \
     view: which rank arrived last) or for the work its communication stream waits on. Balance the ranks' work, \
     issue collectives earlier (DDP bucket_cap_mb, FSDP forward/backward prefetch) and keep compute queued \
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
            "the GPU idled {} per step in {count} stretches: {}",
            ms(c.total_ns / steps),
            rows.first().map_or(String::from("-"), |r| format!("most in \"{}\" ({})", r.name, ms(r.total_ns)))
        ));
        ev.api_calls = rows;
        ev.metrics.insert("idle_per_step_ns", (c.total_ns / steps) as f64);
        let summary = format!("{what}: {} per step", ms(c.total_ns / steps));
        out.push(ctx.finding(name, c.total_ns, summary, ev, fix));
    }
    out
}
