//! A trace file loaded into memory: per process, its facts, its strings and its events, with device timestamps
//! moved onto the host clock.

use cuflight_format::file::{Block, ClockMap, FileError, Footer, ProcessInfo, TraceReader};
use cuflight_format::segment::parse_strings;
use cuflight_format::{EventKind, RawEvent};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Why a trace could not be loaded (one line each, for the CLI).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("{path}: {source}")]
    Format { path: String, source: FileError },
    #[error("{path}: {what}")]
    Import { path: String, what: String },
    /// Writing what was made of the trace failed (a full disk, a closed pipe); the caller names the output.
    #[error("{0}")]
    Output(#[source] std::io::Error),
}

/// One profiled process.
#[derive(Debug, Default)]
pub struct Process {
    pub info: ProcessInfo,
    pub strings: HashMap<u32, String>,
    pub events: Vec<RawEvent>,
    /// How device (CUPTI) timestamps were moved onto CLOCK_MONOTONIC at load.
    pub clock: ClockMap,
    /// A display name from an imported trace (Kineto `process_name`), if any.
    pub name: String,
    /// Distributed rank, when the trace says (Kineto `distributedInfo`, the launcher's `RANK` for captures).
    pub rank: Option<u32>,
    /// The mangled form of string ids that held a mangled kernel name (now readable in `strings`).
    pub mangled: HashMap<u32, String>,
    /// Events of a cuflight trace left out by the last pass over it because their time cannot be true: no known
    /// start, or an end before the start ([`impossible_time`]).
    pub refused: u64,
    /// The epoch ns this process's times count from, where the trace says (torch.profiler's
    /// `baseTimeNanoseconds`, nsys's session start); 0: its times are as recorded (the epoch already, or
    /// CLOCK_MONOTONIC with clock pairs).
    pub epoch_base_ns: u64,
    /// The CUDA runtime's version (12040 = 12.4) where an imported trace says (torch.profiler's
    /// `cuda_runtime_version`); 0 unknown.
    pub cuda_runtime_version: u32,
    /// The HIP runtime's version (HIP_VERSION's form: major × 10^7 + minor × 10^5 + patch, 60443483 = 6.4.43483)
    /// where an imported trace recorded on ROCm says (torch.profiler's `hip_runtime_version`); 0 unknown.
    pub hip_runtime_version: u32,
    /// Recorded on ROCm (an imported trace that says so, or whose GPUs run 64-wide wavefronts): its calls are
    /// HIP's, recorded by roctracer or rocprofiler, and what the report says of them must be said in HIP's terms.
    pub rocm: bool,
    /// Read from another tool's trace (torch.profiler's Kineto JSON, an nsys export): it holds what that tool
    /// recorded, which can miss the process's work (sampled, graph kernels left out, begun mid-run). False for
    /// cuflight's captures, read back from their Kineto export too: they hold every op since they were armed.
    pub imported: bool,
    /// Events of an imported trace that HTA counts as GPU ops, being no GPU work, which cuflight leaves out.
    pub not_gpu_work: NotGpuWork,
}

/// Events HTA takes for GPU ops, as it reads every event with a stream argument but -1 as one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct NotGpuWork {
    /// Context synchronisations written with stream 4294967295 (Kineto writes CUPTI's "no stream" unsigned):
    /// host waits on no stream.
    pub context_syncs: u64,
    /// Host operators with a stream argument (torch.profiler records the stream a Triton kernel's launcher
    /// launches on): host work.
    pub host_ops: u64,
}

/// Whether a cuflight-recorded event's time cannot be true: a start of 0 (the agent stamps CLOCK_MONOTONIC, which
/// is never 0 once anything runs; an older agent wrote calls it saw end but not begin this way, starting at boot
/// and lasting the machine's uptime) or an end before its start. Facts without a time are never refused.
pub fn impossible_time(e: &RawEvent) -> bool {
    match e.kind() {
        Some(EventKind::ThreadName | EventKind::ClockSync | EventKind::Device | EventKind::NvtxCategory) | None => {
            false
        }
        Some(_) => e.start == 0 || e.end < e.start,
    }
}

