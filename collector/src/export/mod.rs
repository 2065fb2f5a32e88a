//! Timeline exports: Perfetto protobuf ([`perfetto`]) and Kineto-compatible Chrome JSON ([`chrome`]).

pub mod chrome;
pub mod perfetto;
mod protobuf;
