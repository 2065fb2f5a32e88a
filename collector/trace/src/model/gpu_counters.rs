//! Device counter samples ([`EventKind::GpuSample`]) joined to the work they measured: the one rule every output
//! uses for "which kernel do these counters belong to". A sample belongs to a kernel name when kernels of that
//! name fill at least [`OWNED_SHARE`] of its interval on its device and no other work more than 1% of it (the rest
//! is idle, which adds no activity); it is *whole* when one kernel covers it from end to end, so that kernel alone
//! made its counters. A kernel with at least [`MIN_WHOLE_SAMPLES`] whole samples is measured by itself; shorter
//! kernels, or those overlapping others, are known only through their name's aggregate, with its sample count as
//! the confidence. A name's aggregate divides the counters of its samples by the share of them its kernels filled
//! ([`CounterMeans::add_share`]): activity while its kernels ran, whatever the gaps between them (short kernels
//! leave launch gaps in every sample; counting only full samples would favour the long ones). Samples with no
//! work inside are idle; the others are mixed (their counters belong to several names).
//!
//! The join reads events in time order (by start), as every source gives them: a sample is settled once an event
//! starting at or after its end arrives (no later event can overlap it), so memory holds only the samples still
//! open and the work still running.

use crate::model::trace::Process;
use cuflight_format::view::GpuSample;
use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// The share of a sample's interval one name's kernels must fill for the sample to be theirs.
pub const OWNED_SHARE: f64 = 0.5;
/// Whole samples a kernel needs to be reported by itself (the "at least ~5").
pub const MIN_WHOLE_SAMPLES: u64 = 5;
/// Most samples waiting per device (a trace whose device events stop arriving would otherwise keep them all).
const MAX_PENDING: usize = 1 << 16;

/// What a sample measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Owner {
    /// No work on the device during the sample.
    Idle,
    /// Kernels of this name (string id of the process) filled `share` of it (0.5 to 1); `whole`: one kernel,
    /// which started at `kernel_start`, covered all of it.
    Kernel { name: u32, whole: bool, kernel_start: u64, share: f64 },
    /// Several names, or copies, shared it.
    Mixed,
}

/// A settled sample: its process key, device, interval, counters and owner.
#[derive(Clone, Copy, Debug)]
pub struct JoinedSample {
    pub key: u32,
    pub device: u32,
    pub start: u64,
    pub end: u64,
    pub counters: GpuSample,
    pub owner: Owner,
}

/// The name a copy or memset stands under in [`DeviceWork`] (string ids are far smaller).
const COPY: u32 = u32::MAX;

/// Work on one device: (start, end, name; [`COPY`] for a copy or memset).
#[derive(Default)]
struct DeviceWork {
    work: Vec<(u64, u64, u32)>,
    pending: VecDeque<(u64, u64, GpuSample)>,
}

#[derive(Default)]
pub struct CounterJoin {
    devices: FxHashMap<(u32, u32), DeviceWork>,
    /// The earliest end among pending samples (u64::MAX: none), so that most events check nothing.
    earliest_end: u64,
}

impl CounterJoin {
    pub fn new() -> CounterJoin {
        CounterJoin { devices: FxHashMap::default(), earliest_end: u64::MAX }
    }

    /// One event of process `key`, in time order; settled samples go to `out`.
    pub fn feed(&mut self, key: u32, _p: &Process, e: &RawEvent, out: &mut impl FnMut(JoinedSample)) {
        if self.earliest_end <= e.start {
            self.settle(Some(e.start), out);
        }
        match e.kind() {
            Some(EventKind::Kernel) => self.device(key, e.device).work.push((e.start, e.end, e.name)),
            Some(EventKind::Memcpy | EventKind::Memset) => self.device(key, e.device).work.push((e.start, e.end, COPY)),
            Some(EventKind::GpuSample) if e.end > e.start => {
                let d = self.device(key, e.device);
                if d.pending.len() >= MAX_PENDING {
                    d.pending.pop_front();
                }
                d.pending.push_back((e.start, e.end, e.as_gpu_sample()));
                self.earliest_end = self.earliest_end.min(e.end);
            }
            _ => {}
        }
    }

