//! What `cuflight launch --flight-recorder` asked for, read from the environment it set: below the state (which
//! must know whether it records for a flight recorder before anything else runs) and the recorder itself.

use once_cell::sync::Lazy;
use std::ffi::CString;

/// What `cuflight launch` asked for, from the environment it set.
pub struct Config {
    /// How much history a dump keeps, in ns; 0: not a flight recorder.
    pub span_ns: u64,
    /// Where automatic dumps go (absolute; `launch` resolves it).
    pub dump_dir: Option<CString>,
    /// 0: no hang detection.
    pub hang_ns: u64,
    /// `--dump-on-slow-step FACTOR`, times 1000 (0: slow steps are not watched).
    pub slow_step_x1000: u64,
    /// `--dump-max-use`, `--dump-keep-free` (bytes; unset: the defaults, from the file system's size).
    pub dump_limits: cuflight_format::segment::dump_dir::Limits,
}

pub static CONFIG: Lazy<Config> = Lazy::new(|| {
    let bytes = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
    let ns = |name: &str| bytes(name).unwrap_or(0);
    let dump_dir = std::env::var("CUFLIGHT_DUMP_DIR")
        .ok()
        .filter(|d| d.starts_with('/') && d.len() < 3000)
        .and_then(|d| CString::new(d).ok());
    Config {
        span_ns: ns("CUFLIGHT_FLIGHT_RECORDER"),
        dump_dir,
        hang_ns: ns("CUFLIGHT_HANG_TIMEOUT"),
        // At least 1.1x: a factor of 1 would dump every step longer than the median.
        slow_step_x1000: match ns("CUFLIGHT_SLOW_STEP") {
            0 => 0,
            x => x.max(1100),
        },
        dump_limits: cuflight_format::segment::dump_dir::Limits {
            max_use: bytes("CUFLIGHT_DUMP_MAX_USE"),
            keep_free: bytes("CUFLIGHT_DUMP_KEEP_FREE"),
        },
    }
});
