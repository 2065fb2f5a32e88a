//! One process's events turned into Perfetto packets: tracks for its threads and streams, slices, flows from
//! launches to the work they launched, NVTX ranges, the device-memory counter, as the events stream by.

use super::*;
use cuflight_trace::model::collectives::Collective;
use cuflight_trace::model::cuda_errors::{error_name, ErrorClass};

/// The device counters drawn as counter tracks, a sample's value at its start (percent of peak).
pub(super) const GPU_COUNTERS: [&str; 3] = ["SM active (%)", "Tensor active (%)", "DRAM throughput (% of peak)"];

/// What one process needs while its events stream by.
pub(super) struct ProcessState {
    pub(super) pid: u32,
    pub(super) strings: HashMap<u32, String>,
    /// Mangled forms of demangled kernel names (a debug annotation on their slices).
    pub(super) mangled: std::collections::HashMap<u32, String>,
    pub(super) thread_names: HashMap<u32, u32>,
    /// Which calls launch work and which work is a launch's first: the one join every output uses.
    pub(super) launches: cuflight_trace::model::launches::LaunchJoin,
    /// Launch calls held back until their first device work appears (they then start its flow) or
    /// [`cuflight_trace::model::launches::LAUNCH_HORIZON_NS`] passes (written without one): a flow needs both ends, and a call's slice is written
    /// once, with its flow id in it.
    pub(super) held: HashMap<u32, Vec<cuflight_format::RawEvent>>,
    pub(super) held_order: std::collections::VecDeque<(u64, u32)>,
    /// Emptied lists of held calls, reused: a launch is held for every kernel, so this saves an allocation each.
    spare: Vec<Vec<cuflight_format::RawEvent>>,
    pub(super) ranges: cuflight_trace::model::ranges::Pairer,
    pub(super) memory: cuflight_trace::model::memory::LiveMemory,
    pub(super) labels: HashMap<u64, u64>,
    stacks: cuflight_trace::model::pystacks::StackJoin,
    /// Interned Python stack text of calls whose slice is not written yet, by correlation id.
    call_stacks: HashMap<u32, u64>,
    /// The first call that returned a device fault was marked (every later call returns it too).
    faulted: bool,
    /// The last kernel, copy or memset: (start, correlation, device, stream, end). Its graph node, if it was one,
    /// comes next ([`EventKind::GraphNode`]).
    last_op: Option<(u64, u32, u32, u32, u64)>,
    /// The CUDA graph replay being drawn on each (device, stream): one slice from its first node's start to its
    /// last node's end, on a track beside the stream's.
    replays: HashMap<(u32, u32), Replay>,
}

/// One launch of a CUDA graph on one stream, as its nodes go by.
#[derive(Clone, Copy)]
pub(super) struct Replay {
    correlation: u32,
    graph: u64,
    start: u64,
    end: u64,
    nodes: u64,
}

/// Where a GPU op's slice goes: its stream's track, and the flow from its launch calls it ends (its first op only).
#[derive(Clone, Copy)]
struct OpTrack {
    track: u64,
    term: Option<u64>,
}

impl ProcessState {
    pub(super) fn new(pid: u32, strings: HashMap<u32, String>) -> Self {
        ProcessState {
            pid,
            strings,
            faulted: false,
            mangled: Default::default(),
            thread_names: HashMap::default(),
            held: HashMap::default(),
            held_order: Default::default(),
            spare: Vec::new(),
            launches: Default::default(),
            ranges: cuflight_trace::model::ranges::Pairer::default(),
            memory: Default::default(),
            labels: HashMap::default(),
            stacks: Default::default(),
            call_stacks: HashMap::default(),
            last_op: None,
            replays: HashMap::default(),
        }
    }

