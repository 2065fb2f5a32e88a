//! The shared-memory segment of one profiled process.
//!
//! Layout (all offsets in the header, so readers need no constants but the header's):
//! ```text
//! [SegmentHeader, 4 KiB] [string region] [ring 0] [ring 1] ... [ring N-1]
//! ```
//! The segment is an anonymous memfd, never a file in /dev/shm: nobody else can open, plant, replace or
//! symlink it, it is not limited by the size of /dev/shm (64 MB in a default Docker container), and it is freed
//! when the last of agent and collector lets go of it, so a crash leaves nothing behind. The agent sizes it,
//! seals it against shrinking (a collector mapping it can never fault on a truncated page) and hands it to the
//! collector over the session's socket (see [`crate::channel`]).
//!
//! Memory is reserved (`fallocate`) before it is touched, never merely mapped: a page that tmpfs cannot back
//! would kill the program with SIGBUS on its first write. The header and the first strings are reserved at
//! creation; each ring when a thread first needs one ([`MappedSegment::reserve_ring`]), so an idle process costs
//! 68 KiB, not 68 MiB; strings in chunks as they grow. A reservation that fails is counted and the thread or
//! string goes without; the collector only touches rings below `rings_reserved`.
//!
//! The agent writes the header and publishes it by storing `magic` last (release). Strings are appended as
//! `[u32 len][bytes][pad to 4]`; a string's id is its offset in the region (offset 0 holds the empty string),
//! and `strings_len` is published with a release store after each append, so every id found in a drained event
//! refers to bytes already visible. Each ring belongs to one producer thread at a time. The collector maps the
//! segment read-write (it advances ring read counters and writes its drain heartbeat) and trusts nothing in it:
//! the layout is validated once, with checked arithmetic and limits, into a copy that every later access uses.

pub mod dump_dir;
mod header;
mod image;

pub use header::*;
use header::{STATUS_LEN, STRINGS_CHUNK, STRINGS_START};

use crate::ring::{ring_bytes, Consumer, RingRef};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