    /// Settles what is still open (the trace ended).
    pub fn finish(&mut self, out: &mut impl FnMut(JoinedSample)) {
        self.settle(None, out);
    }

    fn device(&mut self, key: u32, device: u32) -> &mut DeviceWork {
        self.devices.entry((key, device)).or_default()
    }

    /// Settles the samples that end at or before `now` (all, with None), and forgets work no open sample can see.
    fn settle(&mut self, now: Option<u64>, out: &mut impl FnMut(JoinedSample)) {
        let limit = now.unwrap_or(u64::MAX);
        let mut earliest = u64::MAX;
        for (&(key, device), d) in self.devices.iter_mut() {
            let mut rest = VecDeque::with_capacity(d.pending.len());
            while let Some((start, end, counters)) = d.pending.pop_front() {
                if end <= limit {
                    let owner = owner_of(&d.work, start, end);
                    out(JoinedSample { key, device, start, end, counters, owner });
                } else {
                    earliest = earliest.min(end);
                    rest.push_back((start, end, counters));
                }
            }
            d.pending = rest;
            // Work that ended before every open sample and before now can meet no later sample: samples arrive
            // by their start, so a later one starts at or after now.
            let horizon = d.pending.iter().map(|p| p.0).min().unwrap_or(limit).min(limit);
            d.work.retain(|w| w.1 > horizon);
        }
        self.earliest_end = earliest;
    }
}

/// Who made a sample's counters over `start..end`, from the work on its device.
fn owner_of(work: &[(u64, u64, u32)], start: u64, end: u64) -> Owner {
    let span = (end - start) as f64;
    let mut by_name: Vec<(u32, u64)> = Vec::new();
    let mut busy = false;
    let mut whole: Option<(u32, u64)> = None;
    for &(ws, we, name) in work.iter().filter(|w| w.0 < end && w.1 > start) {
        busy = true;
        let inside = we.min(end) - ws.max(start);
        match by_name.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 += inside,
            None => by_name.push((name, inside)),
        }
        if ws <= start && we >= end && name != COPY {
            whole = Some((name, ws));
        }
    }
    if !busy {
        return Owner::Idle;
    }
    if by_name.len() == 1 {
        if let Some((name, kernel_start)) = whole {
            return Owner::Kernel { name, whole: true, kernel_start, share: 1.0 };
        }
    }
    match by_name.iter().find(|(name, inside)| *name != COPY && *inside as f64 >= OWNED_SHARE * span) {
        Some(&(name, inside)) if by_name.iter().all(|&(n, inside)| n == name || (inside as f64) < 0.01 * span) => {
            Owner::Kernel { name, whole: false, kernel_start: 0, share: (inside as f64 / span).min(1.0) }
        }
        _ => Owner::Mixed,
    }
}

/// The side of the roofline counters put work on: memory-bound (DRAM near its peak, Tensor Cores not),
/// compute-bound (Tensor Cores or the SMs near theirs), latency-bound (neither near its peak: the work waits on
/// something else, such as too few blocks or dependent loads), or balanced (both well used).
pub fn bound(c: &GpuSample) -> &'static str {
    let dram = c.dram().unwrap_or(0.0);
    let tensor = c.tensor_active.unwrap_or(0.0);
    match (dram >= 0.6, tensor >= 0.6) {
        (true, true) => "balanced",
        (true, false) => "memory",
        (false, true) => "compute",
        (false, false) if dram < 0.3 && tensor < 0.3 && c.sm_active.unwrap_or(0.0) < 0.8 => "latency",
        (false, false) if dram < 0.3 && tensor < 0.3 => "compute (CUDA cores)",
        _ => "mixed",
    }
}

/// Means of counters over samples: each ratio over the samples that carry it.
#[derive(Clone, Copy, Debug, Default)]
pub struct CounterMeans {
    pub samples: u64,
    sums: [f64; 5],
    weights: [f64; 5],
}

