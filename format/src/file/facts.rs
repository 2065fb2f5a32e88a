//! What a trace file says about each process and about itself: process facts (with the clock map from the
//! agent's clock to the host's), drops by cause, and the footer.

use serde::{Deserialize, Serialize};

/// Records lost, by cause. Nothing is lost silently: every drop lands in one of these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Drops {
    /// Events refused by a full ring (the collector drained too slowly).
    pub ring_full: u64,
    /// Events from threads that found no free ring.
    pub no_ring: u64,
    /// Strings that did not fit the string region.
    pub strings_full: u64,
    /// Records CUPTI itself dropped.
    pub cupti_dropped: u64,
    /// Activity records skipped because their size or kind was unexpected.
    pub records_skipped: u64,
}

impl Drops {
    pub fn total(&self) -> u64 {
        // Saturating: the counts come from another process's memory or a file, either of which may be hostile.
        self.ring_full
            .saturating_add(self.no_ring)
            .saturating_add(self.cupti_dropped)
            .saturating_add(self.records_skipped)
    }

    /// What was lost and why, in the words every output uses: "nothing lost", or "N events lost (n: cause, ...)"
    /// naming only the causes that lost something. `more` are causes the caller counts beside these (a write
    /// error, events the reader refused).
    pub fn lost_line(&self, more: &[(u64, &str)]) -> String {
        let causes = [
            (self.ring_full, "a thread's ring was full"),
            (self.no_ring, "more threads than rings"),
            (self.cupti_dropped, "CUPTI's own buffers overflowed"),
            (self.records_skipped, "records CUPTI wrote that cuflight could not read"),
        ];
        let all = causes.iter().chain(more).filter(|(n, _)| *n > 0);
        let total = all.clone().fold(0u64, |sum, (n, _)| sum.saturating_add(*n));
        if total == 0 {
            return "nothing lost".into();
        }
        let why: Vec<String> = all.map(|(n, why)| format!("{n}: {why}")).collect();
        format!("{total} events lost ({})", why.join(", "))
    }

    /// Events kept without their names (the string region was full), in the words every output uses; None
    /// when every name was kept. Said apart from [`Drops::lost_line`]: no event was lost.
    pub fn names_not_kept(&self) -> Option<String> {
        (self.strings_full > 0).then(|| {
            format!("{} names not kept (the string table was full: those events have no name)", self.strings_full)
        })
    }
}

/// Facts about one profiled process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    pub cmdline: Vec<String>,
    pub exe: String,
    pub host: String,
    /// `cuptiGetVersion`, 0 if the process never initialised CUDA.
    pub cupti_version: u32,
    pub cupti_path: String,
    /// Empty, or why the agent disabled itself.
    pub status: String,
    pub start_realtime_ns: u64,
    /// The agent flushed and finished at exit (false: the process died abruptly, e.g. SIGKILL).
    pub finished: bool,
    pub drops: Drops,
    /// Distributed rank from the launcher's environment (torchrun's `RANK`, MPI, Slurm), if any.
    pub rank: Option<u32>,
    /// Activity records kept out of the trace, by record class ([`crate::segment::record_class::NAMES`]):
    /// `(class, skipped, incomplete)`, only classes with a non-zero count.
    pub records_unused: Vec<(String, u64, u64)>,
    /// CUPTI activity buffers allocated beyond the agent's pool, and requests refused at its hard cap.
    pub buffers_grown: u64,
    pub buffers_refused: u64,
    /// Device records are stamped with CLOCK_MONOTONIC (no clock alignment needed).
    pub device_clock_monotonic: bool,
    /// (CUPTI timestamp, CLOCK_MONOTONIC) pairs recorded over the run, in order: the collector aligns device time
    /// piecewise-linearly between them (see [`ClockMap`]).
    pub clock_pairs: Vec<(u64, u64)>,
    /// Threads that found no ring because its memory could not be reserved (their events are in `no_ring`).
    pub rings_refused: u64,
    /// For a process that ended without its final flush (`finished` false: SIGKILL, `_exit`, a crash): the
    /// CLOCK_MONOTONIC of its last CUPTI flush (0: none) and its flush period. Device records completed after
    /// that flush were still inside CUPTI and are missing.
    pub last_flush_ns: u64,
    pub flush_period_ms: u32,
    /// The process's key in this file when it is not its pid (0): blocks carry keys, and a pid seen twice in one
    /// recording (reused, or one process exec'ing a second CUDA program) gets a key of its own above any pid.
    pub key: u32,
    /// The agent was loaded into the running process (`cuflight attach --inject`): NVTX, which reads its
    /// injection variable once, at a library's first NVTX call, records no ranges for it, except from the
    /// libraries whose NVTX tables the agent found and filled late (below).
    pub injected_late: bool,
    /// Of an agent injected late: NVTX tables (one per library using NVTX) it found and now records, and those
    /// it left to another tool that already held them.
    pub nvtx_tables_late: u32,
    pub nvtx_tables_foreign: u32,
    /// Kinds of records the source held none of because they were not recorded (an import: an nsys export
    /// made without `--cuda-memory-usage`, a torch.profiler trace without `profile_memory`), with the reason:
    /// (kind, why), kind one of "memory", "nvtx", "memset". Empty for cuflight's own captures.
    pub not_recorded: Vec<(String, String)>,
    /// The local rank on its host and the job's world size, from the launcher's environment (0 size: unknown).
    pub local_rank: Option<u32>,
    pub world_size: u32,
    /// When recording was armed (CLOCK_MONOTONIC of the agent's events: every source delivering) and how long the
    /// arming took; 0 when unknown (older traces, imports, a process that never initialised CUDA).
    pub armed_ns: u64,
    pub arming_ns: u64,
    /// API calls the agent saw end without seeing them begin (in flight when it was armed): left out, counted.
    pub unseen_begin: u64,
    /// What the agent traced (`--trace`, e.g. "cuda,nvtx,memory,sync,overhead"); empty when unknown (an older
    /// agent, which traced those and every runtime call, or an import).
    pub traced: String,
    /// Backpressure (ns): the program's threads held waiting for room in a full ring, and the agent's own threads
    /// (CUPTI's delivery, the counter sampler) held waiting for room in theirs; the price of losing nothing.
    pub program_held_ns: u64,
    pub delivery_held_ns: u64,
    /// Python stacks the agent read, and the ns the program's threads spent reading them (`--python-stacks`).
    pub python_stacks: u64,
    pub python_stack_ns: u64,
    /// Why no Python stacks were read in this Python process (`python_reader`); 0: read, or no Python.
    pub python_reader: u32,
    /// Device counters (`--gpu-metrics`): the sampler's verdict ([`crate::gpu_counters`]; 0: not asked), samples
    /// written, hardware-buffer overflows (samples lost) and the ns the agent's sampler thread spent on them.
    pub gpu_counters: u32,
    pub gpu_samples: u64,
    pub gpu_sample_overflows: u64,
    pub gpu_sampling_ns: u64,
}

