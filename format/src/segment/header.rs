//! The segment's layout as both sides see it: the header the agent publishes (states, counters, the
//! collector's heartbeat, dump reasons, record classes) and the sizes of its parts ([`Layout`]), with the
//! limits a collector checks them against.

use crate::ring::ring_bytes;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"CUFLSEG2");
pub const SEGMENT_VERSION: u32 = 3;
pub const HEADER_SIZE: usize = 4096;
pub(super) const STATUS_LEN: usize = 512;
/// Most rings, events per ring and string bytes a segment may declare (the agent's own limits).
pub const MAX_RINGS: u32 = 4096;
pub const MAX_RING_CAPACITY: u32 = 1 << 24;
pub const MAX_STRINGS_CAPACITY: u64 = 64 << 20;
/// Most bytes a whole segment may take (64 times the default layout's 260 MiB).
pub const MAX_SEGMENT_BYTES: u64 = 16 << 30;
/// The string region is reserved in chunks of this many bytes.
pub(super) const STRINGS_CHUNK: u64 = 64 << 10;
/// Where the first string of an empty region goes: after the empty string at offset 0 (id 0, "no string").
pub(super) const STRINGS_START: u64 = 4;

/// Agent states stored in [`SegmentHeader::state`].
pub mod state {
    pub const STARTING: u32 = 0;
    pub const RECORDING: u32 = 1;
    /// The agent turned itself off; `status` says why.
    pub const DISABLED: u32 = 2;
    /// The process flushed everything at exit.
    pub const FINISHED: u32 = 3;
}

/// The segment's header. Plain fields are written once before `magic` is published; atomics change later.
#[repr(C)]
pub struct SegmentHeader {
    pub magic: AtomicU64,
    pub version: u32,
    pub header_size: u32,
    pub pid: u32,
    pub ppid: u32,
    pub ring_count: u32,
    pub ring_capacity: u32,
    pub strings_offset: u64,
    pub strings_capacity: u64,
    pub rings_offset: u64,
    pub total_size: u64,
    pub start_realtime_ns: u64,
    /// Bytes of the string region published so far.
    pub strings_len: AtomicU64,
    pub state: AtomicU32,
    /// `cuptiGetVersion`'s answer, 0 before CUPTI is loaded (or never, in a CPU-only process).
    pub cupti_version: AtomicU32,
    /// Events lost because every ring was taken by other threads.
    pub no_ring_drops: AtomicU64,
    /// Strings lost because the string region was full (their events carry id 0).
    pub string_drops: AtomicU64,
    /// Records CUPTI reports it dropped (`cuptiActivityGetNumDroppedRecords`).
    pub cupti_dropped: AtomicU64,
    /// Activity records skipped: unexpected size for their kind and version, or an unknown kind.
    pub records_skipped: AtomicU64,
    /// String ids of process facts: argv joined with NUL, executable path, host name, libcupti path.
    pub cmdline: AtomicU32,
    pub exe: AtomicU32,
    pub host: AtomicU32,
    pub cupti_path: AtomicU32,
    /// Distributed rank + 1 from the launcher's environment (`RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`,
    /// `SLURM_PROCID`); 0 when none is set.
    pub rank_plus_one: AtomicU32,
    pub status_len: AtomicU32,
    /// Why the agent disabled itself (UTF-8, `status_len` bytes), written before `state` becomes DISABLED.
    pub status: [u8; STATUS_LEN],
    /// Activity records not used, per [`record_class`]: skipped (a size or layout no release writes) and
    /// incomplete (zero or unfinished timestamps, e.g. from a forced flush). `records_skipped` is their total.
    pub skipped_by_class: [AtomicU64; record_class::COUNT],
    pub incomplete_by_class: [AtomicU64; record_class::COUNT],
    /// CUPTI activity buffers allocated beyond the preallocated pool, and requests refused at the hard cap.
    pub buffers_grown: AtomicU64,
    pub buffers_refused: AtomicU64,
    /// 1 when CUPTI stamps device records with CLOCK_MONOTONIC (the agent registered a timestamp callback), so
    /// device and host events share one clock and need no alignment.
    pub device_clock_monotonic: AtomicU32,
    /// CLOCK_MONOTONIC of the collector's latest drain of this segment (0: none yet). The agent's backpressure
    /// waits only for a collector that drained recently: a ring nobody drains is never waited on.
    pub collector_drained_ns: AtomicU64,
    /// Rings whose memory is reserved (`0..rings_reserved`); only these are ever touched.
    pub rings_reserved: AtomicU32,
    /// Ring reservations refused because the memory could not be reserved (the thread recorded nothing).
    pub rings_refused: AtomicU64,
    /// Bytes of the string region reserved so far.
    pub strings_reserved: AtomicU64,
    /// CLOCK_MONOTONIC of the agent's latest CUPTI flush (0: none): how much a process that ended without its
    /// final flush may have lost.
    pub last_flush_ns: AtomicU64,
    /// CUPTI's flush period in ms, as the agent uses it.
    pub flush_period_ms: AtomicU32,
    /// 1 from an agent's wake-up (a ring passed its watermark) until the collector's next drain, so a burst
    /// costs one wake-up, not one per event.
    pub wake_pending: AtomicU32,
    /// A flight recorder's span in ns (`cuflight launch --flight-recorder DUR`): its rings overwrite their oldest
    /// events and nobody drains them; a dump keeps what ended in the last span. 0: an ordinary segment.
    pub flight_recorder_ns: AtomicU64,
    /// CLOCK_MONOTONIC of the latest dump, and why it was taken ([`dump_reason`]), stored before the bytes are
    /// handed over or written.
    pub dump_ns: AtomicU64,
    pub dump_reason: AtomicU32,
    /// [`LateInjection`], packed: whether the agent was loaded into the running process (`cuflight attach
    /// --inject`), so that NVTX records only what the tables it found late carry, and how many it found.
    pub injected_late: AtomicU32,
    /// The local rank (on this host) + 1 and the world size, from the launcher's environment (`LOCAL_RANK`,
    /// `WORLD_SIZE` and their MPI and Slurm names); 0 when not set.
    pub local_rank_plus_one: AtomicU32,
    pub world_size: AtomicU32,
    /// When recording was last armed, on the agent's event clock: every source of the session delivers from here
    /// (CUPTI subscribed, its callbacks and activity kinds enabled, the handlers live; NVTX already was). 0 while
    /// arming (an attach sets it to 0, then stamps it once set-up is done). A window counts from this time only.
    pub armed_ns: AtomicU64,
    /// When that arming began (the attach request, or the driver's `cuInit`), on the same clock.
    pub arm_began_ns: AtomicU64,
    /// API calls whose exit the agent saw without their enter (in flight when recording was armed): not recorded,
    /// as their start is unknown, and counted here.
    pub unseen_begin: AtomicU64,
    /// What the agent traces (`cuflight_format::tracing` bits), stored at CUPTI set-up; 0 from an agent that
    /// predates `--trace` (it traced the default and every runtime call).
    pub trace_mask: AtomicU32,
    /// Backpressure: ns the program's threads spent waiting for room in a full ring (yielding to the collector),
    /// and ns the agent's own threads slept for room (CUPTI's delivery thread in the delivery ring, holding CUPTI's
    /// buffers meanwhile; the counter sampler in its ring).
    pub program_held_ns: AtomicU64,
    pub delivery_held_ns: AtomicU64,
    /// Python stacks the agent read (each sampled call in a Python process), and the ns its threads spent reading
    /// them: what `--python-stacks` costs the program, measured where it is paid.
    pub python_stacks: AtomicU64,
    pub python_stack_ns: AtomicU64,
    /// The Python stack reader's verdict on this process's interpreter ([`crate::python_reader`]; the interpreter's
    /// minor version in bits 8 to 15): 0 until the reader looked, or with no Python in the process.
    pub python_reader: AtomicU32,
    /// Device counters (`--gpu-metrics`): the sampler's verdict ([`crate::gpu_counters`]; 0: not asked), the
    /// samples it wrote, the times the hardware buffer overflowed (samples lost, their number unknown to CUPTI's
    /// caller), and the ns its thread spent decoding and evaluating them: the cost, measured where it is paid.
    pub gpu_counters: AtomicU32,
    pub gpu_samples: AtomicU64,
    pub gpu_sample_overflows: AtomicU64,
    pub gpu_sampling_ns: AtomicU64,
}

