//! Chrome trace JSON in the schema torch.profiler (Kineto) writes, so that Holistic Trace Analysis and
//! TensorBoard's profiler plugin read it as they read a torch.profiler trace: categories `kernel`, `gpu_memcpy`,
//! `gpu_memset`, `cuda_runtime`, `cuda_driver`, `user_annotation` (and `gpu_user_annotation`), `ac2g` flows, GPU
//! events in pid = device / tid = stream, args `correlation`, `stream`, `device`, `grid`, `block`, `registers per
//! thread`, `shared memory`, plus `deviceProperties` and `distributedInfo`. Written event by event.
//!
//! Timestamps are microseconds with three decimals printed from integer nanoseconds, so nothing is rounded.

use crate::names;
use crate::trace::{Process, Trace};
use cuflight_format::event::{LaunchConfig, API_DRIVER, FLAG_ASYNC, FLAG_DEVICE};
use cuflight_format::EventKind;
use serde_json::json;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;

/// Nanoseconds as Kineto's microsecond text, exactly (`1234567` → `1234.567`).
pub fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

struct Out<W: Write> {
    w: W,
    first: bool,
    events: u64,
}

impl<W: Write> Out<W> {
    fn raw(&mut self, event: &str) -> std::io::Result<()> {
        if !std::mem::take(&mut self.first) {
            self.w.write_all(b",\n")?;
        }
        self.events += 1;
        self.w.write_all(event.as_bytes())
    }

    #[allow(clippy::too_many_arguments)]
    fn complete(
        &mut self,
        cat: &str,
        name: &str,
        pid: u64,
        tid: u64,
        start: u64,
        end: u64,
        args: serde_json::Value,
    ) -> std::io::Result<()> {
        let e = format!(
            r#"{{"ph":"X","cat":{},"name":{},"pid":{pid},"tid":{tid},"ts":{},"dur":{},"args":{args}}}"#,
            json!(cat),
            json!(name),
            us(start),
            us(end.saturating_sub(start)),
        );
        self.raw(&e)
    }
}

/// Writes `trace` as Kineto-style JSON; returns the number of trace events written.
pub fn export<W: Write>(trace: &Trace, w: W) -> std::io::Result<u64> {
    let mut out = Out { w, first: true, events: 0 };
    out.w.write_all(b"{\"schemaVersion\": 1,\n")?;
    let mut devices = Vec::new();
    let mut rank = None;
    for p in trace.processes.values() {
        rank = rank.or(p.rank);
        for e in p.events.iter().filter(|e| e.kind() == Some(EventKind::Device)) {
            devices.push(json!({
                "id": e.device, "name": p.string(e.name), "totalGlobalMem": e.a,
                "computeMajor": e.compute_capability().0, "computeMinor": e.compute_capability().1, "numSms": e.c,
            }));
        }
    }
    out.w.write_all(format!("\"deviceProperties\": {},\n", serde_json::Value::Array(devices)).as_bytes())?;
    if let Some(rank) = rank {
        let info = json!({"backend": "nccl", "rank": rank, "world_size": trace.processes.values().filter_map(|p| p.rank).max().map_or(1, |r| r + 1)});
        out.w.write_all(format!("\"distributedInfo\": {info},\n").as_bytes())?;
    }
    out.w.write_all(b"\"traceEvents\": [\n")?;
    let mut gpu_pids = BTreeSet::new();
    for (&pid, p) in &trace.processes {
        process(&mut out, pid, p, &mut gpu_pids)?;
    }
    for device in gpu_pids {
        let meta = json!({"ph": "M", "name": "process_name", "pid": device, "tid": 0, "args": {"name": format!("GPU {device}")}});
        out.raw(&meta.to_string())?;
    }
    out.w.write_all(b"\n]}\n")?;
    out.w.flush()?;
    Ok(out.events)
}

