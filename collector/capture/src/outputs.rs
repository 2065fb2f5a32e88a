//! Where a recording's blocks go: one trace file, or, when its name holds `%r` (the rank), `%h` (the host) or
//! `%p` (the pid), one file per value, as `nsys profile -o run.%q{RANK}` does (`%%` is a `%`). A process's file
//! is known from its facts, which the recorder writes before any of its blocks; files open as their first
//! process appears, each through [`Output`] (never replacing a file without `--force`) and its own writer
//! thread ([`Sink`]).

use super::sink::Sink;
use cuflight_format::file::{Footer, ProcessInfo, TraceWriter};
use cuflight_format::RawEvent;
use cuflight_trace::output::{Output, OutputError};
use std::collections::{BTreeMap, HashMap};
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Why a recording could not run or write its trace (shared by `record`, `attach` and `dump`, and written here,
/// where the outputs that fail are opened).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot run '{command}': {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: cuflight_format::file::FileError },
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("cannot open the agents' channel: {0}")]
    Channel(cuflight_format::channel::ChannelError),
}

struct File {
    sink: Sink,
    output: Output,
    events: u64,
    /// Bytes handed to the file: its size where it has none (a pipe, a device).
    written: Arc<AtomicU64>,
}

impl File {
    fn bytes(&self, name: &str) -> u64 {
        size_of(name, &self.written)
    }
}

/// The file's size on disk, or what was written into it where it has none (a pipe, a device).
fn size_of(name: &str, written: &AtomicU64) -> u64 {
    match std::fs::metadata(name) {
        Ok(m) if m.is_file() => m.len(),
        _ => written.load(Ordering::Relaxed),
    }
}

/// Counts the bytes that pass through it.
struct Counted<W> {
    inner: W,
    count: Arc<AtomicU64>,
}

impl<W: std::io::Write> std::io::Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub struct Outputs {
    pattern: String,
    per_process: bool,
    force: bool,
    files: BTreeMap<String, File>,
    /// Process key → its file.
    route: HashMap<u32, String>,
    /// The first failure to open a file (the recording stops on it).
    error: Option<String>,
}

/// A written file: (path, bytes).
pub type Written = Vec<(String, u64)>;

/// Checks a name's `%` codes; true when it names one file per process group.
pub fn is_pattern(name: &str) -> Result<bool, String> {
    let mut chars = name.chars();
    let mut pattern = false;
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('r' | 'h' | 'p') => pattern = true,
                Some('%') => {}
                other => {
                    return Err(format!(
                        "{name}: unknown code %{} in the output name (use %r rank, %h host, %p pid, %% a %)",
                        other.map_or(String::new(), String::from)
                    ))
                }
            }
        }
    }
    Ok(pattern)
}

/// The file name for a process: `%r` → its rank (`norank` when it has none), `%h` → its host (characters
/// outside `[A-Za-z0-9._-]` as `_`), `%p` → its pid.
pub fn expand(pattern: &str, info: &ProcessInfo) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('r') => out.push_str(&info.rank.map_or("norank".to_string(), |r| r.to_string())),
            Some('h') => out.push_str(&cuflight_trace::model::host::host_value(&info.host)),
            Some('p') => out.push_str(&info.pid.to_string()),
            Some(c) => out.push(c),
            None => out.push('%'),
        }
    }
    out
}

