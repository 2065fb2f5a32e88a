//! The walk of one thread's frames: where the innermost frame is, the frames' code objects and instruction
//! offsets, and each code object's file, function and line, every read through [`memory`].

use super::{linetable, memory, thread_copies, Frame, Interp, Layout, ThreadPy, CANDIDATES, MAX_FRAMES};

/// Frames walked at most (a cycle in freed memory must end the walk).
const MAX_WALK: usize = 512;
/// Characters of a file or function name kept.
const MAX_CHARS: usize = 256;
/// Bytes of a line table read at most.
const MAX_TABLE: usize = 1 << 20;

/// What the last walk of a thread found: where to look first next time.
#[derive(Clone, Copy)]
pub struct LastWalk {
    /// The thread state walked, its `_PyCFrame` (3.11, 3.12), and the page of its innermost frame.
    tstate: u64,
    cframe: u64,
    top: u64,
    /// Pages of frames it spanned (those a whole window could hold), 1 to [`memory::WINDOW_PAGES`].
    pages: u8,
    /// What the next walk reads with the guess, innermost first: the distinct code objects and then the frames the
    /// window did not hold (3.11+: the C stack's entry frames from 3.12, generators' and coroutines' frames, which
    /// live in their objects), or the frames themselves (3.9, 3.10: frames are heap objects, one read each
    /// otherwise).
    guessed: [u64; CANDIDATES],
    count: u8,
}

impl LastWalk {
    pub const NONE: LastWalk = LastWalk {
        tstate: 0,
        cframe: 0,
        top: 0,
        pages: memory::WINDOW_PAGES as u8,
        guessed: [0; CANDIDATES],
        count: 0,
    };
}

/// What [`first_frame`] read with the guess, besides the frame pointer.
struct GuessRead {
    /// The window's lowest address, when the window was read and holds the innermost frame.
    low: Option<u64>,
    /// Bit g: `headers[g]` holds the last walk's `guessed[g]` (a code header or a frame outside the window; a frame on
    /// 3.9 and 3.10).
    read: u32,
}

/// Bytes of a frame the walk reads.
fn frame_span(l: &Layout) -> usize {
    let fields =
        [l.frame_back, l.frame_code, l.frame_instr, l.frame_owner.unwrap_or(0), l.frame_tlbc_index.unwrap_or(0)];
    fields.into_iter().max().unwrap_or(0) + 8
}

/// Header slots: the last walk's code objects first (read with the guess), the others after them.
const SLOTS: usize = 2 * CANDIDATES;

/// The innermost frame of thread state `tstate`, its `_PyCFrame` (3.11, 3.12; else 0), and what was read with it
/// ([`GuessRead`], into `headers[..CANDIDATES]`). A thread calling from the same place as last time has its
/// frames where they were, running the same code: its frame pointer (through its `_PyCFrame` on 3.11 and 3.12),
/// the window and the code headers (3.9 and 3.10: the frames) are read together, one system call instead of three
/// or more; a wrong guess costs the bytes read for it, and the reads it saved are made as before.
fn first_frame(
    l: &Layout,
    last: &LastWalk,
    tstate: u64,
    window: &mut [u8; memory::WINDOW],
    headers: &mut [[u8; memory::HEADER]; SLOTS],
    scratch: &mut [u8; memory::SCRATCH],
) -> Option<(u64, u64, GuessRead)> {
    if tstate == 0 {
        return None;
    }
    let at = tstate + l.tstate_frame as u64;
    let mut words = [0u64; 2];
    let windowed = l.code_adaptive.is_some();
    let guessing = last.tstate == tstate
        && (l.cframe_frame.is_none() || last.cframe != 0)
        && if windowed { last.top != 0 } else { last.count > 0 && frame_span(l) <= memory::HEADER };
    let (frame, low, codes) = if guessing {
        let pair = [at, last.cframe + l.cframe_frame.unwrap_or(0) as u64];
        let guess = memory::Guess {
            words: &pair[..1 + l.cframe_frame.is_some() as usize],
            top: last.top,
            pages: if windowed { last.pages as usize } else { 0 },
            codes: &last.guessed[..last.count as usize],
            header_len: if windowed { code_span(l) } else { frame_span(l) },
        };
        let (n, low, codes) = memory::read_guess(&guess, &mut words, window, &mut headers[..CANDIDATES], scratch);
        match l.cframe_frame {
            _ if n == 0 => return None,
            None => (words[0], low, codes),
            Some(_) if words[0] == last.cframe && n == 2 => (words[1], low, codes),
            Some(c) => (read_word(words[0] + c as u64)?, None, 0),
        }
    } else {
        words[0] = read_word(at)?;
        match l.cframe_frame {
            Some(c) => (read_word(words[0] + c as u64)?, None, 0),
            None => (words[0], None, 0),
        }
    };
    let same_page = frame & !(4096 - 1) == last.top;
    let cframe = if l.cframe_frame.is_some() { words[0] } else { 0 };
    Some((frame, cframe, GuessRead { low: low.filter(|_| same_page), read: codes }))
}