/// Errors creating, receiving or validating a segment.
#[derive(Debug)]
pub enum SegmentError {
    Io(&'static str, std::io::Error),
    /// Not a published cuflight segment, or one of another version.
    NotReady,
    /// A header whose sizes are impossible or do not fit the memory.
    Corrupt(&'static str),
    /// The memory could not be reserved (no room in memory, or a file size limit).
    NoMemory(String),
}

impl std::fmt::Display for SegmentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentError::Io(what, e) => write!(f, "{what}: {e}"),
            SegmentError::NotReady => write!(f, "not a cuflight segment of this version"),
            SegmentError::Corrupt(why) => write!(f, "corrupt segment: {why}"),
            SegmentError::NoMemory(why) => write!(f, "{why}"),
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

/// A mapped segment. Unmapped on drop.
pub struct MappedSegment {
    base: *mut u8,
    len: usize,
    /// The agent keeps its memfd (to reserve rings); the collector closes its copy once mapped (one descriptor
    /// fewer per process).
    fd: Option<OwnedFd>,
    /// Validated once; every access uses this copy, never the header's (which its writer may change).
    layout: Layout,
    pid: u32,
    /// Serialises ring reservations (agent side; cold path).
    reserving: std::sync::Mutex<()>,
    /// Per ring, whether this process holds its consumer ([`MappedSegment::consumer`]).
    consuming: Box<[std::sync::atomic::AtomicBool]>,
}

// SAFETY: the mapping is shared memory accessed through atomics and the SPSC ring protocol; the pointer stays
// valid until drop.
unsafe impl Send for MappedSegment {}
// SAFETY: as above; shared access only goes through atomics or read-only copies of published bytes.
unsafe impl Sync for MappedSegment {}

fn consumer_flags(layout: Layout) -> Box<[std::sync::atomic::AtomicBool]> {
    (0..layout.ring_count).map(|_| std::sync::atomic::AtomicBool::new(false)).collect()
}

fn last_error(what: &'static str) -> SegmentError {
    SegmentError::Io(what, std::io::Error::last_os_error())
}

/// Reserves `[off, off + len)` of `fd`'s memory, so touching it can never fault.
fn reserve(fd: RawFd, off: u64, len: u64) -> Result<(), SegmentError> {
    // SAFETY: fallocate on an fd we own; mode 0 allocates without changing the size (the range is inside it).
    let r = unsafe { libc::fallocate(fd, 0, off as libc::off_t, len as libc::off_t) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(SegmentError::NoMemory(format!("cannot reserve {} KiB of shared memory: {e}", len >> 10)));
    }
    Ok(())
}

impl MappedSegment {
    /// Creates a sealed memfd segment and publishes its header. Called by the agent once per process.
    pub fn create(layout: Layout, pid: u32, ppid: u32, realtime_ns: u64) -> Result<Self, SegmentError> {
        if !layout.is_valid() {
            return Err(SegmentError::Corrupt("layout beyond the limits"));
        }
        let total = layout.total_size();
        // Sizing a file past RLIMIT_FSIZE raises SIGXFSZ, which kills the program: ask first.
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the valid struct.
        if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim) } == 0
            && lim.rlim_cur != libc::RLIM_INFINITY
            && lim.rlim_cur < total
        {
            return Err(SegmentError::NoMemory(format!(
                "the file size limit (ulimit -f, {} KiB) is below the segment's {} MiB",
                lim.rlim_cur >> 10,
                total >> 20
            )));
        }
        let fd = sealable_memfd(c"cuflight-segment", total)?;
        let raw = fd.as_raw_fd();
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, seals) } != 0 {
            return Err(last_error("sealing the segment"));
        }
        let first_strings = STRINGS_CHUNK.min(layout.strings_capacity);
        reserve(raw, 0, HEADER_SIZE as u64 + first_strings)?;
        let (base, len) = map(raw, total)?;
        let seg = MappedSegment {
            base,
            len,
            fd: Some(fd),
            layout,
            pid,
            reserving: std::sync::Mutex::new(()),
            consuming: consumer_flags(layout),
        };
        // SAFETY: the fresh mapping is zero-filled, page aligned, reserved for the header; nobody else reads it
        // before `magic` is published at the end.
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
        h.total_size = total;
        h.start_realtime_ns = realtime_ns;
        h.strings_reserved.store(first_strings, Ordering::Relaxed);
        // The empty string at offset 0 (a zero length word, already zero) makes id 0 mean "none".
        h.strings_len.store(STRINGS_START, Ordering::Relaxed);
        h.magic.store(SEGMENT_MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Maps a segment received from an agent and validates it once. Called by the collector: the memory must
    /// be a memfd sealed against shrinking (so no access can fault), and every size must be within the limits
    /// and fit the memory.
    pub fn from_fd(fd: OwnedFd) -> Result<Self, SegmentError> {
        let raw = fd.as_raw_fd();
        // SAFETY: an all-zero stat is a valid value of the plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on a valid fd, into that struct.
        if unsafe { libc::fstat(raw, &mut st) } != 0 {
            return Err(last_error("fstat"));
        }
        // SAFETY: fcntl on a valid fd.
        let seals = unsafe { libc::fcntl(raw, libc::F_GET_SEALS) };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(SegmentError::Corrupt("not a regular memory file"));
        }
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(SegmentError::Corrupt("not sealed against shrinking"));
        }
        let len = u64::try_from(st.st_size).map_err(|_| SegmentError::Corrupt("negative size"))?;
        if len < HEADER_SIZE as u64 || len > 1 << 40 {
            return Err(SegmentError::Corrupt("impossible size"));
        }
        let (base, len) = map(raw, len)?;
        // SAFETY: the mapping holds at least the header (checked above) and is page aligned.
        let h = unsafe { &*(base as *const SegmentHeader) };
        let unmap = |e| {
            // SAFETY: base/len come from the successful mmap above and nothing refers to them yet.
            unsafe { libc::munmap(base as *mut libc::c_void, len) };
            Err(e)
        };
        if h.magic.load(Ordering::Acquire) != SEGMENT_MAGIC || h.version != SEGMENT_VERSION {
            return unmap(SegmentError::NotReady);
        }
        // Each field read once into the copy; from here on the header's sizes are never read again.
        let layout =
            Layout { ring_count: h.ring_count, ring_capacity: h.ring_capacity, strings_capacity: h.strings_capacity };
        let pid = h.pid;
        if !layout.is_valid() {
            return unmap(SegmentError::Corrupt("sizes beyond the limits"));
        }
        if layout.total_size() > len as u64 {
            return unmap(SegmentError::Corrupt("sizes in the header do not fit the memory"));
        }
        drop(fd);
        Ok(MappedSegment {
            base,
            len,
            fd: None,
            layout,
            pid,
            reserving: std::sync::Mutex::new(()),
            consuming: consumer_flags(layout),
        })
    }

    /// The memfd (what the agent hands to the collector); -1 on the collector's side.
    pub fn fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    pub fn header(&self) -> &SegmentHeader {
        // SAFETY: the mapping is at least HEADER_SIZE bytes (checked in create/from_fd) and page aligned.
        unsafe { &*(self.base as *const SegmentHeader) }
    }

    /// The validated layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The pid the segment was created by (as validated).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Rings with reserved memory, `0..n`: the only ones a consumer may touch.
    pub fn reserved_rings(&self) -> u32 {
        self.header().rings_reserved.load(Ordering::Acquire).min(self.layout.ring_count)
    }

    /// The consumer of ring `i` in this process: None past the end, or while another consumer of it is live
    /// here. (The collector drains; an agent whose collector is gone may empty its rings the same way.)
    pub fn consumer(&self, i: u32) -> Option<Consumer<'_>> {
        Consumer::take(self.ring(i)?, self.consuming.get(i as usize)?)
    }

    /// Ring `i`; None past the end. Only rings below [`Self::reserved_rings`] are backed by memory.
    pub fn ring(&self, i: u32) -> Option<RingRef<'_>> {
        if i >= self.layout.ring_count {
            return None;
        }
        let off = self.layout.ring_offset(i) as usize;
        // SAFETY: the validated layout places every ring inside the mapping; offsets are 4096 + multiples of the
        // ring size (a multiple of 128), so the ring is 128-byte aligned.
        Some(unsafe { RingRef::from_raw(self.base.wrapping_add(off), self.layout.ring_capacity) })
    }

    /// Reserves the memory of one more ring and publishes it; its index, or None when every ring is reserved
    /// or the memory cannot be had (counted in `rings_refused`). Agent side.
    pub fn reserve_ring(&self) -> Option<u32> {
        self.reserve_ring_below(self.layout.ring_count)
    }

    /// Like [`Self::reserve_ring`], but only while fewer than `limit` rings are reserved (the agent keeps the
    /// last few for rings it shares between threads).
    pub fn reserve_ring_below(&self, limit: u32) -> Option<u32> {
        let _guard = self.reserving.lock().unwrap_or_else(|e| e.into_inner());
        let h = self.header();
        let i = h.rings_reserved.load(Ordering::Relaxed);
        if i >= self.layout.ring_count.min(limit) {
            return None;
        }
        if reserve(self.fd(), self.layout.ring_offset(i), ring_bytes(self.layout.ring_capacity) as u64).is_err() {
            h.rings_refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if h.flight_recorder_ns.load(Ordering::Relaxed) != 0 {
            if let Some(ring) = self.ring(i) {
                ring.set_overwrite(true);
            }
        }
        h.rings_reserved.store(i + 1, Ordering::Release);
        Some(i)
    }

    /// Published string bytes from `from` (an earlier `strings_len`) up to the current `strings_len`.
    pub fn strings_since(&self, from: u64) -> &[u8] {
        let h = self.header();
        let end = h.strings_len.load(Ordering::Acquire).min(self.layout.strings_capacity);
        let from = from.min(end);
        // SAFETY: [strings_offset + from, strings_offset + end) lies inside the mapping (the validated capacity)
        // and those bytes were published before `strings_len` (acquired above).
        unsafe {
            std::slice::from_raw_parts(
                self.base.wrapping_add((self.layout.strings_offset() + from) as usize),
                (end - from) as usize,
            )
        }
    }

    /// Empties the string region (its memory stays reserved), for a window that starts afresh: every id handed
    /// out before names nothing, or another string, from here. Not thread-safe: the agent serialises it with its
    /// appends, and calls it only while no collector reads the segment (between attach windows).
    pub fn reset_strings(&self) {
        self.header().strings_len.store(STRINGS_START, Ordering::Release);
    }

    /// Appends a string; returns its id, or None when the region is full or its memory cannot be reserved
    /// (counted). Not thread-safe: the agent serialises appends.
    pub fn append_string(&self, s: &[u8]) -> Option<u32> {
        let h = self.header();
        let at = h.strings_len.load(Ordering::Relaxed);
        let need = (4 + s.len() as u64).next_multiple_of(4);
        let end = at + need;
        if end > self.layout.strings_capacity || at > u32::MAX as u64 {
            h.string_drops.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let reserved = h.strings_reserved.load(Ordering::Relaxed);
        if end > reserved {
            let upto = end.next_multiple_of(STRINGS_CHUNK).min(self.layout.strings_capacity);
            let off = self.layout.strings_offset() + reserved;
            if reserve(self.fd(), off, upto - reserved).is_err() {
                h.string_drops.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            h.strings_reserved.store(upto, Ordering::Relaxed);
        }
        // The range [at, end) lies inside the reserved string region, past everything published, so no reader
        // looks at it until the release store below.
        let p = self.base.wrapping_add((self.layout.strings_offset() + at) as usize);
        // SAFETY: inside that range: the length's 4 bytes first.
        unsafe { std::ptr::copy_nonoverlapping((s.len() as u32).to_le_bytes().as_ptr(), p, 4) };
        // SAFETY: inside that range: the string's bytes after them.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), p.wrapping_add(4), s.len()) };
        h.strings_len.store(end, Ordering::Release);
        Some(at as u32)
    }

    /// Records why the agent disabled itself, then publishes the DISABLED state.
    pub fn set_disabled(&self, why: &str) {
        // Cut at a character boundary: the reader decodes UTF-8.
        let mut n = why.len().min(STATUS_LEN);
        while !why.is_char_boundary(n) {
            n -= 1;
        }
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
        let mut bytes = [0u8; STATUS_LEN];
        bytes[..n].copy_from_slice(&h.status[..n]);
        String::from_utf8_lossy(&bytes[..n]).into_owned()
    }
}

/// A memfd of `len` bytes (sparse: nothing is allocated until written) that accepts seals, close-on-exec. Through
/// the system call rather than glibc's `memfd_create()` (2.27), so that the agent loads on any glibc the kernel
/// call works under (Linux 3.17+).
pub(crate) fn sealable_memfd(name: &std::ffi::CStr, len: u64) -> Result<OwnedFd, SegmentError> {
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `name` is NUL-terminated and outlives the call; the descriptor returned is owned below.
    let raw = unsafe { libc::syscall(libc::SYS_memfd_create, name.as_ptr(), flags) } as RawFd;
    if raw < 0 {
        return Err(last_error("memfd_create"));
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = libc::off_t::try_from(len)
        .map_err(|_| SegmentError::NoMemory(format!("a memfd of {len} bytes is past the largest file offset")))?;
    // SAFETY: ftruncate on our own descriptor.
    if unsafe { libc::ftruncate(raw, len) } != 0 {
        return Err(last_error("ftruncate"));
    }
    Ok(fd)
}

/// A sealed memfd holding `bytes` (at least one header long), as an agent would hand it over: for fuzzing and
/// tests of the collector's side.
#[doc(hidden)]
pub fn sealed_memfd(bytes: &[u8]) -> Result<OwnedFd, SegmentError> {
    let fd = sealable_memfd(c"cuflight-test", bytes.len().max(HEADER_SIZE) as u64)?;
    let raw = fd.as_raw_fd();
    // SAFETY: pwrite reads `bytes.len()` bytes of `bytes`.
    if unsafe { libc::pwrite(raw, bytes.as_ptr() as *const libc::c_void, bytes.len(), 0) } != bytes.len() as isize {
        return Err(last_error("pwrite"));
    }
    // SAFETY: a plain syscall on our fd.
    if unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) } != 0 {
        return Err(last_error("sealing"));
    }
    Ok(fd)
}

impl MappedSegment {
    /// A copy of the whole segment's memory (for fuzzing seeds and tests).
    #[doc(hidden)]
    pub fn image(&self) -> Vec<u8> {
        // SAFETY: the mapping is `len` bytes, alive while `self` is.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }.to_vec()
    }
}

fn map(fd: RawFd, len: u64) -> Result<(*mut u8, usize), SegmentError> {
    // SAFETY: mmap of a valid fd; the result is checked.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(last_error("mmap"));
    }
    Ok((p as *mut u8, len as usize))
}

