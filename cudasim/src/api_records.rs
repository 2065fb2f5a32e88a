//! CUPTI's API activity records and activity attributes (**test double**). Sources: cupti_activity.h of CUDA 12.9
//! Update 1 and 13.5:
//!
//! - `CUPTI_ACTIVITY_KIND_RUNTIME` / `CUPTI_ACTIVITY_KIND_DRIVER`, one `CUpti_ActivityAPI` record per call (cbid,
//!   start, end, processId, threadId, correlationId "identical to the correlation ID in the memcpy, memset, or
//!   kernel activity record that is associated with this function", returnValue).
//! - `cuptiActivityEnableRuntimeApi(cbid, enable)` / `cuptiActivityEnableDriverApi`: "to enable the collection of
//!   a small set of CUDA Runtime APIs, user can call this API without using the activity kind"; the kind "controls
//!   the collection of either all ... APIs or none" and "overrides the settings done by this API if it is called
//!   after the API". The `_v2` forms (13.x) do the same for one subscriber. First in the 12.5 header (API version
//!   23: the cupti_activity.h of PyPI's nvidia-cuda-cupti-cu12 12.4.127 lacks them, 12.5.82's has them); the
//!   simulator refuses them below it. `CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER` is in every 12.x header
//!   (12.1.105's already).
//! - Driver records only for the driver calls a program makes itself: a real H100 Kineto trace with driver
//!   records on (TraceLens's Qwen1.5 inference trace, `kineto-h100-qwen-inference.json.gz` in shared/traces) holds
//!   1,921 runtime records and one driver record (a direct `cuLaunchKernel`), none inside a runtime call, though
//!   every runtime launch calls into the driver (the callback API dispatches those nested driver calls).
//! - threadId: `pthread_self()` by default, the system thread id after
//!   `cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)` ("gettid() on Linux").
//! - `CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER` (uint8_t, default 0): at 0 "CUPTI will initialize the user
//!   buffer ... to zero before filling it ... in the main thread"; non-zero means the client hands zeroed buffers,
//!   else "the activity buffer may contain some uninitialized values". The simulator zeroes the buffer on the
//!   requesting thread at 0, and at 1 checks what it was handed: a buffer that is not zero is said on stderr and
//!   counted (`cudasim_dirty_activity_buffers`), the error a real CUPTI would turn into garbage fields.
//! - The device buffer attributes (`DEVICE_BUFFER_SIZE`, `DEVICE_BUFFER_POOL_LIMIT`,
//!   `DEVICE_BUFFER_PRE_ALLOCATE_VALUE`, size_t each) are accepted and kept; the simulated device has no buffers
//!   of its own, so nothing else changes.
//!
//! No cost is modelled for an API record, none having been measured (gpu-validate's `cost` part measures it).

use crate::c;
use crate::subscribers::MAX_CBID;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

const WORDS: usize = MAX_CBID / 64;

/// Which calls of each domain get a record (driver = 0, runtime = 1), one bit per cbid.
#[derive(Clone, Copy, Default)]
pub(crate) struct ApiSet {
    bits: [[u64; WORDS]; 2],
}

/// The domain index of an API activity kind.
pub(crate) fn domain_of_kind(kind: c::CUpti_ActivityKind) -> Option<usize> {
    match kind {
        c::CUPTI_ACTIVITY_KIND_DRIVER => Some(0),
        c::CUPTI_ACTIVITY_KIND_RUNTIME => Some(1),
        _ => None,
    }
}

impl ApiSet {
    pub(crate) fn set(&mut self, domain: usize, cbid: u32, on: bool) {
        let i = cbid as usize;
        if i >= MAX_CBID {
            return;
        }
        let word = &mut self.bits[domain][i / 64];
        if on {
            *word |= 1 << (i % 64);
        } else {
            *word &= !(1 << (i % 64));
        }
    }

    /// The kind enabled or disabled as a whole.
    pub(crate) fn set_all(&mut self, domain: usize, on: bool) {
        self.bits[domain] = [if on { u64::MAX } else { 0 }; WORDS];
    }

    pub(crate) fn wants(&self, domain: usize, cbid: u32) -> bool {
        let i = cbid as usize;
        i < MAX_CBID && self.bits[domain][i / 64] & (1 << (i % 64)) != 0
    }

    pub(crate) fn any(&self) -> bool {
        self.bits.iter().flatten().any(|&w| w != 0)
    }
}

/// The legacy (global) registration's set.
static LEGACY: parking_lot::Mutex<ApiSet> = parking_lot::Mutex::new(ApiSet { bits: [[0; WORDS]; 2] });
/// Some client wants some API record: the one test every API call makes.
static ANY_LEGACY: AtomicBool = AtomicBool::new(false);
static ANY_CONSUMER: AtomicBool = AtomicBool::new(false);

pub(crate) fn set_legacy(domain: usize, cbid: Option<u32>, on: bool) {
    let mut set = LEGACY.lock();
    match cbid {
        Some(cbid) => set.set(domain, cbid, on),
        None => set.set_all(domain, on),
    }
    ANY_LEGACY.store(set.any(), Ordering::Relaxed);
}

pub(crate) fn legacy_wants(domain: usize, cbid: u32) -> bool {
    ANY_LEGACY.load(Ordering::Relaxed) && LEGACY.lock().wants(domain, cbid)
}