fn read_word(at: u64) -> Option<u64> {
    let mut word = [0u8; 8];
    memory::read(at, &mut word).then(|| u64::from_le_bytes(word))
}

/// The frames of thread state `tstate`, innermost first, and whether some were left out.
pub fn walk(i: &Interp, py: &ThreadPy, tstate: u64, out: &mut [Frame; MAX_FRAMES]) -> (usize, bool) {
    let l = i.layout;
    let mut window = [0u8; memory::WINDOW];
    let mut headers = [[0u8; memory::HEADER]; SLOTS];
    let mut scratch = [0u8; memory::SCRATCH];
    let last = py.last_walk.get();
    let Some((mut frame, cframe, got)) = first_frame(l, &last, tstate, &mut window, &mut headers, &mut scratch) else {
        return (0, false);
    };
    let windowed = l.code_adaptive.is_some();
    // What the guess read: code headers and frames outside the window (3.11+), or frames (3.9, 3.10). A frame's
    // address is never a code object's, so one mask serves both.
    let (codes_read, frames_read) = if windowed { (got.read, got.read) } else { (0, got.read) };
    let first = frame;
    let mut buf = [0u8; 256];
    let buf = &mut buf[..frame_span(l).min(256)];
    // The frames' code objects and offsets first (from the window, the guess, or one read a frame), then every code
    // object's header in one read.
    let (mut low, mut high, mut base) = (0, 0, 0);
    let read = got.low.or_else(|| windowed.then(|| memory::read_window(frame, &mut window, last.pages as usize))?);
    if let Some(lowest) = read {
        high = (frame | (4096 - 1)) + 1;
        base = high - memory::WINDOW as u64;
        low = lowest;
    }
    // The lowest frame walked that a whole window would hold, for the next window's size.
    let mut frames_low = u64::MAX;
    let mut codes = [0u64; CANDIDATES];
    let mut offsets = [None; CANDIDATES];
    // Free-threaded 3.14+: (instruction pointer, bytecode copy) of frames running a thread's own copy, whose
    // offsets are found once the code headers are read ([`thread_copies::frame_offsets`]).
    let mut in_copy = [(0u64, 0u32); CANDIDATES];
    let (mut walked, mut nwalked) = ([0u64; CANDIDATES], 0);
    // Frames the window did not hold (3.11+), for the next walk's guess.
    let (mut outside, mut noutside) = ([0u64; CANDIDATES], 0);
    let (mut found, mut ended) = (0, false);
    for _ in 0..MAX_WALK {
        if frame == 0 {
            ended = true;
            break;
        }
        if found == CANDIDATES {
            break;
        }
        if frame < high && frame >= high.saturating_sub(memory::WINDOW as u64) {
            frames_low = frames_low.min(frame);
        }
        // From the window where the frame lies in it, or as the guess read it, else on its own.
        let in_window = frame >= low && frame.checked_add(buf.len() as u64).is_some_and(|end| end <= high);
        let pre_read = || (0..last.count as usize).find(|&g| last.guessed[g] == frame && frames_read & 1 << g != 0);
        if in_window {
            let at = (frame - base) as usize;
            buf.copy_from_slice(&window[at..at + buf.len()]);
        } else {
            if let Some(g) = (frames_read != 0).then(pre_read).flatten() {
                buf.copy_from_slice(&headers[g][..buf.len()]);
            } else if !memory::read(frame, buf) {
                break;
            }
            if windowed && noutside < CANDIDATES {
                outside[noutside] = frame;
                noutside += 1;
            }
        }
        if nwalked < CANDIDATES {
            walked[nwalked] = frame;
            nwalked += 1;
        }
        let back = memory::u64_at(buf, l.frame_back);
        let code = memory::u64_at(buf, l.frame_code) & !l.executable_tag_bits;
        let c_stack = l.frame_owner.is_some_and(|o| buf[o] >= l.owner_no_code);
        if !c_stack {
            codes[found] = code;
            offsets[found] = match l.code_adaptive {
                // f_lasti: bytes in 3.9, code units (two bytes) in 3.10; -1 before the first instruction.
                None => {
                    u64::try_from(memory::i32_at(buf, l.frame_instr))
                        .ok()
                        .map(|v| if l.minor >= 10 { v * 2 } else { v })
                }
                Some(at) => {
                    let instr = memory::u64_at(buf, l.frame_instr);
                    match l.frame_tlbc_index.map(|t| memory::i32_at(buf, t)) {
                        // Copy 0 is the code object's own bytecode; a negative index is not one.
                        Some(copy) if copy > 0 => {
                            in_copy[found] = (instr, copy as u32);
                            None
                        }
                        Some(copy) if copy < 0 => None,
                        _ => instr.checked_sub(code + at as u64),
                    }
                }
            };
            found += 1;
        }
        frame = back;
    }
    let mut next = LastWalk { tstate, cframe, top: first & !(4096 - 1), ..last };
    if low != 0 && frames_low != u64::MAX {
        let pages = high.saturating_sub(frames_low & !(4096 - 1)) / 4096;
        next.pages = pages.clamp(1, memory::WINDOW_PAGES as u64) as u8;
    }
    // Each distinct code object's header once (recursion and nested modules repeat them; each header costs the
    // kernel a page to pin): those the guess read are in the first slots, the rest read in one call after them.
    let slots = code_slots(&codes[..found], &last, codes_read);
    let CodeSlots { unique, slot, which, distinct, .. } = slots;
    if windowed {
        next.guessed[..distinct].copy_from_slice(&unique[..distinct]);
        // The frames outside the window where room is left (a frame's bytes fit a header's: a test checks).
        let extra = noutside.min(CANDIDATES - distinct);
        next.guessed[distinct..distinct + extra].copy_from_slice(&outside[..extra]);
        next.count = (distinct + extra) as u8;
    } else {
        next.guessed[..nwalked].copy_from_slice(&walked[..nwalked]);
        next.count = nwalked as u8;
    }
    py.last_walk.set(next);
    let state = read_headers(l, &slots, &mut headers, &mut scratch);
    if l.code_tlbc.is_some() && in_copy[..found].iter().any(|&(_, copy)| copy != 0) {
        let (copies, frames) = (&in_copy[..found], &which[..found]);
        thread_copies::frame_offsets(l, py, copies, frames, &unique, &state, &slot, &headers, &mut offsets[..found]);
    }
    // What the code objects seen for the first time refer to (file and function names, line tables) in one call,
    // into `scratch` (its header ranges are copied out by now): a cold stack's 3 reads a frame become one a stack.
    let mut objects = Prefetched { addrs: [0; memory::MOST_GATHERED], count: 0, read: 0 };
    // Only the frames that are named below (the deeper ones are walked for the guess, never named or cached).
    let mut named = [false; CANDIDATES];
    for &u in &which[..found.min(MAX_FRAMES + 1)] {
        named[u] = true;
    }
    // Each code object's names looked up once, here: (file, function) ids where the cache knows them.
    let known = look_up_names(i, py, &slots, &state, &named, &headers, &mut objects);
    objects.read = memory::gather(&objects.addrs[..objects.count], &mut scratch);
    let objects = Objects { of: &objects, bytes: &scratch };
    let mut n = 0;
    for k in 0..found {
        let u = which[k];
        if state[u] != 1 {
            continue;
        }
        if let Some(f) = code_frame(i, py, codes[k], &headers[slot[u]], offsets[k], known[u], &objects) {
            if n == MAX_FRAMES {
                return (n, true);
            }
            out[n] = f;
            n += 1;
        }
    }
    (n, !ended)
}

