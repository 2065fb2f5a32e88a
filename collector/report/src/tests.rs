//! The report's planning and sweep on hand-made processes: what crosses window boundaries, and memory that
//! stays with the windows.

use super::plan::plan;
use super::steps::StepSource;
use super::sweep::{Sweep, Swept};
use super::Report;
use cuflight_format::view::PyFrameRecord;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::source::EventSource;
use cuflight_trace::model::trace::{Process, Trace};

pub(crate) fn source(p: Process) -> EventSource {
    let mut t = Trace::default();
    t.processes.insert(p.info.pid, p);
    EventSource::from_trace(t)
}

pub(crate) fn process(strings: &[(u32, &str)], mut events: Vec<RawEvent>) -> Process {
    let mut p = Process::default();
    p.info.pid = 7;
    for &(id, s) in strings {
        p.strings.insert(id, s.to_string());
    }
    events.sort_by_key(|e| e.start);
    p.events = events;
    p
}

pub(crate) fn kernel(name: u32, start: u64, dur: u64, corr: u32) -> RawEvent {
    RawEvent { name, correlation: corr, stream: 7, ..RawEvent::new(EventKind::Kernel, 0, start, start + dur) }
}

pub(crate) fn api(name: u32, start: u64, dur: u64, corr: u32) -> RawEvent {
    RawEvent { name, correlation: corr, ..RawEvent::new(EventKind::Api, 1, start, start + dur) }
}

pub(crate) fn sweep(src: &mut EventSource, trim_at: usize) -> Swept {
    let plans = plan(src, None).unwrap();
    let waits = Default::default();
    let (&k, pl) = plans.iter().next().unwrap();
    let mut s = Sweep::new(pl, &waits, false).trim_at(trim_at);
    src.for_each(|_, p, e| s.event(p, e)).unwrap();
    s.finish(&src.processes[&k])
}

/// Five steps without annotations: a pause of 1000 (data), then kernels 1,2,3,2 launched (name 9) 10 apart, each
/// running 5 from 5 after its launch; `extra(step, first launch)` adds events of its own to a step.
fn four_kernel_steps(mut extra: impl FnMut(usize, u64) -> Vec<RawEvent>) -> Vec<RawEvent> {
    let (mut events, mut t, mut corr) = (vec![], 0, 1);
    for step in 0..5 {
        t += 1000;
        events.extend(extra(step, t));
        for name in [1, 2, 3, 2] {
            events.push(kernel(name, t + 5, 5, corr));
            events.push(api(9, t, 2, corr));
            corr += 1;
            t += 10;
        }
    }
    events
}

#[test]
fn pattern_steps_cut_at_the_longest_pause() {
    let events = four_kernel_steps(|_, _| vec![]);
    let mut src = source(process(&[(9, "cudaLaunchKernel")], events));
    let plans = plan(&mut src, None).unwrap();
    let steps = &plans[&7].steps;
    assert_eq!(steps.source, StepSource::Pattern);
    assert_eq!(steps.host.len(), 5);
    assert_eq!((steps.host[0].start, steps.host[1].start), (1000, 2040));
}

/// A window of `p` with nothing in it, for the fields a test sets.
fn empty_view<'a>(
    p: &'a Process,
    span: super::spans::Span,
    graph_nodes: &'a super::window::GraphNodes,
) -> super::window::WindowView<'a> {
    super::window::WindowView {
        p,
        span,
        busy: vec![],
        busy_before: None,
        kernel_busy: vec![],
        compute_busy: vec![],
        memcpy_busy: vec![],
        memset_busy: vec![],
        runtime_busy: vec![],
        loader: vec![],
        cpu: vec![],
        closers: vec![],
        enders: vec![],
        calls: vec![],
        call_before: None,
        graph_setup: Vec::new(),
        cuda_setup: Vec::new(),
        graph_nodes,
    }
}

