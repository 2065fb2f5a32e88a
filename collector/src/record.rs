//! `cuflight record`: runs a command with the agent injected, discovers every process of the run by its
//! shared-memory segment (children included), drains their rings while they run and streams everything into
//! one trace file. A process that dies abruptly (SIGKILL) loses only what the agent had not flushed yet: its
//! segment outlives it and is drained at the end.

use cuflight_format::file::{Drops, Footer, ProcessInfo, TraceWriter};
use cuflight_format::segment::{self, parse_strings, record_class, state, MappedSegment, SegmentError};
use cuflight_format::RawEvent;
use std::collections::BTreeMap;
use std::io::BufWriter;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the agent enters the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inject {
    /// `CUDA_INJECTION64_PATH` (the driver loads the agent at cuInit) and `NVTX_INJECTION64_PATH`.
    Driver,
    /// `LD_PRELOAD` (the agent then routes both injection variables to itself).
    Preload,
}

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub output: PathBuf,
    pub command: Vec<String>,
    pub agent: PathBuf,
    pub inject: Inject,
    pub drain_interval: Duration,
    pub flush_ms: Option<u64>,
    /// How long to keep draining processes that outlive the command.
    pub linger: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot run '{command}': {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: cuflight_format::file::FileError },
    #[error("cannot create {path}: {source}")]
    Create { path: String, source: std::io::Error },
}

/// What a recording produced.
#[derive(Debug)]
pub struct RecordSummary {
    pub exit_code: i32,
    pub events: u64,
    pub processes: usize,
    pub drops: Drops,
    pub bytes: u64,
    pub disabled: Vec<(u32, String)>,
}

struct Tracked {
    seg: MappedSegment,
    path: PathBuf,
    strings_read: u64,
    /// Drained but not yet written: strings (from region offset `pending_base`) and events.
    pending_strings: Vec<u8>,
    pending_base: u64,
    pending_events: Vec<RawEvent>,
    /// (CUPTI, CLOCK_MONOTONIC) pairs seen so far, written into the process facts (bounded).
    clock_pairs: Vec<(u64, u64)>,
}

/// Clock pairs kept per process: one per agent flush (1 s) is 18 hours; past it every other pair is dropped.
const MAX_CLOCK_PAIRS: usize = 1 << 16;

/// Drained data is written in blocks of this many events at most this old: large blocks compress far better
/// than one per 10 ms drain, and memory stays bounded.
const WRITE_EVENTS: usize = 1 << 16;
const WRITE_AGE: Duration = Duration::from_millis(500);

/// Finds `libcuflight.so`: `$CUFLIGHT_AGENT`, next to the running executable, or in `../lib` beside it.
pub fn find_agent() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUFLIGHT_AGENT").map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("libcuflight.so"), dir.join("../lib/libcuflight.so")].into_iter().find(|p| p.is_file())
}

fn session_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{}x{:08x}", std::process::id(), nanos)
}

fn string_at(seg: &MappedSegment, id: u32) -> String {
    if id == 0 {
        return String::new();
    }
    parse_strings(id as u64, seg.strings_since(id as u64))
        .next()
        .map(|(_, s)| String::from_utf8_lossy(s).into_owned())
        .unwrap_or_default()
}

/// The process is gone (exited, or a zombie waiting for its parent).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
        }
        Err(_) => true,
    }
}

