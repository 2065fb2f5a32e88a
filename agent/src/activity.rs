//! CUPTI activity buffers and record decoding.
//!
//! Buffers come from a pool allocated once at start; when the pool is empty CUPTI is given no buffer and counts
//! the records it drops (reported through `cuptiActivityGetNumDroppedRecords`). Records are decoded by layout:
//! the layout family comes from `cuptiGetVersion` and, inside a family, a record's size (the distance to the
//! next record) identifies its version, because every version of a record has a distinct size. A record whose
//! size matches no known version of its kind is skipped and counted, never misread.
//!
//! CUPTI hands over thousands of records at once, on its own thread (or the flushing one). That is the one place
//! where the agent waits: when the thread's ring is nearly full it gives the collector up to 200 ms per buffer to
//! drain, instead of dropping a burst that the collector would have absorbed. API threads never wait.

use crate::{cupti, emit, state};
use crossbeam_queue::ArrayQueue;
use cuflight_format::event::{LaunchConfig, FLAG_ASYNC};
use cuflight_format::{EventKind, RawEvent};
use cupti_sys::cuda12 as c12;
use cupti_sys::cuda13 as c;
use cupti_sys::CuptiFamily;
use once_cell::sync::OnceCell;
use std::ffi::CStr;
use std::mem::size_of;
use std::sync::atomic::Ordering;

const BUFFER_SIZE: usize = 512 << 10;
static POOL: OnceCell<ArrayQueue<usize>> = OnceCell::new();

/// Allocates the buffer pool (`CUFLIGHT_CUPTI_BUFFERS`, default 32 buffers of 512 KiB).
pub fn init_pool() {
    POOL.get_or_init(|| {
        let n = std::env::var("CUFLIGHT_CUPTI_BUFFERS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(8usize)
            .clamp(2, 1024);
        let q = ArrayQueue::new(n);
        let Ok(layout) = std::alloc::Layout::from_size_align(BUFFER_SIZE, 8) else { return q };
        for _ in 0..n {
            // SAFETY: non-zero size; the buffer lives for the process (returned to the pool, never freed).
            let p = unsafe { std::alloc::alloc(layout) };
            if !p.is_null() {
                let _ = q.push(p as usize);
            }
        }
        q
    });
}

/// # Safety
/// Called by CUPTI with valid out-pointers.
pub unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let _ = std::panic::catch_unwind(|| {
        let p = POOL.get().and_then(|q| q.pop()).unwrap_or(0);
        // SAFETY: CUPTI's out-pointers; a null buffer tells CUPTI to drop (and count) records.
        unsafe {
            *buffer = p as *mut u8;
            *size = if p == 0 { 0 } else { BUFFER_SIZE };
            *max_records = 0;
        }
    });
}

/// # Safety
/// Called by CUPTI with a buffer from `buffer_requested` holding `valid` bytes of records.
pub unsafe extern "C" fn buffer_completed(ctx: c::CUcontext, stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    let _ = std::panic::catch_unwind(|| {
        if let Some(l) = cupti::loaded() {
            drain(l, buffer, valid);
            let mut dropped = 0usize;
            // SAFETY: plain CUPTI query with a valid out-pointer.
            if unsafe { (l.api.activity_get_num_dropped_records)(ctx, stream, &mut dropped) } == c::CUPTI_SUCCESS
                && dropped > 0
            {
                if let Some(seg) = state::segment() {
                    seg.header().cupti_dropped.fetch_add(dropped as u64, Ordering::Relaxed);
                }
            }
        }
        if !buffer.is_null() {
            if let Some(q) = POOL.get() {
                let _ = q.push(buffer as usize);
            }
        }
    });
}

