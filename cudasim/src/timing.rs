//! What real CUPTI costs in time, so that clients meet on a CPU the delays they meet on a GPU. The first H100
//! run showed why it matters: cuflight's step windows passed every test here while cudasim's CUPTI answered
//! instantly, and on the GPU ten 1 ms steps went by before the agent's first callback (issue 25).
//!
//! Each figure is a default that an environment variable overrides (`0` turns it off):
//!
//! - `CUDASIM_CUPTI_INIT_MS` (default 15): CUPTI initialises lazily, "the first time you invoke any CUPTI
//!   function" (CUPTI User's Guide, 2.2 CUPTI Initialization), so a tool attaching to a running process pays it
//!   while the program runs on. Measured by `scripts/gpu-validate`'s cupti-timing part (tests/c/cupti_timing.c)
//!   on an H100 (driver 580.159.04, CUDA 13.0), 2026-11-27: `cuptiSubscribe` as the first CUPTI call took 14.7 ms
//!   (median of 3 runs; 14.5 to 24.0). The earlier default, 100 ms, was an estimate.
//! - `CUDASIM_CUPTI_ENABLE_US` (default 40): each `cuptiActivityEnable` of a kind, which CUPTI applies to every
//!   context the process has (cupti_activity.h: enabling "for all contexts and streams"). Same run: 9 to 87 µs a
//!   kind (kernel 38, memcpy 15, memset 11 µs, medians); the earlier 2 ms was an estimate.
//! - `CUDASIM_CALLBACK_NS` (default 83): dispatching one callback site (enter or exit) to a subscriber. Measured
//!   on an H100 (CUDA 13.0): `cudaGetDevice` took 37 to 47 ns with no tool and 201 to 228 ns with a no-op
//!   subscriber to the runtime domain (gpu-validate's cost part, medians of 5 runs, two device calls,
//!   2026-11-27), about 166 ns for its two sites; cupti-timing's median gave 166 too. The first H100 run (issue
//!   26's table) had 34 and 148 ns, 57 a site.
//!
//! - `CUDASIM_SYNC_ACTIVITY_NS` (default 175): every runtime call, subscribed or not, while the SYNCHRONIZATION
//!   activity kind is enabled (CUPTI intercepts them all to find the waits). Measured by gpu-validate's kinds part
//!   on an H100 (CUDA 13.0, driver 580.159.04, 2026-11-27): an unsubscribed `cudaGetDevice` took 34 ns with
//!   kernel records and launch callbacks only, 209 ns with SYNCHRONIZATION added, 34 to 37 ns with MEMCPY,
//!   MEMSET, MEMORY2 or OVERHEAD instead (medians of 3 runs). Driver calls were not measured and pay nothing here.
//!
//! - `CUDASIM_CUPTI_LAUNCH_NS` (default 800): every kernel launch while CUPTI is initialised, whatever is enabled:
//!   only `cuptiFinalize` gives a launch its old cost back. Measured by gpu-validate's cycles part
//!   (tests/gpu/attach_cycles.cu `keep`: one subscriber kept across 200 windows, every domain and kind disabled
//!   between them) on an H200 (driver 580.159.04, CUDA 13.0, 2026-11-28): launches 19-23% slower between windows
//!   than before the first. That run's own launch time was not kept; the cost part's plain launch on the H200 took
//!   3.9-4.0 us (issue 26), so about 0.8 us. On an H100 a served model's p50 request took 0.320 ms dormant and
//!   still 0.458 ms after a detach that left CUPTI initialised (agent/src/teardown.rs). Trivial calls pay nothing:
//!   an unsubscribed `cudaGetDevice` took 34 ns with kernel records on (below).
//! - `CUDASIM_KERNEL_RECORD_NS` (default 700): a kernel launch while kernel records (KERNEL or CONCURRENT_KERNEL)
//!   are enabled, beyond the above: a no-op subscriber with kernel records cost a 3.9-4.0 us launch 1.1 to 2.4 us
//!   on the H200 (issue 26), about 1.7 of which 0.8 is CUPTI's being initialised and 0.17 the two callback sites.
//!
//! - `CUDASIM_GRAPH_NODE_RECORD_NS` (default 1100): a graph launch while kernel records are enabled at node level
//!   (the default; not under graph-level tracing, CUPTI_ACTIVITY_KIND_GRAPH_TRACE), for each kernel node of the
//!   graph, on the launching thread. Measured by gpu-validate's graphtrace part on an H200 (driver 580.159.04, CUDA
//!   13.0, 2026-12-01: tests/gpu/compiled_torch.py's reduce-overhead loop, 608 launches of graphs of 107 kernel
//!   nodes each): `cudaGraphLaunch` took a median of 156 us traced per node and 40 us traced per launch, so about
//!   (156 - 40) / 107 = 1.1 us a node.
//!
//! - `CUDASIM_CUPTI_FINALIZE_KEEPS_KB` (default 74): memory CUPTI keeps after each `cuptiFinalize`, never freed.
//!   Measured by gpu-validate's cycles part (tests/gpu/attach_cycles.cu) on an H200 (driver 580.159.04, CUDA 13.0,
//!   2026-11-28): 200 subscribe/finalize cycles in one process left glibc's heap in use 14.8 MB higher after the
//!   first cycle (74 KB a cycle) with runtime callbacks and kernel records, with callbacks only, with neither, and
//!   with cuptiUnsubscribe before each finalize alike; one subscriber kept across 200 windows left 20 KB in all.
//!
//! - `CUDASIM_PINNED_ALLOC_US` (default 2300) and `CUDASIM_PINNED_ALLOC_US_PER_MIB` (default 115): not CUPTI's
//!   but the driver's: a pinned host allocation (`cudaMallocHost`, `cudaHostAlloc`, `cuMemAllocHost`,
//!   `cuMemHostAlloc`) locks its pages and maps them for the device before it returns, which the CUDA
//!   documentation calls heavyweight ("best used sparingly to allocate staging areas", cudaHostAlloc's reference).
//!   Measured by the University of Virginia's CUDA support pages ("Memory Allocation Overhead",
//!   cs.virginia.edu/~mwb7w/cuda_support/memory_management_overhead.html): `cudaMallocHost` took about 2,300 µs a
//!   call up to 1 MB and 61 ms at 512 MB, so (61,000 - 2,300) / 511 ≈ 115 µs per MiB beyond the first. An old
//!   GPU's figures, not yet measured here on an H100 or H200; what matters to the analyses is that a pinned
//!   allocation takes milliseconds, not microseconds.
//!
//! - `CUDASIM_OP_GAP_NS` (default 1700): not CUPTI's but the GPU's own: an operation queued behind another in its
//!   stream starts this long after that one ends (the front end fetching and setting up the next launch). Measured
//!   on the real traces in `shared/traces` (kernels whose launch call returned before the kernel ahead of them
//!   ended): H100 (kineto-h100-qwen-inference, 999 pairs) p10 0.96 us, median 1.70 us, p90 3.97 us; V100
//!   (kineto-v100-ddp-ns, 4346 pairs) median 0.75 us.
//!
//! - `CUDASIM_PM_DECODE_US` (default 33) and `CUDASIM_PM_EVALUATE_US` (default 34): PM sampling's host work, per
//!   sample, on the calling thread: `cuptiPmSamplingDecodeData` for each sample it decodes and
//!   `cuptiProfilerHostEvaluateToGpuValues` for each sample evaluated. Measured by gpu-validate's counters part
//!   (tests/gpu/pm_sampling.cu) on an H200 (CUDA 13.0, 2026-11-28, 13 metrics): decode 903 ms for 27,689 samples at
//!   50 kHz (33 us a sample; 88 us at 10 kHz), evaluate 34 to 35 us a sample. `CUDASIM_PM_START_US` (640) and
//!   `CUDASIM_PM_STOP_US` (1810): `cuptiPmSamplingStart` and `Stop`, the same run. `CUDASIM_PM_HOST_INIT_US`
//!   (default 0): `cuptiProfilerHostInitialize`, which loads the chip's metric tables; **not measured** (the
//!   counters part timed only Start and Stop), so by default free. Set, it plays a set-up that outlasts a short
//!   program: the H200's doctor probe, a ~20 ms program, met a failed set-up on 2026-12-01 where a long program
//!   sampled with the same parameters.
//!
//! - `CUDASIM_MODULE_LOAD_US` (default 0): not CUPTI's but the runtime's: a kernel's first launch in the process
//!   loads it before queueing it. The CUDA Programming Guide's "Lazy Loading" section: the runtime loads each
//!   module "on first usage of a variable or a kernel from that module", the default on Linux from CUDA 12.2
//!   (both releases cudasim models); with `CUDA_MODULE_LOADING=EAGER` every module loads at initialisation
//!   instead, which is not modelled (no launch pays). Each kernel is its own module here. Off by default: how long
//!   a load takes depends on the module and the machine, and no cuflight run on a GPU has measured it. Real traces
//!   recorded by others show first launches of 1.4 ms (HTA's `trace_file_list` inference trace, an elementwise
//!   kernel), 6.5 ms (HTA's MI250 trace, HIP) and 2.1 s (Kineto's V100 ResNet-50 sample, CUDA 11, which loaded
//!   eagerly, so more than one kernel's).
//!
//! Not modelled: an idle GPU starts a kernel about 1.2 us after its launch call returns (the same H100 trace, p50 of
//! 21 kernels launched onto an idle GPU); cudasim's stream thread, parked on its queue, takes 6 to 14 us to wake on
//! a 2-core machine, and a loaded one deschedules it for milliseconds. Polling the queue before parking was tried
//! and made it worse there (26 us: the poller took the core the launching thread needed), so gaps before a kernel
//! launched onto an idle stream are longer here. Keeping the device's own clock in every record (an op starts when
//! queued or behind the op ahead of it, however late the thread ran it) was tried on 2026-11-29 and reverted: the
//! tests whose kernels measure time themselves (ranks that wait for each other inside a kernel, PM samples already
//! decoded) then disagreed with the records. Only a graph launch's kernel nodes keep it: each starts this gap after
//! the node before it (`device.rs`), as a GPU runs a replay's nodes back to back.
//!
//! Activity records need no figure here: as in CUPTI, they reach the client only when a buffer fills or at a
//! flush (`activity.rs`), so their delay is the client's flush period.