fn process<W: Write>(out: &mut Out<W>, pid: u32, p: &Process, gpu_pids: &mut BTreeSet<u32>) -> std::io::Result<()> {
    let label = if p.name.is_empty() { p.info.cmdline.join(" ") } else { p.name.clone() };
    out.raw(&json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}}).to_string())?;
    for e in p.events.iter().filter(|e| e.kind() == Some(EventKind::ThreadName)) {
        let meta =
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": e.a, "args": {"name": p.string(e.name)}});
        out.raw(&meta.to_string())?;
    }
    let launched: HashSet<u32> =
        p.events.iter().filter(|e| e.is_gpu_work() && e.correlation != 0).map(|e| e.correlation).collect();
    let api: HashSet<u32> = p
        .events
        .iter()
        .filter(|e| e.kind() == Some(EventKind::Api) && e.correlation != 0)
        .map(|e| e.correlation)
        .collect();
    let mut flow_ended = HashSet::new();
    // Kernels run as CUDA graph nodes: (correlation, start) -> (graph id, node id).
    let graph_of: HashMap<(u32, u64), (u64, u64)> = p
        .events
        .iter()
        .filter(|e| e.kind() == Some(EventKind::GraphNode))
        .map(|e| ((e.correlation, e.start), (e.a, e.b)))
        .collect();
    let mut pairer = crate::ranges::Pairer::default();
    let mut memory = crate::memory::LiveMemory::default();
    let pid = pid as u64;
    for e in &p.events {
        if let Some(r) = pairer.feed(e) {
            let mut args = json!({"domain": p.nvtx_domain(r.domain)});
            if let Some(payload) = r.payload {
                args["payload"] = payload.to_json(); // cuflight's addition: the NVTX payload
            }
            out.complete("user_annotation", p.string(r.name), pid, r.tid as u64, r.start, r.end, args)?;
            continue;
        }
        let name = p.string(e.name);
        let corr = e.correlation;
        match e.kind() {
            Some(EventKind::Api) => {
                let cat = if e.sub == API_DRIVER { "cuda_driver" } else { "cuda_runtime" };
                out.complete(cat, name, pid, e.tid as u64, e.start, e.end, json!({"correlation": corr, "cbid": e.a}))?;
                if corr != 0 && launched.contains(&corr) {
                    let s = format!(
                        r#"{{"ph":"s","id":{corr},"pid":{pid},"tid":{},"ts":{},"cat":"ac2g","name":"ac2g"}}"#,
                        e.tid,
                        us(e.start)
                    );
                    out.raw(&s)?;
                }
            }
            Some(k @ (EventKind::Kernel | EventKind::Memcpy | EventKind::Memset)) => {
                gpu_pids.insert(e.device);
                let (dpid, stream) = (e.device as u64, e.stream as u64);
                let base = json!({"device": e.device, "context": 1, "stream": e.stream, "correlation": corr});
                let mut args = base.as_object().cloned().unwrap_or_default();
                let (cat, label) = match k {
                    EventKind::Kernel => {
                        let c = LaunchConfig::unpack(e.a, e.b, e.c);
                        args.insert("grid".into(), json!(c.grid));
                        args.insert("block".into(), json!(c.block));
                        args.insert("registers per thread".into(), json!(c.registers));
                        args.insert("shared memory".into(), json!(c.static_shared + c.dynamic_shared));
                        if let Some(&(graph, node)) = graph_of.get(&(e.correlation, e.start)) {
                            args.insert("graph id".into(), json!(graph)); // cuflight's addition
                            args.insert("graph node id".into(), json!(node));
                        }
                        if let Some(m) = p.mangled.get(&e.name) {
                            args.insert("mangled".into(), json!(m)); // cuflight's addition: the symbol as CUPTI named it
                        }
                        ("kernel", name.to_string())
                    }
                    EventKind::Memcpy => {
                        let (src, dst) = e.copy_memory_kinds();
                        let (src, dst) = (names::memory_kind(src), names::memory_kind(dst));
                        args.insert("bytes".into(), json!(e.a));
                        let gbps = if e.duration() == 0 { 0.0 } else { e.a as f64 / e.duration() as f64 };
                        args.insert("memory bandwidth (GB/s)".into(), json!(gbps));
                        if e.flags & FLAG_ASYNC != 0 {
                            args.insert("async".into(), json!(true)); // cuflight's addition, ignored by Kineto tools
                        }
                        (
                            "gpu_memcpy",
                            format!("Memcpy {} ({} -> {})", names::memcpy_kind(e.sub), title(src), title(dst)),
                        )
                    }
                    _ => {
                        args.insert("bytes".into(), json!(e.a));
                        ("gpu_memset", format!("Memset ({})", title(names::memory_kind(e.sub))))
                    }
                };
                out.complete(cat, &label, dpid, stream, e.start, e.end, serde_json::Value::Object(args))?;
                if corr != 0 && api.contains(&corr) && flow_ended.insert(corr) {
                    let f = format!(
                        r#"{{"ph":"f","id":{corr},"pid":{dpid},"tid":{stream},"ts":{},"cat":"ac2g","name":"ac2g","bp":"e"}}"#,
                        us(e.start)
                    );
                    out.raw(&f)?;
                }
            }
            Some(EventKind::Range) => {
                let domain = p.string(e.c as u32);
                if e.flags & FLAG_DEVICE != 0 {
                    gpu_pids.insert(e.device);
                    out.complete(
                        "gpu_user_annotation",
                        name,
                        e.device as u64,
                        e.stream as u64,
                        e.start,
                        e.end,
                        json!({}),
                    )?;
                } else {
                    let cat = if domain.is_empty() { "user_annotation" } else { domain };
                    out.complete(cat, name, pid, e.tid as u64, e.start, e.end, json!({}))?;
                }
            }
            Some(EventKind::NvtxMark) => {
                let i = format!(
                    r#"{{"ph":"i","s":"t","cat":"user_annotation","name":{},"pid":{pid},"tid":{},"ts":{},"args":{}}}"#,
                    json!(name),
                    e.tid,
                    us(e.start),
                    match crate::ranges::Payload::of(e) {
                        Some(v) => json!({"domain": p.nvtx_domain(e.c), "payload": v.to_json()}),
                        None => json!({"domain": p.nvtx_domain(e.c)}),
                    }
                );
                out.raw(&i)?;
            }
            Some(EventKind::Alloc | EventKind::Free) => {
                // torch.profiler's memory events: Bytes is negative for a free; Device Type 1 = CUDA, 0 = CPU.
                let Some(change) = memory.apply(0, e) else { continue };
                let (device, bytes) = (change.device, change.delta);
                let mut args = json!({"Addr": e.a, "Bytes": bytes, "Device Type": device as u8, "Device Id": e.device});
                if !device {
                    args["pinned"] = json!(true); // cuflight's addition: pinned host memory, not the CPU allocator
                }
                let i = format!(
                    r#"{{"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]","pid":{pid},"tid":{},"ts":{},"args":{args}}}"#,
                    e.tid,
                    us(e.start)
                );
                out.raw(&i)?;
            }
            Some(EventKind::Sync) => {
                let args = json!({"cuda_sync_kind": names::sync_kind(e.sub), "stream": e.stream as i64, "correlation": corr, "device": e.device});
                out.complete(
                    "cuda_sync",
                    names::sync_kind(e.sub),
                    e.device as u64,
                    e.stream as u64,
                    e.start,
                    e.end,
                    args,
                )?;
            }
            _ => {}
        }
    }
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
