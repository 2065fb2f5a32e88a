//! Reads of the interpreter's memory that cannot fault: another thread may free a frame or code object while it
//! is read (the GIL is not held), so every read goes through `process_vm_readv` on this process, where an
//! unmapped address is an error (EFAULT) instead of a crash. A failed read gives up the sample.

use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes of a code object's header read at most (what the reader needs of it ends before this in every layout).
pub const HEADER: usize = 240;

/// Set once the kernel refused the call itself (seccomp, an old kernel): stacks are off for good.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// One `process_vm_readv` on this process: the bytes transferred, 0 on failure (a kernel or sandbox that refuses
/// the call itself turns the reader off for good: [`REFUSED`]).
///
/// # Safety
/// Every `local` iovec must cover a distinct buffer the caller owns mutably, as long as its `iov_len`; `local` and
/// `remote` have the same length. The remote ranges are read through the page tables, so an unmapped address
/// returns EFAULT rather than faulting, the kernel stopping at the first range it cannot read.
unsafe fn readv(local: &[libc::iovec], remote: &[libc::iovec]) -> usize {
    let n = local.len().min(remote.len()) as libc::c_ulong;
    // SAFETY: getpid has no preconditions (and is right after fork, where a cached pid would not be).
    let pid = unsafe { libc::getpid() };
    // SAFETY: the caller's contract above.
    let got = unsafe { libc::process_vm_readv(pid, local.as_ptr(), n, remote.as_ptr(), n, 0) };
    if got < 0 {
        if matches!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) {
            REFUSED.store(true, Ordering::Relaxed);
        }
        return 0;
    }
    got as usize
}

/// Fills `buf` from address `addr` of this process; false when any byte of it is not readable.
pub fn read(addr: u64, buf: &mut [u8]) -> bool {
    if addr < 4096 || buf.is_empty() || REFUSED.load(Ordering::Relaxed) {
        return false;
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: the one local iovec is `buf`, which we own mutably.
    unsafe { readv(&[local], &[remote]) == buf.len() }
}

/// Fills as much of `buf` from `addr` as is readable, in one call: the whole of it, or the part up to the end of
/// the page `addr` lies in when the next page cannot be read. Returns the bytes read (0: none). One system call
/// reads an object's header together with what usually follows it (a short string's text, the start of a line
/// table), where an exact read of each would take two.
pub fn read_prefix(addr: u64, buf: &mut [u8]) -> usize {
    if addr < 4096 || buf.is_empty() || REFUSED.load(Ordering::Relaxed) {
        return 0;
    }
    // Two pieces split at the page boundary: the kernel transfers whole iovec elements only, so a second page
    // that cannot be read still leaves the first piece read.
    let first = ((4096 - addr % 4096) as usize).min(buf.len());
    let (head, tail) = buf.split_at_mut(first);
    let local = [
        libc::iovec { iov_base: head.as_mut_ptr().cast(), iov_len: head.len() },
        libc::iovec { iov_base: tail.as_mut_ptr().cast(), iov_len: tail.len() },
    ];
    let remote = [
        libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: head.len() },
        libc::iovec { iov_base: (addr + first as u64) as *mut libc::c_void, iov_len: tail.len() },
    ];
    let pieces = if tail.is_empty() { 1 } else { 2 };
    // SAFETY: the local pieces are the two disjoint halves of `buf`, which we own mutably.
    unsafe { readv(&local[..pieces], &remote[..pieces]) }
}

/// Bytes read of each object [`gather`] reads.
pub const GATHERED: usize = 256;
/// Objects [`gather`] reads at most (its buffer is the walk's [`SCRATCH`]).
pub const MOST_GATHERED: usize = SCRATCH / GATHERED;

/// Reads [`GATHERED`] bytes from each of `addrs` (at most [`MOST_GATHERED`]) into `out[k * GATHERED..]`, in one
/// call; bit k of the result says whether object k was read whole. The kernel stops at the first range it cannot
/// read (an object at the end of a mapping, a freed one): those from there on are left for a read of their own.
pub fn gather(addrs: &[u64], out: &mut [u8; SCRATCH]) -> u64 {
    let count = addrs.len().min(MOST_GATHERED);
    if count == 0 || REFUSED.load(Ordering::Relaxed) || addrs[..count].iter().any(|&a| a < 4096) {
        return 0;
    }
    let mut local = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MOST_GATHERED];
    let mut remote = local;
    for (k, chunk) in out.as_chunks_mut::<GATHERED>().0.iter_mut().take(count).enumerate() {
        local[k] = libc::iovec { iov_base: chunk.as_mut_ptr().cast(), iov_len: GATHERED };
        remote[k] = libc::iovec { iov_base: addrs[k] as *mut libc::c_void, iov_len: GATHERED };
    }
    // SAFETY: each local iovec is a distinct GATHERED-byte chunk of `out`, which we own mutably.
    let got = unsafe { readv(&local[..count], &remote[..count]) };
    let whole = (got / GATHERED).min(count);
    (1u64 << whole) - 1
}

