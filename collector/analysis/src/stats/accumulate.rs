//! The `stats` tables as an accumulator fed one event at a time in time order (from [`cuflight_trace::model::source`]): it keeps
//! per-(process, name id) aggregates, open NVTX ranges, live allocations and unmatched launches, never the events,
//! so its memory does not grow with the trace.

use super::*;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::cupti_labels;
use cuflight_trace::model::ranges::Pairer;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::dist::Dist as Acc;

/// Where an NVTX row's domain name comes from: a domain id (0 is "default") or, for imported ranges, a plain
/// string id.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Domain {
    Nvtx(u64),
    Imported(u32),
}

/// Launches of a process that may have lost its device work (only tracked for processes that did not finish).
#[derive(Default)]
struct Launches {
    /// Launch calls whose kernel has not been seen, by correlation id.
    waiting: FxHashMap<u32, u64>,
    /// Kernels seen before any launch with their correlation (clock alignment can put a kernel a little early).
    early: FxHashSet<u32>,
}

/// Graph launches (distinct correlation ids), distinct nodes, kernels and their time.
/// One graph's launches (correlation → first start, last end of what ran), node ids, kernels and kernel time, and
/// whether it was traced at graph level (`--trace graphs`: no node events).
#[derive(Default)]
struct GraphAcc {
    launches: FxHashMap<u32, (u64, u64)>,
    nodes: FxHashSet<u64>,
    kernels: u64,
    kernel_ns: u64,
    graph_level: bool,
}

#[derive(Default)]
pub struct StatsAcc {
    kernels: FxHashMap<(u32, u32), Acc>,
    api: FxHashMap<(u32, u32), Acc>,
    /// Whether an API name (per process and id) is a kernel launch.
    is_launch: FxHashMap<(u32, u32), bool>,
    memcpy: BTreeMap<(&'static str, &'static str), MemcpyRow>,
    memset: BTreeMap<&'static str, MemsetRow>,
    /// Copy and memset durations and sizes by operation, as `nsys stats`' cuda_gpu_mem_time_sum / _size_sum.
    mem_time: BTreeMap<&'static str, Acc>,
    mem_size: BTreeMap<&'static str, Acc>,
    sync: BTreeMap<&'static str, SyncRow>,
    nvtx: FxHashMap<(u32, Domain, u32, &'static str), Acc>,
    nvtx_categories: BTreeSet<NvtxCategoryRow>,
    graphs: BTreeMap<(u32, u64), GraphAcc>,
    pairers: FxHashMap<u32, Pairer>,
    live: cuflight_trace::model::memory::LiveMemory,
    device_memory: MemoryUse,
    pinned_memory: MemoryUse,
    devices: BTreeMap<u32, Vec<DeviceRow>>,
    events: FxHashMap<u32, u64>,
    /// `record --sample 1/N`: per process, (N, steps recorded whole, time slices recorded whole).
    sampled: FxHashMap<u32, (u64, u64, u64)>,
    launches: FxHashMap<u32, Launches>,
    projection: super::projection::Projection,
    python: super::python::PythonAcc,
    kern_exec: super::kern_exec::KernExecAcc,
    collectives: super::collectives::CollectivesAcc,
    op_perf: super::op_perf::OpPerfAcc,
    gpu_metrics: super::gpu_metrics::GpuMetricsAcc,
    /// Each process's calls and the work they launched: the one join every table here takes.
    joins: FxHashMap<u32, cuflight_trace::model::launches::LaunchJoin>,
    kern_gb: super::kern_gb::KernGridAcc,
    errors: super::api_errors::ApiErrors,
    /// The timeline's first instant (its first drawn event), which error times count from.
    origin: Option<u64>,
    /// How the kernel tables name kernels.
    pub kernel_names: super::KernelNames,
}

impl StatsAcc {
    /// Notes where the timeline starts: every event of the trace, whether or not it is summarised.
    pub fn see(&mut self, e: &RawEvent) {
        if self.origin.is_none() && cuflight_trace::model::timeline::drawn(e) {
            self.origin = Some(e.start);
        }
    }

