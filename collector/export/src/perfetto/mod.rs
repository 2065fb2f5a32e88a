//! Perfetto export: native protobuf TrackEvent (`perfetto/protos/perfetto/trace/*.proto`), written packet by
//! packet as it is produced.
//!
//! Tracks: one process track per profiled process (command, pid, rank), thread tracks with CUDA API calls and
//! NVTX ranges, one track per GPU stream (device and stream in the name) with kernels, copies and memsets, async
//! tracks for start/end ranges, and counter tracks for device memory in use, memcpy bandwidth and the device counters
//! sampled with `record --gpu-metrics` (SM, Tensor Core and DRAM activity per GPU). A flow joins
//! each API call to the device work it launched (same correlation id). Names, categories and debug-annotation
//! names are interned on one packet sequence.

use super::protobuf::Writer;
use cuflight_format::EventKind;
use cuflight_trace::model::cupti_labels;
use cuflight_trace::model::source::EventSource;
use rustc_hash::FxHashMap as HashMap;
use std::io::Write;

mod lanes;
mod process;
mod proto;
use process::ProcessState;
use proto::*;

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

/// Categories and debug-annotation names are a fixed vocabulary, interned once in the first packet (iid =
/// position + 1), so events never look them up.
const CATEGORIES: &[&str] =
    &["cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "range", "nvtx", "sync", "graph"];
const ANNOTATIONS: &[&str] = &[
    "correlation",
    "collective",
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
    "python stack",
    "nodes",
    "error",
];

/// The iid of `name` in `table` (position + 1; 0 when absent). Evaluated at compile time through [`cat!`] and
/// `ann!` calls in constant position, so no event compares strings.
const fn iid(table: &[&str], name: &str) -> u64 {
    cuflight_format::position_in(table, name) as u64
}

/// A category's iid, found at compile time.
macro_rules! cat {
    ($name:literal) => {
        const {
            let i = iid(CATEGORIES, $name);
            assert!(i != 0, "not a category of CATEGORIES");
            i
        }
    };
}
pub(crate) use cat;

/// A debug annotation's iid, found at compile time.
macro_rules! ann {
    ($name:literal) => {
        const {
            let i = iid(ANNOTATIONS, $name);
            assert!(i != 0, "not an annotation of ANNOTATIONS");
            i
        }
    };
}
pub(crate) use ann;

/// A debug annotation: (name iid, value).
enum Arg<'a> {
    U(u64, u64),
    S(u64, &'a str),
    /// A string value interned with `Exporter::dims_iid` or `Exporter::mangled_iid` (launch dimensions and mangled names repeat).
    I(u64, u64),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum TrackKey {
    Process(u32),
    Thread(u32, u32),
    Stream(u32, u32, u32),
    Counter(u32, CounterTrack),
    Async(u32, u32),
    /// Overlap lane `n` of the track with this uuid (see [`lanes`]).
    Lane(u32, u64, u32),
    /// A stream's CUDA graph replays, one slice each (pid, device, stream).
    Replays(u32, u32, u32),
}

impl TrackKey {
    fn pid(self) -> u32 {
        match self {
            TrackKey::Process(pid)
            | TrackKey::Thread(pid, _)
            | TrackKey::Stream(pid, ..)
            | TrackKey::Counter(pid, _)
            | TrackKey::Async(pid, _)
            | TrackKey::Lane(pid, ..)
            | TrackKey::Replays(pid, ..) => pid,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum CounterTrack {
    Memory,
    Bandwidth,
    /// A device counter (`record --gpu-metrics`): device, and which of [`process::GPU_COUNTERS`].
    Gpu(u32, u8),
}

/// Packets are written into one buffer and handed to the output in chunks of about this size.
const OUTPUT_CHUNK: usize = 1 << 20;

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
    /// Interned annotation string values: launch dimensions by value, mangled names by (pid, string id).
    dims_iids: HashMap<u128, u64>,
    mangled_iids: HashMap<(u32, u32), u64>,
    stack_iids: HashMap<String, u64>,
    values: u64,
    /// Interned values a packet must carry, built before the packet.
    new_values: Vec<(u64, String)>,
    /// Overlap lanes by track uuid.
    lanes: Vec<lanes::TrackLanes>,
    /// (pid, name) of every track but process tracks, by uuid: what an overlap lane is named after.
    track_names: HashMap<u64, (u32, String)>,
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
        } else if interned || !self.new_names.is_empty() || !self.new_values.is_empty() {
            SEQ_NEEDS_STATE
        } else {
            0
        };
        let first = flags == SEQ_CLEARED;
        let names = std::mem::take(&mut self.new_names);
        let values = std::mem::take(&mut self.new_values);
        let (cats, anns): (&[&str], &[&str]) = if first { (CATEGORIES, ANNOTATIONS) } else { (&[], &[]) };
        // Each packet is field 1 of the Trace message, written in place into the output buffer.
        self.w.message(TRACE_PACKET, |w| {
            if let Some(ts) = ts {
                w.uint(PKT_TIMESTAMP, ts);
            }
            w.uint(PKT_SEQ_ID, SEQUENCE);
            if flags != 0 {
                w.uint(PKT_SEQ_FLAGS, flags);
            }
            if !names.is_empty() || !values.is_empty() || !cats.is_empty() || !anns.is_empty() {
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
                    for (iid, value) in &values {
                        w.message(ID_ANNOTATION_STRINGS, |w| {
                            w.uint(1, *iid);
                            w.string(2, value);
                        });
                    }
                });
            }
            body(w);
        });
        if self.w.buffered() >= OUTPUT_CHUNK {
            self.flush_buffer()?;
        }
        self.counts.packets += 1;
        Ok(())
    }

    fn new_value(&mut self, text: String) -> u64 {
        self.values += 1;
        self.new_values.push((self.values, text));
        self.values
    }

    /// The interned value of launch dimensions `d`, written `x,y,z`.
    fn dims_iid(&mut self, d: [u32; 3]) -> u64 {
        // One u128 key: an array would hash as a byte slice, which costs more than the rest of the lookup.
        let key = d[0] as u128 | (d[1] as u128) << 32 | (d[2] as u128) << 64;
        if let Some(&iid) = self.dims_iids.get(&key) {
            return iid;
        }
        let mut text = String::new();
        crate::protobuf::dims(&mut text, d);
        let iid = self.new_value(text);
        self.dims_iids.insert(key, iid);
        iid
    }

    /// The interned value of a Python stack's text (stacks repeat: the same lines call again and again).
    fn stack_iid(&mut self, text: String) -> u64 {
        if let Some(&iid) = self.stack_iids.get(&text) {
            return iid;
        }
        let iid = self.new_value(text.clone());
        self.stack_iids.insert(text, iid);
        iid
    }

    /// The interned value of string `id` of process `pid`, the mangled name `text`.
    fn mangled_iid(&mut self, pid: u32, id: u32, text: &str) -> u64 {
        if let Some(&iid) = self.mangled_iids.get(&(pid, id)) {
            return iid;
        }
        let iid = self.new_value(text.to_string());
        self.mangled_iids.insert((pid, id), iid);
        iid
    }

    /// Hands the packets written so far to the output.
    fn flush_buffer(&mut self) -> std::io::Result<()> {
        let out = &mut self.out;
        self.w.drain(|bytes| out.write_all(bytes))
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
    /// `strings` is the process's string table, read only the first time.
    fn id_iid(&mut self, pid: u32, id: u32, strings: &HashMap<u32, String>) -> u64 {
        if let Some(&iid) = self.name_ids.get(&(pid, id)) {
            return iid;
        }
        let iid = self.name_iid(strings.get(&id).map_or("", String::as_str));
        self.name_ids.insert((pid, id), iid);
        iid
    }

    /// The uuid of a track, writing its descriptor the first time.
    fn track(&mut self, key: TrackKey, label: impl FnOnce() -> String) -> std::io::Result<u64> {
        match self.tracks.get(&key) {
            Some(&uuid) => Ok(uuid),
            None => self.new_track(key, label()),
        }
    }

    fn new_track(&mut self, key: TrackKey, name: String) -> std::io::Result<u64> {
        let uuid = self.tracks.len() as u64 + 1;
        self.tracks.insert(key, uuid);
        let parent = match key {
            TrackKey::Process(_) => None,
            TrackKey::Thread(pid, _)
            | TrackKey::Stream(pid, ..)
            | TrackKey::Counter(pid, _)
            | TrackKey::Async(pid, _)
            | TrackKey::Lane(pid, ..)
            | TrackKey::Replays(pid, ..) => {
                let name = self.process_labels.get(&pid).cloned().unwrap_or_else(|| format!("pid {pid}"));
                Some(self.track(TrackKey::Process(pid), || name)?)
            }
        };
        self.counts.tracks += 1;
        if parent.is_some() {
            self.track_names.insert(uuid, (key.pid(), name.clone()));
        }
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
                    TrackKey::Stream(..) | TrackKey::Async(..) | TrackKey::Lane(..) | TrackKey::Replays(..) => {
                        w.string(TD_NAME, &name)
                    }
                }
            })
        })?;
        Ok(uuid)
    }

    /// The track a slice of `track` from `start` to `end` goes on: the track itself, or the first of its overlap
    /// lanes where it nests with what is there.
    fn lane(&mut self, track: u64, start: u64, end: u64) -> std::io::Result<u64> {
        let at = track as usize;
        if self.lanes.len() <= at {
            self.lanes.resize_with(at + 1, Default::default);
        }
        let n = self.lanes[at].place(start, end);
        if n == 0 {
            return Ok(track);
        }
        let (pid, base) = self.track_names.get(&track).cloned().unwrap_or_default();
        self.track(TrackKey::Lane(pid, track, n as u32), || format!("{base} (overlap {n})"))
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
        let track = self.lane(track, start, end.max(start))?;
        self.emit(Some(start), |w| {
            w.message(PKT_TRACK_EVENT, |w| {
                w.uint(TE_TYPE, TYPE_BEGIN);
                w.uint(TE_TRACK, track);
                w.uint(TE_NAME_IID, name);
                w.uint(TE_CATEGORY_IIDS, cat);
                for a in args {
                    w.message(TE_DEBUG, |w| match a {
                        Arg::U(k, v) => {
                            w.uint(DA_NAME_IID, *k);
                            w.uint(DA_UINT, *v);
                        }
                        Arg::S(k, v) => {
                            w.uint(DA_NAME_IID, *k);
                            w.string(DA_STRING, v);
                        }
                        Arg::I(k, v) => {
                            w.uint(DA_NAME_IID, *k);
                            w.uint(DA_STRING_IID, *v);
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
            dims_iids: HashMap::default(),
            mangled_iids: HashMap::default(),
            stack_iids: HashMap::default(),
            values: 0,
            new_values: Vec::new(),
            lanes: Vec::new(),
            track_names: HashMap::default(),
        }
    }
}

/// Writes a trace to `out` as a Perfetto protobuf trace, streamed in time order from `source`: memory stays
/// bounded by the source's open blocks plus per-process state (strings, open ranges, live allocations, launches
/// whose work has not appeared yet), whatever the trace's size and format.
pub fn export<W: Write>(
    source: &mut EventSource,
    out: W,
) -> Result<ExportCounts, cuflight_trace::model::trace::TraceError> {
    let io = cuflight_trace::model::trace::TraceError::Output;
    let comm = crate::collectives::Collectives::of(source)?;
    let mut x = Exporter::new(out);
    let mut states: HashMap<u32, ProcessState> = HashMap::default();
    for (&key, p) in &source.processes {
        x.process_labels.insert(key, p.label());
        let mut st = ProcessState::new(key, p.strings.iter().map(|(k, v)| (*k, v.clone())).collect());
        st.mangled = p.mangled.clone();
        states.insert(key, st);
    }
    let mut failed = None;
    source.for_each(|key, p, e| {
        let Some(st) = states.get_mut(&key).filter(|_| failed.is_none()) else { return };
        if e.kind() == Some(EventKind::ThreadName) {
            st.thread_names.insert(e.named_thread() as u32, e.name);
        }
        if let Err(err) = st.release(&mut x, e.start).and_then(|_| st.event(&mut x, p, e, &comm)) {
            failed = Some(err);
        }
    })?;
    if let Some(e) = failed {
        return Err(io(e));
    }
    let mut keys: Vec<u32> = states.keys().copied().collect();
    keys.sort_unstable();
    for k in keys {
        states.get_mut(&k).expect("listed").release(&mut x, u64::MAX).map_err(io)?;
    }
    x.flush_buffer().map_err(io)?;
    x.out.flush().map_err(io)?;
    Ok(x.counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::view::ApiCall;
    use cuflight_format::RawEvent;
    use cuflight_trace::model::trace::{Process, Trace};

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
            RawEvent {
                correlation: 3,
                name: 1,
                ..RawEvent::api_call(9, 100, 120, ApiCall { runtime: true, cbid: 0, result: 0, external: 0 })
            },
            RawEvent { name: 2, ..device_event(EventKind::Kernel, 130, 3) },
            device_event(EventKind::Memcpy, 150, 0),
        ];
        let mut t = Trace::default();
        t.processes.insert(5, p);
        let mut out = Vec::new();
        let c = export(&mut EventSource::from_trace(t), &mut out).unwrap();
        assert_eq!((c.slices, c.flows, c.counter_values), (3, 1, 2));
        // process, thread, stream, bandwidth counter
        assert_eq!(c.tracks, 4);
        assert!(!out.is_empty());
    }
}
