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

/// Whether reads work at all here (false under a seccomp policy that forbids them).
pub fn refused() -> bool {
    REFUSED.load(Ordering::Relaxed)
}

pub fn u64_at(buf: &[u8], at: usize) -> u64 {
    buf.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

pub fn i32_at(buf: &[u8], at: usize) -> i32 {
    buf.get(at..at + 4).map_or(0, |b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
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
