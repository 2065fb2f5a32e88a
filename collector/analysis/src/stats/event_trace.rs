//! The reports of `nsys stats` with a row per event, under its names and columns, streamed in one pass over the
//! trace (memory holds the launch join and names, never the rows):
//!
//! - `cuda_gpu_trace`: every kernel, copy and memset by start, with launch configuration, bytes, throughput,
//!   memory kinds, device and stream.
//! - `cuda_api_trace`: every CUDA runtime and driver call by start, with return code, correlation id and thread.
//! - `cuda_kern_exec_trace`: every kernel with the call that launched it, by the call's start: API, queue, kernel
//!   and total time ([`LaunchTimes`], the rule of `cuda_kern_exec_sum`).
//! - `nvtx_pushpop_trace`: every NVTX push/pop range with its place in its thread's nest
//!   ([`pushpop_trace`]).
//!
//! Times are ns from the start of the trace's timeline (as the report's `+s` times and Perfetto's UI count; nsys
//! counts from its session's start). nsys's context and green-context columns are left out (CUPTI's context id is
//! not recorded) and a PID column is added (a trace may hold several processes). A row's thread name is the one
//! known when the row is written: imports name threads at the start, a program's `nvtxNameOsThread` names them
//! from the call on. Kernel rows of `cuda_kern_exec_trace` come when the kernel has run, so they are in
//! the order of the kernels' starts, which is the order of their calls on one stream.

use super::filter::{Kept, Windows};
use super::kern_exec::LaunchTimes;
use super::kernel_names::KernelNames;
use super::pushpop_trace;
use super::reports::{Report, Style};
use super::row_stream::{Cell, Column, RowStream};
use crate::table::TimeUnit;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::cupti_labels::{memcpy_operation, memory_kind_label};
use cuflight_trace::model::launches::LaunchJoin;
use cuflight_trace::model::source::EventSource;
use cuflight_trace::model::trace::{Process, TraceError};
use rustc_hash::FxHashMap;
use std::io::{self, Write};

#[derive(Debug, thiserror::Error)]
pub enum EventTraceError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("cannot write the {report} table: {source}")]
    Write { report: &'static str, source: io::Error },
}

const GPU_COLUMNS: &[Column] = &[
    ("Start (ns)", "start_ns"),
    ("Duration (ns)", "duration_ns"),
    ("CorrId", "correlation"),
    ("GrdX", "grid_x"),
    ("GrdY", "grid_y"),
    ("GrdZ", "grid_z"),
    ("BlkX", "block_x"),
    ("BlkY", "block_y"),
    ("BlkZ", "block_z"),
    ("Reg/Trd", "registers_per_thread"),
    ("StcSMem (B)", "static_shared_bytes"),
    ("DymSMem (B)", "dynamic_shared_bytes"),
    ("Bytes (B)", "bytes"),
    ("Throughput (B/s)", "bytes_per_second"),
    ("SrcMemKd", "source_memory"),
    ("DstMemKd", "destination_memory"),
    ("PID", "pid"),
    ("Device", "device"),
    ("Strm", "stream"),
    ("Name", "name"),
];

const API_COLUMNS: &[Column] = &[
    ("Start (ns)", "start_ns"),
    ("Duration (ns)", "duration_ns"),
    ("Name", "name"),
    ("Result", "result"),
    ("CorrID", "correlation"),
    ("Pid", "pid"),
    ("Tid", "tid"),
    ("Thread Name", "thread_name"),
];

const KERN_EXEC_COLUMNS: &[Column] = &[
    ("API Start (ns)", "api_start_ns"),
    ("API Dur (ns)", "api_ns"),
    ("Queue Start (ns)", "queue_start_ns"),
    ("Queue Dur (ns)", "queue_ns"),
    ("Kernel Start (ns)", "kernel_start_ns"),
    ("Kernel Dur (ns)", "kernel_ns"),
    ("Total Dur (ns)", "total_ns"),
    ("PID", "pid"),
    ("TID", "tid"),
    ("DevId", "device"),
    ("API Function", "api"),
    ("GridXYZ", "grid"),
    ("BlockXYZ", "block"),
    ("Kernel Name", "kernel"),
];

