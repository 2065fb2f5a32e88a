//! C strings the agent interns again and again, remembered by address: a kernel's name (CUPTI shares one string
//! among all the records of a kernel: cupti_activity.h, `CUpti_ActivityKernel*::name`, "shared across all
//! activity records representing the same kernel") and NVTX messages (string literals, mostly). Interning costs a
//! strlen, a hash of the whole string (kernel names are often 100-300 mangled bytes) and a probe; a remembered
//! address costs a strnlen and a memcmp against the interned copy. That check is always made, so a reused
//! address (a buffer rewritten, a module unloaded and another loaded) or a slot torn by two threads writing it
//! at once only costs a miss, never a wrong name. `benches/agent-instructions` counts what it saves.

use crate::call_roles::MAX_CBID;
use crate::state;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

const SLOTS: usize = 256;

/// Interned call names per domain (0 = driver, 1 = runtime) and cbid; 0 = not yet interned. One cache for the
/// callbacks (which name a call as CUPTI hands it) and the API records (named from the binding tables).
static CALL_NAMES: [[AtomicU32; MAX_CBID]; 2] = [const { [const { AtomicU32::new(0) }; MAX_CBID] }; 2];

/// The interned name of call `cbid`, `name` giving it the first time (0 where there is none).
pub fn call_name<'a>(runtime: bool, cbid: u32, name: impl FnOnce() -> Option<&'a [u8]>) -> u32 {
    forget_stale_call_names();
    let Some(slot) = CALL_NAMES[runtime as usize].get(cbid as usize) else {
        return 0;
    };
    let id = slot.load(Ordering::Relaxed);
    if id != 0 {
        return id;
    }
    let Some(name) = name() else { return 0 };
    let id = state::intern(name);
    slot.store(id, Ordering::Relaxed);
    id
}

/// The strings epoch ([`state::strings_epoch`]) the ids in [`CALL_NAMES`] belong to: once the string region starts
/// over (a new window, while no callback runs), they are forgotten.
static CALL_NAMES_EPOCH: AtomicU64 = AtomicU64::new(0);

fn forget_stale_call_names() {
    let epoch = state::strings_epoch();
    if CALL_NAMES_EPOCH.load(Ordering::Acquire) != epoch {
        for slot in CALL_NAMES.iter().flatten() {
            slot.store(0, Ordering::Relaxed);
        }
        CALL_NAMES_EPOCH.store(epoch, Ordering::Release);
    }
}

/// Address -> string id, direct-mapped, shared by every thread (written only on a miss).
static CACHE: [(AtomicUsize, AtomicU32); SLOTS] = [const { (AtomicUsize::new(0), AtomicU32::new(0)) }; SLOTS];

/// The interned id of the NUL-terminated string at `s` (0 for NULL, or when the string region is full).
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that stays valid and unchanged during the call.
pub unsafe fn id(s: *const c_char) -> u32 {
    if s.is_null() {
        return 0;
    }
    let p = s as usize;
    let (addr, slot_id) = &CACHE[(p >> 3 ^ p >> 11) % SLOTS];
    if addr.load(Ordering::Relaxed) == p {
        let id = slot_id.load(Ordering::Relaxed);
        // SAFETY: `s` is a NUL-terminated string (this function's contract).
        if id != 0 && unsafe { state::interned_equals(id, s) } {
            return id;
        }
    }
    // SAFETY: as above.
    let id = state::intern(unsafe { CStr::from_ptr(s) }.to_bytes());
    if id != 0 {
        slot_id.store(id, Ordering::Relaxed);
        addr.store(p, Ordering::Relaxed);
    }
    id
}

/// Kernel names already resolved while one CUPTI buffer is decoded: every record of a kernel shares one name string
/// (see the module's note), and a buffer holds hundreds of records of a few kernels, so each name is checked
/// against its interned copy once a buffer rather than once a record. Within one buffer the address still names
/// the string that was checked: the records are read while CUPTI's strings are as it wrote them, the same
/// assumption [`id`] makes for the length of one call.
pub struct BufferNames {
    slots: [(usize, u32); 32],
}

impl BufferNames {
    pub const fn new() -> Self {
        BufferNames { slots: [(0, 0); 32] }
    }

    /// The interned id of kernel name `s` (see [`id`]).
    ///
    /// # Safety
    /// As [`id`], for as long as this buffer is decoded.
    #[inline]
    pub unsafe fn id(&mut self, s: *const c_char) -> u32 {
        let p = s as usize;
        let slot = &mut self.slots[(p >> 3 ^ p >> 9) % 32];
        if slot.0 == p && p != 0 {
            return slot.1;
        }
        // SAFETY: this function's contract.
        unsafe { Self::resolve(slot, s) }
    }

    /// A name not yet seen in this buffer: checked against the cache shared by every thread, remembered here.
    ///
    /// # Safety
    /// As [`id`].
    #[cold]
    #[inline(never)]
    unsafe fn resolve(slot: &mut (usize, u32), s: *const c_char) -> u32 {
        // SAFETY: the caller's contract.
        let id = unsafe { id(s) };
        if id != 0 {
            *slot = (s as usize, id);
        }
        id
    }
}

impl Default for BufferNames {
    fn default() -> Self {
        Self::new()
    }
}
