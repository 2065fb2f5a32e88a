//! Processes started with `cuflight launch --flight-recorder` record all the time, into rings that keep their
//! newest events: serve opens no window on them (they are not dormant) and takes a snapshot of each every second
//! instead, as `cuflight dump PID` does (the agent flushes CUPTI and hands its rings over; the collector copies them
//! without draining, and the program records on), folding what ended since the snapshot before. No CUPTI session
//! is added and nothing is armed: the metrics cover all the time since the first snapshot, and what they say the
//! recording costs is what the program pays all along (a flight recorder is a continuous recording).
//!
//! A ring that wrapped between two snapshots (a thread with more than its 16 Ki events a second) lost events
//! before serve saw them: said once a process, since its counters then read low.

use super::{count_lost, fold_into, refresh, Shared};
use cuflight_capture::dump;
use cuflight_trace::model::memory::LiveMemory;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often a flight recorder is snapshotted: often enough that a busy thread's ring (16 Ki events) seldom wraps
/// in between, and a CUPTI flush a second is what the agent does anyway (`CUFLIGHT_FLUSH_MS`).
pub const EVERY: Duration = Duration::from_secs(1);

/// Per flight-recorded process: where its last snapshot ended (the agent's clock), its device memory replayed
/// across snapshots, and whether a wrap was said.
#[derive(Default)]
struct Followed {
    last_ns: u64,
    live: LiveMemory,
    said_wrap: bool,
    said_failure: bool,
}

/// Follows every flight-recorded agent (those in `pids`, or all) until `stop`, a snapshot of each every [`EVERY`]:
/// on a thread of its own, so that serve's windows on dormant programs (which last `--duty`'s ON) never space
/// the snapshots out past what the rings hold.
pub fn follow(pids: &[u32], shared: &Shared, scratch: &Path, stop: &AtomicBool) {
    let mut snapshots = Snapshots::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        snapshots.round(pids, shared, scratch);
        while started.elapsed() < EVERY && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[derive(Default)]
struct Snapshots {
    followed: BTreeMap<u32, Followed>,
}

impl Snapshots {
    /// Snapshots every flight-recorded agent there is now and folds each into `shared`.
    fn round(&mut self, pids: &[u32], shared: &Shared, scratch: &Path) {
        let rows = refresh(pids, shared);
        let flying: Vec<u32> = rows.iter().filter(|r| r.state == "flight recorder").map(|r| r.pid).collect();
        self.followed.retain(|pid, _| flying.contains(pid));
        for pid in flying {
            let path = scratch.join(format!("{pid}-flight.cuf"));
            self.snapshot(pid, &path, shared);
            let _ = std::fs::remove_file(&path);
        }
    }

    fn snapshot(&mut self, pid: u32, path: &Path, shared: &Shared) {
        let first = !self.followed.contains_key(&pid);
        let f = self.followed.entry(pid).or_default();
        let d = match dump::dump_since(pid, path, f.last_ns, EVERY) {
            Ok(d) => d,
            // The process left, or another collector holds it: tried again next round, said once (`top` draws
            // over the same terminal).
            Err(e) => {
                count_lost(shared, pid, "not_recorded");
                if !std::mem::replace(&mut f.said_failure, true) {
                    cuflight_capture::notice!("cuflight serve: no snapshot of flight recorder {pid}: {e}");
                }
                return;
            }
        };
        // The first snapshot covers the last second; each later one the time since the one before.
        let covered = if first || d.dump_ns < f.last_ns { EVERY.as_nanos() as u64 } else { d.dump_ns - f.last_ns };
        if !f.said_wrap && d.complete_for.is_some_and(|c| (c.as_nanos() as u64) < covered) {
            f.said_wrap = true;
            cuflight_capture::notice!(
                "cuflight serve: flight recorder {pid}: a busy thread's ring wrapped between two snapshots, so its \
                 counters miss events (more events a ring: CUFLIGHT_RING_EVENTS in its environment)"
            );
        }
        f.last_ns = d.dump_ns;
        let what = format!("a snapshot of flight recorder {pid}");
        fold_into(shared, pid, path, covered, Some(&mut f.live), &what, |m| {
            if first {
                m.new_session();
            }
            m.window_period_ns = 0; // recorded all along
        });
    }
}