/// The title, JSON key and columns of a per-event report; None for a summary.
pub fn layout(report: Report) -> Option<(&'static str, &'static [Column])> {
    Some(match report {
        Report::GpuTrace => ("CUDA GPU trace: kernels, copies and memsets by start [cuda_gpu_trace]", GPU_COLUMNS),
        Report::ApiTrace => ("CUDA API trace: calls by start [cuda_api_trace]", API_COLUMNS),
        Report::KernExecTrace => {
            ("CUDA kernel launch and execution time, each launch [cuda_kern_exec_trace]", KERN_EXEC_COLUMNS)
        }
        Report::NvtxPushPopTrace => {
            ("NVTX push/pop ranges, each instance [nvtx_pushpop_trace]", pushpop_trace::COLUMNS)
        }
        _ => return None,
    })
}

/// How a per-event report is written and what of the trace it covers.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub style: Style,
    pub unit: TimeUnit,
    pub kernel_names: KernelNames,
    /// Only events that start inside these stretches (`--filter-nvtx`, `--filter-time`).
    pub windows: Option<Windows>,
}

/// Writes `report` (a per-event one) over one pass of `source`; the rows written.
pub fn write(
    report: Report,
    options: &Options,
    source: &mut EventSource,
    out: &mut dyn Write,
) -> Result<u64, EventTraceError> {
    let name = report.names().0;
    let Some((title, columns)) = layout(report) else { return Ok(0) };
    let mut rows = RowStream::new(out, options.style, title, report.names().1, columns, options.unit);
    let mut state = PassState { kernel_names: options.kernel_names, ..PassState::default() };
    if report == Report::NvtxPushPopTrace {
        // A range passes a filter by its start.
        let (mut trace, mut origin) = (pushpop_trace::PushPopTrace::default(), None);
        source.for_each(|key, p, e| {
            if origin.is_none() && cuflight_trace::model::timeline::drawn(e) {
                origin = Some(e.start);
            }
            trace.feed(key, p, e, origin.unwrap_or(0), |start, cells| {
                if options.windows.as_ref().is_none_or(|w| w.holds(start)) {
                    rows.row(cells);
                }
            });
        })?;
        return rows.finish().map_err(|source| EventTraceError::Write { report: name, source });
    }
    let mut kept = options.windows.as_ref().map(Kept::new);
    source.for_each(|key, p, e| {
        // Every event feeds the joins and names; rows only where the filter keeps them.
        let keep = kept.as_mut().is_none_or(|k| k.keeps(key, p, e));
        if let Some(cells) = state.row(report, key, p, e) {
            if keep {
                rows.row(&cells);
            }
        }
    })?;
    rows.finish().map_err(|source| EventTraceError::Write { report: name, source })
}

#[derive(Default)]
struct PassState {
    /// The timeline's first instant: the first event a timeline draws (they come in time order).
    origin: Option<u64>,
    /// (process, device ordinal) → "name (ordinal)".
    devices: FxHashMap<(u32, u32), String>,
    /// (process, thread) → its name.
    threads: FxHashMap<(u32, u32), String>,
    joins: FxHashMap<u32, LaunchJoin>,
    kernel_names: KernelNames,
}

