//! Analyses over the trace model: the `nsys stats`-style tables ([`stats`], streamed) and the diagnosis
//! ([`report`]: steps, idle-time causes, findings with their cost and fix, stragglers across ranks).

pub mod diff;
pub mod report;
pub mod stats;
pub mod table;
