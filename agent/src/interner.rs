//! Interned strings of the segment: a lock-free open-addressing table maps a 64-bit hash of the bytes to the
//! string's id in the segment's string region, verified against the stored bytes; only a miss takes the lock.

use cuflight_format::segment::MappedSegment;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const TABLE: usize = 1 << 16;

/// Interned strings of the current segment.
pub struct Interner {
    keys: Box<[AtomicU64]>,
    ids: Box<[AtomicU32]>,
    lock: parking_lot::Mutex<()>,
}

impl Interner {
    pub fn new() -> Self {
        Interner {
            keys: (0..TABLE).map(|_| AtomicU64::new(0)).collect(),
            ids: (0..TABLE).map(|_| AtomicU32::new(0)).collect(),
            lock: parking_lot::Mutex::new(()),
        }
    }

    /// Id of `s` in `seg`'s string region, appending it on first sight; 0 if the region or table is full.
    pub fn intern(&self, seg: &MappedSegment, s: &[u8]) -> u32 {
        let h = hash(s) | 1;
        if let Some(id) = self.find(seg, h, s) {
            return id;
        }
        let _guard = self.lock.lock();
        if let Some(id) = self.find(seg, h, s) {
            return id;
        }
        let mut slot = h as usize & (TABLE - 1);
        for _ in 0..64 {
            if self.keys[slot].load(Ordering::Relaxed) == 0 {
                let Some(id) = seg.append_string(s) else {
                    return 0;
                };
                self.ids[slot].store(id, Ordering::Relaxed);
                self.keys[slot].store(h, Ordering::Release);
                return id;
            }
            slot = (slot + 1) & (TABLE - 1);
        }
        // Table neighbourhood full: store the string anyway, uncached.
        seg.append_string(s).unwrap_or(0)
    }

    /// Forgets every string and empties `seg`'s string region: a window that starts afresh. A lookup racing it
    /// finds a stale slot at worst, whose id no longer holds its bytes: a miss, never a wrong id.
    pub fn reset(&self, seg: &MappedSegment) {
        let _guard = self.lock.lock();
        for key in self.keys.iter() {
            key.store(0, Ordering::Relaxed);
        }
        seg.reset_strings();
    }

    fn find(&self, seg: &MappedSegment, h: u64, s: &[u8]) -> Option<u32> {
        let mut slot = h as usize & (TABLE - 1);
        for _ in 0..64 {
            let k = self.keys[slot].load(Ordering::Acquire);
            if k == 0 {
                return None;
            }
            if k == h {
                let id = self.ids[slot].load(Ordering::Relaxed);
                if stored_equals(seg, id, s) {
                    return Some(id);
                }
            }
            slot = (slot + 1) & (TABLE - 1);
        }
        None
    }
}

impl Default for Interner {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether the string stored under `id` equals the NUL-terminated string at `name`.
///
/// # Safety
/// `name` is a NUL-terminated string valid for the call.
pub unsafe fn stored_equals_c(seg: &MappedSegment, id: u32, name: *const std::ffi::c_char) -> bool {
    let bytes = seg.strings_since(id as u64);
    let Some((len, rest)) = bytes.split_first_chunk::<4>() else { return false };
    let len = u32::from_le_bytes(*len) as usize;
    let Some(stored) = rest.get(..len) else { return false };
    // SAFETY: strnlen reads at most `len + 1` bytes and stops at `name`'s NUL, so it stays inside the string.
    if unsafe { libc::strnlen(name, len + 1) } != len {
        return false;
    }
    // SAFETY: exactly `len` bytes come before the NUL, so they are readable for the comparison.
    stored == unsafe { std::slice::from_raw_parts(name as *const u8, len) }
}

/// The bytes of the string stored as `id`.
pub fn stored(seg: &MappedSegment, id: u32) -> Option<&[u8]> {
    let bytes = seg.strings_since(id as u64);
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    rest.get(..u32::from_le_bytes(*len) as usize)
}

fn stored_equals(seg: &MappedSegment, id: u32, s: &[u8]) -> bool {
    let bytes = seg.strings_since(id as u64);
    bytes.len() >= 4 + s.len() && bytes[..4] == (s.len() as u32).to_le_bytes() && &bytes[4..4 + s.len()] == s
}

/// A fast 64-bit hash (FxHash-style multiply-rotate over 8-byte words); quality is enough for a probe table
/// whose hits are verified byte for byte.
pub fn hash(s: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = s.len() as u64;
    let (words, rest) = s.as_chunks::<8>();
    for w in words {
        h = (h.rotate_left(5) ^ u64::from_le_bytes(*w)).wrapping_mul(K);
    }
    let mut tail = [0u8; 8];
    tail[..rest.len()].copy_from_slice(rest);
    (h.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::segment::Layout;

    #[test]
    fn interning_is_idempotent_and_distinguishes_strings() {
        let seg = MappedSegment::create(Layout { ring_count: 1, ring_capacity: 2, strings_capacity: 1 << 16 }, 1, 0, 0)
            .unwrap();
        let i = Interner::new();
        let a = i.intern(&seg, b"gemm_kernel");
        let b = i.intern(&seg, b"relu_kernel");
        assert_ne!(a, b);
        assert_eq!(i.intern(&seg, b"gemm_kernel"), a);
        assert_eq!(i.intern(&seg, b""), i.intern(&seg, b""));
    }

    #[test]
    fn a_c_string_matches_only_its_own_interned_copy() {
        let seg = MappedSegment::create(Layout { ring_count: 1, ring_capacity: 2, strings_capacity: 1 << 16 }, 1, 0, 0)
            .unwrap();
        let i = Interner::new();
        let id = i.intern(&seg, b"gemm_kernel");
        // SAFETY: NUL-terminated literals.
        let equals = |id, name: &std::ffi::CStr| unsafe { stored_equals_c(&seg, id, name.as_ptr()) };
        assert!(equals(id, c"gemm_kernel"));
        assert!(!equals(id, c"gemm_kernel2"), "longer");
        assert!(!equals(id, c"gemm"), "shorter");
        assert!(!equals(id, c"gemm_kernex"), "same length");
        assert!(!equals(id + 1000, c"gemm_kernel"), "past the strings");
    }

    #[test]
    fn hash_depends_on_every_byte() {
        assert_ne!(hash(b"abcdefgh1"), hash(b"abcdefgh2"));
        assert_ne!(hash(b"a"), hash(b"a\0"));
    }
}
