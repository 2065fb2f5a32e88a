//! The trace model and its readers: every format in (cuflight's own trace file, torch.profiler/Kineto JSON,
//! Nsight Systems SQLite: [`import`]), one time-ordered `EventSource` out ([`model`]), with the one rule for each
//! fact derived from events; and output files that never destroy an input ([`output`]).
#![forbid(unsafe_code)]

pub mod import;
pub mod model;
pub mod output;