use crate::c;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

static INIT_MS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_CUPTI_INIT_MS", 15));
static ENABLE_US: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_CUPTI_ENABLE_US", 40));
static CALLBACK_NS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_CALLBACK_NS", 83));
static SYNC_ACTIVITY_NS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_SYNC_ACTIVITY_NS", 175));
static OP_GAP_NS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_OP_GAP_NS", 1700));
static PINNED_ALLOC_US: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_PINNED_ALLOC_US", 2300));
static PINNED_ALLOC_US_PER_MIB: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_PINNED_ALLOC_US_PER_MIB", 115));
static PM_DECODE_US: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_PM_DECODE_US", 33));
static PM_EVALUATE_US: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_PM_EVALUATE_US", 34));
static PM_START_US: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_PM_START_US", 640));
static PM_STOP_US: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_PM_STOP_US", 1810));
static PM_HOST_INIT_US: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_PM_HOST_INIT_US", 0));
static CUPTI_LAUNCH_NS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_CUPTI_LAUNCH_NS", 800));
static KERNEL_RECORD_NS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_KERNEL_RECORD_NS", 700));
static GRAPH_NODE_RECORD_NS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_GRAPH_NODE_RECORD_NS", 1100));
static FINALIZE_KEEPS_KB: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_CUPTI_FINALIZE_KEEPS_KB", 74));
static MODULE_LOAD_US: Lazy<u64> = Lazy::new(|| {
    let eager = std::env::var("CUDA_MODULE_LOADING").is_ok_and(|v| v.eq_ignore_ascii_case("EAGER"));
    if eager {
        0
    } else {
        env_u64("CUDASIM_MODULE_LOAD_US", 0)
    }
});
/// The kernels (function handles) launched so far: each loads at its first launch.
static LOADED: Mutex<Option<std::collections::HashSet<usize>>> = Mutex::new(None);

