//! CUPTI's activity buffers. CUPTI asks for a buffer whenever it needs one: from its worker thread, and on CUDA 13 from every
//! thread that issues CUDA work (`CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER` defaults to 1 in the 13.x
//! header, 0 in 12.9), so a process with many CUDA threads holds many buffers at once. We keep CUPTI's default
//! (per-thread buffers spare CUPTI a global lock on the launch path) and size for it: a pool of
//! `CUFLIGHT_CUPTI_BUFFERS` (default 16) buffers of 256 KiB is allocated at start and grows on demand up to a hard
//! cap of 1024 buffers (256 MiB, reached only by processes with hundreds of launching threads: 200 threads hold
//! over 256 buffers at once); completed buffers go back to the pool, never to the allocator. At the cap the
//! answer depends on the release: from CUPTI API version 27 (CUDA 12.9) a NULL buffer makes CUPTI drop and count
//! the records; below 27 a NULL buffer crashes libcupti (Kineto issue 1275, fixed in Kineto PR 1534 only for
//! version 27 and later), so there we allocate beyond the cap rather than ever return NULL. Both are counted.
//!
//! Every buffer handed to CUPTI is zero, and the agent tells CUPTI so (`CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_
//! BUFFER`, set by [`crate::setup`]): by default CUPTI zeroes each buffer it is given "in the main thread", where
//! "a few stalls may appear in critical path" (cupti_activity.h): on CUDA 13 that is the program's launching
//! thread, 256 KiB at a time. New buffers come zeroed from the allocator; a completed one is zeroed on the thread
//! that delivered it (CUPTI's worker or a flush), before it goes back to the pool.

use crate::{cupti, state};
use crossbeam_queue::ArrayQueue;
use cupti_sys::cuda13 as c;
use once_cell::sync::OnceCell;
use std::sync::atomic::{AtomicUsize, Ordering};

const BUFFER_SIZE: usize = 256 << 10;
/// Buffers allocated at start unless `CUFLIGHT_CUPTI_BUFFERS` says otherwise.
pub const DEFAULT_POOL: usize = 16;
/// Most buffers the agent ever holds (256 MiB): beyond it, CUPTI >= 27 gets NULL and counts its drops.
pub const MAX_BUFFERS: usize = 1024;
/// First CUPTI API version that accepts a NULL buffer (CUDA 12.9; cupti_version.h).
const NULL_BUFFER_OK_FROM: u32 = 27;

static POOL: OnceCell<ArrayQueue<usize>> = OnceCell::new();
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
/// The cap in force: [`MAX_BUFFERS`], or lower with `CUFLIGHT_CUPTI_BUFFERS_MAX` (to bound the agent's memory).
static CAP: AtomicUsize = AtomicUsize::new(MAX_BUFFERS);

fn buffer_layout() -> std::alloc::Layout {
    // 8-byte alignment is what CUPTI requires of activity buffers (cupti_activity.h, BuffersCallbackRequestFunc).
    std::alloc::Layout::from_size_align(BUFFER_SIZE, 8).unwrap_or(std::alloc::Layout::new::<u64>())
}

fn allocate() -> usize {
    // SAFETY: non-zero size; buffers live for the process (recycled through the pool, never freed).
    let p = unsafe { std::alloc::alloc_zeroed(buffer_layout()) } as usize;
    if p != 0 {
        ALLOCATED.fetch_add(1, Ordering::Relaxed);
    }
    p
}

/// Allocates the buffer pool (`CUFLIGHT_CUPTI_BUFFERS`, default [`DEFAULT_POOL`] buffers of 256 KiB).
pub fn init_pool() {
    POOL.get_or_init(|| {
        let n = std::env::var("CUFLIGHT_CUPTI_BUFFERS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_POOL)
            .clamp(1, MAX_BUFFERS);
        let cap = std::env::var("CUFLIGHT_CUPTI_BUFFERS_MAX").ok().and_then(|v| v.trim().parse().ok());
        CAP.store(cap.unwrap_or(MAX_BUFFERS).clamp(n, MAX_BUFFERS), Ordering::Relaxed);
        // Room for every buffer up to the cap, so completed ones always find their way back.
        let q = ArrayQueue::new(MAX_BUFFERS);
        for _ in 0..n {
            let p = allocate();
            if p != 0 {
                let _ = q.push(p);
            }
        }
        q
    });
}

/// A buffer for CUPTI: from the pool, else a new one up to the cap; 0 only when CUPTI accepts NULL.
fn take_buffer(version: u32) -> usize {
    if let Some(p) = POOL.get().and_then(|q| q.pop()) {
        return p;
    }
    let header = state::segment().map(|s| s.header());
    let at_cap = ALLOCATED.load(Ordering::Relaxed) >= CAP.load(Ordering::Relaxed);
    if at_cap && version >= NULL_BUFFER_OK_FROM {
        if let Some(h) = header {
            h.buffers_refused.fetch_add(1, Ordering::Relaxed);
        }
        return 0;
    }
    let p = allocate();
    if p != 0 {
        if let Some(h) = header {
            h.buffers_grown.fetch_add(1, Ordering::Relaxed);
        }
    }
    p
}

/// # Safety
/// Called by CUPTI with valid out-pointers.
pub unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let _ = std::panic::catch_unwind(|| {
        let version = cupti::loaded().map_or(0, |l| l.version);
        let p = take_buffer(version);
        // CUPTI's out-pointers. p == 0 only where CUPTI's version accepts it (drops and counts records).
        // SAFETY: CUPTI's valid out-pointer.
        unsafe { *buffer = p as *mut u8 };
        // SAFETY: as above.
        unsafe { *size = if p == 0 { 0 } else { BUFFER_SIZE } };
        // SAFETY: as above.
        unsafe { *max_records = 0 };
    });
}

/// The same for one subscriber in multi-subscriber mode (`CUpti_BuffersCallbackRequestFunc_v2`).
///
/// # Safety
/// Called by CUPTI with valid out-pointers.
pub unsafe extern "C" fn buffer_requested_v2(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
    _info: *mut c::CUpti_BufferCallbackRequestInfo,
) {
    // SAFETY: forwarded from CUPTI.
    unsafe { buffer_requested(buffer, size, max_records) }
}

/// Returns a buffer CUPTI completed to the pool (never to the allocator), zeroed for its next use.
pub fn give_back(buffer: *mut u8) {
    if !buffer.is_null() {
        // SAFETY: every buffer CUPTI completes is one of ours, BUFFER_SIZE bytes, no longer used by CUPTI.
        unsafe { std::ptr::write_bytes(buffer, 0, BUFFER_SIZE) };
        if let Some(q) = POOL.get() {
            let _ = q.push(buffer as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_is_never_handed_to_a_cupti_that_crashes_on_it() {
        init_pool();
        let q = POOL.get().unwrap();
        let mut held = Vec::new();
        while let Some(p) = q.pop() {
            held.push(p);
        }
        while ALLOCATED.load(Ordering::Relaxed) < MAX_BUFFERS {
            held.push(take_buffer(28));
        }
        assert_eq!(take_buffer(28), 0, "CUPTI 12.9u1 (API 28) drops and counts records at the cap");
        let beyond = take_buffer(26);
        assert_ne!(beyond, 0, "CUPTI 12.8 (API 26) crashes on NULL: allocate beyond the cap");
        held.push(beyond);
        for p in held {
            let _ = q.push(p);
        }
    }
}