impl SegmentHeader {
    /// Zeroes what the header counts for one recording window: drops, skipped and incomplete records, buffers,
    /// refused rings, unseen calls, held time, Python stacks, the counter sampler's verdict, samples and cost. An
    /// attached agent keeps its segment from window to window; each window's collector reports its own window's
    /// counts, not the sums since the first. Called by the agent as a window starts, no collector holding the
    /// segment; an increment racing it belongs to the window that ended.
    pub fn start_window_tallies(&self) {
        let counters = [
            &self.no_ring_drops,
            &self.string_drops,
            &self.cupti_dropped,
            &self.records_skipped,
            &self.buffers_grown,
            &self.buffers_refused,
            &self.rings_refused,
            &self.unseen_begin,
            &self.program_held_ns,
            &self.delivery_held_ns,
            &self.python_stacks,
            &self.python_stack_ns,
            &self.gpu_samples,
            &self.gpu_sample_overflows,
            &self.gpu_sampling_ns,
        ];
        for c in counters.into_iter().chain(&self.skipped_by_class).chain(&self.incomplete_by_class) {
            c.store(0, Ordering::Relaxed);
        }
        self.gpu_counters.store(0, Ordering::Relaxed);
    }
}

/// Why a flight recorder dumped ([`SegmentHeader::dump_reason`]).
pub mod dump_reason {
    /// `cuflight dump PID`.
    pub const ON_DEMAND: u32 = 1;
    /// SIGUSR2 sent to the program.
    pub const SIGUSR2: u32 = 2;
    /// A thread waited in a synchronising call while no GPU work completed for the hang timeout.
    pub const HANG: u32 = 3;
    /// A CUDA call returned a sticky error (the context is unusable: illegal address, launch failure...).
    pub const CUDA_ERROR: u32 = 4;
    /// A step took `--dump-on-slow-step` times as long as the typical step of its kind.
    pub const SLOW_STEP: u32 = 5;
    /// A fatal signal: this plus the signal's number.
    pub const SIGNAL_BASE: u32 = 64;

