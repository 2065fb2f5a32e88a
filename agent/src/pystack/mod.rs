//! The Python stack behind a CUDA call, read from the interpreter's own structures at the call (as py-spy reads
//! them from outside): file, line and function of up to [`MAX_FRAMES`] frames, innermost first, written as
//! [`EventKind::PyFrame`] events tied to the call by its correlation id.
//!
//! - The calling thread's state comes from `PyGILState_GetThisThreadState`, which reads a thread-specific key
//!   and works while the thread has released the GIL, as PyTorch and ctypes do around every CUDA call (the
//!   "current" thread state is then empty). No GIL is taken and no Python code runs. A thread with no frames
//!   of its own borrows the main thread's, found in the interpreter's list of thread states ([`main_stack`]).
//! - Where the frames, code objects and strings are comes from [`layouts`], generated from each release's
//!   headers (CPython 3.9 to 3.15, and the free-threaded 3.13t and 3.14t; x86_64); an interpreter of another
//!   version or build records no stacks, and `record` says why ([`python_reader`]). On a free-threaded 3.14 a
//!   thread runs its own copy of the bytecode, found through the code object's array of copies.
//! - Every read goes through [`memory::read`], which cannot fault: a frame torn down under the reader ends the
//!   walk there. Code objects, strings and line tables are checked by their type pointers first.
//! - File and function names are interned once per code object and thread (`ThreadPy::lookup`).
//! - No Python in the process (no `PyGILState_GetThisThreadState` symbol): one check, nothing else.

mod cache;
mod layout;
mod layouts;
mod linetable;
mod memory;
mod thread_copies;
mod walk;

pub use layout::Layout;
use layout::{check_description, Mismatch};

use cuflight_format::python_reader;
use std::sync::atomic::{AtomicU32, Ordering};

use cuflight_format::view::PyFrameRecord;
use cuflight_format::{EventKind, RawEvent};
use std::cell::Cell;
use std::ffi::{c_char, CStr};

/// Frames kept per stack; deeper ones are left out (the last kept frame says so).
pub const MAX_FRAMES: usize = cuflight_format::view::MAX_PY_FRAMES;
/// Python frames looked at for the [`MAX_FRAMES`] kept (some may turn out not to hold code).
const CANDIDATES: usize = MAX_FRAMES + 8;

/// The interpreter of this process, found once.
struct Interp {
    layout: &'static Layout,
    this_thread: extern "C" fn() -> usize,
    /// `PyInterpreterState_Main`: where the list of thread states starts (for threads that run no Python).
    main_interp: Option<extern "C" fn() -> usize>,
    code_type: u64,
    str_type: u64,
    bytes_type: u64,
}

static INTERP: once_cell::sync::OnceCell<Option<Interp>> = once_cell::sync::OnceCell::new();

fn interp() -> Option<&'static Interp> {
    INTERP.get_or_init(find_interpreter).as_ref()
}

/// The address of symbol `name` in the process (0 when absent).
fn symbol(name: &CStr) -> u64 {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the name up.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as u64 }
}

/// The reader's verdict on this process's interpreter (`python_reader` encoded), once looked up: shown by `record`
/// and `stats`, so that a Python process without stacks says why.
static VERDICT: AtomicU32 = AtomicU32::new(0);

/// The verdict on the interpreter, 0 before the reader looked (or where there is no Python).
pub fn verdict() -> u32 {
    VERDICT.load(Ordering::Relaxed)
}

fn set_verdict(code: u32, minor: u32) {
    let v = python_reader::encode(code, minor);
    VERDICT.store(v, Ordering::Relaxed);
    if let Some(agent) = crate::state::existing_agent() {
        agent.seg.header().python_reader.store(v, Ordering::Relaxed);
    }
}