    /// Joins calls and the work they launched, for the tables that need the launch: a kernel's launch phases, an
    /// operator's kernels. Copies and memsets join too, so that a later kernel with a reused id is not taken for
    /// theirs.
    fn join(&mut self, key: u32, p: &Process, e: &RawEvent) {
        let join = self.joins.entry(key).or_default();
        match e.kind() {
            Some(EventKind::Api) => {
                join.api(p, e);
                self.op_perf.call(key, e);
            }
            Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset) => {
                let joined = join.work(e);
                if e.kind() == Some(EventKind::Kernel) {
                    self.collectives.kernel(key, p, e, joined.as_ref().map(|j| &j.call));
                }
                let Some(joined) = joined else { return };
                if e.kind() == Some(EventKind::Kernel) {
                    self.kern_exec.kernel(key, e, &joined.call);
                }
                self.op_perf.work(key, e, &joined.call);
            }
            Some(EventKind::Range) => {
                self.op_perf.range(key, p, e);
                self.collectives.range(key, p, (e.tid, e.start, e.end, e.name, e.as_range().operator_text));
            }
            Some(EventKind::Device) => self.op_perf.device(key, e),
            _ => {}
        }
    }

    /// One event of process `key` (`p` its facts and strings); events must come in time order.
    pub fn feed(&mut self, key: u32, p: &Process, e: &RawEvent) {
        self.see(e);
        *self.events.entry(key).or_default() += 1;
        if e.kind() == Some(EventKind::Sampled) {
            let s = self.sampled.entry(key).or_default();
            s.0 = e.as_sampled().1;
            *if e.is_sampled_slice() { &mut s.2 } else { &mut s.1 } += 1;
        }
        self.projection.feed(key, p, e);
        self.python.feed(key, p, e);
        self.join(key, p, e);
        self.kern_gb.feed(key, e);
        self.gpu_metrics.feed(key, p, e);
        if let Some(r) = self.pairers.entry(key).or_default().feed(e) {
            self.collectives.range(key, p, (r.tid, r.start, r.end, r.name, 0));
            let style = if r.async_range { "StartEnd" } else { "PushPop" };
            self.nvtx.entry((key, Domain::Nvtx(r.domain), r.name, style)).or_default().add(r.end - r.start);
            return;
        }
        match e.kind() {
            Some(EventKind::Kernel) => {
                self.kernels.entry((key, e.name)).or_default().add(e.duration());
                self.kernel_seen(key, p, e.correlation);
            }
            Some(EventKind::Api) => {
                self.api.entry((key, e.name)).or_default().add(e.duration());
                self.errors.feed(key, e);
                if !p.info.finished && e.correlation != 0 {
                    let launch = *self
                        .is_launch
                        .entry((key, e.name))
                        .or_insert_with(|| cuflight_format::calls::CallEffects::of(p.string(e.name)).launches_kernel());
                    if launch {
                        let l = self.launches.entry(key).or_default();
                        if !l.early.contains(&e.correlation) {
                            *l.waiting.entry(e.correlation).or_default() += 1;
                        }
                    }
                }
            }
            Some(EventKind::Memcpy) => {
                let copy = e.as_copy();
                let host = copy.host_memory().map_or("device", cupti_labels::memory_kind);
                let kind = cupti_labels::memcpy_kind(copy.kind);
                let row = self.memcpy.entry((kind, host)).or_insert_with(|| MemcpyRow {
                    kind: kind.to_string(),
                    host_memory: host.to_string(),
                    count: 0,
                    bytes: 0,
                    total_ns: 0,
                    gbps: 0.0,
                    async_count: 0,
                });
                row.count += 1;
                row.bytes += copy.bytes;
                row.total_ns += e.duration();
                row.async_count += copy.is_async as u64;
                let op = cupti_labels::memcpy_operation(copy.kind);
                self.mem_time.entry(op).or_default().add(e.duration());
                self.mem_size.entry(op).or_default().add(copy.bytes);
            }
            Some(EventKind::Memset) => {
                let memset = e.as_memset();
                let kind = cupti_labels::memory_kind(memset.memory);
                let row = self.memset.entry(kind).or_insert_with(|| MemsetRow {
                    kind: kind.to_string(),
                    count: 0,
                    bytes: 0,
                    total_ns: 0,
                });
                row.count += 1;
                row.bytes += memset.bytes;
                row.total_ns += e.duration();
                self.mem_time.entry("[CUDA memset]").or_default().add(e.duration());
                self.mem_size.entry("[CUDA memset]").or_default().add(memset.bytes);
            }
            Some(EventKind::Sync) => {
                let kind = cupti_labels::sync_kind(e.as_sync().kind);
                let row =
                    self.sync.entry(kind).or_insert_with(|| SyncRow { kind: kind.to_string(), count: 0, total_ns: 0 });
                row.count += 1;
                row.total_ns += e.duration();
            }
            Some(k @ (EventKind::Alloc | EventKind::Free)) => {
                let Some(change) = self.live.apply(key, e) else { return };
                let m = if change.device { &mut self.device_memory } else { &mut self.pinned_memory };
                if k == EventKind::Alloc {
                    m.malloc_count += 1;
                    m.alloc_bytes += e.as_mem_op().bytes;
                    m.peak_bytes = m.peak_bytes.max(change.live);
                } else {
                    m.free_count += 1;
                }
            }
            Some(EventKind::Device) => {
                let d = e.as_device();
                self.devices.entry(key).or_default().push(DeviceRow {
                    pid: p.info.pid,
                    device: e.device,
                    name: p.string(e.name).to_string(),
                    memory_bytes: d.memory_bytes,
                    compute_capability: format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
                    multiprocessors: d.multiprocessors,
                })
            }
            Some(EventKind::Range) => {
                let category = e.as_range().category;
                self.nvtx.entry((key, Domain::Imported(category), e.name, "Range")).or_default().add(e.duration());
            }
            Some(EventKind::GraphNode) => {
                let node = e.as_graph_node();
                let g = self.graphs.entry((key, node.graph_id)).or_default();
                let span = g.launches.entry(e.correlation).or_insert((e.start, e.end));
                *span = (span.0.min(e.start), span.1.max(e.end));
                if !node.is_node_level() {
                    // The launch as one record: its nodes and kernels are not known.
                    g.graph_level = true;
                } else {
                    g.nodes.insert(node.node_id);
                    // Kernels counted and timed; copies and memsets are nodes too.
                    if e.graph_node_op() == EventKind::Kernel {
                        g.kernels += 1;
                        g.kernel_ns += e.duration();
                    }
                }
                self.kernel_seen(key, p, e.correlation);
            }
            Some(EventKind::NvtxCategory) => {
                self.nvtx_categories.insert(NvtxCategoryRow {
                    domain: p.nvtx_domain(e.as_nvtx().domain).to_string(),
                    category: e.as_nvtx().id,
                    name: p.string(e.name).to_string(),
                });
            }
            Some(EventKind::NvtxMark) => {
                self.nvtx.entry((key, Domain::Nvtx(e.as_nvtx().domain), e.name, "Mark")).or_default().add(0);
            }
            _ => {}
        }
    }

