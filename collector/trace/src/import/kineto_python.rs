//! torch.profiler's Python stacks (`with_stack=True`: a `python_function` event per Python call, nested per
//! thread) turned into cuflight's own: every CUDA call the agent would read a stack at (synchronisations, copies,
//! allocations, launches: [`CallEffects::python_stacks`]) gets the functions enclosing it on its thread as
//! [`EventKind::PyFrame`] events, innermost first, marked [`cuflight_format::event::PYFRAME_IMPORTED`]. Stats, report and Perfetto then
//! name source lines for an imported trace as for a recorded one.

use super::builder::Processes;
use crate::model::trace::{Process, StringTable};
use cuflight_format::calls::{CallEffects, PythonStacks};
use cuflight_format::view::PyFrameRecord;
use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;

/// Frames kept per call, as the agent keeps.
const MAX_FRAMES: usize = cuflight_format::view::MAX_PY_FRAMES;
/// `python_function` events kept at most (24 bytes each): a trace with more keeps no stacks and says so.
pub const MAX_RANGES: usize = 8 << 20;

/// One `python_function` event: its thread, span, and name (an id of the importer's table of Python names).
#[derive(Clone, Copy, Debug)]
pub struct PyRange {
    pub tid: u32,
    pub start: u64,
    pub end: u64,
    pub name: u32,
}

/// A Python call's name as torch.profiler writes it, `file(line): function`, as (file, line, function). Anything
/// else is a pseudo-file in Python's own notation, `<...>`, never taken for the program's code: a C function
/// (`<built-in method item of Tensor object at 0x7f...>`, without the object's address, so that each method is one
/// name) or a module's own event (`nn.Module: Qwen2Attention_5`).
pub fn parse(name: &str) -> (std::borrow::Cow<'_, str>, u32, &str) {
    if let Some((head, func)) = name.split_once("): ") {
        if let Some((file, line)) = head.rsplit_once('(') {
            if let Ok(line) = line.parse() {
                return (file.into(), line, func);
            }
        }
    }
    let name = name.find(" at 0x").map_or(name, |at| &name[..at]);
    let inner = name.trim_start_matches('<').trim_end_matches('>');
    (format!("<{inner}>").into(), 0, "")
}

/// A CUDA call that gets a stack: its thread, start and correlation id.
#[derive(Clone, Copy, Debug)]
pub struct PyCall {
    pub tid: u32,
    pub start: u64,
    pub correlation: u32,
}

/// Whether the agent would read a stack at the call named `name`.
pub fn wants_stack(name: &str) -> bool {
    CallEffects::of(name).python_stacks() != PythonStacks::None
}

/// The frames of each call in `calls` from `ranges` (one process's): `frame(call, depth, range name, truncated)`
/// for each, innermost (depth 0) first.
pub fn stacks(mut ranges: Vec<PyRange>, mut calls: Vec<PyCall>, mut frame: impl FnMut(&PyCall, u32, u32, bool)) {
    // Per thread, by start, an enclosing range before the ranges it encloses.
    ranges.sort_by_key(|r| (r.tid, r.start, std::cmp::Reverse(r.end)));
    calls.sort_by_key(|c| c.start);
    let mut threads: FxHashMap<u32, Thread> = FxHashMap::default();
    for (i, r) in ranges.iter().enumerate() {
        threads.entry(r.tid).or_insert(Thread { next: i, end: i, open: Vec::new() }).end = i + 1;
    }
    for call in &calls {
        let Some(th) = threads.get_mut(&call.tid) else { continue };
        let enclosing = th.enclosing(&ranges, call.start);
        let n = enclosing.len();
        for (depth, &i) in enclosing.iter().take(MAX_FRAMES).enumerate() {
            frame(call, depth as u32, ranges[i].name, n > MAX_FRAMES && depth + 1 == MAX_FRAMES);
        }
    }
}

