//! A process being recorded: its mapped segment, what was drained from it and not yet written, and its facts
//! as the trace records them. Everything read from the segment is checked (see `segment`): it is another
//! process's memory.

use cuflight_format::file::{Drops, ProcessInfo};
use cuflight_format::segment::{parse_strings, record_class, state, MappedSegment};
use cuflight_format::RawEvent;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub(super) struct Tracked {
    pub(super) seg: MappedSegment,
    /// The agent's connection: wake-ups arrive here.
    pub(super) conn: OwnedFd,
    /// The pid as this collector sees it (the sender's credentials).
    pub(super) pid: u32,
    /// What its blocks carry in the file: the pid, or for a pid seen before in this recording a key of its own.
    pub(super) key: u32,
    /// Process facts as last written to the file, and when.
    pub(super) written: Option<ProcessInfo>,
    pub(super) written_at: Instant,
    pub(super) strings_read: u64,
    /// Drained but not yet written: strings (from region offset `pending_base`) and events.
    pub(super) pending_strings: Vec<u8>,
    pub(super) pending_base: u64,
    pub(super) pending_events: Vec<RawEvent>,
    /// (CUPTI, CLOCK_MONOTONIC) pairs seen so far, written into the process facts (bounded).
    pub(super) clock_pairs: Vec<(u64, u64)>,
    /// A flight recorder's snapshot: its events were taken once, its rings are never drained (nor its drain
    /// heartbeat written, which would make its threads wait for a collector).
    pub(super) frozen: bool,
}

impl Tracked {
    pub(super) fn new(seg: MappedSegment, conn: OwnedFd, pid: u32) -> Tracked {
        Tracked {
            seg,
            conn,
            pid,
            key: pid,
            written: None,
            written_at: Instant::now(),
            strings_read: 0,
            pending_strings: Vec::new(),
            pending_base: 0,
            pending_events: Vec::new(),
            clock_pairs: Vec::new(),
            frozen: false,
        }
    }

    /// Keeps the clock pairs among `pending_events[from..]`.
    pub(super) fn note_clock_pairs(&mut self, from: usize) {
        for e in &self.pending_events[from..] {
            if e.kind() == Some(cuflight_format::EventKind::ClockSync) {
                if self.clock_pairs.len() >= MAX_CLOCK_PAIRS {
                    let mut i = 0;
                    self.clock_pairs.retain(|_| {
                        i += 1;
                        i % 2 == 0
                    });
                }
                self.clock_pairs.push((e.start, e.end));
            }
        }
    }
}

/// Clock pairs kept per process: one per agent flush (1 s) is 18 hours; past it every other pair is dropped.
pub(super) const MAX_CLOCK_PAIRS: usize = 1 << 16;

/// Why `pid` has no agent to talk to, in a line: no such process here, or `hint` (what to do about a process
/// without an agent).
pub(crate) fn no_agent_in(pid: u32, hint: &str) -> String {
    if std::path::Path::new(&format!("/proc/{pid}")).exists() {
        format!("no cuflight agent answers in process {pid} ({hint}`cuflight ps` lists the agents you may control)")
    } else {
        format!("no process {pid} runs here (in this PID namespace); `cuflight ps` lists the agents you may control")
    }
}

/// The process is gone (exited, or a zombie waiting for its parent).
pub(super) fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
        }
        Err(_) => true,
    }
}

/// Records a live process has dropped so far, every cause.
pub(super) fn live_drops(seg: &MappedSegment) -> u64 {
    let h = seg.header();
    // Saturating throughout: a hostile (same-user) process may write any value into its counters.
    ring_drops(seg)
        .saturating_add(h.no_ring_drops.load(Ordering::Relaxed))
        .saturating_add(h.cupti_dropped.load(Ordering::Relaxed))
        .saturating_add(h.records_skipped.load(Ordering::Relaxed))
}

/// Events dropped for want of room, summed over the segment's rings.
fn ring_drops(seg: &MappedSegment) -> u64 {
    (0..seg.reserved_rings()).filter_map(|i| seg.ring(i)).fold(0u64, |a, r| a.saturating_add(r.dropped()))
}

