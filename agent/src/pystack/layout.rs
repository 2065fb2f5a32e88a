//! Where one CPython release keeps what the stack reader needs ([`Layout`], one per release in the generated
//! `layouts.rs`), and the check that the running interpreter is laid out so by its own account.

use super::memory;

/// Where one CPython release keeps what the reader needs: byte offsets, and the bits of a string's state word.
/// `None` where the release has no such field.
pub struct Layout {
    pub minor: u32,
    /// A free-threaded build (`Py_GIL_DISABLED`): another object header, so other offsets everywhere.
    pub free_threaded: bool,
    /// `PyThreadState.frame` (3.9, 3.10), `.cframe` (3.11, 3.12), `.current_frame` (3.13+).
    pub tstate_frame: usize,
    /// `_PyCFrame.current_frame` (3.11, 3.12: the thread state points at a `_PyCFrame`).
    pub cframe_frame: Option<usize>,
    /// `PyThreadState.next`: the interpreter's thread states form a list, newest first.
    pub tstate_next: usize,
    /// `PyThreadState.interp`: checked against the interpreter, so a thread state freed under the reader (the
    /// list changes while it is read) ends the list rather than leading it astray.
    pub tstate_interp: usize,
    /// `PyInterpreterState.tstate_head` (3.9, 3.10) or `.threads.head` (3.11+).
    pub interp_threads_head: usize,
    pub frame_back: usize,
    /// `f_code` (3.9 to 3.12) or `f_executable` (3.13+).
    pub frame_code: usize,
    /// `f_lasti` (an int: bytes in 3.9, code units in 3.10), `prev_instr` (3.11, 3.12) or `instr_ptr` (3.13+).
    pub frame_instr: usize,
    pub frame_owner: Option<usize>,
    /// The first `_PyInterpreterFrame.owner` whose frames hold no code of their own: the C stack's entry frames
    /// (3.12, 3.13: `FRAME_OWNED_BY_CSTACK`), the interpreter's and then the C stack's (3.14); 255: none.
    pub owner_no_code: u8,
    /// Tag bits of `f_executable`, a `_PyStackRef` from 3.14 (pycore_stackref.h `Py_TAG_BITS`): cleared for the
    /// code object's address.
    pub executable_tag_bits: u64,
    /// Free-threaded 3.14+: `_PyInterpreterFrame.tlbc_index` (an int32), `PyCodeObject.co_tlbc` (a
    /// `_PyCodeArray *`) and where that array's `entries` begin: a thread runs its own copy of the bytecode,
    /// `co_tlbc->entries[tlbc_index]` (entry 0 is `co_code_adaptive`), and its instruction pointer points there.
    pub frame_tlbc_index: Option<usize>,
    pub code_tlbc: Option<usize>,
    pub tlbc_entries: usize,
    pub code_qualname: Option<usize>,
    /// `co_lnotab` (3.9) or `co_linetable`.
    pub code_linetable: usize,
    /// `co_code_adaptive`: the bytecode inside the code object (3.11+), what instruction pointers point into.
    pub code_adaptive: Option<usize>,
    pub code_filename: usize,
    pub code_name: usize,
    pub code_firstlineno: usize,
    pub ob_type: usize,
    pub bytes_size: usize,
    pub bytes_data: usize,
    pub str_length: usize,
    pub str_state: usize,
    pub str_ascii_size: usize,
    pub str_compact_size: usize,
    pub state_kind: u32,
    pub state_compact: u32,
    pub state_ascii: u32,
    /// Where `_Py_DebugOffsets.free_threaded` is (3.13+): the description of itself that the interpreter keeps at
    /// the start of `_PyRuntime` for debuggers and profilers.
    pub debug_free_threaded: Option<usize>,
    /// (offset in `_Py_DebugOffsets`, value): each offset above as the running interpreter must describe it.
    pub debug_checks: &'static [(usize, usize)],
}

/// `_Py_Debug_Cookie` (pycore_debug_offsets.h; pycore_runtime.h in 3.13): the first bytes of `_PyRuntime`.
const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// Whether the interpreter whose `_PyRuntime` is at `runtime` is laid out as `layout` says, by its own description
/// (3.13+): a free-threaded build (another object header), or one whose offsets differ from the headers the layout
/// was generated from, gets no stacks rather than wrong ones. Releases before 3.13, and an interpreter that does
/// not export `_PyRuntime`, have no such description: the version alone chose the layout.
#[cfg(test)]
pub fn describes_itself_as(layout: &Layout, runtime: u64) -> bool {
    check_description(layout, runtime).is_ok()
}

