//! Python stacks joined to the calls they were read at: the agent writes a call's [`EventKind::PyFrame`] events
//! when the call enters, on the same thread, innermost frame first, stamped with the call's start; the call's
//! own event comes at its exit. So a stream in time order meets a call's frames and then the call (at an equal
//! start, frames written first stay first). One rule for stats, report and exports.

use crate::model::trace::Process;
use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;

/// One Python frame: string ids of the file and function, the line (0 unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PyFrame {
    pub file: u32,
    pub func: u32,
    pub line: u32,
}

#[derive(Default)]
struct Pending {
    correlation: u32,
    frames: Vec<PyFrame>,
    /// The frames are the main thread's: the calling thread ran no Python (autograd's device threads).
    borrowed: bool,
}

/// Joins each API call with the stack recorded for it, one process's events at a time in time order.
#[derive(Default)]
pub struct StackJoin {
    by_thread: FxHashMap<u32, Pending>,
    /// Whether any frame came yet: until then calls cost one test (most traces hold no stacks).
    seen: bool,
}

impl StackJoin {
    /// Feeds one event; `done` gets each call that had a stack, with it, when the call comes.
    pub fn feed(&mut self, e: &RawEvent, mut done: impl FnMut(&RawEvent, &[PyFrame])) {
        self.feed_marked(e, |call, frames, _| done(call, frames))
    }

    /// As [`StackJoin::feed`], also saying whether the stack was borrowed from the main thread.
    pub fn feed_marked(&mut self, e: &RawEvent, mut done: impl FnMut(&RawEvent, &[PyFrame], bool)) {
        match e.kind() {
            Some(EventKind::Api) if self.seen => {
                let Some(p) = self.by_thread.get_mut(&e.tid) else { return };
                if p.correlation == e.correlation && !p.frames.is_empty() {
                    done(e, &p.frames, p.borrowed);
                }
                p.frames.clear();
            }
            Some(EventKind::PyFrame) => {
                self.seen = true;
                let frame = e.as_py_frame();
                let p = self.by_thread.entry(e.tid).or_default();
                if frame.depth == 0 || p.correlation != e.correlation {
                    p.correlation = e.correlation;
                    p.frames.clear();
                    p.borrowed = frame.of_main_thread;
                }
                // Frames come innermost first, one per depth; anything else is not this stack's.
                if frame.depth as usize == p.frames.len() && p.frames.len() < 64 {
                    p.frames.push(PyFrame { file: frame.file, func: e.name, line: frame.line });
                }
            }
            _ => {}
        }
    }
}

/// Whether `file` is the program's own code rather than the interpreter's library or an installed package.
/// Pseudo-files (`<frozen runpy>`, `<string>`: what dataclasses, namedtuple and torch.fx generate) are not, but
/// code typed by the user is: `<stdin>` (the REPL, `python - < script`) and IPython's terminal cells
/// (`<ipython-input-N-hash>`; Jupyter's kernel names its cells `/tmp/ipykernel_PID/HASH.py`, a user file already).
/// A relative path (torch.profiler's, or a script run as `python train.py`) is the program's unless its top-level
/// module is the standard library's or a well-known package's ([`crate::model::python_modules`]).
pub fn is_user_file(file: &str) -> bool {
    if file.starts_with('<') {
        return file == "<stdin>" || file.starts_with("<ipython-input-");
    }
    let library =
        file.contains("/site-packages/") || file.contains("/dist-packages/") || file.contains("/lib/python3.");
    // A path relative to an import root (torch.profiler strips them all): its top-level module says.
    let relative_library = !file.starts_with('/') && {
        let top = file.split('/').next().unwrap_or(file);
        crate::model::python_modules::is_library(top.strip_suffix(".py").unwrap_or(top))
    };
    !library && !relative_library
}

/// A stack as text, innermost first: `file:line in function` a line.
pub fn stack_text(p: &Process, frames: &[PyFrame]) -> String {
    let mut text = String::new();
    for f in frames {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("{}:{} in {}", p.string(f.file), f.line, p.string(f.func)));
    }
    text
}

