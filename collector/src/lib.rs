//! The cuflight collector library: one crate per role, re-exported here under their roles' names, dependencies
//! pointing one way (the compiler holds it):
//! - [`model`], [`import`], [`output`] (crate `cuflight-trace`): the trace model and the time-ordered event
//!   source, with the one rule for each derived fact; readers of other tools' traces (torch.profiler/Kineto JSON,
//!   Nsight Systems SQLite); output files that never destroy an input;
//! - [`analysis`] (`cuflight-analysis`, over the model): `stats` and the text tables;
//! - [`report`] (`cuflight-report`, over the model and the analyses): the diagnosis (steps, idle-time causes,
//!   findings, the job across ranks) and `diff`;
//! - [`export`] (`cuflight-export`, over the model only): Perfetto and Chrome JSON timelines, Parquet tables,
//!   merge;
//! - [`capture`] (`cuflight-capture`, over the model): recording a program, attach, dumps, recovery;
//! - [`live`] (`cuflight-live`, over capture and the report): `serve`'s Prometheus metrics and `top`.
//!
//! `main.rs` parses arguments and runs each subcommand over these.
//!
//! ```no_run
//! use cuflight_collector::{analysis::stats::Stats, model::source::EventSource};
//! let mut source = EventSource::open(std::path::Path::new("run.cuf")).unwrap();
//! let stats = Stats::compute_source(&mut source).unwrap();
//! println!("{}", stats.to_table());
//! ```
#![forbid(unsafe_code)]

pub use cuflight_analysis as analysis;
pub use cuflight_capture as capture;
pub use cuflight_export as export;
#[doc(hidden)]
pub use cuflight_fuzzing as fuzzing;
pub use cuflight_live as live;
pub use cuflight_report as report;
pub use cuflight_trace::{import, model, output};
