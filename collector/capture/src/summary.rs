//! What a recording produced (`record`, `attach` and `dump` print it), and how its window was armed.

use cuflight_format::file::Drops;

/// How a window waited for recording to be armed (every source delivering).
#[derive(Clone, Copy, Debug, Default)]
pub struct Arming {
    /// How long the arming took (CUPTI's set-up), for the slowest process; None when none was armed.
    pub took_ns: Option<u64>,
    /// Steps, or ranges of the name asked for, that began before arming and so were not counted.
    pub ranges_before: u32,
}

impl Arming {
    /// One line for the user, when there is something to say.
    pub fn describe(&self) -> Option<String> {
        let took = self.took_ns.map(|ns| format!("recording was armed {:.1} ms after the request", ns as f64 / 1e6));
        let before = (self.ranges_before > 0).then(|| {
            let n = self.ranges_before;
            format!(
                "{n} range{} that began before arming {} not counted",
                if n == 1 { "" } else { "s" },
                if n == 1 { "was" } else { "were" }
            )
        });
        match (took, before) {
            (None, None) => None,
            (Some(t), None) => Some(format!("{t}; the window counts from there")),
            (None, Some(b)) => Some(b),
            (Some(t), Some(b)) => Some(format!("{t}; {b}")),
        }
    }
}

/// Below this in all, what tracing eager launches cost is not said (10,000 launches): a program that launches
/// that few is not held by its launches.
pub const EAGER_TRACING_SAID_NS: u64 = 10_000_000;

/// What a recording produced.
#[derive(Clone, Debug)]
pub struct RecordSummary {
    pub exit_code: i32,
    /// Events the files hold.
    pub events: u64,
    /// Events drained from the agents that a write error kept out of the files (counted nowhere else).
    pub unwritten: u64,
    pub processes: usize,
    pub drops: Drops,
    pub bytes: u64,
    pub disabled: Vec<(u32, String)>,
    /// Signals forwarded to the program (by name).
    pub forwarded: Vec<&'static str>,
    /// Why recording stopped before the program ended (a write error); the file holds what came before.
    pub stopped: Option<String>,
    /// Processes that ended without their final flush: (pid, flush period in ms).
    pub unflushed: Vec<(u32, u32)>,
    /// A capture range or step window was asked for and never started.
    pub range_never_started: bool,
    /// Steps, and one-second time slices (a program marking no steps), recorded whole under `--sample 1/N`.
    pub sampled_steps: u64,
    pub sampled_slices: u64,
    /// What each process's agent traced as set up (`--trace`, less what CUPTI refused: `hes`), by pid; empty
    /// for a process whose agent never set up.
    pub traced: Vec<(u32, String)>,
    /// How the window waited for arming (with a range).
    pub arming: Arming,
    /// Backpressure over all processes, ns: program threads and the agent's own (CUPTI's delivery, the counter sampler) held for room in full rings.
    pub program_held_ns: u64,
    pub delivery_held_ns: u64,
    /// Python stacks read over all processes, and the ns the programs spent reading them.
    pub python_stacks: u64,
    pub python_stack_ns: u64,
    /// Python processes whose stacks could not be read, and why (an unknown release, a free-threaded build...).
    pub python_unread: Vec<(u32, String)>,
    /// Device counters over all processes: samples written, hardware-buffer overflows, the ns the agents'
    /// samplers spent decoding them; and processes that asked for counters and got none, with why.
    pub gpu_samples: u64,
    pub gpu_sample_overflows: u64,
    pub gpu_sampling_ns: u64,
    pub gpu_counters_refused: Vec<(u32, String)>,
    /// Kernels launched one by one and CUDA graph nodes CUPTI traced over all processes (not whole graph launches
    /// traced at graph level).
    pub traced_launches: cuflight_format::tracing::TracedLaunches,
    /// The files written, with their sizes (several when the output name has `%r`, `%h` or `%p`).
    pub files: Vec<(String, u64)>,
}

impl RecordSummary {
    /// "dropped N (ring full .., no ring .., CUPTI .., skipped ..[, write error ..])": every event lost, once.
    /// "nothing lost", or how many events were and where, in words a user knows.
    pub fn drops_line(&self) -> String {
        self.drops.lost_line(&[(self.unwritten, "a write error")])
    }

