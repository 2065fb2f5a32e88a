//! `cuflight`: record CUDA programs and analyse their traces. Each subcommand is a thin layer over the library.

use anyhow::{bail, Context, Result};
use clap::Parser;
mod capture_cmd;
mod cli;
mod closed_output;
mod diff_cmd;
mod multi_trace;
mod nsys_report;
mod serve;
mod stand_in;
mod stats_cmd;
mod stdin_trace;
mod top;
mod trace_dirs;
use cli::*;
use cuflight_collector::capture::agents;
use cuflight_collector::export::output::{self, Output};
use multi_trace::{export_parquet, merged_source, print_hosts};
use std::path::PathBuf;
use std::time::Duration;

fn main() {
    closed_output::install();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) if closed_output::is_broken_pipe(&e) => std::process::exit(closed_output::BROKEN_PIPE_STATUS),
        Err(e) => {
            eprintln!("cuflight: {}", stand_in::shown(one_line(&e)));
            std::process::exit(1);
        }
    }
}

fn warn_cut_short(path: &std::path::Path, why: Option<&str>) {
    if let Some(why) = why {
        eprintln!(
            "cuflight: warning: {}: {why}; read up to its last complete block (`cuflight recover` writes a complete copy)",
            stand_in::name_of(path)
        );
    }
}

/// The error and its causes on one line, skipping causes whose text the message already includes.
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

