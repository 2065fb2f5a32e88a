//! The job's clock ([`cuflight_trace::model::job_clock`]) fed from the report's planning pass: each process's
//! REALTIME offset (its first clock pair) and its collectives.

use crate::report::plan::Plan;
pub use cuflight_trace::model::job_clock::{host_of, JobClock, JobClockBuilder};
use cuflight_trace::model::trace::Process;

/// Adds `p`, as `plan` found it, to `builder`.
pub fn add(builder: &mut JobClockBuilder, p: &Process, plan: &Plan) {
    let ends = plan.comm.iter().map(|c| (p.string(c.name).to_string(), (c.start + c.duration) as i64)).collect();
    builder.add(p, plan.realtime_offset, ends);
}

/// The clock of these processes (of one or many traces).
pub fn of<'a>(processes: impl IntoIterator<Item = (&'a Process, &'a Plan)>) -> JobClock {
    let mut builder = JobClockBuilder::default();
    for (p, plan) in processes {
        add(&mut builder, p, plan);
    }
    builder.build()
}
