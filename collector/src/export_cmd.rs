//! `cuflight merge` and `cuflight export`: one trace of many on one clock, and the timelines (Perfetto, Chrome
//! JSON, Parquet tables) of one trace or of a job's.

use crate::cli::ExportFormat;
use crate::multi_trace::{self, export_parquet, job_source, print_placement};
use crate::{stand_in, warn_cut_short};
use anyhow::{bail, Context, Result};
use cuflight_collector::export::output::{self, Output};
use cuflight_collector::model::filter::Filter;
use std::path::{Path, PathBuf};

/// `cuflight merge TRACES -o OUT`.
pub fn merge(traces: &[PathBuf], output: &Path, force: bool) -> Result<i32> {
    let inputs: Vec<&std::path::Path> = traces.iter().map(PathBuf::as_path).collect();
    output::distinct_inputs(&inputs)?;
    let out = Output::create(output, &inputs, force)?;
    let mut command = vec!["cuflight".to_string(), "merge".to_string()];
    command.extend(traces.iter().map(|t| stand_in::name_of(t)));
    let w = std::io::BufWriter::with_capacity(1 << 20, out.try_clone()?);
    // Cut-short traces named once, as they are opened.
    let mut opened = |t: &std::path::Path, s: &cuflight_collector::model::source::EventSource| {
        warn_cut_short(t, s.cut_short.as_deref())
    };
    let m = cuflight_collector::export::merge::merge(traces, w, command, &mut opened).map_err(|e| match e {
        cuflight_collector::export::merge::MergeError::Trace(e) => named(e, output),
        cuflight_collector::export::merge::MergeError::Write(e) => match e {
            cuflight_format::file::FileError::Io(io) => anyhow::Error::new(io),
            e => anyhow::Error::new(e),
        }
        .context(format!("cannot write {}", output.display())),
    })?;
    out.commit()?;
    print_placement(&m.placement, traces);
    let s = |n: usize| if n == 1 { "" } else { "s" };
    eprintln!(
        "cuflight: wrote {}: {} process{}, {} events from {} trace{}",
        output.display(),
        m.processes,
        if m.processes == 1 { "" } else { "es" },
        m.events,
        traces.len(),
        s(traces.len())
    );
    Ok(0)
}

/// `cuflight export TRACES [-o OUT] [--format F] [--filter-nvtx/--filter-time]`.
pub fn export(
    traces: &[PathBuf],
    format: Option<ExportFormat>,
    output: Option<PathBuf>,
    force: bool,
    filter: Option<Filter>,
) -> Result<i32> {
    let format = ExportFormat::chosen(format, output.as_deref());
    if let ExportFormat::Parquet = format {
        if filter.is_some() {
            bail!("--filter-nvtx and --filter-time cut a timeline (perfetto, chrome); the Parquet tables keep every event (select on their start_ns in SQL)");
        }
        return export_parquet(traces, output, force);
    }
    let trace = traces[0].clone();
    let ext = match format {
        ExportFormat::Perfetto => "perfetto-trace",
        _ => "json",
    };
    let output = match (output, &filter) {
        (Some(o), _) => o,
        // A cut is named after what it keeps, beside the whole export's name: run.ProfilerStep_5.json.
        (None, Some(f)) => stand_in::beside(&trace, &format!("{}.{ext}", f.tag()))?,
        (None, None) => stand_in::beside(&trace, ext)?,
    };
    let inputs: Vec<&std::path::Path> = traces.iter().map(PathBuf::as_path).collect();
    output::distinct_inputs(&inputs)?;
    // `-o -`: standard output (a pipe into gzip, ssh, or trace_processor's stdin).
    let to_stdout = output.as_os_str() == "-";
    let out = if to_stdout { None } else { Some(Output::create(&output, &inputs, force)?) };
    // Several traces (one job's hosts or ranks): one source on the job's clock, as `cuflight merge` puts them,
    // with no merged copy written. Streamed in time order (cuflight traces block by block, large imported ones
    // spooled in runs).
    let mut source = if traces.len() > 1 {
        job_source(traces, "export")?
    } else {
        let source = cuflight_collector::model::source::EventSource::open(&trace)?;
        warn_cut_short(&trace, source.cut_short.as_deref());
        source
    };
    if let Some(f) = &filter {
        let windows =
            f.windows(&mut source).with_context(|| format!("cannot filter {}", multi_trace::shown(traces)))?;
        eprintln!("cuflight: drawing {}", f.kept(&windows));
        source.cut_to(windows);
    }
    let sink: Box<dyn std::io::Write> = match &out {
        Some(out) => Box::new(out.try_clone()?),
        None => Box::new(std::io::stdout().lock()),
    };
    let w = std::io::BufWriter::with_capacity(1 << 20, sink);
    let output = if to_stdout { PathBuf::from("standard output") } else { output };
    let write_err = || format!("cannot write {}", output.display());
    let mut json = false;
    match format {
        ExportFormat::Perfetto => {
            let c = cuflight_collector::export::perfetto::export(&mut source, w).map_err(|e| named(e, &output))?;
            eprintln!(
                "cuflight: wrote {}: {} packets, {} slices, {} instants, {} flows, {} counter values, {} tracks",
                output.display(),
                c.packets,
                c.slices,
                c.instants,
                c.flows,
                c.counter_values,
                c.tracks
            );
        }
        _ if output.extension().is_some_and(|e| e == "gz") => {
            // Fast compression: the JSON is large and repetitive, and the export must keep its pace.
            let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::fast());
            let n = cuflight_collector::export::chrome::export(&mut source, &mut gz).map_err(|e| named(e, &output))?;
            gz.finish().and_then(|mut w| std::io::Write::flush(&mut w)).with_context(write_err)?;
            eprintln!("cuflight: wrote {}: {n} trace events, gzip-compressed", output.display());
        }
        _ => {
            let n = cuflight_collector::export::chrome::export(&mut source, w).map_err(|e| named(e, &output))?;
            eprintln!("cuflight: wrote {}: {n} trace events", output.display());
            json = true;
        }
    }
    let Some(out) = out else { return Ok(0) };
    out.commit()?;
    let size = std::fs::metadata(&output).map_or(0, |m| m.len());
    if json && size >= 1 << 30 {
        eprintln!(
            "cuflight: that is {:.1} GB of JSON: `-o NAME.json.gz` writes it gzip-compressed, about 8x smaller and in about the same time (HTA, TensorBoard and Perfetto read it)",
            size as f64 / 1e9
        );
    }
    Ok(0)
}

/// An error of a command that reads a trace and writes something of it: a failed write names the output (a full
/// disk is no fault of the input), anything else is the input's own.
pub fn named(e: cuflight_collector::model::trace::TraceError, output: &Path) -> anyhow::Error {
    match e {
        cuflight_collector::model::trace::TraceError::Output(io) => {
            anyhow::Error::new(io).context(format!("cannot write {}", output.display()))
        }
        other => other.into(),
    }
}
