//! `--duty continuous`: every dormant agent is attached once and recorded without pause, its work folded into
//! counters every interval (`capture::continuous`: back-to-back files, each removed once folded), so the
//! metrics cover all the time after the first arming. One thread per followed process; when serve stops, each
//! agent is detached (left dormant again) before serve exits.

use super::{count_lost, fold_into, refresh, Shared};
use cuflight_capture::continuous::{attach_continuous, Part};
use cuflight_trace::model::memory::LiveMemory;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Followers {
    stop: Arc<AtomicBool>,
    threads: Mutex<BTreeMap<u32, JoinHandle<()>>>,
}

impl Followers {
    pub fn new(stop: Arc<AtomicBool>) -> Followers {
        Followers { stop, threads: Mutex::default() }
    }

    /// Starts following every dormant agent not followed yet (the ones whose thread ended, because the process
    /// left or another collector took it, may be followed again once dormant).
    pub fn follow_new(&self, pids: &[u32], interval: Duration, shared: &Shared, scratch: &Path) {
        let rows = refresh(pids, shared);
        let mut threads = self.threads.lock().expect("followers");
        threads.retain(|_, t| !t.is_finished());
        for r in rows.iter().filter(|r| r.state == "dormant") {
            if threads.contains_key(&r.pid) {
                continue;
            }
            let (pid, stop, shared, dir) = (r.pid, self.stop.clone(), shared.clone(), PathBuf::from(scratch));
            threads.insert(pid, std::thread::spawn(move || follow(pid, interval, &stop, &shared, &dir)));
        }
    }

    /// Waits for every follower (they stop once `stop` is set, detaching their agents).
    pub fn join(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().expect("followers"));
        for (_, t) in threads {
            let _ = t.join();
        }
    }
}

fn follow(pid: u32, interval: Duration, stop: &AtomicBool, shared: &Shared, dir: &Path) {
    // One recording cut into parts: device memory is replayed across them, and the agent's tallies start anew.
    let mut live = LiveMemory::default();
    if let Some(m) = shared.lock().expect("metrics").get_mut(&pid) {
        m.new_session();
    }
    let folded = attach_continuous(pid, dir, interval, stop, |part: Part| {
        if part.incomplete.is_some() {
            // Said by the recording; the next part is tried afresh. Allocations and frees it held are unseen.
            count_lost(shared, pid, "unwritten");
            live = LiveMemory::default();
            return shared.lock().expect("metrics").contains_key(&pid) && !stop.load(Ordering::Relaxed);
        }
        let covered = part.to_ns.saturating_sub(part.from_ns);
        let what = format!("one part of pid {pid}'s recording");
        fold_into(shared, pid, part.path, covered, Some(&mut live), &what, |_| {}) && !stop.load(Ordering::Relaxed)
    });
    if let Err(e) = folded {
        // Another collector attached first, or the process left: tried again while it is dormant.
        if !stop.load(Ordering::Relaxed) {
            cuflight_capture::notice!("cuflight serve: cannot follow pid {pid}: {e}");
        }
    }
}
