//! The shared-memory segment of one profiled process: `/dev/shm/cuflight-<session>-<pid>`.
//!
//! Layout (all offsets in the header, so readers need no constants but the header's):
//! ```text
//! [SegmentHeader, 4 KiB] [string region] [ring 0] [ring 1] ... [ring N-1]
//! ```
//! The agent creates the file, sizes it, writes the header and publishes it by storing `magic` last (release).
//! Strings are appended as `[u32 len][bytes][pad to 4]`; a string's id is its offset in the region (offset 0
//! holds the empty string), and `strings_len` is published with a release store after each append, so every id
//! found in a drained event refers to bytes already visible. Each ring belongs to one producer thread at a time.
//! The collector maps the file read-write (it advances ring read counters) and trusts nothing in it: every
//! offset and size is checked against the mapping before use.

use crate::ring::{ring_bytes, RingRef};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"CUFLSEG1");
pub const SEGMENT_VERSION: u32 = 1;
pub const HEADER_SIZE: usize = 4096;
const STATUS_LEN: usize = 512;

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
}

impl Default for Layout {
    /// 64 rings of 16 Ki events (1 MiB each, so a producing thread stays within L2) and 4 MiB of strings; tmpfs
    /// only backs the pages a thread touches.
    fn default() -> Self {
        Layout { ring_count: 64, ring_capacity: 1 << 14, strings_capacity: 4 << 20 }
    }
}

/// Errors opening or validating a segment.
#[derive(Debug)]
pub enum SegmentError {
    Io(PathBuf, std::io::Error),
    /// Not (yet) a published cuflight segment, or one of another version.
    NotReady,
    /// A header whose sizes do not fit the file.
    Corrupt(&'static str),
}

impl std::fmt::Display for SegmentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            SegmentError::NotReady => write!(f, "segment not published yet"),
            SegmentError::Corrupt(why) => write!(f, "corrupt segment: {why}"),
        }
    }
}

impl std::error::Error for SegmentError {}

/// CLOCK_MONOTONIC in ns: the clock of the agent's host events and of the collector's drain heartbeat.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Directory holding segments: `$CUFLIGHT_SHM_DIR` or `/dev/shm`.
pub fn segment_dir() -> PathBuf {
    std::env::var_os("CUFLIGHT_SHM_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/dev/shm"))
}

/// File name prefix of a session's segments.
pub fn session_prefix(session: &str) -> String {
    format!("cuflight-{session}-")
}

/// A mapped segment. Unmapped on drop.
pub struct MappedSegment {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory accessed through atomics and the SPSC ring protocol; the pointer stays
// valid until drop.
unsafe impl Send for MappedSegment {}
// SAFETY: as above; shared access only goes through atomics or read-only copies of published bytes.
unsafe impl Sync for MappedSegment {}

fn map(path: &Path, flags: i32, size: Option<u64>) -> Result<(*mut u8, usize), SegmentError> {
    let io = |e| SegmentError::Io(path.to_path_buf(), e);
    let cpath =
        CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| SegmentError::Corrupt("path contains NUL"))?;
    // SAFETY: plain syscalls on a NUL-terminated path; every result is checked and the fd closed.
    unsafe {
        let fd = libc::open(cpath.as_ptr(), flags | libc::O_CLOEXEC, 0o600);
        if fd < 0 {
            return Err(io(std::io::Error::last_os_error()));
        }
        let len = match size {
            Some(s) => {
                if libc::ftruncate(fd, s as libc::off_t) != 0 {
                    let e = std::io::Error::last_os_error();
                    libc::close(fd);
                    return Err(io(e));
                }
                s as usize
            }
            None => {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(fd, &mut st) != 0 {
                    let e = std::io::Error::last_os_error();
                    libc::close(fd);
                    return Err(io(e));
                }
                st.st_size as usize
            }
        };
        if len < HEADER_SIZE {
            libc::close(fd);
            return Err(SegmentError::NotReady);
        }
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
        libc::close(fd);
        if p == libc::MAP_FAILED {
            return Err(io(std::io::Error::last_os_error()));
        }
        Ok((p as *mut u8, len))
    }
}