#[test]
fn the_step_breakdown_gives_each_instant_to_the_first_category_that_applies() {
    let (p, no_graphs) = (process(&[], vec![]), Default::default());
    let view = super::window::WindowView {
        busy: vec![(10, 40)],
        kernel_busy: vec![(10, 30)],
        memcpy_busy: vec![(25, 40)],
        runtime_busy: vec![(0, 12)],
        ..empty_view(&p, (0, 50), &no_graphs)
    };
    let row = super::steps::breakdown(&view, "s");
    assert_eq!((row.kernel_ns, row.memcpy_ns, row.runtime_ns, row.other_ns), (20, 10, 10, 10));
    assert!((row.gpu_utilization - 0.4).abs() < 1e-9);
}

#[test]
fn launch_gaps_are_split_into_host_issue_and_the_gpus_own_gap_between_queued_kernels() {
    use super::idle::{attribute, CauseKind, IdleCauses};
    use super::window::Closer;
    let (p, no_graphs) = (process(&[], vec![]), Default::default());
    let closer = |start, launched, issued| Closer {
        start,
        duration: 10,
        launched: Some(launched),
        issued: Some(issued),
        ..Default::default()
    };
    let view = super::window::WindowView {
        busy: vec![(0, 10), (20, 30), (40, 60)],
        // Issued by a call that returned at 8, before the gap: queued for all of 10-20. The next one's call began
        // at 31 and returned at 45, after the kernel began: the host was issuing it throughout 30-40.
        closers: vec![closer(20, 5, 8), closer(40, 31, 45)],
        ..empty_view(&p, (0, 60), &no_graphs)
    };
    let mut out = IdleCauses::default();
    attribute(&view, 0, 1, true, &[0], &mut out);
    assert_eq!(out.get(CauseKind::LaunchBound).total_ns, 20);
    assert_eq!(out.launch_queued_ns, 10);
}

/// Idle time inside a CUDA graph's launch call is launch overhead, less what CUPTI's node-level tracing adds to the
/// call: up to `GRAPH_NODE_TRACING_NS` per node of the launch over all its stretches, and nothing where the
/// graph was traced one record per launch (no nodes counted for it).
#[test]
fn idle_inside_a_graph_launch_call_is_the_profilers_up_to_its_cost_per_traced_node() {
    use super::idle::{attribute, CauseKind, IdleCauses};
    use super::window::{Closer, GraphNodes, HostCall};
    use cuflight_format::calls::CallClass;
    use cuflight_format::tracing::GRAPH_NODE_TRACING_NS;
    let p = process(&[(1, "cudaGraphLaunch")], vec![]);
    // cudaGraphLaunch runs 1,000-9,000 ns; its nodes start 5,000, 7,000 and (after it returned) 9,000.
    let node = |start| Closer {
        start,
        duration: 500,
        launched: Some(1_000),
        issued: Some(9_000),
        graph: true,
        launch_first: start == 5_000,
        ..Default::default()
    };
    let call = HostCall { start: 1_000, end: 9_000, class: CallClass::Launch, name: 1, source: None, in_op: None };
    let causes = |nodes: &GraphNodes| {
        let view = super::window::WindowView {
            busy: vec![(0, 1_000), (5_000, 5_500), (7_000, 7_500), (9_000, 10_000)],
            closers: vec![node(5_000), node(7_000), node(9_000)],
            calls: vec![call],
            ..empty_view(&p, (0, 10_000), nodes)
        };
        let mut out = IdleCauses::default();
        attribute(&view, 0, 1, true, &[0], &mut out);
        (out.get(CauseKind::GraphTracing).total_ns, out.get(CauseKind::LaunchBound).total_ns)
    };
    // Traced per node: 3 nodes' worth comes out of the first stretch (4,000 ns), none of the later two (1,500 each).
    let traced: GraphNodes = [(1_000, (9_000, 3))].into_iter().collect();
    assert_eq!(causes(&traced), (3 * GRAPH_NODE_TRACING_NS, 7_000 - 3 * GRAPH_NODE_TRACING_NS));
    // A launch of many nodes: at most the idle time inside the call.
    let many: GraphNodes = [(1_000, (9_000, 100))].into_iter().collect();
    assert_eq!(causes(&many), (7_000, 0));
    // One record per launch (`--trace ...,graphs`): all of it is the launch's.
    assert_eq!(causes(&GraphNodes::default()), (0, 7_000));
}

