//! What the GPU waited for while the host was in or after a CUDA call: CUDA setting itself up inside the program's
//! calls (`CauseKind::CudaSetup`, the `cuda_setup` finding), a queued op's own call still running, and a sync that
//! found the GPU idle already.

use super::idle::{CauseKind, FIRST_LAUNCH};
use super::tests::{api, kernel, report_of_all_steps};
use cuflight_format::view::{CopyKind, MemoryKind};
use cuflight_format::RawEvent;

const MS: u64 = 1_000_000;

fn strings() -> Vec<(u32, &'static str)> {
    vec![
        (1, "kernel_a"),
        (2, "kernel_b"),
        (9, "cudaLaunchKernel"),
        (10, "cudaEventCreateWithFlags"),
        (11, "cudaStreamCreateWithFlags"),
        (12, "cudaMemcpyAsync"),
    ]
}

/// A program's start-up, as Kineto's ResNet-50 samples of a V100 show it (no steps): a 3 ms event creation and a
/// kernel's 5 ms first launch with the GPU idle are CUDA's set-up; the same kernel's second 5 ms launch is not (its
/// module is loaded), nor a 3 ms stream creation while queued work waits (the GPU waits on its queue).
#[test]
fn cuda_setting_itself_up_is_told_apart_from_launches_and_from_queued_waits() {
    let events = vec![
        api(9, MS, 2_000, 1),
        kernel(1, MS + 3_000, 10_000, 1),
        api(10, 2 * MS, 3 * MS, 0),
        api(9, 6 * MS, 5 * MS, 2),
        kernel(2, 11 * MS + 100, 10_000, 2),
        api(9, 12 * MS, 5 * MS, 3),
        kernel(2, 17 * MS + 100, 10_000, 3),
        // Launched at 20 ms, it waits (on nothing the trace holds) until 25 ms; a stream is created meanwhile.
        api(9, 20 * MS, 2_000, 4),
        api(11, 21 * MS, 3 * MS, 0),
        kernel(1, 25 * MS, 10_000, 4),
    ];
    let r = report_of_all_steps(&strings(), events);
    let c = &r.processes[0].idle_causes;
    assert_eq!(c.cuda_setup_ns, 8 * MS, "{c:?}");
    assert!(c.launch_bound_ns >= 5 * MS, "the second launch is the host's: {c:?}");
    assert!(c.device_wait_ns >= 3 * MS, "the stream was created while queued work waited: {c:?}");
    let f = r.findings.iter().find(|f| f.kind == "cuda_setup").expect("cuda_setup");
    assert!(f.summary.contains("one-off"), "{}", f.summary);
    let calls: Vec<&str> = f.evidence.api_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(calls, [format!("cudaLaunchKernel{FIRST_LAUNCH}").as_str(), "cudaEventCreateWithFlags"]);
    assert!(f.evidence.examples[0].what.contains("the first launch of kernel_b"), "{:?}", f.evidence.examples);
    // Without steps the whole trace was analysed: the fix says how to leave the start-up out (its timeline begins
    // at 1 ms, the first launch, and the set-up ended at 11 ms).
    assert!(f.fix.contains("--filter-time 10ms/26ms t`"), "{}", f.fix);
    assert_eq!(CauseKind::CudaSetup as usize, 14);
}

