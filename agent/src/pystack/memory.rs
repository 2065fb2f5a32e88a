//! Reads of the interpreter's memory that cannot fault: another thread may free a frame or code object while it
//! is read (the GIL is not held), so every read goes through `process_vm_readv` on this process, where an
//! unmapped address is an error (EFAULT) instead of a crash. A failed read gives up the sample.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the kernel refused the call itself (seccomp, an old kernel): stacks are off for good.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Fills `buf` from address `addr` of this process; false when any byte of it is not readable.
pub fn read(addr: u64, buf: &mut [u8]) -> bool {
    if addr < 4096 || buf.is_empty() || REFUSED.load(Ordering::Relaxed) {
        return false;
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which we own mutably; the remote range is
    // read through the page tables, so an unmapped address returns EFAULT rather than faulting. getpid has no
    // preconditions (and is right after fork, where a cached pid would not be).
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        let err = std::io::Error::last_os_error().raw_os_error();
        if matches!(err, Some(libc::EPERM | libc::ENOSYS)) {
            REFUSED.store(true, Ordering::Relaxed);
        }
        return false;
    }
    n as usize == buf.len()
}

/// Fills `bufs[k][..len]` from `addrs[k]` in one call; returns how many were read whole, from the first (the
/// kernel stops at the first unreadable one).
pub fn read_many(addrs: &[u64], len: usize, bufs: &mut [[u8; 256]]) -> usize {
    let n = addrs.len().min(bufs.len()).min(32);
    let len = len.min(256);
    if n == 0 || len == 0 || REFUSED.load(Ordering::Relaxed) {
        return 0;
    }
    let mut local = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 32];
    let mut remote = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 32];
    let mut used: usize = 0;
    for (k, buf) in bufs.iter_mut().enumerate().take(n) {
        if addrs[k] < 4096 {
            break;
        }
        local[k] = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: len };
        remote[k] = libc::iovec { iov_base: addrs[k] as *mut libc::c_void, iov_len: len };
        used += 1;
    }
    if used == 0 {
        return 0;
    }
    // SAFETY: as in `read`: each local iovec covers `len` bytes of a buffer we own mutably (len <= 256), and the
    // kernel reads the remote ranges through the page tables, stopping at the first unreadable one.
    let got = unsafe {
        libc::process_vm_readv(
            libc::getpid(),
            local.as_ptr(),
            used as libc::c_ulong,
            remote.as_ptr(),
            used as libc::c_ulong,
            0,
        )
    };
    if got < 0 {
        return 0;
    }
    (got as usize / len).min(used)
}

/// Bytes of the frame window (3.11+ keeps a thread's frames next to each other, in its data stack).
pub const WINDOW: usize = 4 * PAGE;
const PAGE: usize = 4096;

/// Reads the page holding `addr` and up to three below it into `window` (its end = the end of `addr`'s page), in
/// one call; returns the lowest address read, or None when not even `addr`'s page could be.
pub fn read_window(addr: u64, window: &mut [u8; WINDOW]) -> Option<u64> {
    let top = addr & !(PAGE as u64 - 1);
    if top < (WINDOW as u64) + 4096 || REFUSED.load(Ordering::Relaxed) {
        return None;
    }
    let pages = WINDOW / PAGE;
    let mut local = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; WINDOW / PAGE];
    let mut remote = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; WINDOW / PAGE];
    // Highest page first: the kernel stops at the first unreadable page, so what is read is contiguous.
    for (k, chunk) in window.as_chunks_mut::<PAGE>().0.iter_mut().rev().enumerate() {
        local[k] = libc::iovec { iov_base: chunk.as_mut_ptr().cast(), iov_len: PAGE };
        remote[k] = libc::iovec { iov_base: (top - (k * PAGE) as u64) as *mut libc::c_void, iov_len: PAGE };
    }
    // SAFETY: each local iovec is one distinct page-sized chunk of `window`, owned mutably; the remote pages are
    // read through the page tables (EFAULT, never a fault), stopping at the first unreadable one.
    let got = unsafe {
        libc::process_vm_readv(
            libc::getpid(),
            local.as_ptr(),
            pages as libc::c_ulong,
            remote.as_ptr(),
            pages as libc::c_ulong,
            0,
        )
    };
    let read = if got < 0 { 0 } else { got as usize / PAGE };
    (read > 0).then(|| top - ((read - 1) * PAGE) as u64)
}

/// Whether reads work at all here (false under a seccomp policy that forbids them).
pub fn refused() -> bool {
    REFUSED.load(Ordering::Relaxed)
}

/// The little-endian u64 at `at` of `buf` (0 past its end). Nothing here may panic: it runs in CUDA callbacks.
pub fn u64_at(buf: &[u8], at: usize) -> u64 {
    let bytes = at.checked_add(8).and_then(|end| buf.get(at..end)).and_then(|b| <[u8; 8]>::try_from(b).ok());
    bytes.map_or(0, u64::from_le_bytes)
}

/// The little-endian i32 at `at` of `buf` (0 past its end).
pub fn i32_at(buf: &[u8], at: usize) -> i32 {
    let bytes = at.checked_add(4).and_then(|end| buf.get(at..end)).and_then(|b| <[u8; 4]>::try_from(b).ok());
    bytes.map_or(0, i32::from_le_bytes)
}

/// A remote byte string read in chunks as it is consumed (line tables), at most `limit` bytes.
pub struct Chunks {
    addr: u64,
    left: usize,
    buf: [u8; 256],
    at: usize,
    len: usize,
    pub failed: bool,
}

impl Chunks {
    pub fn new(addr: u64, limit: usize) -> Self {
        Chunks { addr, left: limit, buf: [0; 256], at: 0, len: 0, failed: false }
    }
}

impl Iterator for Chunks {
    type Item = u8;
    fn next(&mut self) -> Option<u8> {
        if self.at == self.len {
            let n = self.left.min(self.buf.len());
            if n == 0 || !read(self.addr, &mut self.buf[..n]) {
                self.failed |= n != 0;
                return None;
            }
            (self.addr, self.left, self.at, self.len) = (self.addr + n as u64, self.left - n, 0, n);
        }
        self.at += 1;
        Some(self.buf[self.at - 1])
    }
}