/// A training loop of NVTX steps whose GPU work runs late (the host queues ahead), with a sync at the end of each
/// step, a data-loading range that spans step boundaries, and a kernel longer than a step.
pub(crate) fn loop_trace(steps: u64) -> Process {
    let strings = [(1, "step"), (2, "gemm"), (3, "cudaLaunchKernel"), (4, "cudaStreamSynchronize"), (5, "load_batch")];
    let mut ev = Vec::new();
    let (mut t, mut corr) = (1_000_000u64, 1u32);
    for s in 0..steps {
        ev.push(RawEvent { name: 1, ..RawEvent::new(EventKind::NvtxPush, 1, t, t) });
        // Data loading that started in the previous step's tail.
        ev.push(RawEvent { name: 5, ..RawEvent::new(EventKind::Range, 1, t.saturating_sub(3_000), t + 20_000) });
        t += 20_000;
        for k in 0..8u64 {
            ev.push(api(3, t, 4_000, corr));
            let dur = if s % 7 == 3 && k == 0 { 400_000 } else { 15_000 };
            ev.push(kernel(2, t + 30_000 + k * 16_000, dur, corr));
            corr += 1;
            t += 5_000;
        }
        ev.push(api(4, t, 150_000, 0));
        t += 150_000;
        ev.push(RawEvent { name: 1, ..RawEvent::new(EventKind::NvtxPop, 1, t, t) });
        t += 2_000;
    }
    process(&strings, ev)
}

#[test]
fn trimming_what_the_sweep_keeps_never_changes_the_result() {
    let mut src = source(loop_trace(60));
    let full = sweep(&mut src, 1 << 20);
    let tight = sweep(&mut src, 2);
    let json = |s: &Swept| {
        serde_json::json!({
            "idle": s.idle.summary(), "rows": s.rows, "breakdown": s.breakdown, "split": s.idle_split,
            "util": s.utilization, "sync": s.sync_calls, "kernels": s.kernel_durations.len(),
        })
    };
    assert_eq!(json(&tight), json(&full));
    assert_eq!(full.rows.len(), 60);
    let idle = full.idle.summary();
    // The loading range covers each sync's end, so the idle after it is data loading's, not the sync's.
    assert!(idle.data_loading_ns > 0 && idle.launch_bound_ns > 0 && idle.sync_stall_ns == 0, "{idle:?}");
    assert_eq!(full.sync_calls["cudaStreamSynchronize"].0, 60);
}

#[test]
fn the_sweep_keeps_one_steps_worth_however_long_the_trace() {
    let mut short = source(loop_trace(50));
    let mut long = source(loop_trace(2_000));
    let (a, b) = (sweep(&mut short, 1 << 14), sweep(&mut long, 1 << 14));
    assert_eq!(b.rows.len(), 2_000);
    assert!(
        a.peak_kept > 0 && b.peak_kept <= a.peak_kept + 8,
        "kept {} for 50 steps, {} for 2000",
        a.peak_kept,
        b.peak_kept
    );
}

/// PyTorch's pattern after `loss.item()`: the sync drains the queue, then the host works (logging, the next batch's
/// Python) calling `cudaGetDevice` hundreds of times before it launches again. The idle GPU waits because of the
/// sync; the state queries in between must not take the blame (they neither queue nor wait).
#[test]
fn state_queries_after_a_sync_leave_the_idle_time_to_the_sync() {
    let strings =
        [(1, "step"), (2, "gemm"), (3, "cudaLaunchKernel"), (4, "cudaStreamSynchronize"), (6, "cudaGetDevice")];
    let mut ev = Vec::new();
    let (mut t, mut corr) = (1_000_000u64, 1u32);
    for _ in 0..20 {
        let step_start = t;
        for _ in 0..4 {
            ev.push(api(3, t, 4_000, corr));
            ev.push(kernel(2, t + 5_000, 100_000, corr));
            corr += 1;
            t += 5_000;
        }
        // The sync returns when the last kernel ends.
        let end = t + 400_000;
        ev.push(api(4, t, end - t, 0));
        t = end;
        // 3 ms of host work after the sync, with a state query every 10 µs.
        for _ in 0..300 {
            ev.push(api(6, t + 9_000, 200, 0));
            t += 10_000;
        }
        ev.push(RawEvent { name: 1, ..RawEvent::new(EventKind::Range, 1, step_start, t) });
    }
    let mut src = source(process(&strings, ev));
    let idle = sweep(&mut src, 1 << 20).idle.summary();
    assert!(idle.sync_stall_ns > 19 * 2_900_000, "{idle:?}");
    assert!(idle.cpu_bound_ns + idle.launch_bound_ns < idle.sync_stall_ns / 100, "{idle:?}");
}

