//! `cuflight merge FILES... -o job.cuf`: one trace of a job recorded as several (one per host or rank, any
//! format cuflight reads), on one clock. Every process's events are put on the epoch by its REALTIME offset and
//! each host's clock moved onto the reference host's by their collectives ([`cuflight_trace::model::align`]); the
//! merged trace then carries host-clock times with no clock pairs left to apply. Processes keep their pids as
//! keys unless one was seen in an earlier file (then a key of its own, as a recording gives a reused pid);
//! strings are rewritten per process and every event's string ids remapped. Streamed file by file, in bounded
//! memory: each process's events go out in blocks as they come.

use cuflight_format::file::{FileError, Footer, TraceWriter};
use cuflight_format::strings::StringRegion;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::import::{JobTraces, KEEP_OPEN};
use cuflight_trace::model::align;
use cuflight_trace::model::job_clock::Placement;
use cuflight_trace::model::source::{merged_info, EventSource, JobKeys};
use cuflight_trace::model::trace::TraceError;
use rustc_hash::FxHashMap;
use std::io::Write;

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// Writing the merged trace failed (the caller names it).
    #[error("{0}")]
    Write(#[from] FileError),
}

/// What the merge wrote.
#[derive(Debug, Default)]
pub struct Merged {
    pub processes: usize,
    pub events: u64,
    /// How the hosts' clocks were aligned, and whether the traces are one job's.
    pub placement: Placement,
}

/// Events per block, and waiting in all (across a file's processes) before every process's are written.
const BLOCK: usize = 64 * 1024;
const HELD: usize = 1 << 20;

