//! A collector session: the private listener agents hand their shared-memory segments to, the processes that
//! handed one over, and the trace their rings are drained into. `record` runs one around the program it starts;
//! `attach`, `dump` and the continuous recordings each run one around a process already running.
//!
//! What a session promises whatever happens: blocks reach the file at least every half second, and the file is
//! readable up to its last complete block even if the collector is killed; a write error (full disk) stops
//! writing but never the program, whose agents see the drain heartbeat stop and run on at full speed; a process
//! that dies abruptly (SIGKILL) loses only what its agent had not flushed yet, since the session still holds its
//! segment and drains it.
use crate::outputs::{Outputs, RecordError};
use crate::recorded_process::{drain_one, live_drops, process_gone, process_info, Tracked};
use crate::status::Progress;
use crate::summary::{Arming, RecordSummary};
use cuflight_format::channel::Listener;
use cuflight_format::file::{Drops, ProcessInfo};
use cuflight_format::segment::{self, state, MappedSegment};
use cuflight_format::tracing::TracedLaunches;
use cuflight_format::{EventKind, RawEvent};
use std::collections::{BTreeMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Drained data is written in blocks of this many events at most this old: large blocks compress far better
/// than one per 10 ms drain, and memory stays bounded.
const WRITE_EVENTS: usize = 1 << 16;
const WRITE_AGE: Duration = Duration::from_millis(500);

/// Process facts are rewritten at most this often while they change (a later block replaces an earlier one):
/// a trace cut short still names its processes.
const INFO_EVERY: Duration = Duration::from_secs(5);

struct Recorder {
    listener: Listener,
    /// Live processes by arrival order (pids may be reused within a run).
    tracked: BTreeMap<u64, Tracked>,
    next_key: u64,
    /// Every pid that handed over a segment in this recording.
    pids_seen: HashSet<u32>,
    /// Facts of processes already ended and let go.
    ended: Vec<ProcessInfo>,
    sink: Outputs,
    pending: usize,
    /// Steps and time slices the agents recorded whole under `--sample` (their `Sampled` events).
    sampled_steps: u64,
    sampled_slices: u64,
    /// Kernels and CUDA graph nodes CUPTI traced one by one (each lengthened its launch call).
    traced_launches: TracedLaunches,
    last_write: Instant,
    last_liveness: Instant,
    /// Set by a write error: nothing more is drained or written.
    stopped: Option<String>,
    /// Refused peers already reported (a hostile peer must not flood stderr).
    complained: HashSet<String>,
    /// An attach window bounded by the program's own marks: what lies outside is dropped as it is drained.
    window: Option<super::window::Window>,
}

impl Recorder {
    /// Takes every segment agents have handed over since the last call.
    fn accept(&mut self) {
        while let Some(r) = self.listener.accept() {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    self.complain(e.to_string());
                    continue;
                }
            };
            match MappedSegment::from_fd(r.fd) {
                Ok(seg) => {
                    let mut t = Tracked::new(seg, r.conn, r.pid);
                    // Pids stay below 2^22 (pid_max): keys from 2^31 never collide with one.
                    if !self.pids_seen.insert(r.pid) {
                        t.key = 0x8000_0000 | (self.next_key as u32 & 0x7fff_ffff);
                    }
                    self.tracked.insert(self.next_key, t);
                    self.next_key += 1;
                }
                Err(e) => self.complain(format!("ignoring the segment of process {}: {e}", r.pid)),
            }
        }
    }

    /// Reports a refused peer or segment once per distinct message, at most 20 times a run.
    fn complain(&mut self, msg: String) {
        if self.complained.len() < 20 && self.complained.insert(msg.clone()) {
            crate::notice!("cuflight: {msg}");
        }
    }

    /// Empties every ring (strings after events, so every id an event names is included), and writes what was
    /// drained once enough has accumulated, or when `force`d.
    fn drain(&mut self, force: bool) {
        if self.stopped.is_some() {
            return;
        }
        let now = segment::monotonic_ns();
        for t in self.tracked.values_mut() {
            let before = t.pending_events.len();
            let n = drain_one(t, now);
            for e in &t.pending_events[before..] {
                match e.kind() {
                    Some(EventKind::Sampled) => {
                        *if e.is_sampled_slice() { &mut self.sampled_slices } else { &mut self.sampled_steps } += 1
                    }
                    _ => self.traced_launches.add(e),
                }
            }
            match self.window.as_mut() {
                Some(w) => {
                    w.filter(&t.seg, &mut t.pending_events, before);
                    self.pending += t.pending_events.len() - before;
                }
                None => self.pending += n,
            }
        }
        if force || self.pending >= WRITE_EVENTS || self.last_write.elapsed() >= WRITE_AGE {
            self.write_pending();
        }
        if let Some(e) = self.sink.error() {
            self.stop(e);
        }
    }

    /// A write error: stop draining and writing, and tell the agents no collector is draining (so none waits).
    fn stop(&mut self, why: String) {
        if self.stopped.is_some() {
            return;
        }
        say_write_error(&why);
        self.stopped = Some(why);
        for t in self.tracked.values() {
            t.seg.header().collector_drained_ns.store(0, Ordering::Relaxed);
        }
    }

    /// Hands what was drained to the writer thread (which encodes, compresses and writes it) and asks for the
    /// file to be flushed, so blocks reach it at least every [`WRITE_AGE`].
    fn write_pending(&mut self) {
        for t in self.tracked.values_mut() {
            let info = process_info(t);
            let changed = t.written.as_ref().is_none_or(|w| {
                w.drops != info.drops || w.status != info.status || w.cupti_version != info.cupti_version
            });
            if t.written.is_none() || (changed && t.written_at.elapsed() >= INFO_EVERY) {
                self.sink.process(t.key, info.clone());
                t.written = Some(info);
                t.written_at = Instant::now();
            }
            self.sink.strings(t.key, t.pending_base, std::mem::take(&mut t.pending_strings));
            self.sink.events(t.key, std::mem::take(&mut t.pending_events));
        }
        self.sink.flush();
        self.pending = 0;
        self.last_write = Instant::now();
    }

    /// Lets go of processes that have ended: a last drain, their final facts, and their memory freed.
    fn retire_ended(&mut self, check_all: bool) {
        if !check_all && self.last_liveness.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.last_liveness = Instant::now();
        let ended: Vec<u64> = self
            .tracked
            .iter()
            .filter(|(_, t)| {
                let st = t.seg.header().state.load(Ordering::Acquire);
                process_gone(t.pid) || (st == state::DISABLED && t.seg.reserved_rings() == 0)
            })
            .map(|(&k, _)| k)
            .collect();
        if ended.is_empty() {
            return;
        }
        self.drain(true);
        for k in ended {
            let t = self.tracked.remove(&k).expect("listed above");
            let info = process_info(&t);
            if self.stopped.is_none() {
                self.sink.process(t.key, info.clone());
            }
            self.ended.push(info);
        }
    }

    fn all_ended(&self) -> bool {
        self.tracked.is_empty()
    }

    fn conns(&self) -> Vec<i32> {
        self.tracked.values().map(|t| t.conn.as_raw_fd()).collect()
    }
}