impl Drop for MappedSegment {
    fn drop(&mut self) {
        // SAFETY: base/len come from a successful mmap and no view outlives the segment by contract.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

pub use crate::strings::parse_strings;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, RawEvent};

    fn dup(seg: &MappedSegment) -> OwnedFd {
        // SAFETY: dup of a valid fd.
        let raw = unsafe { libc::dup(seg.fd()) };
        assert!(raw >= 0);
        // SAFETY: the new fd is owned by the result alone.
        unsafe { OwnedFd::from_raw_fd(raw) }
    }

    #[test]
    fn agent_and_collector_views_agree() {
        let layout = Layout { ring_count: 4, ring_capacity: 64, strings_capacity: 256 };
        let agent = MappedSegment::create(layout, 42, 1, 7).unwrap();
        let id = agent.append_string(b"my_kernel").unwrap();
        assert_eq!(agent.reserve_ring(), Some(0));
        let mut producer = agent.ring(0).unwrap().try_claim(42).unwrap();
        assert!(agent.ring(0).unwrap().try_claim(43).is_none(), "one producer, across processes too");
        producer.push(&RawEvent { name: id, ..RawEvent::new(EventKind::Kernel, 0, 1, 2) });

        let collector = MappedSegment::from_fd(dup(&agent)).unwrap();
        assert_eq!((collector.pid(), collector.reserved_rings()), (42, 1));
        let mut out = Vec::new();
        let mut consumer = collector.consumer(0).unwrap();
        assert!(collector.consumer(0).is_none(), "one consumer at a time");
        consumer.drain_into(&mut out);
        drop(consumer);
        let strings: Vec<_> = parse_strings(0, collector.strings_since(0)).collect();
        assert_eq!(strings, vec![(0, &b""[..]), (id, &b"my_kernel"[..])]);
        assert_eq!(out[0].name, id);
        assert!(collector.ring(4).is_none());
    }