impl CounterMeans {
    pub fn add(&mut self, c: &GpuSample) {
        self.add_share(c, 1.0);
    }

    /// A sample whose work filled only `share` of it (the rest idle): its counters count as that work's over
    /// that share of the interval.
    pub fn add_share(&mut self, c: &GpuSample, share: f64) {
        self.samples += 1;
        for (i, v) in [c.sm_active, c.tensor_active, c.dram_read, c.dram_write, c.gpu_active].into_iter().enumerate() {
            if let Some(v) = v {
                self.sums[i] += v;
                self.weights[i] += share;
            }
        }
    }

    /// Adds another set's samples.
    pub fn merge(&mut self, other: &CounterMeans) {
        self.samples += other.samples;
        for i in 0..5 {
            self.sums[i] += other.sums[i];
            self.weights[i] += other.weights[i];
        }
    }

    fn mean(&self, i: usize) -> Option<f64> {
        (self.weights[i] > 0.0).then(|| self.sums[i] / self.weights[i])
    }

    /// The means as one sample's worth of counters.
    pub fn means(&self) -> GpuSample {
        GpuSample {
            sm_active: self.mean(0),
            tensor_active: self.mean(1),
            dram_read: self.mean(2),
            dram_write: self.mean(3),
            gpu_active: self.mean(4),
            pcie_bytes: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(device: u32, start: u64, end: u64, dram: f64) -> RawEvent {
        RawEvent::gpu_sample(device, start, end, GpuSample { dram_read: Some(dram), ..Default::default() })
    }

    fn kernel(name: u32, start: u64, end: u64) -> RawEvent {
        let mut k = RawEvent::new(EventKind::Kernel, 0, start, end);
        k.name = name;
        k
    }

    /// Samples inside a long kernel are its whole samples; one straddling two names is mixed; one over a
    /// single short kernel of the name is the name's (not whole); one with nothing inside is idle.
    #[test]
    fn samples_go_to_the_kernel_that_filled_them() {
        let p = Process::default();
        let mut join = CounterJoin::new();
        let mut got = Vec::new();
        let mut events = vec![
            kernel(7, 0, 1000),
            sample(0, 100, 200, 0.5),
            sample(0, 900, 1100, 0.1),
            kernel(8, 1000, 2000),
            kernel(9, 3000, 3100),
            kernel(9, 3100, 3200),
            sample(0, 3000, 3200, 0.2),
            sample(0, 5000, 5100, 0.0),
        ];
        events.sort_by_key(|e| e.start);
        for e in &events {
            join.feed(1, &p, e, &mut |s| got.push(s));
        }
        join.finish(&mut |s| got.push(s));
        got.sort_by_key(|s| s.start);
        let owners: Vec<Owner> = got.iter().map(|s| s.owner).collect();
        assert_eq!(
            owners,
            vec![
                Owner::Kernel { name: 7, whole: true, kernel_start: 0, share: 1.0 },
                Owner::Mixed,
                Owner::Kernel { name: 9, whole: false, kernel_start: 0, share: 1.0 },
                Owner::Idle,
            ]
        );
        assert_eq!(got[0].counters.dram_read, Some(0.5));
    }

    #[test]
    fn bounds_follow_the_counters() {
        let c = |dram: f64, tensor: f64, sm: f64| GpuSample {
            dram_read: Some(dram),
            tensor_active: Some(tensor),
            sm_active: Some(sm),
            ..Default::default()
        };
        assert_eq!(bound(&c(0.8, 0.05, 1.0)), "memory");
        assert_eq!(bound(&c(0.1, 0.85, 1.0)), "compute");
        assert_eq!(bound(&c(0.1, 0.1, 0.4)), "latency");
        assert_eq!(bound(&c(0.02, 0.0, 1.0)), "compute (CUDA cores)");
        assert_eq!(bound(&c(0.45, 0.4, 1.0)), "mixed");
    }
}