/// The distinct code objects of a walk's frames and where each one's header is read into: a slot the guess
/// filled, or one after them for a header still to read (`missing`).
#[derive(Clone, Copy)]
struct CodeSlots {
    unique: [u64; CANDIDATES],
    /// Per distinct code object, its header's slot.
    slot: [usize; CANDIDATES],
    /// Per frame, its code object's index in `unique`.
    which: [usize; CANDIDATES],
    distinct: usize,
    missing: [u64; CANDIDATES],
    misses: usize,
}

#[inline]
fn code_slots(codes: &[u64], last: &LastWalk, codes_read: u32) -> CodeSlots {
    let mut c = CodeSlots {
        unique: [0; CANDIDATES],
        slot: [0; CANDIDATES],
        which: [0; CANDIDATES],
        distinct: 0,
        missing: [0; CANDIDATES],
        misses: 0,
    };
    for (k, &code) in codes.iter().enumerate() {
        c.which[k] = match c.unique[..c.distinct].iter().position(|&u| u == code) {
            Some(u) => u,
            None => {
                c.unique[c.distinct] = code;
                let guessed_as =
                    (0..last.count as usize).find(|&g| last.guessed[g] == code && codes_read & 1 << g != 0);
                c.slot[c.distinct] = match guessed_as {
                    Some(g) => g,
                    None => {
                        c.missing[c.misses] = code;
                        c.misses += 1;
                        CANDIDATES + c.misses - 1
                    }
                };
                c.distinct += 1;
                c.distinct - 1
            }
        };
    }
    c
}