/// Merges the traces at `paths` into `w`; `command` goes to the footer; `opened` hears of each trace when it is
/// first opened (a cut-short trace is named there). Each trace is read twice ([`JobTraces`]): a cheap pass for
/// its clock facts, then, once the job's clock is known, its events; up to [`KEEP_OPEN`] traces stay open in
/// between, more are opened again.
pub fn merge<W: Write>(
    paths: &[std::path::PathBuf],
    w: W,
    command: Vec<String>,
    opened: &mut dyn FnMut(&std::path::Path, &EventSource),
) -> Result<Merged, MergeError> {
    let (clock, mut traces) = JobTraces::open(paths, KEEP_OPEN, &mut |_, path, source| {
        opened(path, source);
        Ok(())
    })?;
    let mut out = TraceWriter::new(w)?;
    let mut merged = Merged::default();
    let mut keys = JobKeys::default();
    for i in 0..paths.len() {
        let mut source = traces.second(i)?;
        let source = &mut source;
        // Per process: its key in the merged file, string id map, clock, pending events.
        let mut procs: FxHashMap<u32, Proc> = FxHashMap::default();
        for (&k, p) in &source.processes {
            let key = keys.key(p.info.pid);
            let mut region = StringRegion::default();
            let mut ids: FxHashMap<u32, u32> = FxHashMap::default();
            for (&id, s) in &p.strings {
                // The mangled form where there was one: readers demangle it again, and keep both.
                let text = p.mangled.get(&id).unwrap_or(s);
                ids.insert(id, region.intern(text));
            }
            let clock = clock.to_job(p);
            // The events are written on the host clock already (device times mapped, clocks aligned).
            out.write_process(&merged_info(p, key))?;
            // Offset 0 is the region's reserved "no string": entries start at 4.
            out.write_strings(key, 4, &region.bytes()[4..])?;
            procs.insert(k, Proc { key, ids, clock, pending: Vec::new() });
            merged.processes += 1;
        }
        let mut failed: Option<FileError> = None;
        let mut held = 0usize;
        source.for_each(|k, _p, e| {
            if failed.is_some() {
                return;
            }
            let Some(proc_) = procs.get_mut(&k) else { return };
            if e.kind() == Some(EventKind::ClockSync) {
                return; // times are on the host clock already
            }
            proc_.pending.push(proc_.remap(e));
            held += 1;
            let full = proc_.pending.len() >= BLOCK;
            // One process's block when it is full, every process's when too many wait in all.
            let flush: Vec<u32> = match (full, held >= HELD) {
                (_, true) => procs.keys().copied().collect(),
                (true, false) => vec![k],
                _ => return,
            };
            for f in flush {
                let Some(p) = procs.get_mut(&f) else { continue };
                held -= p.pending.len();
                merged.events += p.pending.len() as u64;
                if let Err(err) = out.write_events(p.key, &p.pending) {
                    failed = Some(err);
                }
                p.pending.clear();
            }
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        for proc_ in procs.values() {
            merged.events += proc_.pending.len() as u64;
            out.write_events(proc_.key, &proc_.pending)?;
        }
    }
    let mut w = out.finish(Footer { events: merged.events, command, exit_code: None })?;
    w.flush().map_err(FileError::Io)?;
    merged.placement = clock.placement();
    Ok(merged)
}

struct Proc {
    key: u32,
    ids: FxHashMap<u32, u32>,
    clock: align::ToJob,
    pending: Vec<RawEvent>,
}

impl Proc {
    fn id(&self, old: u32) -> u32 {
        if old == 0 {
            0
        } else {
            self.ids.get(&old).copied().unwrap_or(0)
        }
    }

    /// `e` with its string ids in the merged file's region and its times on the job's clock (timeless events,
    /// at 0, stay at 0).
    fn remap(&self, e: &RawEvent) -> RawEvent {
        let mut out = *e;
        out.map_string_ids(|id| self.id(id));
        self.clock.event(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::file::ProcessInfo;

    /// A recording of one process on `host`: a clock pair, then `n` collectives.
    fn trace(path: &std::path::Path, pid: u32, host: &str, n: u64) {
        let mut w = TraceWriter::new(Vec::new()).unwrap();
        let mut strings = StringRegion::default();
        let nccl = strings.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
        w.write_strings(pid, 4, &strings.bytes()[4..]).unwrap();
        let pair =
            cuflight_format::view::ClockPair { cupti_ns: 1_000, monotonic_ns: 1_000, realtime_ns: 5_000 + pid as u64 };
        let mut events = vec![RawEvent::clock_pair(pair)];
        for i in 0..n {
            let mut k = RawEvent::new(EventKind::Kernel, 0, 10_000 * (i + 1), 10_000 * (i + 1) + 500);
            k.name = nccl;
            events.push(k);
        }
        w.write_events(pid, &events).unwrap();
        let info =
            ProcessInfo { pid, host: host.into(), device_clock_monotonic: true, finished: true, ..Default::default() };
        w.write_process(&info).unwrap();
        std::fs::write(path, w.finish(Footer::default()).unwrap()).unwrap();
    }

    /// One open a trace, however many passes: the clock facts and the events come from the same source.
    #[test]
    fn each_trace_is_opened_once() {
        let dir = std::env::temp_dir().join(format!("cuflight-merge-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<_> = (0..3u32).map(|i| dir.join(format!("r{i}.cuf"))).collect();
        for (i, p) in paths.iter().enumerate() {
            trace(p, 100 + i as u32, &format!("host{i}"), 4);
        }
        let before = EventSource::opened_on_this_thread();
        let mut heard = 0;
        let merged = merge(&paths, Vec::new(), vec!["test".into()], &mut |_, _| heard += 1).unwrap();
        assert_eq!(EventSource::opened_on_this_thread() - before, 3, "one open a trace");
        assert_eq!((heard, merged.processes, merged.events), (3, 3, 12), "clock pairs are not written again");
        assert_eq!(merged.placement.hosts.len(), 3, "three hosts aligned on their collectives");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every event of a pass: its process key, kind, times and name.
    fn stream(source: &mut EventSource) -> Vec<(u32, Option<EventKind>, u64, u64, String)> {
        let mut out = Vec::new();
        source
            .for_each(|key, p, e| {
                let name = p.strings.get(&e.name).cloned().unwrap_or_default();
                out.push((key, e.kind(), e.start, e.end, name));
            })
            .unwrap();
        out
    }

    /// 64 ranks on 8 hosts (pids repeating across hosts): the job's source streams what `merge` writes, event for
    /// event in the same order on the same clock, under the same keys, with each trace opened once and no file.
    #[test]
    fn a_job_source_streams_what_merge_writes() {
        let dir = std::env::temp_dir().join(format!("cuflight-job-source-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<_> = (0..64u32).map(|i| dir.join(format!("r{i}.cuf"))).collect();
        for (i, p) in paths.iter().enumerate() {
            trace(p, 100 + (i % 8) as u32, &format!("host{}", i / 8), 4);
        }
        let mut bytes = Vec::new();
        let merged = merge(&paths, &mut bytes, vec!["test".into()], &mut |_, _| {}).unwrap();
        let mut from_file = EventSource::from_bytes(bytes, "merged").unwrap().expect("a version-2 trace");

        let before = EventSource::opened_on_this_thread();
        let mut heard = 0;
        let (mut job, placed) = EventSource::open_job(&paths, vec!["test".into()], &mut |_, _| heard += 1).unwrap();
        assert_eq!(EventSource::opened_on_this_thread() - before, 64, "one open a trace");
        assert_eq!(heard, 64);
        assert_eq!(placed.hosts.len(), 8, "eight hosts aligned");
        assert_eq!(job.processes.keys().collect::<Vec<_>>(), from_file.processes.keys().collect::<Vec<_>>());
        let (a, b) = (stream(&mut job), stream(&mut from_file));
        assert_eq!(a.len() as u64, merged.events);
        assert_eq!(a, b, "the same events in the same order");
        assert_eq!(stream(&mut job), a, "a second pass gives the same");
        assert_eq!(EventSource::opened_on_this_thread() - before, 64, "passes open nothing again");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