    /// A graph node record: the op just written ran as a node of a graph launch, which is drawn as one slice.
    fn graph_node<W: Write>(&mut self, x: &mut Exporter<W>, e: &cuflight_format::RawEvent) -> std::io::Result<()> {
        let Some((start, correlation, device, stream, end)) = self.last_op.take() else { return Ok(()) };
        if start != e.start || correlation != e.correlation {
            return Ok(());
        }
        let graph = e.as_graph_node().graph_id;
        match self.replays.get_mut(&(device, stream)) {
            Some(r) if r.correlation == correlation && r.graph == graph => {
                r.end = r.end.max(end);
                r.nodes += 1;
                Ok(())
            }
            _ => {
                let replay = Replay { correlation, graph, start, end, nodes: 1 };
                match self.replays.insert((device, stream), replay) {
                    Some(done) => self.replay_slice(x, (device, stream), done),
                    None => Ok(()),
                }
            }
        }
    }

    /// Draws one finished replay on its stream's replay track.
    fn replay_slice<W: Write>(&mut self, x: &mut Exporter<W>, at: (u32, u32), r: Replay) -> std::io::Result<()> {
        let pid = self.pid;
        let track =
            x.track(TrackKey::Replays(pid, at.0, at.1), || format!("GPU {} stream {} CUDA graph replays", at.0, at.1))?;
        let name = self.label(x, 4 << 32 | r.graph, || format!("CUDA graph {} replay", r.graph));
        let args = [Arg::U(ann!("correlation"), r.correlation as u64), Arg::U(ann!("nodes"), r.nodes)];
        x.slice(track, r.start, r.end, name, cat!("graph"), &args, None, None)
    }

    pub(super) fn string(&self, id: u32) -> &str {
        self.strings.get(&id).map_or("", String::as_str)
    }

    fn api_slice<W: Write>(
        &mut self,
        x: &mut Exporter<W>,
        e: &cuflight_format::RawEvent,
        flow: Option<u64>,
    ) -> std::io::Result<()> {
        let track = self.thread(x, e.tid)?;
        let call = e.as_api();
        let category = if call.runtime { cat!("cuda_runtime") } else { cat!("cuda_driver") };
        // The return code only when it is an error (success is the rule); the callback id repeats the name.
        let stack = if self.call_stacks.is_empty() { None } else { self.call_stacks.remove(&e.correlation) };
        let error = if call.failed() { error_name(call.runtime, call.code()) } else { String::new() };
        let mut args = [Arg::U(ann!("correlation"), e.correlation as u64), Arg::U(0, 0), Arg::U(0, 0), Arg::U(0, 0)];
        let mut used = 1;
        if call.failed() {
            args[used] = Arg::U(ann!("return"), call.result);
            args[used + 1] = Arg::S(ann!("error"), &error);
            used += 2;
        }
        if let Some(iid) = stack {
            args[used] = Arg::I(ann!("python stack"), iid);
            used += 1;
        }
        let args = &args[..used];
        let name = x.id_iid(self.pid, e.name, &self.strings);
        x.slice(track, e.start, e.end, name, category, args, flow, None)?;
        // A device fault is reported by a later call: an instant where it first was, to find it on the timeline.
        if !self.faulted && ErrorClass::of(self.string(e.name), call.code()) == Some(ErrorClass::Sticky) {
            self.faulted = true;
            let mark = x.name_iid(&format!("CUDA device fault: {error}"));
            x.instant(track, e.end, mark, category)?;
        }
        Ok(())
    }

    /// Writes the held launch calls older than `now` minus the horizon (all of them for `u64::MAX`) without a flow.
    pub(super) fn release<W: Write>(&mut self, x: &mut Exporter<W>, now: u64) -> std::io::Result<()> {
        if now == u64::MAX {
            let mut open: Vec<((u32, u32), Replay)> = self.replays.drain().collect();
            open.sort_unstable_by_key(|&(at, r)| (r.start, at));
            for (at, r) in open {
                self.replay_slice(x, at, r)?;
            }
        }
        while let Some(&(start, corr)) = self.held_order.front() {
            if now != u64::MAX && start.saturating_add(cuflight_trace::model::launches::LAUNCH_HORIZON_NS) >= now {
                break;
            }
            self.held_order.pop_front();
            if self.held.get(&corr).and_then(|v| v.first()).is_some_and(|c| c.start == start) {
                let calls = self.held.remove(&corr).unwrap_or_default();
                for call in &calls {
                    self.api_slice(x, call, None)?;
                }
                self.reuse(calls);
            }
        }
        Ok(())
    }

