//! The trace file: what `cuflight record` writes and every other command reads.
//!
//! ```text
//! "CUFLTRC\0"  u32 version  u32 flags(0)
//! block*:  u8 tag  u32 pid  u32 raw_len  u32 zstd_len  [events only: u64 first start  u64 last end  u32 count]
//!          [zstd frame with checksum, zstd_len bytes]
//! trailer: u64 offset of the index block  "CUFLIDX\0"        (after the footer; absent in a cut file)
//! ```
//! Tags: 1 process facts (postcard [`ProcessInfo`]; a later one for the same pid replaces an earlier one),
//! 2 strings (u64 region offset + region bytes, see [`crate::segment`]), 5 events ([`crate::codec`]; 3 in
//! version 1 files, without the summary), 6 the block index ([`crate::index`]), 4 footer (postcard [`Footer`],
//! the last block). A file without a footer was cut short (its collector was killed, its disk filled): it is
//! read up to its last complete block and [`TraceReader::cut_short`] says so; its index is rebuilt from the
//! block headers.
//!
//! Reading is bounded: a block holds at most [`MAX_BLOCK_RAW`] bytes decompressed and [`MAX_BLOCK_EVENTS`]
//! events, and a reader holds one block at a time, so no file, however small and however crafted, makes a
//! reader decompress more than that at once.
//!
//! Events are encoded column by column ([`crate::codec`]): deltas keep timestamps to 1-3 bytes, and each
//! column's repetition is what zstd removes (see `collector/benches/drain.rs`).

use crate::codec::{self, EventEncoder};
use crate::event::RawEvent;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

pub const FILE_MAGIC: [u8; 8] = *b"CUFLTRC\0";
/// Version 2 stores events in columns (tag [`TAG_EVENT_COLUMNS`]); version 1 (rows, tag [`TAG_EVENTS`]) is
/// still read.
pub const FILE_VERSION: u32 = 2;
const OLDEST_READABLE_VERSION: u32 = 1;
/// Largest decompressed block a writer writes and a reader accepts.
pub const MAX_BLOCK_RAW: u32 = 16 << 20;
/// Most events in one block.
pub const MAX_BLOCK_EVENTS: usize = 1 << 16;
/// Events a writer puts in one block: small enough that encoding works in cache (a block of 64-byte events
/// four times this size spends most of its encoding time waiting on memory).
const WRITE_BLOCK_EVENTS: usize = 1 << 13;
/// Strings blocks are cut (at entry boundaries) to at most this many bytes.
const STRINGS_PIECE: usize = 8 << 20;
const ZSTD_LEVEL: i32 = 1;

pub const TAG_PROCESS: u8 = 1;
pub const TAG_STRINGS: u8 = 2;
pub const TAG_EVENTS: u8 = 3;
pub const TAG_FOOTER: u8 = 4;
pub const TAG_EVENT_COLUMNS: u8 = 5;
/// The block index (postcard `Vec<`[`IndexEntry`]`>`), just before the footer; see [`crate::index`].
pub const TAG_INDEX: u8 = 6;

/// The index trailer's magic, after the index block's offset: see [`crate::index`].
pub const TRAILER_MAGIC: [u8; 8] = *b"CUFLIDX\0";

/// One block of a trace file, as the index lists it (written by [`TraceWriter`], read by [`crate::index`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// Byte offset of the block's header.
    pub offset: u64,
    pub tag: u8,
    pub pid: u32,
    /// Events blocks: how many, the first start and the last end (recorded clocks), and the distinct thread ids
    /// (empty in a rebuilt index).
    pub events: u32,
    pub first: u64,
    pub last: u64,
    pub tids: Vec<u32>,
}

/// Bytes every block header has: tag, pid, raw length, compressed length.
pub const BLOCK_HEAD: usize = 13;
/// Bytes an events block (tag 5) adds to its header: the first start and last end of its events (u64 each, in
/// the clocks they were recorded on) and their count (u32), so readers can skip or seek without decompressing.
pub const EVENTS_HEAD: usize = 20;

