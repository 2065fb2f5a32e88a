//! Communication as the report reads it on hand-made steps: any library's collective, each told by what the host
//! asked for around its launch.

use super::tests::{api, kernel, report_of_all_steps};
use super::Report;
use cuflight_format::{EventKind, RawEvent};

/// Five ProfilerStep ranges of 100 ns, each launching a GEMM (40 ns) then `comm` (30 ns, after it: exposed), the
/// second inside a host range named `around` where one is given.
fn comm_steps(comm: &str, around: Option<&str>) -> Report {
    let strings = [
        (1, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
        (2, comm),
        (3, around.unwrap_or("unused")),
        (8, "ProfilerStep#0"),
        (9, "cudaLaunchKernel"),
    ];
    let mut events = Vec::new();
    for step in 0..5u64 {
        let (t, corr) = (1000 + step * 100, 1 + step as u32 * 2);
        events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 100) });
        events.push(api(9, t + 1, 1, corr));
        events.push(kernel(1, t + 10, 40, corr));
        if around.is_some() {
            events.push(RawEvent { name: 3, ..RawEvent::new(EventKind::Range, 1, t + 2, t + 6) });
        }
        events.push(api(9, t + 3, 1, corr + 1));
        events.push(kernel(2, t + 50, 30, corr + 1));
    }
    report_of_all_steps(&strings, events)
}

fn nccl_exposed(r: &Report) -> &super::Finding {
    r.findings.iter().find(|f| f.kind == "nccl_exposed").unwrap_or_else(|| panic!("{:?}", r.findings))
}

/// NCCL 2.1x runs collectives without a kernel of their own on its SendRecv kernel: the host's annotation says
/// which, and the fix follows it.
#[test]
fn the_hosts_annotation_tells_what_a_send_recv_kernel_carried() {
    let send_recv = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)";
    let r = comm_steps(send_recv, Some("nccl:all_to_all"));
    let f = nccl_exposed(&r);
    assert_eq!(f.time_lost_ns, 5 * 30);
    assert_eq!(f.evidence.metrics["all_to_all_share"], 1.0, "{f:?}");
    assert_eq!(f.fix, super::gpu_findings::FIX_NCCL_ALL_TO_ALL);
    let r = comm_steps(send_recv, Some("nccl:send 0->1"));
    assert_eq!(nccl_exposed(&r).fix, super::gpu_findings::FIX_NCCL_P2P);
    // An all-reduce on the same kernel: the data-parallel fix (no optimizer ran: in general terms).
    let r = comm_steps(send_recv, Some("nccl:all_reduce"));
    let f = nccl_exposed(&r);
    assert_eq!(f.evidence.metrics["all_reduce_share"], 1.0);
    assert_eq!(f.fix, super::gpu_findings::FIX_NCCL_GENERAL);
    // Nothing around the launch: the kernel's name does not say, and the fact says why.
    let r = comm_steps(send_recv, None);
    let f = nccl_exposed(&r);
    assert_eq!(f.fix, super::gpu_findings::FIX_NCCL_GENERAL);
    assert!(f.evidence.facts.iter().any(|l| l.contains("\"not told\"")), "{:?}", f.evidence.facts);
    // A specialised kernel names its own.
    let r = comm_steps("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", None);
    assert_eq!(nccl_exposed(&r).evidence.metrics["all_gather_share"], 1.0);
}