fn run(mut cli: Cli) -> Result<i32> {
    let name = cli.command.name();
    match cli.command.job_traces() {
        Some(traces) => trace_dirs::expand(traces)?,
        // diff takes a directory as one run (diff_cmd).
        None if name != "diff" => trace_dirs::refuse(&cli.command.trace_paths(), name)?,
        None => {}
    }
    // Kept open until the command is done: a trace read from standard input lives in it.
    let _stdin = stdin_trace::take(&mut cli.command.trace_paths())?;
    // And those of Nsight Systems reports read through their SQLite exports.
    let _exports = nsys_report::take(&mut cli.command.trace_paths())?;
    match cli.command {
        Cmd::Record(args) => capture_cmd::record(args),
        Cmd::Launch(args) => capture_cmd::launch(args),
        Cmd::Dump(args) => capture_cmd::dump(args),
        Cmd::Attach(args) => capture_cmd::attach(args),
        Cmd::Serve { listen, allow_remote, duty, window_budget, interval, rounds, pids } => {
            let duty = crate::serve::Duty { budget: window_budget, ..duty.or_continuous(interval) };
            serve::serve(&serve::ServeOptions { listen, allow_remote, duty, pids, rounds })
        }
        Cmd::Top { duty, pids } => top::top(pids, duty.or_continuous(Duration::from_secs(1))),
        Cmd::Ps { format, all } => {
            let rows = if all { agents::list_all() } else { agents::list() };
            let rows = rows.context("cannot list agents (is /proc mounted?)")?;
            match format {
                Format::Table => print!("{}", agents::table(&rows)),
                Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
            }
            Ok(0)
        }
        Cmd::Merge { traces, output, force } => {
            let inputs: Vec<&std::path::Path> = traces.iter().map(PathBuf::as_path).collect();
            output::distinct_inputs(&inputs)?;
            let out = Output::create(&output, &inputs, force)?;
            let mut command = vec!["cuflight".to_string(), "merge".to_string()];
            command.extend(traces.iter().map(|t| stand_in::name_of(t)));
            let w = std::io::BufWriter::with_capacity(1 << 20, out.try_clone()?);
            // Cut-short traces named once, as they are opened.
            let mut opened = |t: &std::path::Path, s: &cuflight_collector::model::source::EventSource| {
                warn_cut_short(t, s.cut_short.as_deref())
            };
            let m = cuflight_collector::export::merge::merge(&traces, w, command, &mut opened)?;
            out.commit()?;
            print_hosts(&m.hosts);
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
        Cmd::Export { traces, format, output, force, filter_nvtx, filter_time } => {
            let format = ExportFormat::chosen(format, output.as_deref());
            let filter = filter_nvtx.or(filter_time);
            if let ExportFormat::Parquet = format {
                if filter.is_some() {
                    bail!("--filter-nvtx and --filter-time cut a timeline (perfetto, chrome); the Parquet tables keep every event (select on their start_ns in SQL)");
                }
                return export_parquet(&traces, output, force);
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
            // Several traces (one job's hosts or ranks): merged on one clock first, as `cuflight merge` does.
            // Streamed in time order (cuflight traces block by block, large imported ones spooled in runs).
            let mut source = if traces.len() > 1 {
                merged_source(&traces)?
            } else {
                let source = cuflight_collector::model::source::EventSource::open(&trace)?;
                warn_cut_short(&trace, source.cut_short.as_deref());
                source
            };
            if let Some(f) = &filter {
                let windows =
                    f.windows(&mut source).with_context(|| format!("cannot filter {}", multi_trace::shown(&traces)))?;
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
                    let c = cuflight_collector::export::perfetto::export(&mut source, w)?;
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
                    let n = cuflight_collector::export::chrome::export(&mut source, &mut gz).with_context(write_err)?;
                    gz.finish().and_then(|mut w| std::io::Write::flush(&mut w)).with_context(write_err)?;
                    eprintln!("cuflight: wrote {}: {n} trace events, gzip-compressed", output.display());
                }
                _ => {
                    let n = cuflight_collector::export::chrome::export(&mut source, w).with_context(write_err)?;
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
        Cmd::Report { traces, format, step, include_warmup, filter_nvtx, filter_time, output, force } => {
            let inputs: Vec<&std::path::Path> = traces.iter().map(PathBuf::as_path).collect();
            output::distinct_inputs(&inputs)?;
            // Every trace stays open through the report's passes. Soft limits on open files are often 1,024
            // under a far higher hard limit: raised here (only here: `record` and `launch` hand their limits to
            // the program, which must run as it would without cuflight), and where even the hard limit is too
            // low, refused up front rather than at the 1,000th file.
            let may_open = rlimit::increase_nofile_limit(u64::MAX)
                .or_else(|_| rlimit::getrlimit(rlimit::Resource::NOFILE).map(|l| l.0))
                .unwrap_or(u64::MAX);
            if traces.len() as u64 + 64 > may_open {
                bail!(
                    "{} traces are read at once and this process may open {may_open} files (ulimit -n): raise the \
                     limit, or merge them first (`cuflight merge TRACES -o job.cuf` reads one at a time) and report \
                     on job.cuf",
                    traces.len()
                );
            }
            let out = output
                .as_deref()
                .filter(|o| o.as_os_str() != "-")
                .map(|o| Output::create(o, &inputs, force))
                .transpose()?;
            let mut sources = Vec::new();
            for t in &traces {
                // Streamed: cuflight traces block by block in each pass, imported ones read once (large ones spooled).
                sources.push((stand_in::name_of(t), cuflight_collector::model::source::EventSource::open(t)?));
            }
            let filter = filter_nvtx.or(filter_time);
            let opts = cuflight_collector::report::Options { step, include_warmup, filter };
            let report = cuflight_collector::report::Report::compute(&mut sources, &opts);
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
        Cmd::Diff { traces, format, step, filter_nvtx, filter_time, output, force } => {
            let opts = cuflight_collector::report::Options {
                step,
                include_warmup: false,
                filter: filter_nvtx.or(filter_time),
            };
            diff_cmd::run(&traces, format, &opts, output, force)
        }
        Cmd::Recover { trace, output, force } => {
            let output = match output {
                Some(o) => o,
                None => stand_in::beside(&trace, "recovered.cuf")?,
            };
            let out = Output::create(&output, &[&trace], force)?;
            let r = cuflight_collector::capture::recover::recover(&trace, std::io::BufWriter::new(out.try_clone()?))?;
            out.commit()?;
            match r.cut_short {
                Some(why) => eprintln!(
                    "cuflight: wrote {}: {} events in {} blocks kept; {} bytes after the last complete block dropped ({why})",
                    output.display(),
                    r.events,
                    r.blocks,
                    r.dropped_bytes
                ),
                None => eprintln!(
                    "cuflight: wrote {}: {} events; {} was already complete",
                    output.display(),
                    r.events,
                    stand_in::name_of(&trace)
                ),
            }
            Ok(0)
        }
        Cmd::Completions { shell } => {
            // Generated into memory first: clap_complete panics on a failed write, and a reader may close the pipe
            // early (`completions bash | head`), which must end quietly.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "cuflight", &mut script);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script)
                .context("cannot write the completions to standard output")?;
            Ok(0)
        }
        Cmd::Stats { traces, format, report, filter_nvtx, filter_time, timeunit, output, force } => {
            let tables = stats_cmd::Tables { format, report, filter: filter_nvtx.or(filter_time), timeunit };
            stats_cmd::run(traces, tables, output, force)
        }
    }
}

/// A command's text into its `-o` file (committed, and said), or onto standard output.
fn write_text(out: Option<Output>, text: &str) -> Result<()> {
    match out {
        Some(out) => {
            let path = out.path().display().to_string();
            out.write_all_and_commit(text.as_bytes()).with_context(|| format!("cannot write {path}"))?;
            eprintln!("cuflight: wrote {path}");
        }
        None => print!("{text}"),
    }
    Ok(())
}
