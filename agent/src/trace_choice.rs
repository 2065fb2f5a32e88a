//! What the current recording window traces (`--trace`): the launch's choice, or an attached window's own. Its
//! own module: CUPTI set-up, the callbacks and the control thread all ask it, and it asks none of them.

use cuflight_format::tracing;
use std::sync::atomic::{AtomicU32, Ordering};

/// What this process was started to trace (`CUFLIGHT_TRACE`, set by `cuflight record --trace` or `launch
/// --trace`; the default when unset or, for a variable set by hand, unreadable: an agent never writes to the
/// program's output). It decides whether NVTX is handed a tool at all.
pub fn launch_mask() -> u32 {
    static MASK: once_cell::sync::OnceCell<u32> = once_cell::sync::OnceCell::new();
    *MASK.get_or_init(|| {
        std::env::var("CUFLIGHT_TRACE").ok().and_then(|v| tracing::parse(&v).ok()).unwrap_or(tracing::DEFAULT)
    })
}

/// An attached window's own choice (`cuflight attach --trace`; 0: none, the launch's applies).
static ATTACH_MASK: AtomicU32 = AtomicU32::new(0);

/// Sets the next window's choice (`None`: what the program was launched with).
pub fn set_attach_mask(mask: Option<u32>) {
    ATTACH_MASK.store(mask.unwrap_or(0), Ordering::Release);
}

/// What the current (or next) window traces.
pub fn trace_mask() -> u32 {
    match ATTACH_MASK.load(Ordering::Acquire) {
        0 => launch_mask(),
        m => m,
    }
}
