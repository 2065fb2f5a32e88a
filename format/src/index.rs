//! The block index of a trace file: where each block starts, whose it is and, for events, the time it covers
//! and the threads it holds, so readers can seek to a time, skip a process or merge files block by block without
//! decompressing what they do not need.
//!
//! `record` writes it as the last block before the footer ([`crate::file::TAG_INDEX`]) and locates it with a
//! 16-byte trailer after the footer: the index block's offset (u64) and [`TRAILER_MAGIC`]. Readers that go
//! block by block step over both. A file without them (cut short, or written before the index existed) gets its
//! index rebuilt from the block headers alone: an events block's header carries its time range and count
//! ([`crate::file::EVENTS_HEAD`]), so only its thread set needs the payload, and that is left empty.

use crate::file::{
    Block, FileError, ProcessInfo, TraceReader, BLOCK_HEAD, EVENTS_HEAD, MAX_BLOCK_RAW, TAG_EVENT_COLUMNS, TAG_FOOTER,
    TAG_INDEX, TAG_PROCESS,
};
pub use crate::file::{IndexEntry, TRAILER_MAGIC};
use std::io::{Read, Seek, SeekFrom};

const TRAILER: u64 = 16;

/// How the index was had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexSource {
    /// Written by the recording.
    Stored,
    /// Rebuilt from the block headers (no valid trailer: the file was cut short, or is version 1).
    Rebuilt,
}

/// The index of the trace file in `input`: the stored one when the trailer and index block are sound, else one
/// rebuilt from the block headers up to the last complete block.
pub fn read_index<R: Read + Seek>(input: &mut R) -> Result<(Vec<IndexEntry>, IndexSource), FileError> {
    if let Some(index) = stored(input)? {
        return Ok((index, IndexSource::Stored));
    }
    Ok((rebuild(input)?, IndexSource::Rebuilt))
}

/// Every process-facts block of the trace in `input`, in file order (a later one for a pid supersedes an
/// earlier one), read by seeking through the index: nothing else is read or decompressed.
pub fn process_facts<R: Read + Seek>(input: &mut R) -> Result<Vec<ProcessInfo>, FileError> {
    input.seek(SeekFrom::Start(0))?;
    TraceReader::new(&mut *input)?;
    let (index, _) = read_index(input)?;
    let mut out = Vec::new();
    for e in index.iter().filter(|e| e.tag == TAG_PROCESS) {
        input.seek(SeekFrom::Start(e.offset))?;
        if let Some(Block::Process(info)) = TraceReader::resume(&mut *input).next_block()? {
            out.push(info);
        }
    }
    Ok(out)
}

fn stored<R: Read + Seek>(input: &mut R) -> Result<Option<Vec<IndexEntry>>, FileError> {
    let len = input.seek(SeekFrom::End(0))?;
    if len < 16 + TRAILER {
        return Ok(None);
    }
    input.seek(SeekFrom::Start(len - TRAILER))?;
    let mut trailer = [0u8; 16];
    input.read_exact(&mut trailer)?;
    if trailer[8..] != TRAILER_MAGIC {
        return Ok(None);
    }
    let at = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
    if at < 16 || at.saturating_add(BLOCK_HEAD as u64) > len - TRAILER {
        return Ok(None);
    }
    input.seek(SeekFrom::Start(at))?;
    let mut head = [0u8; BLOCK_HEAD];
    input.read_exact(&mut head)?;
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    let (raw_len, comp_len) = (word(5), word(9));
    if head[0] != TAG_INDEX || raw_len > MAX_BLOCK_RAW || comp_len as u64 > len - TRAILER - at {
        return Ok(None);
    }
    let mut comp = Vec::new();
    input.take(comp_len as u64).read_to_end(&mut comp)?;
    let mut raw = Vec::new();
    let ok = zstd::stream::read::Decoder::new(&comp[..])
        .and_then(|d| d.take(raw_len as u64 + 1).read_to_end(&mut raw))
        .is_ok();
    if !ok || raw.len() != raw_len as usize {
        return Ok(None);
    }
    // Entries in file order, each before the index: anything else was not written by a writer, and rebuilding
    // beats trusting it (a crafted index could name one large block a million times).
    let index: Option<Vec<IndexEntry>> = postcard::from_bytes(&raw).ok();
    Ok(index.filter(|v| v.windows(2).all(|w| w[0].offset < w[1].offset) && v.last().is_none_or(|e| e.offset < at)))
}

