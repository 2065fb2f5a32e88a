//! **Test double.** What the simulated device's performance counters count: each kernel and copy that ran while
//! PM sampling was started on its device leaves a span of declared work, and a sample's counters are the share of
//! each span's work inside the sample's interval. The client-facing entry points are in `pm_sampling.rs`.
//!
//! A simulated kernel says what it does with `cudasim_kernel_work(bytes_read, bytes_written, tensor_flops)` from
//! its body (a GPU needs no such call: its counters see the work). Its SMs are busy for its whole duration when
//! its grid has a block for each (a grid of fewer blocks than SMs keeps that fraction busy), and its warps
//! occupy each busy SM's 2048 thread slots as its blocks' threads do. HtoD copies are PCIe reads, DtoH copies
//! PCIe writes (the device's view, as `pcie__read_bytes` counts what the device reads over the bus), and every
//! copy moves DRAM bytes on the device side.
//!
//! The modelled device is the simulated H100 SXM5 (`driver::device_properties`); its peaks come from NVIDIA's
//! H100 datasheet (HBM3 3.35 TB/s; dense BF16 Tensor Core 989.4 TFLOP/s, its 1,979 "with sparsity" halved) and
//! its boost clock of 1.98 GHz (`nvidia-smi -q` on H100 SXM5: max SM clock 1980 MHz).

use crate::MAX_DEVICES;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// HBM3 bytes per ns (3.35 TB/s).
pub(crate) const DRAM_PEAK_BYTES_PER_NS: f64 = 3350.0;
/// Dense BF16 Tensor Core FLOPs per ns (989.4 TFLOP/s).
pub(crate) const TENSOR_PEAK_FLOPS_PER_NS: f64 = 989_400.0;
/// SM cycles per ns at the boost clock.
pub(crate) const SM_CLOCK_GHZ: f64 = 1.98;
const SMS: f64 = 132.0;
const THREAD_SLOTS_PER_SM: f64 = 2048.0;

/// What one kernel or copy did over `start..end` (CLOCK_MONOTONIC, the simulated device's clock).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
    /// Fraction of the SMs busy while it runs, and the fraction of a busy SM's thread slots its warps hold.
    pub sm_fraction: f64,
    pub warp_fraction: f64,
    pub dram_read: f64,
    pub dram_written: f64,
    pub tensor_flops: f64,
    pub pcie_read: f64,
    pub pcie_written: f64,
}

/// The raw counters of one sample: what `cuptiPmSamplingDecodeData` writes into the counter data image, from
/// which `cuptiProfilerHostEvaluateToGpuValues` computes metric values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RawCounters {
    pub window_ns: f64,
    /// SM-ns busy (summed over SMs as fractions of the whole), warp-slot-ns, graphics-engine-busy ns.
    pub sm_busy_ns: f64,
    pub warp_ns: f64,
    pub gr_busy_ns: f64,
    pub dram_read: f64,
    pub dram_written: f64,
    pub tensor_flops: f64,
    pub pcie_read: f64,
    pub pcie_written: f64,
}

pub(crate) const RAW_FIELDS: usize = 9;

impl RawCounters {
    pub(crate) fn to_array(self) -> [f64; RAW_FIELDS] {
        [
            self.window_ns,
            self.sm_busy_ns,
            self.warp_ns,
            self.gr_busy_ns,
            self.dram_read,
            self.dram_written,
            self.tensor_flops,
            self.pcie_read,
            self.pcie_written,
        ]
    }
    pub(crate) fn from_array(a: [f64; RAW_FIELDS]) -> Self {
        RawCounters {
            window_ns: a[0],
            sm_busy_ns: a[1],
            warp_ns: a[2],
            gr_busy_ns: a[3],
            dram_read: a[4],
            dram_written: a[5],
            tensor_flops: a[6],
            pcie_read: a[7],
            pcie_written: a[8],
        }
    }

    /// The value of one of the modelled metrics (Nsight Compute's names), None for a name outside the set.
    pub(crate) fn metric(&self, name: &str) -> Option<f64> {
        let w = self.window_ns.max(1.0);
        let pct = |x: f64| 100.0 * x;
        Some(match name {
            "sm__cycles_active.avg" => (self.sm_busy_ns.min(w)) * SM_CLOCK_GHZ,
            "sm__cycles_elapsed.avg" | "gr__cycles_elapsed.max" => w * SM_CLOCK_GHZ,
            "gr__cycles_active.avg" => self.gr_busy_ns.min(w) * SM_CLOCK_GHZ,
            "sm__warps_active.avg.pct_of_peak_sustained_active" => {
                pct(if self.sm_busy_ns > 0.0 { (self.warp_ns / self.sm_busy_ns).min(1.0) } else { 0.0 })
            }
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed" => {
                pct(self.tensor_flops / (w * TENSOR_PEAK_FLOPS_PER_NS))
            }
            "dram__throughput.avg.pct_of_peak_sustained_elapsed" => {
                pct((self.dram_read + self.dram_written) / (w * DRAM_PEAK_BYTES_PER_NS))
            }
            "dram__read_throughput.avg.pct_of_peak_sustained_elapsed" => {
                pct(self.dram_read / (w * DRAM_PEAK_BYTES_PER_NS))
            }
            "dram__write_throughput.avg.pct_of_peak_sustained_elapsed" => {
                pct(self.dram_written / (w * DRAM_PEAK_BYTES_PER_NS))
            }
            "dram__bytes_read.sum" => self.dram_read,
            "dram__bytes_write.sum" => self.dram_written,
            "pcie__read_bytes.sum" => self.pcie_read,
            "pcie__write_bytes.sum" => self.pcie_written,
            _ => return None,
        })
    }
}

