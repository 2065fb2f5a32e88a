//! Chrome trace JSON in the schema torch.profiler (Kineto) writes, so that Holistic Trace Analysis and
//! TensorBoard's profiler plugin read it as they read a torch.profiler trace: categories `kernel`, `gpu_memcpy`,
//! `gpu_memset`, `cuda_runtime`, `cuda_driver`, `user_annotation` (and `gpu_user_annotation`), `ac2g` flows, GPU
//! events in pid = device / tid = stream (with several processes, a pid per process and device: see
//! `ProcessOut::gpu_pid`), args `correlation`, `stream`, `device`, `grid`, `block`, `registers per
//! thread`, `shared memory`, plus `deviceProperties` and `distributedInfo`.
//!
//! Streamed from an [`EventSource`] in time order and written text by text (no JSON values are built), so memory
//! stays bounded by per-process state (open NVTX ranges, live allocations, launches whose work has not appeared).
//! `deviceProperties` follows `traceEvents`, as devices are known once the events have gone by; JSON readers do
//! not care about key order. Timestamps are microseconds with three decimals printed from integer nanoseconds, so
//! nothing is rounded.

use cuflight_format::view::GraphNode;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::launches::LaunchJoin;
use cuflight_trace::model::source::EventSource;
use cuflight_trace::model::trace::{Process, TraceError};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write;

mod args;
mod json_text;
mod records;
use args::{external_id, kernel, PayloadArg};
pub use json_text::us;
use json_text::{push_u64, push_us, Js, Out, Us, OUTPUT_CHUNK};

/// What the export learns across processes as events go by.
#[derive(Default)]
struct Seen {
    /// Devices that ran work (a GPU "process" each): (its pid in the JSON, device, process key).
    gpu_pids: BTreeSet<(u64, u32, u32)>,
    /// `deviceProperties` entries, per process.
    device_json: BTreeMap<u32, Vec<String>>,
    /// Device ordinal → (compute capability, SM count), for the occupancy figures on kernels. Device events
    /// carry time 0, so they go by before any kernel.
    gpus: FxHashMap<u32, ((u32, u32), u64)>,
    /// The CUDA driver's version the devices carry (0 unknown).
    driver_version: u32,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC from the first clock pair: what the written times count from.
    realtime_offset: Option<i64>,
}

/// A GPU op held back for one event, with its External id and, for a communication kernel, its collective.
type Held = (RawEvent, u64, Option<cuflight_trace::model::collectives::Collective>);

/// What one process needs while its events stream by.
#[derive(Default)]
struct ProcessOut {
    ranges: cuflight_trace::model::ranges::Pairer,
    memory: cuflight_trace::model::memory::LiveMemory,
    launches: LaunchJoin,
    /// A kernel, copy or memset held back for one event: the agent records a graph node's
    /// [`EventKind::GraphNode`] right after it (same start, same correlation), and its graph ids belong in its
    /// args. A kernel's External id is taken (and its flow written) when it is held; a copy's when it is written.
    held: Option<Held>,
    /// Added to correlation ids to make flow ids: correlation ids are per process, so with several processes each
    /// gets its own range (its index + 1, shifted past 32 bits; below 2^53, so JSON readers keep it exact). A
    /// single process keeps the bare correlation id, as Kineto writes it.
    flow_base: u64,
    stacks: cuflight_trace::model::pystacks::StackJoin,
    /// The last "Python id" given to a `python_function` event.
    python_ids: u64,
}

impl ProcessOut {
    /// The JSON pid of a device's "process": Kineto's, the device ordinal, with one process in the trace; with
    /// several (ranks sharing a GPU, or one job's hosts merged, each with its GPU 0), one per process and device,
    /// above any OS pid (the process's flow base plus the ordinal), named "GPU d (rank R ... pid P)".
    fn gpu_pid(&self, device: u32) -> u64 {
        self.flow_base + device as u64
    }
}