/// One frame as an event of process `p` (strings interned in `t`; `cache`: a range name's ids, parsed once). It
/// starts 1 ns before its call, so that it sorts before the call however the import stores its events (the
/// agent's frames share their call's start and are written first).
pub fn frame_event(
    p: &mut Process,
    t: &mut StringTable,
    cache: &mut FxHashMap<u32, (u32, u32, u32)>,
    (call, depth, truncated): (&PyCall, u32, bool),
    (name_id, name): (u32, &str),
) -> RawEvent {
    let (file, func, line) = *cache.entry(name_id).or_insert_with(|| {
        let (file, line, func) = parse(name);
        (t.id(p, &file), t.id(p, func), line)
    });
    let at = call.start.saturating_sub(1);
    let mut f = RawEvent::new(EventKind::PyFrame, call.tid, at, at);
    (f.correlation, f.name) = (call.correlation, func);
    f.set_py_frame(PyFrameRecord { depth, file, line, truncated, of_main_thread: false, imported: true, read_ns: 0 });
    f
}

/// What the import keeps of a trace's Python stacks: `python_function` events and the calls that get a stack,
/// by process, both counted against [`MAX_RANGES`]; past it none is joined (and the processes say so).
#[derive(Default)]
pub struct Stacks {
    ranges: FxHashMap<u32, Vec<PyRange>>,
    calls: FxHashMap<u32, Vec<PyCall>>,
    /// Range names, each kept once (ids from 1).
    names: FxHashMap<String, u32>,
    by_id: Vec<String>,
    kept: usize,
    over: bool,
}

impl Stacks {
    fn keep(&mut self) -> bool {
        self.over |= self.kept >= MAX_RANGES;
        self.kept += 1;
        !self.over
    }

    /// A `python_function` event of process `pid`.
    pub fn range(&mut self, pid: u32, tid: u32, (start, end): (u64, u64), name: &str) {
        if !self.keep() {
            return;
        }
        let id = match self.names.get(name) {
            Some(&id) => id,
            None => {
                self.by_id.push(name.to_string());
                self.names.insert(name.to_string(), self.by_id.len() as u32);
                self.by_id.len() as u32
            }
        };
        self.ranges.entry(pid).or_default().push(PyRange { tid, start, end, name: id });
    }

    /// A CUDA call named `name` of process `pid`, kept when it gets a stack and the process has Python ranges by
    /// now: a trace without them (most) keeps nothing, and torch.profiler writes its CPU-side events, Python's
    /// among them, before the CUDA activities (as does cuflight's export: a call's stack before the call).
    pub fn call(&mut self, pid: u32, name: &str, call: PyCall) {
        if self.ranges.contains_key(&pid) && wants_stack(name) && self.keep() {
            self.calls.entry(pid).or_default().push(call);
        }
    }

    /// Whether process `pid` had Python stacks too many to join.
    pub fn too_many(&self, pid: u32) -> bool {
        self.over && self.ranges.contains_key(&pid)
    }

    /// The calls' frames, pushed into `host` as the other events are (in memory or set aside alike).
    pub fn join(&mut self, host: &mut Processes) {
        if self.over {
            return;
        }
        for (pid, ranges) in std::mem::take(&mut self.ranges) {
            let calls = self.calls.remove(&pid).unwrap_or_default();
            let (mut frames, mut cache) = (Vec::new(), FxHashMap::default());
            let (p, t) = host.process(pid);
            stacks(ranges, calls, |call, depth, name, truncated| {
                let text = (name as usize).checked_sub(1).and_then(|i| self.by_id.get(i)).map_or("", String::as_str);
                frames.push(frame_event(p, t, &mut cache, (call, depth, truncated), (name, text)));
            });
            let n = frames.len();
            p.events.extend(frames);
            host.held(n);
        }
    }
}

/// A thread's ranges, `ranges[next..end]` still to open, and those open at the last call (outermost first).
struct Thread {
    next: usize,
    end: usize,
    open: Vec<usize>,
}