    /// [`Self::drops_line`], and the names not kept beside it ([`Drops::names_not_kept`]): what a window or a
    /// recording says it lost.
    pub fn losses_line(&self) -> String {
        match self.drops.names_not_kept() {
            Some(names) => format!("{}; {names}", self.drops_line()),
            None => self.drops_line(),
        }
    }

    /// What the Python stacks cost the programs, when any were read.
    pub fn python_stacks_line(&self) -> Option<String> {
        (self.python_stacks > 0).then(|| {
            format!(
                "read {} Python stacks in {:.1} ms ({:.1} us each; `--python-stacks=off` leaves them out)",
                self.python_stacks,
                self.python_stack_ns as f64 / 1e6,
                self.python_stack_ns as f64 / self.python_stacks as f64 / 1e3
            )
        })
    }

    /// What tracing CUDA graphs node by node cost the programs' graph launches, estimated (no record measures it),
    /// when any node was traced so.
    pub fn graph_node_tracing_line(&self) -> Option<String> {
        let nodes = self.traced_launches.graph_nodes();
        (nodes > 0).then(|| {
            format!(
                "CUPTI traced {nodes} CUDA graph nodes one by one, lengthening the graph launch calls by about {:.2} ms \
                 ({:.1} us a node, an H200's figure; the report sets it apart from launch overhead); adding `graphs` \
                 to --trace records one record per launch instead, without the nodes' names and times",
                self.traced_launches.graph_node_ns() as f64 / 1e6,
                cuflight_format::tracing::GRAPH_NODE_TRACING_NS as f64 / 1e3
            )
        })
    }

    /// What tracing kernels launched one by one cost the launching threads, estimated (no record measures it),
    /// when it reaches [`EAGER_TRACING_SAID_NS`] in all.
    pub fn eager_tracing_line(&self) -> Option<String> {
        let ns = self.traced_launches.eager_ns();
        (ns >= EAGER_TRACING_SAID_NS).then(|| {
            format!(
                "CUPTI traced {} kernel launches, lengthening the launching threads' calls by about {:.1} ms in all \
                 ({:.1} us a launch, an H200's figure); where the GPU waited on them, the report says how much of its \
                 idle time that may be, and `record --sample 1/N` measures what it costs a step",
                self.traced_launches.eager_kernels(),
                ns as f64 / 1e6,
                cuflight_format::tracing::EAGER_LAUNCH_TRACING_NS as f64 / 1e3
            )
        })
    }

    /// Why no Python stacks were read in some Python processes, a line each.
    pub fn python_unread_lines(&self) -> Vec<String> {
        self.python_unread
            .iter()
            .map(|(pid, why)| format!("no Python stacks in process {pid}: {why}; the report cannot name source lines"))
            .collect()
    }

    /// What the device counters gave and cost, and where they were refused, a line each.
    pub fn gpu_counters_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.gpu_samples > 0 || self.gpu_sampling_ns > 0 {
            let each_us = self.gpu_sampling_ns as f64 / self.gpu_samples.max(1) as f64 / 1e3;
            let lost = if self.gpu_sample_overflows > 0 {
                // Half a core at this cost a sample leaves room for bursts and for the program.
                let slowest = (2.0 * each_us).ceil().max(10.0);
                format!(
                    "; samples were lost {} time(s) (the hardware buffer overflowed, or the sampler fell behind): \
                     sample less often, --gpu-metrics={slowest:.0}us or slower",
                    self.gpu_sample_overflows
                )
            } else {
                String::new()
            };
            let each = if self.gpu_samples > 0 { format!(" ({each_us:.0} us a sample)") } else { String::new() };
            lines.push(format!(
                "sampled device counters {} times; decoding them took the agent's sampler thread {:.1} ms of CPU{each}{lost}",
                self.gpu_samples,
                self.gpu_sampling_ns as f64 / 1e6
            ));
        }
        lines.extend(
            self.gpu_counters_refused
                .iter()
                .map(|(pid, why)| format!("process {pid}: {}", crate::doctor_checks::with_pointer(why))),
        );
        lines
    }

    /// What losing nothing cost, when the agent had to hold anything for room in a full ring.
    pub fn backpressure(&self) -> Option<String> {
        (self.program_held_ns + self.delivery_held_ns > 0).then(|| {
            format!(
                "to lose nothing the agent held the program's threads {:.1} ms in all and its own (CUPTI's delivery, the counter sampler) {:.1} ms, waiting for full rings to drain",
                self.program_held_ns as f64 / 1e6,
                self.delivery_held_ns as f64 / 1e6
            )
        })
    }
}