fn find_interpreter() -> Option<Interp> {
    let this_thread = symbol(c"PyGILState_GetThisThreadState");
    if this_thread == 0 {
        return None;
    }
    let minor = python_minor()?;
    // The release's layouts (from 3.14 a free-threaded one beside the default build's): the first that the
    // interpreter's own description agrees with.
    let runtime = symbol(c"_PyRuntime");
    let mut candidates = layouts::LAYOUTS.iter().filter(|l| l.minor == minor).peekable();
    if candidates.peek().is_none() {
        set_verdict(python_reader::UNKNOWN_RELEASE, minor);
        return None;
    }
    // "Free-threaded" only when every layout of the release is the other build's; else "another layout".
    let mut only_free_threaded = true;
    let layout = candidates.find(|l| match check_description(l, runtime) {
        Ok(()) => true,
        Err(m) => {
            only_free_threaded &= m == Mismatch::FreeThreaded;
            false
        }
    });
    let Some(layout) = layout else {
        let code = if only_free_threaded { python_reader::FREE_THREADED } else { python_reader::OTHER_LAYOUT };
        set_verdict(code, minor);
        return None;
    };
    let (code_type, str_type, bytes_type) =
        (symbol(c"PyCode_Type"), symbol(c"PyUnicode_Type"), symbol(c"PyBytes_Type"));
    if code_type == 0 || str_type == 0 || bytes_type == 0 {
        set_verdict(python_reader::NO_TYPES, minor);
        return None;
    }
    set_verdict(python_reader::READING, minor);
    // SAFETY: the symbol is CPython's `PyThreadState *PyGILState_GetThisThreadState(void)` (pystate.h): no
    // arguments, a pointer-sized result, safe to call without the GIL.
    let this_thread = unsafe { std::mem::transmute::<u64, extern "C" fn() -> usize>(this_thread) };
    let main_interp = match symbol(c"PyInterpreterState_Main") {
        0 => None,
        // SAFETY: CPython's `PyInterpreterState *PyInterpreterState_Main(void)` (pystate.h, 3.8+) returns a
        // global's value: no arguments, a pointer-sized result, no GIL needed.
        f => Some(unsafe { std::mem::transmute::<u64, extern "C" fn() -> usize>(f) }),
    };
    Some(Interp { layout, this_thread, main_interp, code_type, str_type, bytes_type })
}

/// The minor version of the running CPython 3: `Py_Version` (3.11+, PY_VERSION_HEX), else `Py_GetVersion()`.
fn python_minor() -> Option<u32> {
    let hex = symbol(c"Py_Version");
    if hex != 0 {
        let mut b = [0u8; 4];
        if !memory::read(hex, &mut b) {
            return None;
        }
        let v = u32::from_le_bytes(b);
        return (v >> 24 == 3).then_some((v >> 16) & 0xff);
    }
    let f = symbol(c"Py_GetVersion");
    if f == 0 {
        return None;
    }
    // SAFETY: CPython's `const char *Py_GetVersion(void)` (pylifecycle.h), which formats a static buffer; no
    // Python code runs and no GIL is needed.
    let f = unsafe { std::mem::transmute::<u64, extern "C" fn() -> *const c_char>(f) };
    let p = f();
    if p.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated static buffer.
    let text = unsafe { CStr::from_ptr(p) }.to_bytes();
    let text = std::str::from_utf8(text).ok()?;
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    (parts.next()? == "3").then_some(())?;
    parts.next()?.parse().ok()
}

/// Entries of each per-thread cache: 128 code objects and 128 call sites (a training step's stacks hold some
/// dozens of each), 7 KiB a thread.
const CACHED: usize = 128;

/// Per-thread state of the reader: interned names by code object, and the launch count for sampling.
pub struct ThreadPy {
    /// (code object, filename object, name object, file id << 32 | function id), by code object.
    codes: cache::Assoc<4, 1, CACHED>,
    /// (code object, byte offset, line): the line tables of the same call sites are not read again.
    lines: cache::Assoc<3, 2, CACHED>,
    /// Free-threaded 3.14+: (code object, its array of bytecode copies, copy, where that copy starts): this
    /// thread's own copy of each code object's bytecode, found once.
    copies: cache::Assoc<4, 3, 32>,
    strings_epoch: Cell<u64>,
    /// Launches left before this thread's next sampled one (0 before its first, which is sampled).
    pub launches: Cell<u32>,
    /// This thread's borrowing of the main thread's stack (it runs no Python): (window start, stacks borrowed in
    /// it). At most [`BORROW_BUDGET`] a window, so a C++ thread that synchronises in a tight loop pays a bounded
    /// share of its time for them.
    borrowed: Cell<(u64, u32)>,
    /// Where this thread's last walk found its frames and code: read first, in one call, by the next.
    last_walk: Cell<walk::LastWalk>,
}

impl ThreadPy {
    pub const fn new() -> Self {
        ThreadPy {
            codes: cache::Assoc::new(),
            lines: cache::Assoc::new(),
            copies: cache::Assoc::new(),
            strings_epoch: Cell::new(0),
            borrowed: Cell::new((0, 0)),
            last_walk: Cell::new(walk::LastWalk::NONE),
            launches: Cell::new(0),
        }
    }

