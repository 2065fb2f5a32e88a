//! NVTX ranges projected onto the GPU, as `nsys stats`' nvtx_gpu_proj_sum and nvtx_kern_sum define them: a
//! push/pop range's projection runs from the start of the first GPU operation (kernel, copy, memset) launched
//! inside it, on its thread, to the end of the last one; the kernels launched inside a range are summed per
//! (range, kernel). Both tables count only ranges that end in the trace: a recording window that closes in the
//! middle of a range leaves out the range and its kernels alike. Fed in time order with the stats; a range instance is kept only until it is closed and every
//! launch made inside it has met its GPU record, so memory follows what is in flight, not the trace.
//!
//! Imported traces' complete ranges (Kineto's user_annotation and cpu_op events) are projected the same way.
//! Start/end ranges are process ranges (NVTX's term: they may start and end on different threads): they project
//! the work any thread of the process launched while they were open (`cuflight.mark_step()`'s steps are such
//! ranges). A graph launch's node count is not known when it is made, so a range that made one keeps counting
//! that launch's work until the trace ends, or until more than [`GRAPH_WAITERS`] such ranges wait (the oldest is
//! then closed: its graphs ran long before).

use super::dist::Dist;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;

struct Instance {
    key: u32,
    domain: u64,
    name: u32,
    start: u64,
    end: Option<u64>,
    /// Launches may still fall inside it (a push not yet popped, an imported range not yet over).
    open: bool,
    /// Graph launches made inside it: their work keeps arriving under one correlation.
    graphs: Vec<u32>,
    gpu: Option<(u64, u64)>,
    ops: u64,
    /// Launches made inside it whose GPU record has not been seen.
    pending: u64,
    level: u32,
    children: u32,
    /// Kernels launched inside it, by name: summed into `Projection::kernels` when it finishes with an end, so
    /// that a range the trace never closes (a window ending mid-request) counts in neither table.
    kernels: FxHashMap<u32, Dist>,
}

/// Closed ranges kept waiting for graph work, at most.
const GRAPH_WAITERS: usize = 1024;

#[derive(Default)]
pub struct Summary {
    pub proj: Dist,
    pub range: Dist,
    pub ops: u64,
    pub levels: u64,
    pub children: u64,
}

#[derive(Default)]
pub struct Projection {
    /// Open pushes per (process, thread): (domain, instance), innermost last.
    stacks: FxHashMap<(u32, u32), Vec<(u64, u64)>>,
    /// Imported complete ranges per (process, thread) that may still enclose launches: (end, instance).
    spans: FxHashMap<(u32, u32), Vec<(u64, u64)>>,
    live: FxHashMap<u64, Instance>,
    /// Launches inside open or unfinished ranges, by (process, correlation): the instances they count for, and
    /// whether it was a graph launch (its entry stays while those instances live).
    launched: FxHashMap<(u32, u32), (Vec<u64>, bool)>,
    /// Open start/end ranges, by (process, range id): the instance.
    process_ranges: FxHashMap<(u32, u64), u64>,
    /// Closed ranges that wait for the work of their graph launches, oldest first.
    graph_waiters: std::collections::VecDeque<u64>,
    /// Whether an API name (per process and id) launches GPU work.
    launches_work: FxHashMap<(u32, u32), bool>,
    next: u64,
    /// Per (process, domain, range name).
    pub ranges: FxHashMap<(u32, u64, u32), Summary>,
    /// Per (process, domain, range name, kernel name): kernels launched inside the range.
    pub kernels: FxHashMap<(u32, u64, u32, u32), Dist>,
}

impl Projection {
    pub fn feed(&mut self, key: u32, p: &Process, e: &RawEvent) {
        match e.kind() {
            Some(EventKind::NvtxPush) => {
                self.prune(key, e.tid, e.start);
                let id = self.open_instance(key, e, None);
                self.stacks.entry((key, e.tid)).or_default().push((e.as_nvtx().domain, id));
            }
            Some(EventKind::Range) => {
                self.prune(key, e.tid, e.start);
                let id = self.open_instance(key, e, Some(e.end.max(e.start)));
                self.spans.entry((key, e.tid)).or_default().push((e.end.max(e.start), id));
            }
            Some(EventKind::NvtxPop) => {
                let Some(stack) = self.stacks.get_mut(&(key, e.tid)) else { return };
                let Some(i) = stack.iter().rposition(|&(d, _)| d == e.as_nvtx().domain) else { return };
                let (_, id) = stack.remove(i);
                self.close(id, e.start);
            }
            Some(EventKind::NvtxStart) => {
                let mut top = *e;
                top.tid = u32::MAX; // a process range nests in no thread's ranges
                let id = self.open_instance(key, &top, None);
                self.process_ranges.insert((key, e.as_nvtx().id), id);
            }
            Some(EventKind::NvtxEnd) => {
                if let Some(id) = self.process_ranges.remove(&(key, e.as_nvtx().id)) {
                    self.close(id, e.start);
                }
            }
            Some(EventKind::Api) if e.correlation != 0 => {
                self.prune(key, e.tid, e.start);
                let pushed = self.stacks.get(&(key, e.tid)).into_iter().flatten().map(|&(_, id)| id);
                let spans = self.spans.get(&(key, e.tid)).into_iter().flatten().map(|&(_, id)| id);
                let process = self.process_ranges.iter().filter(|((k, _), _)| *k == key).map(|(_, &id)| id);
                let ids: Vec<u64> = pushed.chain(spans).chain(process).collect();
                if ids.is_empty() {
                    return;
                }
                let launches = *self
                    .launches_work
                    .entry((key, e.name))
                    .or_insert_with(|| cuflight_format::calls::CallEffects::of(p.string(e.name)).queues_work());
                if !launches {
                    return;
                }
                let graph = p.string(e.name).contains("GraphLaunch");
                for id in &ids {
                    if let Some(inst) = self.live.get_mut(id) {
                        if graph {
                            inst.graphs.push(e.correlation);
                        } else {
                            inst.pending += 1;
                        }
                    }
                }
                self.launched.insert((key, e.correlation), (ids, graph));
            }
            Some(k @ (EventKind::Kernel | EventKind::Memcpy | EventKind::Memset)) if e.correlation != 0 => {
                let graph = self.launched.get(&(key, e.correlation)).is_some_and(|l| l.1);
                let ids = match graph {
                    true => self.launched[&(key, e.correlation)].0.clone(),
                    false => match self.launched.remove(&(key, e.correlation)) {
                        Some((ids, _)) => ids,
                        None => return,
                    },
                };
                for id in ids {
                    let Some(inst) = self.live.get_mut(&id) else { continue };
                    inst.gpu = Some(inst.gpu.map_or((e.start, e.end), |(a, b)| (a.min(e.start), b.max(e.end))));
                    inst.ops += 1;
                    let met = !graph && inst.pending > 0;
                    if met {
                        inst.pending -= 1;
                    }
                    if k == EventKind::Kernel {
                        inst.kernels.entry(e.name).or_default().add(e.duration());
                    }
                    if met && !inst.open && inst.pending == 0 {
                        self.settle(id);
                    }
                }
            }
            _ => {}
        }
    }