/// Reads the code objects' headers the guess did not (one call for them all), into their slots of `headers`; per
/// distinct code object: 1 read, 2 unreadable.
#[inline]
fn read_headers(
    l: &Layout,
    c: &CodeSlots,
    headers: &mut [[u8; memory::HEADER]; SLOTS],
    scratch: &mut [u8; memory::SCRATCH],
) -> [u8; CANDIDATES] {
    let read = memory::read_many(&c.missing[..c.misses], code_span(l), &mut headers[CANDIDATES..], scratch);
    // Headers the batch did not get (it stops at an unreadable one) are read on their own, once: 1 read, 2 not.
    let mut state = [0u8; CANDIDATES];
    for (st, &s) in state.iter_mut().zip(&c.slot[..c.distinct]) {
        *st = if s < CANDIDATES || read & 1 << (s - CANDIDATES) != 0 { 1 } else { 0 };
    }
    for u in 0..c.distinct {
        if state[u] == 0 {
            state[u] = if memory::read(c.unique[u], &mut headers[c.slot[u]][..code_span(l)]) { 1 } else { 2 };
        }
    }
    state
}

/// Each named code object's (file, function) ids where the thread's cache knows them; for the others, what
/// naming them needs (file, name, line table) is added to `objects`, to be read in one call.
#[inline]
fn look_up_names(
    i: &Interp,
    py: &ThreadPy,
    c: &CodeSlots,
    state: &[u8; CANDIDATES],
    named: &[bool; CANDIDATES],
    headers: &[[u8; memory::HEADER]; SLOTS],
    objects: &mut Prefetched,
) -> [Option<(u32, u32)>; CANDIDATES] {
    let l = i.layout;
    let mut known = [None; CANDIDATES];
    for u in (0..c.distinct).filter(|&u| state[u] == 1 && named[u]) {
        let buf = &headers[c.slot[u]];
        let name_at = l.code_qualname.unwrap_or(l.code_name);
        let (file, name) = (memory::u64_at(buf, l.code_filename), memory::u64_at(buf, name_at));
        if memory::u64_at(buf, l.ob_type) != i.code_type {
            continue;
        }
        known[u] = py.lookup(c.unique[u], file, name);
        if known[u].is_none() {
            for obj in [file, name, memory::u64_at(buf, l.code_linetable)] {
                objects.add(obj);
            }
        }
    }
    known
}