/// Records lost, by cause. Nothing is lost silently: every drop lands in one of these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Backpressure (ns): the program's threads held waiting for room in a full ring, and CUPTI's delivery thread
    /// held waiting for room in the delivery ring; the price of losing nothing.
    pub program_held_ns: u64,
    pub delivery_held_ns: u64,
    /// Python stacks the agent read, and the ns the program's threads spent reading them (`--python-stacks`).
    pub python_stacks: u64,
    pub python_stack_ns: u64,
    /// Why no Python stacks were read in this Python process (`python_reader`); 0: read, or no Python.
    pub python_reader: u32,
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
fn decode_process(raw: &[u8]) -> Option<ProcessInfo> {
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

/// One block of a trace file.
#[derive(Clone, Debug, PartialEq)]
// One Process block per process in a file and events by the block: the size of the enum does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Block {
    Process(ProcessInfo),
    Strings { pid: u32, base: u64, bytes: Vec<u8> },
    Events { pid: u32, events: Vec<RawEvent> },
    Footer(Footer),
}

/// Why a trace file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a cuflight trace (bad magic)")]
    BadMagic,
    #[error("unsupported trace version {0} (this cuflight reads versions {OLDEST_READABLE_VERSION} to {FILE_VERSION}): a newer cuflight wrote it")]
    Version(u32),
    #[error("truncated trace: {0}")]
    Truncated(&'static str),
    #[error("corrupt trace: {0}")]
    Corrupt(String),
}

/// Streams blocks into a file.
pub struct TraceWriter<W: Write> {
    out: W,
    events: u64,
    scratch: Vec<u8>,
    /// One compression context for every block (creating one per block costs as much as a small block).
    enc: zstd::bulk::Compressor<'static>,
    comp: Vec<u8>,
    encoder: EventEncoder,
    /// Bytes written so far (where the next block starts).
    offset: u64,
    pub(crate) index: Vec<IndexEntry>,
}

