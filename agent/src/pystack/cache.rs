//! The reader's per-thread caches: small, set-associative, fixed in size (they live in the thread's state and
//! are used inside CUDA callbacks, so they never allocate).

use std::cell::Cell;

/// Ways per set: a few code objects whose addresses hash alike (17 functions in a call chain land on 128 slots
/// with a collision more often than not) all stay.
const WAYS: usize = 4;

/// `SLOTS` entries of `W` words in sets of [`WAYS`], each set's most recently used first. An entry is found by
/// its key (its first `K` words); the caller decides whether the rest still holds.
pub struct Assoc<const W: usize, const K: usize, const SLOTS: usize> {
    slots: [Cell<[u64; W]>; SLOTS],
}

impl<const W: usize, const K: usize, const SLOTS: usize> Assoc<W, K, SLOTS> {
    pub const fn new() -> Self {
        Assoc { slots: [const { Cell::new([0; W]) }; SLOTS] }
    }

    /// The set of `hash` (Fibonacci hashing: code objects made one after another lie a fixed stride apart). The
    /// product's top bits: its middle ones put code objects 512 bytes apart (a free-threaded build's allocator
    /// hands them out so) into 4 of 32 sets, 5 and 6 to a set of 4 ways, and a 17-function chain missed every stack.
    fn set(&self, hash: u64) -> &[Cell<[u64; W]>] {
        const { assert!((SLOTS / WAYS).is_power_of_two()) };
        let bits = (SLOTS / WAYS).trailing_zeros();
        let at = match bits {
            0 => 0,
            b => (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - b)) as usize * WAYS,
        };
        &self.slots[at..(at + WAYS).min(SLOTS)]
    }

    /// The entry whose key is `key`, moved to the front of its set; None when absent (a key of zeros never is).
    pub fn get(&self, hash: u64, key: &[u64; K]) -> Option<[u64; W]> {
        let set = self.set(hash);
        let way = set.iter().position(|c| c.get()[..K] == key[..])?;
        let entry = set[way].get();
        for k in (1..=way).rev() {
            set[k].set(set[k - 1].get());
        }
        set[0].set(entry);
        Some(entry)
    }

    /// Puts `entry` at the front of its set, in place of the entry with its key, else of the least recently used.
    pub fn put(&self, hash: u64, entry: [u64; W]) {
        let set = self.set(hash);
        let way = set.iter().position(|c| c.get()[..K] == entry[..K]).unwrap_or(set.len() - 1);
        for k in (1..=way).rev() {
            set[k].set(set[k - 1].get());
        }
        set[0].set(entry);
    }

    pub fn clear(&self) {
        self.slots.iter().for_each(|c| c.set([0; W]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_keys_stay_until_a_set_overflows_and_the_oldest_goes() {
        let c: Assoc<2, 1, 8> = Assoc::new();
        // One hash: every key in the same set of 4.
        for k in 1..=4u64 {
            c.put(7, [k, k * 10]);
        }
        assert!((1..=4u64).all(|k| c.get(7, &[k]) == Some([k, k * 10])));
        // The order of use is now 4, 3, 2, 1 most recent first... reading 1 makes it the most recent.
        assert_eq!(c.get(7, &[1]), Some([1, 10]));
        c.put(7, [5, 50]);
        assert_eq!(c.get(7, &[2]), None, "the least recently used went");
        assert!([1u64, 3, 4, 5].iter().all(|&k| c.get(7, &[k]).is_some()));
        // A key put again replaces its own entry.
        c.put(7, [3, 33]);
        assert_eq!(c.get(7, &[3]), Some([3, 33]));
        assert!([1u64, 4, 5].iter().all(|&k| c.get(7, &[k]).is_some()));
        c.clear();
        assert_eq!(c.get(7, &[1]), None);
    }

    #[test]
    fn a_chain_of_code_objects_a_power_of_two_apart_all_stay() {
        // 24 code objects (a walk's candidates) at the strides allocators hand them out at, hashed as the name
        // cache hashes them (address >> 4): none may push another out of a 128-entry cache.
        for stride in [0x100u64, 0x200, 0x400, 0x1000, 0x1b0, 0x230] {
            let c: Assoc<2, 1, 128> = Assoc::new();
            let codes: Vec<u64> = (0..24).map(|i| 0x4f2_52ed_0600 + i * stride).collect();
            for &code in &codes {
                c.put(code >> 4, [code, 1]);
            }
            assert!(codes.iter().all(|&code| c.get(code >> 4, &[code]).is_some()), "stride {stride:#x}");
        }
    }
}
