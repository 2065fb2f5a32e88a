//! [`TraceWriter`]: blocks encoded, compressed and appended, and the index and footer that end a complete file.

use super::*;
use crate::codec::EventEncoder;
use std::io::Write;

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

    pub(super) fn block(&mut self, tag: u8, pid: u32, raw: &[u8]) -> Result<(), FileError> {
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
