//! The trace model every reader produces and every analysis and output consumes: processes and their events
//! ([`trace`]), the time-ordered event stream ([`source`]) and the part of it a filter keeps ([`filter`],
//! [`windows`], [`cut`]), and the one rule for each fact derived from events:
//! device memory alive ([`memory`]), NVTX ranges ([`ranges`]), launch-to-work flows ([`launches`]) and what a name
//! says: what a kernel does and its fallbacks ([`kernel_category`]), which collective it ran ([`collectives`]), its symbol demangled and cut to its function
//! ([`kernel_symbols`]), CUPTI's enumerations in words ([`cupti_labels`]), what a host range is (a step, data
//! loading: [`range_roles`]), and host names ([`host`]). What a CUDA call does is `cuflight_format::calls`'.

pub mod align;
pub mod collectives;
pub mod cuda_error_names;
pub mod cuda_errors;
pub mod cupti_labels;
pub mod cut;
pub mod filter;
pub mod gpu_counters;
pub mod gpu_peaks;
pub mod host;
pub mod inductor;
pub mod job_clock;
pub mod kernel_category;
pub mod kernel_symbols;
pub mod launches;
pub mod memory;
pub mod occupancy;
pub mod platform_terms;
pub mod pystacks;
pub mod python_modules;
pub mod range_roles;
pub mod ranges;
pub mod runs;
pub mod source;
pub mod spool;
pub mod timeline;
pub mod trace;
pub mod wall_clock;
pub mod windows;