/// A session name nobody else uses: the collector's pid and random bits (the socket name also holds the uid).
fn session_id(attempt: u32) -> String {
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let bits = if random.is_ok() { u64::from_le_bytes(bytes) } else { nanos ^ attempt as u64 };
    format!("{}-{bits:016x}", std::process::id())
}

/// A file that could not be written, said once a minute: windows and parts written one after another (serve,
/// top, `record --sample`) fail alike, whether the error met a block on its way or the end of the file.
fn say_write_error(why: &str) {
    crate::notice::at_most_a_minute(format_args!("cuflight: {why}; the file ends there, the program runs on"));
}

/// A collector session: the listener agents hand their segments to, and the trace being written.
pub(super) struct Session {
    pub name: String,
    rec: Recorder,
}

impl Session {
    /// Binds a fresh session name and creates the output (refusing to replace a file without `force`).
    pub fn open(path: &Path, force: bool) -> Result<Session, RecordError> {
        Session::open_near(path, force, None, None)
    }

    /// The same, with the listener in the network namespace of process `netns_of` (None: ours), so that an
    /// agent in a container can hand its segment over, and for the agents of user `uid` (None: ours; root
    /// attaching to another user's agent names that user).
    pub fn open_near(
        path: &Path,
        force: bool,
        netns_of: Option<u32>,
        uid: Option<u32>,
    ) -> Result<Session, RecordError> {
        let uid = uid.unwrap_or_else(cuflight_format::channel::euid);
        let mut bound = None;
        for attempt in 0..8 {
            let session = session_id(attempt);
            match Listener::bind_for(&session, netns_of, uid) {
                Ok(l) => {
                    bound = Some((session, l));
                    break;
                }
                Err(e) if attempt == 7 => return Err(RecordError::Channel(e)),
                Err(_) => {}
            }
        }
        let (name, listener) = bound.expect("bound or returned");
        let sink = Outputs::open(path, force)?;
        let rec = Recorder {
            listener,
            tracked: BTreeMap::new(),
            next_key: 0,
            pids_seen: HashSet::new(),
            ended: Vec::new(),
            sink,
            pending: 0,
            sampled_steps: 0,
            sampled_slices: 0,
            traced_launches: TracedLaunches::default(),
            last_write: Instant::now(),
            last_liveness: Instant::now(),
            stopped: None,
            complained: HashSet::new(),
            window: None,
        };
        Ok(Session { name, rec })
    }