fn drain(l: &cupti::Loaded, buffer: *mut u8, valid: usize) {
    if buffer.is_null() {
        return;
    }
    let mut cursor: *mut c::CUpti_Activity = std::ptr::null_mut();
    let mut prev: Option<usize> = None;
    let mut skipped = 0u64;
    let end = buffer as usize + valid;
    let mut waited = 0;
    let mut n = 0u32;
    loop {
        n = n.wrapping_add(1);
        if n.is_multiple_of(256) {
            waited = make_room(waited);
        }
        // SAFETY: CUPTI walks its own buffer; `cursor` is null or the record it returned last.
        let r = unsafe { (l.api.activity_get_next_record)(buffer, valid, &mut cursor) };
        if r != c::CUPTI_SUCCESS {
            break;
        }
        if let Some(p) = prev {
            skipped += handle(l.family, p, cursor as usize - p) as u64;
        }
        prev = Some(cursor as usize);
    }
    if let Some(p) = prev {
        skipped += handle(l.family, p, end.saturating_sub(p)) as u64;
    }
    if skipped > 0 {
        if let Some(seg) = state::segment() {
            seg.header().records_skipped.fetch_add(skipped, Ordering::Relaxed);
        }
    }
}

const WAIT_STEP: std::time::Duration = std::time::Duration::from_millis(1);
const MAX_WAIT_STEPS: u32 = 200;

/// Backpressure for bursts: while this thread's ring has fewer than 1024 free slots, sleep in 1 ms steps (at most
/// 200 per buffer) so the collector can drain it. Returns the steps used so far.
fn make_room(mut waited: u32) -> u32 {
    while waited < MAX_WAIT_STEPS && emit::ring_space().is_some_and(|free| free < 1024) {
        std::thread::sleep(WAIT_STEP);
        waited += 1;
    }
    waited
}

/// Decodes and emits one record; returns true if it had to be skipped.
fn handle(family: CuptiFamily, at: usize, size: usize) -> bool {
    // SAFETY: `at` points at a record inside the buffer CUPTI handed us, `size` bytes long.
    let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, size) };
    match decode(family, bytes) {
        Decoded::Event(ev) => {
            emit::push(ev);
            false
        }
        Decoded::Ignored => false,
        Decoded::Skipped => true,
    }
}

/// What a record became.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    Event(RawEvent),
    /// A kind we did not ask for (harmless).
    Ignored,
    /// Unexpected size for its kind: not read.
    Skipped,
}

/// Reads a `T` from the start of `bytes` if `bytes` is exactly one `T` (8-byte rounded).
fn exact<T: Copy>(bytes: &[u8]) -> Option<T> {
    (bytes.len() == size_of::<T>().next_multiple_of(8)).then(|| {
        // SAFETY: the slice holds at least size_of::<T>() bytes; T is a plain C struct; unaligned read is fine.
        unsafe { (bytes.as_ptr() as *const T).read_unaligned() }
    })
}

macro_rules! kernel {
    ($r:expr) => {{
        let r = $r;
        let mut ev = RawEvent::new(EventKind::Kernel, 0, r.start, r.end);
        ev.device = r.deviceId;
        ev.stream = r.streamId;
        ev.correlation = r.correlationId;
        ev.name = if r.name.is_null() {
            0
        } else {
            // SAFETY: CUPTI's kernel name is a NUL-terminated string valid while the buffer is processed.
            state::intern(unsafe { CStr::from_ptr(r.name) }.to_bytes())
        };
        let cfg = LaunchConfig {
            grid: [r.gridX as u32, r.gridY as u32, r.gridZ as u32],
            block: [r.blockX as u32, r.blockY as u32, r.blockZ as u32],
            registers: r.registersPerThread,
            static_shared: r.staticSharedMemory as u32,
            dynamic_shared: r.dynamicSharedMemory as u32,
        };
        (ev.a, ev.b, ev.c) = cfg.pack();
        ev
    }};
}

macro_rules! memcpy {
    ($r:expr) => {{
        let r = $r;
        let mut ev = RawEvent::new(EventKind::Memcpy, 0, r.start, r.end);
        ev.sub = r.copyKind;
        ev.device = r.deviceId;
        ev.stream = r.streamId;
        ev.correlation = r.correlationId;
        ev.a = r.bytes;
        ev.b = r.srcKind as u64 | (r.dstKind as u64) << 8;
        ev.flags = if r.flags & 1 != 0 { FLAG_ASYNC } else { 0 };
        ev
    }};
}