/// The metrics the model answers: the 13 that one pass held together on an H200 (GH100), 2026-11-28
/// (`scripts/gpu-validate` part `counters`, tests/gpu/pm_sampling.cu). Any subset of them is one pass.
pub(crate) fn is_modelled_metric(name: &str) -> bool {
    RawCounters::default().metric(name).is_some()
}

/// Work recorded on each device while its sampling is started: spans of finished work and the starts of work
/// still running (a sample is complete only once everything that overlaps it has finished and declared its work).
#[derive(Default)]
struct DeviceWork {
    spans: Vec<Span>,
    running: Vec<(u64, u64)>,
    next_token: u64,
}

static RECORDING: [AtomicBool; MAX_DEVICES as usize] = [const { AtomicBool::new(false) }; MAX_DEVICES as usize];
static WORK: [Mutex<DeviceWork>; MAX_DEVICES as usize] =
    [const { Mutex::new(DeviceWork { spans: Vec::new(), running: Vec::new(), next_token: 1 }) }; MAX_DEVICES as usize];

fn slot(device: u32) -> Option<usize> {
    (device < MAX_DEVICES).then_some(device as usize)
}

/// Starts or stops recording work on `device` (cuptiPmSamplingStart/Stop); starting forgets earlier work.
pub(crate) fn set_recording(device: u32, on: bool) {
    let Some(d) = slot(device) else { return };
    if on {
        let mut w = WORK[d].lock();
        w.spans.clear();
    }
    RECORDING[d].store(on, Ordering::Release);
}

/// A kernel starts on `device`: a token for [`work_finished`]. Every kernel is tracked while it runs, sampled or
/// not: one already running when sampling starts is counted for the part of it after the start, as a GPU's
/// counters count it.
pub(crate) fn work_started(device: u32, start: u64) -> Option<u64> {
    let d = slot(device)?;
    let mut w = WORK[d].lock();
    let token = w.next_token;
    w.next_token += 1;
    w.running.push((token, start));
    Some(token)
}

/// Finished work on `device` (token from [`work_started`], or None for a copy, recorded whole when it ends).
pub(crate) fn work_finished(device: u32, token: Option<u64>, span: Span) {
    let Some(d) = slot(device) else { return };
    let mut w = WORK[d].lock();
    if let Some(t) = token {
        w.running.retain(|&(r, _)| r != t);
    }
    if !RECORDING[d].load(Ordering::Acquire) {
        return;
    }
    // Bounded: a client that never decodes keeps at most this many spans (the oldest go first).
    const MAX_SPANS: usize = 1 << 20;
    if w.spans.len() >= MAX_SPANS {
        w.spans.drain(..MAX_SPANS / 2);
    }
    w.spans.push(span);
}

/// A kernel's span from its launch shape and declared work.
pub(crate) fn kernel_span(start: u64, end: u64, grid: [i32; 3], block: [i32; 3], declared: [f64; 3]) -> Span {
    let blocks = grid.iter().map(|&g| g.max(1) as f64).product::<f64>();
    let threads = block.iter().map(|&b| b.max(1) as f64).product::<f64>();
    let busy_sms = blocks.min(SMS);
    let resident = (blocks / busy_sms).ceil() * threads;
    Span {
        start,
        end,
        sm_fraction: busy_sms / SMS,
        warp_fraction: (resident / THREAD_SLOTS_PER_SM).min(1.0),
        dram_read: declared[0],
        dram_written: declared[1],
        tensor_flops: declared[2],
        ..Default::default()
    }
}