/// A GPU-bound leak: each host step allocates 256 MiB and queues a 1 ms kernel in 100 µs, so the host runs ten
/// steps ahead of the GPU and step windows (host range to GPU end) hold several steps' allocations. Live memory
/// is read at each host step's end: it rises by exactly one block a step, to the last.
#[test]
fn a_leak_rises_every_step_when_the_host_runs_ahead_of_the_gpu() {
    let strings = [(1, "step"), (2, "gemm"), (3, "cudaLaunchKernel"), (4, "cudaMalloc")];
    let mut ev = Vec::new();
    let (mut t, mut gpu) = (1_000_000u64, 1_000_000u64);
    for s in 0..20u32 {
        let start = t;
        ev.push(api(4, t, 5_000, 0));
        let block = u64::from(s + 1) << 32;
        ev.push(RawEvent::mem_op(false, 1, t + 4_000, cuflight_format::event::MemKind::Device, block, 256 << 20));
        ev.push(api(3, t + 10_000, 5_000, s + 1));
        gpu = gpu.max(t + 20_000);
        ev.push(kernel(2, gpu, 1_000_000, s + 1));
        gpu += 1_000_000;
        t += 100_000;
        ev.push(RawEvent { name: 1, ..RawEvent::new(EventKind::Range, 1, start, t) });
    }
    let mut src = source(process(&strings, ev));
    let at_end = sweep(&mut src, 1 << 20).memory_at_end;
    let want: Vec<i64> = (1..=20).map(|k| k << 28).collect();
    assert_eq!(at_end, want);
}

#[test]
fn a_stack_read_costs_a_step_only_where_the_gpu_idles() {
    // Pattern steps (four_kernel_steps). In the third step two stacks are read for 3 ns each: one while its
    // first kernel runs (hidden), one in the gap before the next.
    let events = four_kernel_steps(|step, launch| {
        let reads = if step == 2 { vec![(launch + 6, 3), (launch + 11, 3)] } else { vec![] };
        reads
            .into_iter()
            .map(|(at, read)| RawEvent::py_frame(1, at, PyFrameRecord { read_ns: read, ..Default::default() }))
            .collect()
    });
    let mut src = source(process(&[(9, "cudaLaunchKernel")], events));
    let swept = sweep(&mut src, 1 << 20);
    let cost = swept.stack_cost;
    assert_eq!((cost.stacks, cost.in_steps, cost.in_steps_ns, cost.exposed_ns), (2, 2, 6, 3));
}

/// The report of one process of these strings and events, its warm-up steps analysed with the rest.
pub(crate) fn report_of_all_steps(strings: &[(u32, &str)], events: Vec<RawEvent>) -> Report {
    let mut traces = [("t".to_string(), source(process(strings, events)))];
    let opts = super::Options { step: None, include_warmup: true, filter: None };
    Report::compute(&mut traces, &opts).unwrap()
}

/// A fused optimizer's kernel (PyTorch's foreach add).
pub(crate) const FOREACH_ADD: &str = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)";

/// Five ProfilerStep ranges of 100 ns, each launching a GEMM, a cast and a concatenation (ns long), and a fused
/// optimizer kernel when `optimizer_ns` is not 0 (a training step).
fn copy_steps(cast_ns: u64, cat_ns: u64, optimizer_ns: u64) -> Report {
    copy_steps_ending(cast_ns, cat_ns, FOREACH_ADD, optimizer_ns)
}

