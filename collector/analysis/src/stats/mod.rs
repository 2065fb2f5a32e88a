//! `cuflight stats`: what `nsys stats` reports, from a cuflight trace: kernels, CUDA API calls, memcpy by kind
//! and host memory, memset, device and pinned memory, NVTX ranges and marks, synchronisation, drops, processes.

mod accumulate;
pub mod api_errors;
pub mod categories;
pub mod collectives;
mod columns;
pub mod combined;
mod dist;
pub mod event_trace;
pub mod filter;
pub mod gpu_metrics;
mod grouping;
pub mod kern_exec;
pub mod kern_gb;
pub mod kernel_names;
pub mod op_perf;
mod projection;
mod pushpop_trace;
pub mod python;
mod render;
mod reports;
mod row_stream;
pub mod schema;
pub mod triton;

use crate::table::Table;
pub use accumulate::StatsAcc;
use cuflight_trace::model::source::EventSource;
use cuflight_trace::model::trace::{Process, Trace};
pub use kernel_names::KernelNames;
pub use reports::{Choice, Report, Style};
use serde::Serialize;

/// Count and duration summary of one name.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct DurationRow {
    /// The kernel's, call's or operation's name.
    pub name: String,
    #[serde(flatten)]
    pub time: Durations,
    /// Share of the table's total time, in percent.
    pub percent: f64,
}

/// Count and spread of a set of durations (ns): the figures every duration summary row holds, flattened into it in
/// JSON (`count`, `total_ns`, `avg_ns`, `median_ns`, `min_ns`, `max_ns`, `stddev_ns`).
#[derive(Debug, Clone, Copy, Default, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Durations {
    /// How many there were.
    pub count: u64,
    /// Their durations summed.
    pub total_ns: u64,
    /// The mean duration.
    pub avg_ns: u64,
    /// Exact up to 4096 instances, within 0.05% beyond (see `dist`).
    pub median_ns: u64,
    /// The shortest.
    pub min_ns: u64,
    /// The longest.
    pub max_ns: u64,
    /// Sample standard deviation.
    pub stddev_ns: u64,
}

impl Durations {
    fn of(d: &dist::Dist) -> Durations {
        Durations {
            count: d.count,
            total_ns: d.total,
            avg_ns: d.avg(),
            median_ns: d.median(),
            min_ns: d.min,
            max_ns: d.max,
            stddev_ns: d.stddev(),
        }
    }

    /// Total and count, then avg, median, min, max and stddev: nsys's cells (after any share).
    fn cells(&self) -> Vec<String> {
        columns::stat_cells(
            self.total_ns,
            self.count,
            [self.avg_ns, self.median_ns, self.min_ns, self.max_ns, self.stddev_ns],
        )
    }
}

impl DurationRow {
    /// `d`'s summary under `name`; `all`: the table's total time, which its share is of.
    fn of(name: String, d: &dist::Dist, all: u64) -> DurationRow {
        let percent = if all == 0 { 0.0 } else { 100.0 * d.total as f64 / all as f64 };
        DurationRow { name, time: Durations::of(d), percent }
    }
}

/// Sizes of one kind of copy (or memset), as `nsys stats`' cuda_gpu_mem_size_sum.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct MemSizeRow {
    /// The operation as nsys names it ("[CUDA memcpy Host-to-Device]", "[CUDA memset]").
    pub operation: String,
    /// How many there were.
    pub count: u64,
    /// Bytes copied or set, summed.
    pub total_bytes: u64,
    /// The mean size.
    pub avg_bytes: u64,
    /// The median size.
    pub median_bytes: u64,
    /// The smallest.
    pub min_bytes: u64,
    /// The largest.
    pub max_bytes: u64,
    /// The sample standard deviation of the sizes.
    pub stddev_bytes: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct NvtxRow {
    /// The NVTX domain ("default" for the default domain).
    pub domain: String,
    /// The range's or mark's message.
    pub name: String,
    /// "range" or "mark".
    pub kind: &'static str,
    /// As nsys's nvtx_sum says it: "PushPop" or "StartEnd" (NVTX ranges), "Range" (an imported trace's complete
    /// ranges: torch.profiler's annotations), "Mark".
    pub style: &'static str,
    /// Share of the time of every range in the table (nsys's Time (%)); 0 for marks.
    pub percent: f64,
    #[serde(flatten)]
    pub time: Durations,
}

