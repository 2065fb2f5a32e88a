//! What queued GPU work waited on, where the op that ended an idle stretch had been launched before it began:
//! a collective, another stream's event, a host function, a CUDA graph's own dependencies, work the trace does
//! not hold, or nothing known ([`super`]'s list says when each applies).

use super::super::short_names::short_name;
use super::super::window::{stream_label, Closer, WindowView};
use super::{CauseKind, KERNEL_WAIT_NS, UNSEEN_WORK_NS};

/// One stretch of a queued wait in words: which op waited, and what ran last before the gap on another stream.
pub(super) fn wait_detail(v: &WindowView, op: &Closer, gap_start: u64, label: &str) -> String {
    let i = v.enders.partition_point(|x| x.end < gap_start);
    let before = v.enders.get(i).filter(|x| x.end == gap_start);
    let name = |id: u32| match v.name(id) {
        "" => "a copy or memset".to_string(), // copies and memsets carry no name
        n => short_name(n),
    };
    let before = before
        .map_or(String::new(), |x| format!("; the GPU's last work was {} on {}", name(x.name), stream_label(x.stream)));
    format!("{label}: {} waited{before}", name(op.name))
}

/// What the queued op `op`, which ended a GPU gap that began at `gap_start`, waited on, and how to say it
/// (bounded labels: streams and collective names, not every kernel's).
pub(super) fn queued_wait(v: &WindowView, op: &Closer, gap_start: u64, waited: u64) -> (CauseKind, String) {
    let stream = stream_label(op.stream);
    if let Some((call, _)) = op.blocking_call.filter(|c| c.1 > gap_start) {
        // Its own call is still running: the host stages the copy (pageable memory) while the GPU waits.
        return (CauseKind::SyncStall, v.name(call).to_string());
    }
    if op.comm {
        // The collective where it is told (NCCL's SendRecv kernel carries any), else the kernel.
        let name = op.collective.map_or_else(|| short_name(v.name(op.name)), |c| c.label().to_string());
        return (CauseKind::Collective, format!("{name} on {stream} started late"));
    }
    // An event recorded behind a host function (the launching thread queued one since its last launch): the
    // producer is host work, which the trace holds.
    if op.after_wait && op.after_host_fn {
        return cross_stream(v, op, gap_start);
    }
    if op.after_host_fn {
        return (CauseKind::HostFunction, format!("{stream} waited for a host function (cudaLaunchHostFunc)"));
    }
    // A graph's nodes may wait on host nodes (CPU work inside the graph) and on nodes no trace records: its own.
    if op.graph && op.launch_first {
        return (CauseKind::Graph, format!("a CUDA graph launched into {stream} started late"));
    }
    if op.graph && waited < KERNEL_WAIT_NS {
        // What the GPU takes between one node and the next: a cost per node, like a launch's, that graphs keep.
        return (CauseKind::Graph, format!("the GPU's own gaps between a CUDA graph's nodes on {stream}"));
    }
    if op.graph {
        return (CauseKind::Graph, format!("work inside a CUDA graph on {stream} waited between its nodes"));
    }
    // Whatever else it waited on (an event, the stream's earlier work) was queued before it and is not running:
    // work the trace does not hold. An event's producer in the trace would be running. Only in traces that can
    // miss their process's work (imports: sampled, captured mid-run): a cuflight capture holds every op since it
    // was armed, where such a wait stays unexplained (another process on the GPU, not told apart yet; on cudasim,
    // the simulated GPU's thread waiting for a core of a loaded machine).
    if waited >= UNSEEN_WORK_NS && v.p.imported {
        return (CauseKind::UnseenWork, format!("queued work on {stream} waited on GPU work not in the trace"));
    }
    if op.after_wait {
        return cross_stream(v, op, gap_start);
    }
    (CauseKind::DeviceWait, format!("queued work on {stream} waited with nothing running"))
}

fn cross_stream(v: &WindowView, op: &Closer, gap_start: u64) -> (CauseKind, String) {
    let i = v.enders.partition_point(|x| x.end < gap_start);
    let from = v.enders.get(i).filter(|x| x.end == gap_start && x.stream != op.stream);
    let from = from.map_or(String::new(), |x| format!(", after work on {}", stream_label(x.stream)));
    (CauseKind::CrossStream, format!("{} waited on an event (cudaStreamWaitEvent){from}", stream_label(op.stream)))
}
