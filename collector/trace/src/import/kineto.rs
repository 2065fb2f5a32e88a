//! torch.profiler / Kineto JSON (Chrome trace format), plain or gzip, both the 2021 schema (`Kernel`, `Runtime`,
//! `Memcpy`, flows in cat `async`) and the current one (`kernel`, `cuda_runtime`, `gpu_memcpy`, `ac2g` flows).
//!
//! The file is streamed event by event (a one-pass scanner over a window, `json_scan` and `kineto_event`), never
//! held as one JSON tree.
//! Timestamps are parsed from their decimal text into integer nanoseconds: float microseconds like
//! `1712195495506161.2` are beyond f64's precision at nanosecond scale. GPU events (Kineto puts them in
//! pid = device, tid = stream) are attached to the host process that launched them, found through the
//! correlation id of the launching runtime call (or the `ac2g` flow when a kernel has no correlation).

use super::builder::{spool_failed, Processes};
use super::json_scan::us_to_ns;
use super::json_scan::Window;
use super::kineto_devices as devices;
use super::kineto_document as document;
use super::kineto_event::{id_of, memcpy_kinds, memory_kind, u, Args, Event, Id};
use crate::model::spool::{GpuSpill, Spool};
use crate::model::trace::Trace;
use cuflight_format::event::{LaunchConfig, MemKind};
use cuflight_format::view::{
    ApiCall, CopyKind, DeviceInfo, MemOp, Memcpy, MemoryKind, Memset, Nvtx, RangeRecord, SyncRecord,
};
use cuflight_format::{EventKind, RawEvent};
use serde_json::Value;

/// Names of GPU events while their process is not known yet: id 0 is "".
#[derive(Default)]
struct GpuNames {
    ids: rustc_hash::FxHashMap<String, u32>,
    names: Vec<String>,
}

impl GpuNames {
    fn id(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        self.names.push(s.to_string());
        let id = self.names.len() as u32;
        self.ids.insert(s.to_string(), id);
        id
    }

    fn name(&self, id: u32) -> &str {
        id.checked_sub(1).and_then(|i| self.names.get(i as usize)).map_or("", String::as_str)
    }
}

