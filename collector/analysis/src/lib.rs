//! Analyses over the trace model: the `nsys stats`-style tables ([`stats`], streamed) and the text tables they
//! share with the report (`cuflight-report`, a crate of its own above this one).

pub mod schema;
pub mod stats;
pub mod table;