    #[test]
    fn rings_are_reserved_one_by_one_up_to_the_count() {
        let seg =
            MappedSegment::create(Layout { ring_count: 2, ring_capacity: 64, strings_capacity: 64 }, 1, 0, 0).unwrap();
        assert_eq!(seg.reserved_rings(), 0);
        assert_eq!((seg.reserve_ring(), seg.reserve_ring(), seg.reserve_ring()), (Some(0), Some(1), None));
        assert_eq!(seg.reserved_rings(), 2);
    }

    #[test]
    fn full_string_region_counts_drops() {
        let seg =
            MappedSegment::create(Layout { ring_count: 1, ring_capacity: 2, strings_capacity: 32 }, 1, 0, 0).unwrap();
        assert!(seg.append_string(&[b'x'; 20]).is_some());
        assert!(seg.append_string(&[b'y'; 20]).is_none());
        assert_eq!(seg.header().string_drops.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn strings_beyond_the_first_chunk_are_reserved_as_they_come() {
        let seg = MappedSegment::create(Layout { ring_count: 1, ring_capacity: 2, strings_capacity: 1 << 20 }, 1, 0, 0)
            .unwrap();
        let big = vec![b'k'; 1000];
        let ids: Vec<u32> = (0..500).map(|_| seg.append_string(&big).unwrap()).collect();
        assert!(seg.header().strings_reserved.load(Ordering::Relaxed) > STRINGS_CHUNK);
        assert_eq!(parse_strings(0, seg.strings_since(0)).count(), 501);
        assert_eq!(ids[499] as usize, 4 + 499 * 1004);
    }

    #[test]
    fn unsealed_memory_garbage_and_impossible_layouts_are_refused() {
        // A plain file: not sealed, so it could be truncated under the collector.
        let path = std::env::temp_dir().join(format!("cuflight-plain-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let plain: OwnedFd = std::fs::File::open(&path).unwrap().into();
        assert!(matches!(MappedSegment::from_fd(plain), Err(SegmentError::Corrupt(_))));
        std::fs::remove_file(&path).unwrap();

        let seg =
            MappedSegment::create(Layout { ring_count: 2, ring_capacity: 64, strings_capacity: 64 }, 1, 0, 0).unwrap();
        // SAFETY: the test owns the segment and rewrites header fields as a hostile writer would.
        let h = unsafe { &mut *(seg.base as *mut SegmentHeader) };
        for (count, cap, strings) in
            [(u32::MAX, 64, 64), (2, 1 << 31, 64), (2, 63, 64), (2, 64, u64::MAX), (4000, 1 << 20, 64), (0, 64, 64)]
        {
            (h.ring_count, h.ring_capacity, h.strings_capacity) = (count, cap, strings);
            assert!(
                matches!(MappedSegment::from_fd(dup(&seg)), Err(SegmentError::Corrupt(_))),
                "{count} {cap} {strings}"
            );
        }
        h.magic.store(0, Ordering::Relaxed);
        assert!(matches!(MappedSegment::from_fd(dup(&seg)), Err(SegmentError::NotReady)));
    }

    #[test]
    fn a_validated_layout_ignores_later_rewrites() {
        let seg =
            MappedSegment::create(Layout { ring_count: 2, ring_capacity: 64, strings_capacity: 64 }, 1, 0, 0).unwrap();
        let collector = MappedSegment::from_fd(dup(&seg)).unwrap();
        // SAFETY: as above.
        let h = unsafe { &mut *(seg.base as *mut SegmentHeader) };
        (h.ring_count, h.ring_capacity, h.strings_capacity) = (4096, 1 << 24, 64 << 20);
        h.rings_reserved.store(u32::MAX, Ordering::Relaxed);
        h.strings_len.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(collector.layout().ring_count, 2);
        assert_eq!(collector.reserved_rings(), 2);
        assert_eq!(collector.strings_since(0).len(), 64);
        assert!(collector.ring(2).is_none());
    }

    #[test]
    fn a_sealed_segment_cannot_be_truncated() {
        let seg =
            MappedSegment::create(Layout { ring_count: 1, ring_capacity: 64, strings_capacity: 64 }, 1, 0, 0).unwrap();
        // SAFETY: ftruncate on our own fd (expected to fail).
        assert_ne!(unsafe { libc::ftruncate(seg.fd(), 0) }, 0);
    }

    #[test]
    fn disable_reason_round_trips() {
        let seg =
            MappedSegment::create(Layout { ring_count: 1, ring_capacity: 2, strings_capacity: 64 }, 1, 0, 0).unwrap();
        seg.set_disabled("no libcupti found");
        assert_eq!(seg.header().state.load(Ordering::Acquire), state::DISABLED);
        assert_eq!(seg.status(), "no libcupti found");
    }
}
