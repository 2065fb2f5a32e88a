//! `cuflight export --format parquet -o DIR TRACE...`: fleet tables for an existing engine (DuckDB, Spark, Trino,
//! Polars). One directory per table under DIR (kernels, copies, memsets, api, nvtx, memory, steps, gpu_samples, processes),
//! hive-partitioned `host=H/rank=R` (rank `__HIVE_DEFAULT_PARTITION__`, Hive's NULL, when unknown), one part file per source trace
//! (`<trace stem>.parquet`, `<trace stem>.N.parquet` when a partition's file had to be finished early; see
//! [`part_stems`]). The schema is documented and
//! versioned in docs/parquet.md; every file carries `cuflight.schema_version` in its metadata, and DIR holds
//! `cuflight-parquet.json` (version, tables, row counts).
//!
//! Times are int64 ns since the Unix epoch: host CLOCK_MONOTONIC moved by the process's REALTIME offset (from
//! its first clock pair); imports whose times are already epoch-based keep them; others are left as recorded and
//! the processes table says so (`clock`). With several hosts, each host's clock is then shifted onto the
//! reference host's by their collectives ([`cuflight_trace::model::align`]): the job's common clock. Streamed from the
//! event sources in bounded memory (see `table`).

mod table;

use cuflight_format::event::MemKind;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::import::{JobTraces, KEEP_OPEN};
use cuflight_trace::model::collectives::Collective;
use cuflight_trace::model::cupti_labels;
use cuflight_trace::model::kernel_category::is_collective_kernel;
use cuflight_trace::model::ranges::Pairer;
use cuflight_trace::model::source::EventSource;
use cuflight_trace::model::trace::{Process, TraceError};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::path::Path;
use table::{Kind, Table, V};

pub const SCHEMA_VERSION: u32 = 1;
pub const MANIFEST: &str = "cuflight-parquet.json";

#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    #[error("cannot write {0}: {1}")]
    Io(String, std::io::Error),
    #[error("cannot write {0} (Parquet): {1}")]
    Parquet(String, parquet::errors::ParquetError),
    #[error("Parquet export: {0}")]
    Internal(String),
    #[error(transparent)]
    Trace(#[from] cuflight_trace::model::trace::TraceError),
}

use Kind::*;
const PLACE: [(&str, Kind); 3] = [("host", Str), ("rank", OptI32), ("pid", U32)];
const SPAN: [(&str, Kind); 3] = [("start_ns", I64), ("end_ns", I64), ("duration_ns", I64)];
const WORK: [(&str, Kind); 3] = [("device", U32), ("stream", U32), ("correlation", U32)];

