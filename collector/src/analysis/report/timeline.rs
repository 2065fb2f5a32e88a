//! One process prepared for diagnosis: its GPU operations in time order and the unions of their busy time, the
//! launching threads' CUDA calls classified by what they do to the pipeline, and its host ranges (NVTX,
//! torch.profiler annotations and operators).

use super::spans::{merge, Span, Union};
use crate::model::names;
use crate::model::trace::Process;
use cuflight_format::event::FLAG_DEVICE;
use cuflight_format::{EventKind, RawEvent};
use rustc_hash::{FxHashMap, FxHashSet};

/// What a CUDA call does to the GPU's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallClass {
    /// Issues work and returns (launches, async copies, event records...).
    Launch,
    /// `cudaMalloc`/`cudaFree` and friends (`cudaFree` also synchronises the device).
    Alloc,
    /// Blocks the host until the GPU catches up: stream/device/event synchronisation, synchronous copies and
    /// device-to-host copies into pageable memory.
    Sync,
}

/// A stretch of time in which a launching thread was inside CUDA calls.
#[derive(Clone, Copy, Debug)]
pub struct HostCall {
    pub start: u64,
    pub end: u64,
    pub class: CallClass,
    /// Index of the (first, outermost) call's event.
    pub event: u32,
}

/// A completed host range (NVTX range or imported annotation/operator).
#[derive(Clone, Copy, Debug)]
pub struct HostRange {
    pub start: u64,
    pub end: u64,
    pub name: u32,
    pub tid: u32,
}

pub struct Timeline<'a> {
    pub p: &'a Process,
    pub names: NameFlags,
    /// Kernels, memcpys and memsets, sorted by start (indices into `p.events`).
    pub ops: Vec<u32>,
    pub busy: Vec<Span>,
    pub kernel_busy: Vec<Span>,
    pub compute_busy: Vec<Span>,
    pub memcpy_busy: Vec<Span>,
    pub memset_busy: Vec<Span>,
    /// Correlation id → the API call with that id (the launch, for GPU ops).
    pub launch_of: FxHashMap<u32, u32>,
    /// Per op (parallel to `ops`): its launch call's start and duration; start u64::MAX when not in the trace.
    pub op_launch: Vec<(u64, u64)>,
    /// Disjoint CUDA-call stretches of the launching threads, sorted.
    pub calls: Vec<HostCall>,
    /// CUDA API time of every thread (merged).
    pub runtime_busy: Vec<Span>,
    pub ranges: Vec<HostRange>,
    /// Ranges pushed but never popped: (name, start).
    pub unclosed: Vec<(String, u64)>,
    /// Data-loading annotations (merged).
    pub loader: Vec<Span>,
    /// Other host ranges and operators (merged): TensorBoard's "CPU Exec".
    pub cpu: Vec<Span>,
    /// (compute capability major, minor) of the first device, when the trace says.
    pub capability: Option<(u32, u32)>,
    /// Streams wait on events recorded in other streams (cudaStreamWaitEvent): GPU gaps may be dependencies.
    pub has_stream_waits: bool,
    pub device_memory: Option<u64>,
}

pub fn classify_call(name: &str, copy: Option<&RawEvent>) -> CallClass {
    classify_flags(NameFlags::of(name), copy)
}

fn classify_flags(f: u16, copy: Option<&RawEvent>) -> CallClass {
    if f & NameFlags::SYNC != 0 {
        return CallClass::Sync;
    }
    let is_async = f & NameFlags::ASYNC != 0;
    if f & NameFlags::ALLOC != 0 && !is_async {
        return CallClass::Alloc;
    }
    if f & NameFlags::MEMCPY != 0 {
        // Asynchronous copies into pageable host memory still block (the driver stages them).
        let to_pageable = copy.is_some_and(|c| c.sub == 2 && c.copy_memory_kinds().1 == 1);
        if !is_async || to_pageable {
            return CallClass::Sync;
        }
    }
    CallClass::Launch
}

/// What the analyses need to know about each name, computed once per distinct string (not per event: a
/// 10M-event trace has a few thousand names).
#[derive(Default)]
pub struct NameFlags(FxHashMap<u32, u16>);

impl NameFlags {
    pub const COMPUTE: u16 = 1;
    pub const COMM: u16 = 2;
    pub const FP32_GEMM: u16 = 4;
    pub const PROFILER_STEP: u16 = 8;
    pub const STEP_LIKE: u16 = 16;
    pub const LOADER: u16 = 32;
    pub const SYNC: u16 = 64;
    pub const ALLOC: u16 = 128;
    pub const FREE: u16 = 256;
    pub const MEMCPY: u16 = 512;
    pub const ASYNC: u16 = 1024;
    pub const STREAM_WAIT: u16 = 2048;

