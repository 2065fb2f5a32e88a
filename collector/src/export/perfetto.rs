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
use cuflight_format::event::{LaunchConfig, MemKind, API_DRIVER, FLAG_DEVICE};
use cuflight_format::EventKind;
use std::collections::{HashMap, HashSet};
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
    categories: HashMap<&'static str, u64>,
    annotations: HashMap<&'static str, u64>,
    tracks: HashMap<TrackKey, u64>,
    counts: ExportCounts,
    /// Interned entries a packet must carry, built before the packet.
    new_names: Vec<(u64, String)>,
    new_categories: Vec<(u64, &'static str)>,
    new_annotations: Vec<(u64, &'static str)>,
}

impl<W: Write> Exporter<W> {
    fn emit(&mut self, ts: Option<u64>, body: impl FnOnce(&mut Writer)) -> std::io::Result<()> {
        let flags = if std::mem::take(&mut self.first) { SEQ_CLEARED } else { SEQ_NEEDS_STATE };
        let (names, cats, anns) = (
            std::mem::take(&mut self.new_names),
            std::mem::take(&mut self.new_categories),
            std::mem::take(&mut self.new_annotations),
        );
        let w = &mut self.w;
        w.begin();
        if let Some(ts) = ts {
            w.uint(PKT_TIMESTAMP, ts);
        }
        w.uint(PKT_SEQ_ID, SEQUENCE);
        w.uint(PKT_SEQ_FLAGS, flags);
        if !names.is_empty() || !cats.is_empty() || !anns.is_empty() {
            w.message(PKT_INTERNED_DATA, |w| {
                for (iid, name) in &cats {
                    w.message(ID_CATEGORIES, |w| {
                        w.uint(1, *iid);
                        w.string(2, name);
                    });
                }
                for (iid, name) in &names {
                    w.message(ID_NAMES, |w| {
                        w.uint(1, *iid);
                        w.string(2, name);
                    });
                }
                for (iid, name) in &anns {
                    w.message(ID_ANNOTATION_NAMES, |w| {
                        w.uint(1, *iid);
                        w.string(2, name);
                    });
                }
            });
        }
        body(w);
        let out = &mut self.out;
        w.finish(|packet| {
            // Each packet is field 1 of the Trace message: tag, length, bytes.
            let mut head = Vec::with_capacity(6);
            head.push(((TRACE_PACKET << 3) | 2) as u8);
            let mut n = packet.len() as u64;
            while n >= 0x80 {
                head.push(n as u8 | 0x80);
                n >>= 7;
            }
            head.push(n as u8);
            out.write_all(&head)?;
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

    fn category_iid(&mut self, cat: &'static str) -> u64 {
        if let Some(&iid) = self.categories.get(cat) {
            return iid;
        }
        let iid = self.categories.len() as u64 + 1;
        self.categories.insert(cat, iid);
        self.new_categories.push((iid, cat));
        iid
    }

    fn annotation_iid(&mut self, name: &'static str) -> u64 {
        if let Some(&iid) = self.annotations.get(name) {
            return iid;
        }
        let iid = self.annotations.len() as u64 + 1;
        self.annotations.insert(name, iid);
        self.new_annotations.push((iid, name));
        iid
    }

    /// The uuid of a track, writing its descriptor the first time.
    fn track(&mut self, key: TrackKey, p: &Process, label: &dyn Fn() -> String) -> std::io::Result<u64> {
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
            | TrackKey::Async(pid, _) => Some(self.track(TrackKey::Process(pid), p, &|| process_label(p))?),
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

    #[allow(clippy::too_many_arguments)]
    fn slice(
        &mut self,
        track: u64,
        start: u64,
        end: u64,
        name: &str,
        cat: &'static str,
        args: &[Arg],
        flow: Option<u64>,
        terminating: Option<u64>,
    ) -> std::io::Result<()> {
        let name = self.name_iid(name);
        let cat = self.category_iid(cat);
        let args: Vec<(u64, &Arg)> = args
            .iter()
            .map(|a| {
                let key = match a {
                    Arg::U(k, _) | Arg::S(k, _) => *k,
                };
                (self.annotation_iid(key), a)
            })
            .collect();
        self.emit(Some(start), |w| {
            w.message(PKT_TRACK_EVENT, |w| {
                w.uint(TE_TYPE, TYPE_BEGIN);
                w.uint(TE_TRACK, track);
                w.uint(TE_NAME_IID, name);
                w.uint(TE_CATEGORY_IIDS, cat);
                for (iid, a) in &args {
                    w.message(TE_DEBUG, |w| {
                        w.uint(DA_NAME_IID, *iid);
                        match a {
                            Arg::U(_, v) => w.uint(DA_UINT, *v),
                            Arg::S(_, v) => w.string(DA_STRING, v),
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
        self.emit(Some(end.max(start)), |w| {
            w.message(PKT_TRACK_EVENT, |w| {
                w.uint(TE_TYPE, TYPE_END);
                w.uint(TE_TRACK, track);
            })
        })?;
        self.counts.slices += 1;
        self.counts.flows += flow.is_some() as u64;
        Ok(())
    }

    fn instant(&mut self, track: u64, ts: u64, name: &str, cat: &'static str) -> std::io::Result<()> {
        let name = self.name_iid(name);
        let cat = self.category_iid(cat);
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

fn process_label(p: &Process) -> String {
    let cmd = if p.name.is_empty() { p.info.cmdline.join(" ") } else { p.name.clone() };
    let mut label = format!("{cmd} (pid {})", p.info.pid);
    if let Some(rank) = p.rank {
        label.push_str(&format!(" rank {rank}"));
    }
    label
}

fn flow_id(pid: u32, correlation: u32) -> u64 {
    (pid as u64) << 32 | correlation as u64
}

fn is_device_work(k: Option<EventKind>) -> bool {
    matches!(k, Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset))
}

/// Writes `trace` to `out` as a Perfetto protobuf trace.
pub fn export<W: Write>(trace: &Trace, out: W) -> std::io::Result<ExportCounts> {
    let mut x = Exporter {
        out,
        w: Writer::default(),
        first: true,
        names: HashMap::new(),
        categories: HashMap::new(),
        annotations: HashMap::new(),
        tracks: HashMap::new(),
        counts: ExportCounts::default(),
        new_names: Vec::new(),
        new_categories: Vec::new(),
        new_annotations: Vec::new(),
    };
    for (&pid, p) in &trace.processes {
        export_process(&mut x, pid, p)?;
    }
    x.out.flush()?;
    Ok(x.counts)
}

fn export_process<W: Write>(x: &mut Exporter<W>, pid: u32, p: &Process) -> std::io::Result<()> {
    x.track(TrackKey::Process(pid), p, &|| process_label(p))?;
    let thread_names: HashMap<u32, &str> = p
        .events
        .iter()
        .filter(|e| e.kind() == Some(EventKind::ThreadName))
        .map(|e| (e.a as u32, p.string(e.name)))
        .collect();
    // A flow needs both ends: a launch with device work, device work with a recorded launch.
    let launched: HashSet<u32> =
        p.events.iter().filter(|e| is_device_work(e.kind()) && e.correlation != 0).map(|e| e.correlation).collect();
    let api: HashSet<u32> = p
        .events
        .iter()
        .filter(|e| e.kind() == Some(EventKind::Api) && e.correlation != 0)
        .map(|e| e.correlation)
        .collect();
    let mut stacks: HashMap<(u32, u64), Vec<(u64, u32)>> = HashMap::new();
    let mut open: HashMap<u64, (u64, u32, u64, u32)> = HashMap::new();
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut device_bytes: i64 = 0;
    let mut flows_ended: HashSet<u32> = HashSet::new();
    let thread = |x: &mut Exporter<W>, tid: u32| {
        x.track(TrackKey::Thread(pid, tid), p, &|| {
            thread_names.get(&tid).map_or_else(|| format!("thread {tid}"), |n| n.to_string())
        })
    };
    for e in &p.events {
        let name = p.string(e.name);
        match e.kind() {
            Some(EventKind::Api) => {
                let track = thread(x, e.tid)?;
                let flow =
                    (e.correlation != 0 && launched.contains(&e.correlation)).then(|| flow_id(pid, e.correlation));
                let cat = if e.sub == API_DRIVER { "cuda_driver" } else { "cuda_runtime" };
                let args = [Arg::U("correlation", e.correlation as u64), Arg::U("cbid", e.a), Arg::U("return", e.b)];
                x.slice(track, e.start, e.end, name, cat, &args, flow, None)?;
            }
            Some(k @ (EventKind::Kernel | EventKind::Memcpy | EventKind::Memset)) => {
                let track = x.track(TrackKey::Stream(pid, e.device, e.stream), p, &|| {
                    format!("GPU {} stream {}", e.device, e.stream)
                })?;
                // One flow per launch: a second device op with the same correlation does not re-terminate it.
                let term = (e.correlation != 0 && api.contains(&e.correlation) && flows_ended.insert(e.correlation))
                    .then(|| flow_id(pid, e.correlation));
                let corr = Arg::U("correlation", e.correlation as u64);
                match k {
                    EventKind::Kernel => {
                        let c = LaunchConfig::unpack(e.a, e.b, e.c);
                        let (grid, block) = (format!("{:?}", c.grid), format!("{:?}", c.block));
                        let args = [
                            Arg::S("grid", &grid),
                            Arg::S("block", &block),
                            Arg::U("registers per thread", c.registers as u64),
                            Arg::U("static shared memory", c.static_shared as u64),
                            Arg::U("dynamic shared memory", c.dynamic_shared as u64),
                            corr,
                        ];
                        x.slice(track, e.start, e.end, name, "kernel", &args, None, term)?;
                    }
                    EventKind::Memcpy => {
                        let (src, dst) = (names::memory_kind(e.b as u8), names::memory_kind((e.b >> 8) as u8));
                        let label = format!("Memcpy {} ({src} -> {dst})", names::memcpy_kind(e.sub));
                        let args = [Arg::U("bytes", e.a), Arg::S("source", src), Arg::S("destination", dst), corr];
                        x.slice(track, e.start, e.end, &label, "gpu_memcpy", &args, None, term)?;
                        let bw =
                            x.track(TrackKey::Counter(pid, "bandwidth"), p, &|| "Memcpy bandwidth (GB/s)".into())?;
                        let gbps = if e.duration() == 0 { 0.0 } else { e.a as f64 / e.duration() as f64 };
                        x.counter(bw, e.start, Counter::Double(gbps))?;
                        x.counter(bw, e.end.max(e.start), Counter::Double(0.0))?;
                    }
                    _ => {
                        let memory = names::memory_kind(e.sub);
                        let label = format!("Memset ({memory})");
                        x.slice(
                            track,
                            e.start,
                            e.end,
                            &label,
                            "gpu_memset",
                            &[Arg::U("bytes", e.a), corr],
                            None,
                            term,
                        )?;
                    }
                }
            }
            Some(EventKind::Range) => {
                let domain = p.string(e.c as u32);
                let track = if e.flags & FLAG_DEVICE != 0 {
                    x.track(TrackKey::Stream(pid, e.device, e.stream), p, &|| {
                        format!("GPU {} stream {}", e.device, e.stream)
                    })?
                } else {
                    thread(x, e.tid)?
                };
                x.slice(track, e.start, e.end, name, "range", &[Arg::S("domain", domain)], None, None)?;
            }
            Some(EventKind::NvtxPush) => stacks.entry((e.tid, e.c)).or_default().push((e.start, e.name)),
            Some(EventKind::NvtxPop) => {
                if let Some((start, n)) = stacks.get_mut(&(e.tid, e.c)).and_then(Vec::pop) {
                    let track = thread(x, e.tid)?;
                    let domain = if e.c == 0 { "default" } else { p.string(e.c as u32) };
                    x.slice(track, start, e.start, p.string(n), "nvtx", &[Arg::S("domain", domain)], None, None)?;
                }
            }
            Some(EventKind::NvtxStart) => {
                open.insert(e.a, (e.start, e.name, e.c, e.tid));
            }
            Some(EventKind::NvtxEnd) => {
                if let Some((start, n, domain, _)) = open.remove(&e.a) {
                    // Start/end ranges may overlap: one async track per range name keeps slices nested.
                    let track = x.track(TrackKey::Async(pid, n), p, &|| format!("NVTX {}", p.string(n)))?;
                    let domain = if domain == 0 { "default" } else { p.string(domain as u32) };
                    x.slice(track, start, e.start, p.string(n), "nvtx", &[Arg::S("domain", domain)], None, None)?;
                }
            }
            Some(EventKind::NvtxMark) => {
                let track = thread(x, e.tid)?;
                x.instant(track, e.start, name, "nvtx")?;
            }
            Some(EventKind::Alloc | EventKind::Free) => {
                if !MemKind::from_u8(e.sub).is_none_or(MemKind::is_device) {
                    continue;
                }
                if e.kind() == Some(EventKind::Alloc) {
                    live.insert(e.a, e.b);
                    device_bytes += e.b as i64;
                } else {
                    device_bytes -= live.remove(&e.a).unwrap_or(0) as i64;
                }
                let track = x.track(TrackKey::Counter(pid, "memory"), p, &|| "Device memory in use (bytes)".into())?;
                x.counter(track, e.start, Counter::Int(device_bytes))?;
            }
            Some(EventKind::Sync) => {
                let track = x.track(TrackKey::Async(pid, u32::MAX), p, &|| "CUDA synchronization".into())?;
                x.slice(
                    track,
                    e.start,
                    e.end,
                    names::sync_kind(e.sub),
                    "sync",
                    &[Arg::U("stream", e.stream as u64)],
                    None,
                    None,
                )?;
            }
            _ => {}
        }
    }
    Ok(())
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