/// What the import collects before GPU events can be attached to their host process.
struct Importer {
    host: Processes,
    /// GPU-side events with their raw (pid, tid), placed at the end; `name` and `c` (the category of device
    /// ranges) hold ids of `gpu_names` until then, so each distinct name is stored once, not once per kernel.
    gpu: Vec<(RawEvent, (u64, u64))>,
    gpu_names: GpuNames,
    correlation_pid: rustc_hash::FxHashMap<u32, u32>,
    /// ac2g/async flow ends on GPU tracks: (device pid, stream, ts) and the flow id (the correlation), in trace
    /// order. Only GPU events without a correlation of their own (older traces) look them up, so the map is built
    /// at the end and only for those: a map grown event by event cost a twentieth of an import.
    flow_ends: Vec<((u64, u64, u64), u32)>,
    /// `ac2g` flows seen starting: id → the launching process.
    flow_starts: rustc_hash::FxHashMap<u64, u32>,
    /// Per GPU "process" (its pid in the JSON), the processes whose launches' flows end on it. Where one process
    /// alone does (each process's GPUs have pids of their own, as cuflight writes a trace of several processes),
    /// its work is that process's: correlation ids repeat across processes and cannot say.
    gpu_owners: rustc_hash::FxHashMap<u64, rustc_hash::FxHashSet<u32>>,
    thread_names: Vec<(u32, u32, String)>,
    process_names: rustc_hash::FxHashMap<u32, String>,
    devices: Vec<Value>,
    /// Recorded on ROCm (the document says so, or a device has 64-wide wavefronts): GPU ops may number devices
    /// otherwise than `deviceProperties` ([`devices::rocm_ordinals`]).
    rocm: bool,
    /// The trace holds an accelerator's work that is no GPU's (Meta's MTIA: `mtia_ccp_events`, `mtia_runtime`).
    other_accelerator: bool,
    /// The devices GPU ops (kernels, copies, memsets) name, and those the caching allocator's events name.
    op_devices: std::collections::BTreeSet<u32>,
    allocator_devices: std::collections::BTreeSet<u32>,
    /// The CUDA driver's version (`cuda_driver_version`), carried by the devices' events; 0 unknown.
    driver_version: u32,
    /// The earliest `ts` of any event, in ns as written.
    first_ts: Option<u64>,
    /// Per device, kernels' Kineto figures (a sample), to recover the device when `deviceProperties` is absent.
    kernel_figures: std::collections::BTreeMap<u32, devices::Figures>,
    rank: Option<u32>,
    /// Per process, a rank given by a `process_labels` metadata event ("rank R", as cuflight writes a trace of
    /// several ranks); it wins over `distributedInfo`.
    process_ranks: rustc_hash::FxHashMap<u32, u32>,
    /// Processes of a cuflight capture (its export's `cuflight_capture` metadata event), with what it traced
    /// (empty when unknown).
    process_captured: rustc_hash::FxHashMap<u32, String>,
    /// Per process, what HTA would take for GPU ops ([`crate::model::trace::Process::not_gpu_work`]).
    not_gpu_work: rustc_hash::FxHashMap<u32, crate::model::trace::NotGpuWork>,
    /// Context synchronisations written with stream 4294967295, by (start, correlation): counted for the process
    /// their GPU events go to once placed.
    unsigned_context_syncs: rustc_hash::FxHashSet<(u64, u32)>,
    events: u64,
    fractional: bool,
    /// API calls per process (the process that launches the most gets GPU work whose launch is missing).
    api_calls: rustc_hash::FxHashMap<u32, u64>,
    /// Global instants, placed with the main process at the end.
    globals: Vec<(RawEvent, String, String)>,
    /// A `[memory]` event was seen (torch.profiler writes them only with profile_memory=True).
    memory_seen: bool,
    /// A call carried a return code (`return`: only cuflight's own export writes one).
    return_codes_seen: bool,
    /// Whether events may be set aside on disk (large traces read as a stream): host events go to runs in
    /// `host`'s spool, GPU events to `gpu_spill`, both created when the first run is full.
    spooling: bool,
    gpu_spill: Option<GpuSpill>,
    run: usize,
    /// torch.profiler's Python stacks, joined to the calls at the end.
    python: super::kineto_python::Stacks,
}

impl Importer {
    fn new(spooling: bool) -> Importer {
        Importer {
            host: Processes::new(spooling),
            gpu: Vec::new(),
            gpu_names: GpuNames::default(),
            correlation_pid: Default::default(),
            flow_ends: Default::default(),
            flow_starts: Default::default(),
            gpu_owners: Default::default(),
            thread_names: Vec::new(),
            process_names: Default::default(),
            devices: Vec::new(),
            rocm: false,
            other_accelerator: false,
            op_devices: Default::default(),
            allocator_devices: Default::default(),
            driver_version: 0,
            first_ts: None,
            kernel_figures: Default::default(),
            rank: None,
            process_ranks: Default::default(),
            process_captured: Default::default(),
            not_gpu_work: Default::default(),
            unsigned_context_syncs: Default::default(),
            events: 0,
            fractional: false,
            api_calls: Default::default(),
            globals: Vec::new(),
            memory_seen: false,
            return_codes_seen: false,
            spooling,
            gpu_spill: None,
            run: crate::model::spool::run_events(),
            python: Default::default(),
        }
    }

    fn host_event(&mut self, pid: u32, ev: RawEvent, name: &str, domain: Option<&str>) {
        self.host.push(pid, ev, name, domain);
    }

