//! The capture commands: `record`, `launch`, `dump` and `attach` over the capture library, and the lines each
//! prints about what it wrote and lost.

use crate::cli::*;
use anyhow::{bail, Context, Result};
use cuflight_collector::analysis::stats::{self, Stats};
use cuflight_collector::capture::record::RecordSummary;
use cuflight_collector::capture::record::{self, Inject, RecordOptions};
use cuflight_collector::capture::{agents, attach, doctor_checks, dump, sampled};
use cuflight_format::segment::dump_dir;
use std::path::PathBuf;
use std::time::Duration;

pub fn record(args: RecordArgs) -> Result<i32> {
    let RecordArgs {
        output,
        inject,
        flush_ms,
        drain_ms,
        force,
        linger_secs,
        window,
        sampling,
        trace,
        duration,
        delay,
        stats,
        sample,
        command,
    } = args;
    program_word("record", &command);
    if sample.is_some() && !trace.asks(cuflight_format::tracing::NVTX) {
        bail!("--sample finds steps by the program's NVTX ranges: keep nvtx in --trace");
    }
    trace.apply();
    let SamplingArgs { every, count } = sampling;
    let Some(agent) = record::find_agent() else {
        bail!(NO_AGENT);
    };
    let drain_interval = Duration::from_millis(drain_ms.clamp(1, 10_000));
    if let Some(every) = every {
        let range = window.range();
        let duration = duration.or((range.is_none()).then_some(every.min(Duration::from_secs(10))));
        if duration.is_some_and(|d| every < d) {
            bail!("--every must be at least --duration (windows cannot overlap)");
        }
        cupti_memory_note(count);
        let output = output.unwrap_or_else(record::default_output);
        output_not_in_command(&command, &output)?;
        let count = count.unwrap_or(1);
        let opts =
            sampled::SampledOptions { command, agent, output, every, count, duration, range, force, drain_interval };
        return record_every(&opts);
    }
    let output = output.unwrap_or_else(record::default_output);
    output_not_in_command(&command, &output)?;
    let opts = RecordOptions {
        output,
        command,
        agent,
        inject: match inject {
            InjectArg::Driver => Inject::Driver,
            InjectArg::Preload => Inject::Preload,
        },
        drain_interval,
        flush_ms,
        linger: Duration::from_secs(linger_secs),
        force,
        sample,
        range: record_range(window.range(), duration, delay)?,
    };
    let s = match record::record(&opts) {
        Err(record::RecordError::Spawn { command, source }) => {
            eprintln!("cuflight: cannot run '{command}': {source}");
            return Ok(spawn_status(&source));
        }
        other => other.context("recording failed")?,
    };
    tell_recorded(&s, &opts, &trace);
    if let Some(why) = &s.stopped {
        bail!("recording stopped early ({why}); the program ran to its end with status {}", s.exit_code);
    }
    if stats == Some(true) && s.events > 0 {
        for (file, _) in &s.files {
            print_stats(std::path::Path::new(file))?;
        }
    }
    Ok(s.exit_code)
}

/// What became of a recording's file: written, or cut short by a write error (what reached it is kept, readable
/// up to its last complete block).
fn wrote(s: &RecordSummary, file: impl std::fmt::Display) -> String {
    match s.stopped {
        Some(_) => format!("kept what reached {file} before a write error"),
        None => format!("wrote {file}"),
    }
}

/// `record --every`: sampling windows, a line for each file written.
fn record_every(opts: &sampled::SampledOptions) -> Result<i32> {
    let s = sampled::record_sampled(opts, |path, a| {
        eprintln!(
            "cuflight: {} ({} events, {} bytes; {}); {}",
            wrote(&a.summary, path.display()),
            a.summary.events,
            a.summary.bytes,
            a.ended,
            a.summary.losses_line()
        );
    })?;
    if let Some(why) = s.short {
        eprintln!("cuflight: {} of {} windows recorded ({why})", s.windows, opts.count);
    }
    Ok(s.exit_code)
}

/// The window `record` keeps: by the program's marks (`range`), or by time (--duration, --delay), not both.
fn record_range(
    range: Option<record::Range>,
    duration: Option<Duration>,
    delay: Option<Duration>,
) -> Result<Option<record::Range>> {
    Ok(match (range, duration, delay) {
        (range, None, None) => range,
        (None, d, y) => Some(record::Range::Armed {
            ns: d.map(|d| d.as_nanos().min(u64::MAX as u128) as u64),
            delay_ns: y.map_or(0, |y| y.as_nanos().min(u64::MAX as u128) as u64),
        }),
        (Some(_), _, _) => bail!(
            "--duration and --delay bound a window by time, --steps and --capture-range by the program's \
             marks: choose one (or add --every for sampling windows of steps)"
        ),
    })
}

