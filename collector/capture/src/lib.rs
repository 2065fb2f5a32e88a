//! Capture: running a program under the agent and turning what its agents hand over into a trace file.
//! [`record`] launches the program beside a collector session (`session`: the listener agents hand their
//! segments to) that drains their shared-memory rings into [`outputs`] (one file, or one per rank, host or pid;
//! each with its writer thread, `sink`);
//! [`recover`] completes a trace whose recording was cut short; [`agents`] lists the agents running on this
//! machine and starts programs with a dormant one; [`attach`] records a window of a running program's dormant
//! agent ([`sampled`]: sampling windows of a program `record` starts; [`continuous`]: without pause, in back-to-back
//! files); [`dump`] takes the last seconds of a flight recorder, live or from the image it wrote on a crash;
//! [`mod@notice`] is how they tell their user what happened meanwhile.

pub mod agents;
pub mod attach;
pub mod continuous;
pub mod doctor_checks;
pub mod dump;
pub mod notice;
pub mod outputs;
pub mod private_dir;
pub mod record;
mod recorded_process;
pub mod recover;
pub mod sampled;
mod session;
mod sink;
mod status;
mod summary;
pub mod window;

/// How long an agent may take to answer a command: to set CUPTI up, or to flush it and hand its segment over.
const AGENT_REPLY_MS: i64 = 10_000;