impl Outputs {
    /// A plain name opens its file now (so that an existing file is refused before the program starts).
    pub fn open(path: &Path, force: bool) -> Result<Outputs, RecordError> {
        let pattern = path.display().to_string();
        let per_process = is_pattern(&pattern).map_err(|why| RecordError::Write {
            path: pattern.clone(),
            source: cuflight_format::file::FileError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, why)),
        })?;
        let mut o = Outputs { pattern, per_process, force, files: BTreeMap::new(), route: HashMap::new(), error: None };
        if !per_process {
            let name = o.pattern.clone();
            o.open_file(&name)?;
        }
        Ok(o)
    }

    fn open_file(&mut self, name: &str) -> Result<(), RecordError> {
        let output = Output::create(Path::new(name), &[], self.force)?;
        let written = Arc::new(AtomicU64::new(0));
        let counted = Counted { inner: output.try_clone()?, count: written.clone() };
        let mut writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, counted))
            .map_err(|source| RecordError::Write { path: name.to_string(), source })?;
        // The file header reaches the file at once: a collector killed before its first block leaves a trace
        // that reads as cut short with nothing in it, not an empty file of unknown format. A failure here (a full
        // disk) is left to the first block's write, which stops the recording and never the program.
        let _ = writer.flush();
        self.files.insert(name.to_string(), File { sink: Sink::start(writer), output, events: 0, written });
        Ok(())
    }

    /// The name as given (with its `%` codes).
    pub fn name(&self) -> &str {
        &self.pattern
    }

    fn file_of(&mut self, key: u32) -> Option<&mut File> {
        let name = if self.per_process { self.route.get(&key)? } else { self.files.keys().next()? };
        let name = name.clone();
        self.files.get_mut(&name)
    }

    /// A process's facts: routes the process (opening its file on first sight) and writes them.
    pub fn process(&mut self, key: u32, info: ProcessInfo) {
        if self.per_process && !self.route.contains_key(&key) {
            let name = expand(&self.pattern, &info);
            if !self.files.contains_key(&name) {
                if let Err(e) = self.open_file(&name) {
                    self.error.get_or_insert(e.to_string());
                    return;
                }
            }
            self.route.insert(key, name);
        }
        if let Some(f) = self.file_of(key) {
            f.sink.process(info);
        }
    }

    pub fn strings(&mut self, key: u32, base: u64, bytes: Vec<u8>) {
        if let Some(f) = self.file_of(key) {
            f.sink.strings(key, base, bytes);
        }
    }

    pub fn events(&mut self, key: u32, events: Vec<RawEvent>) {
        if let Some(f) = self.file_of(key) {
            f.events += events.len() as u64;
            f.sink.events(key, events);
        }
    }

    pub fn flush(&self) {
        for f in self.files.values() {
            f.sink.flush();
        }
    }

    /// The first write error, if one happened, saying which file.
    pub fn error(&self) -> Option<String> {
        self.error.clone().or_else(|| {
            self.files.iter().find_map(|(name, f)| f.sink.error().map(|e| format!("cannot write {name}: {e}")))
        })
    }

    pub fn events_written(&self) -> u64 {
        self.files.values().map(|f| f.sink.events_written()).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(name, f)| f.bytes(name)).sum()
    }

    /// Finishes every file: its footer (when the recording did not stop), then commit, or keep what reached it
    /// after a write error.
    pub fn finish(self, command: &[String], exit_code: Option<i32>, stopped: bool) -> Finished {
        let mut done = Finished { files: Vec::new(), error: self.error, unwritten: 0 };
        for (name, f) in self.files {
            let footer = Footer { events: f.events, command: command.to_vec(), exit_code };
            let mut failed = stopped || done.error.is_some();
            if let Err(e) = f.sink.finish((!failed).then_some(footer)) {
                done.error.get_or_insert(format!("cannot write {name}: {e}"));
                failed = true;
            }
            if failed {
                // Events handed to the writer that no complete block holds: lost to the error, and said so.
                let kept = if f.output.replaces() { 0 } else { crate::recover::events_kept(Path::new(&name)) };
                done.unwritten = done.unwritten.saturating_add(f.events.saturating_sub(kept));
            }
            let commit = if failed { f.output.keep_partial() } else { f.output.commit() };
            if let Err(e) = commit {
                done.error.get_or_insert(e.to_string());
            }
            let bytes = size_of(&name, &f.written);
            done.files.push((name, bytes));
        }
        done
    }
}

/// What finishing the outputs left.
pub struct Finished {
    pub files: Written,
    /// The first error.
    pub error: Option<String>,
    /// Events handed to a writer that its file does not hold (after a write error; a replacement abandoned).
    pub unwritten: u64,
}

/// The files a name with `%` codes produced, for messages ("run.0.cuf, run.1.cuf").
pub fn list(written: &Written) -> String {
    written.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_expand_per_rank_host_and_pid() {
        let info = ProcessInfo { pid: 42, rank: Some(3), host: "node-7.cluster/a".into(), ..Default::default() };
        assert_eq!(expand("run.%h.%r.cuf", &info), "run.node-7.cluster_a.3.cuf");
        assert_eq!(expand("p%p-100%%.cuf", &info), "p42-100%.cuf");
        let long = ProcessInfo { pid: 1, rank: Some(0), host: "h".repeat(300), ..Default::default() };
        assert_eq!(expand("%h.%r", &long), format!("{}.0", "h".repeat(64)));
        let none = ProcessInfo { pid: 1, ..Default::default() };
        assert_eq!(expand("run.%r.cuf", &none), "run.norank.cuf");
        assert_eq!(is_pattern("run.cuf"), Ok(false));
        assert_eq!(is_pattern("run.%r.cuf"), Ok(true));
        assert_eq!(is_pattern("100%%.cuf"), Ok(false));
        assert!(is_pattern("run.%q.cuf").unwrap_err().contains("unknown code %q"));
    }
}