/// Writes the trace of `source` as Kineto-style JSON; returns the number of trace events written.
pub fn export<W: Write>(source: &mut EventSource, w: W) -> Result<u64, TraceError> {
    let io = TraceError::Output;
    let comm = crate::collectives::Collectives::of(source)?;
    let mut out = Out { w, buf: Vec::with_capacity(OUTPUT_CHUNK + 4096), first: true, events: 0 };
    out.w.write_all(b"{\"schemaVersion\": 1,\n").map_err(io)?;
    let processes = &source.processes;
    // distributedInfo is the file's one rank, as Kineto writes it; a trace of several ranks labels each process
    // instead ("process_labels", which Perfetto shows and cuflight's importer reads back).
    let ranks: BTreeSet<u32> = processes.values().filter_map(|p| p.rank).collect();
    if let Some(&rank) = ranks.first().filter(|_| ranks.len() == 1) {
        let world = processes.values().map(|p| p.info.world_size).max().unwrap_or(0).max(rank + 1);
        writeln!(out.w, "\"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {rank}, \"world_size\": {world}}},")
            .map_err(io)?;
    }
    out.w.write_all(b"\"traceEvents\": [\n").map_err(io)?;
    for (&pid, p) in processes {
        let label = if p.name.is_empty() { p.info.cmdline.join(" ") } else { p.name.clone() };
        out.metadata("process_name", pid as u64, 0, &label).map_err(io)?;
        // A capture's, with what it traced: its importer then knows the trace holds every op since the capture
        // was armed, and reads it as the capture (a wait on work missing from the trace means something else in a
        // capture than in a sampled torch.profiler trace; no rounding to HTA's whole µs).
        if !p.imported {
            out.metadata("cuflight_capture", pid as u64, 0, &p.info.traced).map_err(io)?;
        }
        if let Some(rank) = p.rank.filter(|_| ranks.len() > 1) {
            let labels = format!("rank {rank}");
            write!(
                out.next().map_err(io)?,
                r#"{{"ph":"M","name":"process_labels","pid":{pid},"tid":0,"args":{{"labels":{}}}}}"#,
                Js(&labels)
            )
            .map_err(io)?;
        }
    }
    let mut state: FxHashMap<u32, ProcessOut> = FxHashMap::default();
    let mut seen = Seen::default();
    let flow_bases: FxHashMap<u32, u64> = match processes.len() {
        1 => processes.keys().map(|&k| (k, 0)).collect(),
        _ => processes.keys().enumerate().map(|(i, &k)| (k, (i as u64 + 1) << 32)).collect(),
    };
    let mut failed = None;
    source.for_each(|key, p, e| {
        if failed.is_some() {
            return;
        }
        let st = state.entry(key).or_insert_with(|| ProcessOut {
            flow_base: flow_bases.get(&key).copied().unwrap_or(0),
            ..Default::default()
        });
        if let Err(err) = event(&mut out, (key, p), e, st, &mut seen, &comm) {
            failed = Some(err);
        }
    })?;
    if let Some(e) = failed {
        return Err(io(e));
    }
    let mut rest = || -> std::io::Result<()> {
        for (&pid, st) in state.iter_mut() {
            if let Some(held) = st.held.take() {
                write_held(&mut out, &source.processes[&pid], held, None, st, &seen, pid as u64)?;
            }
        }
        for &(gpu_pid, device, key) in &seen.gpu_pids {
            let name = match source.processes.get(&key).filter(|_| gpu_pid != device as u64) {
                Some(p) => format!("GPU {device} ({})", p.who()),
                None => format!("GPU {device}"),
            };
            out.metadata("process_name", gpu_pid, 0, &name)?;
        }
        out.drain()?;
        out.w.write_all(b"\n],\n\"deviceProperties\": [")?;
        for (i, d) in seen.device_json.values().flatten().enumerate() {
            out.w.write_all(if i == 0 { b"\n" } else { b",\n" })?;
            out.w.write_all(d.as_bytes())?;
        }
        out.w.write_all(b"\n]")?;
        run_metadata(&mut out.w, &source.processes, &seen)?;
        out.w.write_all(b"}\n")?;
        out.w.flush()
    };
    rest().map_err(io)?;
    Ok(out.events)
}