/// The objects a walk read together ([`memory::gather`]).
struct Prefetched {
    addrs: [u64; memory::MOST_GATHERED],
    count: usize,
    /// Bit k: `addrs[k]` was read whole.
    read: u64,
}

impl Prefetched {
    fn add(&mut self, addr: u64) {
        if addr >= 4096 && self.count < self.addrs.len() && !self.addrs[..self.count].contains(&addr) {
            self.addrs[self.count] = addr;
            self.count += 1;
        }
    }
}

/// [`Prefetched`] with the bytes read.
struct Objects<'a> {
    of: &'a Prefetched,
    bytes: &'a [u8; memory::SCRATCH],
}

impl Objects<'_> {
    /// The first [`memory::GATHERED`] bytes of the object at `addr`, when they were read with the others.
    fn get(&self, addr: u64) -> Option<&[u8]> {
        let k = self.of.addrs[..self.of.count].iter().position(|&a| a == addr)?;
        (self.of.read & 1 << k != 0).then(|| &self.bytes[k * memory::GATHERED..(k + 1) * memory::GATHERED])
    }
}

/// Bytes of a code object's header the reader needs (at most [`memory::HEADER`] in every layout: a test checks).
fn code_end(l: &Layout) -> usize {
    let name_at = l.code_qualname.unwrap_or(l.code_name);
    let fields = [l.ob_type, l.code_filename, name_at, l.code_firstlineno, l.code_linetable, l.code_tlbc.unwrap_or(0)];
    fields.into_iter().max().unwrap_or(0) + 8
}

/// The bytes of a code object's header read.
fn code_span(l: &Layout) -> usize {
    code_end(l).min(memory::HEADER)
}

/// File, function and line of code object `code` at byte `offset` of its bytecode.
fn code_frame(
    i: &Interp,
    py: &ThreadPy,
    code: u64,
    buf: &[u8; memory::HEADER],
    offset: Option<u64>,
    known: Option<(u32, u32)>,
    objects: &Objects,
) -> Option<Frame> {
    let l = i.layout;
    let name_at = l.code_qualname.unwrap_or(l.code_name);
    if memory::u64_at(buf, l.ob_type) != i.code_type {
        return None;
    }
    let (file_obj, name_obj) = (memory::u64_at(buf, l.code_filename), memory::u64_at(buf, name_at));
    // Looked up by the walk (a frame deeper than it names: here).
    let cached = known.or_else(|| py.lookup(code, file_obj, name_obj));
    let (file, func) = match cached {
        Some(ids) => ids,
        None => {
            let ids = (
                intern_string(i, file_obj, objects.get(file_obj))?,
                intern_string(i, name_obj, objects.get(name_obj))?,
            );
            py.store(code, file_obj, name_obj, ids);
            ids
        }
    };
    let first = memory::i32_at(buf, l.code_firstlineno) as i64;
    let table = memory::u64_at(buf, l.code_linetable);
    let read_line = |off| line_of(i, table, first, off, objects.get(table));
    let line = match (offset, cached) {
        // The same code object as before (its names' objects unchanged): its line table is too.
        (Some(off), Some(_)) => py.line(code, off, || read_line(off)),
        (Some(off), None) => py.set_line(code, off, read_line(off)),
        (None, _) => None,
    }
    .unwrap_or(0);
    Some(Frame { file, func, line })
}