impl Thread {
    /// The ranges enclosing time `at` (calls come in time order), innermost first.
    fn enclosing(&mut self, ranges: &[PyRange], at: u64) -> Vec<usize> {
        while self.next < self.end && ranges[self.next].start <= at {
            let start = ranges[self.next].start;
            // Ranges that ended before this one began are siblings done with.
            while self.open.last().is_some_and(|&o| ranges[o].end <= start) {
                self.open.pop();
            }
            self.open.push(self.next);
            self.next += 1;
        }
        while self.open.last().is_some_and(|&o| ranges[o].end < at) {
            self.open.pop();
        }
        self.open.iter().rev().copied().filter(|&o| ranges[o].end >= at).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_torch_profiler_writes_them() {
        let parsed = |n| {
            let (f, l, func) = parse(n);
            (f.into_owned(), l, func)
        };
        let module = "torch/nn/modules/module.py";
        assert_eq!(parsed("torch/nn/modules/module.py(1743): _call_impl"), (module.into(), 1743, "_call_impl"));
        assert_eq!(parsed("train.py(57): Trainer.step"), ("train.py".into(), 57, "Trainer.step"));
        assert_eq!(parsed("<string>(1): <module>"), ("<string>".into(), 1, "<module>"));
        let builtin = "<built-in method item of Tensor object>";
        assert_eq!(parsed("<built-in method item of Tensor object at 0x7d67180cc500>"), (builtin.into(), 0, ""));
        assert_eq!(parsed("<built-in function linear>"), ("<built-in function linear>".into(), 0, ""));
        assert_eq!(parsed("nn.Module: Qwen2Attention_5"), ("<nn.Module: Qwen2Attention_5>".into(), 0, ""));
    }

    #[test]
    fn calls_get_the_ranges_enclosing_them_innermost_first() {
        let names = ["", "train.py(10): main", "train.py(20): step", "train.py(30): log", "lib.py(5): helper"];
        let range = |tid, start, end, name| PyRange { tid, start, end, name };
        // main [0, 100) encloses step [10, 50) (which encloses log [20, 30)) and helper [60, 90); thread 2 is apart.
        let ranges = vec![range(1, 10, 50, 2), range(1, 0, 100, 1), range(1, 20, 30, 3), range(1, 60, 90, 4)];
        let call = |tid, start, correlation| PyCall { tid, start, correlation };
        let calls = vec![call(1, 70, 4), call(1, 25, 1), call(1, 40, 2), call(2, 70, 5)];
        let mut got: Vec<(u32, u32, &str)> = Vec::new();
        stacks(ranges, calls, |c, depth, name, truncated| {
            assert!(!truncated);
            got.push((c.correlation, depth, names[name as usize]));
        });
        let want = [
            (1, 0, "train.py(30): log"),
            (1, 1, "train.py(20): step"),
            (1, 2, "train.py(10): main"),
            (2, 0, "train.py(20): step"),
            (2, 1, "train.py(10): main"),
            (4, 0, "lib.py(5): helper"),
            (4, 1, "train.py(10): main"),
        ];
        assert_eq!(got, want);
        assert!(
            wants_stack("cudaStreamSynchronize") && wants_stack("cudaLaunchKernel") && !wants_stack("cudaGetDevice")
        );
        // As an event: 1 ns before the call, its depth, marked imported, names interned once.
        let (mut p, mut t, mut cache) = (Process::default(), StringTable::default(), FxHashMap::default());
        let c = call(1, 25, 1);
        let f = frame_event(&mut p, &mut t, &mut cache, (&c, 2, false), (1, names[1]));
        let frame = f.as_py_frame();
        assert_eq!(
            (f.start, frame.depth, f.correlation, frame.imported, frame.truncated, frame.line),
            (24, 2, 1, true, false, 10)
        );
        assert_eq!((p.string(f.name), p.string(frame.file)), ("main", "train.py"));
    }
}
