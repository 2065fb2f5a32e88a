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

use crate::event::RawEvent;
use serde::{Deserialize, Serialize};

mod facts;
mod reader;
mod writer;

use facts::decode_process;
pub use facts::{ClockMap, Drops, Footer, ProcessInfo};
pub use reader::TraceReader;
pub use writer::TraceWriter;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

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