fn columns(parts: &[&[(&'static str, Kind)]]) -> Vec<(&'static str, Kind)> {
    parts.concat()
}

/// Every table: (name, columns).
pub fn tables() -> Vec<(&'static str, Vec<(&'static str, Kind)>)> {
    let kernel_cfg: &[(&str, Kind)] = &[
        ("name", Str),
        ("grid_x", U32),
        ("grid_y", U32),
        ("grid_z", U32),
        ("block_x", U32),
        ("block_y", U32),
        ("block_z", U32),
        ("registers_per_thread", U32),
        ("static_shared_bytes", U32),
        ("dynamic_shared_bytes", U32),
        // Added 2026-12-03 (an added column keeps the schema version).
        ("collective", OptStr),
    ];
    vec![
        ("kernels", columns(&[&PLACE, &WORK, &SPAN, kernel_cfg])),
        (
            "copies",
            columns(&[
                &PLACE,
                &WORK,
                &SPAN,
                &[("kind", Str), ("src_memory", Str), ("dst_memory", Str), ("bytes", U64)],
            ]),
        ),
        ("memsets", columns(&[&PLACE, &WORK, &SPAN, &[("memory", Str), ("bytes", U64), ("value", U64)]])),
        (
            "api",
            columns(&[
                &PLACE,
                &[("tid", U32), ("api", Str), ("name", Str), ("correlation", U32), ("result", U64)],
                &SPAN,
            ]),
        ),
        ("nvtx", columns(&[&PLACE, &[("tid", U32), ("kind", Str), ("domain", Str), ("name", Str)], &SPAN])),
        (
            "memory",
            columns(&[
                &PLACE,
                &[("device", U32), ("op", Str), ("memory", Str), ("address", U64), ("bytes", U64), ("at_ns", I64)],
            ]),
        ),
        ("steps", columns(&[&PLACE, &[("step", U32), ("name", Str)], &SPAN])),
        (
            "gpu_samples",
            columns(&[
                &PLACE,
                &[("device", U32)],
                &SPAN,
                &[
                    ("sm_active", OptF64),
                    ("tensor_active", OptF64),
                    ("dram_read", OptF64),
                    ("dram_write", OptF64),
                    ("gpu_active", OptF64),
                ],
            ]),
        ),
        (
            "processes",
            columns(&[
                &PLACE,
                &[
                    ("ppid", U32),
                    ("command", Str),
                    ("clock", Str),
                    ("cupti_version", U32),
                    ("events", U64),
                    ("dropped", U64),
                    ("finished", U32),
                    ("trace", Str),
                ],
            ]),
        ),
    ]
}

pub use cuflight_trace::model::host::host_value;

/// What was written: rows per table, files.
#[derive(Debug, Default)]
pub struct Written {
    pub rows: BTreeMap<&'static str, u64>,
    pub files: u64,
    /// How each host's clock was put on the reference host's (several hosts), see [`cuflight_trace::model::align`].
    pub placement: cuflight_trace::model::job_clock::Placement,
}

/// A process as the tables name it, and how its times reach the epoch.
struct Place {
    host: String,
    rank: Option<u32>,
    pid: u32,
    clock: cuflight_trace::model::align::ToJob,
    pairer: Pairer,
    /// The k-th communication kernel's collective, as the report's plan told it ([`ProcessSteps::collectives`]),
    /// and how many such kernels have gone by.
    collectives: Vec<Option<Collective>>,
    comm_seen: usize,
}

impl Place {
    fn t(&self, ns: u64) -> i64 {
        self.clock.at(ns)
    }
}

/// Names each trace's part files: its file name less its trace extensions (`run.hosta.0.cuf` → `run_hosta_0`),
/// in `[A-Za-z0-9_-]` alone, never starting with `_` (Spark and Hive skip files that start with `_` or `.`), `-2`,
/// `-3`... after a name already taken. A stem has no dot, so no stem ever equals another's later part
/// (`<stem>.N`).
pub fn part_stems(paths: &[std::path::PathBuf]) -> Vec<String> {
    const EXTENSIONS: [&str; 8] = [".gz", ".zst", ".json", ".cuf", ".sqlite", ".trace", ".pt", ".seg"];
    let mut taken = std::collections::HashSet::new();
    paths
        .iter()
        .map(|p| {
            let mut name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            while let Some(ext) = EXTENSIONS.iter().find(|e| name.len() > e.len() && name.ends_with(*e)) {
                name.truncate(name.len() - ext.len());
            }
            let clean: String =
                name.chars().take(96).map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
            let base = match clean.trim_start_matches('_') {
                "" => "trace".to_string(),
                b => b.to_string(),
            };
            (1..)
                .map(|i| if i == 1 { base.clone() } else { format!("{base}-{i}") })
                .find(|s| taken.insert(s.clone()))
                .unwrap_or(base)
        })
        .collect()
}

/// A process's steps (windows on its own clock, and their names) as the report finds them. The Parquet export
/// writes them but does not find them: finding steps is the report's, which the caller runs ([`export`]).
#[derive(Clone, Debug, Default)]
pub struct ProcessSteps {
    pub windows: Vec<(u64, u64)>,
    pub names: Vec<String>,
    /// The collective of each communication kernel ([`is_collective_kernel`]), in the order they come: what the
    /// host's range around its launch asked for, else its name (the report's rule; None where neither says).
    pub collectives: Vec<Option<Collective>>,
}

/// Every process's steps of the trace at the path, by process key.
pub type StepsOf<'a> = dyn FnMut(&Path, &mut EventSource) -> Result<FxHashMap<u32, ProcessSteps>, TraceError> + 'a;

/// Writes the tables of every `(stem, source)` into `dir` (which must exist and be empty of our tables' files
/// for these stems), with each trace's steps as `steps_of` finds them.
/// `sources`: (part-file stem, the trace's path). Each trace is read in a first pass for its steps and its clock
/// facts ([`JobTraces`]), then, once the job's clock is known, for its events; up to [`KEEP_OPEN`] traces stay
/// open in between (each opened once), more are opened again.
pub fn export(
    sources: &[(String, std::path::PathBuf)],
    dir: &Path,
    steps_of: &mut StepsOf<'_>,
) -> Result<Written, ParquetError> {
    let mut written = Written::default();
    // First every trace's steps and clock facts, then the hosts' clocks aligned on collectives.
    let paths: Vec<std::path::PathBuf> = sources.iter().map(|(_, path)| path.clone()).collect();
    let mut steps = Vec::with_capacity(sources.len());
    let (job, mut traces) = JobTraces::open(&paths, KEEP_OPEN, &mut |_, path, source| {
        steps.push(steps_of(path, source)?);
        Ok(())
    })?;
    written.placement = job.placement();
    for (i, ((stem, path), mut steps)) in sources.iter().zip(steps).enumerate() {
        let mut source = traces.second(i)?;
        let source = &mut source;
        let shown = &path.display().to_string();
        let mut t: FxHashMap<&'static str, Table> =
            tables().into_iter().map(|(name, cols)| (name, Table::new(name, &cols, dir, stem))).collect();
        let mut places: FxHashMap<u32, Place> = FxHashMap::default();
        let mut events: FxHashMap<u32, u64> = FxHashMap::default();
        // Where each process's timeline starts (what its clock's name needs).
        let mut first_drawn: FxHashMap<u32, u64> = FxHashMap::default();
        for (&k, p) in &source.processes {
            let host = cuflight_trace::model::host::host_of(p).to_string();
            let clock = job.to_job(p);
            let collectives = steps.get_mut(&k).map(|s| std::mem::take(&mut s.collectives)).unwrap_or_default();
            let pairer = Pairer::default();
            places.insert(k, Place { host, rank: p.rank, pid: p.info.pid, clock, pairer, collectives, comm_seen: 0 });
        }
        let mut failed = None;
        source.for_each(|k, p, e| {
            if failed.is_some() {
                return;
            }
            *events.entry(k).or_default() += 1;
            if cuflight_trace::model::timeline::drawn(e) {
                let first = first_drawn.entry(k).or_insert(e.start);
                *first = (*first).min(e.start);
            }
            let Some(place) = places.get_mut(&k) else { return };
            if let Err(err) = row(&mut t, place, p, e) {
                failed = Some(err);
                return;
            }
            if t.values().map(Table::buffered).sum::<usize>() > table::BUFFERED_ROWS {
                if let Err(err) = t.values_mut().try_for_each(Table::flush_all) {
                    failed = Some(err);
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        for (&k, p) in &source.processes {
            let place = &places[&k];
            if let Some(found) = steps.get(&k) {
                let steps = t.get_mut("steps").expect("steps table");
                for (i, &(s, e)) in found.windows.iter().enumerate() {
                    let name = found.names.get(i).map_or("", String::as_str);
                    let (a, b) = (place.t(s), place.t(e));
                    steps.push(
                        &place.host,
                        place.rank,
                        &[
                            V::S(&place.host),
                            V::OptI32(place.rank.map(|r| r as i32)),
                            V::U32(place.pid),
                            V::U32(i as u32),
                            V::S(name),
                            V::I64(a),
                            V::I64(b),
                            V::I64(b - a),
                        ],
                    )?;
                }
            }
            let clock_name = job.clock_name(p, first_drawn.get(&k).copied().unwrap_or(0));
            let command = if p.name.is_empty() { p.info.cmdline.join(" ") } else { p.name.clone() };
            t.get_mut("processes").expect("processes table").push(
                &place.host,
                place.rank,
                &[
                    V::S(&place.host),
                    V::OptI32(place.rank.map(|r| r as i32)),
                    V::U32(place.pid),
                    V::U32(p.info.ppid),
                    V::S(&command),
                    V::S(clock_name),
                    V::U32(p.info.cupti_version),
                    V::U64(events.get(&k).copied().unwrap_or(0)),
                    V::U64(p.info.drops.total()),
                    V::U32(p.info.finished as u32),
                    V::S(shown),
                ],
            )?;
        }
        let first = places.values().next().map(|p| (p.host.clone(), p.rank)).unwrap_or(("unknown".into(), None));
        for table in t.values_mut() {
            table.finish((&first.0, first.1))?;
            *written.rows.entry(table.name).or_default() += table.rows;
            written.files += table.files;
        }
    }
    Ok(written)
}

#[rustfmt::skip]
fn row(t: &mut FxHashMap<&'static str, Table>, place: &mut Place, p: &Process, e: &RawEvent) -> Result<(), ParquetError> {
    // Disjoint borrows: the pairer changes, the rest is read (no per-event copy of the host name).
    let Place { host, rank, pid, clock, pairer, collectives, comm_seen } = place;
    let (host, rank, pid) = (host.as_str(), *rank, *pid);
    let at = |ns: u64| clock.at(ns);
    let r = V::OptI32(rank.map(|r| r as i32));
    if let Some(range) = pairer.feed(e) {
        let (a, b) = (at(range.start), at(range.end));
        let kind = if range.async_range { "start/end" } else { "push/pop" };
        return push(t, "nvtx", host, rank, &[
            V::S(host), r, V::U32(pid), V::U32(range.tid), V::S(kind), V::S(p.nvtx_domain(range.domain)),
            V::S(p.string(range.name)), V::I64(a), V::I64(b), V::I64(b - a),
        ]);
    }
    let (a, b) = (at(e.start), at(e.end.max(e.start)));
    let work = [V::U32(e.device), V::U32(e.stream), V::U32(e.correlation)];
    let span = [V::I64(a), V::I64(b), V::I64(b - a)];
    match e.kind() {
        Some(EventKind::Kernel) => {
            let c = e.launch_config();
            let name = p.string(e.name);
            let collective = is_collective_kernel(name).then(|| {
                *comm_seen += 1;
                collectives.get(*comm_seen - 1).copied().flatten()
            });
            let mut v = vec![V::S(host), r, V::U32(pid)];
            v.extend(work);
            v.extend(span);
            v.extend([
                V::S(p.string(e.name)), V::U32(c.grid[0]), V::U32(c.grid[1]), V::U32(c.grid[2]),
                V::U32(c.block[0]), V::U32(c.block[1]), V::U32(c.block[2]), V::U32(c.registers as u32),
                V::U32(c.static_shared), V::U32(c.dynamic_shared), V::OptS(collective.flatten().map(|c| c.label())),
            ]);
            push(t, "kernels", host, rank, &v)
        }
        Some(EventKind::Memcpy) => {
            let copy = e.as_copy();
            let mut v = vec![V::S(host), r, V::U32(pid)];
            v.extend(work);
            v.extend(span);
            v.extend([
                V::S(cupti_labels::memcpy_kind(copy.kind)), V::S(cupti_labels::memory_kind(copy.src)),
                V::S(cupti_labels::memory_kind(copy.dst)), V::U64(copy.bytes),
            ]);
            push(t, "copies", host, rank, &v)
        }
        Some(EventKind::Memset) => {
            let mut v = vec![V::S(host), r, V::U32(pid)];
            v.extend(work);
            v.extend(span);
            let memset = e.as_memset();
            v.extend([V::S(cupti_labels::memory_kind(memset.memory)), V::U64(memset.bytes), V::U64(memset.value)]);
            push(t, "memsets", host, rank, &v)
        }
        Some(EventKind::Api) => {
            let call = e.as_api();
            let api = if call.runtime { "runtime" } else { "driver" };
            let mut v = vec![
                V::S(host), r, V::U32(pid), V::U32(e.tid), V::S(api), V::S(p.string(e.name)),
                V::U32(e.correlation), V::U64(call.result),
            ];
            v.extend(span);
            push(t, "api", host, rank, &v)
        }
        Some(EventKind::Range) if !e.as_range().on_device => {
            let mut v = vec![
                V::S(host), r, V::U32(pid), V::U32(e.tid), V::S("range"), V::S(p.string(e.as_range().category)),
                V::S(p.string(e.name)),
            ];
            v.extend(span);
            push(t, "nvtx", host, rank, &v)
        }
        Some(EventKind::NvtxMark) => {
            let mut v = vec![
                V::S(host), r, V::U32(pid), V::U32(e.tid), V::S("mark"), V::S(p.nvtx_domain(e.as_nvtx().domain)),
                V::S(p.string(e.name)),
            ];
            v.extend(span);
            push(t, "nvtx", host, rank, &v)
        }
        Some(EventKind::GpuSample) => {
            let c = e.as_gpu_sample();
            let mut v = vec![V::S(host), r, V::U32(pid), V::U32(e.device)];
            v.extend(span);
            v.extend([c.sm_active, c.tensor_active, c.dram_read, c.dram_write, c.gpu_active].map(V::OptF64));
            push(t, "gpu_samples", host, rank, &v)
        }
        Some(k @ (EventKind::Alloc | EventKind::Free)) => {
            let mem = e.as_mem_op();
            let memory = match mem.memory {
                Some(MemKind::Device) => "device",
                Some(MemKind::PinnedHost) => "pinned",
                Some(MemKind::Managed) => "managed",
                Some(MemKind::DeviceAsync) => "device_async",
                None => "unknown",
            };
            let op = if k == EventKind::Alloc { "alloc" } else { "free" };
            push(t, "memory", host, rank, &[
                V::S(host), r, V::U32(pid), V::U32(e.device), V::S(op), V::S(memory), V::U64(mem.address),
                V::U64(mem.bytes),
                V::I64(a),
            ])
        }
        _ => Ok(()),
    }
}

fn push(
    t: &mut FxHashMap<&'static str, Table>,
    name: &str,
    host: &str,
    rank: Option<u32>,
    row: &[V],
) -> Result<(), ParquetError> {
    t.get_mut(name).ok_or_else(|| ParquetError::Internal(format!("no table {name}")))?.push(host, rank, row)
}

#[cfg(test)]
mod tests {
    use super::part_stems;
    use std::path::PathBuf;

    #[test]
    fn part_files_are_named_after_their_trace_and_never_meet() {
        let paths: Vec<PathBuf> = [
            "run.hosta.0.cuf",
            "other/run.hosta.0.cuf",
            "kineto-2rank-r0.json.gz",
            "rank0.pt.trace.json",
            ".hidden.cuf",
            "_SUCCESS",
            "r a;n$.cuf",
            "report.sqlite",
            ".cuf",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(
            part_stems(&paths),
            [
                "run_hosta_0",
                "run_hosta_0-2",
                "kineto-2rank-r0",
                "rank0",
                "hidden",
                "SUCCESS",
                "r_a_n_",
                "report",
                "cuf"
            ]
        );
        // No stem holds a dot, so none is ever another's later part file (`<stem>.N.parquet`).
        assert!(part_stems(&paths).iter().all(|s| !s.contains('.') && !s.starts_with('_')));
    }
}
