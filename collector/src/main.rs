//! `cuflight`: record CUDA programs and analyse their traces. Each subcommand is a thin layer over the library.

use anyhow::{bail, Context, Result};
use clap::Parser;
mod capture_args;
mod capture_cmd;
mod cli;
mod closed_output;
mod deadline;
mod diff_cmd;
mod doctor;
mod export_cmd;
mod mcp;
mod multi_trace;
mod nsys_report;
mod report_cmd;
mod schema_cmd;
mod spooled_inputs;
mod stand_in;
mod stats_cmd;
mod trace_dirs;
use cli::*;
use cuflight_collector::capture::agents;
use cuflight_collector::export::output::Output;
use cuflight_live::{serve, top};
use std::io::Write;
use std::time::Duration;

fn main() {
    closed_output::install();
    let cli = Cli::parse();
    // What the capture commands meet (no CUPTI, ptrace refused...) is what `cuflight doctor` checks: their errors
    // name its check.
    let captures = matches!(
        cli.command,
        Cmd::Record(_) | Cmd::Launch(_) | Cmd::Attach(_) | Cmd::Dump(_) | Cmd::Serve { .. } | Cmd::Top { .. }
    );
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) if closed_output::is_broken_pipe(&e) => std::process::exit(closed_output::BROKEN_PIPE_STATUS),
        Err(e) => {
            let mut line = stand_in::shown(one_line(&e));
            if captures {
                line = cuflight_collector::capture::doctor_checks::with_pointer(&line);
            }
            // Not eprintln!: its panic on a closed standard error (a terminal hung up under `top`) would turn
            // exit 1 into 101.
            let _ = writeln!(std::io::stderr(), "cuflight: {line}");
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
    // Kept open until the command is done: traces read from standard input, pipes and compressed files live in it.
    let _spooled = spooled_inputs::take(&mut cli.command.trace_paths())?;
    // And those of Nsight Systems reports read through their SQLite exports.
    let _exports = nsys_report::take(&mut cli.command.trace_paths())?;
    match cli.command {
        Cmd::Record(args) => capture_cmd::record(args),
        Cmd::Launch(args) => capture_cmd::launch(args),
        Cmd::Dump(args) => capture_cmd::dump(args),
        Cmd::Attach(args) => capture_cmd::attach(args),
        Cmd::Serve { listen, allow_remote, duty, window_budget, interval, log_windows, rounds, pids } => {
            if log_windows && duty.continuous {
                bail!("--log-windows logs the windows of --duty ON/PERIOD; --duty continuous records without any");
            }
            let duty = serve::Duty { budget: window_budget, log: log_windows, ..duty.or_continuous(interval) };
            serve::serve(&serve::ServeOptions { listen, allow_remote, duty, pids, rounds })
                .map(|()| 0)
                .map_err(Into::into)
        }
        Cmd::Top { duty, pids } => {
            top::top(pids, duty.or_continuous(Duration::from_secs(1))).map(|()| 0).map_err(Into::into)
        }
        Cmd::Ps { format, all } => {
            let rows = if all { agents::list_all() } else { agents::list() };
            let rows = rows.context("cannot list agents (is /proc mounted?)")?;
            match format {
                Format::Table => print!("{}", agents::table(&rows)),
                Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
            }
            Ok(0)
        }
        Cmd::Doctor { format } => doctor::run(format),
        Cmd::DoctorProbe { file, work_ms } => doctor::probe_main(&file, Duration::from_millis(work_ms)),
        Cmd::Schema { of } => schema_cmd::print(of),
        Cmd::Mcp { allow_record, max_seconds, output_dir } => {
            mcp::serve(&mcp::McpOptions { allow_record, max_seconds, output_dir })
        }
        Cmd::Merge { traces, output, force } => export_cmd::merge(&traces, &output, force),
        Cmd::Export { traces, format, output, force, filter_nvtx, filter_time } => {
            export_cmd::export(&traces, format, output, force, filter_nvtx.or(filter_time))
        }
        Cmd::Report { traces, format, step, include_warmup, filter_nvtx, filter_time, output, force } => {
            let opts =
                cuflight_collector::report::Options { step, include_warmup, filter: filter_nvtx.or(filter_time) };
            report_cmd::run(&traces, format, &opts, output, force)
        }
        Cmd::Diff { traces, format, step, filter_nvtx, filter_time, output, force } => {
            let opts = cuflight_collector::report::Options {
                step,
                include_warmup: false,
                filter: filter_nvtx.or(filter_time),
            };
            diff_cmd::run(&traces, format, &opts, output, force)
        }
        Cmd::Recover { trace, output, force } => capture_cmd::recover(&trace, output, force),
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
            out.write_all_and_commit(text.as_bytes())?; // its error names the file
            eprintln!("cuflight: wrote {path}");
        }
        None => print!("{text}"),
    }
    Ok(())
}