fn process_info(t: &Tracked) -> ProcessInfo {
    let h = t.seg.header();
    let st = h.state.load(Ordering::Acquire);
    let mut drops = Drops {
        no_ring: h.no_ring_drops.load(Ordering::Relaxed),
        strings_full: h.string_drops.load(Ordering::Relaxed),
        cupti_dropped: h.cupti_dropped.load(Ordering::Relaxed),
        records_skipped: h.records_skipped.load(Ordering::Relaxed),
        ..Default::default()
    };
    drops.ring_full = (0..h.ring_count).filter_map(|i| t.seg.ring(i)).map(|r| r.dropped()).sum();
    let cmdline = string_at(&t.seg, h.cmdline.load(Ordering::Relaxed));
    let records_unused = record_class::NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let load = |a: &[std::sync::atomic::AtomicU64; record_class::COUNT]| a[i].load(Ordering::Relaxed);
            (name.to_string(), load(&h.skipped_by_class), load(&h.incomplete_by_class))
        })
        .filter(|&(_, s, i)| s + i > 0)
        .collect();
    ProcessInfo {
        pid: h.pid,
        ppid: h.ppid,
        cmdline: cmdline.split('\0').map(str::to_string).collect(),
        exe: string_at(&t.seg, h.exe.load(Ordering::Relaxed)),
        host: string_at(&t.seg, h.host.load(Ordering::Relaxed)),
        cupti_version: h.cupti_version.load(Ordering::Relaxed),
        cupti_path: string_at(&t.seg, h.cupti_path.load(Ordering::Relaxed)),
        status: if st == state::DISABLED { t.seg.status() } else { String::new() },
        start_realtime_ns: h.start_realtime_ns,
        finished: st == state::FINISHED || st == state::DISABLED,
        drops,
        rank: h.rank_plus_one.load(Ordering::Relaxed).checked_sub(1),
        records_unused,
        buffers_grown: h.buffers_grown.load(Ordering::Relaxed),
        buffers_refused: h.buffers_refused.load(Ordering::Relaxed),
        device_clock_monotonic: h.device_clock_monotonic.load(Ordering::Relaxed) == 1,
        clock_pairs: t.clock_pairs.clone(),
    }
}

struct Recorder<W: std::io::Write> {
    dir: PathBuf,
    prefix: String,
    tracked: BTreeMap<u32, Tracked>,
    writer: TraceWriter<W>,
    output: String,
    pending: usize,
    last_write: Instant,
}

impl<W: std::io::Write> Recorder<W> {
    fn write_err(&self, source: cuflight_format::file::FileError) -> RecordError {
        RecordError::Write { path: self.output.clone(), source }
    }

    /// Maps segments of this session that appeared since the last call.
    fn discover(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) =
                name.to_str().and_then(|n| n.strip_prefix(&self.prefix)).and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if self.tracked.contains_key(&pid) {
                continue;
            }
            match MappedSegment::open(&entry.path()) {
                Ok(seg) => {
                    let t = Tracked {
                        seg,
                        path: entry.path(),
                        strings_read: 0,
                        pending_strings: Vec::new(),
                        pending_base: 0,
                        pending_events: Vec::new(),
                        clock_pairs: Vec::new(),
                    };
                    self.tracked.insert(pid, t);
                }
                Err(SegmentError::NotReady) => {} // being created: next round
                Err(e) => eprintln!("cuflight: ignoring {}: {e}", entry.path().display()),
            }
        }
    }

    /// Empties every ring (strings after events, so every id an event names is included), and writes what was
    /// drained once enough has accumulated, or when `force`d.
    fn drain(&mut self, force: bool) -> Result<(), RecordError> {
        let now = segment::monotonic_ns();
        for t in self.tracked.values_mut() {
            t.seg.header().collector_drained_ns.store(now, Ordering::Relaxed);
            let before = t.pending_events.len();
            for i in 0..t.seg.layout().ring_count {
                if let Some(ring) = t.seg.ring(i) {
                    ring.consumer().drain_into(&mut t.pending_events);
                }
            }
            self.pending += t.pending_events.len() - before;
            for e in &t.pending_events[before..] {
                if e.kind() == Some(cuflight_format::EventKind::ClockSync) {
                    if t.clock_pairs.len() >= MAX_CLOCK_PAIRS {
                        let mut i = 0;
                        t.clock_pairs.retain(|_| {
                            i += 1;
                            i % 2 == 0
                        });
                    }
                    t.clock_pairs.push((e.start, e.end));
                }
            }
            let strings = t.seg.strings_since(t.strings_read);
            if t.pending_strings.is_empty() {
                t.pending_base = t.strings_read;
            }
            t.pending_strings.extend_from_slice(strings);
            t.strings_read += strings.len() as u64;
        }
        if force || self.pending >= WRITE_EVENTS || self.last_write.elapsed() >= WRITE_AGE {
            self.write_pending()?;
        }
        Ok(())
    }

    fn write_pending(&mut self) -> Result<(), RecordError> {
        let output = &self.output;
        let err = |source| RecordError::Write { path: output.clone(), source };
        for (&pid, t) in self.tracked.iter_mut() {
            self.writer.write_strings(pid, t.pending_base, &t.pending_strings).map_err(err)?;
            self.writer.write_events(pid, &t.pending_events).map_err(err)?;
            t.pending_strings.clear();
            t.pending_events.clear();
        }
        self.pending = 0;
        self.last_write = Instant::now();
        Ok(())
    }

    fn all_done(&self) -> bool {
        self.tracked.values().all(|t| {
            let st = t.seg.header().state.load(Ordering::Acquire);
            st == state::FINISHED || st == state::DISABLED || process_gone(t.seg.header().pid)
        })
    }
}