/// An NVTX push/pop range projected onto the GPU (nsys's nvtx_gpu_proj_sum): from the start of the first GPU
/// operation launched inside it to the end of the last; the statistics are of those projections.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct NvtxProjRow {
    /// The NVTX domain ("default" for the default domain).
    pub domain: String,
    /// The range's message.
    pub name: String,
    /// The projections' durations summed: each instance from the start of the first GPU operation launched inside it to
    /// the end of the last.
    pub total_proj_ns: u64,
    /// The ranges' own (host) durations summed, over the same instances.
    pub total_range_ns: u64,
    /// Instances that launched GPU work (those with a projection).
    pub instances: u64,
    /// The mean projection.
    pub avg_ns: u64,
    /// The median projection.
    pub median_ns: u64,
    /// The shortest projection.
    pub min_ns: u64,
    /// The longest projection.
    pub max_ns: u64,
    /// The sample standard deviation of the projections.
    pub stddev_ns: u64,
    /// GPU operations (kernels, copies, memsets) launched inside the instances, summed.
    pub total_gpu_ops: u64,
    /// GPU operations an instance, on average.
    pub avg_gpu_ops: f64,
    /// Nesting depth on its thread (0: outermost), on average.
    pub avg_range_level: f64,
    /// Ranges nested directly inside an instance, on average.
    pub avg_children: f64,
}