impl<W: Write> TraceWriter<W> {
    pub fn new(mut out: W) -> Result<Self, FileError> {
        out.write_all(&FILE_MAGIC)?;
        out.write_all(&FILE_VERSION.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        let mut enc = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
        enc.include_checksum(true)?;
        Ok(TraceWriter {
            out,
            events: 0,
            scratch: Vec::new(),
            enc,
            comp: Vec::new(),
            encoder: EventEncoder::default(),
            offset: 16,
            index: Vec::new(),
        })
    }

    fn block(&mut self, tag: u8, pid: u32, raw: &[u8]) -> Result<(), FileError> {
        self.block_with(tag, pid, raw, &[])
    }

    /// Writes one block: its header, `extra` header bytes (an events block's summary), the compressed payload.
    fn block_with(&mut self, tag: u8, pid: u32, raw: &[u8], extra: &[u8]) -> Result<(), FileError> {
        self.comp.clear();
        self.comp.reserve(zstd::zstd_safe::compress_bound(raw.len()));
        self.enc.compress_to_buffer(raw, &mut self.comp)?;
        self.out.write_all(&[tag])?;
        for v in [pid, raw.len() as u32, self.comp.len() as u32] {
            self.out.write_all(&v.to_le_bytes())?;
        }
        self.out.write_all(extra)?;
        self.out.write_all(&self.comp)?;
        if tag != TAG_INDEX && tag != TAG_FOOTER {
            self.index.push(IndexEntry { offset: self.offset, tag, pid, ..Default::default() });
        }
        self.offset += (BLOCK_HEAD + extra.len() + self.comp.len()) as u64;
        Ok(())
    }

    pub fn write_process(&mut self, info: &ProcessInfo) -> Result<(), FileError> {
        let raw = postcard::to_stdvec(info).map_err(|e| FileError::Corrupt(e.to_string()))?;
        self.block(TAG_PROCESS, info.file_key(), &raw)
    }

    /// Writes string-region bytes starting at region offset `base`, in pieces that end on entry boundaries.
    pub fn write_strings(&mut self, pid: u32, base: u64, bytes: &[u8]) -> Result<(), FileError> {
        let mut from = 0usize;
        while from < bytes.len() {
            let mut end = from;
            // Whole entries up to the piece size (one longer entry goes alone; entries are at most 4 GiB, and
            // the agent's region is far smaller).
            while end < bytes.len() {
                let len = bytes
                    .get(end..end + 4)
                    .map_or(usize::MAX, |w| u32::from_le_bytes(w.try_into().expect("4")) as usize);
                let next = end.saturating_add(len.saturating_add(4).next_multiple_of(4)).min(bytes.len());
                if next - from > STRINGS_PIECE && end > from {
                    break;
                }
                end = next;
            }
            let piece = &bytes[from..end];
            let mut raw = Vec::with_capacity(8 + piece.len());
            raw.extend_from_slice(&(base + from as u64).to_le_bytes());
            raw.extend_from_slice(piece);
            self.block(TAG_STRINGS, pid, &raw)?;
            from = end;
        }
        Ok(())
    }

    pub fn write_events(&mut self, pid: u32, events: &[RawEvent]) -> Result<(), FileError> {
        // Large batches are split so that a reader's block buffer stays bounded.
        for chunk in events.chunks(WRITE_BLOCK_EVENTS) {
            let mut raw = std::mem::take(&mut self.scratch);
            raw.clear();
            self.encoder.encode(chunk, &mut raw);
            let first = chunk.iter().map(|e| e.start).min().unwrap_or(0);
            let last = chunk.iter().map(|e| e.end.max(e.start)).max().unwrap_or(0);
            let mut head = [0u8; EVENTS_HEAD];
            head[..8].copy_from_slice(&first.to_le_bytes());
            head[8..16].copy_from_slice(&last.to_le_bytes());
            head[16..].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
            self.block_with(TAG_EVENT_COLUMNS, pid, &raw, &head)?;
            self.scratch = raw;
            let mut tids: Vec<u32> = chunk.iter().map(|e| e.tid).collect();
            tids.sort_unstable();
            tids.dedup();
            if let Some(entry) = self.index.last_mut() {
                (entry.first, entry.last, entry.events, entry.tids) = (first, last, chunk.len() as u32, tids);
            }
            self.events += chunk.len() as u64;
        }
        Ok(())
    }

    /// Pushes buffered blocks to the sink (for a file: into the kernel, where a killed writer cannot lose them).
    pub fn flush(&mut self) -> Result<(), FileError> {
        self.out.flush()?;
        Ok(())
    }

    /// Events written so far.
    pub fn events_written(&self) -> u64 {
        self.events
    }

    /// Writes the block index, the footer (its `events` is filled in) and the trailer that locates the index;
    /// returns the sink.
    pub fn finish(mut self, mut footer: Footer) -> Result<W, FileError> {
        footer.events = self.events;
        let index_at = self.offset;
        let index = postcard::to_stdvec(&self.index).map_err(|e| FileError::Corrupt(e.to_string()))?;
        if index.len() <= MAX_BLOCK_RAW as usize {
            self.block(TAG_INDEX, 0, &index)?;
        }
        let raw = postcard::to_stdvec(&footer).map_err(|e| FileError::Corrupt(e.to_string()))?;
        self.block(TAG_FOOTER, 0, &raw)?;
        if index.len() <= MAX_BLOCK_RAW as usize {
            self.out.write_all(&index_at.to_le_bytes())?;
            self.out.write_all(&TRAILER_MAGIC)?;
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads blocks from a file, validating as it goes.
pub struct TraceReader<R: Read> {
    input: R,
    done: bool,
    /// Why the file ended before its footer, once it did.
    cut_short: Option<&'static str>,
    /// Bytes of complete blocks read so far (header included).
    complete_bytes: u64,
    /// Working memory reused block after block (a fresh allocation per block costs more than decoding it).
    scratch: ReadScratch,
}

#[derive(Default)]
struct ReadScratch {
    comp: Vec<u8>,
    raw: Vec<u8>,
    dctx: Option<zstd::bulk::Decompressor<'static>>,
    columns: codec::ColumnScratch,
    /// An events vector handed back with [`TraceReader::recycle`].
    spare: Option<Vec<RawEvent>>,
}

impl<R: Read> TraceReader<R> {
    pub fn new(mut input: R) -> Result<Self, FileError> {
        let mut head = [0u8; 16];
        read_exact(&mut input, &mut head, "file shorter than its header")?;
        if head[..8] != FILE_MAGIC {
            return Err(FileError::BadMagic);
        }
        let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if !(OLDEST_READABLE_VERSION..=FILE_VERSION).contains(&version) {
            return Err(FileError::Version(version));
        }
        Ok(TraceReader { input, done: false, cut_short: None, complete_bytes: 16, scratch: ReadScratch::default() })
    }

    /// A reader of `input` positioned at a block boundary (an offset from [`crate::index`]) of a file whose
    /// header a reader already checked.
    pub fn resume(input: R) -> Self {
        TraceReader { input, done: false, cut_short: None, complete_bytes: 0, scratch: ReadScratch::default() }
    }

    /// The input, to reposition it at another block boundary; then call [`TraceReader::at_block`].
    pub fn input_mut(&mut self) -> &mut R {
        &mut self.input
    }

    /// The input now stands at a block boundary (as after [`TraceReader::resume`]), keeping the working memory.
    pub fn at_block(&mut self) {
        (self.done, self.cut_short, self.complete_bytes) = (false, None, 0);
    }

    /// Gives back the events vector of a block that was used up, so the next events block decodes into it.
    pub fn recycle(&mut self, events: Vec<RawEvent>) {
        self.scratch.spare = Some(events);
    }

    /// Why the file ended before its footer (`None` for a complete file, or before the end is reached).
    pub fn cut_short(&self) -> Option<&'static str> {
        self.cut_short
    }

    /// Bytes of the file up to the end of the last complete block read.
    pub fn complete_bytes(&self) -> u64 {
        self.complete_bytes
    }

    fn end_cut_short(&mut self, why: &'static str) -> Result<Option<Option<Block>>, FileError> {
        self.done = true;
        self.cut_short = Some(why);
        Ok(None)
    }

    /// The next block; `Ok(None)` after the footer, or at the end of a file that has none ([`Self::cut_short`]).
    pub fn next_block(&mut self) -> Result<Option<Block>, FileError> {
        // Only the index is ever stepped over here.
        loop {
            match self.next_block_where(|_| true)? {
                Some(None) => continue,
                other => return Ok(other.flatten()),
            }
        }
    }

    /// Like [`TraceReader::next_block`], but blocks whose tag `want` rejects are skipped without being
    /// decompressed (`Some(None)`), so a pass over one kind of block is cheap.
    pub fn next_block_where(&mut self, want: impl Fn(u8) -> bool) -> Result<Option<Option<Block>>, FileError> {
        if self.done {
            return Ok(None);
        }
        let mut head = [0u8; 13];
        match read_exact(&mut self.input, &mut head, "") {
            Ok(()) => {}
            Err(FileError::Truncated(_)) => {
                return self.end_cut_short("no footer: the recording was cut short (collector killed or disk full)")
            }
            Err(e) => return Err(e),
        }
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (tag, pid, raw_len, comp_len) = (head[0], word(1), word(5), word(9));
        // An events block's summary (not needed here: the payload says it all).
        let extra = if tag == TAG_EVENT_COLUMNS { EVENTS_HEAD } else { 0 };
        if extra > 0 {
            let mut summary = [0u8; EVENTS_HEAD];
            match read_exact(&mut self.input, &mut summary, "") {
                Ok(()) => {}
                Err(FileError::Truncated(_)) => {
                    return self.end_cut_short("the last block is incomplete: the recording was cut short")
                }
                Err(e) => return Err(e),
            }
        }
        let head_len = (BLOCK_HEAD + extra) as u64;
        if raw_len > MAX_BLOCK_RAW || comp_len > MAX_BLOCK_RAW + MAX_BLOCK_RAW / 8 + 4096 {
            return Err(FileError::Corrupt(format!(
                "a block declares {raw_len} bytes ({comp_len} compressed); the format's limit is {MAX_BLOCK_RAW}"
            )));
        }
        if tag != TAG_FOOTER && (tag == TAG_INDEX || !want(tag)) {
            let skipped = std::io::copy(&mut (&mut self.input).take(comp_len as u64), &mut std::io::sink())?;
            if skipped != comp_len as u64 {
                return self.end_cut_short("the last block is incomplete: the recording was cut short");
            }
            self.complete_bytes += head_len + comp_len as u64;
            // (The index is for seeking readers, `crate::index`: a pass over blocks steps over it like this.)
            return Ok(Some(None));
        }
        // The compressed bytes grow with what is actually present; the decompressed ones are reserved up to the
        // declared size, which is bounded by MAX_BLOCK_RAW (reserved, not touched: only what decodes is written).
        let mut comp = std::mem::take(&mut self.scratch.comp);
        comp.clear();
        (&mut self.input).take(comp_len as u64).read_to_end(&mut comp)?;
        if comp.len() != comp_len as usize {
            self.scratch.comp = comp;
            return self.end_cut_short("the last block is incomplete: the recording was cut short");
        }
        let mut raw = std::mem::take(&mut self.scratch.raw);
        raw.clear();
        raw.reserve(raw_len as usize + 1);
        let dctx = match &mut self.scratch.dctx {
            Some(d) => d,
            none => none.insert(zstd::bulk::Decompressor::new()?),
        };
        let decoded = dctx.decompress_to_buffer(&comp[..], &mut raw);
        self.scratch.comp = comp;
        decoded.map_err(|e| FileError::Corrupt(format!("block does not decompress: {e}")))?;
        if raw.len() != raw_len as usize {
            return Err(FileError::Corrupt("block size mismatch".into()));
        }
        self.complete_bytes += head_len + comp_len as u64;
        let corrupt = |what: &str| FileError::Corrupt(format!("undecodable {what} block"));
        let block = match tag {
            TAG_PROCESS => Block::Process(decode_process(&raw).ok_or_else(|| corrupt("process"))?),
            TAG_STRINGS => {
                let base = u64::from_le_bytes(raw.get(..8).ok_or_else(|| corrupt("strings"))?.try_into().expect("8"));
                Block::Strings { pid, base, bytes: raw[8..].to_vec() }
            }
            TAG_EVENTS => Block::Events {
                pid,
                events: codec::decode_rows(&raw, MAX_BLOCK_EVENTS).ok_or_else(|| corrupt("events"))?,
            },
            TAG_EVENT_COLUMNS => {
                let mut events = self.scratch.spare.take().unwrap_or_default();
                codec::decode_columns_into(&raw, MAX_BLOCK_EVENTS, &mut self.scratch.columns, &mut events)
                    .ok_or_else(|| corrupt("events"))?;
                Block::Events { pid, events }
            }
            TAG_FOOTER => {
                self.done = true;
                Block::Footer(postcard::from_bytes(&raw).map_err(|_| corrupt("footer"))?)
            }
            t => return Err(FileError::Corrupt(format!("unknown block tag {t}"))),
        };
        self.scratch.raw = raw;
        Ok(Some(Some(block)))
    }
}

fn read_exact<R: Read>(r: &mut R, buf: &mut [u8], what: &'static str) -> Result<(), FileError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FileError::Truncated(what),
        _ => FileError::Io(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_facts_written_before_rank_existed_still_load() {
        let info = ProcessInfo { pid: 5, cmdline: vec!["a".into()], finished: true, ..Default::default() };
        let mut raw = postcard::to_stdvec(&info).unwrap();
        assert_eq!(raw.pop(), Some(0), "rank None is one trailing byte");
        assert_eq!(decode_process(&raw), Some(info.clone()));
        let ranked = ProcessInfo { rank: Some(3), ..info };
        assert_eq!(decode_process(&postcard::to_stdvec(&ranked).unwrap()).unwrap().rank, Some(3));
    }
    use crate::event::EventKind;

    #[test]
    fn process_facts_written_before_clock_pairs_existed_still_load() {
        #[derive(serde::Serialize)]
        struct V1<'a>(u32, u32, Vec<&'a str>, &'a str, &'a str, u32, &'a str, &'a str, u64, bool, Drops, Option<u32>);
        let raw =
            postcard::to_allocvec(&V1(9, 1, vec!["x"], "/x", "h", 28, "/c", "", 5, true, Drops::default(), Some(3)))
                .unwrap();
        let info = decode_process(&raw).unwrap();
        assert_eq!((info.pid, info.rank, info.clock_pairs.len()), (9, Some(3), 0));
        // And the layout from before `rank`.
        #[derive(serde::Serialize)]
        struct V0<'a>(u32, u32, Vec<&'a str>, &'a str, &'a str, u32, &'a str, &'a str, u64, bool, Drops);
        let raw =
            postcard::to_allocvec(&V0(4, 1, vec!["y"], "/y", "h", 28, "/c", "", 5, true, Drops::default())).unwrap();
        let info = decode_process(&raw).unwrap();
        assert_eq!((info.pid, info.rank, info.cmdline), (4, None, vec!["y".to_string()]));
    }

    #[test]
    fn clock_map_follows_every_pair_piecewise_linearly() {
        // CUPTI time runs 1000 ns ahead of monotonic at first, then (slewed) 2000 ns ahead 1 s later.
        let m = ClockMap::from_pairs([(1_000_001_000, 1_000_000_000), (2_000_002_000, 2_000_000_000)]);
        assert_eq!(m.map(1_000_001_000), 1_000_000_000);
        assert_eq!(m.map(1_500_001_500), 1_500_000_000, "halfway between the pairs, halfway between offsets");
        assert_eq!(m.map(3_000_003_000), 3_000_000_000, "after the last pair: the slew goes on");
        assert_eq!(m.map(500_000_500), 500_000_000, "before the first pair: likewise");
        assert_eq!(ClockMap::from_pairs([(1_000, 400)]).map(2_000), 1_400, "one pair: its offset");
        assert_eq!(m.map(0), 0, "no timestamp stays no timestamp");
        assert!(ClockMap::from_pairs([(5, 5), (9, 9)]).is_identity());
        assert_eq!(ClockMap::identity().map(42), 42);
    }

    fn sample() -> Vec<RawEvent> {
        (0..1000u64)
            .map(|i| RawEvent {
                correlation: i as u32,
                name: 4 + (i % 3) as u32 * 8,
                stream: 7,
                a: 0x7f00_0000_0000 + i * 256,
                b: 1 << 20,
                ..RawEvent::new(EventKind::Memcpy, 1234, 1_000_000 + i * 1500, 1_000_000 + i * 1500 + 700)
            })
            .collect()
    }

    fn write(events: &[RawEvent]) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new()).unwrap();
        w.write_process(&ProcessInfo { pid: 9, cmdline: vec!["x".into()], ..Default::default() }).unwrap();
        w.write_strings(9, 0, b"\0\0\0\0").unwrap();
        w.write_events(9, events).unwrap();
        w.finish(Footer { exit_code: Some(3), ..Default::default() }).unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Block>, FileError> {
        let mut r = TraceReader::new(bytes)?;
        let mut out = Vec::new();
        while let Some(b) = r.next_block()? {
            out.push(b);
        }
        Ok(out)
    }

    #[test]
    fn round_trip_preserves_every_field() {
        let events = sample();
        let blocks = read_all(&write(&events)).unwrap();
        assert_eq!(blocks.len(), 4);
        assert_eq!(blocks[2], Block::Events { pid: 9, events: events.clone() });
        let Block::Footer(f) = &blocks[3] else { panic!("no footer") };
        assert_eq!((f.events, f.exit_code), (1000, Some(3)));
    }

    #[test]
    fn version_1_files_with_row_encoded_events_still_read() {
        let events = sample();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&FILE_MAGIC);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        let mut block = |tag: u8, raw: &[u8]| {
            let comp = zstd::bulk::compress(raw, 1).unwrap();
            bytes.push(tag);
            for v in [9u32, raw.len() as u32, comp.len() as u32] {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            bytes.extend_from_slice(&comp);
        };
        let mut rows = Vec::new();
        codec::encode_rows(&events, &mut rows);
        block(TAG_EVENTS, &rows);
        block(TAG_FOOTER, &postcard::to_stdvec(&Footer { events: 1000, ..Default::default() }).unwrap());
        let blocks = read_all(&bytes).unwrap();
        assert_eq!(blocks[0], Block::Events { pid: 9, events });
        // A file from a newer cuflight says so.
        bytes[8..12].copy_from_slice(&(FILE_VERSION + 1).to_le_bytes());
        let err = read_all(&bytes).unwrap_err().to_string();
        assert!(err.contains("newer cuflight"), "{err}");
    }

    #[test]
    fn large_batches_are_written_in_cache_sized_blocks() {
        let events: Vec<RawEvent> =
            (0..3 * WRITE_BLOCK_EVENTS as u64 + 5).map(|i| sample()[i as usize % 1000]).collect();
        let blocks = read_all(&write(&events)).unwrap();
        let got: Vec<RawEvent> = blocks
            .iter()
            .filter_map(|b| match b {
                Block::Events { events, .. } => Some(events.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(got, events);
        assert_eq!(blocks.len(), 3 + 4, "process, strings, 4 event blocks, footer");
    }

    #[test]
    fn a_file_cut_anywhere_reads_up_to_its_last_complete_block() {
        let bytes = write(&sample());
        let whole = read_all(&bytes).unwrap();
        for cut in 0..bytes.len() {
            if cut < 16 {
                assert!(read_all(&bytes[..cut]).is_err(), "cut at {cut} inside the file header accepted");
                continue;
            }
            let mut r = TraceReader::new(&bytes[..cut]).unwrap();
            let mut got = Vec::new();
            while let Some(b) = r.next_block().unwrap() {
                got.push(b);
            }
            // A cut inside the 16-byte index trailer leaves every block whole (the index is then rebuilt).
            if cut + 16 >= bytes.len() {
                assert_eq!((r.cut_short(), got.len()), (None, whole.len()), "cut at {cut}");
                continue;
            }
            assert!(r.cut_short().is_some(), "cut at {cut} not reported");
            assert!(r.complete_bytes() <= cut as u64);
            assert_eq!(got[..], whole[..got.len()], "cut at {cut}: not a prefix");
        }
    }

    #[test]
    fn declared_sizes_beyond_the_limit_are_refused_before_decompressing() {
        let mut bytes = write(&sample());
        // The first block's raw_len field sits after tag and pid.
        bytes[16 + 5..16 + 9].copy_from_slice(&(1u32 << 30).to_le_bytes());
        let err = read_all(&bytes).unwrap_err().to_string();
        assert!(err.contains("limit"), "{err}");
        // A bomb: one block of zeros that really decompresses to its declared size within the limit is fine,
        // one that claims more than it holds is a mismatch, never a larger buffer.
        let mut w = TraceWriter::new(Vec::new()).unwrap();
        w.block(TAG_STRINGS, 1, &vec![0u8; MAX_BLOCK_RAW as usize]).unwrap();
        let bomb = w.finish(Footer::default()).unwrap();
        assert!(bomb.len() < 4096, "{} bytes", bomb.len());
        assert_eq!(read_all(&bomb).unwrap().len(), 2);
    }

    #[test]
    fn long_string_regions_are_written_in_bounded_pieces_on_entry_boundaries() {
        let mut region = Vec::new();
        let mut ids = Vec::new();
        for i in 0..40_000u32 {
            ids.push(region.len() as u64 + 100);
            let s = format!("kernel_name_{i}_{}", "x".repeat(300));
            region.extend_from_slice(&(s.len() as u32).to_le_bytes());
            region.extend_from_slice(s.as_bytes());
            while region.len() % 4 != 0 {
                region.push(0);
            }
        }
        let mut w = TraceWriter::new(Vec::new()).unwrap();
        w.write_strings(3, 100, &region).unwrap();
        let blocks = read_all(&w.finish(Footer::default()).unwrap()).unwrap();
        let mut seen = Vec::new();
        for b in &blocks {
            if let Block::Strings { base, bytes, .. } = b {
                assert!(bytes.len() <= STRINGS_PIECE);
                seen.extend(crate::segment::parse_strings(*base, bytes).map(|(id, _)| id as u64));
            }
        }
        assert!(blocks.len() > 2, "split into pieces");
        assert_eq!(seen, ids);
    }

    #[test]
    fn flipped_bytes_are_detected() {
        let bytes = write(&sample());
        for i in (16..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x5a;
            let _ = read_all(&bad); // must not panic; zstd checksums catch payload damage
        }
    }

    #[test]
    fn wrong_magic_and_version_are_named() {
        assert!(matches!(read_all(b"GARBAGE!GARBAGE!"), Err(FileError::BadMagic)));
        let mut bytes = write(&[]);
        bytes[8] = 9;
        assert!(matches!(read_all(&bytes), Err(FileError::Version(9))));
    }

    #[test]
    fn events_compress_well_below_24_bytes() {
        let bytes = write(&sample());
        assert!(bytes.len() < 1000 * 24, "{} bytes for 1000 events", bytes.len());
    }
}
