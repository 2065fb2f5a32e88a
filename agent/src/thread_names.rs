//! Names of threads: those the program gives through NVTX (`nvtxNameOsThread`, and its category names), kept to
//! be given again in each window and dump, and the names the operating system knows threads by
//! (`pthread_setname_np`, `prctl(PR_SET_NAME)`: PyTorch's `pt_autograd_0`, a server's worker pools), so that a
//! timeline and a report say "pt_autograd_0" where they would say "thread 24922", as Nsight Systems does. A name
//! the program gave comes first: the OS name is not recorded for such a thread.
//!
//! Each thread names itself with its first event of a window ([`first_event_name`], one `prctl` call), and the
//! threads alive are named again at each window's start and before each dump ([`live_threads`], on the agent's
//! control thread), where the first events may have been overwritten.

use crate::{clock, state};
use cuflight_format::{EventKind, RawEvent};

/// Thread and category names given so far, (kind, domain handle, thread or category id, name): the events that
/// gave them belong to the window or the flight-recorder span they came in, so they are given again at the start
/// of every attach window and before every dump. Naming calls are rare; the table is bounded. The domain is kept
/// as its handle (`nvtx_handles`), named anew in each window's segment.
static NAMES_GIVEN: parking_lot::Mutex<Vec<NameGiven>> = parking_lot::Mutex::new(Vec::new());
pub type NameGiven = (EventKind, usize, u64, Vec<u8>);
const MAX_NAMES_GIVEN: usize = 4096;

/// Keeps a name the program gave (the latest for the same thing stands).
pub fn remember(kind: EventKind, domain: usize, a: u64, name: Vec<u8>) {
    let mut given = NAMES_GIVEN.lock();
    match given.iter().position(|(k, d, x, _)| *k == kind && *d == domain && *x == a) {
        Some(i) => given[i].3 = name,
        None if given.len() < MAX_NAMES_GIVEN => given.push((kind, domain, a, name)),
        None => {}
    }
}

/// Every name the program gave so far.
pub fn given() -> Vec<NameGiven> {
    NAMES_GIVEN.lock().clone()
}

/// Whether the program named thread `tid` itself. Never waits: while a naming call holds the table, the answer
/// is no, and the program's name, recorded after, still wins.
fn named_by_program(tid: u32) -> bool {
    NAMES_GIVEN
        .try_lock()
        .is_some_and(|given| given.iter().any(|(k, _, a, _)| *k == EventKind::ThreadName && *a == tid as u64))
}

/// The calling thread's OS name as an event naming thread `tid` (the caller), None where it has none or the
/// program named the thread itself.
pub fn first_event_name(tid: u32) -> Option<RawEvent> {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes the calling thread's name, at most 16 bytes with its NUL, into the buffer.
    if unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) } != 0 {
        return None;
    }
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    event(tid, &name[..len])
}

/// Events naming every thread of this process alive now, from `/proc/self/task` (a new window, a dump).
pub fn live_threads() -> Vec<RawEvent> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .flatten()
        .take(MAX_THREADS)
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.parse::<u32>().ok()?;
            let comm = std::fs::read(task.path().join("comm")).ok()?;
            event(tid, comm.strip_suffix(b"\n").unwrap_or(&comm))
        })
        .collect()
}

/// Threads named at most per walk: a program with more has most of them idle, and each name is an event.
const MAX_THREADS: usize = 4096;

fn event(tid: u32, name: &[u8]) -> Option<RawEvent> {
    if name.is_empty() || named_by_program(tid) {
        return None;
    }
    let id = state::intern(name);
    (id != 0).then(|| {
        let now = clock::monotonic_ns();
        let mut ev = RawEvent::new(EventKind::ThreadName, 0, now, now);
        ev.name = id;
        ev.set_named_thread(tid as u64);
        ev
    })
}
