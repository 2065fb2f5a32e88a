//! `cuflight dump`: the last seconds of a flight recorder (`cuflight launch --flight-recorder DUR`) as a trace,
//! from a live process or from the image its agent wrote when it crashed or hung.
//!
//! A live agent flushes CUPTI and hands its segment over like `attach` does, but keeps recording: the collector
//! takes one snapshot of every ring without draining it (`Consumer::peek_into`), keeps what ended within the
//! span, and lets go. An image (`cuflight-PID-TIME-N.seg` in the dump directory) is another process's output
//! and read as hostile input: copied into private memory and validated like a live segment.

use super::record::{RecordError, RecordSummary};
use super::session::Session;
use super::AGENT_REPLY_MS as REPLY_MS;
use cuflight_format::segment::{dump_reason, MappedSegment};
use cuflight_format::{control, EventKind, RawEvent};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What to dump.
#[derive(Clone, Debug)]
pub enum Target {
    Pid(u32),
    Image(PathBuf),
}

impl Target {
    /// A pid, or else the path of an image.
    pub fn parse(text: &str) -> Target {
        match text.parse::<u32>() {
            Ok(pid) if pid > 0 => Target::Pid(pid),
            _ => Target::Image(PathBuf::from(text)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{}", super::recorded_process::no_agent_in(*.0, ""))]
    NoAgent(u32),
    #[error("cannot list agents: {0}")]
    List(std::io::Error),
    #[error("the agent in process {pid} cannot dump: {why}")]
    Refused { pid: u32, why: String },
    #[error("cannot reach the agent in process {pid}: {source}")]
    Control { pid: u32, source: cuflight_format::channel::ChannelError },
    #[error("the agent in process {0} answered but handed nothing over")]
    NothingHanded(u32),
    #[error("{path}: {why}")]
    Image { path: String, why: String },
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// What a dump produced.
pub struct Dumped {
    pub summary: RecordSummary,
    pub pid: u32,
    pub reason: String,
    /// The span kept, and the earliest time every ring still covered (later than the span's start when busy
    /// rings wrapped within it), both as seconds before the dump.
    pub span: Duration,
    pub complete_for: Option<Duration>,
    /// When the agent took the snapshot, on its clock (the events' own): where the next of [`dump_since`]'s
    /// snapshots begins.
    pub dump_ns: u64,
}

pub fn dump(target: &Target, output: &Path, last: Option<Duration>, force: bool) -> Result<Dumped, DumpError> {
    let keep = Keep { last, after_ns: None };
    match target {
        Target::Pid(pid) => from_process(*pid, output, keep, force),
        Target::Image(path) => from_image(path, output, keep, force),
    }
}

/// A live flight recorder's events that ended after `after_ns` (a previous snapshot's [`Dumped::dump_ns`], however
/// long ago; 0: those of the last `first`) and by the snapshot's own time, for a collector that takes snapshot after
/// snapshot (`serve`): each event is in one of them. `output` is replaced.
pub fn dump_since(pid: u32, output: &Path, after_ns: u64, first: Duration) -> Result<Dumped, DumpError> {
    let last = (after_ns == 0).then_some(first);
    from_process(pid, output, Keep { last, after_ns: Some(after_ns) }, true)
}

/// What a snapshot keeps: the events that ended within `last` (None: the recorder's span); with `after_ns`, only
/// those that ended after it and by the snapshot's time (a later snapshot has the rest).
#[derive(Clone, Copy)]
struct Keep {
    last: Option<Duration>,
    after_ns: Option<u64>,
}

fn from_process(pid: u32, output: &Path, keep: Keep, force: bool) -> Result<Dumped, DumpError> {
    let name = control::find(pid).map_err(DumpError::List)?.ok_or(DumpError::NoAgent(pid))?;
    let mut session = Session::open_near(output, force, control::netns_of(&name), control::uid_of(&name))?;
    match control::command(&name, control::COMMAND_DUMP, session.name.as_bytes(), REPLY_MS) {
        Ok(Ok(())) => {}
        Ok(Err(why)) => return Err(DumpError::Refused { pid, why }),
        Err(source) => return Err(DumpError::Control { pid, source }),
    }
    // The agent handed the segment over before it answered; the connection waits in the listener.
    let deadline = Instant::now() + Duration::from_secs(2);
    let (seg, conn, seen_pid) = loop {
        match session.accept_segment() {
            Some(Ok(got)) => break got,
            Some(Err(why)) => return Err(DumpError::Refused { pid, why }),
            None if Instant::now() >= deadline => return Err(DumpError::NothingHanded(pid)),
            None => {
                session.wait(50);
            }
        }
    };
    finish(session, seg, conn, seen_pid, keep, format!("dump {pid}"))
}

fn from_image(path: &Path, output: &Path, keep: Keep, force: bool) -> Result<Dumped, DumpError> {
    let shown = path.display().to_string();
    let bad = |why: String| DumpError::Image { path: shown.clone(), why };
    if output.canonicalize().ok().is_some_and(|o| path.canonicalize().ok() == Some(o)) {
        return Err(bad("the output would replace the image it is read from".into()));
    }
    let file = open_image(path).map_err(bad)?;
    let seg = MappedSegment::from_image(&file).map_err(|e| bad(format!("not a flight recorder image ({e})")))?;
    let null: OwnedFd = std::fs::File::open("/dev/null").map_err(|e| bad(format!("/dev/null: {e}")))?.into();
    let session = Session::open(output, force)?;
    let pid = seg.pid();
    finish(session, seg, null, pid, keep, format!("dump {shown}"))
}

/// Opens an image without following a link, and only one of this user's (root: anyone's).
fn open_image(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(
            |e| match e.raw_os_error() {
                Some(libc::ELOOP) => "a symbolic link (give the image itself)".to_string(),
                _ => e.to_string(),
            },
        )?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let me = cuflight_format::channel::euid();
    if meta.uid() != me && me != 0 {
        return Err(format!("owned by user {}, not by you", meta.uid()));
    }
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    Ok(file)
}

fn finish(
    mut session: Session,
    seg: MappedSegment,
    conn: OwnedFd,
    pid: u32,
    keep: Keep,
    command: String,
) -> Result<Dumped, DumpError> {
    let h = seg.header();
    let recorder_span = h.flight_recorder_ns.load(Ordering::Relaxed);
    let dump_ns = h.dump_ns.load(Ordering::Relaxed);
    let reason = dump_reason::describe(h.dump_reason.load(Ordering::Relaxed));
    let span = keep.last.unwrap_or(Duration::from_nanos(if recorder_span == 0 { u64::MAX } else { recorder_span }));
    let armed_ns = h.armed_ns.load(Ordering::Acquire);
    let (events, oldest_complete) = snapshot(&seg, dump_ns, span, armed_ns, keep.after_ns);
    let complete_for = oldest_complete.map(|t| Duration::from_nanos(dump_ns.saturating_sub(t)));
    session.add_snapshot(seg, conn, pid, events);
    session.step(false);
    // Whether the agent flushed CUPTI first (nothing it held is missing) is the process's own fact, read from
    // its dump reason (`recorded_process::process_info`).
    let summary = session.finish(vec![command], None);
    Ok(Dumped { summary, pid, reason, span, complete_for, dump_ns })
}

/// Every ring's events that ended within `span` before `dump_ns` (the agent's clock), in ring order, with the
/// facts that hold for the whole run (devices, thread and category names, clock pairs) kept whatever their age,
/// the latest of each. Also returns the start of the oldest event of the youngest ring that wrapped: from there
/// on the snapshot is complete. Nothing from before the recorder was armed (`armed_ns`, 0: unknown) is kept, as
/// for any window: its calls would lack their device work. With `after_ns`, only what ended after it and by
/// `dump_ns` (what ended later is the next snapshot's).
fn snapshot(
    seg: &MappedSegment,
    dump_ns: u64,
    span: Duration,
    armed_ns: u64,
    after_ns: Option<u64>,
) -> (Vec<RawEvent>, Option<u64>) {
    let cutoff = dump_ns.saturating_sub(span.as_nanos().min(u64::MAX as u128) as u64);
    let mut all = Vec::new();
    let mut complete_from: Option<u64> = None;
    for i in 0..seg.reserved_rings() {
        let Some(ring) = seg.ring(i) else { continue };
        // Another process wrote the counters: a snapshot never holds more than the bound, whatever they claim.
        if all.len() as u64 + ring.len().min(ring.capacity()) > MAX_SNAPSHOT_EVENTS {
            crate::notice!("cuflight: ring {i} left out: the snapshot would exceed {MAX_SNAPSHOT_EVENTS} events");
            continue;
        }
        let before = all.len();
        ring.peek_into(&mut all);
        if ring.overwritten() > 0 {
            if let Some(oldest) = all[before..].iter().filter(|e| !is_fact(e)).map(|e| e.start).min() {
                complete_from = Some(complete_from.map_or(oldest, |c| c.max(oldest)));
            }
        }
    }
    let mut latest_fact: HashMap<(u8, u32, u64, u64), usize> = HashMap::new();
    for (i, e) in all.iter().enumerate() {
        if is_fact(e) {
            latest_fact.insert(e.fact_key(), i);
        }
    }
    let mut i = 0;
    all.retain(|e| {
        let keep = if is_fact(e) {
            latest_fact.get(&e.fact_key()) == Some(&i)
        } else {
            let end = e.end.max(e.start);
            (dump_ns == 0 || end >= cutoff)
                && e.start >= armed_ns
                && after_ns.is_none_or(|after| end > after && end <= dump_ns)
        };
        i += 1;
        keep
    });
    (all, complete_from.filter(|&t| t > cutoff))
}

/// Removes from the dump directory `dir` the partial dumps (`.cuflight-PID-...seg.partial`) that processes left when
/// killed while writing (SIGKILL runs nothing): only regular files of this user's whose process no longer runs
/// (a name is not proof of ownership in a shared directory). Returns how many went.
pub fn sweep_partial_dumps(dir: &Path) -> usize {
    use cuflight_format::segment::dump_dir::partial_dump_pid;
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let uid = cuflight_format::channel::euid();
    let mut removed = 0;
    for entry in entries.flatten().take(100_000) {
        let Some(pid) = entry.file_name().to_str().and_then(partial_dump_pid) else { continue };
        let ours = std::fs::symlink_metadata(entry.path()).is_ok_and(|m| m.is_file() && m.uid() == uid);
        if ours && !Path::new(&format!("/proc/{pid}")).exists() && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Most events one snapshot holds (2 GiB): eight times the default segment's 256 rings of 16 Ki events.
const MAX_SNAPSHOT_EVENTS: u64 = 32 << 20;

/// Events that state a fact of the whole run rather than something that happened at their time.
fn is_fact(e: &RawEvent) -> bool {
    matches!(e.kind(), Some(EventKind::Device | EventKind::ThreadName | EventKind::NvtxCategory))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_or_a_path() {
        assert!(matches!(Target::parse("123"), Target::Pid(123)));
        assert!(matches!(Target::parse("0"), Target::Image(_)));
        assert!(matches!(Target::parse("/tmp/cuflight-1-2-0.seg"), Target::Image(_)));
    }
}