    fn lookup(&self, code: u64, file: u64, name: u64) -> Option<(u32, u32)> {
        let epoch = crate::state::strings_epoch();
        if self.strings_epoch.get() != epoch {
            // String ids belong to the segment's current strings: a fork child, and each window, start over.
            self.codes.clear();
            self.strings_epoch.set(epoch);
        }
        let [_, f, n, ids] = self.codes.get(code >> 4, &[code])?;
        (f == file && n == name).then_some(((ids >> 32) as u32, ids as u32))
    }

    /// Where copy `copy` of the bytecode of `code` (whose copies are listed at `array`) starts, when found before.
    fn copy_start(&self, code: u64, array: u64, copy: u32) -> Option<u64> {
        self.copies.get(code >> 4, &[code, array, copy as u64]).map(|e| e[3])
    }

    fn store_copy_start(&self, code: u64, array: u64, copy: u32, start: u64) {
        self.copies.put(code >> 4, [code, array, copy as u64, start]);
    }

    fn line_hash(code: u64, offset: u64) -> u64 {
        (code >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ offset
    }

    /// The line of `offset` in `code` (whose header was just read: its names matched the name cache), cached.
    fn line(&self, code: u64, offset: u64, read: impl FnOnce() -> Option<u32>) -> Option<u32> {
        if let Some([_, _, line]) = self.lines.get(Self::line_hash(code, offset), &[code, offset]) {
            return (line != 0).then_some(line as u32);
        }
        let line = read();
        self.lines.put(Self::line_hash(code, offset), [code, offset, line.unwrap_or(0) as u64]);
        line
    }

    /// Caches the line of a code object seen for the first time (whatever an older one at its address left).
    fn set_line(&self, code: u64, offset: u64, line: Option<u32>) -> Option<u32> {
        self.lines.put(Self::line_hash(code, offset), [code, offset, line.unwrap_or(0) as u64]);
        line
    }

    fn store(&self, code: u64, file: u64, name: u64, ids: (u32, u32)) {
        self.codes.put(code >> 4, [code, file, name, (ids.0 as u64) << 32 | ids.1 as u64]);
    }
}

impl Default for ThreadPy {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Clone, Copy, Default)]
struct Frame {
    file: u32,
    func: u32,
    line: u32,
}

/// Launches between two sampled ones on a thread (`CUFLIGHT_PY_LAUNCH_EVERY`, default 1024: about 9 ns a launch
/// at 9 us a stack of 16 distinct functions on cudasim; 0: none).
pub fn launch_every() -> u32 {
    static EVERY: once_cell::sync::OnceCell<u32> = once_cell::sync::OnceCell::new();
    *EVERY.get_or_init(|| {
        std::env::var("CUFLIGHT_PY_LAUNCH_EVERY").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1024)
    })
}

/// Whether this process runs CPython that the reader knows (looked up once).
pub fn available() -> bool {
    interp().is_some() && !memory::refused()
}

/// Pushes the calling thread's Python stack as [`EventKind::PyFrame`] events of call `correlation` started at
/// `start`. A thread of a Python process that runs no Python gets the main thread's stack, marked so: PyTorch's
/// autograd device threads (a thread state, no frames) launch the backward pass while the main thread waits in
/// `loss.backward()`, the line that answers "where in my code". Nothing in a process without Python.
pub fn record(py: &ThreadPy, correlation: u32, start: u64, push: &impl Fn(RawEvent)) {
    let Some(interp) = interp() else { return };
    let began = crate::clock::monotonic_ns();
    read_and_push(interp, py, correlation, start, began, push);
    // What the reading cost the program, counted where it is paid (`stats` shows it beside the process).
    if let Some(agent) = crate::state::existing_agent() {
        let h = agent.seg.header();
        h.python_stacks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let spent = crate::clock::monotonic_ns().saturating_sub(began);
        h.python_stack_ns.fetch_add(spent, std::sync::atomic::Ordering::Relaxed);
    }
}