    pub fn of(name: &str) -> u16 {
        let mut f = 0;
        let mut set = |cond: bool, flag: u16| {
            if cond {
                f |= flag;
            }
        };
        set(names::is_compute_kernel(name), Self::COMPUTE);
        set(names::is_comm_kernel(name), Self::COMM);
        set(names::is_fp32_gemm(name), Self::FP32_GEMM);
        set(name.contains("ProfilerStep"), Self::PROFILER_STEP);
        set(names::step_like(name), Self::STEP_LIKE);
        set(names::is_loader_range(name), Self::LOADER);
        set(name.contains("Synchronize"), Self::SYNC);
        set(name.contains("Malloc") || name.contains("MemAlloc") || name.contains("Free"), Self::ALLOC);
        set(name.contains("Free"), Self::FREE);
        set(name.contains("Memcpy"), Self::MEMCPY);
        set(name.contains("Async"), Self::ASYNC);
        set(name.contains("StreamWaitEvent"), Self::STREAM_WAIT);
        f
    }

    pub fn new(p: &Process) -> NameFlags {
        NameFlags(p.strings.iter().map(|(&id, s)| (id, Self::of(s))).collect())
    }

    pub fn get(&self, id: u32) -> u16 {
        self.0.get(&id).copied().unwrap_or(0)
    }

    pub fn has(&self, id: u32, flag: u16) -> bool {
        self.get(id) & flag != 0
    }
}

