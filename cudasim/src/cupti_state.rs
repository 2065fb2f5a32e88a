//! CUPTI's state that the simulated device and activity buffers read while the API layer (`cupti.rs`) changes
//! it: which activity kinds are on, whether `cuptiFinalize` ran, and the correlation id of the thread's outermost
//! API call (what its device work's records carry).

use crate::c;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static ACTIVITY_KINDS: AtomicU64 = AtomicU64::new(0);
static FINALIZED: AtomicBool = AtomicBool::new(false);
static FINALIZATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Correlation id of the outermost API call on this thread (what the activity records carry).
    static OUTER_CORRELATION: Cell<u32> = const { Cell::new(0) };
}

/// Correlation id that activity records of work issued now should carry.
pub(crate) fn current_correlation() -> u32 {
    OUTER_CORRELATION.with(|c| c.get())
}

/// An API call with `correlation` begins: true when it is the thread's outermost (it then owns the id).
pub(crate) fn enter_outer(correlation: u32) -> bool {
    OUTER_CORRELATION.with(|c| {
        let outer = c.get() == 0;
        if outer {
            c.set(correlation);
        }
        outer
    })
}

/// The outermost API call ended.
pub(crate) fn leave_outer() {
    OUTER_CORRELATION.with(|c| c.set(0));
}

/// cuptiFinalize was called and no CUPTI call has initialised CUPTI again since: no records.
pub(crate) fn finalized() -> bool {
    FINALIZED.load(Ordering::Relaxed)
}

/// cuptiFinalize: CUPTI "destroys and cleans up all the resources associated with CUPTI in the current process"
/// (cupti_activity.h, cuptiFinalize), so no kind stays enabled.
pub(crate) fn finalize() {
    ACTIVITY_KINDS.store(0, Ordering::Relaxed);
    GRAPH_LEVEL.store(false, Ordering::Relaxed);
    FINALIZED.store(true, Ordering::Relaxed);
    FINALIZATIONS.fetch_add(1, Ordering::Relaxed);
}

/// Test-only (not a CUDA function): how many times cuptiFinalize tore CUPTI down in this process.
#[no_mangle]
pub extern "C" fn cudasim_cupti_finalizations() -> u64 {
    FINALIZATIONS.load(Ordering::Relaxed)
}

/// CUPTI initialised again by a call after cuptiFinalize (`timing::cupti_call`): a tool may attach again.
pub(crate) fn reinitialise() {
    FINALIZED.store(false, Ordering::Relaxed);
}

/// Graph-level tracing selected for the session: cupti_activity.h, CUPTI_ACTIVITY_KIND_GRAPH_TRACE, "Successfully
/// enabling this activity selects graph-level tracing for the CUPTI session. Disabling the activity stops delivery
/// of graph records but does not restore node level tracing of graph nodes." Graph nodes then have no kernel,
/// memcpy or memset records; cuptiFinalize ends the session.
static GRAPH_LEVEL: AtomicBool = AtomicBool::new(false);

pub(crate) fn graph_level() -> bool {
    GRAPH_LEVEL.load(Ordering::Relaxed)
}

pub(crate) fn activity_enabled(kind: c::CUpti_ActivityKind) -> bool {
    kind < 64 && ACTIVITY_KINDS.load(Ordering::Relaxed) & (1 << kind) != 0
}

/// Some activity kind was enabled in this process, by any client (what `hw_trace.rs` must come before).
static EVER_ENABLED: AtomicBool = AtomicBool::new(false);

pub(crate) fn any_kind_enabled() -> bool {
    EVER_ENABLED.load(Ordering::Relaxed)
}

pub(crate) fn kind_was_enabled() {
    EVER_ENABLED.store(true, Ordering::Relaxed);
}

/// Turns activity kind `kind` on or off (kinds past 63 are never on).
pub(crate) fn set_kind(kind: c::CUpti_ActivityKind, on: bool) {
    if kind >= 64 {
        return;
    }
    if on {
        kind_was_enabled();
    }
    if on && kind == c::CUPTI_ACTIVITY_KIND_GRAPH_TRACE {
        GRAPH_LEVEL.store(true, Ordering::Relaxed);
    }
    if on {
        ACTIVITY_KINDS.fetch_or(1 << kind, Ordering::Relaxed);
    } else {
        ACTIVITY_KINDS.fetch_and(!(1 << kind), Ordering::Relaxed);
    }
}