/// Reads block headers from the start, seeking over payloads; stops at the footer, the index, the end, or the
/// first incomplete or impossible header.
fn rebuild<R: Read + Seek>(input: &mut R) -> Result<Vec<IndexEntry>, FileError> {
    let len = input.seek(SeekFrom::End(0))?;
    let mut at = 16u64;
    let mut out = Vec::new();
    while at + BLOCK_HEAD as u64 <= len {
        input.seek(SeekFrom::Start(at))?;
        let mut head = [0u8; BLOCK_HEAD + EVENTS_HEAD];
        input.read_exact(&mut head[..BLOCK_HEAD])?;
        let word = |h: &[u8], i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let (tag, pid, comp_len) = (head[0], word(&head, 1), word(&head, 9));
        if tag == TAG_FOOTER || tag == TAG_INDEX {
            break;
        }
        let extra = if tag == TAG_EVENT_COLUMNS { EVENTS_HEAD } else { 0 };
        let end = at + (BLOCK_HEAD + extra) as u64 + comp_len as u64;
        if end > len {
            break;
        }
        let mut entry = IndexEntry { offset: at, tag, pid, ..Default::default() };
        if extra > 0 {
            input.read_exact(&mut head[BLOCK_HEAD..])?;
            let long = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
            (entry.first, entry.last, entry.events) = (long(BLOCK_HEAD), long(BLOCK_HEAD + 8), word(&head, 29));
        }
        out.push(entry);
        at = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, RawEvent};
    use crate::file::{Footer, ProcessInfo, TraceReader, TraceWriter};
    use std::io::Cursor;

    fn trace() -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new()).unwrap();
        w.write_process(&ProcessInfo { pid: 7, ..Default::default() }).unwrap();
        let events: Vec<RawEvent> =
            (0..20_000u64).map(|i| RawEvent::new(EventKind::Api, 100 + (i % 3) as u32, 1_000 + i, 1_500 + i)).collect();
        w.write_events(7, &events).unwrap();
        w.write_events(8, &events[..10]).unwrap();
        w.finish(Footer::default()).unwrap()
    }

    #[test]
    fn the_stored_index_names_every_block_with_its_time_and_threads() {
        let bytes = trace();
        let (index, source) = read_index(&mut Cursor::new(&bytes)).unwrap();
        assert_eq!(source, IndexSource::Stored);
        let events: Vec<&IndexEntry> = index.iter().filter(|e| e.tag == TAG_EVENT_COLUMNS).collect();
        assert_eq!(events.len(), 4, "8K-event blocks: 3 for pid 7, 1 for pid 8");
        assert_eq!(events.iter().map(|e| e.events).sum::<u32>(), 20_010);
        assert_eq!((events[0].first, events[0].pid, events[0].tids.clone()), (1_000, 7, vec![100, 101, 102]));
        assert_eq!(events[2].last, 1_500 + 19_999);
        // Each offset is where a block really starts.
        for e in &index {
            assert_eq!(bytes[e.offset as usize], e.tag);
        }
        // Block-by-block readers step over the index and the trailer.
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        let mut n = 0;
        while r.next_block().unwrap().is_some() {
            n += 1;
        }
        assert_eq!((n, r.cut_short()), (index.len() + 1, None));
    }

    #[test]
    fn process_facts_are_found_by_seeking() {
        let facts = process_facts(&mut Cursor::new(trace())).unwrap();
        assert_eq!(facts.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![7]);
        assert!(process_facts(&mut Cursor::new(b"not a trace at all".to_vec())).is_err());
    }

    #[test]
    fn a_cut_or_damaged_file_gets_its_index_rebuilt_from_headers() {
        let bytes = trace();
        let (stored, _) = read_index(&mut Cursor::new(&bytes)).unwrap();
        let strip = |v: &[IndexEntry]| {
            v.iter().map(|e| (e.offset, e.tag, e.pid, e.events, e.first, e.last)).collect::<Vec<_>>()
        };
        // Trailer gone, index offset pointing anywhere: rebuilt, equal but for thread sets.
        for damage in [bytes.len() - 1, bytes.len() - 16] {
            let mut b = bytes.clone();
            b[damage] ^= 0xff;
            let (rebuilt, source) = read_index(&mut Cursor::new(&b)).unwrap();
            assert_eq!(source, IndexSource::Rebuilt);
            assert_eq!(strip(&rebuilt), strip(&stored));
        }
        // Cut inside the third events block: the blocks before it.
        let cut = stored.iter().filter(|e| e.tag == TAG_EVENT_COLUMNS).nth(2).unwrap().offset as usize + 30;
        let (rebuilt, source) = read_index(&mut Cursor::new(&bytes[..cut])).unwrap();
        assert_eq!(source, IndexSource::Rebuilt);
        assert_eq!(rebuilt.len(), 3);
        // An index that names blocks out of order (or beyond itself) is not trusted.
        let mut crafted = TraceWriter::new(Vec::new()).unwrap();
        crafted.index = vec![IndexEntry { offset: 16, tag: TAG_PROCESS, ..Default::default() }; 3];
        let b = crafted.finish(Footer::default()).unwrap();
        assert_eq!(read_index(&mut Cursor::new(&b)).unwrap().1, IndexSource::Rebuilt);
        // Garbage never panics nor allocates by its declared sizes.
        for n in [0, 5, 16, 40] {
            let _ = read_index(&mut Cursor::new(vec![0xffu8; n]));
        }
    }
}
