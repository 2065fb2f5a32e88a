//! Perfetto export: native protobuf TrackEvent (`perfetto/protos/perfetto/trace/*.proto`), written packet by
//! packet as it is produced.
//!
//! Tracks: one process track per profiled process (command, pid, rank), thread tracks with CUDA API calls and
//! NVTX ranges, one track per GPU stream (device and stream in the name) with kernels, copies and memsets, async
//! tracks for start/end ranges, and counter tracks for device memory in use and memcpy bandwidth. A flow joins
//! each API call to the device work it launched (same correlation id). Names, categories and debug-annotation
//! names are interned on one packet sequence.

use super::protobuf::Writer;
use crate::names;
use crate::trace::{Process, Trace};
use cuflight_format::event::{LaunchConfig, API_DRIVER, FLAG_DEVICE};
use cuflight_format::EventKind;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::io::Write;

// Field numbers from Perfetto's protos.
const TRACE_PACKET: u32 = 1;
const PKT_TIMESTAMP: u32 = 8;
const PKT_SEQ_ID: u32 = 10;
const PKT_TRACK_EVENT: u32 = 11;
const PKT_INTERNED_DATA: u32 = 12;
const PKT_SEQ_FLAGS: u32 = 13;
const PKT_TRACK_DESCRIPTOR: u32 = 60;
const TD_UUID: u32 = 1;
const TD_NAME: u32 = 2;
const TD_PROCESS: u32 = 3;
const TD_THREAD: u32 = 4;
const TD_PARENT: u32 = 5;
const TD_COUNTER: u32 = 8;
const PD_PID: u32 = 1;
const PD_NAME: u32 = 6;
const THD_PID: u32 = 1;
const THD_TID: u32 = 2;
const THD_NAME: u32 = 5;
const TE_CATEGORY_IIDS: u32 = 3;
const TE_DEBUG: u32 = 4;
const TE_TYPE: u32 = 9;
const TE_NAME_IID: u32 = 10;
const TE_TRACK: u32 = 11;
const TE_COUNTER: u32 = 30;
const TE_DOUBLE_COUNTER: u32 = 44;
const TE_FLOWS: u32 = 47;
const TE_TERMINATING_FLOWS: u32 = 48;
const DA_NAME_IID: u32 = 1;
const DA_UINT: u32 = 3;
const DA_STRING: u32 = 6;
const ID_CATEGORIES: u32 = 1;
const ID_NAMES: u32 = 2;
const ID_ANNOTATION_NAMES: u32 = 3;
const TYPE_BEGIN: u64 = 1;
const TYPE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;
const TYPE_COUNTER: u64 = 4;
const SEQ_CLEARED: u64 = 1;
const SEQ_NEEDS_STATE: u64 = 2;
const SEQUENCE: u64 = 1;

/// What the export wrote, for the CLI summary and for tests that decode the file.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ExportCounts {
    pub packets: u64,
    pub slices: u64,
    pub instants: u64,
    pub flows: u64,
    pub counter_values: u64,
    pub tracks: u64,
    /// Why the input ended before its footer (exported up to its last complete block), if it did.
    pub cut_short: Option<&'static str>,
}