impl ProcessInfo {
    /// The key this process's blocks carry in the file.
    pub fn file_key(&self) -> u32 {
        if self.key != 0 {
            self.key
        } else {
            self.pid
        }
    }
}

/// Maps CUPTI timestamps onto CLOCK_MONOTONIC from every recorded clock pair: linear interpolation between
/// neighbouring pairs (so NTP slewing of CLOCK_REALTIME, CUPTI's default clock, is followed), the nearest
/// segment's line outside them. Every consumer of device timestamps uses this one rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClockMap {
    /// Sorted by CUPTI time, strictly increasing.
    pairs: Vec<(u64, u64)>,
}

impl ClockMap {
    /// The identity (device time is already CLOCK_MONOTONIC).
    pub fn identity() -> ClockMap {
        ClockMap { pairs: Vec::new() }
    }

    pub fn from_pairs(pairs: impl IntoIterator<Item = (u64, u64)>) -> ClockMap {
        let mut pairs: Vec<(u64, u64)> = pairs.into_iter().filter(|&(c, m)| c != 0 && m != 0).collect();
        pairs.sort_unstable();
        pairs.dedup_by_key(|p| p.0);
        ClockMap { pairs }
    }

    pub fn is_identity(&self) -> bool {
        self.pairs.iter().all(|&(c, m)| c == m)
    }

    /// Later CUPTI times map to later (or equal) host times: CLOCK_MONOTONIC grows between every two pairs. Pairs
    /// from a CUPTI clock that was stepped back, or crafted ones, break this; readers that merge by time must then
    /// not trust mapped bounds.
    pub fn is_increasing(&self) -> bool {
        self.pairs.windows(2).all(|w| w[1].1 > w[0].1)
    }

    /// Offset (monotonic - CUPTI) at CUPTI time `t`.
    pub fn offset_at(&self, t: u64) -> i64 {
        let off = |(c, m): (u64, u64)| (m as i64 - c as i64) as i128;
        // Along the segment a..b (the nearest one outside the pairs: the slope goes on, as a slew does).
        let along = |a: (u64, u64), b: (u64, u64)| {
            let span = (b.0 - a.0) as i128;
            (off(a) + (off(b) - off(a)) * (t as i128 - a.0 as i128) / span) as i64
        };
        let n = self.pairs.len();
        let i = self.pairs.partition_point(|&(c, _)| c <= t);
        match n {
            0 => 0,
            1 => off(self.pairs[0]) as i64,
            _ if i == 0 => along(self.pairs[0], self.pairs[1]),
            _ if i == n => along(self.pairs[n - 2], self.pairs[n - 1]),
            _ => along(self.pairs[i - 1], self.pairs[i]),
        }
    }

    /// `t` (CUPTI time) on CLOCK_MONOTONIC; 0 stays 0 (no timestamp).
    pub fn map(&self, t: u64) -> u64 {
        if t == 0 {
            return 0;
        }
        t.wrapping_add_signed(self.offset_at(t))
    }
}

/// Decodes process facts of any version. Postcard is positional and every field added since the first version
/// was appended at the end with a type whose zero bytes decode to its default (0, false, None, empty), so an
/// older block padded with zeros decodes with defaults for what it lacks (trailing bytes are ignored).
pub(super) fn decode_process(raw: &[u8]) -> Option<ProcessInfo> {
    let mut padded = Vec::with_capacity(raw.len() + 32);
    padded.extend_from_slice(raw);
    padded.extend_from_slice(&[0u8; 32]);
    postcard::from_bytes::<ProcessInfo>(&padded).ok()
}

/// The last block of a complete file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Footer {
    pub events: u64,
    pub command: Vec<String>,
    pub exit_code: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::Drops;

    #[test]
    fn the_lost_line_names_only_the_causes_that_lost_something() {
        assert_eq!(Drops::default().lost_line(&[(0, "a write error")]), "nothing lost");
        let d = Drops { ring_full: 3, cupti_dropped: 2, strings_full: 9, ..Drops::default() };
        assert_eq!(
            d.lost_line(&[(1, "a write error")]),
            "6 events lost (3: a thread's ring was full, 2: CUPTI's own buffers overflowed, 1: a write error)"
        );
        let hostile = Drops { ring_full: u64::MAX, no_ring: 5, ..Drops::default() };
        assert!(hostile.lost_line(&[]).starts_with(&format!("{} events lost", u64::MAX)));
    }
}