/// Why an interpreter's description of itself does not match a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// A free-threaded build where the layout is not one: another object header, so other offsets everywhere.
    FreeThreaded,
    /// No description where one must be, another release, or other offsets (a debug or patched build).
    Other,
}

/// `describes_itself_as`, saying why not.
pub fn check_description(layout: &Layout, runtime: u64) -> Result<(), Mismatch> {
    let Some(free_threaded) = layout.debug_free_threaded else { return Ok(()) };
    if runtime == 0 {
        return Ok(());
    }
    // The description's first bytes, as far as the last one checked, in one read.
    let end = layout.debug_checks.iter().map(|&(at, _)| at).chain([free_threaded, 8]).max().unwrap_or(0) + 8;
    let mut described = [0u8; 1024];
    let Some(described) = described.get_mut(..end) else { return Err(Mismatch::Other) };
    if !memory::read(runtime, described) || &described[..8] != DEBUG_COOKIE {
        return Err(Mismatch::Other);
    }
    let word = |at: usize| memory::u64_at(described, at);
    // `version` follows the cookie: PY_VERSION_HEX, major and minor in its top two bytes.
    if word(8) >> 16 & 0xffff != (0x0300 | layout.minor as u64) {
        return Err(Mismatch::Other);
    }
    let interpreter_free_threaded = word(free_threaded) != 0;
    if interpreter_free_threaded != layout.free_threaded {
        return Err(if interpreter_free_threaded { Mismatch::FreeThreaded } else { Mismatch::Other });
    }
    match layout.debug_checks.iter().all(|&(at, expected)| word(at) == expected as u64) {
        true => Ok(()),
        false => Err(Mismatch::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `_PyRuntime` that begins as the release of `layout` describes itself.
    fn runtime_of(layout: &Layout) -> Vec<u8> {
        let mut rt = vec![0u8; 1024];
        rt[..8].copy_from_slice(DEBUG_COOKIE);
        rt[8..16].copy_from_slice(&(0x0300_00F0u64 | (layout.minor as u64) << 16).to_le_bytes());
        for &(at, value) in layout.debug_checks {
            rt[at..at + 8].copy_from_slice(&(value as u64).to_le_bytes());
        }
        let f = layout.debug_free_threaded.unwrap();
        rt[f] = layout.free_threaded as u8;
        rt
    }

    #[test]
    fn only_an_interpreter_that_describes_itself_as_the_layout_passes() {
        for layout in super::super::layouts::LAYOUTS.iter().filter(|l| l.debug_free_threaded.is_some()) {
            let at = |rt: &Vec<u8>| rt.as_ptr() as u64;
            let rt = runtime_of(layout);
            assert!(describes_itself_as(layout, at(&rt)), "3.{}", layout.minor);
            // The other build of the same release (free-threaded or not): another object header.
            let mut other_build = runtime_of(layout);
            let f = layout.debug_free_threaded.unwrap();
            other_build[f] ^= 1;
            let expected = if layout.free_threaded { Mismatch::Other } else { Mismatch::FreeThreaded };
            assert_eq!(check_description(layout, at(&other_build)), Err(expected));
            // Any offset the reader uses laid out otherwise.
            for &(check, _) in layout.debug_checks {
                let mut other = runtime_of(layout);
                other[check] ^= 8;
                assert_eq!(
                    check_description(layout, at(&other)),
                    Err(Mismatch::Other),
                    "3.{} offset {check}",
                    layout.minor
                );
            }
            // Another release, or no description at all.
            let mut newer = runtime_of(layout);
            newer[10] += 1;
            assert!(!describes_itself_as(layout, at(&newer)));
            let mut none = runtime_of(layout);
            none[0] = b'X';
            assert!(!describes_itself_as(layout, at(&none)));
        }
        // The releases `record` and `stats` name as known are the layouts'.
        let mut minors: Vec<u32> = super::super::layouts::LAYOUTS.iter().map(|l| l.minor).collect();
        minors.sort_unstable();
        minors.dedup();
        let (first, last) = (cuflight_format::python_reader::FIRST_MINOR, cuflight_format::python_reader::LAST_MINOR);
        assert_eq!(minors, (first..=last).collect::<Vec<_>>());
        // Before 3.13 there is nothing to check.
        let old = super::super::layouts::LAYOUTS.iter().find(|l| l.minor == 12).unwrap();
        assert!(describes_itself_as(old, 0));
    }
}
