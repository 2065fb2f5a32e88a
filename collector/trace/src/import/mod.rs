//! Loading any supported trace, detected by content (never by file name): cuflight's own trace file,
//! torch.profiler/Kineto JSON (plain or gzip), and Nsight Systems SQLite exports.

mod builder;
mod job;
mod json_scan;
pub mod kineto;
mod kineto_devices;
mod kineto_document;
mod kineto_event;
mod kineto_python;
pub mod nsys;

pub use job::{JobTraces, KEEP_OPEN};

use crate::model::source::EventSource;
use crate::model::trace::{Trace, TraceError};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

thread_local! {
    /// Traces this thread opened ([`EventSource::opened_on_this_thread`]).
    static OPENED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl EventSource {
    /// Any supported trace: cuflight files stream; other formats are loaded whole first. (Here, beside the
    /// importers it calls, so that the model knows no importer.)
    pub fn open(path: &Path) -> Result<EventSource, TraceError> {
        OPENED.with(|n| n.set(n.get() + 1));
        if detect(path)? == Format::Native {
            if let Some(source) = Self::open_native(path)? {
                return Ok(source);
            }
        }
        Ok(match load_streamable(path)? {
            (trace, Some(spool)) => Self::from_spool(trace, spool, path.display().to_string()),
            (trace, None) => Self::from_trace(trace),
        })
    }

    /// How many traces this thread has opened so far: what a command over several traces costs (opening an
    /// import parses it whole), counted so that tests can hold each command to one open a trace.
    pub fn opened_on_this_thread() -> u64 {
        OPENED.with(std::cell::Cell::get)
    }
}

/// What a file holds, from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Native,
    KinetoJson,
    KinetoJsonGzip,
    NsysSqlite,
}

pub fn sniff(head: &[u8]) -> Option<Format> {
    if head.starts_with(&cuflight_format::file::FILE_MAGIC) {
        Some(Format::Native)
    } else if head.starts_with(&[0x1f, 0x8b]) {
        Some(Format::KinetoJsonGzip)
    } else if head.starts_with(b"SQLite format 3\0") {
        Some(Format::NsysSqlite)
    } else if head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        Some(Format::KinetoJson)
    } else {
        None
    }
}

/// The format of a file, from its first bytes.
pub fn detect(path: &Path) -> Result<Format, TraceError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Open { path: shown.clone(), source })?;
    let mut head = Vec::with_capacity(64);
    std::io::Read::take(file, 64)
        .read_to_end(&mut head)
        .map_err(|source| TraceError::Open { path: shown.clone(), source })?;
    sniff(&head).ok_or_else(|| TraceError::Import { what: unknown_format(path), path: shown })
}

/// Why a file is refused, with what to do where its name says what it is (the content said nothing cuflight
/// reads): an Nsight Systems report must be exported to SQLite by nsys first; a Perfetto trace is an output.
fn unknown_format(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let shown = path.display();
    if name.ends_with(".nsys-rep") || name.ends_with(".qdrep") {
        let sqlite = path.with_extension("sqlite");
        format!(
            "an Nsight Systems report, which only nsys reads: run `nsys export --type sqlite -o {} {shown}` and \
             pass the .sqlite file",
            sqlite.display()
        )
    } else if name.ends_with(".pftrace") || name.ends_with(".perfetto-trace") {
        "a Perfetto trace, which cuflight writes but does not read: pass the trace it was exported from".into()
    } else {
        "unknown format (expected a cuflight trace, Kineto JSON or an nsys SQLite export)".into()
    }
}

/// Like [`load`], for a reader that streams: a large imported trace's events are set aside on disk in sorted runs
/// (returned with the trace, whose processes then hold only facts and strings) instead of held in memory.
pub fn load_streamable(path: &Path) -> Result<(Trace, Option<crate::model::spool::Spool>), TraceError> {
    load_with(path, true)
}

/// Loads a trace of any supported format.
pub fn load(path: &Path) -> Result<Trace, TraceError> {
    load_with(path, false).map(|(t, _)| t)
}

fn load_with(path: &Path, spool: bool) -> Result<(Trace, Option<crate::model::spool::Spool>), TraceError> {
    let shown = path.display().to_string();
    let open_err = |source| TraceError::Open { path: shown.clone(), source };
    let file = std::fs::File::open(path).map_err(open_err)?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let head = reader.fill_buf().map_err(open_err)?.to_vec();
    let bad = |what: String| TraceError::Import { path: shown.clone(), what };
    let kineto = |r: &mut dyn std::io::Read| {
        if spool {
            kineto::import_spooled(r)
        } else {
            kineto::import(r).map(|t| (t, None))
        }
    };
    match sniff(&head) {
        Some(Format::Native) => crate::model::source::load_trace(path).map(|t| (t, None)),
        Some(Format::KinetoJson) => kineto(&mut reader).map_err(|e| bad(format!("Kineto JSON: {e}"))),
        Some(Format::KinetoJsonGzip) => {
            // The decoder is read directly (its first bytes, sniffed, put back in front): a buffered reader
            // between it and the importer's window would copy every byte once more.
            let mut gz = flate2::read::GzDecoder::new(reader);
            let mut inner = Vec::with_capacity(64);
            (&mut gz).take(64).read_to_end(&mut inner).map_err(|e| bad(format!("gzip: {e}")))?;
            if sniff(&inner) != Some(Format::KinetoJson) {
                return Err(bad(
                    "gzip file holds no trace cuflight reads (a cuflight trace, Kineto JSON or an nsys SQLite export)"
                        .into(),
                ));
            }
            kineto(&mut inner.as_slice().chain(gz)).map_err(|e| bad(format!("Kineto JSON (gzip): {e}")))
        }
        Some(Format::NsysSqlite) => {
            let imported = if spool { nsys::import_spooled(path) } else { nsys::import(path).map(|t| (t, None)) };
            imported.map_err(|e| bad(format!("Nsight Systems SQLite: {e}")))
        }
        None => Err(bad(unknown_format(path))),
    }
}