/// What torch.profiler writes of the run beside its events, where the trace knows it: the CUDA driver and CUPTI
/// versions, the host (one for the whole file), and `baseTimeNanoseconds`, the epoch ns the timestamps count
/// from: an imported trace's own, or for a recording (CLOCK_MONOTONIC) of one host the realtime offset of a clock
/// pair (HTA adds it to `ts` for wall time).
fn run_metadata<W: Write>(w: &mut W, processes: &BTreeMap<u32, Process>, seen: &Seen) -> std::io::Result<()> {
    if seen.driver_version != 0 {
        write!(w, ",\n\"cuda_driver_version\": {}", seen.driver_version)?;
    }
    if let Some(v) = processes.values().map(|p| p.cuda_runtime_version).find(|&v| v != 0) {
        write!(w, ",\n\"cuda_runtime_version\": {v}")?;
    }
    if let Some(v) = processes.values().map(|p| p.info.cupti_version).find(|&v| v != 0) {
        write!(w, ",\n\"cupti_version\": {v}")?;
    }
    let hosts: BTreeSet<&str> = processes.values().map(|p| p.info.host.as_str()).collect();
    let one_host = hosts.first().filter(|h| hosts.len() == 1 && !h.is_empty());
    if let Some(host) = one_host {
        write!(w, ",\n\"hostname\": {}", Js(host))?;
    }
    // An imported torch.profiler trace keeps its own base (its times are written as they were read).
    let bases: BTreeSet<u64> = processes.values().map(|p| p.epoch_base_ns).collect();
    let base = match bases.first() {
        Some(&b) if bases.len() == 1 && b != 0 => Some(b as i64),
        _ => seen.realtime_offset.filter(|&o| o > 0 && one_host.is_some() && bases.iter().all(|&b| b == 0)),
    };
    if let Some(base) = base {
        write!(w, ",\n\"baseTimeNanoseconds\": {base}")?;
    }
    Ok(())
}

