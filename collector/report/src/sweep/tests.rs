//! The sweep's counts where several threads launch: each thread's calls counted as its own.

use crate::tests::{api, kernel, loop_trace, source, sweep};
use cuflight_format::{EventKind, RawEvent};

/// A side thread that launched a long kernel and waits for it from before the first step to after the last (a
/// checkpoint writer, an evaluation stream): the host timeline merges it with the step thread's calls into one
/// stretch that began before the steps. The step thread's 60 synchronising calls are still each counted, and the
/// side thread's wait, which began outside the steps, is not.
#[test]
fn a_threads_waits_are_counted_when_another_thread_waits_through_every_step() {
    let mut p = loop_trace(60);
    let end = p.events.iter().map(|e| e.end).max().unwrap();
    let side = 2;
    let mut ev = vec![
        RawEvent { tid: side, ..api(3, 500_000, 4_000, 90_000) },
        RawEvent { stream: 9, ..kernel(2, 510_000, end, 90_000) },
        RawEvent { tid: side, ..api(4, 600_000, end, 0) },
    ];
    p.events.append(&mut ev);
    p.events.sort_by_key(|e| e.start);
    assert!(p.events.iter().all(|e| e.kind() != Some(EventKind::Api) || e.tid == 1 || e.tid == side));
    let swept = sweep(&mut source(p), 1 << 20);
    assert_eq!(swept.rows.len(), 60);
    assert_eq!(swept.sync_calls["cudaStreamSynchronize"].0, 60, "the step thread's waits, each once");
    assert_eq!(swept.sync_threads, 1);
}