pub(super) fn process_info(t: &Tracked) -> ProcessInfo {
    let h = t.seg.header();
    let st = h.state.load(Ordering::Acquire);
    let mut drops = Drops {
        no_ring: h.no_ring_drops.load(Ordering::Relaxed),
        strings_full: h.string_drops.load(Ordering::Relaxed),
        cupti_dropped: h.cupti_dropped.load(Ordering::Relaxed),
        records_skipped: h.records_skipped.load(Ordering::Relaxed),
        ..Default::default()
    };
    drops.ring_full = ring_drops(&t.seg);
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
    let late = cuflight_format::segment::LateInjection::unpack(h.injected_late.load(Ordering::Relaxed));
    let armed_ns = h.armed_ns.load(Ordering::Acquire);
    // What was left out on purpose (`--trace`): its tables are unknown, not empty.
    let mask = h.trace_mask.load(Ordering::Relaxed);
    let mut not_recorded = Vec::new();
    if mask != 0 && mask & cuflight_format::tracing::NVTX == 0 {
        not_recorded.push(("nvtx".to_string(), "not traced (--trace without nvtx)".to_string()));
    }
    if mask != 0 && mask & cuflight_format::tracing::SYNC == 0 {
        let why = "not traced (CUPTI's synchronization records cost every runtime call; --trace cuda,...,sync)";
        not_recorded.push(("sync".to_string(), why.to_string()));
    }
    ProcessInfo {
        pid: t.pid,
        key: if t.key == t.pid { 0 } else { t.key },
        ppid: h.ppid,
        cmdline: cmdline.split('\0').map(str::to_string).collect(),
        exe: string_at(&t.seg, h.exe.load(Ordering::Relaxed)),
        host: string_at(&t.seg, h.host.load(Ordering::Relaxed)),
        cupti_version: h.cupti_version.load(Ordering::Relaxed),
        cupti_path: string_at(&t.seg, h.cupti_path.load(Ordering::Relaxed)),
        status: if st == state::DISABLED { t.seg.status() } else { String::new() },
        start_realtime_ns: h.start_realtime_ns,
        // A flight recorder's snapshot the agent flushed CUPTI for is whole up to its dump (the program ran on);
        // a crash's image is not.
        finished: st == state::FINISHED
            || st == state::DISABLED
            || (t.frozen
                && cuflight_format::segment::dump_reason::flushed_first(h.dump_reason.load(Ordering::Relaxed))),
        drops,
        rank: h.rank_plus_one.load(Ordering::Relaxed).checked_sub(1),
        local_rank: h.local_rank_plus_one.load(Ordering::Relaxed).checked_sub(1),
        world_size: h.world_size.load(Ordering::Relaxed),
        records_unused,
        buffers_grown: h.buffers_grown.load(Ordering::Relaxed),
        buffers_refused: h.buffers_refused.load(Ordering::Relaxed),
        device_clock_monotonic: h.device_clock_monotonic.load(Ordering::Relaxed) == 1,
        clock_pairs: t.clock_pairs.clone(),
        rings_refused: h.rings_refused.load(Ordering::Relaxed),
        last_flush_ns: h.last_flush_ns.load(Ordering::Relaxed),
        flush_period_ms: h.flush_period_ms.load(Ordering::Relaxed),
        injected_late: late.injected,
        nvtx_tables_late: late.nvtx_tables_late,
        nvtx_tables_foreign: late.nvtx_tables_foreign,
        not_recorded,
        traced: if mask == 0 { String::new() } else { cuflight_format::tracing::describe(mask) },
        armed_ns,
        arming_ns: armed_ns.checked_sub(h.arm_began_ns.load(Ordering::Relaxed)).filter(|_| armed_ns != 0).unwrap_or(0),
        unseen_begin: h.unseen_begin.load(Ordering::Relaxed),
        program_held_ns: h.program_held_ns.load(Ordering::Relaxed),
        delivery_held_ns: h.delivery_held_ns.load(Ordering::Relaxed),
        python_stacks: h.python_stacks.load(Ordering::Relaxed),
        python_stack_ns: h.python_stack_ns.load(Ordering::Relaxed),
        python_reader: h.python_reader.load(Ordering::Relaxed),
        gpu_counters: h.gpu_counters.load(Ordering::Relaxed),
        gpu_samples: h.gpu_samples.load(Ordering::Relaxed),
        gpu_sample_overflows: h.gpu_sample_overflows.load(Ordering::Relaxed),
        gpu_sampling_ns: h.gpu_sampling_ns.load(Ordering::Relaxed),
    }
}

/// Empties one process's rings and takes its new strings (after the events, so every id they name is
/// included); returns how many events came. Everything read is checked: see `segment`.
pub(super) fn drain_one(t: &mut Tracked, now: u64) -> usize {
    let before = t.pending_events.len();
    if !t.frozen {
        let h = t.seg.header();
        h.collector_drained_ns.store(now, Ordering::Relaxed);
        h.wake_pending.store(0, Ordering::Relaxed);
        for i in 0..t.seg.reserved_rings() {
            if let Some(mut consumer) = t.seg.consumer(i) {
                consumer.drain_into(&mut t.pending_events);
            }
        }
        t.note_clock_pairs(before);
    }
    let strings = t.seg.strings_since(t.strings_read);
    if t.pending_strings.is_empty() {
        t.pending_base = t.strings_read;
    }
    t.pending_strings.extend_from_slice(strings);
    t.strings_read += strings.len() as u64;
    t.pending_events.len() - before
}

/// Reads a segment the way `record` does (drain, strings, process facts): for fuzzing the collector's side of
/// shared memory. Returns how many events and strings it found.
#[doc(hidden)]
pub fn read_segment_once(seg: MappedSegment) -> usize {
    let Ok(null) = std::fs::File::open("/dev/null") else { return 0 };
    let pid = seg.pid();
    let mut t = Tracked::new(seg, null.into(), pid);
    let n = drain_one(&mut t, 1) + drain_one(&mut t, 2);
    let info = process_info(&t);
    n + parse_strings(0, &t.pending_strings).count() + info.cmdline.len()
}

pub(super) fn string_at(seg: &MappedSegment, id: u32) -> String {
    if id == 0 {
        return String::new();
    }
    parse_strings(id as u64, seg.strings_since(id as u64))
        .next()
        .map(|(_, s)| String::from_utf8_lossy(s).into_owned())
        .unwrap_or_default()
}
