//! NVTX's domain and registered-string handles, valid whenever they were made. A program makes them once, at its
//! start (NCCL names its domain and registers its collectives' names when it initialises), and uses them for the
//! life of the process: a handle must name the same string in every window, also when it was made while the
//! agent was dormant (no segment to intern into yet), in an earlier window (each window's string region starts
//! empty) or in the parent of a fork (whose segment the child does not share). So a handle is an index into this
//! registry of the strings themselves; each use finds the string's id in the current segment, interned on first
//! use there and remembered with the strings' epoch ([`state::strings_epoch`]).
//!
//! Registration is rare and takes a lock; using a handle is an index and an atomic load.

use crate::state;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Distinct strings kept (a program registers some dozens: its domains and its ranges' names).
const SLOTS: usize = 4096;

/// Longest string kept, in bytes (the length NVTX's wide strings are cut to as well).
const MAX_LEN: usize = 4096;

/// Handles past the registry's end: the string's id in the segment of the moment, tagged so that it is never
/// taken for an index (it names nothing once the segment is gone).
const UNREGISTERED: usize = 1 << 40;

struct Slot {
    bytes: OnceLock<Box<[u8]>>,
    /// (strings epoch << 32) | string id in that epoch; 0 when not interned there yet.
    id: AtomicU64,
}

static REGISTRY: [Slot; SLOTS] = [const { Slot { bytes: OnceLock::new(), id: AtomicU64::new(0) } }; SLOTS];
static USED: AtomicUsize = AtomicUsize::new(0);
static REGISTERING: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// The handle of `bytes` (the same handle for the same string, whoever registers it); never 0, the null handle
/// NVTX reserves, except past the registry's end while nothing records.
pub fn register(bytes: &[u8]) -> usize {
    let bytes = &bytes[..bytes.len().min(MAX_LEN)];
    let _guard = REGISTERING.lock();
    let used = USED.load(Ordering::Acquire);
    if let Some(i) = REGISTRY[..used].iter().position(|s| s.bytes.get().is_some_and(|b| &b[..] == bytes)) {
        return i + 1;
    }
    if used == SLOTS {
        return match state::intern(bytes) {
            0 => 0,
            id => UNREGISTERED | id as usize,
        };
    }
    let _ = REGISTRY[used].bytes.set(bytes.into());
    USED.store(used + 1, Ordering::Release);
    used + 1
}

/// The string id, in the current segment, of what `handle` names (0: the null handle, or nothing recording).
pub fn id(handle: usize) -> u32 {
    if handle & UNREGISTERED != 0 {
        return handle as u32;
    }
    let Some(slot) = handle.checked_sub(1).filter(|&i| i < USED.load(Ordering::Acquire)).map(|i| &REGISTRY[i]) else {
        return 0;
    };
    let epoch = state::strings_epoch() as u32;
    let known = slot.id.load(Ordering::Relaxed);
    if known != 0 && (known >> 32) as u32 == epoch {
        return known as u32;
    }
    let Some(bytes) = slot.bytes.get() else { return 0 };
    let id = state::intern(bytes);
    if id != 0 {
        slot.id.store((epoch as u64) << 32 | id as u64, Ordering::Relaxed);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_registered_twice_has_one_handle_and_no_handle_is_null() {
        let a = register(b"nvtx_handles test: NCCL");
        let b = register(b"nvtx_handles test: ncclAllReduce");
        assert!(a != 0 && b != 0 && a != b);
        assert_eq!(register(b"nvtx_handles test: NCCL"), a);
        assert_eq!(id(0), 0, "the null handle");
        assert_eq!(id(SLOTS + 1), 0, "past what was registered");
    }
}