/// [`copy_steps`] with another fourth kernel (`last`, `last_ns` long; none when 0).
fn copy_steps_ending(cast_ns: u64, cat_ns: u64, last: &str, last_ns: u64) -> Report {
    let strings = [
        (1, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
        (2, "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul>)"),
        (3, "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*)"),
        (4, last),
        (8, "ProfilerStep#0"),
        (9, "cudaLaunchKernel"),
    ];
    let mut events = Vec::new();
    for step in 0..5u64 {
        let (t, corr) = (1000 + step * 100, 1 + step as u32 * 4);
        events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 100) });
        let mut at = t + 10;
        let kernels = [(1, 50), (2, cast_ns), (3, cat_ns), (4, last_ns)];
        for (i, (name, dur)) in kernels.into_iter().filter(|k| k.1 > 0).enumerate() {
            events.push(api(9, t + 1 + i as u64, 1, corr + i as u32));
            events.push(kernel(name, at, dur, corr + i as u32));
            at += dur;
        }
    }
    report_of_all_steps(&strings, events)
}

/// Kernels that only copy data are a finding when they take 5% of step time or more, told apart by kind (casts,
/// concatenation), never more than medium (what can go depends on the code), with the fix of each large kind.
#[test]
fn copy_kernels_are_named_by_kind_with_each_kinds_fix() {
    let r = copy_steps(20, 10, 0);
    let f = r.findings.iter().find(|f| f.kind == "copy_kernels").expect("a finding");
    assert_eq!(f.time_lost_ns, 5 * 30, "{f:?}");
    assert_eq!(f.severity, super::Severity::Medium, "30% of step time, capped");
    assert_eq!((f.evidence.metrics["casts_ns"], f.evidence.metrics["concatenation_ns"]), (100.0, 50.0));
    assert!(f.fix.starts_with("Fuse or remove casts") && f.fix.contains("static KV cache"), "{}", f.fix);
    assert_eq!(f.evidence.kernels.len(), 2);
    assert!((f.evidence.kernels[0].share_of_kernel_time - 20.0 / 80.0).abs() < 1e-9, "a share of all kernel time");
    // 4% of step time: the copies a model needs.
    let r = copy_steps(2, 2, 0);
    assert!(r.findings.iter().all(|f| f.kind != "copy_kernels"), "{:?}", r.findings);
}

/// In a training step (an optimizer or backward kernel ran) casts are, first of all, autocast's weight casts, which every
/// mixed-precision loop pays (the H200's clean planted loop: 6.2% of its step, 2026-11-28): they are a finding only
/// from 10% of step time, with the fix that shrinks them (larger micro-batches), while other copies keep the 5% rule.
#[test]
fn a_training_loops_casts_are_mixed_precisions_price_below_a_tenth_of_the_step() {
    let none = |r: &Report| r.findings.iter().all(|f| f.kind != "copy_kernels");
    // 7% of step time in casts: what an AMP loop pays at a common micro-batch; a finding in inference.
    assert!(none(&copy_steps(7, 0, 5)), "training");
    assert!(!none(&copy_steps(7, 0, 0)), "inference");
    // A backward pass trains too, its optimizer hand-written (plain elementwise updates, no optimizer kernel).
    let backward = "void (anonymous namespace)::softmax_warp_backward<float, float, float, 1, false, false>(float*, float const*, float const*, int, int, int, bool const*)";
    assert!(none(&copy_steps_ending(7, 0, backward, 5)), "a backward pass");
    // 6% of step time in concatenation (not a cast) beside them: the 5% rule.
    assert!(!none(&copy_steps(7, 6, 5)));
    // 12%: more than mixed precision costs at a common micro-batch.
    let r = copy_steps(12, 0, 5);
    let f = r.findings.iter().find(|f| f.kind == "copy_kernels").expect("a finding");
    assert!(f.fix.contains("micro-batch"), "{}", f.fix);
    assert!(f.evidence.facts.iter().any(|l| l.contains("autocast")), "{:?}", f.evidence.facts);
    assert_eq!(f.evidence.metrics["training"], 1.0);
}