/// The frame a call is blamed on: the innermost frame in the program's own code, else the innermost in a source
/// file (a library's), else the innermost: a C function's pseudo-file (`<built-in method ...>`, torch.profiler's
/// innermost frame of most calls) names no line to look at.
pub fn blamed_frame<'a>(p: &Process, frames: &'a [PyFrame]) -> Option<&'a PyFrame> {
    frames
        .iter()
        .find(|f| is_user_file(p.string(f.file)))
        .or_else(|| frames.iter().find(|f| !p.string(f.file).starts_with('<')))
        .or(frames.first())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tid: u32, corr: u32, start: u64) -> RawEvent {
        RawEvent { correlation: corr, ..RawEvent::new(EventKind::Api, tid, start, start + 10) }
    }

    fn frame(tid: u32, corr: u32, depth: u32, line: u32) -> RawEvent {
        let mut e = RawEvent { correlation: corr, ..RawEvent::new(EventKind::PyFrame, tid, 0, 0) };
        e.set_py_frame(cuflight_format::view::PyFrameRecord { depth, line, ..Default::default() });
        e
    }

    #[test]
    fn stacks_join_their_calls_per_thread() {
        let events = [
            frame(1, 10, 0, 7),
            frame(2, 20, 0, 70),
            frame(1, 10, 1, 8),
            frame(1, 99, 2, 9), // another call's deeper frame: starts over and is dropped (no depth 0)
            frame(1, 10, 0, 7),
            frame(1, 10, 1, 8),
            call(2, 20, 100),
            call(1, 10, 100),
            call(1, 11, 200), // no stack
            frame(1, 12, 0, 5),
            frame(1, 13, 0, 6), // a stack whose call never came (dropped): not joined to 12's neighbour
            call(1, 12, 300),
        ];
        let mut join = StackJoin::default();
        let mut got = Vec::new();
        for e in &events {
            join.feed(e, |c, f| got.push((c.correlation, f.iter().map(|f| f.line).collect::<Vec<_>>())));
        }
        assert_eq!(got, vec![(20, vec![70]), (10, vec![7, 8])]);
    }

    /// A call with no frame in the program's own code is blamed on the innermost frame in a source file, not on
    /// torch.profiler's C-function pseudo-frame inside it (TraceLens's B200 trace read "at <built-in function
    /// _disabled_torch_function_impl>:0 in"); with only pseudo-frames, the innermost.
    #[test]
    fn a_call_outside_the_programs_code_is_blamed_on_a_source_line() {
        let mut p = Process::default();
        let mut t = crate::model::trace::StringTable::default();
        let mut f = |file: &str, line| PyFrame { file: t.id(&mut p, file), func: 0, line };
        let builtin = f("<built-in function _disabled_torch_function_impl>", 0);
        let library = f("torch/nn/parameter.py", 122);
        let user = f("train.py", 40);
        assert_eq!(blamed_frame(&p, &[builtin, library, user]).map(|f| f.line), Some(40));
        assert_eq!(blamed_frame(&p, &[builtin, library]).map(|f| f.line), Some(122));
        assert_eq!(blamed_frame(&p, &[builtin]).map(|f| f.file), Some(builtin.file));
    }

    #[test]
    fn library_files_are_not_blamed() {
        assert!(is_user_file("/home/me/train.py"));
        assert!(!is_user_file("/usr/lib/python3.11/threading.py"));
        assert!(!is_user_file("/venv/lib/python3.12/site-packages/torch/_tensor.py"));
        assert!(!is_user_file("<frozen runpy>"));
        assert!(!is_user_file("<string>"));
        assert!(is_user_file("<stdin>"));
        assert!(is_user_file("<ipython-input-3-5f2c1d>"));
        assert!(is_user_file("/tmp/ipykernel_4242/1234567.py"));
        // Relative to an import root, as torch.profiler writes them, or as given to the interpreter.
        assert!(!is_user_file("torch/nn/modules/module.py"));
        assert!(!is_user_file("transformers/models/qwen2/modeling_qwen2.py"));
        assert!(!is_user_file("threading.py"));
        assert!(!is_user_file("asyncio/events.py"));
        assert!(is_user_file("train.py"));
        assert!(is_user_file("mypkg/model.py"));
    }
}
