//! [`TraceReader`]: a file's blocks one at a time, each checked (lengths, tags, checksum) before it is decoded.

use super::*;
use crate::codec;
use std::io::Read;

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
