//! `cuflight diff`: each trace reported on its own (one at a time, so memory is one report's), then compared.

use crate::cli::ReportFormat;
use anyhow::Result;
use cuflight_collector::analysis::diff::Diff;
use cuflight_collector::analysis::report::{Options, Report};
use cuflight_collector::export::output::{self, Output};
use std::path::PathBuf;

pub fn run(
    traces: &[PathBuf],
    format: ReportFormat,
    step: Option<String>,
    out: Option<PathBuf>,
    force: bool,
) -> Result<i32> {
    let inputs: Vec<&std::path::Path> = traces.iter().map(PathBuf::as_path).collect();
    output::distinct_inputs(&inputs)?;
    let out = out.as_deref().filter(|o| o.as_os_str() != "-").map(|o| Output::create(o, &inputs, force)).transpose()?;
    let opts = Options { step, include_warmup: false };
    let mut runs = Vec::with_capacity(traces.len());
    for t in traces {
        let name = crate::stand_in::name_of(t);
        let mut source = cuflight_collector::model::source::EventSource::open(t)?;
        let mut one = [(name.clone(), source)];
        let report = Report::compute(&mut one, &opts);
        [(_, source)] = one;
        crate::warn_cut_short(t, source.cut_short.as_deref());
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
