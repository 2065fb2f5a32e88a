//! The args of the Kineto JSON events that carry the most: kernels (launch configuration, libkineto's occupancy
//! figures, graph ids), device work, and imported operators (External id, input shapes, sequence number).

use super::json_text::push_js;
use super::*;
use cuflight_trace::model::collectives::Collective;

/// An NVTX payload as a trailing `"payload"` arg (cuflight's addition), or nothing.
pub(super) struct PayloadArg(pub(super) Option<cuflight_trace::model::ranges::Payload>);

impl fmt::Display for PayloadArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, r#","payload":{}"#, v.to_json()),
            None => Ok(()),
        }
    }
}

/// [`WorkArgs`] into the buffer.
pub(super) fn work_args(b: &mut Vec<u8>, e: &RawEvent) {
    b.extend_from_slice(br#""device":"#);
    push_u64(b, e.device as u64);
    b.extend_from_slice(br#","context":1,"stream":"#);
    push_u64(b, e.stream as u64);
    b.extend_from_slice(br#","correlation":"#);
    push_u64(b, e.correlation as u64);
}

/// The args every piece of device work carries.
pub(super) struct WorkArgs<'a>(pub(super) &'a RawEvent);

impl fmt::Display for WorkArgs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(f, r#""device":{},"context":1,"stream":{},"correlation":{}"#, e.device, e.stream, e.correlation)
    }
}

pub(super) fn kernel<W: Write>(
    out: &mut Out<W>,
    (p, e, collective): (&Process, &RawEvent, Option<Collective>),
    node: Option<GraphNode>,
    external: u64,
    gpu: Option<&((u32, u32), u64)>,
    gpu_pid: u64,
) -> std::io::Result<()> {
    let c = e.launch_config();
    // libkineto's per-kernel figures, from the device's SM count and the launch (see model::occupancy); "queued"
    // is CUPTI's queued timestamp, which Kineto writes as 0 unless latency timestamps were on (never here).
    let figures = gpu.and_then(|&(cc, sms)| cuflight_trace::model::occupancy::kineto_figures(cc, sms, &c));
    let (g, bl) = (c.grid, c.block);
    // cuflight's addition.
    let graph = Some(graph_args(node)).filter(|g| !g.is_empty());
    // cuflight's addition: the symbol as CUPTI named it.
    let mangled = p.mangled.get(&e.name).map(|m| format!(r#","mangled":{}"#, Js(m)));
    out.complete_with("kernel", p.string(e.name), gpu_pid, e.stream as u64, e.start, e.end, |b| {
        work_args(b, e);
        b.extend_from_slice(br#","External id":"#);
        push_u64(b, external);
        b.extend_from_slice(br#","grid":["#);
        push_u64(b, g[0] as u64);
        b.push(b',');
        push_u64(b, g[1] as u64);
        b.push(b',');
        push_u64(b, g[2] as u64);
        b.extend_from_slice(br#"],"block":["#);
        push_u64(b, bl[0] as u64);
        b.push(b',');
        push_u64(b, bl[1] as u64);
        b.push(b',');
        push_u64(b, bl[2] as u64);
        b.extend_from_slice(br#"],"registers per thread":"#);
        push_u64(b, c.registers as u64);
        b.extend_from_slice(br#","shared memory":"#);
        push_u64(b, c.static_shared as u64 + c.dynamic_shared as u64);
        b.extend_from_slice(br#","queued":0"#);
        if let Some(f) = figures {
            // f32 printed shortest, as libkineto prints it; a grid over zero SMs never gets here.
            let _ = write!(b, r#","blocks per SM":{},"warps per SM":{}"#, f.blocks_per_sm, f.warps_per_sm);
            if let Some(pct) = f.occupancy_pct {
                let _ = write!(b, r#","est. achieved occupancy %":{pct}"#);
            }
        }
        b.extend_from_slice(graph.as_deref().unwrap_or("").as_bytes());
        b.extend_from_slice(mangled.as_deref().unwrap_or("").as_bytes());
        // cuflight's addition: the collective a communication kernel ran (`crate::collectives`).
        if let Some(c) = collective {
            b.extend_from_slice(br#","collective":"#);
            push_js(b, c.label());
        }
    })
}

/// Ids cuflight gives calls and their work where the trace had no Kineto "External id" (its own captures):
/// the correlation id above this offset, so that they never meet an operator's id.
pub(super) const EXTERNAL_FROM_CORRELATION: u64 = 1 << 40;

/// The "External id" of device work: its launch's (an operator's, in an imported trace), else one made from the
/// correlation id. TensorBoard's plugin files a kernel without one under "Communication".
pub(super) fn external_id(e: &RawEvent, joined: Option<cuflight_trace::model::launches::Joined>) -> u64 {
    match joined.map(|j| j.call.external) {
        Some(x) if x != 0 => x,
        _ => EXTERNAL_FROM_CORRELATION + e.correlation as u64,
    }
}

/// `,"External id":N` for an imported host range that had one.
pub(super) struct ExternalArg(pub(super) u64);

impl fmt::Display for ExternalArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 != 0 {
            write!(f, r#""External id":{}"#, self.0)?;
        }
        Ok(())
    }
}

/// An imported operator's arguments (see the Kineto importer's `operator_args`): its JSON text as read, and
/// its "Sequence number".
pub(super) struct OperatorArgs<'a> {
    pub(super) text: &'a str,
    pub(super) sequence: Option<u64>,
    /// Whether an arg precedes these (a comma is then needed first).
    pub(super) after: bool,
}

impl fmt::Display for OperatorArgs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut after = self.after;
        if !self.text.is_empty() {
            f.write_str(if after { "," } else { "" })?;
            f.write_str(self.text)?;
            after = true;
        }
        if let Some(seq) = self.sequence {
            write!(f, r#"{}"Sequence number":{seq}"#, if after { "," } else { "" })?;
        }
        Ok(())
    }
}

/// The graph and node a kernel, copy or memset ran as (cuflight's addition), or nothing.
pub(super) fn graph_args(node: Option<GraphNode>) -> String {
    match node {
        None => String::new(),
        // A launch traced at graph level stands for all its nodes: no node id.
        Some(n) if !n.is_node_level() => format!(r#","graph id":{}"#, n.graph_id),
        Some(n) => format!(r#","graph id":{},"graph node id":{}"#, n.graph_id, n.node_id),
    }
}