/// What `record` tells of a recording once it is done: agents that were off, costs, what --sample and
/// --trace ...,hes or ...,api-records got, signals forwarded, processes that ended unflushed, and what it wrote
/// and lost.
fn tell_recorded(s: &RecordSummary, opts: &RecordOptions, trace: &TraceArgs) {
    let asked_hes = trace.asks(cuflight_format::tracing::HES);
    for (pid, why) in &s.disabled {
        eprintln!("cuflight: agent was off in process {pid}: {}", doctor_checks::with_pointer(why));
    }
    if s.arming.ranges_before > 0 {
        eprintln!("cuflight: {}", s.arming.describe().unwrap_or_default());
    }
    print_costs(s);
    if asked_hes {
        for (pid, traced) in &s.traced {
            if !traced.split(',').any(|t| t == "hes") {
                eprintln!(
                    "cuflight: process {pid}: CUPTI did not take hardware kernel timestamps (hes: Blackwell or newer \
                     with CUDA 12.8 or later, not under MIG, MPS, vGPU or WSL); kernels were timed the usual way"
                );
            }
        }
    }
    if trace.asks(cuflight_format::tracing::API_RECORDS) {
        for (pid, traced) in &s.traced {
            if !traced.split(',').any(|t| t == "api-records") {
                eprintln!(
                    "cuflight: process {pid}: its calls were recorded through callbacks, not CUPTI's API records \
                     (api-records needs CUPTI 12.5 or later, and no --sample or flight recorder)"
                );
            }
        }
    }
    if let Some(n) = opts.sample {
        match (s.sampled_steps, s.sampled_slices) {
            (0, 0) => eprintln!(
                "cuflight: --sample 1/{n} recorded nothing: the program ended before its first step or second"
            ),
            (0, k) => eprintln!(
                "cuflight: recorded {k} time slice(s) whole, one chosen at random in each block of {n}: the \
                 program marked no step (step-like NVTX ranges: ProfilerStep#N, step, train_step, ...; or \
                 cuflight.step()), which would sample whole steps"
            ),
            (k, _) => eprintln!(
                "cuflight: recorded {k} step(s) whole, one chosen at random in each block of {n}; `cuflight report` \
                 extrapolates to every step"
            ),
        }
    }
    if s.range_never_started {
        eprintln!(
            "cuflight: the capture range or steps asked for never started: the trace holds no events of the program"
        );
    }
    for sig in &s.forwarded {
        eprintln!("cuflight: forwarded {sig} to the program");
    }
    for (pid, period) in &s.unflushed {
        let missing = if *period > 0 {
            format!("device records of up to its last {period} ms are missing")
        } else {
            "device records CUPTI had not yet handed over are missing".to_string()
        };
        eprintln!(
            "cuflight: process {pid} ended without its final flush (killed, left through _exit, or replaced by exec): {missing}"
        );
    }
    if s.processes == 0 {
        eprintln!(
            "cuflight: no process of the program reached the collector: none used CUDA (the CUDA driver loads the agent), or each agent said above why it could not; the trace is empty; the program exited with status {}",
            s.exit_code
        );
    } else if s.disabled.len() == s.processes {
        eprintln!("cuflight: the agent was off in every process (reasons above): the trace holds no CUDA activity");
    }
    let written = match &s.files[..] {
        [(one, _)] => one.clone(),
        [] => opts.output.display().to_string(),
        many => format!("{} files ({})", many.len(), cuflight_collector::capture::outputs::list(&s.files)),
    };
    eprintln!(
        "cuflight: {} ({} events from {} process(es), {} bytes, {:.1} bytes/event); {}",
        wrote(s, written),
        s.events,
        s.processes,
        s.bytes,
        s.bytes as f64 / s.events.max(1) as f64,
        s.losses_line(),
    );
}