/// Steps one after another (`n`, 100 ns each, ranges named step#K), each launching one 50 ns kernel; with
/// `ranges` false the same kernels and calls with no step range at all.
fn filter_report(n: u64, ranges: bool, filter: &str) -> Result<Report, super::ReportError> {
    let strings = [(1, "gemm_kernel"), (8, "step#0"), (9, "cudaLaunchKernel")];
    let mut events = Vec::new();
    for step in 0..n {
        let t = 1000 + step * 100;
        if ranges {
            events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 100) });
        }
        events.push(api(9, t + 1, 2, step as u32 + 1));
        events.push(kernel(1, t + 10, 50, step as u32 + 1));
    }
    let mut traces = [("t".to_string(), source(process(&strings, events)))];
    let filter = cuflight_trace::model::filter::Filter::parse_time(filter).unwrap();
    let opts = super::Options { step: None, include_warmup: false, filter: Some(filter) };
    Report::compute(&mut traces, &opts)
}

/// `report --filter-time` (and `--filter-nvtx`) analyse the steps that start inside the stretch, as the whole run
/// saw them (warm-up or not: they were chosen), and say so; a trace without steps is analysed in the stretch.
#[test]
fn a_filter_chooses_the_steps_the_report_analyses() {
    let r = filter_report(6, true, "100ns/250ns").unwrap();
    let p = &r.processes[0];
    assert_eq!(p.steps.iter().map(|s| s.start_ns).collect::<Vec<_>>(), [1100, 1200], "steps starting inside");
    assert!(p.filtered.as_deref().is_some_and(|f| f.starts_with("the 2 of 6 steps")), "{:?}", p.filtered);
    assert!(p.warmup.filtered);
    // No step starts in the stretch: said, not a report of nothing.
    let e = filter_report(6, true, "120ns/180ns").unwrap_err();
    assert!(e.to_string().contains("no step starts inside"), "{e}");
    // Steps found from the launch pattern are chosen the same way.
    let r = filter_report(6, false, "100ns/300ns").unwrap();
    assert_eq!(r.processes[0].steps.len(), 3, "{:?}", r.processes[0].filtered);
    // Without steps at all (one launch), the stretch itself is analysed.
    let r = filter_report(1, false, "0ns/30ns").unwrap();
    let p = &r.processes[0];
    assert!(p.warnings.iter().any(|w| w.contains("the stretches the filter chose")), "{:?}", p.warnings);
    // Kernels count by their start, as in a step: the one launched at +10 ns is in a stretch that holds its start.
    let busy = |r: &Report| r.processes[0].categories.iter().map(|c| c.total_ns).sum::<u64>();
    assert_eq!(busy(&r), 50);
    assert_eq!(busy(&filter_report(1, false, "15ns/40ns").unwrap()), 0);
    assert!(p.filtered.as_deref().is_some_and(|f| f.starts_with("the 1 of 1 stretches")), "{:?}", p.filtered);
}

/// An older `attach --inject` recorded NVTX while CUPTI was still being set up: the trace opens with steps that
/// hold no CUDA call and no GPU op (143 of them in the shared H100 window). They are left out and counted; a step
/// that only begins before the first CUDA call, and ends after it, stays.
#[test]
fn steps_that_ended_before_the_first_cuda_call_are_left_out() {
    let strings = [(1, "step"), (2, "gemm"), (3, "cudaLaunchKernel")];
    let mut ev = Vec::new();
    let mut t = 1_000_000u64;
    for _ in 0..5 {
        ev.push(RawEvent { name: 1, ..RawEvent::new(EventKind::Range, 1, t, t + 900_000) });
        t += 1_000_000;
    }
    // The step recording began in: its first call 100 µs in.
    for (s, corr) in (0..4).zip(1u32..) {
        let call = if s == 0 { t + 100_000 } else { t + 10_000 };
        ev.push(api(3, call, 5_000, corr));
        ev.push(kernel(2, call + 10_000, 500_000, corr));
        ev.push(RawEvent { name: 1, ..RawEvent::new(EventKind::Range, 1, t, t + 900_000) });
        t += 1_000_000;
    }
    let mut src = source(process(&strings, ev));
    let plans = plan(&mut src, None).unwrap();
    let p = &plans[&7];
    assert_eq!((p.steps_before_cuda, p.steps.host.len()), (5, 4));
    assert_eq!(p.steps.host[0].start, 6_000_000, "the step in which recording began stays");
    // Without any CUDA at all, no step is left out for it (nothing to measure from).
    let only_nvtx: Vec<RawEvent> = (0..3u64)
        .map(|i| RawEvent { name: 1, ..RawEvent::new(EventKind::Range, 1, i * 1000, i * 1000 + 900) })
        .collect();
    let mut src = source(process(&strings, only_nvtx));
    assert_eq!(plan(&mut src, None).unwrap()[&7].steps_before_cuda, 0);
}

