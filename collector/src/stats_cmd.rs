//! `cuflight stats`: the summary tables of one pass over the trace, then each per-event report
//! (`cuda_gpu_trace`, ...) streamed in a pass of its own, in one output: tables one after another, CSV blocks
//! apart by a blank line, or one JSON object whose members are the reports.

use crate::cli::{StatsFormat, TimeUnitArg};
use crate::closed_output::BROKEN_PIPE_STATUS;
use crate::multi_trace::job_source;
use crate::{warn_cut_short, write_text};
use anyhow::{Context, Result};
use cuflight_collector::analysis::stats::filter::Filter;
use cuflight_collector::analysis::stats::{event_trace, Choice, KernelNames, Report, Stats, Style};
use cuflight_collector::analysis::table::TimeUnit;
use cuflight_collector::export::output::{self, Output};
use cuflight_collector::model::source::EventSource;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// What `stats` prints and of what part of the trace.
pub struct Tables {
    pub format: StatsFormat,
    pub report: Vec<Choice>,
    pub filter: Option<Filter>,
    pub timeunit: TimeUnitArg,
}

pub fn run(traces: Vec<PathBuf>, tables: Tables, output: Option<PathBuf>, force: bool) -> Result<i32> {
    let Tables { format, report, filter, timeunit } = tables;
    let kernel_names = kernel_names(&report)?;
    let unit = match timeunit {
        TimeUnitArg::Ns => TimeUnit::Ns,
        TimeUnitArg::Us => TimeUnit::Us,
        TimeUnitArg::Ms => TimeUnit::Ms,
        TimeUnitArg::S => TimeUnit::S,
    };
    let inputs: Vec<&Path> = traces.iter().map(PathBuf::as_path).collect();
    output::distinct_inputs(&inputs)?;
    // A report named twice is printed once (JSON could not hold it twice).
    let mut named: Vec<Report> = Vec::new();
    for c in report {
        if !named.contains(&c.report) {
            named.push(c.report);
        }
    }
    let mut out =
        output.as_deref().filter(|o| o.as_os_str() != "-").map(|o| Output::create(o, &inputs, force)).transpose()?;
    let style = match format {
        StatsFormat::Table => Style::Table,
        StatsFormat::Csv => Style::Csv,
        StatsFormat::Json => Style::Json,
    };
    let default_view = named.is_empty() && style == Style::Table;
    let reports = match (named.is_empty(), style) {
        (true, Style::Table) => Report::default_text(),
        (true, _) => Report::ALL.to_vec(),
        (false, _) => named,
    };
    let (per_event, summaries): (Vec<Report>, Vec<Report>) = reports.into_iter().partition(|r| r.is_event_trace());
    // Streamed: memory is bounded by the tables (and each per-event report's join), whatever the trace's size.
    // Several traces are one job's: merged on its clock (as report and export take them), so that a table's
    // events interleave as they happened.
    let shown_input = crate::multi_trace::shown(&traces);
    let mut source = match &traces[..] {
        [one] => {
            let source = EventSource::open(one)?;
            warn_cut_short(one, source.cut_short.as_deref());
            source
        }
        many => job_source(many, "stats")?,
    };
    let windows = match &filter {
        Some(f) => {
            let w = f.windows(&mut source).with_context(|| format!("cannot filter {shown_input}"))?;
            eprintln!("cuflight: summarising what started, or was launched, inside {}", f.kept(&w));
            Some(w)
        }
        None => None,
    };
    let mut text = String::new();
    if !summaries.is_empty() {
        let stats = Stats::compute_source_naming(&mut source, kernel_names, windows.as_ref())?;
        let mut summaries = summaries.clone();
        // The counters' table is in the default view when the trace has counters (most traces have none).
        if default_view && !stats.gpu_metrics.is_empty() {
            summaries.push(Report::GpuMetrics);
        }
        // So is the Triton table when torch.compile made the kernels, and the collectives' when any ran.
        if default_view && !stats.triton.is_empty() {
            summaries.push(Report::Triton);
        }
        if default_view && !stats.collectives.is_empty() {
            summaries.push(Report::Collectives);
        }
        text = stats.render_in(&summaries, style, unit);
    }
    if per_event.is_empty() {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        write_text(out, &text)?;
        return Ok(0);
    }
    let shown = out.as_ref().map(|o| o.path().display().to_string());
    {
        let mut sink: Box<dyn Write> = match out.as_mut() {
            Some(o) => Box::new(BufWriter::with_capacity(1 << 20, o.file())),
            None => Box::new(BufWriter::with_capacity(1 << 16, StdoutOrExit)),
        };
        let name = shown.as_deref().unwrap_or("standard output");
        let failed = |e: io::Error| anyhow::Error::new(e).context(format!("cannot write {name}"));
        // JSON: the summaries' object, opened again for the per-event members.
        let json_open = match text.trim_end().strip_suffix('}') {
            Some(head) if style == Style::Json => head.trim_end().to_string(),
            _ if style == Style::Json => "{".to_string(),
            _ => text.clone(),
        };
        sink.write_all(json_open.as_bytes()).map_err(failed)?;
        for (i, r) in per_event.iter().enumerate() {
            let gap = match style {
                Style::Json if i == 0 && summaries.is_empty() => "\n  ",
                Style::Json => ",\n  ",
                Style::Csv if i > 0 || !summaries.is_empty() => "\n",
                _ => "",
            };
            sink.write_all(gap.as_bytes()).map_err(failed)?;
            let options = event_trace::Options { style, unit, kernel_names, windows: windows.clone() };
            match event_trace::write(*r, &options, &mut source, &mut sink) {
                Ok(_) => {}
                Err(event_trace::EventTraceError::Write { report, source }) => {
                    return Err(failed(source).context(format!("{report} of {shown_input}")));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let end = if style == Style::Json { "\n}\n" } else { "" };
        sink.write_all(end.as_bytes()).and_then(|_| sink.flush()).map_err(failed)?;
    }
    if let Some(o) = out {
        o.commit()?; // its error names the file
        eprintln!("cuflight: wrote {}", output.unwrap_or_default().display());
    }
    Ok(0)
}

/// The one kernel-name form of the kernel reports asked for: one pass names kernels one way.
fn kernel_names(choices: &[Choice]) -> Result<KernelNames> {
    let kernel_reports: Vec<&Choice> = choices.iter().filter(|c| c.report.names_kernels()).collect();
    let first = kernel_reports.first().map_or(KernelNames::Full, |c| c.kernel_names);
    if let Some(other) = kernel_reports.iter().find(|c| c.kernel_names != first) {
        let name = |c: &Choice| format!("{}{}", c.report.names().0, c.kernel_names.suffix());
        anyhow::bail!(
            "{} and {} name kernels differently: ask for one form per run of `cuflight stats`",
            name(kernel_reports[0]),
            name(other)
        );
    }
    Ok(first)
}

/// Standard output for a table of any length: a reader gone away (`| head`) ends the process at once, as
/// SIGPIPE would, instead of the pass reading the rest of the trace for nobody.
struct StdoutOrExit;

impl Write for StdoutOrExit {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match io::stdout().lock().write(buf) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(BROKEN_PIPE_STATUS),
            r => r,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match io::stdout().lock().flush() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(BROKEN_PIPE_STATUS),
            r => r,
        }
    }
}
