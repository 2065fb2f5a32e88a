//! `cuflight diff`: each run reported on its own (one at a time, so memory is one report's), then compared. A run
//! is a trace, or a directory of one job's traces.

use crate::cli::ReportFormat;
use anyhow::Result;
use cuflight_collector::export::output::{self, Output};
use cuflight_collector::report::diff::Diff;
use cuflight_collector::report::{Options, Report};
use std::path::PathBuf;

pub fn run(traces: &[PathBuf], format: ReportFormat, opts: &Options, out: Option<PathBuf>, force: bool) -> Result<i32> {
    let inputs: Vec<&std::path::Path> = traces.iter().map(PathBuf::as_path).collect();
    output::distinct_inputs(&inputs)?;
    let out = out.as_deref().filter(|o| o.as_os_str() != "-").map(|o| Output::create(o, &inputs, force)).transpose()?;
    let mut runs = Vec::with_capacity(traces.len());
    for t in traces {
        let name = crate::stand_in::name_of(t);
        // A directory is one run of a job: its traces reported together, as `report DIR` does.
        let (files, _exports) = if t.is_dir() {
            let mut files = crate::trace_dirs::traces_in(t)?;
            let exports = crate::nsys_report::take(&mut files.iter_mut().collect::<Vec<_>>())?;
            (files, Some(exports))
        } else {
            (vec![t.clone()], None)
        };
        let mut sources = Vec::with_capacity(files.len());
        for f in &files {
            sources.push((crate::stand_in::name_of(f), cuflight_collector::model::source::EventSource::open(f)?));
        }
        let report = Report::compute(&mut sources, opts);
        for (f, (_, source)) in files.iter().zip(&sources) {
            crate::warn_cut_short(f, source.cut_short.as_deref());
        }
        runs.push((name, report?));
    }
    let diff = Diff::compute(&runs);
    let text = match format {
        ReportFormat::Text => diff.to_text(),
        ReportFormat::Json => diff.to_json() + "\n",
        ReportFormat::Html => diff.to_html(),
    };
    crate::write_text(out, &text)?;
    Ok(0)
}
