//! A directory as the traces of one job, as Holistic Trace Analysis takes a trace directory and torch.profiler's
//! `tensorboard_trace_handler` writes one file per rank or worker into one: `cuflight report ./log` is the report
//! of every trace directly in `./log`. A file counts when its first bytes are a format cuflight reads (or its name
//! says Nsight Systems report); hidden files, subdirectories and symbolic links are left out, and what was left
//! out is said once.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// More files than this in one directory is not a job's traces (a home directory named by mistake).
const MOST_FILES: usize = 100_000;

/// Replaces each directory among `traces` by the traces it holds, in name order.
pub fn expand(traces: &mut Vec<PathBuf>) -> Result<()> {
    if !traces.iter().any(|t| t.is_dir()) {
        return Ok(());
    }
    let mut out = Vec::with_capacity(traces.len());
    for t in traces.drain(..) {
        if t.is_dir() {
            out.extend(traces_in(&t)?);
        } else {
            out.push(t);
        }
    }
    *traces = out;
    Ok(())
}

/// A directory where a command reads one trace file (recover): refused, saying which commands read one.
pub fn refuse(traces: &[&mut PathBuf], command: &str) -> Result<()> {
    if let Some(dir) = traces.iter().find(|t| t.is_dir()) {
        bail!(
            "{} is a directory: {command} reads trace files (report, stats, merge and export read the traces in a \
             directory as one job; diff takes a directory as one run)",
            dir.display()
        );
    }
    Ok(())
}

fn is_trace(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    use cuflight_collector::import::{detect, Format};
    match detect(path) {
        // gzip: Kineto JSON, or another trace compressed; not a log archive beside the traces.
        Ok(Format::KinetoJsonGzip) | Err(_) => {
            crate::spooled_inputs::is_compressed_trace(path)
                || crate::spooled_inputs::is_dump_image(path)
                || name.ends_with(".nsys-rep")
                || name.ends_with(".qdrep")
        }
        Ok(_) => true,
    }
}

pub fn traces_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let shown = dir.display();
    let mut found = Vec::new();
    let mut left_out = 0usize;
    for (n, entry) in std::fs::read_dir(dir).with_context(|| format!("cannot list {shown}"))?.enumerate() {
        if n >= MOST_FILES {
            bail!("{shown} holds more than {MOST_FILES} entries: name the traces of one job, or their directory");
        }
        let entry = entry.with_context(|| format!("cannot list {shown}"))?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        // The entry itself, not what a link points to.
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if !hidden && regular && is_trace(&path) {
            found.push(path);
        } else {
            left_out += 1;
        }
    }
    found.sort();
    if found.is_empty() {
        bail!("{shown} holds no trace (cuflight traces, Kineto JSON, nsys exports or reports, directly in it)");
    }
    let s = |n: usize| if n == 1 { "" } else { "s" };
    let others = match left_out {
        0 => String::new(),
        n => format!(
            "; left out {n} other entr{} (not a trace, hidden, a directory or a link)",
            if n == 1 { "y" } else { "ies" }
        ),
    };
    eprintln!("cuflight: {shown}: {} trace{}{others}", found.len(), s(found.len()));
    Ok(found)
}