/// Adds one entry of a trace's string table: a mangled kernel name (as CUPTI reports names) is stored readable,
/// demangled once per distinct name, and its mangled form is kept in `mangled`.
pub fn insert_string<S: std::hash::BuildHasher>(
    strings: &mut HashMap<u32, String, S>,
    mangled: &mut HashMap<u32, String>,
    id: u32,
    bytes: &[u8],
) {
    let s = String::from_utf8_lossy(bytes).into_owned();
    match crate::model::kernel_symbols::demangle(&s) {
        Some(readable) => {
            strings.insert(id, readable);
            mangled.insert(id, s);
        }
        None => {
            strings.insert(id, s);
        }
    }
}

/// Builds a process's string table while importing: the same text always gets the same id.
#[derive(Debug, Default)]
pub struct StringTable {
    ids: rustc_hash::FxHashMap<String, u32>,
}

impl StringTable {
    pub fn id(&mut self, p: &mut Process, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.ids.len() as u32 + 1;
        self.ids.insert(s.to_string(), id);
        p.strings.insert(id, s.to_string());
        id
    }

    /// The id `s` already has, if any.
    pub fn get(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }
}

impl Process {
    /// The string behind an id ("" for 0 or unknown ids).
    pub fn string(&self, id: u32) -> &str {
        self.strings.get(&id).map_or("", String::as_str)
    }

    /// The name of an NVTX domain by its string id (0: the default domain).
    pub fn nvtx_domain(&self, id: u64) -> &str {
        nvtx_domain_name(id, |i| self.string(i))
    }

    /// How tables and timelines name the process: its command (or imported name), pid and rank.
    pub fn label(&self) -> String {
        let cmd = if self.name.is_empty() { self.info.cmdline.join(" ") } else { self.name.clone() };
        format!("{cmd} ({})", self.who())
    }

    /// "rank R (local L) pid P" for a rank of a job, "pid P" otherwise: how every output names a process.
    pub fn who(&self) -> String {
        who(self.rank, self.info.local_rank, self.info.pid)
    }

    /// Kernel launches (API calls named `*LaunchKernel*`, `*LaunchCooperativeKernel*`) whose correlation id no
    /// kernel record carries: in a process that ended without its final flush, the device work lost with it.
    pub fn launches_without_kernel(&self) -> u64 {
        let with_kernel: std::collections::HashSet<u32> = self
            .events
            .iter()
            .filter(|e| matches!(e.kind(), Some(EventKind::Kernel | EventKind::GraphNode)))
            .map(|e| e.correlation)
            .collect();
        self.events
            .iter()
            .filter(|e| e.kind() == Some(EventKind::Api) && e.correlation != 0 && !with_kernel.contains(&e.correlation))
            .filter(|e| cuflight_format::calls::CallEffects::of(self.string(e.name)).launches_kernel())
            .count() as u64
    }
}

/// A whole trace.
#[derive(Debug, Default)]
pub struct Trace {
    pub processes: BTreeMap<u32, Process>,
    pub footer: Footer,
    /// Imported from Kineto JSON whose timestamps have fractions of a microsecond (HTA rounds those), not
    /// written by cuflight.
    pub fractional_us_timestamps: bool,
    /// Why the file ended before its footer (read up to its last complete block), if it did.
    pub cut_short: Option<String>,
}

/// Most string bytes a trace may hold, all processes together: a process's string region is 4 MiB in the
/// agent, so this only stops files crafted to exhaust memory through the string table.
pub const MAX_STRING_BYTES: u64 = 256 << 20;

/// Events stamped by CUPTI's clock (the rest are stamped with CLOCK_MONOTONIC by the agent).
pub fn is_device_event(kind: Option<EventKind>) -> bool {
    matches!(
        kind,
        Some(
            EventKind::Kernel
                | EventKind::Memcpy
                | EventKind::Memset
                | EventKind::Sync
                | EventKind::Overhead
                | EventKind::MemoryActivity
                | EventKind::GraphNode
                | EventKind::GpuSample
        )
    )
}

