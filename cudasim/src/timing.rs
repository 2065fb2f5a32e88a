//! What real CUPTI costs in time, so that clients meet on a CPU the delays they meet on a GPU. The first H100
//! run showed why it matters: cuflight's step windows passed every test here while cudasim's CUPTI answered
//! instantly, and on the GPU ten 1 ms steps went by before the agent's first callback (issue 25).
//!
//! Each figure is a default that an environment variable overrides (`0` turns it off):
//!
//! - `CUDASIM_CUPTI_INIT_MS` (default 100): CUPTI initialises lazily, "the first time you invoke any CUPTI
//!   function" (CUPTI User's Guide, 2.2 CUPTI Initialization), so a tool attaching to a running process pays it
//!   while the program runs on. The value is an estimate, not yet a measurement: the H100 run bounds it from below
//!   (more than ten 1 ms steps between the agent taking NVTX and its first CUPTI callback, with the agent's
//!   set-up being a dozen CUPTI calls); `scripts/gpu-validate` now prints the arming time to replace it.
//! - `CUDASIM_CUPTI_ENABLE_MS` (default 2): each `cuptiActivityEnable` of a kind, which CUPTI applies to every
//!   context the process has (cupti_activity.h: enabling "for all contexts and streams"). Also an estimate.
//! - `CUDASIM_CALLBACK_NS` (default 57): dispatching one callback site (enter or exit) to a subscriber. Measured
//!   on an H100 (CUDA 13.0, CUPTI 13.0.1; issue 26's table, medians of 5 runs): `cudaGetDevice` took 34 ns with
//!   no tool and 148 ns with a no-op subscriber to the runtime domain, 114 ns for its two sites.
//!
//! Activity records need no figure here: as in CUPTI, they reach the client only when a buffer fills or at a
//! flush (`activity.rs`), so their delay is the client's flush period.

use once_cell::sync::Lazy;
use std::sync::Once;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

static INIT_MS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_CUPTI_INIT_MS", 100));
static ENABLE_MS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_CUPTI_ENABLE_MS", 2));
static CALLBACK_NS: Lazy<u64> = Lazy::new(|| env_u64("CUDASIM_CALLBACK_NS", 57));

/// CUPTI's lazy initialisation, paid once per process by its first CUPTI call (any entry point).
pub(crate) fn cupti_call() {
    static INIT: Once = Once::new();
    INIT.call_once(|| sleep_ms(*INIT_MS));
}

/// One `cuptiActivityEnable` (legacy or per-subscriber).
pub(crate) fn activity_enable() {
    sleep_ms(*ENABLE_MS);
}

/// One callback site dispatched to `subscribers` subscribers: a short busy wait, as the dispatch is CPU work on
/// the calling thread.
#[inline]
pub(crate) fn callback_sites(subscribers: usize) {
    let ns = *CALLBACK_NS * subscribers as u64;
    if ns == 0 {
        return;
    }
    let until = crate::now_ns() + ns;
    while crate::now_ns() < until {
        std::hint::spin_loop();
    }
}

fn sleep_ms(ms: u64) {
    if ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}
