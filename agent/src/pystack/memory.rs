//! Reads of the interpreter's memory that cannot fault: another thread may free a frame or code object while it
//! is read (the GIL is not held), so every read goes through `process_vm_readv` on this process, where an
//! unmapped address is an error (EFAULT) instead of a crash. A failed read gives up the sample.

use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes of a code object's header read at most (what the reader needs of it ends before this in every layout).
pub const HEADER: usize = 160;

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
pub fn read_many(addrs: &[u64], len: usize, bufs: &mut [[u8; HEADER]]) -> usize {
    let n = addrs.len().min(bufs.len()).min(32);
    let len = len.min(HEADER);
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
    // SAFETY: as in `read`: each local iovec covers `len` bytes of a buffer we own mutably (len <= HEADER), and the
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

/// Pages of the frame window at most (3.11+ keeps a thread's frames next to each other, in its data stack).
pub const WINDOW_PAGES: usize = 4;
/// Bytes of the frame window.
pub const WINDOW: usize = WINDOW_PAGES * PAGE;
const PAGE: usize = 4096;

/// What [`read_guess`] reads in one call: the 8-byte words at `words` (at most 2: a thread state's frame pointer,
/// and the frame pointer of the `_PyCFrame` it is expected to point at), the frame window as [`read_window`] reads
/// it for a frame in the page at `top`, and the first `header_len` bytes of each code object at `codes` (the
/// thread's last stack: a guess that its frames are where they were, running the same code).
pub struct Guess<'a> {
    pub words: &'a [u64],
    pub top: u64,
    pub pages: usize,
    pub codes: &'a [u64],
    pub header_len: usize,
}

/// Reads `g` in one call into `words`, `window` and `headers`. Returns how many words were read whole (from the
/// first), the window's lowest address when at least its top page was, and how many headers were (only once the
/// whole window was).
pub fn read_guess(
    g: &Guess,
    words: &mut [u64; 2],
    window: &mut [u8; WINDOW],
    headers: &mut [[u8; HEADER]],
) -> (usize, Option<u64>, usize) {
    const MOST: usize = 2 + WINDOW_PAGES + 32;
    let nwords = g.words.len().min(2);
    let pages = g.pages.clamp(1, WINDOW_PAGES);
    let ncodes = g.codes.len().min(headers.len()).min(32);
    let len = g.header_len.min(HEADER);
    let low_address = |a: &u64| *a < 4096;
    if REFUSED.load(Ordering::Relaxed) || g.words[..nwords].iter().any(low_address) || g.top < (WINDOW as u64) + 4096 {
        return (0, None, 0);
    }
    let mut raw = [[0u8; 8]; 2];
    let mut local = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MOST];
    let mut remote = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MOST];
    let mut n = 0;
    for (k, word) in raw.iter_mut().enumerate().take(nwords) {
        local[n] = libc::iovec { iov_base: word.as_mut_ptr().cast(), iov_len: 8 };
        remote[n] = libc::iovec { iov_base: g.words[k] as *mut libc::c_void, iov_len: 8 };
        n += 1;
    }
    // Highest page first: the kernel stops at the first unreadable one, so the pages read are contiguous.
    for (k, chunk) in window.as_chunks_mut::<PAGE>().0.iter_mut().rev().take(pages).enumerate() {
        local[n] = libc::iovec { iov_base: chunk.as_mut_ptr().cast(), iov_len: PAGE };
        remote[n] = libc::iovec { iov_base: (g.top - (k * PAGE) as u64) as *mut libc::c_void, iov_len: PAGE };
        n += 1;
    }
    for (k, header) in headers.iter_mut().enumerate().take(ncodes) {
        if len == 0 || low_address(&g.codes[k]) {
            break;
        }
        local[n] = libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: len };
        remote[n] = libc::iovec { iov_base: g.codes[k] as *mut libc::c_void, iov_len: len };
        n += 1;
    }
    // SAFETY: every local iovec covers a distinct buffer we own mutably (two 8-byte words, distinct page-sized
    // chunks of `window`, distinct headers of at most HEADER bytes); the kernel reads the remote ranges through the
    // page tables (EFAULT, never a fault), stopping at the first unreadable one.
    let got = unsafe {
        libc::process_vm_readv(
            libc::getpid(),
            local.as_ptr(),
            n as libc::c_ulong,
            remote.as_ptr(),
            n as libc::c_ulong,
            0,
        )
    };
    let got = if got < 0 { 0 } else { got as usize };
    let read_words = (got / 8).min(nwords);
    for k in 0..read_words {
        words[k] = u64::from_le_bytes(raw[k]);
    }
    let rest = got.saturating_sub(8 * nwords);
    let read_pages = if read_words == nwords { (rest / PAGE).min(pages) } else { 0 };
    let read_headers = if read_pages == pages && len > 0 { ((rest - pages * PAGE) / len).min(ncodes) } else { 0 };
    (read_words, (read_pages > 0).then(|| g.top - ((read_pages - 1) * PAGE) as u64), read_headers)
}

/// Reads the page holding `addr` and up to `pages - 1` below it (at most [`WINDOW_PAGES`] in all) into the end of
/// `window` (whose end = the end of `addr`'s page), in one call; returns the lowest address read, or None when not
/// even `addr`'s page could be.
pub fn read_window(addr: u64, window: &mut [u8; WINDOW], pages: usize) -> Option<u64> {
    let only_window = Guess { words: &[], top: addr & !(PAGE as u64 - 1), pages, codes: &[], header_len: 0 };
    read_guess(&only_window, &mut [0; 2], window, &mut []).1
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
