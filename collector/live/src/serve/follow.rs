//! `--duty continuous`: every dormant agent is attached once and recorded without pause, its work folded into
//! counters every interval (`capture::continuous`: back-to-back files, each removed once folded), so the
//! metrics cover all the time after the first arming. One thread per followed process; when serve stops, each
//! agent is detached (left dormant again) before serve exits.

use super::{refresh, Shared};
use cuflight_capture::continuous::{attach_continuous, Part};
use cuflight_trace::model::memory::LiveMemory;
use cuflight_trace::model::source::EventSource;
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
        let Some(mut m) = shared.lock().expect("metrics").get(&pid).cloned() else { return false };
        let open = || EventSource::open(part.path).map_err(|e| e.to_string());
        let covered = part.to_ns.saturating_sub(part.from_ns);
        match open().and_then(|mut s| m.fold(&mut s, covered, Some(&mut live))) {
            Ok(()) => {
                // Idle causes need a report of the part; one that cannot be made costs only them.
                if let Err(e) = open().and_then(|s| m.fold_idle(s)) {
                    eprintln!("cuflight serve: idle causes of pid {pid} left out of one part: {e}");
                }
                if let Some(now) = shared.lock().expect("metrics").get_mut(&pid) {
                    (m.state, m.command) = (now.state, now.command.clone());
                    *now = m;
                }
            }
            Err(e) => eprintln!("cuflight serve: recording of pid {pid} unreadable: {e}"),
        }
        !stop.load(Ordering::Relaxed)
    });
    if let Err(e) = folded {
        // Another collector attached first, or the process left: tried again while it is dormant.
        if !stop.load(Ordering::Relaxed) {
            eprintln!("cuflight serve: cannot follow pid {pid}: {e}");
        }
    }
}