impl<'a> Timeline<'a> {
    pub fn new(p: &'a Process) -> Timeline<'a> {
        let names = NameFlags::new(p);
        let ev = &p.events;
        let mut ops: Vec<u32> = Vec::new();
        let mut copy_of: FxHashMap<u32, u32> = FxHashMap::default();
        // Unions built as events go by (they come sorted by start): never a vector of every op's span.
        let (mut all, mut kern, mut comp, mut mcpy, mut mset) =
            (Union::new(), Union::new(), Union::new(), Union::new(), Union::new());
        let mut capability = None;
        let mut device_memory = None;
        for (i, e) in ev.iter().enumerate() {
            let span = (e.start, e.end.max(e.start));
            match e.kind() {
                Some(EventKind::Kernel) => {
                    kern.push(span);
                    if names.has(e.name, NameFlags::COMPUTE) {
                        comp.push(span);
                    }
                }
                Some(EventKind::Memcpy) => {
                    mcpy.push(span);
                    copy_of.insert(e.correlation, i as u32);
                }
                Some(EventKind::Memset) => mset.push(span),
                Some(EventKind::Device) if capability.is_none() => {
                    capability = Some(e.compute_capability()).filter(|c| c.0 > 0);
                    device_memory = Some(e.a).filter(|&m| m > 0);
                    continue;
                }
                _ => continue,
            }
            all.push(span);
            ops.push(i as u32);
        }
        ops.sort_by_key(|&i| ev[i as usize].start);

        // Launching threads: those whose calls have GPU work correlated to them.
        let mut launch_of: FxHashMap<u32, u32> = FxHashMap::default();
        let mut runtime = Union::new();
        for (i, e) in ev.iter().enumerate() {
            if e.kind() == Some(EventKind::Api) {
                runtime.push((e.start, e.end));
                if e.correlation != 0 {
                    launch_of.entry(e.correlation).or_insert(i as u32);
                }
            }
        }
        let mut launchers: FxHashSet<u32> = FxHashSet::default();
        let op_launch: Vec<(u64, u64)> = ops
            .iter()
            .map(|&i| match launch_of.get(&ev[i as usize].correlation) {
                Some(&l) if ev[i as usize].correlation != 0 => {
                    let call = &ev[l as usize];
                    launchers.insert(call.tid);
                    (call.start, call.duration())
                }
                _ => (u64::MAX, 0),
            })
            .collect();
        let launcher_calls =
            ev.iter().enumerate().filter(|(_, e)| e.kind() == Some(EventKind::Api) && launchers.contains(&e.tid)).map(
                |(i, e)| {
                    let copy = copy_of.get(&e.correlation).map(|&c| &ev[c as usize]);
                    let class = classify_flags(names.get(e.name), copy);
                    HostCall { start: e.start, end: e.end.max(e.start), class, event: i as u32 }
                },
            );
        // Events come sorted by start, and so do the calls: compacted as they come. (A hand-made process may not
        // be sorted: its calls are collected and sorted first.)
        let calls = if ev.is_sorted_by_key(|e| e.start) {
            compact_calls(launcher_calls)
        } else {
            let mut raw: Vec<HostCall> = launcher_calls.collect();
            raw.sort_by_key(|c| c.start);
            compact_calls(raw.into_iter())
        };

        let mut pairer = crate::model::ranges::Pairer::default();
        let mut ranges: Vec<HostRange> = Vec::new();
        for e in ev {
            if e.kind() == Some(EventKind::Range) && e.flags & FLAG_DEVICE == 0 {
                ranges.push(HostRange { start: e.start, end: e.end.max(e.start), name: e.name, tid: e.tid });
            } else if let Some(r) = pairer.feed(e) {
                ranges.push(HostRange { start: r.start, end: r.end, name: r.name, tid: r.tid });
            }
        }
        ranges.sort_by_key(|r| r.start);
        let unclosed = pairer.unclosed().map(|(name, start)| (p.string(name).to_string(), start)).collect();
        let has_stream_waits = ev.iter().any(|e| {
            e.kind() == Some(EventKind::Sync) && e.sub == 2
                || e.kind() == Some(EventKind::Api) && names.has(e.name, NameFlags::STREAM_WAIT)
        });
        Timeline {
            p,
            names,
            has_stream_waits,
            ops,
            busy: all.finish(),
            kernel_busy: kern.finish(),
            compute_busy: comp.finish(),
            memcpy_busy: mcpy.finish(),
            memset_busy: mset.finish(),
            launch_of,
            op_launch,
            calls,
            runtime_busy: runtime.finish(),
            ranges,
            unclosed,
            loader: vec![],
            cpu: vec![],
            capability,
            device_memory,
        }
    }

    /// Splits host ranges other than the steps into data loading and CPU work.
    pub fn classify_ranges(&mut self, is_step: impl Fn(&HostRange) -> bool) {
        let (mut loader, mut cpu) = (vec![], vec![]);
        for r in self.ranges.iter().filter(|r| !is_step(r)) {
            let target = if self.names.has(r.name, NameFlags::LOADER) { &mut loader } else { &mut cpu };
            target.push((r.start, r.end));
        }
        self.loader = merge(loader);
        self.cpu = merge(cpu);
    }

    pub fn event(&self, i: u32) -> &RawEvent {
        &self.p.events[i as usize]
    }

    /// When the host issued this GPU op (its launch call's start), if the launch is in the trace.
    pub fn launch_time(&self, op: &RawEvent) -> Option<u64> {
        self.launch_of.get(&op.correlation).map(|&i| self.event(i).start)
    }

    /// The last CUDA-call stretch that ended at or before `t`.
    pub fn call_before(&self, t: u64) -> Option<&HostCall> {
        let n = self.calls.partition_point(|c| c.end <= t);
        n.checked_sub(1).map(|i| &self.calls[i])
    }

    pub fn name(&self, i: u32) -> &str {
        self.p.string(self.event(i).name)
    }
}

/// Nested or overlapping calls (runtime over driver, two launching threads), sorted by start, as disjoint
/// stretches; the most blocking class names each.
fn compact_calls(sorted: impl Iterator<Item = HostCall>) -> Vec<HostCall> {
    let mut calls: Vec<HostCall> = Vec::new();
    for c in sorted {
        match calls.last_mut() {
            Some(last) if c.start < last.end => {
                last.end = last.end.max(c.end);
                if c.class > last.class {
                    last.class = c.class;
                    last.event = c.event;
                }
            }
            _ => calls.push(c),
        }
    }
    calls.shrink_to_fit();
    calls
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::names::{is_comm_kernel, is_loader_range};

    #[test]
    fn calls_are_classified_by_their_effect_on_the_queue() {
        assert_eq!(classify_call("cudaStreamSynchronize", None), CallClass::Sync);
        assert_eq!(classify_call("cuCtxSynchronize", None), CallClass::Sync);
        assert_eq!(classify_call("cudaMemcpy", None), CallClass::Sync);
        assert_eq!(classify_call("cudaMemcpyAsync", None), CallClass::Launch);
        let mut dtoh_pageable = RawEvent::new(EventKind::Memcpy, 0, 0, 1);
        (dtoh_pageable.sub, dtoh_pageable.b) = (2, 3 | 1 << 8);
        assert_eq!(classify_call("cudaMemcpyAsync", Some(&dtoh_pageable)), CallClass::Sync);
        assert_eq!(classify_call("cudaFree", None), CallClass::Alloc);
        assert_eq!(classify_call("cudaMallocAsync", None), CallClass::Launch);
        assert_eq!(classify_call("cudaLaunchKernel", None), CallClass::Launch);
        assert!(is_loader_range("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"));
        assert!(is_comm_kernel("ncclKernel_AllReduce_RING_LL_Sum_float"));
        assert!(is_comm_kernel("ncclDevKernel_AllGather_RING_LL"));
        assert!(is_comm_kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"
        ));
        assert!(is_comm_kernel("void ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"));
    }
}