pub fn launch(args: LaunchArgs) -> Result<i32> {
    let LaunchArgs {
        flight_recorder,
        dump_dir,
        hang_timeout,
        dump_on_slow_step,
        dump_max_use,
        dump_keep_free,
        trace,
        command,
    } = args;
    program_word("launch", &command);
    trace.apply();
    let Some(agent) = record::find_agent() else {
        bail!(NO_AGENT);
    };
    let flight = match flight_recorder {
        Some(span) => {
            let dir = dump_dir.unwrap_or_else(|| PathBuf::from("."));
            let dir = std::fs::canonicalize(&dir)
                .with_context(|| format!("--dump-dir {}: not a directory you can use", dir.display()))?;
            if !dir.is_dir() {
                bail!("--dump-dir {}: not a directory", dir.display());
            }
            // Found out now, not when the program crashes: the agent must be able to create files there.
            let probe = dir.join(format!(".cuflight-probe-{}", std::process::id()));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)
                .with_context(|| format!("--dump-dir {}: cannot create files there", dir.display()))?;
            let _ = std::fs::remove_file(&probe);
            let swept = dump::sweep_partial_dumps(&dir);
            if swept > 0 {
                eprintln!(
                    "cuflight: --dump-dir {}: removed {swept} partial dump(s) of processes killed while writing them",
                    dir.display()
                );
            }
            let limits = dump_dir::Limits { max_use: dump_max_use, keep_free: dump_keep_free };
            if let Some(refusal) = limits.refused_now(&dir) {
                eprintln!(
                    "cuflight: warning: --dump-dir {}: automatic dumps will not be written while {refusal}",
                    dir.display()
                );
            }
            Some(agents::FlightRecorder { span, dump_dir: dir, hang_timeout, slow_step: dump_on_slow_step, limits })
        }
        None => None,
    };
    let e = agents::launch(&agent, &command, flight.as_ref());
    eprintln!("cuflight: cannot run '{}': {e}", command[0]);
    Ok(spawn_status(&e))
}

pub fn dump(args: DumpArgs) -> Result<i32> {
    let DumpArgs { target, output, last, force } = args;
    let output = output.unwrap_or_else(record::default_output);
    let d = dump::dump(&dump::Target::parse(&target), &output, last, force)?;
    let s = &d.summary;
    let cover = match d.complete_for {
        Some(c) if c < d.span => {
            format!("; busy rings wrapped: complete for the last {:.3} s only", c.as_secs_f64())
        }
        _ => String::new(),
    };
    eprintln!(
        "cuflight: wrote {} ({} events of process {} from the last {}; dumped: {}{cover})",
        output.display(),
        s.events,
        d.pid,
        span_text(d.span),
        d.reason,
    );
    for (pid, flush_ms) in &s.unflushed {
        let held = match flush_ms {
            0 => "device records CUPTI still held (it had not flushed yet) are missing".to_string(),
            ms => format!("device records of its last {ms} ms are missing"),
        };
        eprintln!("cuflight: process {pid} could not flush CUPTI before this dump: {held}");
    }
    if let Some(why) = &s.stopped {
        bail!("the dump is incomplete ({why})");
    }
    Ok(0)
}

pub fn attach(args: AttachArgs) -> Result<i32> {
    let AttachArgs { pid, output, duration, window, sampling, force, inject, trace } = args;
    let SamplingArgs { every, count } = sampling;
    if trace.is_some_and(|t| t & cuflight_format::tracing::HES != 0) {
        // CUPTI takes it only before the program's context exists (cupti_activity.h): at `record` or `launch`.
        eprintln!(
            "cuflight: hes is chosen when the program starts (record or launch --trace ...,hes): this window times \
             kernels the usual way"
        );
    }
    let inject = match inject {
        true => Some(record::find_agent().context(NO_AGENT)?),
        false => None,
    };
    let range = window.range();
    // 10 s, or back-to-back windows when sampling more often than that.
    let default = every.map_or(Duration::from_secs(10), |e| e.min(Duration::from_secs(10)));
    let duration = duration.or((range.is_none()).then_some(default));
    if every.zip(duration).is_some_and(|(e, d)| e < d) {
        bail!("--every must be at least --duration (windows cannot overlap)");
    }
    cupti_memory_note(count);
    let opts = attach::AttachOptions {
        pid,
        output: output.unwrap_or_else(record::default_output),
        duration,
        range,
        drain_interval: Duration::from_millis(10),
        force,
        every,
        count: count.unwrap_or(1),
        inject,
        trace,
    };
    let mut stopped = None;
    attach::attach(&opts, |path, a| {
        let s = &a.summary;
        eprintln!(
            "cuflight: {} ({} events, {} bytes; {}); {}",
            wrote(s, path.display()),
            s.events,
            s.bytes,
            a.ended,
            s.losses_line(),
        );
        if let Some(line) = a.arming.describe() {
            eprintln!("cuflight: {line}");
        }
        print_costs(s);
        if stopped.is_none() {
            stopped = s.stopped.clone();
        }
    })?;
    if let Some(why) = stopped {
        bail!("recording stopped early ({why})");
    }
    Ok(0)
}

