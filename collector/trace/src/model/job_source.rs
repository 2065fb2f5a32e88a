//! Several traces of one job (one per host or rank, any format) as one [`EventSource`]: every event on the job's
//! clock ([`crate::model::job_clock::JobClock`]: each process's REALTIME offset, then its host's shift onto the
//! reference host), in one
//! time order across all of them, each trace opened once and read block by block as its own source reads it. What
//! `cuflight merge` writes to a file, without the file: `export`, `stats` and the Parquet tables of several traces
//! read this.
//!
//! A process keeps its pid as its key unless an earlier trace had that pid (then `0x8000_0000 | n`, as a recording
//! keys a reused pid), and comes out as a merged trace's would: on the host clock already (no clock pairs, no
//! clock-sync events), its display name in its command line where it had none.

use super::{merge, EventSource, Events, OpenBlock, OpenScratch, PendingBlock, SortScratch};
use crate::model::align::ToJob;
use crate::model::trace::{clock_map, Process, TraceError};
use cuflight_format::file::{Footer, ProcessInfo};
use cuflight_format::{EventKind, RawEvent};
use std::collections::{BTreeMap, HashSet};

/// The traces behind a job's source.
pub struct Job {
    parts: Vec<Part>,
    /// Every part's pending blocks on the job's clock, by earliest time: `offset` indexes `origin`, `pid` is the
    /// job's key, `seq` is unique across parts.
    pending: Vec<PendingBlock>,
    /// Per job-level block: its part and the block as that part knows it.
    origin: Vec<(usize, PendingBlock)>,
}

/// One trace of the job: its events as its own source holds them, and per process of it (by its own key) the key
/// in the job and the way onto the job's clock.
struct Part {
    events: Events,
    processes: BTreeMap<u32, Process>,
    to_job: BTreeMap<u32, (u32, ToJob)>,
}

impl EventSource {
    /// `parts` (each opened once) as one source on the job's clock, `to_job` saying how each process's times go
    /// onto it ([`crate::model::job_clock::JobClock::to_job`]). `command` goes to the footer, as a merge would
    /// write it.
    pub fn job(parts: Vec<EventSource>, to_job: &dyn Fn(&Process) -> ToJob, command: Vec<String>) -> EventSource {
        let mut processes = BTreeMap::new();
        let mut job = Job { parts: Vec::with_capacity(parts.len()), pending: Vec::new(), origin: Vec::new() };
        let mut job_keys = JobKeys::default();
        let mut events = 0u64;
        for source in parts {
            events = events.saturating_add(source.footer.events);
            let mut keys = BTreeMap::new();
            for (&own, p) in &source.processes {
                let key = job_keys.key(p.info.pid);
                keys.insert(own, (key, to_job(p)));
                processes.insert(key, as_merged(p, key));
            }
            let part = job.parts.len();
            // A part's blocks keep their own order among themselves (it breaks ties between equal times).
            let base = job.origin.len() as u32;
            for b in source.events.pending() {
                let (key, clock) = &keys[&b.pid];
                let offset = job.origin.len() as u64;
                let earliest = if b.earliest == 0 { 0 } else { clock.at_u64(b.earliest) };
                let seq = base.saturating_add(b.seq);
                job.pending.push(PendingBlock { earliest, seq, offset, pid: *key, events: b.events });
                job.origin.push((part, b.clone()));
            }
            job.parts.push(Part { events: source.events, processes: source.processes, to_job: keys });
        }
        job.pending.sort_by_key(|b| (b.earliest, b.seq));
        EventSource {
            processes,
            footer: Footer { events, command, exit_code: None },
            cut_short: None,
            fractional_us_timestamps: false,
            peak_open_blocks: 0,
            events: Events::Job(Box::new(job)),
            cut: None,
        }
    }
}

/// The keys of a job's processes: a process keeps its pid unless an earlier one of the job had it, then it gets
/// `0x8000_0000 | n` (as a recording keys a reused pid). The one rule for `merge` and the job's source.
#[derive(Default)]
pub struct JobKeys {
    seen: HashSet<u32>,
    next: u32,
}