impl Trace {
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| TraceError::Open { path: shown.clone(), source })?;
        let fmt = |source| TraceError::Format { path: shown.clone(), source };
        let mut reader = TraceReader::new(std::io::BufReader::new(file)).map_err(fmt)?;
        let mut trace = Trace::default();
        let mut string_bytes = 0u64;
        while let Some(block) = reader.next_block().map_err(fmt)? {
            match block {
                Block::Process(info) => {
                    let p = trace.processes.entry(info.file_key()).or_default();
                    p.rank = info.rank;
                    p.info = info;
                }
                Block::Strings { pid, base, bytes } => {
                    string_bytes += bytes.len() as u64;
                    if string_bytes > MAX_STRING_BYTES {
                        return Err(fmt(FileError::Corrupt(format!(
                            "more than {} MiB of strings (no recording holds that many)",
                            MAX_STRING_BYTES >> 20
                        ))));
                    }
                    let p = trace.processes.entry(pid).or_default();
                    // Empty entries are what an unknown id reads as anyway: not stored.
                    for (id, s) in parse_strings(base, &bytes).filter(|(_, s)| !s.is_empty()) {
                        insert_string(&mut p.strings, &mut p.mangled, id, s);
                    }
                }
                Block::Events { pid, events } => trace.processes.entry(pid).or_default().events.extend(events),
                Block::Footer(f) => trace.footer = f,
            }
        }
        trace.cut_short = reader.cut_short().map(str::to_string);
        for (&key, p) in trace.processes.iter_mut() {
            // A process whose facts never reached the file (cut short): its key is its pid.
            if p.info.pid == 0 {
                p.info.pid = key;
            }
            p.align_clocks();
            // Events arrive ring by ring (one ring per thread); analyses want one timeline. The sort is stable,
            // so a thread's events with equal timestamps keep their order.
            p.events.sort_by_key(|e| e.start);
        }
        Ok(trace)
    }
}

/// The one rule that places device timestamps on the host clock, for every consumer: none when the agent had
/// CUPTI stamp records with CLOCK_MONOTONIC, else piecewise-linear over every clock pair (from the process facts,
/// or, in traces written before they held them, from the ClockSync events).
pub fn clock_map(info: &ProcessInfo, events: &[RawEvent]) -> ClockMap {
    if info.device_clock_monotonic {
        return ClockMap::identity();
    }
    if !info.clock_pairs.is_empty() {
        return ClockMap::from_pairs(info.clock_pairs.iter().copied());
    }
    ClockMap::from_pairs(events.iter().filter(|e| e.kind() == Some(EventKind::ClockSync)).map(|e| (e.start, e.end)))
}

/// Moves device events onto CLOCK_MONOTONIC with `map`.
pub fn align_device_events(map: &ClockMap, events: &mut [RawEvent]) {
    if map.is_identity() {
        return;
    }
    for e in events {
        if is_device_event(e.kind()) && e.start != 0 {
            e.start = map.map(e.start);
            e.end = map.map(e.end);
        }
    }
}

/// The name of NVTX domain `id` given a string lookup (0: the default domain): one rule for in-memory and
/// streamed readers.
/// See [`Process::who`].
pub fn who(rank: Option<u32>, local_rank: Option<u32>, pid: u32) -> String {
    match (rank, local_rank) {
        (Some(r), Some(l)) => format!("rank {r} (local {l}) pid {pid}"),
        (Some(r), None) => format!("rank {r} pid {pid}"),
        _ => format!("pid {pid}"),
    }
}

pub fn nvtx_domain_name<'a>(id: u64, string: impl Fn(u32) -> &'a str) -> &'a str {
    if id == 0 {
        "default"
    } else {
        string(id as u32)
    }
}

impl Process {
    fn align_clocks(&mut self) {
        self.clock = clock_map(&self.info, &self.events);
        align_device_events(&self.clock, &mut self.events);
    }
}
