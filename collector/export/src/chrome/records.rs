//! The Chrome JSON of each kind of record a process streams: API calls, copies and memsets, ranges, memory
//! instants, synchronisations and devices (kernels are in `args`, written with their graph node).

use super::args::{external_id, graph_args, ExternalArg, OperatorArgs, WorkArgs, EXTERNAL_FROM_CORRELATION};
use super::json_text::{push_u64, Js, Out, Us};
use super::{flow, title, ProcessOut, Seen};
use cuflight_format::view::GraphNode;
use cuflight_format::RawEvent;
use cuflight_trace::model::cuda_errors::error_name;
use cuflight_trace::model::cupti_labels;
use cuflight_trace::model::trace::Process;
use std::io::Write;

/// A runtime or driver call on its thread.
pub(super) fn api_call<W: Write>(
    out: &mut Out<W>,
    p: &Process,
    e: &RawEvent,
    st: &mut ProcessOut,
    pid: u64,
    name: &str,
) -> std::io::Result<()> {
    let corr = e.correlation;
    let call = e.as_api();
    let cat = if call.runtime { "cuda_runtime" } else { "cuda_driver" };
    // A call that queues device work shares its External id with that work (see `external_id`).
    let launches = st.launches.api(p, e).is_some();
    out.complete_with(cat, name, pid, e.tid as u64, e.start, e.end, |b| {
        b.extend_from_slice(br#""correlation":"#);
        push_u64(b, corr as u64);
        b.extend_from_slice(br#","cbid":"#);
        push_u64(b, call.cbid as u64);
        if call.failed() {
            // cuflight's: the return code of a call that failed, and CUDA's name for it.
            b.extend_from_slice(br#","return":"#);
            push_u64(b, call.result);
            let name = error_name(call.runtime, call.code());
            b.extend_from_slice(format!(r#","error":{}"#, Js(&name)).as_bytes());
        }
        if launches || call.external != 0 {
            b.extend_from_slice(br#","External id":"#);
            let external = if call.external != 0 { call.external } else { EXTERNAL_FROM_CORRELATION + corr as u64 };
            push_u64(b, external);
        }
    })?;
    Ok(())
}

/// A copy on its device's stream (with its graph node, if it ran as one), and its flow from the launching call.
pub(super) fn memcpy<W: Write>(
    out: &mut Out<W>,
    e: &RawEvent,
    st: &mut ProcessOut,
    pid: u64,
    node: Option<GraphNode>,
) -> std::io::Result<()> {
    let copy = e.as_copy();
    let (src, dst) = (cupti_labels::memory_kind(copy.src), cupti_labels::memory_kind(copy.dst));
    let label = format!("Memcpy {} ({} -> {})", cupti_labels::memcpy_kind(copy.kind), title(src), title(dst));
    let gbps = if e.duration() == 0 { 0.0 } else { copy.bytes as f64 / e.duration() as f64 };
    // `async` is cuflight's addition, ignored by Kineto tools.
    let extra = if copy.is_async { r#","async":true"# } else { "" };
    let gbps = serde_json::Number::from_f64(gbps).map_or("0".into(), |n| n.to_string());
    let graph = graph_args(node);
    let args = format_args!(r#","bytes":{},"memory bandwidth (GB/s)":{gbps}{extra}{graph}"#, copy.bytes);
    device_op(out, e, st, pid, ("gpu_memcpy", &label), args)
}

/// A memset on its device's stream (with its graph node, if it ran as one), and its flow from the launching call.
pub(super) fn memset<W: Write>(
    out: &mut Out<W>,
    e: &RawEvent,
    st: &mut ProcessOut,
    pid: u64,
    node: Option<GraphNode>,
) -> std::io::Result<()> {
    let memset = e.as_memset();
    let label = format!("Memset ({})", title(cupti_labels::memory_kind(memset.memory)));
    let graph = graph_args(node);
    device_op(out, e, st, pid, ("gpu_memset", &label), format_args!(r#","bytes":{}{graph}"#, memset.bytes))
}

/// A copy's or memset's slice on its device's stream (its work arguments and External id, then `rest`), and its
/// flow from the launching call.
fn device_op<W: Write>(
    out: &mut Out<W>,
    e: &RawEvent,
    st: &mut ProcessOut,
    pid: u64,
    (cat, label): (&str, &str),
    rest: std::fmt::Arguments<'_>,
) -> std::io::Result<()> {
    let joined = st.launches.work(e);
    let (device_pid, stream) = (st.gpu_pid(e.device), e.stream as u64);
    let args = format_args!(r#"{},"External id":{}{rest}"#, WorkArgs(e), external_id(e, joined));
    out.complete(cat, label, device_pid, stream, e.start, e.end, args)?;
    flow(out, pid, st, e, joined)
}

/// An imported range: a GPU user annotation on its stream, or a host operator or annotation on its thread.
pub(super) fn range<W: Write>(
    out: &mut Out<W>,
    p: &Process,
    e: &RawEvent,
    st: &ProcessOut,
    (pid, name): (u64, &str),
) -> std::io::Result<()> {
    let range = e.as_range();
    if range.on_device {
        let (d, s) = (st.gpu_pid(e.device), e.stream as u64);
        out.complete("gpu_user_annotation", name, d, s, e.start, e.end, format_args!(""))?;
    } else {
        let domain = p.string(range.category);
        let cat = if domain.is_empty() { "user_annotation" } else { domain };
        let external = ExternalArg(range.external);
        let op = OperatorArgs {
            text: p.string(range.operator_text),
            sequence: range.sequence_plus_one.checked_sub(1),
            after: range.external != 0,
        };
        out.complete(cat, name, pid, e.tid as u64, e.start, e.end, format_args!("{external}{op}"))?;
    }
    Ok(())
}

/// torch.profiler's `[memory]` instant of an allocation or free.
pub(super) fn memory<W: Write>(out: &mut Out<W>, e: &RawEvent, st: &mut ProcessOut, pid: u64) -> std::io::Result<()> {
    // torch.profiler's memory events: Bytes is negative for a free; Device Type 1 = CUDA, 0 = CPU.
    let Some(change) = st.memory.apply(0, e) else { return Ok(()) };
    // `pinned` is cuflight's addition: pinned host memory, not the CPU allocator.
    let pinned = if change.device { "" } else { r#","pinned":true"# };
    write!(
        out.next()?,
        r#"{{"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]","pid":{pid},"tid":{},"ts":{},"args":{{"Addr":{},"Bytes":{},"Device Type":{},"Device Id":{}{pinned}}}}}"#,
        e.tid,
        Us(e.start),
        e.as_mem_op().address,
        change.delta,
        change.device as u8,
        e.device
    )?;
    Ok(())
}

/// A CUPTI synchronisation record on its stream.
pub(super) fn sync<W: Write>(out: &mut Out<W>, e: &RawEvent, st: &ProcessOut) -> std::io::Result<()> {
    let corr = e.correlation;
    let kind = cupti_labels::sync_kind(e.as_sync().kind);
    out.complete(
        "cuda_sync",
        kind,
        st.gpu_pid(e.device),
        e.stream as u64,
        e.start,
        e.end,
        format_args!(
            r#""cuda_sync_kind":{},"stream":{},"correlation":{corr},"device":{}"#,
            Js(kind),
            // CUPTI's invalid stream (a context synchronisation) is Kineto's -1.
            if e.stream == u32::MAX { -1 } else { e.stream as i64 },
            e.device
        ),
    )?;
    Ok(())
}

/// A device: its properties for the trace's `deviceProperties`, and what the occupancy figures need.
pub(super) fn device(e: &RawEvent, name: &str, key: u32, seen: &mut Seen) {
    let d = e.as_device();
    seen.driver_version = seen.driver_version.max(d.driver_version);
    let (major, minor) = d.compute_capability;
    // Devices are the machine's: every process of one host lists the same ones.
    seen.gpus.insert(e.device, ((major, minor), d.multiprocessors));
    seen.device_json.entry(key).or_default().push(format!(
        r#"{{"id":{},"name":{},"totalGlobalMem":{},"computeMajor":{major},"computeMinor":{minor},"numSms":{}}}"#,
        e.device,
        Js(name),
        d.memory_bytes,
        d.multiprocessors
    ));
}