    fn reuse(&mut self, mut calls: Vec<cuflight_format::RawEvent>) {
        if self.spare.len() < 64 {
            calls.clear();
            self.spare.push(calls);
        }
    }

    pub(super) fn thread<W: Write>(&self, x: &mut Exporter<W>, tid: u32) -> std::io::Result<u64> {
        // The label is built only for a new track: this runs for every API call.
        x.track(TrackKey::Thread(self.pid, tid), || match self.thread_names.get(&tid) {
            Some(&n) => self.string(n).to_string(),
            None => format!("thread {tid}"),
        })
    }

    pub(super) fn stream<W: Write>(&self, x: &mut Exporter<W>, device: u32, stream: u32) -> std::io::Result<u64> {
        x.track(TrackKey::Stream(self.pid, device, stream), || format!("GPU {device} stream {stream}"))
    }

    pub(super) fn domain(&self, id: u64) -> &str {
        cuflight_trace::model::trace::nvtx_domain_name(id, |i| self.string(i))
    }

    pub(super) fn event<W: Write>(
        &mut self,
        x: &mut Exporter<W>,
        p: &cuflight_trace::model::trace::Process,
        e: &cuflight_format::RawEvent,
        comm: &crate::collectives::Collectives,
    ) -> std::io::Result<()> {
        let pid = self.pid;
        let mut stacked = None;
        self.stacks
            .feed_marked(e, |call, frames, borrowed| stacked = Some((call.correlation, frames.to_vec(), borrowed)));
        if let Some((correlation, frames, borrowed)) = stacked {
            let mut p_text = cuflight_trace::model::pystacks::stack_text(p, &frames);
            if borrowed {
                p_text.insert_str(0, "(the main thread's: this thread runs no Python)\n");
            }
            let iid = x.stack_iid(p_text);
            self.call_stacks.insert(correlation, iid);
        }
        if e.kind() == Some(EventKind::GraphNode) {
            return self.graph_node(x, e);
        }
        // The one rule of what a timeline draws (the report counts its times from where it starts).
        if !cuflight_trace::model::timeline::drawn(e) {
            return Ok(());
        }
        if let Some(r) = self.ranges.feed(e) {
            return if r.async_range {
                self.range(x, r.start, r.end, r.name, r.domain)
            } else {
                let track = self.thread(x, r.tid)?;
                let args = [Arg::S(ann!("domain"), self.domain(r.domain))];
                let name = x.id_iid(pid, r.name, &self.strings);
                x.slice(track, r.start, r.end, name, cat!("nvtx"), &args, None, None)
            };
        }
        match e.kind() {
            Some(EventKind::Api) => {
                if self.launches.api(p, e).is_some() {
                    let calls = self.held.entry(e.correlation).or_insert_with(|| self.spare.pop().unwrap_or_default());
                    if calls.is_empty() {
                        self.held_order.push_back((e.start, e.correlation));
                    }
                    calls.push(*e);
                } else {
                    self.api_slice(x, e, None)?;
                }
            }
            Some(k @ (EventKind::Kernel | EventKind::Memcpy | EventKind::Memset)) => {
                let joined = self.launches.work(e);
                let collective = comm.of_kernel(pid, p, e, joined);
                self.gpu_op(x, e, (k, joined.is_some_and(|w| w.first)), collective)?
            }
            Some(EventKind::Range) => {
                let range = e.as_range();
                let track = if range.on_device { self.stream(x, e.device, e.stream)? } else { self.thread(x, e.tid)? };
                let args = [Arg::S(ann!("domain"), self.string(range.category))];
                let name = x.id_iid(pid, e.name, &self.strings);
                x.slice(track, e.start, e.end, name, cat!("range"), &args, None, None)?;
            }
            Some(EventKind::NvtxMark) => {
                let track = self.thread(x, e.tid)?;
                let name = x.id_iid(pid, e.name, &self.strings);
                x.instant(track, e.start, name, cat!("nvtx"))?;
            }
            Some(EventKind::Alloc | EventKind::Free) => {
                let Some(change) = self.memory.apply(pid, e).filter(|c| c.device) else { return Ok(()) };
                let track =
                    x.track(TrackKey::Counter(pid, CounterTrack::Memory), || "Device memory in use (bytes)".into())?;
                x.counter(track, e.start, Counter::Int(change.live.min(i64::MAX as u64) as i64))?;
            }
            Some(EventKind::GpuSample) => {
                let sample = e.as_gpu_sample();
                let values = [sample.sm_active, sample.tensor_active, sample.dram()];
                for (i, (value, label)) in values.into_iter().zip(GPU_COUNTERS).enumerate() {
                    let Some(value) = value else { continue };
                    let key = TrackKey::Counter(pid, CounterTrack::Gpu(e.device, i as u8));
                    let track = x.track(key, || format!("GPU {} {label}", e.device))?;
                    x.counter(track, e.start, Counter::Double((value * 1000.0).round() / 10.0))?;
                }
            }
            Some(EventKind::Sync) => {
                let track = x.track(TrackKey::Async(pid, u32::MAX), || "CUDA synchronization".into())?;
                let args = [Arg::U(ann!("stream"), e.stream as u64)];
                let kind = e.as_sync().kind;
                let name = self.label(x, 3 << 32 | kind as u64, || cupti_labels::sync_kind(kind).to_string());
                x.slice(track, e.start, e.end, name, cat!("sync"), &args, None, None)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A kernel, copy or memset on its stream's track, ending the flow from its held launch calls.
    fn gpu_op<W: Write>(
        &mut self,
        x: &mut Exporter<W>,
        e: &cuflight_format::RawEvent,
        (k, first): (EventKind, bool),
        collective: Option<Collective>,
    ) -> std::io::Result<()> {
        let pid = self.pid;
        self.last_op = Some((e.start, e.correlation, e.device, e.stream, e.end));
        let track = self.stream(x, e.device, e.stream)?;
        // The first work of held launch calls: they start the flow it ends (once per launch).
        let calls = if first { self.held.remove(&e.correlation) } else { None };
        let term = calls.as_ref().map(|_| flow_id(pid, e.correlation));
        if let Some(calls) = calls {
            for call in &calls {
                self.api_slice(x, call, term)?;
            }
            self.reuse(calls);
        }
        let at = OpTrack { track, term };
        match k {
            EventKind::Kernel => self.kernel_slice(x, e, at, collective),
            EventKind::Memcpy => self.memcpy_slice(x, e, at),
            _ => self.memset_slice(x, e, at),
        }
    }

    /// A kernel's slice: its launch configuration, and its mangled name where it has one.
    fn kernel_slice<W: Write>(
        &mut self,
        x: &mut Exporter<W>,
        e: &cuflight_format::RawEvent,
        OpTrack { track, term }: OpTrack,
        collective: Option<Collective>,
    ) -> std::io::Result<()> {
        let corr = Arg::U(ann!("correlation"), e.correlation as u64);
        let pid = self.pid;
        let c = e.launch_config();
        // Launch dimensions and mangled names repeat: written once, then referred to by iid.
        let (grid, block) = (x.dims_iid(c.grid), x.dims_iid(c.block));
        let mangled = self.mangled.get(&e.name).map(|m| x.mangled_iid(pid, e.name, m));
        let mut args = [
            corr,
            Arg::I(ann!("grid"), grid),
            Arg::I(ann!("block"), block),
            Arg::U(ann!("registers per thread"), c.registers as u64),
            Arg::U(ann!("static shared memory"), c.static_shared as u64),
            Arg::U(ann!("dynamic shared memory"), c.dynamic_shared as u64),
            Arg::I(ann!("mangled name"), mangled.unwrap_or(0)),
            // A communication kernel's collective (`crate::collectives`).
            Arg::S(ann!("collective"), collective.map_or("", |c| c.label())),
        ];
        // Shared memory sizes only when used: most kernels use none, and every byte counts here.
        let mut used = if c.static_shared == 0 && c.dynamic_shared == 0 { 4 } else { 6 };
        for (slot, present) in [(6, mangled.is_some()), (7, collective.is_some())] {
            if present {
                args.swap(used, slot);
                used += 1;
            }
        }
        let name = x.id_iid(pid, e.name, &self.strings);
        x.slice(track, e.start, e.end, name, cat!("kernel"), &args[..used], None, term)
    }

    /// A copy's slice, and the bandwidth counter while it runs.
    fn memcpy_slice<W: Write>(
        &mut self,
        x: &mut Exporter<W>,
        e: &cuflight_format::RawEvent,
        OpTrack { track, term }: OpTrack,
    ) -> std::io::Result<()> {
        let corr = Arg::U(ann!("correlation"), e.correlation as u64);
        let pid = self.pid;
        let copy = e.as_copy();
        let (src, dst) = (cupti_labels::memory_kind(copy.src), cupti_labels::memory_kind(copy.dst));
        // One label a (kind, source, destination).
        let key = (copy.dst.0 as u64) << 16 | (copy.src.0 as u64) << 8 | copy.kind.0 as u64;
        let name = self
            .label(x, 1 << 32 | key, || format!("Memcpy {} ({src} -> {dst})", cupti_labels::memcpy_kind(copy.kind)));
        let args =
            [corr, Arg::U(ann!("bytes"), copy.bytes), Arg::S(ann!("source"), src), Arg::S(ann!("destination"), dst)];
        x.slice(track, e.start, e.end, name, cat!("gpu_memcpy"), &args, None, term)?;
        let bw = x.track(TrackKey::Counter(pid, CounterTrack::Bandwidth), || "Memcpy bandwidth (GB/s)".into())?;
        let gbps = if e.duration() == 0 { 0.0 } else { copy.bytes as f64 / e.duration() as f64 };
        x.counter(bw, e.start, Counter::Double(gbps))?;
        x.counter(bw, e.end.max(e.start), Counter::Double(0.0))?;
        Ok(())
    }

    /// A memset's slice.
    fn memset_slice<W: Write>(
        &mut self,
        x: &mut Exporter<W>,
        e: &cuflight_format::RawEvent,
        OpTrack { track, term }: OpTrack,
    ) -> std::io::Result<()> {
        let corr = Arg::U(ann!("correlation"), e.correlation as u64);
        let memset = e.as_memset();
        let name = self.label(x, 2 << 32 | memset.memory.0 as u64, || {
            format!("Memset ({})", cupti_labels::memory_kind(memset.memory))
        });
        let args = [corr, Arg::U(ann!("bytes"), memset.bytes)];
        x.slice(track, e.start, e.end, name, cat!("gpu_memset"), &args, None, term)
    }

    /// A start/end range: one async track per range name, since such ranges may overlap.
    pub(super) fn range<W: Write>(
        &self,
        x: &mut Exporter<W>,
        start: u64,
        end: u64,
        name: u32,
        domain: u64,
    ) -> std::io::Result<()> {
        let track = x.track(TrackKey::Async(self.pid, name), || format!("NVTX {}", self.string(name)))?;
        let args = [Arg::S(ann!("domain"), self.domain(domain))];
        let iid = x.id_iid(self.pid, name, &self.strings);
        x.slice(track, start, end, iid, cat!("nvtx"), &args, None, None)
    }

    /// Name iid of a label built from event fields (copy kinds, memory kinds, sync kinds), built once per key.
    pub(super) fn label<W: Write>(&mut self, x: &mut Exporter<W>, key: u64, text: impl FnOnce() -> String) -> u64 {
        if let Some(&iid) = self.labels.get(&key) {
            return iid;
        }
        let iid = x.name_iid(&text());
        self.labels.insert(key, iid);
        iid
    }
}