    /// A new range instance on `e`'s thread, nested in what is open there.
    fn open_instance(&mut self, key: u32, e: &RawEvent, end: Option<u64>) -> u64 {
        let pushed = self.stacks.get(&(key, e.tid)).into_iter().flatten().map(|&(_, id)| id);
        let spans = self.spans.get(&(key, e.tid)).into_iter().flatten().map(|&(_, id)| id);
        let enclosing: Vec<u64> = pushed.chain(spans).collect();
        // The innermost enclosing range is the one that started last.
        let parent = enclosing.iter().copied().max_by_key(|id| self.live.get(id).map_or(0, |i| i.start));
        if let Some(p) = parent.and_then(|id| self.live.get_mut(&id)) {
            p.children += 1;
        }
        let id = self.next;
        self.next += 1;
        let level = enclosing.len() as u32;
        let (domain, start) = (e.annotation_domain(), e.start);
        let inst = Instance {
            key,
            domain,
            name: e.name,
            start,
            end,
            open: true,
            graphs: Vec::new(),
            gpu: None,
            ops: 0,
            pending: 0,
            level,
            children: 0,
            kernels: FxHashMap::default(),
        };
        self.live.insert(id, inst);
        id
    }

    /// Imported ranges on (key, tid) that ended before `now` enclose no later launch: they close.
    fn prune(&mut self, key: u32, tid: u32, now: u64) {
        let Some(spans) = self.spans.get_mut(&(key, tid)) else { return };
        let mut closed = Vec::new();
        spans.retain(|&(end, id)| {
            let over = end < now;
            if over {
                closed.push(id);
            }
            !over
        });
        for id in closed {
            if let Some(inst) = self.live.get_mut(&id) {
                inst.open = false;
                self.settle(id);
            }
        }
    }

    /// A push popped or a process range ended at `at`: no more launches fall inside it.
    fn close(&mut self, id: u64, at: u64) {
        if let Some(inst) = self.live.get_mut(&id) {
            inst.end = Some(at.max(inst.start));
            inst.open = false;
            self.settle(id);
        }
    }

    /// A closed range finishes once its launches met their work; one with graph launches waits (bounded).
    fn settle(&mut self, id: u64) {
        let Some(inst) = self.live.get(&id) else { return };
        if inst.pending > 0 {
            return;
        }
        if inst.graphs.is_empty() {
            self.finish(id);
            return;
        }
        self.graph_waiters.push_back(id);
        while self.graph_waiters.len() > GRAPH_WAITERS {
            if let Some(old) = self.graph_waiters.pop_front() {
                self.finish(old);
            }
        }
    }

    fn finish(&mut self, id: u64) {
        let Some(inst) = self.live.remove(&id) else { return };
        for corr in &inst.graphs {
            if let Some((ids, _)) = self.launched.get_mut(&(inst.key, *corr)) {
                ids.retain(|&i| i != id);
                if ids.is_empty() {
                    self.launched.remove(&(inst.key, *corr));
                }
            }
        }
        let (Some(end), Some((first, last))) = (inst.end, inst.gpu) else { return };
        for (name, d) in &inst.kernels {
            self.kernels.entry((inst.key, inst.domain, inst.name, *name)).or_default().merge(d);
        }
        let s = self.ranges.entry((inst.key, inst.domain, inst.name)).or_default();
        s.proj.add(last.saturating_sub(first));
        s.range.add(end - inst.start);
        s.ops += inst.ops;
        s.levels += inst.level as u64;
        s.children += inst.children as u64;
    }

    /// Closes the books at the end of the trace: every range counts with the GPU records that arrived (a push
    /// never popped has no end and is left out, its kernels too).
    pub fn flush(&mut self) {
        let ids: Vec<u64> = self.live.keys().copied().collect();
        for id in ids {
            self.finish(id);
        }
    }
}
