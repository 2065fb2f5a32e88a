//! A segment's image in a file: what a flight recorder writes when its process crashes (with nothing but
//! `pwrite` and `ftruncate`, which are async-signal-safe) and `cuflight` reads back through the same validation
//! as a segment handed over by a live agent.
//!
//! The image is the segment at its own offsets (header, published strings, reserved rings) with holes where
//! nothing was published, ending with the last reserved ring: it costs the disk what the process used, not its
//! layout (the reader restores the segment's full size from the header).

use super::{last_error, MappedSegment, SegmentError, HEADER_SIZE};
use crate::ring::ring_bytes;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;

/// Largest image `cuflight` reads: the largest valid segment.
const MAX_IMAGE: u64 = super::MAX_SEGMENT_BYTES;

impl MappedSegment {
    /// Writes this segment's image into `fd` (an empty file); false on any error. Async-signal-safe: reads the
    /// mapping (every byte written is reserved memory, so none can fault) and calls only `pwrite`/`ftruncate`.
    pub fn write_image(&self, fd: RawFd) -> bool {
        self.image_pieces().all(|(offset, len)| self.write_range(fd, offset, len))
    }

    /// What the image [`Self::write_image`] would write now takes on disk: its pieces in whole 4 KiB blocks (its
    /// holes take nothing), for the dump directory's budget ([`super::dump_dir`]).
    pub fn image_bytes(&self) -> u64 {
        self.image_pieces().map(|(_, len)| len.next_multiple_of(4096)).sum()
    }

    /// The image's pieces, (offset, length): the header, the strings published so far, each reserved ring.
    fn image_pieces(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let layout = self.layout;
        let strings = self.header().strings_len.load(Ordering::Acquire).min(layout.strings_capacity);
        let rings =
            (0..self.reserved_rings()).map(move |i| (layout.ring_offset(i), ring_bytes(layout.ring_capacity) as u64));
        [(0, HEADER_SIZE as u64), (layout.strings_offset(), strings.next_multiple_of(4).min(layout.strings_capacity))]
            .into_iter()
            .chain(rings)
    }

    fn write_range(&self, fd: RawFd, offset: u64, len: u64) -> bool {
        let mut done = 0u64;
        while done < len {
            // SAFETY: [offset, offset + len) lies inside the mapping (validated layout); pwrite only reads it.
            let n = unsafe {
                libc::pwrite(
                    fd,
                    self.base.wrapping_add((offset + done) as usize) as *const libc::c_void,
                    (len - done) as usize,
                    (offset + done) as libc::off_t,
                )
            };
            if n <= 0 {
                if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return false;
            }
            done += n as u64;
        }
        true
    }

    /// Reads an image written by [`Self::write_image`] (hostile input: another process wrote it). Its bytes are
    /// copied into a private sealed memory file first, so nobody can change or truncate them while they are
    /// read, then validated like a live agent's segment.
    pub fn from_image(file: &std::fs::File) -> Result<MappedSegment, SegmentError> {
        let meta = file.metadata().map_err(|e| SegmentError::Io("stat", e))?;
        if !meta.is_file() {
            return Err(SegmentError::Corrupt("not a regular file"));
        }
        let len = meta.len();
        if len < HEADER_SIZE as u64 || len > MAX_IMAGE {
            return Err(SegmentError::Corrupt("impossible size for a segment image"));
        }
        // The segment's size as its header states it (validated with everything else by `from_fd`): the image
        // ends at its last reserved ring.
        let mut declared = [0u8; 8];
        let at = std::mem::offset_of!(super::SegmentHeader, total_size) as u64;
        std::os::unix::fs::FileExt::read_exact_at(file, &mut declared, at).map_err(|e| SegmentError::Io("read", e))?;
        let size = u64::from_le_bytes(declared).clamp(len, MAX_IMAGE);
        let copy = super::sealable_memfd(c"cuflight-image", size)?;
        copy_extents(file.as_raw_fd(), copy.as_raw_fd(), len)?;
        // SAFETY: fcntl on our own memfd.
        if unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) } != 0 {
            return Err(last_error("sealing"));
        }
        MappedSegment::from_fd(copy)
    }
}

