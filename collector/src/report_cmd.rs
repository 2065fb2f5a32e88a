//! `cuflight report`: the diagnosis of one trace or of a job's, as text, JSON or HTML.

use crate::cli::ReportFormat;
use crate::{stand_in, warn_cut_short};
use anyhow::{Context, Result};
use cuflight_collector::export::output::{self, Output};
use cuflight_collector::report::{Options, Report};
use std::path::PathBuf;

/// `cuflight report TRACES [--format F] [-o OUT]`.
pub fn run(
    traces: &[PathBuf],
    format: ReportFormat,
    opts: &Options,
    output: Option<PathBuf>,
    force: bool,
) -> Result<i32> {
    let inputs: Vec<&std::path::Path> = traces.iter().map(PathBuf::as_path).collect();
    output::distinct_inputs(&inputs)?;
    // Every trace stays open through the report's passes.
    crate::multi_trace::may_open_all(traces.len())?;
    let out =
        output.as_deref().filter(|o| o.as_os_str() != "-").map(|o| Output::create(o, &inputs, force)).transpose()?;
    let mut sources = Vec::new();
    for t in traces {
        // Streamed: cuflight traces block by block in each pass, imported ones read once (large ones spooled).
        sources.push((stand_in::name_of(t), cuflight_collector::model::source::EventSource::open(t)?));
    }
    let report = Report::compute(&mut sources, opts);
    for (t, (_, source)) in traces.iter().zip(&sources) {
        warn_cut_short(t, source.cut_short.as_deref());
    }
    let report = report?;
    // JSON is written as it is serialised: a report of many steps is not built as one string first.
    let write = |w: &mut dyn std::io::Write| -> std::io::Result<()> {
        match format {
            ReportFormat::Text => w.write_all(report.to_text().as_bytes()),
            ReportFormat::Json => report.write_json(&mut *w),
            ReportFormat::Html => w.write_all(report.to_html().as_bytes()),
        }
    };
    match out {
        Some(out) => {
            let path = out.path().display().to_string();
            let mut w = std::io::BufWriter::with_capacity(1 << 20, out.try_clone()?);
            write(&mut w)
                .and_then(|_| std::io::Write::flush(&mut w))
                .with_context(|| format!("cannot write {path}"))?;
            drop(w);
            out.commit()?;
            eprintln!("cuflight: wrote {path}");
        }
        None => {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
            write(&mut w)
                .and_then(|_| std::io::Write::flush(&mut w))
                .context("cannot write the report to standard output")?;
        }
    }
    Ok(0)
}