impl JobKeys {
    pub fn key(&mut self, pid: u32) -> u32 {
        if self.seen.insert(pid) {
            pid
        } else {
            self.next += 1;
            0x8000_0000 | self.next
        }
    }
}

/// Process `p`'s facts as a merged trace writes them under `key`: its times on the host clock already (no clock
/// pairs left to apply), its rank, and its display name as its command line where it had none. The one rule for
/// `merge` and the job's source.
pub fn merged_info(p: &Process, key: u32) -> ProcessInfo {
    let mut info = p.info.clone();
    info.key = if key == info.pid { 0 } else { key };
    info.rank = info.rank.or(p.rank);
    info.device_clock_monotonic = true;
    info.clock_pairs.clear();
    if info.cmdline.is_empty() && !p.name.is_empty() {
        info.cmdline = vec![p.name.clone()];
    }
    info
}

/// Process `p` as a merged trace keyed `key` reads back: [`merged_info`], a pid where it had none.
fn as_merged(p: &Process, key: u32) -> Process {
    let mut info = merged_info(p, key);
    if info.pid == 0 {
        info.pid = key;
    }
    Process {
        clock: clock_map(&info, &[]),
        rank: info.rank,
        strings: p.strings.clone(),
        mangled: p.mangled.clone(),
        info,
        ..Process::default()
    }
}

impl Job {
    /// One time-ordered pass over every part (see [`EventSource::for_each`]); the most blocks open at once.
    pub(super) fn pass(
        &mut self,
        processes: &mut BTreeMap<u32, Process>,
        f: &mut impl FnMut(&BTreeMap<u32, Process>, u32, &Process, &RawEvent),
    ) -> Result<usize, TraceError> {
        let mut sort = SortScratch::default();
        // Loaded parts (small imports, version-1 files) lend copies: their own events stay on their own clocks.
        let mut open = Vec::new();
        for part in &self.parts {
            let Events::Loaded(per_process) = &part.events else { continue };
            for (own, events) in per_process {
                let (key, clock) = &part.to_job[own];
                let seq = (self.origin.len() + open.len()) as u32;
                let mut events = events.clone();
                on_job_clock(&mut events, clock, &mut sort);
                open.push(OpenBlock::new(*key, seq, events));
            }
        }
        let mut scratch: Vec<OpenScratch> = self.parts.iter().map(|_| OpenScratch::default()).collect();
        let (parts, origin) = (&mut self.parts, &self.origin);
        let open_block = |b: &PendingBlock, spare: Option<Vec<RawEvent>>| -> Result<Option<OpenBlock>, TraceError> {
            let (index, own) = &origin[b.offset as usize];
            let part = &mut parts[*index];
            let Some(mut block) = part.events.open_block(&part.processes, own, spare, &mut scratch[*index])? else {
                return Ok(None);
            };
            on_job_clock(&mut block.events, &part.to_job[&own.pid].1, &mut sort);
            Ok(Some(OpenBlock::new(b.pid, b.seq, block.events)))
        };
        let peak = merge(processes, open, self.pending.clone(), open_block, None, f);
        for (part, scratch) in self.parts.iter().zip(&scratch) {
            for (own, &(key, _)) in &part.to_job {
                if let Some(p) = processes.get_mut(&key) {
                    p.refused = scratch.refused_of(*own);
                }
            }
        }
        peak
    }
}

/// `events` (one process's, on its host clock) on the job's: clock pairs dropped (the times they map are mapped),
/// times moved, sorted again (a host's shift drifts, so order is kept by sorting, not assumed).
fn on_job_clock(events: &mut Vec<RawEvent>, clock: &ToJob, sort: &mut SortScratch) {
    events.retain(|e| e.kind() != Some(EventKind::ClockSync));
    for e in events.iter_mut() {
        clock.event(e);
    }
    sort.stable_by_start(events);
}
