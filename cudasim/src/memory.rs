//! Simulated memory: device, managed and pinned host allocations are host memory, tracked by address range so
//! copies can report pinned vs pageable and device vs host, as CUPTI does.

use crate::c;
use parking_lot::Mutex;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    Device,
    Managed,
    Pinned,
}

impl Space {
    /// CUPTI memory kind of this space.
    pub(crate) fn cupti_kind(self) -> u32 {
        match self {
            Space::Device => c::CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
            Space::Managed => c::CUPTI_ACTIVITY_MEMORY_KIND_MANAGED,
            Space::Pinned => c::CUPTI_ACTIVITY_MEMORY_KIND_PINNED,
        }
    }
}

struct Allocation {
    len: usize,
    space: Space,
    device: u32,
    /// Host memory the application owns, page-locked by cudaHostRegister: never freed here.
    registered: bool,
}

static ALLOCATIONS: Mutex<BTreeMap<usize, Allocation>> = Mutex::new(BTreeMap::new());

/// Allocates `len` bytes (256-byte aligned, as cudaMalloc guarantees) in `space`.
pub(crate) fn alloc(len: usize, space: Space, device: u32) -> Option<*mut u8> {
    crate::hw_trace::context_made();
    if space == Space::Pinned {
        crate::timing::pin_pages(len);
    }
    let mut p: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: posix_memalign writes a fresh allocation into `p` or returns an error.
    if unsafe { libc::posix_memalign(&mut p, 256, len.max(1)) } != 0 {
        return None;
    }
    ALLOCATIONS.lock().insert(p as usize, Allocation { len, space, device, registered: false });
    Some(p as *mut u8)
}

/// cudaHostRegister: the application's own range counts as pinned host memory from now on.
pub(crate) fn register(p: usize, len: usize, device: u32) -> bool {
    let mut map = ALLOCATIONS.lock();
    if p == 0 || len == 0 || map.contains_key(&p) {
        return false;
    }
    map.insert(p, Allocation { len, space: Space::Pinned, device, registered: true });
    true
}

/// cudaHostUnregister: forgets a registered range (the memory stays the application's).
pub(crate) fn unregister(p: usize) -> bool {
    let mut map = ALLOCATIONS.lock();
    if !map.get(&p).is_some_and(|a| a.registered) {
        return false;
    }
    map.remove(&p).is_some()
}

/// Frees an allocation made by [`alloc`] in one of `spaces`; returns its size, or None if `p` is not one.
pub(crate) fn free(p: *mut u8, spaces: &[Space]) -> Option<(usize, Space)> {
    let mut map = ALLOCATIONS.lock();
    let a = map.get(&(p as usize))?;
    if !spaces.contains(&a.space) || a.registered {
        return None;
    }
    let a = map.remove(&(p as usize))?;
    // SAFETY: `p` came from posix_memalign in `alloc` and is removed from the registry, so freed once.
    unsafe { libc::free(p as *mut libc::c_void) };
    Some((a.len, a.space))
}

/// The space and device `p` points into, if it lies inside a tracked allocation.
pub(crate) fn lookup(p: usize) -> Option<(Space, u32)> {
    let map = ALLOCATIONS.lock();
    let (&base, a) = map.range(..=p).next_back()?;
    (p < base + a.len.max(1)).then_some((a.space, a.device))
}

/// CUPTI memory kind of the memory at `p`: untracked host memory is pageable.
pub(crate) fn cupti_kind_of(p: usize) -> u8 {
    lookup(p).map_or(c::CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE, |(s, _)| s.cupti_kind()) as u8
}

/// CUPTI memcpy kind from the two sides' memory kinds.
pub(crate) fn copy_kind(src: u8, dst: u8) -> u8 {
    let dev =
        |k: u8| k as u32 == c::CUPTI_ACTIVITY_MEMORY_KIND_DEVICE || k as u32 == c::CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
    (match (dev(src), dev(dst)) {
        (false, true) => c::CUPTI_ACTIVITY_MEMCPY_KIND_HTOD,
        (true, false) => c::CUPTI_ACTIVITY_MEMCPY_KIND_DTOH,
        (true, true) => c::CUPTI_ACTIVITY_MEMCPY_KIND_DTOD,
        (false, false) => c::CUPTI_ACTIVITY_MEMCPY_KIND_HTOH,
    }) as u8
}

/// Host-device copies take as long as they would over PCIe 4.0 x16 (the test double models the link, so that
/// pinned and pageable copies differ in time as on real hardware): 24 GB/s from or to pinned memory, 8 GB/s
/// through pageable memory (the driver stages it). Device-to-device and host-to-host copies are not paced.
pub(crate) fn pace_like_pcie(start_ns: u64, bytes: usize, src: u8, dst: u8) {
    let pageable = c::CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE as u8;
    let bytes_per_us = match copy_kind(src, dst) as u32 {
        c::CUPTI_ACTIVITY_MEMCPY_KIND_HTOD | c::CUPTI_ACTIVITY_MEMCPY_KIND_DTOH
            if src == pageable || dst == pageable =>
        {
            8_000
        }
        c::CUPTI_ACTIVITY_MEMCPY_KIND_HTOD | c::CUPTI_ACTIVITY_MEMCPY_KIND_DTOH => 24_000,
        _ => return,
    };
    let target = start_ns + (bytes as u64 * 1000).div_ceil(bytes_per_us);
    let now = crate::now_ns();
    if target > now {
        std::thread::sleep(std::time::Duration::from_nanos(target - now));
    }
}

/// Size of the allocation starting exactly at `p`.
pub(crate) fn size_of(p: usize) -> Option<usize> {
    ALLOCATIONS.lock().get(&p).map(|a| a.len)
}
