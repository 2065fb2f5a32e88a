//! Threads named as the operating system knows them (`pthread_setname_np`, `prctl(PR_SET_NAME)`: PyTorch's
//! `pt_autograd_0`, a server's worker pools), so that a timeline and a report say "pt_autograd_0" where they
//! would say "thread 24922", as Nsight Systems does. A name the program gave through NVTX (`nvtxNameOsThread`)
//! comes first: the OS name is not recorded for such a thread.
//!
//! Each thread names itself with its first event of a window ([`first_event_name`], one `prctl` call), and the
//! threads alive are named again at each window's start and before each dump ([`name_live_threads`], on the
//! agent's control thread), where the first events may have been overwritten.

use crate::{nvtx, state, thread_rings};
use cuflight_format::RawEvent;

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

/// Names every thread of this process that is alive now from `/proc/self/task` (a new window, a dump).
pub fn name_live_threads() {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
    for task in tasks.flatten().take(MAX_THREADS) {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else { continue };
        let Ok(comm) = std::fs::read(task.path().join("comm")) else { continue };
        if let Some(ev) = event(tid, comm.strip_suffix(b"\n").unwrap_or(&comm)) {
            thread_rings::push(ev);
        }
    }
}

/// Threads named at most per walk: a program with more has most of them idle, and each name is an event.
const MAX_THREADS: usize = 4096;

fn event(tid: u32, name: &[u8]) -> Option<RawEvent> {
    if name.is_empty() || nvtx::named_by_program(tid) {
        return None;
    }
    let id = state::intern(name);
    (id != 0).then(|| nvtx::thread_name_event(tid, id))
}
