//! Why the GPU idles inside steps. Every idle stretch inside a step window is given to one cause by looking at
//! what the launching threads were doing at that moment:
//!
//! - the next GPU op had already been launched (from its launch on): under 30 µs, the per-kernel launch
//!   overhead of back-to-back kernels (HTA's "kernel wait") → **launch bound**; longer, the GPU waited on
//!   another stream or event, not on the host (`device_wait`, not a host finding), except before a tiny kernel
//!   (under 10 µs) when the steps use a single stream and no event waits: nothing but the launch pipeline can
//!   hold the GPU → **launch bound**;
//! - inside a data-loading annotation: **data loading**;
//! - (calls that only read state, such as `cudaGetDevice`, count as host time, not as CUDA calls: they neither queue
//!   nor wait, and PyTorch makes hundreds a step;)
//! - inside a CUDA call: a synchronising call → **sync stall**; `cudaMalloc`/`cudaFree` → **allocator churn**;
//!   any other call (launches) → **launch bound**;
//! - outside CUDA, after a synchronising call (the queue was drained by it) → **sync stall**; after
//!   `cudaFree` → **allocator churn**; after the step began and before its first CUDA call (the host is
//!   preparing the step's input) → **data loading**; otherwise the host is busy between launches: up to
//!   100 µs at a time, per-op overhead (Python, dispatch, tiny kernels) → **launch bound**; longer, CPU work
//!   the GPU waits for → **CPU bound**.

use super::spans::{clip, subtract, Span};
use super::window::{CallClass, HostCall, WindowView};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Example {
    pub start_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
    pub step: Option<usize>,
    pub what: String,
}

/// Idle time given to one cause.
#[derive(Debug, Clone, Default)]
pub struct Cause {
    pub total_ns: u64,
    pub per_step: Vec<u64>,
    /// Longest stretches (at most 5).
    pub worst: Vec<Example>,
    /// The CUDA call blamed (inside or just before), by name: (count, ns).
    pub calls: std::collections::BTreeMap<String, (u64, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseKind {
    DataLoading = 0,
    SyncStall = 1,
    LaunchBound = 2,
    AllocatorChurn = 3,
    DeviceWait = 4,
    CpuBound = 5,
}

/// Where the GPU's idle time inside steps went (JSON `idle_causes`).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct IdleSummary {
    pub idle_in_steps_ns: u64,
    pub data_loading_ns: u64,
    pub sync_stall_ns: u64,
    pub launch_bound_ns: u64,
    pub cpu_bound_ns: u64,
    pub allocator_churn_ns: u64,
    /// Work was queued but waited on another stream or event.
    pub device_wait_ns: u64,
}

#[derive(Debug, Default)]
pub struct IdleCauses {
    pub causes: [Cause; 6],
    pub idle_in_steps_ns: u64,
}

impl IdleCauses {
    pub fn summary(&self) -> IdleSummary {
        let t = |k: CauseKind| self.get(k).total_ns;
        IdleSummary {
            idle_in_steps_ns: self.idle_in_steps_ns,
            data_loading_ns: t(CauseKind::DataLoading),
            sync_stall_ns: t(CauseKind::SyncStall),
            launch_bound_ns: t(CauseKind::LaunchBound),
            cpu_bound_ns: t(CauseKind::CpuBound),
            allocator_churn_ns: t(CauseKind::AllocatorChurn),
            device_wait_ns: t(CauseKind::DeviceWait),
        }
    }

    pub fn get(&self, k: CauseKind) -> &Cause {
        &self.causes[k as usize]
    }