/// Words [`read_words`] reads at most.
pub const MOST_WORDS: usize = 32;

/// Reads the 8-byte word at each of `addrs` (at most [`MOST_WORDS`]) into `out`, in one call; bit k of the result
/// says whether word k was read (the kernel stops at the first unreadable one, so the bits read are the first).
pub fn read_words(addrs: &[u64], out: &mut [u64]) -> u32 {
    let count = addrs.len().min(out.len()).min(MOST_WORDS);
    if count == 0 || REFUSED.load(Ordering::Relaxed) || addrs[..count].iter().any(|&a| a < 4096) {
        return 0;
    }
    let mut raw = [[0u8; 8]; MOST_WORDS];
    let mut local = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MOST_WORDS];
    let mut remote = local;
    for (k, word) in raw.iter_mut().take(count).enumerate() {
        local[k] = libc::iovec { iov_base: word.as_mut_ptr().cast(), iov_len: 8 };
        remote[k] = libc::iovec { iov_base: addrs[k] as *mut libc::c_void, iov_len: 8 };
    }
    // SAFETY: each local iovec is a distinct 8-byte word of `raw`, which we own mutably.
    let got = unsafe { readv(&local[..count], &remote[..count]) };
    let whole = (got / 8).min(count);
    for k in 0..whole {
        out[k] = u64::from_le_bytes(raw[k]);
    }
    ((1u64 << whole) - 1) as u32
}

/// Fills `bufs[k][..len]` from `addrs[k]` in one call (see [`read_guess`]); bit k of the result says whether
/// `bufs[k]` was read whole.
pub fn read_many(addrs: &[u64], len: usize, bufs: &mut [[u8; HEADER]], scratch: &mut [u8]) -> u32 {
    let only_headers = Guess { words: &[], top: 0, pages: 0, codes: addrs, header_len: len };
    read_guess(&only_headers, &mut [0; 2], &mut [], bufs, scratch).2
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

/// Code headers read as one range when they lie this close (a range costs the kernel one pin of the page or two
/// it spans, where a header apiece pins the same page again and again: a module's code objects are made one after
/// another, close together).
const SPAN: usize = 2048;
/// Bytes of ranges of several headers in one read at most (the reader's stack); beyond, headers are read apiece.
pub const SCRATCH: usize = 8192;
/// Most headers in one read.
const MOST_HEADERS: usize = 32;

/// Reads `g` in one call into `words`, `window` and `headers` (`scratch` holds the ranges of several headers).
/// Returns how many words were read whole (from the first), the window's lowest address when at least its top
/// page was read, and which headers were (bit k for `headers[k]`; none unless every word and page was).
pub fn read_guess(
    g: &Guess,
    words: &mut [u64; 2],
    window: &mut [u8],
    headers: &mut [[u8; HEADER]],
    scratch: &mut [u8],
) -> (usize, Option<u64>, u32) {
    const MOST: usize = 2 + WINDOW_PAGES + MOST_HEADERS;
    let nwords = g.words.len().min(2);
    // The window's last page receives the top page (`window` is [`WINDOW`] bytes, or empty when no page is read).
    let pages = g.pages.min(WINDOW_PAGES).min(window.len() / PAGE);
    let ncodes = g.codes.len().min(headers.len()).min(MOST_HEADERS);
    let len = g.header_len.min(HEADER);
    let low_address = |a: &u64| *a < 4096;
    if REFUSED.load(Ordering::Relaxed)
        || g.words[..nwords].iter().any(low_address)
        || (pages > 0 && g.top < (WINDOW as u64) + 4096)
    {
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
    let first_header = n;
    let plan = if len > 0 { plan_headers(&g.codes[..ncodes], len, scratch.len()) } else { HeaderPlan::default() };
    // The ranges of several headers, one after another into `scratch`; then the headers read apiece, into their
    // own buffers.
    let mut rest: &mut [u8] = &mut scratch[..];
    for r in &plan.ranges[..plan.count] {
        let (dst, tail) = std::mem::take(&mut rest).split_at_mut(r.len);
        rest = tail;
        local[n] = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: r.len };
        remote[n] = libc::iovec { iov_base: r.start as *mut libc::c_void, iov_len: r.len };
        n += 1;
    }
    for (k, header) in headers.iter_mut().enumerate().take(ncodes) {
        if plan.apiece & (1 << k) != 0 {
            local[n] = libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: len };
            remote[n] = libc::iovec { iov_base: g.codes[k] as *mut libc::c_void, iov_len: len };
            n += 1;
        }
    }
    if n == 0 {
        return (0, None, 0);
    }
    // SAFETY: every local iovec covers a distinct buffer we own mutably (two 8-byte words, distinct page-sized
    // chunks of `window`, disjoint pieces of `scratch`, distinct headers of at most HEADER bytes).
    let got = unsafe { readv(&local[..n], &remote[..n]) };
    // Which iovecs were read whole: the kernel fills them in order.
    let mut left = got;
    let mut whole = [false; MOST];
    for (k, done) in whole.iter_mut().enumerate().take(n) {
        *done = left >= local[k].iov_len;
        left = left.saturating_sub(local[k].iov_len);
    }
    let read_words = whole[..nwords].iter().take_while(|&&w| w).count();
    for k in 0..read_words {
        words[k] = u64::from_le_bytes(raw[k]);
    }
    let read_pages = whole[nwords..first_header].iter().take_while(|&&w| w).count();
    if read_words < nwords || read_pages < pages {
        return (read_words, (read_pages > 0).then(|| g.top - ((read_pages - 1) * PAGE) as u64), 0);
    }
    let mut mask = 0u32;
    let mut at = 0;
    for (i, r) in plan.ranges[..plan.count].iter().enumerate() {
        if whole[first_header + i] {
            for (k, header) in headers.iter_mut().enumerate().take(ncodes) {
                if plan.range_of[k] == i as u8 {
                    let from = at + (g.codes[k] - r.start) as usize;
                    header[..len].copy_from_slice(&scratch[from..from + len]);
                    mask |= 1 << k;
                }
            }
        }
        at += r.len;
    }
    let mut io = first_header + plan.count;
    for k in 0..ncodes {
        if plan.apiece & (1 << k) != 0 {
            if whole[io] {
                mask |= 1 << k;
            }
            io += 1;
        }
    }
    (read_words, (pages > 0).then(|| g.top - ((pages - 1) * PAGE) as u64), mask)
}