impl MappedSegment {
    /// Creates (exclusively) and publishes a new segment. Called by the agent once per process.
    pub fn create(path: &Path, layout: Layout, pid: u32, ppid: u32, realtime_ns: u64) -> Result<Self, SegmentError> {
        let (base, len) = map(path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, Some(layout.total_size()))?;
        let seg = MappedSegment { base, len };
        // SAFETY: the fresh mapping is zero-filled, page aligned and large enough for the header; nobody else
        // reads it before `magic` is published at the end.
        let h = unsafe { &mut *(base as *mut SegmentHeader) };
        h.version = SEGMENT_VERSION;
        h.header_size = HEADER_SIZE as u32;
        h.pid = pid;
        h.ppid = ppid;
        h.ring_count = layout.ring_count;
        h.ring_capacity = layout.ring_capacity;
        h.strings_offset = layout.strings_offset();
        h.strings_capacity = layout.strings_capacity;
        h.rings_offset = layout.rings_offset();
        h.total_size = layout.total_size();
        h.start_realtime_ns = realtime_ns;
        // The empty string at offset 0 (a zero length word, already zero) makes id 0 mean "none".
        h.strings_len.store(4, Ordering::Relaxed);
        h.magic.store(SEGMENT_MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Maps an existing segment and validates its header against the file. Called by the collector.
    pub fn open(path: &Path) -> Result<Self, SegmentError> {
        let (base, len) = map(path, libc::O_RDWR, None)?;
        let seg = MappedSegment { base, len };
        let h = seg.header();
        if h.magic.load(Ordering::Acquire) != SEGMENT_MAGIC || h.version != SEGMENT_VERSION {
            return Err(SegmentError::NotReady);
        }
        let layout = seg.layout();
        if !layout.ring_capacity.is_power_of_two()
            || h.strings_offset != layout.strings_offset()
            || h.rings_offset != layout.rings_offset()
            || h.total_size != layout.total_size()
            || layout.total_size() > len as u64
        {
            return Err(SegmentError::Corrupt("sizes in the header do not match the file"));
        }
        Ok(seg)
    }

    pub fn header(&self) -> &SegmentHeader {
        // SAFETY: the mapping is at least HEADER_SIZE bytes (checked in `map`) and page aligned.
        unsafe { &*(self.base as *const SegmentHeader) }
    }

    pub fn layout(&self) -> Layout {
        let h = self.header();
        Layout { ring_count: h.ring_count, ring_capacity: h.ring_capacity, strings_capacity: h.strings_capacity }
    }

    /// Ring `i`; None past the end.
    pub fn ring(&self, i: u32) -> Option<RingRef> {
        let l = self.layout();
        if i >= l.ring_count {
            return None;
        }
        let off = l.rings_offset() as usize + i as usize * ring_bytes(l.ring_capacity);
        // SAFETY: create/open checked that every ring lies inside the mapping; offsets are 4096 + multiples of
        // the ring size (a multiple of 128), so the ring is 128-byte aligned.
        Some(unsafe { RingRef::from_raw(self.base.add(off), l.ring_capacity) })
    }

    /// Published string bytes from `from` (an earlier `strings_len`) up to the current `strings_len`.
    pub fn strings_since(&self, from: u64) -> &[u8] {
        let h = self.header();
        let end = h.strings_len.load(Ordering::Acquire).min(h.strings_capacity);
        let from = from.min(end);
        // SAFETY: [strings_offset + from, strings_offset + end) lies inside the mapping (capacity checked in
        // open/create) and those bytes were published before `strings_len` (acquired above); they never change.
        unsafe { std::slice::from_raw_parts(self.base.add((h.strings_offset + from) as usize), (end - from) as usize) }
    }

    /// Appends a string; returns its id, or None when the region is full (counted). Not thread-safe: the agent
    /// serialises appends.
    pub fn append_string(&self, s: &[u8]) -> Option<u32> {
        let h = self.header();
        let at = h.strings_len.load(Ordering::Relaxed);
        let need = (4 + s.len() as u64).next_multiple_of(4);
        if at + need > h.strings_capacity || at > u32::MAX as u64 {
            h.string_drops.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // SAFETY: the range [at, at + need) lies inside the string region, past everything published, so no
        // reader looks at it until the release store below.
        unsafe {
            let p = self.base.add((h.strings_offset + at) as usize);
            std::ptr::copy_nonoverlapping((s.len() as u32).to_le_bytes().as_ptr(), p, 4);
            std::ptr::copy_nonoverlapping(s.as_ptr(), p.add(4), s.len());
        }
        h.strings_len.store(at + need, Ordering::Release);
        Some(at as u32)
    }

    /// Records why the agent disabled itself, then publishes the DISABLED state.
    pub fn set_disabled(&self, why: &str) {
        let n = why.len().min(STATUS_LEN);
        // SAFETY: `status` lies in the header; concurrent readers only read it after seeing DISABLED, which is
        // stored (release) after the bytes.
        unsafe {
            let status = std::ptr::addr_of!(self.header().status) as *mut u8;
            std::ptr::copy_nonoverlapping(why.as_ptr(), status, n);
        }
        self.header().status_len.store(n as u32, Ordering::Relaxed);
        self.header().state.store(state::DISABLED, Ordering::Release);
    }

    /// The disable reason, if any.
    pub fn status(&self) -> String {
        let h = self.header();
        let n = (h.status_len.load(Ordering::Acquire) as usize).min(STATUS_LEN);
        String::from_utf8_lossy(&h.status[..n]).into_owned()
    }
}

impl Drop for MappedSegment {
    fn drop(&mut self) {
        // SAFETY: base/len come from a successful mmap and no view outlives the segment by contract.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Splits published string bytes (starting at region offset `base`) into `(id, bytes)` pairs. Stops at the first
/// entry that does not fit, which only a corrupt segment or file can produce.
pub fn parse_strings(base: u64, bytes: &[u8]) -> impl Iterator<Item = (u32, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
        let s = bytes.get(at + 4..at + 4 + len)?;
        let id = base + at as u64;
        at += (4 + len).next_multiple_of(4);
        Some((id as u32, s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, RawEvent};

    fn temp_path(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("cuflight-test-{tag}-{}", std::process::id()))
    }

    #[test]
    fn agent_and_collector_views_agree() {
        let path = temp_path("views");
        let _ = std::fs::remove_file(&path);
        let layout = Layout { ring_count: 4, ring_capacity: 64, strings_capacity: 256 };
        let agent = MappedSegment::create(&path, layout, 42, 1, 7).unwrap();
        let id = agent.append_string(b"my_kernel").unwrap();
        assert!(agent.ring(0).unwrap().try_claim(42));
        agent.ring(0).unwrap().producer().push(&RawEvent { name: id, ..RawEvent::new(EventKind::Kernel, 0, 1, 2) });

        let collector = MappedSegment::open(&path).unwrap();
        assert_eq!(collector.header().pid, 42);
        let mut out = Vec::new();
        collector.ring(0).unwrap().consumer().drain_into(&mut out);
        let strings: Vec<_> = parse_strings(0, collector.strings_since(0)).collect();
        assert_eq!(strings, vec![(0, &b""[..]), (id, &b"my_kernel"[..])]);
        assert_eq!(out[0].name, id);
        assert!(collector.ring(4).is_none());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn full_string_region_counts_drops() {
        let path = temp_path("strings");
        let _ = std::fs::remove_file(&path);
        let seg =
            MappedSegment::create(&path, Layout { ring_count: 1, ring_capacity: 2, strings_capacity: 32 }, 1, 0, 0)
                .unwrap();
        assert!(seg.append_string(&[b'x'; 20]).is_some());
        assert!(seg.append_string(&[b'y'; 20]).is_none());
        assert_eq!(seg.header().string_drops.load(Ordering::Relaxed), 1);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn garbage_files_are_rejected() {
        let path = temp_path("garbage");
        std::fs::write(&path, vec![0xabu8; 8192]).unwrap();
        assert!(matches!(MappedSegment::open(&path), Err(SegmentError::NotReady)));
        std::fs::write(&path, b"tiny").unwrap();
        assert!(MappedSegment::open(&path).is_err());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn disable_reason_round_trips() {
        let path = temp_path("status");
        let _ = std::fs::remove_file(&path);
        let seg =
            MappedSegment::create(&path, Layout { ring_count: 1, ring_capacity: 2, strings_capacity: 64 }, 1, 0, 0)
                .unwrap();
        seg.set_disabled("no libcupti found");
        assert_eq!(seg.header().state.load(Ordering::Acquire), state::DISABLED);
        assert_eq!(seg.status(), "no libcupti found");
        std::fs::remove_file(&path).unwrap();
    }
}
