//! Traces read through a stand-in file: the copy of standard input (`-`), of a pipe or of a compressed trace, an
//! Nsight Systems report's SQLite export.
//! Messages and outputs name the trace as the user gave it, never the stand-in; the original stays an input of the
//! command, so that an output naming it is refused as an output naming any input is.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

struct StandIn {
    path: String,
    /// How messages name it ("standard input", "run.nsys-rep").
    shown: String,
    /// The file the user named, beside which default outputs go; None for standard input.
    original: Option<PathBuf>,
}

static STAND_INS: Mutex<Vec<StandIn>> = Mutex::new(Vec::new());

fn stand_ins() -> std::sync::MutexGuard<'static, Vec<StandIn>> {
    STAND_INS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `stand_in` is read in place of what messages call `shown` (the file `original`, if any).
pub fn register(stand_in: &Path, shown: String, original: Option<PathBuf>) {
    if let Some(o) = &original {
        cuflight_collector::output::read_through(o);
    }
    stand_ins().push(StandIn { path: stand_in.display().to_string(), shown, original });
}

/// A message with every stand-in named as the user named its trace.
pub fn shown(mut msg: String) -> String {
    for s in stand_ins().iter() {
        msg = msg.replace(s.path.as_str(), &s.shown);
    }
    msg
}

/// A trace's name for what the command prints and writes.
pub fn name_of(trace: &Path) -> String {
    shown(trace.display().to_string())
}

/// The default output beside `trace` (`output::default_beside`): beside the file the user named; a trace read
/// from standard input has no place beside it, so the output must be named.
pub fn beside(trace: &Path, ext: &str) -> anyhow::Result<PathBuf> {
    let found = stand_ins().iter().find(|s| Path::new(&s.path) == trace).map(|s| (s.shown.clone(), s.original.clone()));
    match found {
        Some((shown, None)) => {
            anyhow::bail!("the trace comes from {shown}, no file to write beside: name the output with -o")
        }
        Some((_, Some(original))) => Ok(cuflight_collector::export::output::default_beside(&original, ext)),
        None => Ok(cuflight_collector::export::output::default_beside(trace, ext)),
    }
}