fn read_and_push(interp: &Interp, py: &ThreadPy, correlation: u32, start: u64, began: u64, push: &impl Fn(RawEvent)) {
    let mut frames = [Frame::default(); MAX_FRAMES];
    let own = (interp.this_thread)() as u64;
    let (mut n, mut truncated) = walk::walk(interp, py, own, &mut frames);
    let mut of_main_thread = false;
    if n == 0 && may_borrow(py, start) {
        if let Some(found) = main_stack(interp, py, own, &mut frames) {
            (n, truncated) = found;
            of_main_thread = true;
        }
    }
    // The read's own time on the innermost frame: the report charges the stacks read in steps to them.
    let read_ns = crate::clock::monotonic_ns().saturating_sub(began);
    for (depth, f) in frames[..n].iter().enumerate() {
        let mut ev = RawEvent::new(EventKind::PyFrame, 0, start, start);
        (ev.correlation, ev.name) = (correlation, f.func);
        ev.set_py_frame(PyFrameRecord {
            depth: depth as u32,
            file: f.file,
            line: f.line,
            truncated: truncated && depth + 1 == n,
            of_main_thread,
            imported: false,
            read_ns: if depth == 0 { read_ns } else { 0 },
        });
        push(ev);
    }
}

/// A thread running no Python borrows the main thread's stack at most [`BORROW_BUDGET`] times a window of
/// [`BORROW_WINDOW_NS`]: with a stack read at 5 to 10 µs on cudasim (`benches/python-stacks`), under 2% of
/// such a thread's time, however often it calls.
const BORROW_WINDOW_NS: u64 = 64_000_000;
const BORROW_BUDGET: u32 = 64;

fn may_borrow(py: &ThreadPy, now: u64) -> bool {
    let (window, used) = py.borrowed.get();
    let (window, used) = if now.saturating_sub(window) >= BORROW_WINDOW_NS { (now, 0) } else { (window, used) };
    let ok = used < BORROW_BUDGET;
    py.borrowed.set((window, used + ok as u32));
    ok
}

/// Thread states looked at, at most (a list in freed memory must end).
const MAX_THREADS: usize = 64;

/// The thread state whose stack was last lent to a thread running no Python: the main thread's lives as long
/// as the process, so it is tried first, before the list is walked again.
static LENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The stack of the main interpreter's oldest thread with frames but `own` (thread states are pushed at the
/// list's head, so the last is the main thread's unless it ended): its frame count and truncation.
fn main_stack(i: &Interp, py: &ThreadPy, own: u64, out: &mut [Frame; MAX_FRAMES]) -> Option<(usize, bool)> {
    use std::sync::atomic::Ordering::Relaxed;
    let interp = (i.main_interp?)() as u64;
    if interp == 0 {
        return None;
    }
    let lent = LENT.load(Relaxed);
    if lent != 0 && lent != own && belongs(i, lent, interp) {
        let found = walk::walk(i, py, lent, out);
        if found.0 > 0 {
            return Some(found);
        }
    }
    let mut states = [0u64; MAX_THREADS];
    let count = thread_states(i, interp, own, &mut states);
    for &tstate in states[..count].iter().rev() {
        let found = walk::walk(i, py, tstate, out);
        if found.0 > 0 {
            LENT.store(tstate, Relaxed);
            return Some(found);
        }
    }
    None
}

/// Whether `tstate` reads as a thread state of `interp` (a freed one may not).
fn belongs(i: &Interp, tstate: u64, interp: u64) -> bool {
    let mut word = [0u8; 8];
    memory::read(tstate + i.layout.tstate_interp as u64, &mut word) && u64::from_le_bytes(word) == interp
}

/// The thread states of `interp` but `own`, newest first; how many were written. Every read is checked and
/// every state must name `interp`: the list may change meanwhile (a ctypes callback's thread state comes and
/// goes, freed under the reader), which at worst ends it early.
fn thread_states(i: &Interp, interp: u64, own: u64, out: &mut [u64; MAX_THREADS]) -> usize {
    let mut word = [0u8; 8];
    if !memory::read(interp + i.layout.interp_threads_head as u64, &mut word) {
        return 0;
    }
    let (mut tstate, mut n) = (u64::from_le_bytes(word), 0);
    while tstate != 0 && n < MAX_THREADS && belongs(i, tstate, interp) {
        if tstate != own {
            out[n] = tstate;
            n += 1;
        }
        if !memory::read(tstate + i.layout.tstate_next as u64, &mut word) {
            break;
        }
        tstate = u64::from_le_bytes(word);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_borrows_a_bounded_number_of_stacks_a_window() {
        let py = ThreadPy::new();
        let t0 = 5 * BORROW_WINDOW_NS;
        let granted = (0..200).filter(|&i| may_borrow(&py, t0 + i)).count();
        assert_eq!(granted, BORROW_BUDGET as usize);
        // The next window starts afresh.
        assert!(may_borrow(&py, t0 + BORROW_WINDOW_NS));
    }
}
