//! The cuflight collector library, by role:
//! - [`capture`]: recording a program (launch, agents' rings, trace file) and recovering cut-short traces;
//! - [`model`]: the trace model and the time-ordered event source, with the one rule for each derived fact;
//! - [`import`]: readers of other tools' traces (torch.profiler/Kineto JSON, Nsight Systems SQLite);
//! - [`analysis`]: `stats` and `report`;
//! - [`export`]: Perfetto and Chrome JSON timelines, tables, safe output files.
//!
//! `main.rs` only parses arguments and calls these.
//!
//! ```no_run
//! use cuflight_collector::{analysis::stats::Stats, model::source::EventSource};
//! let mut source = EventSource::open(std::path::Path::new("run.cuf")).unwrap();
//! let stats = Stats::compute_source(&mut source).unwrap();
//! println!("{}", stats.to_table());
//! ```
#![forbid(unsafe_code)]

pub mod analysis;
pub mod capture;
pub mod export;
#[doc(hidden)]
pub mod fuzzing;
pub mod import;
pub mod model;