/// Five ProfilerStep ranges of 1000 ns, each with a 500 ns fp32 GEMM launched at its start and a 20 ns elementwise
/// kernel launched `last_at` ns in: late, the host holds the step and the GEMM runs beside its work; early, the GPU
/// runs one kernel after the other and holds it.
fn fp32_steps(last_at: u64) -> Report {
    fp32_steps_of(&[(1000, 500, last_at); 5])
}

/// ProfilerStep ranges one after the other, each (its length, its fp32 GEMM's, when its last kernel is launched):
/// the GEMM launched at the step's start, a 20 ns elementwise kernel after it.
fn fp32_steps_of(steps: &[(u64, u64, u64)]) -> Report {
    let strings = [
        (1, "ampere_sgemm_128x64_nn"),
        (2, "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)"),
        (8, "ProfilerStep#0"),
        (9, "cudaLaunchKernel"),
    ];
    let mut events = Vec::new();
    let mut t = 10_000;
    for (step, &(len, gemm, last_at)) in steps.iter().enumerate() {
        let corr = 1 + step as u32 * 2;
        events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + len) });
        events.push(api(9, t + 1, 5, corr));
        events.push(kernel(1, t + 10, gemm, corr));
        events.push(api(9, t + last_at, 5, corr + 1));
        events.push(kernel(2, (t + last_at + 10).max(t + 10 + gemm), 20, corr + 1));
        t += len;
    }
    report_of_all_steps(&strings, events)
}

/// A finding about the GPU's own time saves step time only as far as the GPU holds the step: where the typical
/// step's critical path is the host's, the fp32 GEMMs' loss is capped at the path's GPU part and says so.
#[test]
fn gpu_findings_are_bounded_by_the_critical_paths_gpu_time() {
    let fp32 = |r: &Report| r.findings.iter().find(|f| f.kind == "fp32_gemm").cloned().expect("fp32_gemm");
    // The GPU holds the step: 375 ns of the 500 ns GEMM would go with Tensor Cores, in each 1000 ns step.
    let gpu_bound = fp32(&fp32_steps(6));
    assert_eq!(gpu_bound.time_lost_ns, 5 * 375, "{gpu_bound:?}");
    assert!(!gpu_bound.evidence.metrics.contains_key("critical_path_gpu_share"));
    // The host launches the step's last kernel 950 ns in: the path is host work and that kernel (2% GPU).
    let r = fp32_steps(950);
    let path = r.processes[0].critical_path.as_ref().expect("a path");
    let host = path.by_kind.iter().find(|g| g.what == "host work").expect("host work");
    assert!(host.share > 0.9, "{path:?}");
    let f = fp32(&r);
    let m = &f.evidence.metrics;
    assert_eq!(m["gpu_time_ns"], 5.0 * 375.0, "what the GEMMs would save on the GPU stays: {m:?}");
    assert!(m["critical_path_gpu_share"] < 0.05, "{m:?}");
    assert_eq!(f.time_lost_ns, (m["critical_path_gpu_share"] * 5000.0) as u64, "{f:?}");
    assert_eq!(f.severity, super::Severity::Low, "still listed: {f:?}");
    assert!(f.evidence.facts.iter().any(|x| x.contains("overlaps the host's")), "{:?}", f.evidence.facts);
    assert!(r.findings.iter().any(|x| x.kind == "fp32_gemm"), "in the report's list");
}