    /// One round: takes new segments, drains, lets ended processes go (all of them checked when `check_all`).
    pub fn step(&mut self, check_all: bool) {
        self.rec.accept();
        self.rec.drain(false);
        self.rec.retire_ended(check_all);
    }

    /// Sleeps until `timeout_ms` passes or an agent connects, asks for a drain or hangs up.
    pub fn wait(&self, timeout_ms: i32) -> bool {
        self.rec.listener.wait(&self.rec.conns(), timeout_ms)
    }

    pub fn all_ended(&self) -> bool {
        self.rec.all_ended()
    }

    /// Keeps only what lies inside `window` from here on.
    pub fn set_window(&mut self, window: super::window::Window) {
        self.rec.window = Some(window);
    }

    /// Where the window set by [`Self::set_window`] stands.
    pub fn window_phase(&self) -> Option<super::window::Phase> {
        self.rec.window.as_ref().map(|w| w.phase)
    }

    /// When the last of the agents armed (CLOCK_MONOTONIC ns); None until one has.
    pub fn armed_ns(&self) -> Option<u64> {
        self.rec.tracked.values().map(|t| t.seg.header().armed_ns.load(Ordering::Acquire)).filter(|&a| a != 0).max()
    }

    /// How the window waited for the agents' arming (see [`Arming`]).
    pub fn arming(&self) -> Arming {
        let took_ns = self
            .rec
            .tracked
            .values()
            .filter_map(|t| {
                let h = t.seg.header();
                let armed = h.armed_ns.load(Ordering::Acquire);
                (armed != 0).then(|| armed.saturating_sub(h.arm_began_ns.load(Ordering::Relaxed)))
            })
            .max();
        let before = self.rec.window.as_ref().map_or(0, |w| w.before_arming);
        Arming { took_ns, ranges_before: before }
    }