/// Whether CUPTI is initialised (false before the first CUPTI call and after cuptiFinalize).
static READY: AtomicBool = AtomicBool::new(false);
static INITIALISING: Mutex<()> = Mutex::new(());

/// CUPTI's lazy initialisation, paid by the first CUPTI call (any entry point), and again by the first call after
/// cuptiFinalize: the CUPTI guide's dynamic attach and detach section has a tool detach with cuptiFinalize and
/// attach again later by calling CUPTI. On an H100 (CUDA 13.0, 2026-11-27) `tests/gpu/attach_cycles.cu` attached
/// (cuptiSubscribe, enable) and finalized 200 times in one process with every window's kernels recorded exactly.
pub(crate) fn cupti_call() {
    if READY.load(Ordering::Acquire) {
        return;
    }
    let _one_at_a_time = INITIALISING.lock();
    if !READY.load(Ordering::Acquire) {
        sleep_ms(*INIT_MS);
        crate::cupti_state::reinitialise();
        READY.store(true, Ordering::Release);
    }
}

/// cuptiFinalize ran: the next CUPTI call initialises CUPTI again, and what CUPTI keeps of the session stays
/// allocated (written, so that it is resident as CUPTI's is) for the life of the process.
pub(crate) fn cupti_finalized() {
    READY.store(false, Ordering::Release);
    let kept = vec![1u8; (*FINALIZE_KEEPS_KB).min(1 << 20) as usize * 1024];
    std::mem::forget(kept);
}