    fn gpu_event(&mut self, ev: RawEvent, at: (u64, u64)) {
        if matches!(ev.kind(), Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset)) {
            self.op_devices.insert(ev.device);
        }
        self.gpu.push((ev, at));
        if self.spooling && self.gpu.len() >= self.run {
            let spill = match self.gpu_spill.take() {
                Some(s) => Ok(s),
                None => GpuSpill::create(),
            };
            match spill.and_then(|mut s| s.write(&self.gpu).map(|_| s)) {
                Ok(s) => self.gpu_spill = Some(s),
                Err(e) => self.host.failed(spool_failed(&e)),
            }
            self.gpu.clear();
        }
    }

    /// An operator's arguments, for a host range: the string id (of process `pid`; 0 none) of their JSON text
    /// (`"Input Dims":...`, [`Args::operator_fields`], as the trace had them) and its "Sequence number" + 1 (0 none). A text that is not JSON
    /// is dropped, so an export never writes what it was not given.
    fn operator_args(&mut self, pid: u32, a: &Args<'_>) -> (u32, u64) {
        let seq = a.sequence.filter(|s| (0..u32::MAX as i64).contains(s)).map_or(0, |s| s as u64 + 1);
        let mut text = String::new();
        for (key, value) in a.operator_fields() {
            if let Some(v) = value.and_then(|v| std::str::from_utf8(v).ok()) {
                if !text.is_empty() {
                    text.push(',');
                }
                // The keys are fixed ASCII names: quoted as they are (what `{key:?}` gave, without a format! per
                // operator, which was 7% of a report on a Kineto trace).
                text.push('"');
                text.push_str(key);
                text.push_str("\":");
                text.push_str(v);
            }
        }
        if text.is_empty() {
            return (0, seq);
        }
        let (p, t) = self.host.process(pid);
        let id = match t.get(&text) {
            Some(id) => id,
            None if serde_json::from_str::<serde::de::IgnoredAny>(&format!("{{{text}}}")).is_ok() => t.id(p, &text),
            None => 0,
        };
        (id, seq)
    }

    /// A metadata event (`"ph":"M"`): process and thread names, a process's rank label.
    fn metadata(&mut self, e: &Event<'_>, pid: u64, tid: u64) {
        let name = e.args.name.clone().unwrap_or_default();
        match e.name.as_ref() {
            "process_name" => {
                self.process_names.insert(pid as u32, name.into_owned());
            }
            "thread_name" => self.thread_names.push((pid as u32, tid as u32, name.into_owned())),
            "process_labels" => {
                let labels = e.args.labels.as_deref().unwrap_or("");
                let rank = labels.split(',').find_map(|l| l.trim().strip_prefix("rank ")?.parse().ok());
                if let Some(r) = rank {
                    self.process_ranks.insert(pid as u32, r);
                }
            }
            // What it traced is kept only as a list `--trace` accepts, written anew (the file is another
            // program's).
            "cuflight_capture" => {
                let traced = cuflight_format::tracing::parse(&name).map(cuflight_format::tracing::describe);
                self.process_captured.insert(pid as u32, traced.unwrap_or_default());
            }
            _ => {}
        }
    }

    /// A flow event (`"ph":"s"/"f"/"t"`): launch-to-kernel flows tell which host process owns a GPU's work.
    fn flow_event(&mut self, e: &Event<'_>, (pid, tid): (u64, u64), ts: Option<u64>) {
        let (ph, cat) = (e.ph.as_ref(), e.cat.as_ref());
        if ph == b"f" && matches!(cat, b"ac2g" | b"async") {
            if let (Some(ts), Some(Id::Num(id))) = (ts, &e.id) {
                self.flow_ends.push(((pid, tid, ts), *id as u32));
                if let Some(host) = self.flow_starts.remove(id) {
                    let owners = self.gpu_owners.entry(pid).or_default();
                    // Two are as good as many: the GPU is shared, the owner unknown.
                    if owners.len() < 2 {
                        owners.insert(host);
                    }
                }
            }
        } else if ph == b"s" && cat == b"ac2g" {
            if let Some(Id::Num(id)) = &e.id {
                self.flow_starts.insert(*id, pid as u32);
            }
        }
    }

    fn add(&mut self, e: Event<'_>) {
        self.events += 1;
        let (ph, cat) = (e.ph.as_ref(), e.cat.as_ref());
        let cat_text = || std::str::from_utf8(cat).unwrap_or("");
        let (pid, tid) = (id_of(&e.pid), id_of(&e.tid));
        if let Some(Id::Text(label)) = &e.pid {
            self.process_names.entry(pid as u32).or_insert_with(|| label.to_string());
        }
        let ts = e.ts.and_then(us_to_ns);
        if let Some(t) = ts.filter(|_| ph != b"M") {
            // Metadata events carry no time of their own (some writers put 0 there).
            self.first_ts = Some(self.first_ts.map_or(t, |f| f.min(t)));
        }
        if !self.fractional {
            self.fractional = ts.is_some_and(|t| t % 1000 != 0);
        }
        if cat.starts_with(b"mtia_") {
            self.other_accelerator = true;
        }
        match ph {
            b"M" => return self.metadata(&e, pid, tid),
            b"s" | b"f" | b"t" => return self.flow_event(&e, (pid, tid), ts),
            b"X" | b"i" | b"I" => {}
            _ => return,
        }
        let Some(start) = ts else { return };
        let end = start.saturating_add(e.dur.unwrap_or(0));
        let a = &e.args;
        let corr = u(a.correlation).unwrap_or(0) as u32;
        let mut ev = RawEvent::new(EventKind::Range, tid as u32, start, end);
        ev.correlation = corr;
        match (ph, cat) {
            (b"X", b"kernel" | b"Kernel") => {
                ev.kind = EventKind::Kernel as u8;
                ev.tid = 0;
                ev.device = u(a.device).unwrap_or(pid) as u32;
                ev.stream = u(a.stream).unwrap_or(tid) as u32;
                let cfg = LaunchConfig {
                    grid: a.grid.unwrap_or([1; 3]),
                    block: a.block.unwrap_or([1; 3]),
                    registers: u(a.registers).unwrap_or(0) as u16,
                    static_shared: u(a.shared_memory).unwrap_or(0) as u32,
                    dynamic_shared: 0,
                };
                ev.set_launch_config(&cfg);
                if let (Some(bps), Some(pct)) = (a.blocks_per_sm, a.occupancy_pct) {
                    self.kernel_figures.entry(ev.device).or_default().add(&e.name, &cfg, bps, pct);
                }
                ev.name = self.gpu_names.id(&e.name);
                self.gpu_event(ev, (pid, tid));
            }
            (b"X", b"gpu_memcpy" | b"Memcpy") => {
                let (kind, src, dst) = memcpy_kinds(&e.name);
                ev.tid = 0;
                ev.device = u(a.device).unwrap_or(pid) as u32;
                ev.stream = u(a.stream).unwrap_or(tid) as u32;
                let bytes = u(a.bytes).unwrap_or(0);
                let (kind, src, dst) = (CopyKind(kind), MemoryKind(src), MemoryKind(dst));
                ev.set_copy(Memcpy { kind, src, dst, bytes, is_async: a.is_async == Some(true) });
                self.gpu_event(ev, (pid, tid));
            }
            (b"X", b"gpu_memset" | b"Memset") => {
                ev.tid = 0;
                let memory = e.name.split_once('(').map_or(3, |(_, k)| memory_kind(k.trim_end_matches(')')));
                ev.device = u(a.device).unwrap_or(pid) as u32;
                ev.stream = u(a.stream).unwrap_or(tid) as u32;
                ev.set_memset(Memset {
                    memory: MemoryKind(memory),
                    bytes: u(a.bytes).unwrap_or(0),
                    value: 0,
                    is_async: false,
                });
                self.gpu_event(ev, (pid, tid));
            }
            (b"X", b"gpu_user_annotation") => {
                ev.tid = 0;
                ev.device = pid as u32;
                ev.stream = tid as u32;
                ev.name = self.gpu_names.id(&e.name);
                let category = self.gpu_names.id(cat_text());
                ev.set_range(RangeRecord {
                    category,
                    on_device: true,
                    external: 0,
                    operator_text: 0,
                    sequence_plus_one: 0,
                });
                self.gpu_event(ev, (pid, tid));
            }
            (b"X", b"cuda_runtime" | b"Runtime" | b"cuda_driver" | b"Driver") => {
                ev.set_api(ApiCall {
                    runtime: !cat_text().contains("river"),
                    cbid: u(a.cbid).unwrap_or(0) as u32,
                    result: u(a.return_code).unwrap_or(0),
                    external: u(a.external_id).unwrap_or(0),
                });
                self.return_codes_seen |= a.return_code.is_some();
                if corr != 0 {
                    self.correlation_pid.insert(corr, pid as u32);
                }
                *self.api_calls.entry(pid as u32).or_default() += 1;
                self.python.call(
                    pid as u32,
                    &e.name,
                    super::kineto_python::PyCall { tid: tid as u32, start, correlation: corr },
                );
                self.host_event(pid as u32, ev, &e.name, None);
            }
            (b"X", b"cuda_sync") => {
                ev.tid = 0;
                let kind = a.cuda_sync_kind.as_deref().unwrap_or(&e.name);
                ev.set_sync(SyncRecord { kind: crate::model::cupti_labels::sync_kind_from_name(kind), event: 0 });
                ev.device = u(a.device).unwrap_or(pid) as u32;
                ev.stream = a.stream.unwrap_or(tid as i64) as u32;
                if a.stream == Some(u32::MAX as i64) {
                    self.unsigned_context_syncs.insert((ev.start, ev.correlation));
                }
                self.gpu_event(ev, (pid, tid));
            }
            (b"X", _) => {
                if cat == b"python_function" {
                    self.python.range(pid as u32, tid as u32, (start, end), &e.name);
                }
                if a.stream.is_some_and(|s| s != -1) {
                    self.not_gpu_work.entry(pid as u32).or_default().host_ops += 1;
                }
                // cuflight's own exports keep the NVTX domain in args; Kineto's user annotations have none.
                let domain = a.domain.as_deref().unwrap_or(if cat.is_empty() { "other" } else { cat_text() });
                let (operator_text, sequence_plus_one) = self.operator_args(pid as u32, a);
                let external = u(a.external_id).unwrap_or(0);
                // The category is the domain, interned with the name below.
                ev.set_range(RangeRecord { category: 0, on_device: false, external, operator_text, sequence_plus_one });
                self.host_event(pid as u32, ev, &e.name, Some(domain));
            }
            (_, _) if e.name == "[memory]" => self.memory_event(ev, a, pid as u32),
            (_, _) => {
                ev.kind = EventKind::NvtxMark as u8;
                ev.end = start;
                let domain = a.domain.as_deref().unwrap_or(if cat.is_empty() { "instant" } else { cat_text() });
                if e.scope.as_ref() == b"g" {
                    // Trace-wide ("Iteration Start", "Record Window End"): its pid is a label, not a process.
                    ev.set_nvtx(EventKind::NvtxMark, Nvtx { global: true, ..Nvtx::default() });
                    ev.tid = 0;
                    self.globals.push((ev, e.name.to_string(), domain.to_string()));
                } else {
                    self.host_event(pid as u32, ev, &e.name, Some(domain));
                }
            }
        }
    }

    /// torch.profiler's `[memory]` instant: an allocation (Bytes >= 0) or a free; Device Type is c10's
    /// `DeviceType`: 1 CUDA, 6 HIP (what PyTorch built for ROCm writes: TraceLens's MI300X traces).
    fn memory_event(&mut self, mut ev: RawEvent, a: &Args<'_>, pid: u32) {
        let bytes = a.signed_bytes.unwrap_or(0);
        let device = matches!(a.device_type, Some(1 | 6));
        let kind = if bytes >= 0 { EventKind::Alloc } else { EventKind::Free };
        self.memory_seen = true;
        ev.end = ev.start;
        let memory = Some(if device { MemKind::Device } else { MemKind::PinnedHost });
        ev.set_mem_op(kind, MemOp { memory, address: u(a.addr).unwrap_or(0), bytes: bytes.unsigned_abs() });
        ev.device = u(a.device_id).unwrap_or(0) as u32;
        // Host-side allocator events are CPU memory: keep device ones, and pinned memory cuflight marked.
        if device {
            self.allocator_devices.insert(ev.device);
        }
        if device || a.pinned == Some(true) {
            self.host_event(pid, ev, "", None);
        }
    }

    fn finish(mut self) -> Result<(Trace, Option<Spool>), String> {
        // GPU work whose launch is not in the trace goes to the process that launches the most (the main one).
        let api_calls = std::mem::take(&mut self.api_calls);
        let default_host = self
            .host
            .host
            .keys()
            .max_by_key(|pid| (api_calls.get(pid).copied().unwrap_or(0), std::cmp::Reverse(**pid)))
            .map_or(0, |pid| *pid);
        for (ev, name, domain) in std::mem::take(&mut self.globals) {
            self.host.push(default_host, ev, &name, Some(&domain));
        }
        let names = std::mem::take(&mut self.gpu_names);
        // (process, GPU name id) → the process's string id: each distinct name is looked up once per process.
        let mut local: rustc_hash::FxHashMap<(u32, u32), u32> = Default::default();
        // The flow ends by place, built once and only if some GPU event needs one (the last end at a place wins).
        let mut flow_ends: Option<rustc_hash::FxHashMap<(u64, u64, u64), u32>> = None;
        let rocm = self.rocm;
        // The devices the trace describes, read once: their ids tell the ROCm ordinals, then they are the devices.
        let described = devices::from_properties(&self.devices);
        let listed: Vec<u32> = described.iter().map(|d| d.id).collect();
        let ordinals = devices::rocm_ordinals(&self.op_devices, &self.allocator_devices, &listed).filter(|_| rocm);
        let mut place = |this: &mut Importer, gpu: Vec<(RawEvent, (u64, u64))>| {
            let n = gpu.len();
            for (mut ev, (pid, tid)) in gpu {
                if let Some(&ordinal) = ordinals.as_ref().and_then(|m| m.get(&ev.device)) {
                    ev.device = ordinal;
                }
                if ev.correlation == 0 && !this.flow_ends.is_empty() {
                    let ends = flow_ends.get_or_insert_with(|| this.flow_ends.iter().copied().collect());
                    if let Some(&id) = ends.get(&(pid, tid, ev.start)) {
                        ev.correlation = id;
                    }
                }
                let owner = this.gpu_owners.get(&pid).filter(|o| o.len() == 1).and_then(|o| o.iter().next());
                let pid = match owner {
                    Some(&host) => host,
                    None => this.correlation_pid.get(&ev.correlation).copied().unwrap_or(default_host),
                };
                if ev.kind() == Some(EventKind::Sync) && this.unsigned_context_syncs.remove(&(ev.start, ev.correlation))
                {
                    this.not_gpu_work.entry(pid).or_default().context_syncs += 1;
                }
                let (p, t) = this.host.process(pid);
                let mut to_local = |id: u32| *local.entry((pid, id)).or_insert_with(|| t.id(p, names.name(id)));
                ev.name = to_local(ev.name);
                let range = ev.as_range();
                if ev.kind() == Some(EventKind::Range) && range.on_device && range.category != 0 {
                    ev.set_annotation_domain(to_local(range.category));
                }
                p.events.push(ev);
            }
            this.host.held(n);
        };
        if let Some(spill) = self.gpu_spill.take() {
            // Placed a batch at a time (placing writes runs out as they fill).
            spill.read(|batch| place(&mut self, batch)).map_err(|e| spool_failed(&e))?;
        }
        let gpu = std::mem::take(&mut self.gpu);
        place(&mut self, gpu);
        for (pid, tid, name) in std::mem::take(&mut self.thread_names) {
            if let Some((p, t)) = self.host.host.get_mut(&pid) {
                let mut ev = RawEvent::new(EventKind::ThreadName, tid, 0, 0);
                ev.set_named_thread(tid as u64);
                ev.name = t.id(p, &name);
                p.events.push(ev);
            }
        }
        let devices = match described.is_empty() {
            false => described,
            true => devices::recovered(&self.kernel_figures),
        };
        if let Some((p, t)) = self.host.host.get_mut(&default_host) {
            for d in devices {
                let mut ev = RawEvent::new(EventKind::Device, 0, 0, 0);
                ev.device = d.id;
                ev.name = t.id(p, &d.name);
                ev.set_device(DeviceInfo {
                    memory_bytes: d.memory,
                    compute_capability: d.capability,
                    multiprocessors: d.sms,
                    driver_version: self.driver_version,
                });
                p.events.push(ev);
            }
        }
        self.python.join(&mut self.host);
        let (host, spool) = self.host.finish()?;
        // HTA rounds ns-resolution traces to whole µs (its workaround for PyTorch's overlapping host events),
        // which turns sub-µs GPU ops negative; the breakdown follows it on torch.profiler's traces so that the
        // numbers equal HTA's, but not on cuflight's own export: that reads as its capture did, exactly (HTA too,
        // with HTA_DISABLE_NS_ROUNDING=1; docs/report.md).
        let rounded = self.fractional && self.process_captured.is_empty();
        let mut trace = Trace { fractional_us_timestamps: rounded, ..Default::default() };
        for (pid, (mut p, _)) in host {
            if self.python.too_many(pid) {
                p.info.not_recorded.push((
                    "python".into(),
                    "the trace's Python stacks (python_function events) are too many to join to its calls".into(),
                ));
            }
            p.name = self.process_names.get(&pid).cloned().unwrap_or_default();
            p.info.cmdline = vec![p.name.clone()];
            p.info.finished = true;
            p.rank = self.process_ranks.get(&pid).copied().or(self.rank);
            p.not_gpu_work = self.not_gpu_work.get(&pid).copied().unwrap_or_default();
            if let Some(traced) = self.process_captured.remove(&pid) {
                (p.imported, p.info.traced) = (false, traced);
            }
            if self.other_accelerator {
                p.info.not_recorded.push((ACCELERATOR.into(), OTHER_ACCELERATOR.into()));
            }
            if !self.return_codes_seen {
                let why = "the trace holds no CUDA return codes (torch.profiler records none)";
                p.info.not_recorded.push(("errors".into(), why.into()));
            }
            if !self.memory_seen {
                p.info.not_recorded.push((
                    "memory".into(),
                    "the trace has no [memory] events: torch.profiler records allocations with profile_memory=True"
                        .into(),
                ));
            }
            trace.processes.insert(pid, p);
        }
        Ok((trace, spool))
    }
}

