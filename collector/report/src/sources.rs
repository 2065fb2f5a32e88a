//! The Python source lines behind a finding's calls (issue 29): each call with a recorded stack is blamed on its
//! innermost frame in the program's own code ([`cuflight_trace::model::pystacks`]), and the findings whose cause
//! is a host call (synchronisation, allocation, launches, copies from or to pageable memory) list their lines, most
//! costly first.

use cuflight_format::calls::{CallEffects, PythonStacks};
use cuflight_format::RawEvent;
use cuflight_trace::model::launches::Call;
use cuflight_trace::model::pystacks::{blamed_frame, PyFrame, StackJoin};
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Lines listed per finding.
const MAX_SOURCES: usize = 5;

/// One line of the program behind a finding's calls.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Source {
    /// The Python source file (as the interpreter names it).
    pub file: String,
    /// The line.
    pub line: u32,
    /// The function it is in.
    pub function: String,
    /// Calls blamed on this line (for launches: the sampled ones).
    pub count: u64,
    /// Their time (host time of the calls, or the idle time they caused where the finding measures that).
    pub ns: u64,
}

impl Source {
    /// Where, as a report line says it: "FILE:LINE in FUNCTION" (`short`: the file's name without its directory), or a
    /// C function's pseudo-file alone (`<built-in method item of Tensor object>`: no line, no function, and slashes
    /// of its own that are no directory).
    pub fn location(&self, short: bool) -> String {
        if self.is_c_function() {
            return self.file.clone();
        }
        let file = match short {
            true => std::path::Path::new(&self.file).file_name().and_then(|n| n.to_str()).unwrap_or(&self.file),
            false => &self.file,
        };
        format!("{file}:{} in {}", self.line, self.function)
    }

    /// A C function's pseudo-file (torch.profiler's `<built-in ...>` frames): no source line to show.
    pub fn is_c_function(&self) -> bool {
        self.file.starts_with('<') && self.line == 0
    }
}

/// Which finding a line's calls feed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum SourceKind {
    Sync,
    Alloc,
    Launch,
    /// Copies whose host memory was pageable (known from the copy's own record, which comes after its call).
    Pageable,
}

/// Copy calls waiting for their copy's record, at most (a record that never comes must not keep its call).
const MAX_COPIES_PENDING: usize = 4096;

/// Lines by kind of call, for one process's sweep.
#[derive(Default)]
pub struct Sources {
    join: StackJoin,
    lines: FxHashMap<(SourceKind, PyFrame), (u64, u64)>,
    /// Copy calls with a line, by their launch (start, thread) as
    /// [`LaunchJoin`](cuflight_trace::model::launches::LaunchJoin) names it, until their copy's
    /// record says whether the memory was pageable.
    copies: FxHashMap<(u64, u32), PyFrame>,
}

impl Sources {
    /// Feeds one event; for an API call whose stack was recorded, the line it is blamed on.
    pub fn feed(&mut self, p: &Process, e: &RawEvent) -> Option<PyFrame> {
        let mut blamed = None;
        self.join.feed(e, |_, frames| blamed = blamed_frame(p, frames).copied());
        blamed
    }

    /// Counts call `e` (blamed on `frame`) as a launch when it is one: launches are sampled, so only the calls
    /// that carried a stack say where launches come from.
    pub fn launch(&mut self, p: &Process, e: &RawEvent, frame: Option<PyFrame>) {
        if frame.is_some() && CallEffects::of(p.string(e.name)).python_stacks() == PythonStacks::Sampled {
            self.add(SourceKind::Launch, frame, e.duration());
        }
    }

    /// A copy call blamed on `frame`, whose copy will join `launch`: its line counts once that record is seen.
    pub fn copy_call(&mut self, launch: &Call, frame: Option<PyFrame>) {
        if let Some(f) = frame {
            if self.copies.len() >= MAX_COPIES_PENDING {
                self.copies.clear();
            }
            self.copies.insert((launch.start, launch.tid), f);
        }
    }

    /// The record of a copy (joined to `launch`, if its call is in the trace) that touched pageable memory for
    /// `ns` (in a step).
    pub fn pageable_copy(&mut self, launch: Option<&Call>, ns: u64) {
        let frame = launch.and_then(|c| self.copies.remove(&(c.start, c.tid)));
        self.add(SourceKind::Pageable, frame, ns);
    }

    /// The record of a copy that did not touch pageable memory: its call is no longer waited for.
    pub fn other_copy(&mut self, launch: Option<&Call>) {
        if let Some(c) = launch {
            self.copies.remove(&(c.start, c.tid));
        }
    }

    pub fn add(&mut self, kind: SourceKind, frame: Option<PyFrame>, ns: u64) {
        if let Some(f) = frame {
            let row = self.lines.entry((kind, f)).or_default();
            row.0 += 1;
            row.1 += ns;
        }
    }

    /// The lines of `kind`, most costly first.
    pub fn rows(&self, kind: SourceKind, p: &Process) -> Vec<Source> {
        let mut rows: Vec<Source> = self
            .lines
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, f), &(count, ns))| Source {
                file: p.string(f.file).to_string(),
                line: f.line,
                function: p.string(f.func).to_string(),
                count,
                ns,
            })
            .collect();
        rows.sort_by(|a, b| {
            (b.ns, b.count).cmp(&(a.ns, a.count)).then_with(|| (&a.file, a.line).cmp(&(&b.file, b.line)))
        });
        rows.truncate(MAX_SOURCES);
        rows
    }
}

/// The text of line `line` of `file`, trimmed, when the file is a readable regular file (the report usually runs
/// where the program ran); None otherwise.
pub fn source_text(file: &str, line: u32) -> Option<String> {
    let meta = std::fs::metadata(file).ok()?;
    if !meta.is_file() || meta.len() > 16 << 20 || line == 0 {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let code = text.lines().nth(line as usize - 1)?.trim();
    let mut code: String = code.chars().take(100).collect();
    if code.len() < text.lines().nth(line as usize - 1)?.trim().len() {
        code.push('…');
    }
    (!code.is_empty()).then_some(code)
}