    /// The next segment an agent handed over, mapped and validated (for a snapshot); None when none waits.
    pub fn accept_segment(&mut self) -> Option<Result<(MappedSegment, OwnedFd, u32), String>> {
        let r = match self.rec.listener.accept()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e.to_string())),
        };
        let pid = r.pid;
        Some(MappedSegment::from_fd(r.fd).map(|seg| (seg, r.conn, pid)).map_err(|e| e.to_string()))
    }

    /// Adds a process whose events were taken already (a flight recorder's snapshot): they are written as they
    /// are, and its rings are never drained.
    pub fn add_snapshot(&mut self, seg: MappedSegment, conn: OwnedFd, pid: u32, events: Vec<RawEvent>) {
        let mut t = Tracked::new(seg, conn, pid);
        t.frozen = true;
        self.rec.pending += events.len();
        t.pending_events = events;
        t.note_clock_pairs(0);
        if !self.rec.pids_seen.insert(pid) {
            t.key = 0x8000_0000 | (self.rec.next_key as u32 & 0x7fff_ffff);
        }
        self.rec.tracked.insert(self.rec.next_key, t);
        self.rec.next_key += 1;
    }

    /// The processes recorded so far (live or ended).
    pub fn processes(&self) -> usize {
        self.rec.tracked.len() + self.rec.ended.len()
    }

    /// Where a recording stands, for the status line: processes, events written, records dropped, file bytes.
    pub fn progress(&self) -> Progress {
        let live = self.rec.tracked.values().fold(0u64, |a, t| a.saturating_add(live_drops(&t.seg)));
        let ended = self.rec.ended.iter().fold(0u64, |a, i| a.saturating_add(i.drops.total()));
        Progress {
            processes: self.processes(),
            events: self.rec.sink.events_written(),
            dropped: live.saturating_add(ended),
            bytes: self.rec.sink.bytes(),
        }
    }

    /// Ends the file being written as [`Self::finish`] does, the processes staying attached, and goes on in a
    /// fresh file at `path`: continuous recording in back-to-back files with the agents armed once. The new file
    /// is self-contained: every string from the first (ids are offsets into the agent's string region) and every
    /// process's facts again. Returns why the finished file is incomplete, if it is. A write error stops only the
    /// file it hit: the next one is tried (a full disk may have room again), starting from what the rings get
    /// after the cut; what they held meanwhile went with the failed file.
    pub fn rotate(&mut self, path: &Path, command: &[String]) -> Result<Option<String>, RecordError> {
        let rec = &mut self.rec;
        rec.accept();
        rec.drain(true);
        let now = segment::monotonic_ns();
        for t in rec.tracked.values_mut() {
            let info = process_info(t);
            if rec.stopped.is_none() {
                rec.sink.process(t.key, info);
            } else {
                drain_one(t, now);
                t.pending_events.clear();
            }
            (t.strings_read, t.pending_base, t.written) = (0, 0, None);
            t.pending_strings.clear();
        }
        let old = std::mem::replace(&mut rec.sink, Outputs::open(path, true)?);
        let stopped = rec.stopped.take();
        let error = old.finish(command, None, stopped.is_some()).error;
        if let (None, Some(e)) = (&stopped, &error) {
            say_write_error(e);
        }
        Ok(stopped.or(error))
    }

    /// A last drain, every process's facts, the footer; commits the file (or keeps what reached it after a
    /// write error).
    pub fn finish(self, command: Vec<String>, exit_code: Option<i32>) -> RecordSummary {
        let Session { mut rec, .. } = self;
        rec.accept();
        rec.drain(true);
        let mut infos = std::mem::take(&mut rec.ended);
        infos.extend(rec.tracked.values().map(process_info));
        let mut drops = Drops::default();
        let mut disabled = Vec::new();
        let mut unflushed = Vec::new();
        for info in &infos {
            if rec.stopped.is_none() {
                rec.sink.process(info.file_key(), info.clone());
            }
            let d = info.drops;
            drops.ring_full += d.ring_full;
            drops.no_ring += d.no_ring;
            drops.strings_full += d.strings_full;
            drops.cupti_dropped += d.cupti_dropped;
            drops.records_skipped += d.records_skipped;
            if !info.status.is_empty() {
                disabled.push((info.pid, info.status.clone()));
            }
            if !info.finished && info.cupti_version != 0 {
                unflushed.push((info.pid, info.flush_period_ms));
            }
        }
        let handed = rec.sink.events_written();
        let processes = infos.len();
        let stopped = rec.stopped.take();
        // What reached a file is kept even after a write error (readable up to its last complete block); only a
        // replacement of an existing file is abandoned then, leaving the old file as it was.
        let crate::outputs::Finished { files, error, unwritten } =
            rec.sink.finish(&command, exit_code, stopped.is_some());
        if let (None, Some(e)) = (&stopped, &error) {
            say_write_error(e);
        }
        rec.stopped = stopped.or(error);
        let bytes = files.iter().map(|f| f.1).sum();
        RecordSummary {
            exit_code: exit_code.unwrap_or(0),
            events: handed.saturating_sub(unwritten),
            unwritten,
            processes,
            drops,
            bytes,
            disabled,
            forwarded: Vec::new(),
            stopped: rec.stopped.take(),
            unflushed,
            range_never_started: false,
            sampled_steps: rec.sampled_steps,
            sampled_slices: rec.sampled_slices,
            traced_launches: rec.traced_launches,
            traced: infos.iter().filter(|i| !i.traced.is_empty()).map(|i| (i.pid, i.traced.clone())).collect(),
            arming: Arming::default(),
            program_held_ns: infos.iter().fold(0u64, |a, i| a.saturating_add(i.program_held_ns)),
            delivery_held_ns: infos.iter().fold(0u64, |a, i| a.saturating_add(i.delivery_held_ns)),
            python_stacks: infos.iter().fold(0u64, |a, i| a.saturating_add(i.python_stacks)),
            python_stack_ns: infos.iter().fold(0u64, |a, i| a.saturating_add(i.python_stack_ns)),
            python_unread: infos
                .iter()
                .filter_map(|i| cuflight_format::python_reader::describe(i.python_reader).map(|w| (i.pid, w)))
                .collect(),
            gpu_samples: infos.iter().fold(0u64, |a, i| a.saturating_add(i.gpu_samples)),
            gpu_sample_overflows: infos.iter().fold(0u64, |a, i| a.saturating_add(i.gpu_sample_overflows)),
            gpu_sampling_ns: infos.iter().fold(0u64, |a, i| a.saturating_add(i.gpu_sampling_ns)),
            gpu_counters_refused: infos
                .iter()
                .filter_map(|i| cuflight_format::gpu_counters::describe(i.gpu_counters).map(|w| (i.pid, w)))
                .collect(),
            files,
        }
    }
}