/// Runs the command under the agent and writes the trace.
pub fn record(opts: &RecordOptions) -> Result<RecordSummary, RecordError> {
    let session = session_id();
    let dir = segment::segment_dir();
    let prefix = segment::session_prefix(&session);
    let out_path = opts.output.display().to_string();
    let file =
        std::fs::File::create(&opts.output).map_err(|source| RecordError::Create { path: out_path.clone(), source })?;
    let writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, file))
        .map_err(|source| RecordError::Write { path: out_path.clone(), source })?;
    let mut rec = Recorder {
        dir,
        prefix,
        tracked: BTreeMap::new(),
        writer,
        output: out_path.clone(),
        pending: 0,
        last_write: Instant::now(),
    };

    // Ctrl-C reaches the whole process group: the program stops, and we stay to finish the file.
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, interrupted.clone());
    }

    let mut cmd = Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..]).env("CUFLIGHT_SESSION", &session);
    match opts.inject {
        Inject::Driver => {
            cmd.env("CUDA_INJECTION64_PATH", &opts.agent).env("NVTX_INJECTION64_PATH", &opts.agent);
        }
        Inject::Preload => {
            let preload = match std::env::var("LD_PRELOAD") {
                Ok(v) if !v.is_empty() => format!("{}:{v}", opts.agent.display()),
                _ => opts.agent.display().to_string(),
            };
            cmd.env("LD_PRELOAD", preload);
        }
    }
    if let Some(ms) = opts.flush_ms {
        cmd.env("CUFLIGHT_FLUSH_MS", ms.to_string());
    }
    let mut child = cmd.spawn().map_err(|source| RecordError::Spawn { command: opts.command[0].clone(), source })?;

    let status = loop {
        rec.discover();
        rec.drain(false)?;
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        std::thread::sleep(opts.drain_interval);
    };
    // Children may outlive the command; keep draining until they finish or the linger time is up.
    let deadline = Instant::now() + opts.linger;
    loop {
        rec.discover();
        rec.drain(false)?;
        if rec.all_done() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(opts.drain_interval);
    }
    rec.discover();
    rec.drain(true)?;

    let mut drops = Drops::default();
    let mut disabled = Vec::new();
    let infos: Vec<ProcessInfo> = rec.tracked.values().map(process_info).collect();
    for info in &infos {
        rec.writer.write_process(info).map_err(|e| rec.write_err(e))?;
        let d = info.drops;
        drops.ring_full += d.ring_full;
        drops.no_ring += d.no_ring;
        drops.strings_full += d.strings_full;
        drops.cupti_dropped += d.cupti_dropped;
        drops.records_skipped += d.records_skipped;
        if !info.status.is_empty() {
            disabled.push((info.pid, info.status.clone()));
        }
    }
    for t in rec.tracked.values() {
        let _ = std::fs::remove_file(&t.path);
    }
    let exit_code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let events = rec.writer.events_written();
    let footer = Footer { events, command: opts.command.clone(), exit_code: Some(exit_code) };
    let processes = rec.tracked.len();
    rec.writer.finish(footer).map_err(|source| RecordError::Write { path: out_path.clone(), source })?;
    let bytes = std::fs::metadata(&opts.output).map_or(0, |m| m.len());
    Ok(RecordSummary { exit_code, events, processes, drops, bytes, disabled })
}

/// Default trace name in the current directory: `cuflight-<n>.cuf`, the first that does not exist.
pub fn default_output() -> PathBuf {
    (1..)
        .map(|n| PathBuf::from(format!("cuflight-{n}.cuf")))
        .find(|p| !Path::new(p).exists())
        .unwrap_or_else(|| PathBuf::from("cuflight.cuf"))
}
