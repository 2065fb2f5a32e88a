//! The cuflight collector library: recording ([`record`]), the in-memory trace model ([`trace`]) and the
//! analyses behind the `cuflight` subcommands ([`stats`], [`report`]). `main.rs` only parses arguments.
//!
//! ```no_run
//! let trace = cuflight_collector::trace::Trace::load(std::path::Path::new("run.cuf")).unwrap();
//! let stats = cuflight_collector::stats::Stats::compute(&trace);
//! println!("{}", stats.to_table());
//! ```
#![forbid(unsafe_code)]

pub mod export;
#[doc(hidden)]
pub mod fuzzing;
pub mod import;
pub mod launches;
pub mod memory;
pub mod names;
pub mod output;
pub mod ranges;
pub mod record;
pub mod recover;
pub mod report;
mod sink;
pub mod source;
pub mod stats;
mod table;
pub mod trace;