/// A copy of `kind` (CUPTI's memcpy kind) that moved `bytes` on `device` over `start..end`.
pub(crate) fn copy_ran(device: u32, start: u64, end: u64, kind: u32, bytes: f64) {
    let Some(d) = slot(device) else { return };
    if !RECORDING[d].load(Ordering::Acquire) {
        return;
    }
    let mut span = Span { start, end: end.max(start + 1), ..Default::default() };
    match kind {
        crate::c::CUPTI_ACTIVITY_MEMCPY_KIND_HTOD => (span.pcie_read, span.dram_written) = (bytes, bytes),
        crate::c::CUPTI_ACTIVITY_MEMCPY_KIND_DTOH => (span.pcie_written, span.dram_read) = (bytes, bytes),
        crate::c::CUPTI_ACTIVITY_MEMCPY_KIND_DTOD => (span.dram_read, span.dram_written) = (bytes, bytes),
        _ => return,
    }
    work_finished(device, None, span);
}

/// The time up to which every sample is complete on `device` (`limit`, or the start of work still running).
pub(crate) fn complete_until(device: u32, limit: u64) -> u64 {
    let Some(d) = slot(device) else { return limit };
    let w = WORK[d].lock();
    w.running.iter().map(|&(_, s)| s).min().map_or(limit, |s| s.min(limit))
}

/// The counters of `device` over `from..to`, each span's work shared out by the fraction of it inside; spans
/// that ended before `forget_before` are dropped (no later sample can see them).
pub(crate) fn counters(device: u32, from: u64, to: u64, forget_before: u64) -> RawCounters {
    let mut c = RawCounters { window_ns: to.saturating_sub(from) as f64, ..Default::default() };
    let Some(d) = slot(device) else { return c };
    let mut w = WORK[d].lock();
    w.spans.retain(|s| s.end >= forget_before);
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for s in w.spans.iter().filter(|s| s.start < to && s.end > from) {
        let (lo, hi) = (s.start.max(from), s.end.min(to));
        let inside = (hi - lo) as f64;
        let share = inside / (s.end - s.start).max(1) as f64;
        c.sm_busy_ns += inside * s.sm_fraction;
        c.warp_ns += inside * s.sm_fraction * s.warp_fraction;
        c.dram_read += s.dram_read * share;
        c.dram_written += s.dram_written * share;
        c.tensor_flops += s.tensor_flops * share;
        c.pcie_read += s.pcie_read * share;
        c.pcie_written += s.pcie_written * share;
        if s.sm_fraction > 0.0 {
            busy.push((lo, hi));
        }
    }
    busy.sort_unstable();
    let mut covered_to = from;
    for (lo, hi) in busy {
        let lo = lo.max(covered_to);
        if hi > lo {
            c.gr_busy_ns += (hi - lo) as f64;
            covered_to = hi;
        }
    }
    c
}

thread_local! {
    /// What the running kernel declared with `cudasim_kernel_work`: bytes read, bytes written, tensor FLOPs.
    static DECLARED: std::cell::Cell<[f64; 3]> = const { std::cell::Cell::new([0.0; 3]) };
}

/// Clears the declaration before a kernel runs on this (stream) thread; returns it after.
pub(crate) fn take_declared() -> [f64; 3] {
    DECLARED.with(|d| d.replace([0.0; 3]))
}

/// For test programs (a GPU's counters see this by themselves): the running kernel reads `bytes_read` and writes
/// `bytes_written` of device memory and does `tensor_flops` on Tensor Cores. Called from a kernel's body; calls
/// add up.
#[no_mangle]
pub extern "C" fn cudasim_kernel_work(bytes_read: u64, bytes_written: u64, tensor_flops: u64) {
    DECLARED.with(|d| {
        let [r, w, f] = d.get();
        d.set([r + bytes_read as f64, w + bytes_written as f64, f + tensor_flops as f64]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample sees each span's work in proportion to the part of the span inside it; two kernels back to back
    /// keep the graphics engine busy once, not twice.
    #[test]
    fn a_sample_shares_out_each_spans_work() {
        let d = 7;
        set_recording(d, true);
        let k = kernel_span(1000, 2000, [264, 1, 1], [256, 1, 1], [1e6, 0.0, 0.0]);
        work_finished(d, None, k);
        work_finished(d, None, kernel_span(1500, 2500, [66, 1, 1], [128, 1, 1], [0.0, 0.0, 4e9]));
        let c = counters(d, 1500, 2000, 0);
        assert_eq!(c.window_ns, 500.0);
        assert_eq!(c.dram_read, 0.5e6);
        assert_eq!(c.tensor_flops, 2e9);
        assert_eq!(c.gr_busy_ns, 500.0);
        assert_eq!(c.sm_busy_ns, 500.0 * 1.0 + 500.0 * 0.5);
        let pct = c.metric("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed").unwrap();
        assert!((pct - 100.0 * 2e9 / (500.0 * TENSOR_PEAK_FLOPS_PER_NS)).abs() < 1e-9);
        assert!(c.metric("sm__throughput.avg.pct_of_peak_sustained_elapsed").is_none());
        set_recording(d, false);
    }
}