/// The status a shell gives a command it cannot run: 127 when it is not found, 126 when it cannot be executed.
fn spawn_status(e: &std::io::Error) -> i32 {
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// `cargo install` installs binaries only: the agent has to come from a build or the wheel.
const NO_AGENT: &str = "cannot find libcuflight.so next to the cuflight binary or in ../lib (`cargo install` installs \
                        no libraries: use `python3 -m pip install .`, or copy target/release/libcuflight.so beside \
                        the binary); or set CUFLIGHT_AGENT to its path";

/// Refuses an output that is the program to record, or a file its command names (`-o train.py -- python
/// train.py`): with --force the trace would replace it while it runs.
fn output_not_in_command(command: &[String], output: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else { return Ok(()) };
    let is_output =
        |p: &std::path::Path| std::fs::metadata(p).is_ok_and(|m| m.dev() == out.dev() && m.ino() == out.ino());
    let Some(first) = command.first() else { return Ok(()) };
    let program = if first.contains('/') {
        Some(PathBuf::from(first))
    } else {
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(first)).find(|c| c.is_file()))
    };
    if program.is_some_and(|p| is_output(&p)) {
        bail!("{} is the program to record; choose another output (-o)", output.display());
    }
    if let Some(arg) = command[1..].iter().find(|a| is_output(std::path::Path::new(a))) {
        bail!("{} is named in the command to record ({arg}); choose another output (-o)", output.display());
    }
    Ok(())
}

/// Everything before the program is cuflight's: a word there that looks like an option and is not one is an
/// error naming it (clap's usage, exit 2), never a program to run. `--` before a program named `-x` still runs it.
fn program_word(subcommand: &str, command: &[String]) {
    let Some(word) = command.first().filter(|w| w.starts_with('-') && w.len() > 1) else { return };
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let after_separator = args.windows(2).any(|w| w[0] == "--" && w[1] == word.as_str());
    if after_separator {
        return;
    }
    let mut cli = <Cli as clap::CommandFactory>::command();
    let sub = cli.find_subcommand_mut(subcommand).map(|c| c.clone()).unwrap_or(cli);
    sub.bin_name(format!("cuflight {subcommand}"))
        .error(
            clap::error::ErrorKind::UnknownArgument,
            format!(
                "unknown option '{word}' before the program (put `--` before a program whose name starts with '-')"
            ),
        )
        .exit();
}

/// A span as users write it back: `30s`, `1.5s`, `2m`, or "the whole recording" when unbounded.
fn span_text(d: Duration) -> String {
    match d.as_secs_f64() {
        s if s > 7.0 * 86400.0 => "recording (everything the rings held)".into(),
        s if s >= 120.0 && s % 60.0 == 0.0 => format!("{} min", s / 60.0),
        s => format!("{s} s"),
    }
}

/// `cuflight stats TRACE` on standard output (`record --stats`).
fn print_stats(trace: &std::path::Path) -> Result<()> {
    let mut source = cuflight_collector::model::source::EventSource::open(trace)?;
    let stats = Stats::compute_source(&mut source)?;
    let mut text = stats.render(&stats::Report::default_text(), stats::Style::Table);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    print!("{text}");
    Ok(())
}

/// What losing nothing and reading Python stacks cost the program, and where stacks could not be read.
fn print_costs(s: &RecordSummary) {
    let lines = s
        .backpressure()
        .into_iter()
        .chain(s.python_stacks_line())
        .chain(s.eager_tracing_line())
        .chain(s.graph_node_tracing_line())
        .chain(s.python_unread_lines())
        .chain(s.gpu_counters_lines());
    for line in lines {
        eprintln!("cuflight: {line}");
    }
}

/// Says once what many sampling windows leave in the program (each a CUPTI session), from 16 MB of it.
fn cupti_memory_note(count: Option<u32>) {
    let n = u64::from(count.unwrap_or(1));
    let kept = n * cuflight_format::control::CUPTI_KEEPS_PER_SESSION;
    if kept >= 16 << 20 {
        eprintln!(
            "cuflight: {n} windows are {n} CUPTI sessions, and CUPTI keeps about 74 KB of the program's memory after \
             each: about {} MB here (fewer, longer windows keep less)",
            kept >> 20
        );
    }
}

/// `cuflight recover TRACE [-o OUT]`: a complete copy of a trace cut short.
pub fn recover(trace: &std::path::Path, output: Option<std::path::PathBuf>, force: bool) -> anyhow::Result<i32> {
    let output = match output {
        Some(o) => o,
        None => crate::stand_in::beside(trace, "recovered.cuf")?,
    };
    let out = cuflight_collector::export::output::Output::create(&output, &[trace], force)?;
    let r = cuflight_collector::capture::recover::recover(trace, std::io::BufWriter::new(out.try_clone()?))
        .map_err(|e| crate::export_cmd::named(e, &output))?;
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
            crate::stand_in::name_of(trace)
        ),
    }
    Ok(0)
}