macro_rules! memset {
    ($r:expr) => {{
        let r = $r;
        let mut ev = RawEvent::new(EventKind::Memset, 0, r.start, r.end);
        ev.sub = r.memoryKind as u8;
        ev.device = r.deviceId;
        ev.stream = r.streamId;
        ev.correlation = r.correlationId;
        ev.a = r.bytes;
        ev.b = r.value as u64;
        ev.flags = if r.flags & 1 != 0 { FLAG_ASYNC } else { 0 };
        ev
    }};
}

/// Decodes one activity record of the given layout family.
pub fn decode(family: CuptiFamily, bytes: &[u8]) -> Decoded {
    let Some(&[k0, k1, k2, k3]) = bytes.get(..4) else {
        return Decoded::Skipped;
    };
    let kind = u32::from_le_bytes([k0, k1, k2, k3]);
    use CuptiFamily::*;
    let ev = match (kind, family) {
        // Earlier 12.x releases may write the previous layouts; sizes tell them apart.
        (c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | c::CUPTI_ACTIVITY_KIND_KERNEL, Cuda12) => {
            exact::<c12::CUpti_ActivityKernel9>(bytes)
                .map(|r| kernel!(r))
                .or_else(|| exact::<c12::CUpti_ActivityKernel8>(bytes).map(|r| kernel!(r)))
        }
        (c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | c::CUPTI_ACTIVITY_KIND_KERNEL, Cuda13) => {
            exact::<c::CUpti_ActivityKernel13>(bytes)
                .map(|r| kernel!(r))
                .or_else(|| exact::<c::CUpti_ActivityKernel12>(bytes).map(|r| kernel!(r)))
                .or_else(|| exact::<c::CUpti_ActivityKernel11>(bytes).map(|r| kernel!(r)))
                .or_else(|| exact::<c::CUpti_ActivityKernel10>(bytes).map(|r| kernel!(r)))
        }
        (c::CUPTI_ACTIVITY_KIND_MEMCPY, Cuda12) => exact::<c12::CUpti_ActivityMemcpy6>(bytes)
            .map(|r| memcpy!(r))
            .or_else(|| exact::<c12::CUpti_ActivityMemcpy5>(bytes).map(|r| memcpy!(r))),
        (c::CUPTI_ACTIVITY_KIND_MEMCPY, Cuda13) => exact::<c::CUpti_ActivityMemcpy7>(bytes)
            .map(|r| memcpy!(r))
            .or_else(|| exact::<c::CUpti_ActivityMemcpy6>(bytes).map(|r| memcpy!(r))),
        (c::CUPTI_ACTIVITY_KIND_MEMSET, Cuda12) => exact::<c12::CUpti_ActivityMemset4>(bytes).map(|r| memset!(r)),
        (c::CUPTI_ACTIVITY_KIND_MEMSET, Cuda13) => exact::<c::CUpti_ActivityMemset5>(bytes)
            .map(|r| memset!(r))
            .or_else(|| exact::<c::CUpti_ActivityMemset4>(bytes).map(|r| memset!(r))),
        (c::CUPTI_ACTIVITY_KIND_MEMORY2, _) => exact::<c::CUpti_ActivityMemory4>(bytes).map(|r| {
            let mut ev = RawEvent::new(EventKind::MemoryActivity, 0, r.timestamp, r.timestamp);
            ev.sub = r.memoryOperationType as u8;
            ev.device = r.deviceId;
            ev.stream = r.streamId;
            ev.correlation = r.correlationId;
            ev.a = r.address;
            ev.b = r.bytes;
            ev.c = r.memoryKind as u64;
            ev
        }),
        (c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, _) => exact::<c::CUpti_ActivitySynchronization2>(bytes).map(|r| {
            let mut ev = RawEvent::new(EventKind::Sync, 0, r.start, r.end);
            ev.sub = r.type_ as u8;
            ev.stream = r.streamId;
            ev.correlation = r.correlationId;
            ev.a = r.cudaEventId as u64;
            ev
        }),
        (c::CUPTI_ACTIVITY_KIND_OVERHEAD, _) => exact::<c::CUpti_ActivityOverhead3>(bytes).map(|r| {
            let mut ev = RawEvent::new(EventKind::Overhead, 0, r.start, r.end);
            ev.sub = r.overheadKind as u8;
            ev
        }),
        _ => return Decoded::Ignored,
    };
    ev.map_or(Decoded::Skipped, Decoded::Event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T>(r: &T) -> Vec<u8> {
        let mut v = vec![0u8; size_of::<T>().next_multiple_of(8)];
        // SAFETY: copying a plain C struct into a large enough byte buffer.
        unsafe { std::ptr::copy_nonoverlapping(r as *const T as *const u8, v.as_mut_ptr(), size_of::<T>()) };
        v
    }

    #[test]
    fn cuda12_memcpy_decodes_and_wrong_sizes_are_skipped() {
        // SAFETY: zeroed plain C struct.
        let mut r: c12::CUpti_ActivityMemcpy6 = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_MEMCPY;
        r.copyKind = 1;
        r.srcKind = 1;
        r.dstKind = 3;
        r.bytes = 4096;
        r.start = 10;
        r.end = 30;
        r.streamId = 7;
        r.correlationId = 99;
        let b = bytes_of(&r);
        let Decoded::Event(ev) = decode(CuptiFamily::Cuda12, &b) else { panic!("not decoded") };
        assert_eq!((ev.a, ev.sub, ev.b, ev.stream, ev.correlation, ev.duration()), (4096, 1, 1 | 3 << 8, 7, 99, 20));
        // A 13.x-sized record in a 12.x buffer, or a truncated one, is never misread.
        assert_eq!(decode(CuptiFamily::Cuda12, &b[..b.len() - 4]), Decoded::Skipped);
        let mut longer = b.clone();
        longer.extend_from_slice(&[0; 16]);
        assert_eq!(decode(CuptiFamily::Cuda12, &longer), Decoded::Skipped);
        // The same bytes are a valid (older) layout in 13.x.
        assert!(matches!(decode(CuptiFamily::Cuda13, &b), Decoded::Event(_)));
    }

    #[test]
    fn cuda13_kernel_decodes_launch_config() {
        // SAFETY: zeroed plain C struct.
        let mut r: c::CUpti_ActivityKernel13 = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        r.start = 100;
        r.end = 250;
        (r.gridX, r.gridY, r.gridZ) = (128, 2, 1);
        (r.blockX, r.blockY, r.blockZ) = (256, 1, 1);
        r.registersPerThread = 40;
        r.dynamicSharedMemory = 1024;
        let Decoded::Event(ev) = decode(CuptiFamily::Cuda13, &bytes_of(&r)) else { panic!("not decoded") };
        let cfg = LaunchConfig::unpack(ev.a, ev.b, ev.c);
        assert_eq!((cfg.grid, cfg.block, cfg.registers, cfg.dynamic_shared), ([128, 2, 1], [256, 1, 1], 40, 1024));
        assert_eq!(decode(CuptiFamily::Cuda12, &bytes_of(&r)), Decoded::Skipped);
    }

    #[test]
    fn older_12x_layouts_are_recognised_by_size() {
        // SAFETY: zeroed plain C structs.
        let (mut k, mut m): (c12::CUpti_ActivityKernel8, c12::CUpti_ActivityMemcpy5) = unsafe { std::mem::zeroed() };
        k.kind = c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        (k.start, k.end, k.gridX) = (1, 5, 3);
        m.kind = c::CUPTI_ACTIVITY_KIND_MEMCPY;
        m.bytes = 77;
        let Decoded::Event(ke) = decode(CuptiFamily::Cuda12, &bytes_of(&k)) else { panic!("Kernel8") };
        assert_eq!((ke.duration(), LaunchConfig::unpack(ke.a, ke.b, ke.c).grid[0]), (4, 3));
        let Decoded::Event(me) = decode(CuptiFamily::Cuda12, &bytes_of(&m)) else { panic!("Memcpy5") };
        assert_eq!(me.a, 77);
    }

    #[test]
    fn unknown_kinds_are_ignored_and_garbage_is_skipped() {
        assert_eq!(decode(CuptiFamily::Cuda13, &[5, 0, 0, 0, 0, 0, 0, 0]), Decoded::Ignored);
        assert_eq!(decode(CuptiFamily::Cuda13, &[1, 0]), Decoded::Skipped);
    }
}
