//! What a program may call itself (the `cuflight` Python module does, through ctypes): the agent's state, to
//! wait until an attached collector records, and step marks.
//!
//! A step mark ends the step in progress and starts the next, as torch.profiler's `prof.step()` does: each step
//! is an NVTX start/end range named `ProfilerStep#N` in the default domain (start/end rather than push/pop: a
//! step may end on another thread than the one it started on, and must not nest with the program's own ranges).
//! `cuflight attach --steps`, `report` and `stats` find steps by that name.

use crate::{clock, control, nvtx, state, thread_rings};
use cuflight_format::view::Nvtx;
use cuflight_format::{EventKind, RawEvent};
use std::ffi::c_int;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The range id of the step in progress (0: none yet).
static OPEN_STEP: AtomicU64 = AtomicU64::new(0);
static NEXT_STEP: AtomicU64 = AtomicU64::new(0);

/// The agent's state: 0 not started (the driver has not initialised CUDA yet), 1 dormant, 2 recording, 3 flight
/// recorder (`cuflight_format::control::STATE_*`).
#[no_mangle]
pub extern "C" fn cuflight_state() -> c_int {
    std::panic::catch_unwind(|| control::state() as c_int).unwrap_or(0)
}

/// A measurement aid (gpu-validate's cost part, benches/agent-overhead): while `on` is non-zero the agent's API
/// callback returns at once, as for a whole run with `CUFLIGHT_NOOP_CALLBACK=1`. A program that times batches of
/// calls with it on and off, alternated, measures the agent's own work per call in one process: CUPTI's dispatch
/// and records, the thread's placement and the machine's state are common to both (across processes, CUPTI's
/// kernel records alone spread launches by +-20% on an H200, 2026-11-27). Nothing else changes: kernels are
/// still recorded; the calls made meanwhile are not.
#[no_mangle]
pub extern "C" fn cuflight_bench_skip_callbacks(on: c_int) {
    crate::teardown::set_skip(on != 0);
}

/// Ends the step in progress (if any) and starts the next; returns the new step's number (from 0), or -1 after a
/// failure inside the agent. Costs two ring pushes while recording, and nothing else otherwise.
#[no_mangle]
pub extern "C" fn cuflight_mark_step() -> i64 {
    std::panic::catch_unwind(|| {
        let step = NEXT_STEP.fetch_add(1, Ordering::Relaxed);
        let id = nvtx::next_range_id();
        let previous = OPEN_STEP.swap(id, Ordering::AcqRel);
        if !state::enabled() || state::quiet() || state::existing_agent().is_none() {
            return step as i64;
        }
        if crate::sampler::tracking_steps() {
            crate::sampler::marked(previous, id);
        }
        let now = clock::monotonic_ns();
        if previous != 0 {
            let mut end = RawEvent::new(EventKind::NvtxEnd, 0, now, now);
            end.set_nvtx(EventKind::NvtxEnd, Nvtx { id: previous, ..Nvtx::default() });
            thread_rings::push(end);
        }
        // "ProfilerStep#" and up to 20 digits, formatted on the stack.
        let mut buf = [0u8; 40];
        let len = {
            let mut w = &mut buf[..];
            let _ = write!(w, "ProfilerStep#{step}");
            40 - w.len()
        };
        let mut start = RawEvent::new(EventKind::NvtxStart, 0, now, now);
        start.set_nvtx(EventKind::NvtxStart, Nvtx { id, ..Nvtx::default() });
        start.name = thread_rings::intern(&buf[..len]);
        thread_rings::push(start);
        step as i64
    })
    .unwrap_or(-1)
}