impl PassState {
    fn row<'s>(&'s mut self, report: Report, key: u32, p: &'s Process, e: &RawEvent) -> Option<Vec<Cell<'s>>> {
        if self.origin.is_none() && cuflight_trace::model::timeline::drawn(e) {
            self.origin = Some(e.start);
        }
        let at = |t: u64, origin: Option<u64>| Cell::Int(t.saturating_sub(origin.unwrap_or(0)));
        match (report, e.kind()?) {
            (_, EventKind::Device) => {
                let name = p.string(e.name);
                self.devices.insert((key, e.device), format!("{name} ({})", e.device));
                None
            }
            (_, EventKind::ThreadName) => {
                self.threads.insert((key, e.named_thread() as u32), p.string(e.name).to_string());
                None
            }
            (Report::GpuTrace, EventKind::Kernel | EventKind::Memcpy | EventKind::Memset) => {
                Some(self.gpu_row(key, p, e, at(e.start, self.origin)))
            }
            (Report::ApiTrace, EventKind::Api) => Some(vec![
                at(e.start, self.origin),
                Cell::Int(e.duration()),
                Cell::Text(p.string(e.name)),
                // The call's return code: a CUresult or cudaError_t, 0 for success.
                Cell::Int(e.as_api().result),
                Cell::Int(e.correlation as u64),
                Cell::Int(p.info.pid as u64),
                Cell::Int(e.tid as u64),
                self.threads.get(&(key, e.tid)).map_or(Cell::Empty, |n| Cell::Text(n)),
            ]),
            (Report::KernExecTrace, EventKind::Api) => {
                self.joins.entry(key).or_default().api(p, e);
                None
            }
            (Report::KernExecTrace, EventKind::Memcpy | EventKind::Memset) => {
                // Joined, so that a later kernel with a reused id is not taken for theirs.
                self.joins.entry(key).or_default().work(e);
                None
            }
            (Report::KernExecTrace, EventKind::Kernel) => {
                let call = self.joins.entry(key).or_default().work(e)?.call;
                let t = LaunchTimes::of(&call, e);
                let config = e.launch_config();
                let xyz = |v: [u32; 3]| Cell::Owned(format!("{:4} {:4} {:4}", v[0], v[1], v[2]));
                Some(vec![
                    at(call.start, self.origin),
                    Cell::Int(t.api),
                    t.queue.map_or(Cell::Empty, |_| at(call.end, self.origin)),
                    t.queue.map_or(Cell::Empty, Cell::Int),
                    at(e.start, self.origin),
                    Cell::Int(t.kernel),
                    Cell::Int(t.total),
                    Cell::Int(p.info.pid as u64),
                    Cell::Int(call.tid as u64),
                    Cell::Int(e.device as u64),
                    Cell::Text(p.string(call.name)),
                    xyz(config.grid),
                    xyz(config.block),
                    Cell::Text(self.kernel_names.of(p, e.name)),
                ])
            }
            _ => None,
        }
    }

    fn gpu_row<'s>(&'s self, key: u32, p: &'s Process, e: &RawEvent, start: Cell<'s>) -> Vec<Cell<'s>> {
        let duration = e.duration();
        let device = match self.devices.get(&(key, e.device)) {
            Some(name) => Cell::Text(name),
            None => Cell::Owned(format!("({})", e.device)),
        };
        let mut cells = vec![start, Cell::Int(duration), Cell::Int(e.correlation as u64)];
        let (bytes, source, destination, name) = match e.kind() {
            Some(EventKind::Kernel) => {
                let c = e.launch_config();
                cells.extend(c.grid.iter().chain(&c.block).map(|&v| Cell::Int(v as u64)));
                cells.extend([c.registers as u64, c.static_shared as u64, c.dynamic_shared as u64].map(Cell::Int));
                (None, Cell::Empty, Cell::Empty, self.kernel_names.of(p, e.name))
            }
            Some(EventKind::Memcpy) => {
                cells.extend(std::iter::repeat_n(Cell::Empty, 9));
                let copy = e.as_copy();
                let label = |k| Cell::Text(memory_kind_label(k));
                (Some(copy.bytes), label(copy.src), label(copy.dst), memcpy_operation(copy.kind))
            }
            _ => {
                cells.extend(std::iter::repeat_n(Cell::Empty, 9));
                let memset = e.as_memset();
                (Some(memset.bytes), Cell::Text(memory_kind_label(memset.memory)), Cell::Empty, "[CUDA memset]")
            }
        };
        cells.push(bytes.map_or(Cell::Empty, Cell::Int));
        // Bytes per second over the operation's run (nsys: none for an operation without bytes or time).
        let rate = bytes.filter(|_| duration > 0).map(|b| (b as u128 * 1_000_000_000 / duration as u128) as u64);
        cells.push(rate.map_or(Cell::Empty, Cell::Int));
        cells.extend([
            source,
            destination,
            Cell::Int(p.info.pid as u64),
            device,
            Cell::Int(e.stream as u64),
            Cell::Text(name),
        ]);
        cells
    }
}