/// One range of several code headers.
#[derive(Clone, Copy, Default)]
struct Range {
    start: u64,
    len: usize,
}

/// How the headers of one read are fetched: ranges of several (into the scratch buffer), and the rest apiece.
struct HeaderPlan {
    ranges: [Range; MOST_HEADERS],
    count: usize,
    /// The range of header k (`u8::MAX`: read apiece, or not at all).
    range_of: [u8; MOST_HEADERS],
    /// Bit k: header k read into its own buffer.
    apiece: u32,
}

impl Default for HeaderPlan {
    fn default() -> Self {
        HeaderPlan { ranges: [Range::default(); MOST_HEADERS], count: 0, range_of: [u8::MAX; MOST_HEADERS], apiece: 0 }
    }
}

/// Groups the headers at `codes` (each `len` bytes) by address: those within [`SPAN`] of a range's start join it
/// while the ranges fit in `room` bytes; one alone, or one that does not fit, is read apiece.
fn plan_headers(codes: &[u64], len: usize, room: usize) -> HeaderPlan {
    let mut plan = HeaderPlan::default();
    let mut order = [0usize; MOST_HEADERS];
    let n = codes.len().min(MOST_HEADERS);
    let mut count = 0;
    for (k, &code) in codes.iter().enumerate().take(n) {
        if code >= 4096 {
            order[count] = k;
            count += 1;
        }
    }
    let order = &mut order[..count];
    order.sort_unstable_by_key(|&k| codes[k]);
    // Runs of headers close together, in address order.
    let mut used = 0;
    let mut i = 0;
    while i < order.len() {
        let start = codes[order[i]];
        let mut end = start + len as u64;
        let mut j = i + 1;
        while j < order.len() && codes[order[j]] + len as u64 - start <= SPAN as u64 {
            end = end.max(codes[order[j]] + len as u64);
            j += 1;
        }
        let span = (end - start) as usize;
        if j - i > 1 && used + span <= room {
            let r = plan.count;
            plan.ranges[r] = Range { start, len: span };
            plan.count += 1;
            used += span;
            for &k in &order[i..j] {
                plan.range_of[k] = r as u8;
            }
        } else {
            for &k in &order[i..j] {
                plan.apiece |= 1 << k;
            }
        }
        i = j;
    }
    plan
}

