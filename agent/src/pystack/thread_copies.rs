//! Free-threaded CPython 3.14+ runs each thread on its own copy of a code object's bytecode
//! (`co_tlbc->entries[tlbc_index]`, pycore_interpframe.h `_PyFrame_GetBytecode`; entry 0 is the code object's own):
//! a frame's instruction pointer points into its thread's copy, so its offset is taken from that copy's start.

use super::{memory, Layout, ThreadPy, CANDIDATES};

/// The offsets of frames running a thread's own copy of the bytecode (free-threaded 3.14+:
/// `co_tlbc->entries[tlbc_index]`, pycore_interpframe.h `_PyFrame_GetBytecode`). Each distinct (code object, copy)
/// is looked up in the thread's cache, else its array's size and the copy's start are read, all in one call. A
/// copy past the array's size, or an instruction pointer outside the code's bytecode (`ob_size` code units from
/// the copy's start), leaves the frame without a line rather than give a wrong one.
#[allow(clippy::too_many_arguments)]
pub(super) fn frame_offsets(
    l: &Layout,
    py: &ThreadPy,
    in_copy: &[(u64, u32)],
    which: &[usize],
    unique: &[u64],
    state: &[u8; CANDIDATES],
    slot: &[usize; CANDIDATES],
    headers: &[[u8; memory::HEADER]],
    offsets: &mut [Option<u64>],
) {
    let Some(co_tlbc) = l.code_tlbc else { return };
    /// One distinct (code object, copy): its array, the copy's start (0: unknown) and the bytecode's length.
    #[derive(Clone, Copy)]
    struct Copy {
        code: usize,
        copy: u32,
        array: u64,
        start: u64,
        bytes: u64,
    }
    let mut copies = [Copy { code: usize::MAX, copy: 0, array: 0, start: 0, bytes: 0 }; CANDIDATES];
    let mut ncopies = 0;
    let mut addrs = [0u64; memory::MOST_WORDS];
    let mut asked = [usize::MAX; CANDIDATES];
    let mut n = 0;
    for (k, &(_, copy)) in in_copy.iter().enumerate() {
        let u = which[k];
        if copy == 0 || state[u] != 1 || copies[..ncopies].iter().any(|c| c.code == u && c.copy == copy) {
            continue;
        }
        let header = &headers[slot[u]];
        let array = memory::u64_at(header, co_tlbc);
        // `ob_size` of a code object counts its code units (two bytes each).
        let bytes = memory::u64_at(header, l.bytes_size).saturating_mul(2);
        let start = py.copy_start(unique[u], array, copy).unwrap_or(0);
        copies[ncopies] = Copy { code: u, copy, array, start, bytes };
        let entry = (copy as u64).checked_mul(8).and_then(|o| array.checked_add(l.tlbc_entries as u64 + o));
        if start == 0 && array >= 4096 && n + 2 <= addrs.len() {
            if let Some(entry) = entry {
                (addrs[n], addrs[n + 1], asked[ncopies]) = (array, entry, n);
                n += 2;
            }
        }
        ncopies += 1;
    }
    if n > 0 {
        let mut words = [0u64; memory::MOST_WORDS];
        let read = memory::read_words(&addrs[..n], &mut words);
        for (c, &i) in copies[..ncopies].iter_mut().zip(&asked) {
            // Read whole, the array holding the copy, and the copy made.
            if i != usize::MAX
                && (read & (0b11 << i)) == (0b11 << i)
                && words[i] > c.copy as u64
                && words[i + 1] >= 4096
            {
                c.start = words[i + 1];
                py.store_copy_start(unique[c.code], c.array, c.copy, c.start);
            }
        }
    }
    for (k, &(instr, copy)) in in_copy.iter().enumerate() {
        let found = copies[..ncopies].iter().find(|c| c.code == which[k] && c.copy == copy && c.start != 0);
        if let Some(c) = found {
            offsets[k] = instr.checked_sub(c.start).filter(|&off| off < c.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_own_bytecode_copy_gives_the_offset_and_a_copy_past_the_array_none() {
        let l = super::super::layouts::LAYOUTS.iter().find(|l| l.code_tlbc.is_some()).expect("a 3.14t layout");
        // A `_PyCodeArray` of 3 copies (size, then the entries); copy 1 starts at `start`.
        let start = 0x7000_0000_1000u64;
        let array: Vec<u64> = vec![3, 0x7000_0000_0000, start, 0x7000_0000_2000];
        let mut headers = [[0u8; memory::HEADER]; 2];
        let at = l.code_tlbc.unwrap();
        assert_eq!(l.tlbc_entries, 8, "the size, then the entries");
        headers[0][at..at + 8].copy_from_slice(&(array.as_ptr() as u64).to_le_bytes());
        // 64 code units: 128 bytes of bytecode.
        headers[0][l.bytes_size..l.bytes_size + 8].copy_from_slice(&64u64.to_le_bytes());
        let (which, mut state, slot, unique) = ([0usize; 4], [0u8; CANDIDATES], [0usize; CANDIDATES], [0x5000u64]);
        state[0] = 1;
        let py = ThreadPy::new();
        // Copy 1 at 40 and 200 bytes in (past the bytecode); copy 3 is past the array's size; copy 2 with a
        // pointer before its start.
        let in_copy = [(start + 40, 1), (start + 200, 1), (start + 8, 3), (0x7000_0000_1ff0, 2)];
        // The walk leaves these frames' offsets empty for this to fill.
        let mut offsets = [None; 4];
        frame_offsets(l, &py, &in_copy, &which, &unique, &state, &slot, &headers, &mut offsets);
        assert_eq!(offsets, [Some(40), None, None, None]);
        // The copy's start is remembered: found again with the array gone.
        assert_eq!(py.copy_start(0x5000, array.as_ptr() as u64, 1), Some(start));
        let gone = array.as_ptr() as u64;
        drop(array);
        let mut offsets = [None; 4];
        frame_offsets(l, &py, &in_copy[..1], &which, &unique, &state, &slot, &headers, &mut offsets[..1]);
        assert_eq!(offsets[0], Some(40), "cached for the array at {gone:#x}");
        // A code header that was not read leaves its frames alone.
        state[0] = 2;
        let mut offsets = [Some(7); 4];
        frame_offsets(l, &py, &in_copy, &which, &unique, &state, &slot, &headers, &mut offsets);
        assert_eq!(offsets, [Some(7); 4]);
    }
}