/// Steps that differ in what holds them are each bounded by their own paths: five short steps the host holds and
/// three long ones of a 2900 ns GEMM (a server's decodes and prefills). The typical step is a short one, whose path
/// (2% GPU) would cap the GEMMs' loss at 0.3 µs; the long steps' paths are the GPU's, and the loss they measure
/// (6.5 µs of the 8.4) stands.
#[test]
fn steps_that_differ_are_each_bounded_by_their_own_paths() {
    let (short, long) = ((1000, 500, 950), (3000, 2900, 6));
    let r = fp32_steps_of(&[short, long, short, short, long, short, long, short]);
    let path = r.processes[0].critical_path.as_ref().expect("a path");
    assert_eq!(path.step_ns, 1000, "the typical step is a short one: {path:?}");
    let f = r.findings.iter().find(|f| f.kind == "fp32_gemm").expect("fp32_gemm");
    let gemm_ns = 5 * 500 + 3 * 2900;
    assert_eq!(f.time_lost_ns, gemm_ns * 3 / 4, "not capped: {f:?}");
    assert!(!f.evidence.metrics.contains_key("critical_path_gpu_share"), "{f:?}");
    // What holds the slow steps is shown beside the typical step's path: the GEMM, not the host.
    let p = &r.processes[0];
    let slow = p.slow_step_path.as_ref().expect("a slow step's path");
    assert_eq!((slow.path.step_ns, slow.group_steps, slow.of_steps), (3000, 1, 8), "{slow:?}");
    assert!(slow.path.gpu_share() > 0.9 && path.gpu_share() < 0.1, "{slow:?}");
    let line = super::text::slow_path_line(slow, path);
    assert!(
        line.starts_with("Critical path of a slow step (ProfilerStep#0, 3.0 µs, 3.0x the typical; the slowest"),
        "{line}"
    );
    // Short steps alone: capped, all five paths walked, and no slow step to show.
    let r = fp32_steps_of(&[short; 5]);
    let f = r.findings.iter().find(|f| f.kind == "fp32_gemm").expect("fp32_gemm");
    assert!(f.evidence.facts.iter().any(|x| x.starts_with("the critical paths of all 5 steps hold")), "{f:?}");
    assert!(r.processes[0].slow_step_path.is_none());
    // Slow steps held as the typical ones are, only longer, show nothing new.
    let r = fp32_steps_of(&[short, short, (2000, 500, 1950), short]);
    assert!(r.processes[0].slow_step_path.is_none(), "{:?}", r.processes[0].slow_step_path);
}

/// A long run's text shows how it began and its slowest steps, not its first ten, and the steps' spread beside the
/// mean (1643 steps of an attached window showed 10 of its first ms, all near the median).
#[test]
fn a_long_run_shows_its_first_steps_and_its_slowest_with_their_spread() {
    use super::steps::StepRow;
    let ms = 1_000_000;
    let step = |i: u64| StepRow {
        name: format!("s{i}"),
        duration_ns: if i % 10 == 7 { 6 * ms + i } else { ms },
        ..StepRow::default()
    };
    let steps: Vec<StepRow> = (0..100).map(step).collect();
    let shown = super::text_steps::shown_steps(&steps);
    assert_eq!(shown, [0, 1, 2, 17, 27, 37, 47, 57, 67, 77, 87, 97], "the first 3, then the 9 slowest in step order");
    let spread = super::steps::spread(&steps).unwrap();
    assert_eq!((spread.median_ns, spread.p90_ns, spread.slowest_ns), (ms, ms, 6 * ms + 97));
    assert_eq!(spread.slowest, "s97");
    let short: Vec<StepRow> = (0..12).map(step).collect();
    assert_eq!(super::text_steps::shown_steps(&short), (0..12).collect::<Vec<_>>());
    assert!(super::steps::spread(&steps[..1]).is_none());
}