/// A copy whose call still runs with the copy queued is being staged from pageable memory (Kineto's ResNet-50 sample
/// with DataLoader workers: 3 ms cudaMemcpyAsync calls, read as unexplained waits): a stall on the copy, not a wait
/// on other work; a kernel whose launch call still runs is launch time.
#[test]
fn a_queued_ops_own_call_still_running_is_the_host_not_a_wait() {
    let report = |host: MemoryKind| {
        let copy = |start: u64, corr: u32| RawEvent {
            stream: 7,
            ..RawEvent::copy(start, start + 10_000, corr, CopyKind::HTOD, host, MemoryKind::DEVICE, 8, true)
        };
        let events = vec![
            api(9, MS, 2_000, 1),
            kernel(1, MS + 3_000, 10_000, 1),
            // The copy is queued at 2 ms (its record's start), its call returns at 4 ms; the kernel likewise at 6-8
            // ms.
            api(12, 2 * MS, 2 * MS, 2),
            copy(4 * MS + 1_000, 2),
            api(9, 6 * MS, 2 * MS, 3),
            kernel(1, 8 * MS + 1_000, 10_000, 3),
        ];
        report_of_all_steps(&strings(), events)
    };
    // From pinned memory the call's time is still the host's, but no staging: the driver preparing the copy.
    let pinned = report(MemoryKind::PINNED);
    let f = pinned.findings.iter().find(|f| f.kind == "sync_stall").expect("sync_stall");
    assert!(f.evidence.facts.iter().any(|x| x.ends_with(": the driver preparing them")), "{:?}", f.evidence.facts);
    assert!(!f.summary.contains("pageable"), "{}", f.summary);
    let r = report(MemoryKind::PAGEABLE);
    let c = &r.processes[0].idle_causes;
    assert!(c.sync_stall_ns >= 2 * MS, "{c:?}");
    assert!(c.launch_bound_ns >= 2 * MS, "{c:?}");
    assert!(c.idle_unexplained_ns < 10_000, "{c:?}");
    // The stall is the copy's staging, with no sync in the trace: the finding says so, and gives the pinned-memory
    // fix rather than the one for synchronisation.
    let f = r.findings.iter().find(|f| f.kind == "sync_stall").expect("sync_stall");
    assert!(f.summary.starts_with("host blocks staging copies from pageable memory"), "{}", f.summary);
    assert!(f.fix.starts_with("Copy from pinned memory"), "{}", f.fix);
    assert!(f.evidence.facts.iter().any(|x| x.starts_with("1 copy kept the GPU idle")), "{:?}", f.evidence.facts);
    assert!(!f.evidence.facts.iter().any(|x| x.contains("synchronising")), "{:?}", f.evidence.facts);
    let call = &f.evidence.api_calls[0];
    assert_eq!((call.name.as_str(), call.count), ("cudaMemcpyAsync (staging)", 1));
    assert!(call.total_ns >= 2 * MS && call.total_ns < 2 * MS + 10_000, "{call:?}");
}

/// A loop that creates a stream in every step (2 ms each, CUDA setting up) is told so, with the fix that creates it
/// once; the steps come from the repeating launches.
#[test]
fn cuda_set_up_in_step_after_step_is_named_with_its_fix() {
    let (mut events, mut t, mut corr) = (Vec::new(), MS, 1);
    for _ in 0..6 {
        events.push(api(11, t, 2 * MS, 0));
        t += 2 * MS + 1_000;
        for name in [1, 2, 1] {
            events.push(api(9, t, 2_000, corr));
            events.push(kernel(name, t + 3_000, 10_000, corr));
            corr += 1;
            t += 20_000;
        }
    }
    let r = report_of_all_steps(&strings(), events);
    let f = r.findings.iter().find(|f| f.kind == "cuda_setup").expect("cuda_setup");
    assert!(f.summary.contains("step after step") && f.summary.ends_with(" per step"), "{}", f.summary);
    assert!(f.fix.starts_with("CUDA sets itself up in step after step"), "{}", f.fix);
    assert_eq!(f.evidence.api_calls[0].name, "cudaStreamCreateWithFlags");
    assert!(f.evidence.metrics["steps_with_cuda_setup"] >= 2.0, "{:?}", f.evidence.metrics);
}

/// Five steps of three kernels, then a `cudaStreamSynchronize` and 2 ms of the host's own work. Where the last
/// kernel still runs when the sync is made, the sync drains the queue and the 2 ms are a sync stall; where the GPU
/// had finished before it (TraceLens's timesformer trace: a benchmark's torch.cuda.synchronize() at each step's
/// start, then 218 ms of host work), the sync drained nothing and the 2 ms are the host's (cpu_bound).
#[test]
fn a_sync_stalls_the_gpu_only_where_it_drained_the_queue() {
    let report = |last_kernel_ns: u64| {
        let (mut events, mut t, mut corr) = (Vec::new(), MS, 1);
        for _ in 0..5 {
            for (i, name) in [1, 2, 1].into_iter().enumerate() {
                events.push(api(9, t + 20_000 * i as u64, 2_000, corr));
                let dur = if i == 2 { last_kernel_ns } else { 10_000 };
                events.push(kernel(name, t + 20_000 * i as u64 + 3_000, dur, corr));
                corr += 1;
            }
            // The sync at +100 us returns when the last kernel has ended (or at once).
            let last_end = t + 43_000 + last_kernel_ns;
            events.push(api(13, t + 100_000, last_end.saturating_sub(t + 100_000).max(5_000), 0));
            t += 2_200_000;
        }
        let mut strings = strings();
        strings.push((13, "cudaStreamSynchronize"));
        report_of_all_steps(&strings, events).processes[0].idle_causes
    };
    let idle_gpu = report(10_000);
    assert!(idle_gpu.sync_stall_ns < 100_000, "{idle_gpu:?}");
    assert!(idle_gpu.cpu_bound_ns >= 4 * 1_900_000, "{idle_gpu:?}");
    let busy_gpu = report(110_000);
    assert!(busy_gpu.sync_stall_ns >= 4 * 1_900_000, "{busy_gpu:?}");
    assert!(busy_gpu.cpu_bound_ns < 100_000, "{busy_gpu:?}");
}
