//! Analyses over the trace model: the `nsys stats`-style tables ([`stats`], streamed) and the diagnosis
//! ([`report`]: steps, idle-time causes, findings with their cost and fix, stragglers across ranks).

/// Hosts' clocks aligned on collectives (in the model, with the job clock it serves).
pub use cuflight_trace::model::align;
pub mod diff;
pub mod job_clock;
pub mod report;
pub mod stats;
pub mod table;