/// Reads the page holding `addr` and up to `pages - 1` below it (at most [`WINDOW_PAGES`] in all) into the end of
/// `window` (whose end = the end of `addr`'s page), in one call; returns the lowest address read, or None when not
/// even `addr`'s page could be.
pub fn read_window(addr: u64, window: &mut [u8; WINDOW], pages: usize) -> Option<u64> {
    let only_window =
        Guess { words: &[], top: addr & !(PAGE as u64 - 1), pages: pages.max(1), codes: &[], header_len: 0 };
    read_guess(&only_window, &mut [0; 2], window, &mut [], &mut []).1
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
    /// The bytes from `addr` on, at most `limit`, read 256 at a time when asked for, the first of them already
    /// read (`read`: at most 256, any number, none included).
    pub fn starting_with(addr: u64, limit: usize, read: &[u8]) -> Self {
        let n = read.len().min(limit).min(256);
        let mut c = Chunks { addr: addr + n as u64, left: limit - n, buf: [0; 256], at: 0, len: n, failed: false };
        c.buf[..n].copy_from_slice(&read[..n]);
        c
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_objects_are_read_in_one_call_up_to_the_first_unreadable_one() {
        let a = [1u8; 300];
        let b = [2u8; 300];
        let mut out = [0u8; SCRATCH];
        let addrs = [a.as_ptr() as u64, b.as_ptr() as u64];
        assert_eq!(gather(&addrs, &mut out), 0b11);
        assert!(out[..GATHERED].iter().all(|&x| x == 1) && out[GATHERED..2 * GATHERED].iter().all(|&x| x == 2));
        // An unreadable page in the middle: what comes before it is read, nothing after.
        // SAFETY: a fresh anonymous page that cannot be read, unmapped below; nothing else refers to it.
        let hole = unsafe {
            libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(hole, libc::MAP_FAILED);
        let addrs = [a.as_ptr() as u64, hole as u64, b.as_ptr() as u64];
        assert_eq!(gather(&addrs, &mut out), 0b1);
        // SAFETY: unmapping the page mapped above.
        unsafe { libc::munmap(hole, 4096) };
        assert_eq!(gather(&[], &mut out), 0);
        assert_eq!(gather(&[16], &mut out), 0, "a low address is never read");
    }

    #[test]
    fn a_prefix_read_stops_at_the_last_readable_page() {
        // Two pages, the second made unreadable: a read across the boundary returns the first page's part.
        let len = 8192;
        // SAFETY: a fresh private anonymous mapping of two pages, unmapped below; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as u64;
        // SAFETY: the mapping is ours and 8192 bytes long.
        unsafe { std::ptr::write_bytes(p as *mut u8, 7, len) };
        // SAFETY: its second page.
        unsafe { libc::mprotect((base + 4096) as *mut libc::c_void, 4096, libc::PROT_NONE) };
        let mut buf = [0u8; 256];
        assert_eq!(read_prefix(base + 4096 - 100, &mut buf), 100);
        assert!(buf[..100].iter().all(|&b| b == 7));
        assert_eq!(read_prefix(base + 100, &mut buf), 256, "within the first page: whole");
        assert_eq!(read_prefix(base + 4096, &mut buf), 0, "nothing readable");
        let mut c = Chunks::starting_with(base + 4096 - 100, 1000, &buf[..100]);
        assert_eq!(c.by_ref().take(100).count(), 100);
        assert_eq!(c.next(), None, "the rest lies on the unreadable page");
        assert!(c.failed);
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(p, len) };
    }

    #[test]
    fn headers_close_together_share_a_range_and_the_rest_are_read_apiece() {
        let base = 0x7f00_0000_0000u64;
        // Three within SPAN of each other (unsorted), one far away, one that cannot be read at all.
        let codes = [base + 0x300, base, base + 0x180, base + 0x10_0000, 8];
        let plan = plan_headers(&codes, 144, SCRATCH);
        assert_eq!(plan.count, 1);
        assert_eq!((plan.ranges[0].start, plan.ranges[0].len), (base, 0x300 + 144));
        assert_eq!(&plan.range_of[..3], &[0, 0, 0]);
        assert_eq!(plan.apiece, 1 << 3, "the far one alone; the low address not at all");
        // No room for a range: every header apiece.
        let plan = plan_headers(&codes, 144, 100);
        assert_eq!((plan.count, plan.apiece), (0, 0b1111));
    }

    #[test]
    fn a_gathered_read_fills_what_it_reads_and_says_which() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let at = |off: usize| data.as_ptr() as u64 + off as u64;
        let word = 0x1122_3344_5566_7788u64;
        let words_at = [&word as *const u64 as u64];
        let codes = [at(1000), at(100), at(3000), 16];
        let g = Guess { words: &words_at, top: 0, pages: 0, codes: &codes, header_len: 64 };
        let mut headers = [[0u8; HEADER]; 4];
        let (mut words, mut scratch) = ([0u64; 2], [0u8; SCRATCH]);
        let (n, low, mask) = read_guess(&g, &mut words, &mut [], &mut headers, &mut scratch);
        assert_eq!((n, words[0], low), (1, word, None));
        assert_eq!(mask, 0b0111, "the unreadable address is not claimed");
        for (k, off) in [1000usize, 100, 3000].into_iter().enumerate() {
            assert_eq!(&headers[k][..64], &data[off..off + 64], "header {k}");
        }
    }
}