/// The line of byte `offset` from the code object's line table (a bytes object at `table`; `read`: its first bytes
/// when they were read already).
fn line_of(i: &Interp, table: u64, first: i64, offset: u64, read: Option<&[u8]>) -> Option<u32> {
    let l = i.layout;
    // The bytes object's header and the start of its data in one read.
    let mut got = [0u8; 64 + 256];
    let head_len = l.bytes_data.min(64);
    let n = match read {
        Some(r) => {
            got[..r.len()].copy_from_slice(r);
            r.len()
        }
        None => memory::read_prefix(table, &mut got[..head_len + 256]),
    };
    if n < head_len || memory::u64_at(&got, l.ob_type) != i.bytes_type {
        return None;
    }
    let size = (memory::u64_at(&got, l.bytes_size) as usize).min(MAX_TABLE);
    let bytes = memory::Chunks::starting_with(table + l.bytes_data as u64, size, &got[head_len..n]);
    match l.minor {
        9 => linetable::lnotab_line(bytes, first, offset),
        10 => linetable::linetable310_line(bytes, first, offset),
        _ => linetable::locations_line(bytes, first, offset / 2),
    }
}

/// Interns the text of the `str` object at `obj` (compact strings, as code objects' names are), as UTF-8 (`read`:
/// its first bytes when they were read already).
fn intern_string(i: &Interp, obj: u64, read: Option<&[u8]>) -> Option<u32> {
    let l = i.layout;
    // The header and, for most names, the whole text in one read; a longer text is read on its own.
    let mut got = [0u8; 96 + 160];
    let head_len = l.str_compact_size.min(96);
    let n = match read {
        Some(r) => {
            let n = r.len().min(got.len());
            got[..n].copy_from_slice(&r[..n]);
            n
        }
        None => memory::read_prefix(obj, &mut got[..head_len + 160]),
    };
    let head = &got[..head_len];
    if n < head_len || memory::u64_at(head, l.ob_type) != i.str_type {
        return None;
    }
    let state = memory::i32_at(head, l.str_state) as u32;
    if state & l.state_compact == 0 {
        return None;
    }
    let kind = ((state & l.state_kind) >> l.state_kind.trailing_zeros()) as usize;
    if !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let chars = (memory::u64_at(head, l.str_length) as usize).min(MAX_CHARS);
    let data = obj + if state & l.state_ascii != 0 { l.str_ascii_size } else { l.str_compact_size } as u64;
    let mut raw = [0u8; MAX_CHARS * 4];
    let raw = &mut raw[..chars * kind];
    let at = (data - obj) as usize;
    if at + raw.len() <= n {
        raw.copy_from_slice(&got[at..at + raw.len()]);
    } else if !raw.is_empty() && !memory::read(data, raw) {
        return None;
    }
    let mut text = [0u8; MAX_CHARS * 4];
    let mut len = 0;
    for unit in raw.chunks_exact(kind) {
        let cp = match kind {
            1 => unit[0] as u32,
            2 => u16::from_le_bytes([unit[0], unit[1]]) as u32,
            _ => u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]),
        };
        len += char::from_u32(cp).unwrap_or('?').encode_utf8(&mut text[len..]).len();
    }
    let id = crate::state::intern(&text[..len]);
    (id != 0).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_reader_needs_of_a_code_object_fits_the_header_read() {
        for l in super::super::layouts::LAYOUTS {
            assert!(code_end(l) <= memory::HEADER, "3.{}", l.minor);
            // A frame outside the window is guessed as a code header is, and read as many bytes.
            if l.code_adaptive.is_some() {
                assert!(frame_span(l) <= code_span(l), "3.{}", l.minor);
            }
        }
    }
}