/// A call's Python stack as torch.profiler writes one: `python_function` events, outermost first, each the
/// parent of the next ("Python id", "Python parent id"), named `file(line): function`, spanning the call (so the
/// call nests in its innermost frame, as an operator's calls do in torch's traces).
fn python_functions<W: Write>(
    out: &mut Out<W>,
    p: &Process,
    pid: u64,
    call: &RawEvent,
    st: &mut ProcessOut,
    frames: &[cuflight_trace::model::pystacks::PyFrame],
    borrowed: bool,
) -> std::io::Result<()> {
    let mut parent = None;
    for f in frames.iter().rev() {
        st.python_ids += 1;
        let id = st.python_ids;
        let name = format!("{}({}): {}", python_file(p.string(f.file)), f.line, p.string(f.func));
        out.complete_with("python_function", &name, pid, call.tid as u64, call.start, call.end, |b| {
            b.extend_from_slice(br#""Python parent id":"#);
            match parent {
                Some(id) => push_u64(b, id),
                None => b.extend_from_slice(b"null"),
            }
            b.extend_from_slice(br#","Python id":"#);
            push_u64(b, id);
            if borrowed {
                // Drawn on the calling thread, which ran no Python: the frames are where the main thread was.
                b.extend_from_slice(br#","Python thread":"main (this thread runs no Python)""#);
            }
        })?;
        parent = Some(id);
    }
    Ok(())
}

/// A file as torch.profiler names it: relative to the installed packages or the standard library, else whole.
fn python_file(file: &str) -> &str {
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some(at) = file.rfind(marker) {
            return &file[at + marker.len()..];
        }
    }
    if let Some(at) = file.find("/lib/python3.") {
        if let Some(slash) = file[at + 13..].find('/') {
            return &file[at + 13 + slash + 1..];
        }
    }
    file
}

/// Writes a held kernel, copy or memset with its graph node, if the next event was that.
fn write_held<W: Write>(
    out: &mut Out<W>,
    p: &Process,
    (k, external, collective): Held,
    node: Option<GraphNode>,
    st: &mut ProcessOut,
    seen: &Seen,
    pid: u64,
) -> std::io::Result<()> {
    match k.kind() {
        Some(EventKind::Memcpy) => records::memcpy(out, &k, st, pid, node),
        Some(EventKind::Memset) => records::memset(out, &k, st, pid, node),
        _ => kernel(out, (p, &k, collective), node, external, seen.gpus.get(&k.device), st.gpu_pid(k.device)),
    }
}

fn event<W: Write>(
    out: &mut Out<W>,
    (key, p): (u32, &Process),
    e: &RawEvent,
    st: &mut ProcessOut,
    seen: &mut Seen,
    comm: &crate::collectives::Collectives,
) -> std::io::Result<()> {
    let pid = key as u64;
    if let Some(held) = st.held.take() {
        let k = held.0;
        let node = (e.kind() == Some(EventKind::GraphNode) && e.correlation == k.correlation && e.start == k.start)
            .then(|| e.as_graph_node());
        write_held(out, p, held, node, st, seen, pid)?;
        if node.is_some() {
            return Ok(());
        }
    }
    let gpu_pids = &mut seen.gpu_pids;
    if let Some(r) = st.ranges.feed(e) {
        let (domain, payload) = (Js(p.nvtx_domain(r.domain)), PayloadArg(r.payload));
        let (name, tid) = (p.string(r.name), r.tid as u64);
        let args = format_args!(r#""domain":{domain}{payload}"#);
        return out.complete("user_annotation", name, pid, tid, r.start, r.end, args);
    }
    let name = p.string(e.name);
    if e.kind() == Some(EventKind::PyFrame) && e.as_py_frame().imported {
        // Joined at import from the trace's own python_function events, which are written as they were.
        return Ok(());
    }
    let mut stack = None;
    st.stacks.feed_marked(e, |_, frames, borrowed| stack = Some((frames.to_vec(), borrowed)));
    if let Some((frames, borrowed)) = stack {
        python_functions(out, p, pid, e, st, &frames, borrowed)?;
    }
    match e.kind() {
        Some(EventKind::Api) => records::api_call(out, p, e, st, pid, name)?,
        Some(EventKind::Kernel) => {
            // Written with the next event of its process, which may be its graph node.
            gpu_pids.insert((st.gpu_pid(e.device), e.device, key));
            let joined = st.launches.work(e);
            st.held = Some((*e, external_id(e, joined), comm.of_kernel(key, p, e, joined)));
            return flow(out, pid, st, e, joined);
        }
        Some(EventKind::Memcpy | EventKind::Memset) => {
            // Written with the next event of its process, which may be its graph node.
            gpu_pids.insert((st.gpu_pid(e.device), e.device, key));
            st.held = Some((*e, 0, None));
        }
        Some(EventKind::Range) => {
            if e.as_range().on_device {
                gpu_pids.insert((st.gpu_pid(e.device), e.device, key));
            }
            records::range(out, p, e, st, (pid, name))?;
        }
        Some(EventKind::NvtxMark) if e.as_nvtx().global => {
            // A trace-wide instant, written as Kineto writes it (viewers draw it across the whole timeline).
            write!(
                out.next()?,
                r#"{{"ph":"i","s":"g","name":{},"pid":{pid},"tid":0,"ts":{}}}"#,
                Js(name),
                Us(e.start)
            )?;
        }
        Some(EventKind::NvtxMark) => {
            let (domain, payload) =
                (Js(p.nvtx_domain(e.as_nvtx().domain)), PayloadArg(cuflight_trace::model::ranges::Payload::of(e)));
            write!(
                out.next()?,
                r#"{{"ph":"i","s":"t","cat":"user_annotation","name":{},"pid":{pid},"tid":{},"ts":{},"args":{{"domain":{domain}{payload}}}}}"#,
                Js(name),
                e.tid,
                Us(e.start)
            )?;
        }
        Some(EventKind::GpuSample) => {
            // A counter event ("ph":"C": the trace event format's counters, which Perfetto and chrome://tracing draw
            // as a track of the GPU's process), one series per counter the sample carries.
            let sample = e.as_gpu_sample();
            let series: Vec<String> = [
                ("SM active (%)", sample.sm_active),
                ("Tensor active (%)", sample.tensor_active),
                ("DRAM throughput (% of peak)", sample.dram()),
            ]
            .iter()
            .filter_map(|(label, v)| v.map(|v| format!("{}:{:.1}", Js(label), v * 100.0)))
            .collect();
            if !series.is_empty() {
                write!(
                    out.next()?,
                    r#"{{"ph":"C","name":"GPU {} counters","pid":{},"ts":{},"args":{{{}}}}}"#,
                    e.device,
                    st.gpu_pid(e.device),
                    Us(e.start),
                    series.join(",")
                )?;
            }
        }
        Some(EventKind::Alloc | EventKind::Free) => records::memory(out, e, st, pid)?,
        Some(EventKind::Sync) => records::sync(out, e, st)?,
        Some(EventKind::ThreadName) => out.metadata("thread_name", pid, e.named_thread(), name)?,
        Some(EventKind::ClockSync) if seen.realtime_offset.is_none() => {
            seen.realtime_offset = e.as_clock_pair().realtime_offset();
        }
        Some(EventKind::Device) => records::device(e, name, key, seen),
        _ => {}
    }
    Ok(())
}

/// The `ac2g` flow from the call that launched `e` to `e`, when `e` is that call's first work.
fn flow<W: Write>(
    out: &mut Out<W>,
    pid: u64,
    st: &mut ProcessOut,
    e: &RawEvent,
    joined: Option<cuflight_trace::model::launches::Joined>,
) -> std::io::Result<()> {
    let Some(launch) = joined.filter(|w| w.first).map(|w| w.call) else { return Ok(()) };
    let corr = st.flow_base | e.correlation as u64;
    let b = out.next()?;
    b.extend_from_slice(br#"{"ph":"s","id":"#);
    push_u64(b, corr);
    b.extend_from_slice(br#","pid":"#);
    push_u64(b, pid);
    b.extend_from_slice(br#","tid":"#);
    push_u64(b, launch.tid as u64);
    b.extend_from_slice(br#","ts":"#);
    push_us(b, launch.start);
    b.extend_from_slice(br#","cat":"ac2g","name":"ac2g"}"#);
    let b = out.next()?;
    b.extend_from_slice(br#"{"ph":"f","id":"#);
    push_u64(b, corr);
    b.extend_from_slice(br#","pid":"#);
    push_u64(b, st.gpu_pid(e.device));
    b.extend_from_slice(br#","tid":"#);
    push_u64(b, e.stream as u64);
    b.extend_from_slice(br#","ts":"#);
    push_us(b, e.start);
    b.extend_from_slice(br#","cat":"ac2g","name":"ac2g","bp":"e"}"#);
    Ok(())
}

/// "pageable" → "Pageable", as Kineto names memory kinds.
fn title(s: &str) -> String {
    let mut c = s.chars();
    c.next().map_or_else(String::new, |f| f.to_ascii_uppercase().to_string() + c.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_are_exact() {
        assert_eq!(us(1712195495506161200), "1712195495506161.200");
        assert_eq!(us(5), "0.005");
        assert_eq!(title("pinned"), "Pinned");
    }
}