/// Five steps, each a GEMM then two exposed collectives on NCCL's SendRecv kernel: an all-to-all of `a2a_ns` and an
/// all-reduce of `ar_ns`, each told by the host's range around its launch.
fn mixed_steps(a2a_ns: u64, ar_ns: u64) -> Report {
    let send_recv = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)";
    let strings = [
        (1, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
        (2, send_recv),
        (3, "nccl:all_to_all"),
        (4, "nccl:all_reduce"),
        (8, "ProfilerStep#0"),
        (9, "cudaLaunchKernel"),
    ];
    let mut events = Vec::new();
    for step in 0..5u64 {
        let (t, corr) = (1000 + step * 200, 1 + step as u32 * 3);
        events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 200) });
        events.push(api(9, t + 1, 1, corr));
        events.push(kernel(1, t + 10, 40, corr));
        for (k, range) in [3, 4].into_iter().enumerate() {
            let at = t + 3 + 3 * k as u64;
            events.push(RawEvent { name: range, ..RawEvent::new(EventKind::Range, 1, at - 1, at + 2) });
            events.push(api(9, at, 1, corr + 1 + k as u32));
        }
        events.push(kernel(2, t + 50, a2a_ns, corr + 1));
        events.push(kernel(2, t + 50 + a2a_ns, ar_ns, corr + 2));
    }
    report_of_all_steps(&strings, events)
}

/// The fix follows what ran exposed: all-to-all's own where it is most of it; where it is a large part but not
/// most (the shared two-rank job's first rank: 48%), the general fix with all-to-all named beside it, its share
/// said; under a fifth, not named.
#[test]
fn a_large_share_of_all_to_all_is_named_beside_the_general_fix() {
    let f = nccl_exposed(&mixed_steps(60, 40)).fix.clone();
    assert_eq!(f, super::gpu_findings::FIX_NCCL_ALL_TO_ALL);
    let f = nccl_exposed(&mixed_steps(40, 60)).fix.clone();
    assert!(f.starts_with(super::gpu_findings::FIX_NCCL_GENERAL), "{f}");
    assert!(
        f.ends_with(
            " 40% of it is all-to-all, which those settings do not touch: pipeline the next batch's input \
         distribution behind this batch's compute (TorchRec's TrainPipelineSparseDist) or overlap expert dispatch and \
         combine with compute, and balance tables or experts across ranks."
        ),
        "{f}"
    );
    let f = nccl_exposed(&mixed_steps(10, 90)).fix.clone();
    assert_eq!(f, super::gpu_findings::FIX_NCCL_GENERAL);
}

/// A collective that is not NCCL's (vLLM's custom all-reduce) is communication, not compute: exposed, never
/// overlapping itself. HTA's breakdown still counts it as compute, as HTA does.
#[test]
fn other_libraries_collectives_are_communication() {
    let r = comm_steps("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", None);
    let f = nccl_exposed(&r);
    assert_eq!(f.time_lost_ns, 5 * 30, "{f:?}");
    assert_eq!(f.evidence.metrics["all_reduce_share"], 1.0);
    let b = &r.processes[0].breakdown;
    assert!(b.compute_ns >= 5 * 70, "HTA's compute holds it: {b:?}");
}

/// A collective that started late with the GPU idle is named by what it ran, not by NCCL's SendRecv kernel.
#[test]
fn a_late_collective_is_named_by_its_collective() {
    let strings = [
        (1, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
        (2, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"),
        (3, "nccl:all_to_all"),
        (8, "ProfilerStep#0"),
        (9, "cudaLaunchKernel"),
    ];
    let mut events = Vec::new();
    for step in 0..5u64 {
        let (t, corr) = (1_000_000 + step * 200_000, 1 + step as u32 * 2);
        events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 200_000) });
        events.push(api(9, t + 1, 1, corr));
        events.push(kernel(1, t + 10, 40_000, corr));
        events.push(RawEvent { name: 3, ..RawEvent::new(EventKind::Range, 1, t + 2, t + 6) });
        events.push(api(9, t + 3, 1, corr + 1));
        // Queued since t + 4, started 60 µs after the GEMM ended: it waited for its peers.
        events.push(kernel(2, t + 100_000, 30_000, corr + 1));
    }
    let r = report_of_all_steps(&strings, events);
    let f = r.findings.iter().find(|f| f.kind == "collective_wait").unwrap_or_else(|| panic!("{:?}", r.findings));
    let rows: Vec<&str> = f.evidence.api_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(rows, ["all_to_all on stream 7 started late"], "{f:?}");
}