/// Kernels launched inside an NVTX range, per (range, kernel) (nsys's nvtx_kern_sum).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct NvtxKernRow {
    /// The NVTX domain ("default" for the default domain).
    pub domain: String,
    /// The range's message.
    pub range: String,
    /// The kernel's name.
    pub kernel: String,
    #[serde(flatten)]
    pub time: Durations,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct MemcpyRow {
    /// The direction, as CUPTI names it: HtoD, DtoH, DtoD, HtoH, PtoP (device to another device), or with A for a CUDA
    /// array.
    pub kind: String,
    /// Host side of the copy: pageable, pinned, managed; "device" when both sides are on the device.
    pub host_memory: String,
    /// Copies of this kind.
    pub count: u64,
    /// Bytes copied, summed.
    pub bytes: u64,
    /// Their device time, summed.
    pub total_ns: u64,
    /// Bytes over device time: GB/s.
    pub gbps: f64,
    /// Those made by an asynchronous call (cudaMemcpyAsync and the like).
    pub async_count: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct MemsetRow {
    /// The memory set: device, pinned, pageable, managed, array.
    pub kind: String,
    /// Memsets of this kind.
    pub count: u64,
    /// Bytes set, summed.
    pub bytes: u64,
    /// Their device time, summed.
    pub total_ns: u64,
}

#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema, PartialEq)]
pub struct MemoryUse {
    /// Allocations, every process of the trace together.
    pub malloc_count: u64,
    /// Frees.
    pub free_count: u64,
    /// Bytes allocated, summed over the allocations.
    pub alloc_bytes: u64,
    /// The most bytes live at once, every process together.
    pub peak_bytes: u64,
    /// Bytes still allocated when the trace ends.
    pub live_bytes_at_end: u64,
}

/// Device memory at top level (as the JSON schema promises), pinned host memory beside it.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema, PartialEq)]
pub struct MemoryStats {
    #[serde(flatten)]
    pub device: MemoryUse,
    /// Page-locked host memory (cudaMallocHost, cudaHostAlloc) the same way.
    pub pinned_host: MemoryUse,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct SyncRow {
    /// The synchronisation: cudaEventSynchronize, cudaStreamWaitEvent, cudaStreamSynchronize or cudaDeviceSynchronize
    /// (context synchronisation).
    pub kind: String,
    /// How many there were.
    pub count: u64,
    /// Their durations summed: the time the host (or, for a stream wait, the stream) waited.
    pub total_ns: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct ProcessRow {
    /// The process's pid as the recording saw it.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// Its command line, arguments joined by spaces.
    pub command: String,
    /// The host it ran on.
    pub host: String,
    /// `cuptiGetVersion` (0: the process never started CUDA, or an imported trace that does not say).
    pub cupti_version: u32,
    /// Empty, or why the agent disabled itself in this process.
    pub status: String,
    /// The agent flushed and finished at exit (false: the process died abruptly, e.g. SIGKILL).
    pub finished: bool,
    /// The agent was loaded into the running process (`attach --inject`): NVTX ranges come only from the
    /// libraries whose NVTX tables it found late (`nvtx_tables_late`); `nvtx_tables_foreign` were another tool's.
    pub injected_late: bool,
    /// Libraries whose NVTX tables the late-loaded agent found and took over.
    pub nvtx_tables_late: u32,
    /// NVTX tables that another tool had already claimed (their ranges are not recorded).
    pub nvtx_tables_foreign: u32,
    /// Kernel launches of this process with no kernel record: for a process that ended without its final flush
    /// (SIGKILL, `_exit`), the device work lost with it (0 for a process that finished).
    pub launches_without_kernel: u64,
    /// `record --sample 1/N`: N and the steps recorded whole (0, 0 for a trace recorded whole). The tables hold
    /// those steps' work only: `cuflight report` extrapolates to every step.
    #[serde(skip_serializing_if = "is_zero")]
    pub sample_one_in: u64,
    /// `record --sample 1/N`: the steps recorded whole.
    #[serde(skip_serializing_if = "is_zero")]
    pub sampled_steps: u64,
    /// ... and the time slices recorded whole while the program had marked no step.
    #[serde(skip_serializing_if = "is_zero")]
    pub sampled_slices: u64,
    /// For such a process: its flush period, the longest stretch of device records it can have lost.
    pub flush_period_ms: u32,
    /// Events of this process in the trace.
    pub events: u64,
    /// Records lost, by cause: each lost record is counted once, in one cause.
    pub drops: cuflight_format::file::Drops,
    /// API calls the agent saw end but not begin (in flight when recording was armed): left out by the agent.
    pub unseen_begin: u64,
    /// Events this reader refused: no known start, or an end before the start (written by an older agent).
    pub refused: u64,
    /// What the agent traced (`--trace`); empty when unknown.
    pub traced: String,
    /// Backpressure, ns: the program's threads held waiting for room in a full ring, and the agent's own threads
    /// (CUPTI's delivery, the counter sampler) held waiting for the collector (the price of losing nothing).
    pub program_held_ns: u64,
    /// The agent's own threads (CUPTI's delivery, the counter sampler) held waiting for the collector, ns.
    pub delivery_held_ns: u64,
    /// Python stacks the agent read, and the ns the program spent reading them.
    pub python_stacks: u64,
    /// The time the program spent reading Python stacks, ns.
    pub python_stack_ns: u64,
    /// Why no Python stacks were read in this Python process (an unknown release, a free-threaded build...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python_unread: Option<String>,
    /// Threads that recorded nothing because shared memory for their ring could not be reserved.
    pub rings_refused: u64,
    /// Activity records kept out, by class: records too short to read, and records with zero or unfinished
    /// timestamps (e.g. from the forced flush at exit).
    pub records_unused: Vec<UnusedRow>,
    /// CUPTI buffers the agent allocated beyond its pool, and requests it refused at its cap.
    pub buffers_grown: u64,
    /// CUPTI buffer requests the agent refused at its cap.
    pub buffers_refused: u64,
    /// How device timestamps were put on the host clock: "monotonic" (CUPTI stamped CLOCK_MONOTONIC), "aligned"
    /// (piecewise-linear over the clock pairs), or "none" (no device work or no pair).
    pub device_clock: String,
    /// Distributed rank, local rank and world size (0: unknown), from the launcher's environment or the trace.
    pub rank: Option<u32>,
    /// The rank on its node (LOCAL_RANK), when known.
    pub local_rank: Option<u32>,
    /// Processes in the job (WORLD_SIZE; 0: unknown).
    pub world_size: u32,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct UnusedRow {
    /// The CUPTI activity record class (kernel, memcpy, memset, ...).
    pub class: String,
    /// Records too short to read.
    pub skipped: u64,
    /// Records with zero or unfinished timestamps (e.g. from the forced flush at exit).
    pub incomplete: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct DeviceRow {
    /// The process that used the device.
    pub pid: u32,
    /// The CUDA device ordinal in that process.
    pub device: u32,
    /// The device's name ("NVIDIA H100 80GB HBM3").
    pub name: String,
    /// Its global memory.
    pub memory_bytes: u64,
    /// Its compute capability, major.minor ("9.0").
    pub compute_capability: String,
    /// Its streaming multiprocessors.
    pub multiprocessors: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Stats {
    pub kernels: Vec<DurationRow>,
    /// Device time by kind of work (gemm, attention, ..., memcpy, memset), largest first.
    pub categories: Vec<categories::CategoryRow>,
    /// Communication kernels' time by the collective each ran (all_reduce, all_to_all, ...; [`collectives`]), their
    /// shares of all communication time; empty where no collective ran.
    pub collectives: Vec<collectives::CollectiveRow>,
    pub api: Vec<DurationRow>,
    pub memcpy: Vec<MemcpyRow>,
    pub memset: Vec<MemsetRow>,
    /// Copies and memsets by operation ("[CUDA memcpy Host-to-Device]", "[CUDA memset]"): durations and sizes.
    pub gpu_mem_time: Vec<DurationRow>,
    pub gpu_mem_size: Vec<MemSizeRow>,
    pub memory: MemoryStats,
    pub nvtx: Vec<NvtxRow>,
    pub nvtx_gpu_proj: Vec<NvtxProjRow>,
    pub nvtx_kern: Vec<NvtxKernRow>,
    /// NVTX category names (`nvtxNameCategory*`), by domain and category id.
    pub nvtx_categories: Vec<NvtxCategoryRow>,
    /// CUDA graphs whose nodes ran: launches (distinct launch calls), kernels, their total time.
    pub graphs: Vec<GraphRow>,
    /// torch.compile's Triton kernels by kind and fused operations ([`triton`]).
    pub triton: Vec<triton::TritonRow>,
    pub sync: Vec<SyncRow>,
    /// Calls that wait for the GPU, copy or allocate, by the Python source line behind them.
    pub python_sync: Vec<python::PythonSyncRow>,
    /// Each kernel with the call that launched it: API, queue and kernel time (nsys's cuda_kern_exec_sum).
    pub kern_exec: Vec<kern_exec::KernExecRow>,
    /// Kernel time by name and launch configuration (nsys's cuda_gpu_kern_gb_sum).
    pub kern_gb: Vec<kern_gb::KernGridRow>,
    /// GEMM and attention operators by shape with their achieved TFLOP/s and TB/s (traces that recorded shapes).
    pub gemm_perf: Vec<op_perf::gemm::GemmPerfRow>,
    pub attention_perf: Vec<op_perf::attention::AttentionPerfRow>,
    /// Device counters (recorded with `--gpu-metrics`) by device, kind of work and kernel name.
    pub gpu_metrics: Vec<gpu_metrics::GpuMetricsRow>,
    /// Kernels and memory operations together (nsys's cuda_gpu_sum), and with the CUDA API calls (cuda_api_gpu_sum).
    pub gpu_sum: Vec<combined::CombinedRow>,
    pub api_gpu_sum: Vec<combined::CombinedRow>,
    /// Calls that returned an error, by process, API and code: failures first (sticky, out of memory, other),
    /// then the expected answers; most frequent first within each.
    pub api_errors: Vec<ApiErrorRow>,
    /// Total records lost, all causes and processes (see `processes[].drops` and `refused`). Calls in flight when
    /// recording was armed (`processes[].unseen_begin`) are not lost records and not in it.
    pub dropped: u64,
    /// Kinds no process of the trace recorded (an import made without them): their tables are not zeros but
    /// unknown.
    pub not_recorded: Vec<NotRecordedRow>,
    pub processes: Vec<ProcessRow>,
    pub devices: Vec<DeviceRow>,
    /// Every process was recorded on ROCm: the tables' titles speak of HIP (their report names stay nsys's).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rocm: bool,
}

/// The calls of one API name that returned one error code.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct ApiErrorRow {
    /// The process that made the calls.
    pub pid: u32,
    /// The API call's name.
    pub api: String,
    /// The error code it returned (cudaError_t or CUresult).
    pub code: u32,
    /// CUDA's name for the code (the runtime's for a runtime call, the driver's for a driver call).
    pub error: String,
    /// sticky (a device fault: every later call fails), out_of_memory, error, or expected (an answer such as
    /// "not ready" from a query: [`cuflight_trace::model::cuda_errors::ErrorClass`]).
    pub class: cuflight_trace::model::cuda_errors::ErrorClass,
    /// Calls that returned it.
    pub count: u64,
    /// When the first and the last of them started, ns after the timeline's start.
    pub first_ns: u64,
    /// When the last of them started, ns after the timeline's start.
    pub last_ns: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct NotRecordedRow {
    /// The kind of record: "memory", "nvtx", "memset", "errors" (CUDA return codes) or "python" (Python stacks).
    pub kind: String,
    /// Why the trace has none (which importer, which option left them out).
    pub why: String,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct GraphRow {
    /// The process that launched the graph.
    pub pid: u32,
    /// CUPTI's id of the graph (of the executable graph, as its node records carry it).
    pub graph_id: u64,
    /// Distinct launches of it (cudaGraphLaunch calls) whose work was recorded.
    pub launches: u64,
    /// Kernel nodes that ran, over every launch.
    pub kernels: u64,
    /// Distinct nodes seen running.
    pub nodes: u64,
    /// The kernel nodes' device time, summed.
    pub kernel_ns: u64,
    /// Each launch's first start to last end, summed (the mean replay time is this over `launches`).
    pub replay_ns: u64,
    /// Traced at graph level (`--trace graphs`): one record per launch, so `kernels`, `nodes` and `kernel_ns` are
    /// not known (0).
    pub graph_level: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq, PartialOrd, Eq, Ord)]
pub struct NvtxCategoryRow {
    /// The NVTX domain ("default" for the default domain).
    pub domain: String,
    /// The category's id.
    pub category: u64,
    /// The name the program gave it.
    pub name: String,
}

impl Stats {
    /// The tables of a loaded trace.
    pub fn compute(trace: &Trace) -> Stats {
        let mut acc = StatsAcc::default();
        let mut merged: Vec<(u32, &Process, &cuflight_format::RawEvent)> =
            trace.processes.iter().flat_map(|(&k, p)| p.events.iter().map(move |e| (k, p, e))).collect();
        // The order of [`cuflight_trace::model::source`]: start, then process key (a stable sort keeps file order within both).
        merged.sort_by_key(|(k, _, e)| (e.start, *k));
        for (k, p, e) in merged {
            acc.feed(k, p, e);
        }
        acc.finish(&trace.processes)
    }

    /// The tables of any trace, streamed: memory is bounded by the tables, not by the trace.
    pub fn compute_source(source: &mut EventSource) -> Result<Stats, cuflight_trace::model::trace::TraceError> {
        Stats::compute_source_naming(source, KernelNames::Full, None)
    }

    /// [`Stats::compute_source`], kernels named in the form given (categories judge the full names), over the
    /// events `windows` keeps (all without).
    pub fn compute_source_naming(
        source: &mut EventSource,
        kernel_names: KernelNames,
        windows: Option<&filter::Windows>,
    ) -> Result<Stats, cuflight_trace::model::trace::TraceError> {
        let mut acc = StatsAcc::default();
        acc.kernel_names = kernel_names;
        match windows {
            Some(w) => {
                let mut kept = filter::Kept::new(w);
                source.for_each(|k, p, e| {
                    acc.see(e);
                    if kept.keeps(k, p, e) {
                        acc.feed(k, p, e)
                    }
                })?
            }
            None => source.for_each(|k, p, e| acc.feed(k, p, e))?,
        }
        Ok(acc.finish(&source.processes))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn to_table(&self) -> String {
        self.render(&Report::ALL, Style::Table)
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[cfg(test)]
mod tests;