    fn kernel_seen(&mut self, key: u32, p: &Process, correlation: u32) {
        if p.info.finished || correlation == 0 {
            return;
        }
        let l = self.launches.entry(key).or_default();
        if l.waiting.remove(&correlation).is_none() {
            l.early.insert(correlation);
        }
    }

    /// The tables, given every process of the trace (those without events get a row too).
    pub fn finish(self, processes: &BTreeMap<u32, Process>) -> Stats {
        let string = |key: u32, id: u32| processes.get(&key).map_or("", |p| p.string(id));
        let by_name = |map: FxHashMap<(u32, u32), Acc>| {
            let mut named: HashMap<String, Acc> = HashMap::new();
            for ((key, id), acc) in map {
                named.entry(string(key, id).to_string()).or_default().merge(&acc);
            }
            duration_rows(named)
        };
        let mut nvtx: BTreeMap<(String, String, &'static str), Acc> = BTreeMap::new();
        for ((key, domain, name, style), acc) in self.nvtx {
            let domain = match domain {
                Domain::Nvtx(id) => processes.get(&key).map_or("", |p| p.nvtx_domain(id)),
                Domain::Imported(id) => string(key, id),
            };
            nvtx.entry((domain.to_string(), string(key, name).to_string(), style)).or_default().merge(&acc);
        }
        // nsys's Time (%): of the time of every range listed (marks take none).
        let range_ns: u64 = nvtx.values().map(|a| a.total).sum();
        let (nvtx_gpu_proj, nvtx_kern) = projection_rows(self.projection, processes, self.kernel_names);
        let names = self.kernel_names;
        // Categories judge kernels by their full names (a namespace tells ATen's from cuDNN's), whatever the form.
        let mut full_names = HashMap::new();
        let mut kernels = HashMap::new();
        for ((key, id), acc) in self.kernels {
            let Some(p) = processes.get(&key) else { continue };
            if names != super::KernelNames::Full {
                full_names.entry(p.string(id).to_string()).or_insert_with(Acc::default).merge(&acc);
            }
            kernels.entry(names.of(p, id).to_string()).or_insert_with(Acc::default).merge(&acc);
        }
        let kernels = duration_rows(kernels);
        let full_names = if names == super::KernelNames::Full { None } else { Some(duration_rows(full_names)) };
        // A kind is unknown only if no process recorded it.
        let mut not_recorded: Vec<NotRecordedRow> = Vec::new();
        if let Some(first) = processes.values().next() {
            for (kind, why) in &first.info.not_recorded {
                if processes.values().all(|p| p.info.not_recorded.iter().any(|(k, _)| k == kind)) {
                    not_recorded.push(NotRecordedRow { kind: kind.clone(), why: why.clone() });
                }
            }
        }
        let mut rows = Vec::new();
        let mut dropped: u64 = 0;
        for (&key, p) in processes {
            // Records lost only: calls in flight when recording was armed were not lost (they began before it)
            // and are counted apart (`unseen_begin`).
            dropped = dropped.saturating_add(p.info.drops.total()).saturating_add(p.refused);
            let launches_without_kernel = self.launches.get(&key).map_or(0, |l| l.waiting.values().sum::<u64>());
            let mut row = process_row(p, self.events.get(&key).copied().unwrap_or(0), launches_without_kernel);
            (row.sample_one_in, row.sampled_steps, row.sampled_slices) =
                self.sampled.get(&key).copied().unwrap_or_default();
            rows.push(row);
        }
        let mut device_memory = self.device_memory;
        let mut pinned_memory = self.pinned_memory;
        device_memory.live_bytes_at_end = self.live.device();
        pinned_memory.live_bytes_at_end = self.live.pinned();
        let op_perf = self.op_perf.finish(processes);
        let mut stats = Stats {
            categories: Vec::new(),
            collectives: self.collectives.finish(processes),
            kernels,
            api: by_name(self.api),
            memcpy: self
                .memcpy
                .into_values()
                .map(|mut r| {
                    r.gbps = if r.total_ns == 0 { 0.0 } else { r.bytes as f64 / r.total_ns as f64 };
                    r
                })
                .collect(),
            memset: self.memset.into_values().collect(),
            memory: MemoryStats { device: device_memory, pinned_host: pinned_memory },
            nvtx: nvtx
                .into_iter()
                .map(|((domain, name, style), a)| NvtxRow {
                    domain,
                    name,
                    kind: if style == "Mark" { "mark" } else { "range" },
                    style,
                    percent: if range_ns == 0 { 0.0 } else { 100.0 * a.total as f64 / range_ns as f64 },
                    time: Durations::of(&a),
                })
                .collect(),
            gpu_mem_time: duration_rows(self.mem_time.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
            gpu_mem_size: {
                let mut by_size: Vec<(&'static str, Acc)> = self.mem_size.into_iter().collect();
                by_size.sort_by(|a, b| b.1.total.cmp(&a.1.total).then_with(|| a.0.cmp(b.0)));
                by_size
            }
            .into_iter()
            .map(|(op, a)| MemSizeRow {
                operation: op.to_string(),
                count: a.count,
                total_bytes: a.total,
                avg_bytes: a.avg(),
                median_bytes: a.median(),
                min_bytes: a.min,
                max_bytes: a.max,
                stddev_bytes: a.stddev(),
            })
            .collect(),
            nvtx_gpu_proj,
            nvtx_kern,
            nvtx_categories: self.nvtx_categories.into_iter().collect(),
            triton: Vec::new(),
            graphs: self
                .graphs
                .into_iter()
                .map(|((pid, graph_id), g)| GraphRow {
                    pid,
                    graph_id,
                    launches: g.launches.len() as u64,
                    kernels: g.kernels,
                    nodes: g.nodes.len() as u64,
                    kernel_ns: g.kernel_ns,
                    replay_ns: g.launches.values().map(|(s, e)| e.saturating_sub(*s)).sum(),
                    graph_level: g.graph_level,
                })
                .collect(),
            sync: self.sync.into_values().collect(),
            python_sync: self.python.finish(processes),
            kern_exec: self.kern_exec.finish(processes, names),
            gemm_perf: op_perf.gemm,
            attention_perf: op_perf.attention,
            gpu_metrics: self.gpu_metrics.finish(|k| processes.get(&k)),
            kern_gb: self.kern_gb.finish(processes, names),
            gpu_sum: Vec::new(),
            api_gpu_sum: Vec::new(),
            api_errors: self.errors.rows(processes.iter().map(|(&k, p)| (k, p)), self.origin.unwrap_or(0)),
            dropped,
            not_recorded,
            processes: rows,
            devices: self.devices.into_values().flatten().collect(),
            rocm: !processes.is_empty() && processes.values().all(|p| p.rocm),
        };
        use super::combined::{combine, API, KERNEL, MEMORY};
        stats.gpu_sum = combine(&[(KERNEL, &stats.kernels), (MEMORY, &stats.gpu_mem_time)]);
        stats.api_gpu_sum = combine(&[(API, &stats.api), (KERNEL, &stats.kernels), (MEMORY, &stats.gpu_mem_time)]);
        let by_full_name = full_names.as_ref().unwrap_or(&stats.kernels);
        stats.categories = super::categories::category_rows(by_full_name, &stats.memcpy, &stats.memset);
        stats.triton = super::triton::triton_rows(by_full_name);
        stats
    }
}

fn duration_rows(map: HashMap<String, Acc>) -> Vec<DurationRow> {
    let all: u64 = map.values().map(|a| a.total).sum();
    let mut rows: Vec<DurationRow> = map.into_iter().map(|(name, a)| DurationRow::of(name, &a, all)).collect();
    rows.sort_by(|a, b| b.time.total_ns.cmp(&a.time.total_ns).then_with(|| a.name.cmp(&b.name)));
    rows
}

/// The nvtx_gpu_proj_sum and nvtx_kern_sum rows, merged across processes by (domain, range[, kernel]) names.
fn projection_rows(
    mut proj: super::projection::Projection,
    processes: &BTreeMap<u32, Process>,
    kernel_names: super::KernelNames,
) -> (Vec<NvtxProjRow>, Vec<NvtxKernRow>) {
    proj.flush();
    let names = |key: u32, domain: u64, name: u32| {
        processes
            .get(&key)
            .map_or((String::new(), String::new()), |p| (p.nvtx_domain(domain).to_string(), p.string(name).to_string()))
    };
    let mut ranges: BTreeMap<(String, String), super::projection::Summary> = BTreeMap::new();
    for ((key, domain, name), s) in proj.ranges {
        let r = ranges.entry(names(key, domain, name)).or_default();
        r.proj.merge(&s.proj);
        r.range.merge(&s.range);
        r.ops += s.ops;
        r.levels += s.levels;
        r.children += s.children;
    }
    let mut rows: Vec<NvtxProjRow> = ranges
        .into_iter()
        .map(|((domain, name), s)| {
            let n = s.proj.count.max(1) as f64;
            NvtxProjRow {
                domain,
                name,
                total_proj_ns: s.proj.total,
                total_range_ns: s.range.total,
                instances: s.proj.count,
                avg_ns: s.proj.avg(),
                median_ns: s.proj.median(),
                min_ns: s.proj.min,
                max_ns: s.proj.max,
                stddev_ns: s.proj.stddev(),
                total_gpu_ops: s.ops,
                avg_gpu_ops: s.ops as f64 / n,
                avg_range_level: s.levels as f64 / n,
                avg_children: s.children as f64 / n,
            }
        })
        .collect();
    rows.sort_by(|a, b| b.total_proj_ns.cmp(&a.total_proj_ns).then_with(|| a.name.cmp(&b.name)));
    let mut kernels: BTreeMap<(String, String, String), Acc> = BTreeMap::new();
    for ((key, domain, range, kernel), d) in proj.kernels {
        let (domain, range) = names(key, domain, range);
        let kernel = processes.get(&key).map_or(String::new(), |p| kernel_names.of(p, kernel).to_string());
        kernels.entry((domain, range, kernel)).or_default().merge(&d);
    }
    let mut kern: Vec<NvtxKernRow> = kernels
        .into_iter()
        .map(|((domain, range, kernel), d)| NvtxKernRow { domain, range, kernel, time: Durations::of(&d) })
        .collect();
    kern.sort_by(|a, b| (&a.range, b.time.total_ns, &a.kernel).cmp(&(&b.range, a.time.total_ns, &b.kernel)));
    (rows, kern)
}

fn process_row(p: &Process, events: u64, launches_without_kernel: u64) -> ProcessRow {
    ProcessRow {
        launches_without_kernel,
        sample_one_in: 0,
        sampled_steps: 0,
        sampled_slices: 0,
        flush_period_ms: p.info.flush_period_ms,
        rings_refused: p.info.rings_refused,
        pid: p.info.pid,
        ppid: p.info.ppid,
        rank: p.rank,
        local_rank: p.info.local_rank,
        world_size: p.info.world_size,
        command: p.info.cmdline.join(" "),
        host: p.info.host.clone(),
        cupti_version: p.info.cupti_version,
        status: p.info.status.clone(),
        finished: p.info.finished,
        injected_late: p.info.injected_late,
        nvtx_tables_late: p.info.nvtx_tables_late,
        nvtx_tables_foreign: p.info.nvtx_tables_foreign,
        events,
        drops: p.info.drops,
        unseen_begin: p.info.unseen_begin,
        refused: p.refused,
        traced: p.info.traced.clone(),
        program_held_ns: p.info.program_held_ns,
        delivery_held_ns: p.info.delivery_held_ns,
        python_stacks: p.info.python_stacks,
        python_stack_ns: p.info.python_stack_ns,
        python_unread: cuflight_format::python_reader::describe(p.info.python_reader),
        records_unused: p
            .info
            .records_unused
            .iter()
            .map(|(class, skipped, incomplete)| UnusedRow {
                class: class.clone(),
                skipped: *skipped,
                incomplete: *incomplete,
            })
            .collect(),
        buffers_grown: p.info.buffers_grown,
        buffers_refused: p.info.buffers_refused,
        device_clock: if p.info.device_clock_monotonic {
            "monotonic"
        } else if p.clock.is_identity() {
            "none"
        } else {
            "aligned"
        }
        .to_string(),
    }
}