/// Copies the data of `from` (skipping holes where the file system reports them) into `to`, in bounded chunks.
fn copy_extents(from: RawFd, to: RawFd, len: u64) -> Result<(), SegmentError> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        // SAFETY: lseek on a valid descriptor.
        let data = unsafe { libc::lseek(from, at as libc::off_t, libc::SEEK_DATA) };
        let (start, end) = if data < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::ENXIO) => break, // nothing but a hole up to the end
                _ => (at, len),             // holes unknown here: copy everything
            }
        } else {
            let start = (data as u64).max(at);
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(from, start as libc::off_t, libc::SEEK_HOLE) };
            (start, if hole < 0 { len } else { (hole as u64).min(len) })
        };
        let mut pos = start;
        while pos < end {
            let want = ((end - pos) as usize).min(buf.len());
            // SAFETY: pread into our buffer of at least `want` bytes.
            let n = unsafe { libc::pread(from, buf.as_mut_ptr() as *mut libc::c_void, want, pos as libc::off_t) };
            if n <= 0 {
                return Err(if n == 0 {
                    SegmentError::Corrupt("image shorter than it says")
                } else {
                    last_error("read")
                });
            }
            // SAFETY: pwrite of the bytes just read into our memfd, inside its size.
            let w = unsafe { libc::pwrite(to, buf.as_ptr() as *const libc::c_void, n as usize, pos as libc::off_t) };
            if w != n {
                return Err(SegmentError::NoMemory("cannot copy the segment image into memory".into()));
            }
            pos += n as u64;
        }
        at = end.max(at + 1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Layout;
    use super::*;
    use crate::event::{EventKind, RawEvent};

    #[test]
    fn an_image_reads_back_with_its_rings_strings_and_facts() {
        let layout = Layout { ring_count: 8, ring_capacity: 64, strings_capacity: 1 << 20 };
        let seg = MappedSegment::create(layout, 77, 1, 5).unwrap();
        seg.header().flight_recorder_ns.store(1_000, Ordering::Relaxed);
        let id = seg.append_string(b"kernel_a").unwrap();
        let ring = seg.ring(seg.reserve_ring().unwrap()).unwrap();
        let mut p = ring.try_claim(1).unwrap();
        for i in 0..100 {
            p.push(&RawEvent { name: id, ..RawEvent::new(EventKind::Kernel, 0, i, i + 1) });
        }
        let path = std::env::temp_dir().join(format!("cuflight-image-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        assert!(seg.write_image(file.as_raw_fd()));
        drop(file);
        let on_disk = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::MetadataExt;
        // Allocation units differ between file systems: what matters is that the 1 MiB of unused strings is a hole.
        assert!(on_disk.blocks() * 512 <= seg.image_bytes() + (256 << 10), "holes take no disk: {on_disk:?}");
        assert_eq!(on_disk.len(), layout.ring_offset(1), "the image ends with its last reserved ring");
        let back = MappedSegment::from_image(&std::fs::File::open(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!((back.pid(), back.reserved_rings()), (77, 1));
        let mut out = Vec::new();
        assert_eq!(back.ring(0).unwrap().peek_into(&mut out), 64, "overwrite mode kept the newest 64");
        assert_eq!((out[0].start, out[63].start), (36, 99));
        assert!(crate::strings::parse_strings(0, back.strings_since(0)).any(|(i, s)| i == id && s == b"kernel_a"));
    }

    #[test]
    fn garbage_and_truncated_images_are_refused() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("cuflight-image-bad-{}", std::process::id()));
        for bytes in [vec![0u8; 10], vec![0u8; 8192], vec![0xffu8; 8192]] {
            std::fs::write(&path, &bytes).unwrap();
            assert!(MappedSegment::from_image(&std::fs::File::open(&path).unwrap()).is_err());
        }
        // Cut after the header: the rings it claims read as empty, never beyond the memory.
        let seg =
            MappedSegment::create(Layout { ring_count: 2, ring_capacity: 64, strings_capacity: 64 }, 1, 0, 0).unwrap();
        seg.reserve_ring().unwrap();
        seg.ring(0).unwrap().try_claim(1).unwrap().push(&RawEvent::new(EventKind::Api, 1, 1, 2));
        std::fs::write(&path, &seg.image()[..HEADER_SIZE]).unwrap();
        let back = MappedSegment::from_image(&std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(back.ring(0).unwrap().peek_into(&mut Vec::new()), 0);
        std::fs::remove_file(&path).unwrap();
        assert!(MappedSegment::from_image(&std::fs::File::open(&dir).unwrap()).is_err());
    }
}
