//! Events of an imported trace set aside on disk, so that a multi-gigabyte torch.profiler trace is analysed in
//! bounded memory: an external sort. The importer hands over runs of events (each run one process's events in
//! the order it read them); each run is sorted by start (stably) and written as chunks, and
//! [`crate::model::source::EventSource`] merges the chunks back in time order, opening a chunk only when the
//! stream reaches its first event, as it does with a cuflight trace's blocks. Within a run the chunks follow one
//! another in time, so at most one chunk per run is in memory at once.
//!
//! The file lives in the temporary directory (`TMPDIR`), is unlinked as soon as it is created (nothing is left
//! behind, even if cuflight is killed) and holds the events as their 64 bytes each.

use cuflight_format::RawEvent;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};

/// Events per chunk read back at once (4 MiB).
pub const CHUNK_EVENTS: usize = 1 << 16;

/// Events the importer holds before it writes a run out: `CUFLIGHT_SPOOL_EVENTS` (default 500,000: 32 MB).
/// Smaller runs use less memory while importing but open more chunks at once while reading.
pub fn run_events() -> usize {
    std::env::var("CUFLIGHT_SPOOL_EVENTS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(500_000)
}

/// One chunk on disk: sorted by start, following the previous chunk of its run.
#[derive(Clone, Copy, Debug)]
pub struct Chunk {
    pub pid: u32,
    pub offset: u64,
    pub events: u32,
    pub first_start: u64,
}

pub struct Spool {
    file: File,
    len: u64,
    pub chunks: Vec<Chunk>,
    /// Where the file is (for messages; the name itself is gone).
    dir: std::path::PathBuf,
}

impl Spool {
    pub fn create() -> std::io::Result<Spool> {
        let dir = std::env::temp_dir();
        let mut n = 0u32;
        loop {
            let path = dir.join(format!("cuflight-spool-{}-{n}", std::process::id()));
            // Owner-only from the first instant: another user must not read the events before the unlink.
            let open = std::os::unix::fs::OpenOptionsExt::mode(
                std::fs::OpenOptions::new().read(true).write(true).create_new(true),
                0o600,
            )
            .open(&path);
            match open {
                Ok(file) => {
                    std::fs::remove_file(&path)?;
                    return Ok(Spool { file, len: 0, chunks: Vec::new(), dir });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// The file, for a caller that writes its own records (it is already unlinked).
    pub fn into_file(self) -> File {
        self.file
    }

    /// What a failure to spool says: where, and what to do.
    pub fn explain(&self, e: &std::io::Error) -> String {
        format!(
            "cannot set events aside in {} ({e}): free space there or point TMPDIR at a larger disk",
            self.dir.display()
        )
    }

    /// Sorts `events` (one process's, in the order read) stably by start and writes them as one run; `events`
    /// is left empty for reuse.
    pub fn run(&mut self, pid: u32, events: &mut Vec<RawEvent>) -> std::io::Result<()> {
        events.sort_by_key(|e| e.start);
        self.file.seek(SeekFrom::Start(self.len))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut self.file);
        for chunk in events.chunks(CHUNK_EVENTS) {
            w.write_all(bytemuck::cast_slice(chunk))?;
            self.chunks.push(Chunk { pid, offset: self.len, events: chunk.len() as u32, first_start: chunk[0].start });
            self.len += std::mem::size_of_val(chunk) as u64;
        }
        w.flush()?;
        events.clear();
        Ok(())
    }

    /// Reads a chunk back into `into` (cleared first).
    pub fn read(&mut self, c: &Chunk, into: &mut Vec<RawEvent>) -> std::io::Result<()> {
        into.clear();
        into.resize(c.events as usize, RawEvent::default());
        self.file.seek(SeekFrom::Start(c.offset))?;
        self.file.read_exact(bytemuck::cast_slice_mut(into))
    }

    /// Reads every chunk back in file order (each run's events in time order), for the importer's second look.
    pub fn drain(&mut self, mut f: impl FnMut(&[RawEvent])) -> std::io::Result<()> {
        let chunks = std::mem::take(&mut self.chunks);
        let mut buf = Vec::new();
        for c in &chunks {
            self.read(c, &mut buf)?;
            f(&buf);
        }
        self.len = 0;
        self.file.set_len(0)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::EventKind;

    #[test]
    fn runs_come_back_sorted_and_in_chunks() {
        let mut s = Spool::create().unwrap();
        let mut v: Vec<RawEvent> = (0..(CHUNK_EVENTS as u64 + 10))
            .map(|i| RawEvent::new(EventKind::Api, i as u32, 1_000_000 - i, 1_000_000))
            .collect();
        s.run(3, &mut v).unwrap();
        assert!(v.is_empty());
        assert_eq!(s.chunks.len(), 2);
        assert!(s.chunks[0].first_start < s.chunks[1].first_start);
        let mut back = Vec::new();
        let c = s.chunks[1];
        s.read(&c, &mut back).unwrap();
        assert_eq!(back.len(), 10);
        assert!(back.windows(2).all(|w| w[0].start <= w[1].start));
        let mut n = 0;
        s.drain(|chunk| n += chunk.len()).unwrap();
        assert_eq!(n, CHUNK_EVENTS + 10);
    }
}