    fn add(&mut self, k: CauseKind, (a, b): Span, step: Option<usize>, call: Option<&str>, steps: usize) {
        if b <= a {
            return;
        }
        let c = &mut self.causes[k as usize];
        c.total_ns += b - a;
        if c.per_step.len() < steps {
            c.per_step.resize(steps, 0);
        }
        if let Some(s) = step {
            c.per_step[s] += b - a;
        }
        if let Some(name) = call {
            let e = c.calls.entry(name.to_string()).or_default();
            e.0 += 1;
            e.1 += b - a;
        }
        let what = match (call, k) {
            (Some(name), _) => format!("GPU idle, host in or after {name}"),
            (None, CauseKind::LaunchBound | CauseKind::DeviceWait) => "GPU idle with work already queued".to_string(),
            (None, _) => "GPU idle, host outside CUDA".to_string(),
        };
        let ex = Example { start_ns: a, end_ns: b, duration_ns: b - a, step, what };
        let at = c.worst.partition_point(|w| w.duration_ns >= ex.duration_ns);
        if at < 5 {
            c.worst.insert(at, ex);
            c.worst.truncate(5);
        }
    }
}

/// Host time between launches up to this long is per-op overhead (Python, framework dispatch) of a launch-bound
/// loop; longer stretches are CPU work the GPU waits for.
const HOST_OVERHEAD_NS: u64 = 100_000;

/// Kernels shorter than this are "tiny": their launch costs about as much as their work.
const TINY_KERNEL_NS: u64 = 10_000;

/// Gaps between queued GPU ops shorter than this are launch overhead (HTA's `consecutive_kernel_delay`).
const KERNEL_WAIT_NS: u64 = 30_000;

/// Attributes the idle time inside window `k` (of `n`), adding to `out`. `single_stream`: the steps' GPU ops
/// all run on one stream and no stream waits on an event. `step_starts`: every step's host start.
pub fn attribute(v: &WindowView, k: usize, n: usize, single_stream: bool, step_starts: &[u64], out: &mut IdleCauses) {
    // Idle stretches window by window (windows do not overlap), so that no stretch crosses a step boundary.
    let idle = subtract(&[v.span], &v.busy);
    out.idle_in_steps_ns += idle.iter().map(|(a, b)| b - a).sum::<u64>();
    for (a, b) in idle {
        let step = Some(k);
        // The op that ends this stretch: already launched before it began → the GPU waited on itself.
        let next_busy = v.busy.partition_point(|x| x.0 < b);
        let next_op = v.busy.get(next_busy).filter(|x| x.0 == b).and_then(|_| {
            let i = v.closers.partition_point(|c| c.start < b);
            v.closers.get(i).filter(|c| c.start == b)
        });
        // The whole GPU gap (the piece may be clipped by a step boundary).
        let before = next_busy.checked_sub(1).map(|i| v.busy[i].1).or(v.busy_before);
        let gap_start = before.map_or(a, |end| end.min(a));
        // Once the next op is launched, the GPU waits on itself, not on the host.
        let launched = next_op.and_then(|op| op.launched).unwrap_or(b);
        if launched < b {
            // Short gaps between queued ops are the per-kernel launch overhead (HTA's "kernel wait"); long ones
            // are waits on other streams or events. With one stream and no event waits there is nothing else to
            // wait on, so a gap before a tiny kernel is the front end working through a stream of launches:
            // launch overhead too.
            let queued = (a.max(launched), b);
            let tiny_next = next_op.is_some_and(|op| op.duration < TINY_KERNEL_NS);
            let kind = if b - gap_start.max(launched) < KERNEL_WAIT_NS || single_stream && tiny_next {
                CauseKind::LaunchBound
            } else {
                CauseKind::DeviceWait
            };
            out.add(kind, queued, step, None, n);
            if launched <= a {
                continue;
            }
        }
        let b = b.min(launched);
        let mut t = a;
        let first = v.calls.partition_point(|c| c.end <= a);
        for c in v.calls[first..].iter().take_while(|c| c.start < b) {
            if c.start > t {
                outside(v, out, (t, c.start), step, step_starts, n);
            }
            let piece = (c.start.max(t), c.end.min(b));
            let kind = match c.class {
                CallClass::Sync => CauseKind::SyncStall,
                CallClass::Alloc => CauseKind::AllocatorChurn,
                CallClass::Launch => CauseKind::LaunchBound,
            };
            out.add(kind, piece, step, Some(v.name(c.name)), n);
            t = t.max(c.end.min(b));
        }
        if t < b {
            outside(v, out, (t, b), step, step_starts, n);
        }
    }
}

/// Idle time while the launching threads were outside CUDA.
fn outside(v: &WindowView, out: &mut IdleCauses, (a, b): Span, step: Option<usize>, starts: &[u64], n: usize) {
    let mut t = a;
    let loading: Vec<Span> = clip(&v.loader, a, b).collect();
    for piece in loading {
        if piece.0 > t {
            by_previous_call(v, out, (t, piece.0), step, starts, n);
        }
        out.add(CauseKind::DataLoading, piece, step, None, n);
        t = piece.1;
    }
    if t < b {
        by_previous_call(v, out, (t, b), step, starts, n);
    }
}

fn by_previous_call(v: &WindowView, out: &mut IdleCauses, (a, b): Span, step: Option<usize>, starts: &[u64], n: usize) {
    let prev = v.call_before(a);
    let prev_end = prev.map_or(0, |c| c.end);
    // Only a sync inside the loop drains the queue step after step; one before the steps (setup) does not count.
    let in_loop = |c: &HostCall| starts.first().is_some_and(|&s| c.start >= s);
    let (kind, call) = match prev {
        Some(c) if c.class == CallClass::Sync && in_loop(c) => (CauseKind::SyncStall, Some(v.name(c.name))),
        Some(c) if c.class == CallClass::Alloc && v.name(c.name).contains("Free") && in_loop(c) => {
            (CauseKind::AllocatorChurn, Some(v.name(c.name)))
        }
        _ => {
            // A step began since the last CUDA call: the host is getting the step's input ready.
            let k = starts.partition_point(|&s| s <= prev_end);
            if starts.get(k).is_some_and(|&s| s < b) {
                (CauseKind::DataLoading, None)
            } else if b - a < HOST_OVERHEAD_NS {
                (CauseKind::LaunchBound, prev.map(|c| v.name(c.name)))
            } else {
                (CauseKind::CpuBound, prev.map(|c| v.name(c.name)))
            }
        }
    };
    out.add(kind, (a, b), step, call, n);
}