    /// Whether the agent flushed CUPTI before writing a dump for `reason`: its control thread does, but for a
    /// fatal signal (a signal handler cannot flush; the records CUPTI held are missing).
    pub fn flushed_first(reason: u32) -> bool {
        matches!(reason, ON_DEMAND | SIGUSR2 | HANG | CUDA_ERROR | SLOW_STEP)
    }

    pub fn describe(reason: u32) -> String {
        match reason {
            ON_DEMAND => "on demand (cuflight dump)".into(),
            SIGUSR2 => "SIGUSR2".into(),
            HANG => "a hang (a synchronising call waited while no GPU work completed)".into(),
            CUDA_ERROR => "a sticky CUDA error".into(),
            SLOW_STEP => {
                "a slow step (--dump-on-slow-step: a step against the typical one of its thread and kind)".into()
            }
            r if r > SIGNAL_BASE && r < SIGNAL_BASE + 65 => format!("fatal signal {}", signal_name(r - SIGNAL_BASE)),
            _ => "unknown".into(),
        }
    }

    fn signal_name(sig: u32) -> String {
        match sig as i32 {
            libc::SIGSEGV => "SIGSEGV".into(),
            libc::SIGBUS => "SIGBUS".into(),
            libc::SIGABRT => "SIGABRT".into(),
            libc::SIGFPE => "SIGFPE".into(),
            libc::SIGILL => "SIGILL".into(),
            n => n.to_string(),
        }
    }
}

/// Classes of CUPTI activity records counted in the header (index into the `*_by_class` arrays).
pub mod record_class {
    pub const KERNEL: usize = 0;
    pub const MEMCPY: usize = 1;
    pub const MEMSET: usize = 2;
    pub const MEMORY: usize = 3;
    pub const SYNC: usize = 4;
    pub const OVERHEAD: usize = 5;
    pub const OTHER: usize = 6;
    pub const COUNT: usize = 7;
    /// Names in index order, as the trace and `stats` show them.
    pub const NAMES: [&str; COUNT] = ["kernel", "memcpy", "memset", "memory", "synchronization", "overhead", "other"];
}

const _: () = assert!(std::mem::size_of::<SegmentHeader>() <= HEADER_SIZE);

/// Sizes of a segment's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub ring_count: u32,
    pub ring_capacity: u32,
    pub strings_capacity: u64,
}

impl Layout {
    pub fn strings_offset(&self) -> u64 {
        HEADER_SIZE as u64
    }
    pub fn rings_offset(&self) -> u64 {
        (self.strings_offset() + self.strings_capacity).next_multiple_of(4096)
    }
    pub fn total_size(&self) -> u64 {
        self.rings_offset() + self.ring_count as u64 * ring_bytes(self.ring_capacity) as u64
    }
    /// Offset of ring `i`.
    pub fn ring_offset(&self, i: u32) -> u64 {
        self.rings_offset() + i as u64 * ring_bytes(self.ring_capacity) as u64
    }
    /// Within the limits every agent keeps (so none of the arithmetic above can overflow, and a collector that
    /// drains every ring of a hostile segment at once holds a bounded amount).
    pub fn is_valid(&self) -> bool {
        (1..=MAX_RINGS).contains(&self.ring_count)
            && self.ring_capacity.is_power_of_two()
            && (2..=MAX_RING_CAPACITY).contains(&self.ring_capacity)
            && (4..=MAX_STRINGS_CAPACITY).contains(&self.strings_capacity)
            && self.total_size() <= MAX_SEGMENT_BYTES
    }
}

impl Default for Layout {
    /// Up to 256 rings of 16 Ki events (1 MiB each, so a producing thread stays within L2) and 4 MiB of
    /// strings; only the rings threads use are reserved (a thread keeps its ring until it exits).
    fn default() -> Self {
        Layout { ring_count: 256, ring_capacity: 1 << 14, strings_capacity: 4 << 20 }
    }
}

/// [`SegmentHeader::injected_late`]'s bit fields: bit 0 the agent was loaded into the running process, bits
/// 8..16 the NVTX tables it filled late, bits 16..24 those another tool held (both saturate at 255). Agent and
/// collector pack and unpack it here only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LateInjection {
    pub injected: bool,
    pub nvtx_tables_late: u32,
    pub nvtx_tables_foreign: u32,
}

impl LateInjection {
    pub fn pack(&self) -> u32 {
        self.injected as u32 | self.nvtx_tables_late.min(255) << 8 | self.nvtx_tables_foreign.min(255) << 16
    }
    pub fn unpack(word: u32) -> LateInjection {
        LateInjection {
            injected: word & 1 != 0,
            nvtx_tables_late: (word >> 8) & 0xff,
            nvtx_tables_foreign: (word >> 16) & 0xff,
        }
    }
}