/// Categories and debug-annotation names are a fixed vocabulary, interned once in the first packet (iid =
/// position + 1), so events never look them up.
const CATEGORIES: &[&str] =
    &["cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "range", "nvtx", "sync"];
const ANNOTATIONS: &[&str] = &[
    "correlation",
    "return",
    "grid",
    "block",
    "registers per thread",
    "static shared memory",
    "dynamic shared memory",
    "bytes",
    "source",
    "destination",
    "domain",
    "stream",
    "mangled name",
];

fn cat(name: &str) -> u64 {
    CATEGORIES.iter().position(|c| *c == name).map_or(0, |i| i as u64 + 1)
}

fn ann(name: &str) -> u64 {
    ANNOTATIONS.iter().position(|c| *c == name).map_or(0, |i| i as u64 + 1)
}

enum Arg<'a> {
    U(&'static str, u64),
    S(&'static str, &'a str),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum TrackKey {
    Process(u32),
    Thread(u32, u32),
    Stream(u32, u32, u32),
    Counter(u32, &'static str),
    Async(u32, u32),
}

struct Exporter<W: Write> {
    out: W,
    w: Writer,
    first: bool,
    names: HashMap<String, u64>,
    /// Name iids by (pid, string id): kernel names are long, hashing a pair is not.
    name_ids: HashMap<(u32, u32), u64>,
    tracks: HashMap<TrackKey, u64>,
    counts: ExportCounts,
    process_labels: HashMap<u32, String>,
    /// Interned names a packet must carry, built before the packet.
    new_names: Vec<(u64, String)>,
}

impl<W: Write> Exporter<W> {
    fn emit(&mut self, ts: Option<u64>, body: impl FnOnce(&mut Writer)) -> std::io::Result<()> {
        self.emit_with(ts, true, body)
    }

    /// `interned`: whether the packet refers to interned data (and so needs the sequence's incremental state).
    /// Slice ends do not; leaving the flag off them saves two bytes per slice.
    fn emit_with(&mut self, ts: Option<u64>, interned: bool, body: impl FnOnce(&mut Writer)) -> std::io::Result<()> {
        let flags = if std::mem::take(&mut self.first) {
            SEQ_CLEARED
        } else if interned || !self.new_names.is_empty() {
            SEQ_NEEDS_STATE
        } else {
            0
        };
        let first = flags == SEQ_CLEARED;
        let names = std::mem::take(&mut self.new_names);
        let (cats, anns): (&[&str], &[&str]) = if first { (CATEGORIES, ANNOTATIONS) } else { (&[], &[]) };
        let w = &mut self.w;
        w.begin();
        if let Some(ts) = ts {
            w.uint(PKT_TIMESTAMP, ts);
        }
        w.uint(PKT_SEQ_ID, SEQUENCE);
        if flags != 0 {
            w.uint(PKT_SEQ_FLAGS, flags);
        }
        if !names.is_empty() || !cats.is_empty() || !anns.is_empty() {
            w.message(PKT_INTERNED_DATA, |w| {
                for (i, name) in cats.iter().enumerate() {
                    w.message(ID_CATEGORIES, |w| {
                        w.uint(1, i as u64 + 1);
                        w.string(2, name);
                    });
                }
                for (iid, name) in &names {
                    w.message(ID_NAMES, |w| {
                        w.uint(1, *iid);
                        w.string(2, name);
                    });
                }
                for (i, name) in anns.iter().enumerate() {
                    w.message(ID_ANNOTATION_NAMES, |w| {
                        w.uint(1, i as u64 + 1);
                        w.string(2, name);
                    });
                }
            });
        }
        body(w);
        let out = &mut self.out;
        w.finish(|packet| {
            // Each packet is field 1 of the Trace message: tag, length, bytes.
            let mut head = [0u8; 11];
            head[0] = ((TRACE_PACKET << 3) | 2) as u8;
            let len = 1 + cuflight_format::varint::write_into(&mut head[1..], packet.len() as u64);
            out.write_all(&head[..len])?;
            out.write_all(packet)
        })?;
        self.counts.packets += 1;
        Ok(())
    }

    fn name_iid(&mut self, name: &str) -> u64 {
        if let Some(&iid) = self.names.get(name) {
            return iid;
        }
        let iid = self.names.len() as u64 + 1;
        self.names.insert(name.to_string(), iid);
        self.new_names.push((iid, name.to_string()));
        iid
    }

    /// Name iid of string `id` of process `pid`.
    fn id_iid(&mut self, pid: u32, id: u32, text: &str) -> u64 {
        if let Some(&iid) = self.name_ids.get(&(pid, id)) {
            return iid;
        }
        let iid = self.name_iid(text);
        self.name_ids.insert((pid, id), iid);
        iid
    }

    /// The uuid of a track, writing its descriptor the first time.
    fn track(&mut self, key: TrackKey, label: &dyn Fn() -> String) -> std::io::Result<u64> {
        if let Some(&uuid) = self.tracks.get(&key) {
            return Ok(uuid);
        }
        let uuid = self.tracks.len() as u64 + 1;
        self.tracks.insert(key, uuid);
        let parent = match key {
            TrackKey::Process(_) => None,
            TrackKey::Thread(pid, _)
            | TrackKey::Stream(pid, ..)
            | TrackKey::Counter(pid, _)
            | TrackKey::Async(pid, _) => {
                let name = self.process_labels.get(&pid).cloned().unwrap_or_else(|| format!("pid {pid}"));
                Some(self.track(TrackKey::Process(pid), &|| name.clone())?)
            }
        };
        let name = label();
        self.counts.tracks += 1;
        self.emit(None, |w| {
            w.message(PKT_TRACK_DESCRIPTOR, |w| {
                w.uint(TD_UUID, uuid);
                if let Some(parent) = parent {
                    w.uint(TD_PARENT, parent);
                }
                match key {
                    TrackKey::Process(pid) => w.message(TD_PROCESS, |w| {
                        w.uint(PD_PID, pid as u64);
                        w.string(PD_NAME, &name);
                    }),
                    TrackKey::Thread(pid, tid) => w.message(TD_THREAD, |w| {
                        w.uint(THD_PID, pid as u64);
                        w.uint(THD_TID, tid as u64);
                        w.string(THD_NAME, &name);
                    }),
                    TrackKey::Counter(..) => {
                        w.string(TD_NAME, &name);
                        w.message(TD_COUNTER, |_| {});
                    }
                    TrackKey::Stream(..) | TrackKey::Async(..) => w.string(TD_NAME, &name),
                }
            })
        })?;
        Ok(uuid)
    }

    /// A slice: `name` is an interned name iid, `category` a [`CATEGORIES`] iid.
    #[allow(clippy::too_many_arguments)]
    fn slice(
        &mut self,
        track: u64,
        start: u64,
        end: u64,
        name: u64,
        category: u64,
        args: &[Arg],
        flow: Option<u64>,
        terminating: Option<u64>,
    ) -> std::io::Result<()> {
        let (cat, args) = (category, args);
        self.emit(Some(start), |w| {
            w.message(PKT_TRACK_EVENT, |w| {
                w.uint(TE_TYPE, TYPE_BEGIN);
                w.uint(TE_TRACK, track);
                w.uint(TE_NAME_IID, name);
                w.uint(TE_CATEGORY_IIDS, cat);
                for a in args {
                    w.message(TE_DEBUG, |w| match a {
                        Arg::U(k, v) => {
                            w.uint(DA_NAME_IID, ann(k));
                            w.uint(DA_UINT, *v);
                        }
                        Arg::S(k, v) => {
                            w.uint(DA_NAME_IID, ann(k));
                            w.string(DA_STRING, v);
                        }
                    });
                }
                if let Some(f) = flow {
                    w.fixed64(TE_FLOWS, f);
                }
                if let Some(f) = terminating {
                    w.fixed64(TE_TERMINATING_FLOWS, f);
                }
            })
        })?;
        self.emit_with(Some(end.max(start)), false, |w| {
            w.message(PKT_TRACK_EVENT, |w| {
                w.uint(TE_TYPE, TYPE_END);
                w.uint(TE_TRACK, track);
            })
        })?;
        self.counts.slices += 1;
        self.counts.flows += flow.is_some() as u64;
        Ok(())
    }

    fn instant(&mut self, track: u64, ts: u64, name: u64, cat: u64) -> std::io::Result<()> {
        self.counts.instants += 1;
        self.emit(Some(ts), |w| {
            w.message(PKT_TRACK_EVENT, |w| {
                w.uint(TE_TYPE, TYPE_INSTANT);
                w.uint(TE_TRACK, track);
                w.uint(TE_NAME_IID, name);
                w.uint(TE_CATEGORY_IIDS, cat);
            })
        })
    }

    fn counter(&mut self, track: u64, ts: u64, value: Counter) -> std::io::Result<()> {
        self.counts.counter_values += 1;
        self.emit(Some(ts), |w| {
            w.message(PKT_TRACK_EVENT, |w| {
                w.uint(TE_TYPE, TYPE_COUNTER);
                w.uint(TE_TRACK, track);
                match value {
                    Counter::Int(v) => w.int(TE_COUNTER, v),
                    Counter::Double(v) => w.double(TE_DOUBLE_COUNTER, v),
                }
            })
        })
    }
}

#[derive(Clone, Copy)]
enum Counter {
    Int(i64),
    Double(f64),
}

fn flow_id(pid: u32, correlation: u32) -> u64 {
    (pid as u64) << 32 | correlation as u64
}

impl<W: Write> Exporter<W> {
    fn new(out: W) -> Self {
        Exporter {
            out,
            w: Writer::default(),
            first: true,
            names: HashMap::default(),
            name_ids: HashMap::default(),
            tracks: HashMap::default(),
            counts: ExportCounts::default(),
            process_labels: HashMap::default(),
            new_names: Vec::new(),
        }
    }
}

/// Writes `trace` (in memory) to `out` as a Perfetto protobuf trace.
pub fn export<W: Write>(trace: &Trace, out: W) -> std::io::Result<ExportCounts> {
    let mut x = Exporter::new(out);
    for (&pid, p) in &trace.processes {
        x.process_labels.insert(pid, p.label());
        let mut st = ProcessState::new(pid, p.strings.iter().map(|(k, v)| (*k, v.clone())).collect());
        st.mangled = p.mangled.clone();
        st.exact_flows(&p.events);
        for e in p.events.iter().filter(|e| e.kind() == Some(EventKind::ThreadName)) {
            st.thread_names.insert(e.a as u32, e.name);
        }
        for e in &p.events {
            st.event(&mut x, e)?;
        }
    }
    x.out.flush()?;
    Ok(x.counts)
}

/// Streams a cuflight trace file to Perfetto block by block: memory stays bounded by one block (64K events) plus
/// per-process state (strings, open ranges, live allocations, launches in flight), whatever the trace's size.
pub fn export_file<W: Write>(path: &std::path::Path, out: W) -> Result<ExportCounts, crate::trace::TraceError> {
    use cuflight_format::file::{Block, TraceReader, TAG_EVENTS, TAG_EVENT_COLUMNS, TAG_STRINGS};
    let shown = path.display().to_string();
    let open = || -> Result<TraceReader<std::io::BufReader<std::fs::File>>, crate::trace::TraceError> {
        let f = std::fs::File::open(path)
            .map_err(|source| crate::trace::TraceError::Open { path: shown.clone(), source })?;
        TraceReader::new(std::io::BufReader::with_capacity(1 << 20, f))
            .map_err(|source| crate::trace::TraceError::Format { path: shown.clone(), source })
    };
    let fmt = |source| crate::trace::TraceError::Format { path: shown.clone(), source };
    let io =
        |e: std::io::Error| crate::trace::TraceError::Import { path: shown.clone(), what: format!("writing: {e}") };
    let mut x = Exporter::new(out);
    // Pass 1: process facts only (written last by `record`), found through the block index: nothing else is read.
    let mut file =
        std::fs::File::open(path).map_err(|source| crate::trace::TraceError::Open { path: shown.clone(), source })?;
    let mut infos: HashMap<u32, cuflight_format::file::ProcessInfo> = HashMap::default();
    for info in cuflight_format::index::process_facts(&mut file).map_err(fmt)? {
        let p = Process { info, ..Default::default() };
        x.process_labels.insert(p.info.file_key(), p.label());
        infos.insert(p.info.file_key(), p.info);
    }
    // Pass 2: strings and events, in file order.
    let mut states: HashMap<u32, ProcessState> = HashMap::default();
    let mut order: Vec<(u64, u32)> = Vec::new();
    let mut reader = open()?;
    let mut string_bytes = 0u64;
    while let Some(block) =
        reader.next_block_where(|t| matches!(t, TAG_STRINGS | TAG_EVENTS | TAG_EVENT_COLUMNS)).map_err(fmt)?
    {
        match block {
            Some(Block::Strings { pid, base, bytes }) => {
                string_bytes += bytes.len() as u64;
                if string_bytes > crate::trace::MAX_STRING_BYTES {
                    let why = format!("more than {} MiB of strings", crate::trace::MAX_STRING_BYTES >> 20);
                    return Err(fmt(cuflight_format::file::FileError::Corrupt(why)));
                }
                let st = states.entry(pid).or_insert_with(|| ProcessState::new(pid, HashMap::default()));
                for (id, s) in cuflight_format::segment::parse_strings(base, &bytes).filter(|(_, s)| !s.is_empty()) {
                    crate::trace::insert_string(&mut st.strings, &mut st.mangled, id, s);
                }
            }
            Some(Block::Events { pid, mut events }) => {
                let st = states.entry(pid).or_insert_with(|| ProcessState::new(pid, HashMap::default()));
                st.align(infos.get(&pid), &mut events);
                // A block holds one ring after another; in time order a launch precedes its device work. Sorting
                // (time, position) keys keeps equal times in ring order and moves 16 bytes instead of 64.
                order.clear();
                order.extend(events.iter().enumerate().map(|(i, e)| (e.start, i as u32)));
                order.sort_unstable();
                for &(_, i) in &order {
                    let e = &events[i as usize];
                    if e.kind() == Some(EventKind::ThreadName) {
                        st.thread_names.insert(e.a as u32, e.name);
                    }
                    st.event(&mut x, e).map_err(io)?;
                }
            }
            _ => {}
        }
    }
    x.out.flush().map_err(io)?;
    x.counts.cut_short = reader.cut_short();
    Ok(x.counts)
}

/// What one process needs while its events stream by.
struct ProcessState {
    pid: u32,
    strings: HashMap<u32, String>,
    /// Mangled forms of demangled kernel names (a debug annotation on their slices).
    mangled: std::collections::HashMap<u32, String>,
    thread_names: HashMap<u32, u32>,
    /// Exact flow ends when the whole trace is known: correlations with device work and with an API call.
    exact: Option<(HashSet<u32>, HashSet<u32>)>,
    /// Streaming: launches seen whose device work has not appeared yet.
    in_flight: HashSet<u32>,
    flows_ended: HashSet<u32>,
    launcher_names: HashMap<u32, bool>,
    ranges: crate::ranges::Pairer,
    memory: crate::memory::LiveMemory,
    /// How device time maps onto the host clock (streaming only; fixed at the first block that can tell).
    clock: Option<cuflight_format::file::ClockMap>,
    labels: HashMap<u64, u64>,
    grid: String,
    block: String,
}

impl ProcessState {
    fn new(pid: u32, strings: HashMap<u32, String>) -> Self {
        ProcessState {
            pid,
            strings,
            mangled: Default::default(),
            thread_names: HashMap::default(),
            exact: None,
            in_flight: HashSet::default(),
            flows_ended: HashSet::default(),
            launcher_names: HashMap::default(),
            ranges: crate::ranges::Pairer::default(),
            memory: Default::default(),
            clock: None,
            labels: HashMap::default(),
            grid: String::new(),
            block: String::new(),
        }
    }

    fn string(&self, id: u32) -> &str {
        self.strings.get(&id).map_or("", String::as_str)
    }

    fn exact_flows(&mut self, events: &[cuflight_format::RawEvent]) {
        let with = |f: &dyn Fn(&cuflight_format::RawEvent) -> bool| -> HashSet<u32> {
            events.iter().filter(|e| f(e) && e.correlation != 0).map(|e| e.correlation).collect()
        };
        self.exact = Some((with(&|e| e.is_gpu_work()), with(&|e| e.kind() == Some(EventKind::Api))));
    }

    /// Moves device timestamps onto the host clock (the in-memory path did this at load).
    /// Moves device timestamps onto the host clock with the same rule as the in-memory path
    /// ([`crate::trace::clock_map`]); traces older than the pairs in the process facts use the pairs in the first
    /// block that has any.
    fn align(&mut self, info: Option<&cuflight_format::file::ProcessInfo>, events: &mut [cuflight_format::RawEvent]) {
        if self.clock.is_none() {
            let default = cuflight_format::file::ProcessInfo::default();
            let info = info.unwrap_or(&default);
            let has_pairs = events.iter().any(|e| e.kind() == Some(EventKind::ClockSync));
            if info.device_clock_monotonic || !info.clock_pairs.is_empty() || has_pairs {
                self.clock = Some(crate::trace::clock_map(info, events));
            }
        }
        if let Some(map) = &self.clock {
            crate::trace::align_device_events(map, events);
        }
    }

    /// Whether this API call starts a flow to device work.
    fn flow_start(&mut self, e: &cuflight_format::RawEvent) -> bool {
        if e.correlation == 0 {
            return false;
        }
        if let Some((launched, _)) = &self.exact {
            return launched.contains(&e.correlation);
        }
        let name = e.name;
        let strings = &self.strings;
        let launcher = *self.launcher_names.entry(name).or_insert_with(|| {
            let n = strings.get(&name).map_or("", String::as_str);
            ["Launch", "Memcpy", "Memset", "memcpy", "memset"].iter().any(|k| n.contains(k))
        });
        if launcher {
            self.in_flight.insert(e.correlation);
        }
        launcher
    }

    /// Whether this device op terminates its launch's flow (once per launch).
    fn flow_end(&mut self, e: &cuflight_format::RawEvent) -> bool {
        if e.correlation == 0 {
            return false;
        }
        match &self.exact {
            Some((_, api)) => api.contains(&e.correlation) && self.flows_ended.insert(e.correlation),
            None => self.in_flight.remove(&e.correlation),
        }
    }

    fn thread<W: Write>(&self, x: &mut Exporter<W>, tid: u32) -> std::io::Result<u64> {
        let name = self.thread_names.get(&tid).map(|&n| self.string(n).to_string());
        x.track(TrackKey::Thread(self.pid, tid), &|| name.clone().unwrap_or_else(|| format!("thread {tid}")))
    }

    fn stream<W: Write>(&self, x: &mut Exporter<W>, device: u32, stream: u32) -> std::io::Result<u64> {
        x.track(TrackKey::Stream(self.pid, device, stream), &|| format!("GPU {device} stream {stream}"))
    }

    fn domain(&self, id: u64) -> &str {
        crate::trace::nvtx_domain_name(id, |i| self.string(i))
    }

    fn event<W: Write>(&mut self, x: &mut Exporter<W>, e: &cuflight_format::RawEvent) -> std::io::Result<()> {
        let pid = self.pid;
        if let Some(r) = self.ranges.feed(e) {
            return if r.async_range {
                self.range(x, r.start, r.end, r.name, r.domain)
            } else {
                let track = self.thread(x, r.tid)?;
                let args = [Arg::S("domain", self.domain(r.domain))];
                let name = x.id_iid(pid, r.name, self.string(r.name));
                x.slice(track, r.start, r.end, name, cat("nvtx"), &args, None, None)
            };
        }
        match e.kind() {
            Some(EventKind::Api) => {
                let track = self.thread(x, e.tid)?;
                let flow = self.flow_start(e).then(|| flow_id(pid, e.correlation));
                let category = cat(if e.sub == API_DRIVER { "cuda_driver" } else { "cuda_runtime" });
                // The return code only when it is an error (success is the rule); the callback id repeats the name.
                let args = [Arg::U("correlation", e.correlation as u64), Arg::U("return", e.b)];
                let args = if e.b == 0 { &args[..1] } else { &args[..] };
                let name = x.id_iid(pid, e.name, self.string(e.name));
                x.slice(track, e.start, e.end, name, category, args, flow, None)?;
            }
            Some(k @ (EventKind::Kernel | EventKind::Memcpy | EventKind::Memset)) => {
                let track = self.stream(x, e.device, e.stream)?;
                let term = self.flow_end(e).then(|| flow_id(pid, e.correlation));
                let corr = Arg::U("correlation", e.correlation as u64);
                match k {
                    EventKind::Kernel => {
                        let c = LaunchConfig::unpack(e.a, e.b, e.c);
                        let (mut grid, mut block) = (std::mem::take(&mut self.grid), std::mem::take(&mut self.block));
                        super::protobuf::dims(&mut grid, c.grid);
                        super::protobuf::dims(&mut block, c.block);
                        let mangled = self.mangled.get(&e.name);
                        let mut args = [
                            corr,
                            Arg::S("grid", &grid),
                            Arg::S("block", &block),
                            Arg::U("registers per thread", c.registers as u64),
                            Arg::U("static shared memory", c.static_shared as u64),
                            Arg::U("dynamic shared memory", c.dynamic_shared as u64),
                            Arg::S("mangled name", mangled.map_or("", String::as_str)),
                        ];
                        // Shared memory sizes only when used: most kernels use none, and every byte counts here.
                        let mut used = if c.static_shared == 0 && c.dynamic_shared == 0 { 4 } else { 6 };
                        if mangled.is_some() {
                            args.swap(used, 6);
                            used += 1;
                        }
                        let name = x.id_iid(pid, e.name, self.string(e.name));
                        x.slice(track, e.start, e.end, name, cat("kernel"), &args[..used], None, term)?;
                        (self.grid, self.block) = (grid, block);
                    }
                    EventKind::Memcpy => {
                        let (src, dst) = e.copy_memory_kinds();
                        let (src, dst) = (names::memory_kind(src), names::memory_kind(dst));
                        let name = self.label(x, 1 << 32 | (e.b & 0xffff) << 8 | e.sub as u64, || {
                            format!("Memcpy {} ({src} -> {dst})", names::memcpy_kind(e.sub))
                        });
                        let args = [corr, Arg::U("bytes", e.a), Arg::S("source", src), Arg::S("destination", dst)];
                        x.slice(track, e.start, e.end, name, cat("gpu_memcpy"), &args, None, term)?;
                        let bw = x.track(TrackKey::Counter(pid, "bandwidth"), &|| "Memcpy bandwidth (GB/s)".into())?;
                        let gbps = if e.duration() == 0 { 0.0 } else { e.a as f64 / e.duration() as f64 };
                        x.counter(bw, e.start, Counter::Double(gbps))?;
                        x.counter(bw, e.end.max(e.start), Counter::Double(0.0))?;
                    }
                    _ => {
                        let name =
                            self.label(x, 2 << 32 | e.sub as u64, || format!("Memset ({})", names::memory_kind(e.sub)));
                        let args = [corr, Arg::U("bytes", e.a)];
                        x.slice(track, e.start, e.end, name, cat("gpu_memset"), &args, None, term)?;
                    }
                }
            }
            Some(EventKind::Range) => {
                let track = if e.flags & FLAG_DEVICE != 0 {
                    self.stream(x, e.device, e.stream)?
                } else {
                    self.thread(x, e.tid)?
                };
                let args = [Arg::S("domain", self.string(e.c as u32))];
                let name = x.id_iid(pid, e.name, self.string(e.name));
                x.slice(track, e.start, e.end, name, cat("range"), &args, None, None)?;
            }
            Some(EventKind::NvtxMark) => {
                let track = self.thread(x, e.tid)?;
                let name = x.id_iid(pid, e.name, self.string(e.name));
                x.instant(track, e.start, name, cat("nvtx"))?;
            }
            Some(EventKind::Alloc | EventKind::Free) => {
                let Some(change) = self.memory.apply(pid, e).filter(|c| c.device) else { return Ok(()) };
                let track = x.track(TrackKey::Counter(pid, "memory"), &|| "Device memory in use (bytes)".into())?;
                x.counter(track, e.start, Counter::Int(change.live.min(i64::MAX as u64) as i64))?;
            }
            Some(EventKind::Sync) => {
                let track = x.track(TrackKey::Async(pid, u32::MAX), &|| "CUDA synchronization".into())?;
                let args = [Arg::U("stream", e.stream as u64)];
                let name = self.label(x, 3 << 32 | e.sub as u64, || names::sync_kind(e.sub).to_string());
                x.slice(track, e.start, e.end, name, cat("sync"), &args, None, None)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A start/end range: one async track per range name, since such ranges may overlap.
    fn range<W: Write>(
        &self,
        x: &mut Exporter<W>,
        start: u64,
        end: u64,
        name: u32,
        domain: u64,
    ) -> std::io::Result<()> {
        let label = format!("NVTX {}", self.string(name));
        let track = x.track(TrackKey::Async(self.pid, name), &|| label.clone())?;
        let args = [Arg::S("domain", self.domain(domain))];
        let iid = x.id_iid(self.pid, name, self.string(name));
        x.slice(track, start, end, iid, cat("nvtx"), &args, None, None)
    }

    /// Name iid of a label built from event fields (copy kinds, memory kinds, sync kinds), built once per key.
    fn label<W: Write>(&mut self, x: &mut Exporter<W>, key: u64, text: impl FnOnce() -> String) -> u64 {
        if let Some(&iid) = self.labels.get(&key) {
            return iid;
        }
        let iid = x.name_iid(&text());
        self.labels.insert(key, iid);
        iid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::RawEvent;

    fn device_event(kind: EventKind, start: u64, corr: u32) -> RawEvent {
        RawEvent { correlation: corr, stream: 7, ..RawEvent::new(kind, 0, start, start + 10) }
    }

    #[test]
    fn counts_slices_flows_and_tracks() {
        let mut p = Process::default();
        p.info.pid = 5;
        p.strings.insert(1, "cudaLaunchKernel".into());
        p.strings.insert(2, "k".into());
        p.events = vec![
            RawEvent { correlation: 3, name: 1, sub: 1, ..RawEvent::new(EventKind::Api, 9, 100, 120) },
            RawEvent { name: 2, ..device_event(EventKind::Kernel, 130, 3) },
            device_event(EventKind::Memcpy, 150, 0),
        ];
        let mut t = Trace::default();
        t.processes.insert(5, p);
        let mut out = Vec::new();
        let c = export(&t, &mut out).unwrap();
        assert_eq!((c.slices, c.flows, c.counter_values), (3, 1, 2));
        // process, thread, stream, bandwidth counter
        assert_eq!(c.tracks, 4);
        assert!(!out.is_empty());
    }
}
