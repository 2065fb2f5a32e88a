//! Outputs: timelines as Perfetto protobuf ([`perfetto`]) and Kineto-compatible Chrome JSON ([`chrome`]), fleet
//! tables as Parquet ([`parquet`]), and files written so that they never destroy an input ([`output`]).

pub mod chrome;
mod collectives;
pub mod merge;
pub mod output_dir;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod perfetto;
mod protobuf;

/// Output files that never destroy an input (in the trace crate, which capture uses too).
pub use cuflight_trace::output;
