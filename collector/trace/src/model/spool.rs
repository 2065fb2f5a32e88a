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

/// An importer's GPU events waiting for their process (known only at the end), set aside on disk: the event's 64 bytes and
/// its raw Kineto (pid, tid).
pub struct GpuSpill {
    file: std::io::BufWriter<std::fs::File>,
    records: u64,
}

const GPU_RECORD: usize = 64 + 16;

impl GpuSpill {
    pub fn create() -> std::io::Result<GpuSpill> {
        let spool = Spool::create()?;
        Ok(GpuSpill { file: std::io::BufWriter::with_capacity(1 << 20, spool.into_file()), records: 0 })
    }

    pub fn write(&mut self, v: &[(RawEvent, (u64, u64))]) -> std::io::Result<()> {
        use std::io::Write;
        for (ev, (pid, tid)) in v {
            self.file.write_all(bytemuck::bytes_of(ev))?;
            self.file.write_all(&pid.to_le_bytes())?;
            self.file.write_all(&tid.to_le_bytes())?;
        }
        self.records += v.len() as u64;
        Ok(())
    }

    /// Every record, in the order written, in batches.
    pub fn read(self, mut f: impl FnMut(Vec<(RawEvent, (u64, u64))>)) -> std::io::Result<()> {
        use std::io::{Read, Seek};
        let mut file = self.file.into_inner().map_err(|e| e.into_error())?;
        file.seek(std::io::SeekFrom::Start(0))?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, file);
        let mut left = self.records;
        let mut rec = [0u8; GPU_RECORD];
        while left > 0 {
            let n = left.min(1 << 16);
            let mut batch = Vec::with_capacity(n as usize);
            for _ in 0..n {
                r.read_exact(&mut rec)?;
                let ev: RawEvent = bytemuck::pod_read_unaligned(&rec[..64]);
                let pid = u64::from_le_bytes(rec[64..72].try_into().expect("8 bytes"));
                let tid = u64::from_le_bytes(rec[72..80].try_into().expect("8 bytes"));
                batch.push((ev, (pid, tid)));
            }
            left -= n;
            f(batch);
        }
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