/// Whether some per-subscriber consumer wants API records (kept by `activity.rs`, which holds their sets).
pub(crate) fn set_any_consumer(any: bool) {
    ANY_CONSUMER.store(any, Ordering::Relaxed);
}

/// Whether some per-subscriber consumer wants some API record.
pub(crate) fn any_consumer() -> bool {
    ANY_CONSUMER.load(Ordering::Relaxed)
}

/// cuptiFinalize: no client wants anything.
pub(crate) fn clear() {
    set_legacy(0, None, false);
    set_legacy(1, None, false);
}

/// Whether a call of `domain` (callback domain) should be looked at for a record at all.
pub(crate) fn maybe_wanted() -> bool {
    ANY_LEGACY.load(Ordering::Relaxed) || ANY_CONSUMER.load(Ordering::Relaxed)
}

static THREAD_ID_TYPE: AtomicU32 = AtomicU32::new(c::CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT);

pub(crate) fn set_thread_id_type(kind: c::CUpti_ActivityThreadIdType) -> c::CUptiResult {
    if kind != c::CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT && kind != c::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM {
        return c::CUPTI_ERROR_INVALID_PARAMETER;
    }
    THREAD_ID_TYPE.store(kind, Ordering::Relaxed);
    c::CUPTI_SUCCESS
}

/// The calling thread as the records name it.
pub(crate) fn thread_id() -> u32 {
    if THREAD_ID_TYPE.load(Ordering::Relaxed) == c::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM {
        // SAFETY: SYS_gettid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    } else {
        // SAFETY: pthread_self cannot fail. The record's field is 32 bits wide: CUPTI keeps the low ones.
        unsafe { libc::pthread_self() as u32 }
    }
}

/// `CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER`.
static CLIENT_ZEROES: AtomicU8 = AtomicU8::new(0);
static DIRTY: AtomicU64 = AtomicU64::new(0);
/// The device buffer attributes, by attribute number (0..=13), as set.
static SIZES: [AtomicU64; 14] = [const { AtomicU64::new(0) }; 14];

/// `cuptiActivitySetAttribute` (and `_v2`, kept the same: the simulator has one device buffer pool).
///
/// # Safety
/// `size` and `value` are null or valid for `*size` bytes.
pub(crate) unsafe fn set_attribute(
    attr: c::CUpti_ActivityAttribute,
    size: *mut usize,
    value: *mut u8,
) -> c::CUptiResult {
    if size.is_null() || value.is_null() {
        return c::CUPTI_ERROR_INVALID_PARAMETER;
    }
    // SAFETY: non-null, valid per the caller.
    let size = unsafe { *size };
    match attr {
        c::CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER => {
            if size < 1 {
                return c::CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
            }
            // SAFETY: at least one byte, per the caller.
            CLIENT_ZEROES.store(unsafe { *value }, Ordering::Relaxed);
            c::CUPTI_SUCCESS
        }
        c::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE
        | c::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT
        | c::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE => {
            if size < std::mem::size_of::<usize>() {
                return c::CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
            }
            // SAFETY: a size_t's bytes, per the caller; unaligned reads are fine.
            let v = unsafe { (value as *const usize).read_unaligned() };
            SIZES[attr as usize].store(v as u64, Ordering::Relaxed);
            c::CUPTI_SUCCESS
        }
        // Attributes the simulator does not model: accepted when known to the header, as CUPTI does.
        a if (a as usize) < SIZES.len() => c::CUPTI_SUCCESS,
        _ => c::CUPTI_ERROR_INVALID_PARAMETER,
    }
}

/// A buffer the client just handed over, before records are written into it: zeroed here at the default (on the
/// requesting thread, as CUPTI does), checked when the client promised zeroed buffers.
///
/// # Safety
/// `buf` is valid for `cap` bytes.
pub(crate) unsafe fn received_buffer(buf: *mut u8, cap: usize) {
    if CLIENT_ZEROES.load(Ordering::Relaxed) == 0 {
        // SAFETY: per the caller.
        unsafe { std::ptr::write_bytes(buf, 0, cap) };
        return;
    }
    // SAFETY: per the caller.
    let bytes = unsafe { std::slice::from_raw_parts(buf, cap) };
    if bytes.iter().any(|&b| b != 0) && DIRTY.fetch_add(1, Ordering::Relaxed) == 0 {
        eprintln!(
            "cudasim: the client set CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER and handed a buffer that is not \
             zero: the real CUPTI would leave uninitialised values in its records"
        );
    }
}

/// API records written for any client since the process began.
static WRITTEN: AtomicU64 = AtomicU64::new(0);

pub(crate) fn written() {
    WRITTEN.fetch_add(1, Ordering::Relaxed);
}

/// Test-only (not a CUDA function): how many API records were written (for whichever client wanted them).
#[no_mangle]
pub extern "C" fn cudasim_api_records_written() -> u64 {
    WRITTEN.load(Ordering::Relaxed)
}

/// Test-only (not a CUDA function): whether the client promised zeroed buffers (the attribute's value).
#[no_mangle]
pub extern "C" fn cudasim_client_zeroes_buffers() -> u64 {
    u64::from(CLIENT_ZEROES.load(Ordering::Relaxed))
}

/// Test-only (not a CUDA function): buffers handed over dirty although the client promised zeroed ones.
#[no_mangle]
pub extern "C" fn cudasim_dirty_activity_buffers() -> u64 {
    DIRTY.load(Ordering::Relaxed)
}