/// The kind of [`crate::model::trace::Process`]'s `not_recorded` entry that says the trace holds an accelerator's
/// work cuflight does not read, and why.
pub const ACCELERATOR: &str = "accelerator";
const OTHER_ACCELERATOR: &str = "the trace holds the work of Meta's MTIA accelerator (mtia_ccp_events, mtia_runtime), \
     which cuflight does not read: it reads NVIDIA's and AMD's GPUs' kernels, copies and memsets";

/// Imports a Kineto/Chrome JSON trace from a reader (already decompressed), all in memory.
pub fn import<R: std::io::Read>(reader: R) -> Result<Trace, String> {
    import_with(reader, false).map(|(t, _)| t)
}

/// Imports a Kineto/Chrome JSON trace to be read as a stream: once it holds more than
/// [`crate::model::spool::run_events`] events, they are set aside on disk in sorted runs (the returned spool),
/// and the trace's processes keep only their facts and strings.
pub fn import_spooled<R: std::io::Read>(reader: R) -> Result<(Trace, Option<Spool>), String> {
    import_with(reader, true)
}

fn import_with<R: std::io::Read>(reader: R, spooling: bool) -> Result<(Trace, Option<Spool>), String> {
    let mut importer = Importer::new(spooling);
    let mut window = Window::new(reader);
    let top = document::scan(&mut window, &mut |e| importer.add(e)).map_err(|e| e.to_string())?;
    if !top.trace_events {
        return Err(top.not_a_trace());
    }
    if let Some(Value::Array(devices)) = &top.device_properties {
        importer.devices = devices.clone();
    }
    importer.rocm = top.recorded_on_rocm();
    importer.driver_version = top.driver_version();
    importer.rank = top.distributed_info.as_ref().and_then(|d| d.get("rank")).and_then(Value::as_u64).map(|r| r as u32);
    let first_ts = importer.first_ts;
    let (mut trace, spool) = importer.finish()?;
    top.apply(&mut trace, first_ts);
    Ok((trace, spool))
}

#[cfg(test)]
#[path = "kineto_tests.rs"]
mod tests;