/// A kernel launch's cost of CUPTI: being initialised at all, and kernel records being on (a busy wait: CPU work
/// on the launching thread).
#[inline]
pub(crate) fn kernel_launch() {
    if !READY.load(Ordering::Acquire) {
        return;
    }
    let records = crate::activity::enabled_anywhere(c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
        || crate::activity::enabled_anywhere(c::CUPTI_ACTIVITY_KIND_KERNEL);
    busy_ns(CUPTI_LAUNCH_NS.saturating_add(if records { *KERNEL_RECORD_NS } else { 0 }));
}

/// A launch of kernel `f`: its first loads it (`CUDASIM_MODULE_LOAD_US`; the launching thread waits, as the
/// driver reads and loads the code).
pub(crate) fn kernel_first_launch(f: usize) {
    if *MODULE_LOAD_US == 0 {
        return;
    }
    let first = LOADED.lock().get_or_insert_with(Default::default).insert(f);
    if first {
        std::thread::sleep(std::time::Duration::from_micros(*MODULE_LOAD_US));
    }
}

/// A graph launch of `kernel_nodes` kernel nodes: what node-level kernel records cost it (a busy wait on the
/// launching thread).
pub(crate) fn graph_launch(kernel_nodes: usize) {
    if !READY.load(Ordering::Acquire) || crate::cupti_state::graph_level() {
        return;
    }
    if crate::activity::enabled_anywhere(c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
        || crate::activity::enabled_anywhere(c::CUPTI_ACTIVITY_KIND_KERNEL)
    {
        busy_ns(GRAPH_NODE_RECORD_NS.saturating_mul(kernel_nodes as u64));
    }
}

/// A pinned host allocation of `len` bytes locks and maps its pages (the calling thread sleeps: the kernel does
/// the work).
pub(crate) fn pin_pages(len: usize) {
    let mib_beyond_first = (len as u64 >> 20).saturating_sub(1);
    let us = PINNED_ALLOC_US.saturating_add(PINNED_ALLOC_US_PER_MIB.saturating_mul(mib_beyond_first));
    if us > 0 {
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

/// One `cuptiActivityEnable` (legacy or per-subscriber): a busy wait, so the call takes the tens of microseconds
/// measured, where a sleep that short took about 100 us on a 2-core VM (timer slack and wake-up) and made a
/// sampler that re-enables five kinds a step look 2.5 times dearer than CUPTI is.
pub(crate) fn activity_enable() {
    busy_ns(ENABLE_US.saturating_mul(1000));
}

/// One callback site dispatched to `subscribers` subscribers: a short busy wait, as the dispatch is CPU work on
/// the calling thread.
#[inline]
pub(crate) fn callback_sites(subscribers: usize) {
    busy_ns(*CALLBACK_NS * subscribers as u64);
}

/// A runtime call while SYNCHRONIZATION records are enabled: CUPTI's interception of it.
#[inline]
pub(crate) fn runtime_call_with_sync_records() {
    busy_ns(*SYNC_ACTIVITY_NS);
}

/// `cuptiPmSamplingDecodeData` decoding `samples` samples: CPU work on the calling thread.
pub(crate) fn pm_decode(samples: u64) {
    busy_ns(PM_DECODE_US.saturating_mul(samples).saturating_mul(1000));
}

/// One sample evaluated to metric values: CPU work on the calling thread.
pub(crate) fn pm_evaluate() {
    busy_ns(PM_EVALUATE_US.saturating_mul(1000));
}

/// `cuptiPmSamplingStart` (true) or `Stop` (false).
pub(crate) fn pm_start_stop(start: bool) {
    let us = if start { *PM_START_US } else { *PM_STOP_US };
    if us > 0 {
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

/// `cuptiProfilerHostInitialize`: the calling thread waits (`CUDASIM_PM_HOST_INIT_US`).
pub(crate) fn pm_host_initialize() {
    if *PM_HOST_INIT_US > 0 {
        std::thread::sleep(std::time::Duration::from_micros(*PM_HOST_INIT_US));
    }
}

/// The GPU's gap between two operations queued in one stream (`CUDASIM_OP_GAP_NS`).
pub(crate) fn op_gap_ns() -> u64 {
    *OP_GAP_NS
}

/// A stream's next operation, queued behind one that ended at `previous_end`, waits out the GPU's gap between
/// operations (a busy wait: the stream's thread is the GPU's front end).
pub(crate) fn op_gap(previous_end: u64) {
    if *OP_GAP_NS == 0 {
        return;
    }
    let until = previous_end.saturating_add(*OP_GAP_NS);
    while crate::now_ns() < until {
        std::hint::spin_loop();
    }
}

fn busy_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    let until = crate::now_ns() + ns;
    while crate::now_ns() < until {
        std::hint::spin_loop();
    }
}

fn sleep_ms(ms: u64) {
    if ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}
