//! The command line of `cuflight`: its subcommands and their options (clap), kept apart from what they do
//! (`main.rs`).

use clap::{Parser, Subcommand, ValueEnum};
use cuflight_collector::analysis::stats;
use cuflight_collector::analysis::stats::filter::Filter;
use cuflight_collector::capture::attach;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::capture_args::*;

#[derive(Parser)]
#[command(name = "cuflight", version, about = "A zero-code-change GPU profiler for CUDA programs")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Run a command with the agent injected and write its trace.
    Record(RecordArgs),
    /// Run a command with the agent dormant: injected, recording nothing and costing nothing until a collector
    /// attaches. Exits with the command's status (the command replaces this process).
    Launch(LaunchArgs),
    /// The last seconds of a flight recorder (`cuflight launch --flight-recorder`) as a trace: from a running
    /// process (by pid), or from the image its agent wrote into the dump directory on a crash or hang.
    Dump(DumpArgs),
    /// Record a window of a running process whose agent is dormant (started with `cuflight launch`), then leave
    /// it dormant again. Ctrl-C ends the window early; the trace is written either way.
    Attach(AttachArgs),
    /// Serve the GPU work of every cuflight agent this user may control as Prometheus metrics (GET /metrics):
    /// dormant agents are recorded in short windows (--duty) and their windows folded into counters.
    Serve {
        /// Address to listen on. Another address than localhost shows process and kernel names to whoever can
        /// reach it: it needs --allow-remote.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: std::net::SocketAddr,
        /// Listen on an address other machines can reach.
        #[arg(long)]
        allow_remote: bool,
        /// Recorded share of time: ON/PERIOD (a window of ON every PERIOD), or continuous (attached once, recorded
        /// without pause, folded into the metrics every --interval). Each window sets CUPTI up and tears it down,
        /// and CUPTI keeps about 74 KB of the program's memory a window (H200, CUDA 13.0): 10s/100s records the
        /// same share with a tenth of the windows.
        #[arg(long, default_value = "1s/10s", value_parser = cuflight_live::serve::parse_duty)]
        duty: cuflight_live::serve::Duty,
        /// CUPTI sessions of a process after which its period doubles (and again after as many more), so that
        /// the memory CUPTI keeps grows with the logarithm of the time followed; 0: never stretch.
        #[arg(long, default_value_t = cuflight_live::serve::DEFAULT_WINDOW_BUDGET)]
        window_budget: u32,
        /// With --duty continuous, how often the counters move.
        #[arg(long, default_value = "1s", value_parser = attach::parse_duration)]
        interval: Duration,
        /// One line on stderr per window: when it was asked for (UTC and Unix seconds), how long CUPTI's set-up
        /// took, when it ended, its events and drops; to line a program's own timings up with the windows.
        #[arg(long)]
        log_windows: bool,
        /// Stop after this many periods (default: until SIGINT or SIGTERM).
        #[arg(long, hide = true)]
        rounds: Option<u64>,
        /// Only these processes (default: every agent, the ones started later too).
        pids: Vec<u32>,
    },
    /// A live terminal view of the GPU work of every cuflight agent this user may control (as serve samples it):
    /// busy share, launches per second, synchronisation, memory, drops; kernel time by category and idle causes
    /// of the selected process. Keys: up/down pick, s sort, q quit.
    Top {
        /// Recorded share of time, as serve's --duty (default: a window of 1 s every 2 s; continuous: recorded
        /// without pause, folded every second).
        #[arg(long, default_value = "1s/2s", value_parser = cuflight_live::serve::parse_duty)]
        duty: cuflight_live::serve::Duty,
        /// Only these processes (default: every agent, the ones started later too).
        pids: Vec<u32>,
    },
    /// The processes on this machine with a cuflight agent that this user may control: pid, state (dormant,
    /// recording), since when, CUDA driver and CUPTI versions, CUPTI sessions so far, command.
    Ps {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Also the CUDA processes that have no agent (started without cuflight): `attach --inject` can load one.
        #[arg(long)]
        all: bool,
    },
    /// Every check a recording depends on, each with what it found and the fix: the agent, the NVIDIA driver and
    /// its GPUs, the libcupti a program would load, a probe program recorded end to end, other profilers, device
    /// counters' permission, ptrace for `attach --inject`, memory for the rings, container/MIG/MPS, the clock.
    /// Exits 0 when `cuflight record` would work here.
    Doctor {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// A Model Context Protocol server on standard input and output, for AI assistants: tools to list traces,
    /// read stats tables, the report's findings and verdict, a diff, one kernel or step; with --allow-record also
    /// to record a window of a running process or run a command under `record`, each at most --max-seconds.
    Mcp {
        /// Offer the tools that record (attach to a process of yours, run a command you name).
        #[arg(long)]
        allow_record: bool,
        /// The longest a recording tool may record, in seconds.
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
        max_seconds: u64,
        /// Where the recording tools write their traces.
        #[arg(long, default_value = ".")]
        output_dir: PathBuf,
    },
    /// The JSON Schema of what a command prints with `--format json` (for programs that read it; the guide
    /// publishes them: docs/guide/schemas/).
    Schema {
        #[arg(value_enum)]
        of: SchemaOf,
    },
    /// The doctor's probe program: asks the CUDA driver and writes what it said into FILE (internal).
    #[command(hide = true)]
    DoctorProbe {
        file: PathBuf,
        /// How long its memsets go on, in ms (20 at least).
        #[arg(long, default_value_t = 0)]
        work_ms: u64,
    },
    /// Shell completions for cuflight: `source <(cuflight completions bash)`, or save them where your shell
    /// looks (zsh: a directory on $fpath as _cuflight; fish: ~/.config/fish/completions/cuflight.fish).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Summary tables of a trace (cuflight, Kineto JSON or nsys SQLite), as `nsys stats` prints them.
    Stats {
        /// The trace: a cuflight capture (.cuf), torch.profiler's Kineto JSON (plain or .gz), an Nsight Systems
        /// SQLite export or report; several (or a directory of them) are one job's, merged on one clock first,
        /// and the tables cover all their processes.
        #[arg(required = true, num_args = 1..)]
        traces: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = StatsFormat::Table)]
        format: StatsFormat,
        /// Reports to print, comma-separated, by nsys's names where it has one: cuda_gpu_kern_sum,
        /// cuda_gpu_kern_gb_sum, cuda_api_sum, cuda_kern_exec_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum,
        /// cuda_gpu_sum, cuda_api_gpu_sum, nvtx_sum (nvtx_pushpop_sum, nvtx_startend_sum: its styles apart, only when
        /// named), nvtx_gpu_proj_sum, nvtx_kern_sum, python_sync_sum; and categories, memcpy, memset, memory, sync,
        /// graphs, triton (torch.compile's kernels by what they fuse; in the default view when there are any),
        /// collectives (communication kernels' time by the collective each ran: all_reduce, all_to_all...; in the
        /// default view when any ran), processes, devices. A row per event, only when named: cuda_gpu_trace (kernels, copies, memsets),
        /// cuda_api_trace, cuda_kern_exec_trace, nvtx_pushpop_trace. Reports that name kernels take nsys's `:base` (the
        /// function's name alone, template instances in one row) or `:mangled`. Default: every summary, but on the
        /// terminal nvtx_kern_sum, cuda_kern_exec_sum, cuda_gpu_kern_gb_sum and the combined sums are left out and NVTX
        /// names that differ only by numbers (ProfilerStep#N) share a row; csv and json hold every row.
        #[arg(long, value_delimiter = ',', value_parser = parse_report)]
        report: Vec<stats::Choice>,
        /// Summarise only the events that start inside the instances of this NVTX range or annotation (as
        /// nsys's --filter-nvtx): NAME (every instance, e.g. a step name) or NAME/N (the Nth, from 1); a NAME
        /// ending in * takes every range whose name starts so (ProfilerStep#*: every step).
        #[arg(long, value_name = "NAME[/N]", value_parser = Filter::parse_nvtx, conflicts_with = "filter_time")]
        filter_nvtx: Option<Filter>,
        /// Summarise only the events that start inside this stretch of the timeline (as nsys's --filter-time):
        /// FROM/TO after its start, in seconds or with a unit (1.5/2.5, 1500ms/2500ms), as the report's +s times.
        #[arg(long, value_name = "FROM/TO", value_parser = Filter::parse_time)]
        filter_time: Option<Filter>,
        /// Unit of the time columns on the terminal and in CSV, as nsys's --timeunit: ns (default), us, ms or s,
        /// exact (JSON keeps nanoseconds).
        #[arg(long, value_enum, default_value_t = TimeUnitArg::Ns)]
        timeunit: TimeUnitArg,
        /// Write the tables here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Replace the output file if it exists.
        #[arg(short, long)]
        force: bool,
    },
    /// Diagnose a run: the bottleneck, what it costs and the fix; breakdowns per step and per process. Several
    /// traces are several ranks of one job.
    Report {
        /// The trace (.cuf, Kineto JSON, nsys SQLite or report); several are several ranks or hosts of one job,
        /// and a directory stands for the traces directly in it (torch.profiler's tensorboard_trace_handler's).
        #[arg(required = true, num_args = 1..)]
        traces: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
        /// Steps are the ranges with this name (or starting with it), instead of ProfilerStep#N, step-like NVTX
        /// ranges or the repeating launch pattern.
        #[arg(long, value_parser = parse_step_name)]
        step: Option<String>,
        /// Analyse the warm-up steps with the rest (by default the first steps that run kernels, allocate or
        /// take time as no later step does are reported apart, and the verdict describes the steady steps).
        #[arg(long)]
        include_warmup: bool,
        /// Analyse only the steps that start inside the instances of this NVTX range or annotation (NAME, every
        /// instance, or NAME/N, the Nth from 1; NAME* for every name that starts so; in each trace of a job its
        /// own), warm-up or not: `--filter-nvtx 'ProfilerStep#552'` is that step as the whole run saw it. A trace
        /// without steps is analysed in those stretches.
        #[arg(long, value_name = "NAME[/N]", value_parser = Filter::parse_nvtx, conflicts_with = "filter_time")]
        filter_nvtx: Option<Filter>,
        /// Analyse only the steps that start inside this stretch of the timeline (without steps, the stretch):
        /// FROM/TO after its start (each trace's), in seconds or with a unit (1.5/2.5, 1500ms/2500ms), as the
        /// report's +s times.
        #[arg(long, value_name = "FROM/TO", value_parser = Filter::parse_time)]
        filter_time: Option<Filter>,
        /// Write the report here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Replace the output file if it exists.
        #[arg(short, long)]
        force: bool,
    },
    /// Compare runs of a program (a baseline, one change, the next): steady step time, GPU utilisation,
    /// kernel time by category, kernels gained, lost, faster and slower, findings resolved and new; each run
    /// against the one before it. Any trace format on any side.
    Diff {
        /// The runs, baseline first (.cuf, Kineto JSON or nsys SQLite, mixed as you like; a directory is one run
        /// of a job, its traces reported together).
        #[arg(required = true, num_args = 2..)]
        traces: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
        /// Steps are the ranges with this name (or starting with it), in every run.
        #[arg(long, value_parser = parse_step_name)]
        step: Option<String>,
        /// Compare only the steps that start inside the instances of this NVTX range in each run (as report's
        /// option: NAME, NAME/N, NAME*), e.g. the same step of two runs.
        #[arg(long, value_name = "NAME[/N]", value_parser = Filter::parse_nvtx, conflicts_with = "filter_time")]
        filter_nvtx: Option<Filter>,
        /// Compare only the steps that start inside this stretch of each run's timeline (FROM/TO after its start,
        /// as report's option), e.g. the same minutes of steady state after warm-ups of different lengths.
        #[arg(long, value_name = "FROM/TO", value_parser = Filter::parse_time)]
        filter_time: Option<Filter>,
        /// Write the comparison here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Replace the output file if it exists.
        #[arg(short, long)]
        force: bool,
    },
    /// One trace of a job recorded as several (hosts, ranks): every process on one clock (REALTIME, then each
    /// host moved onto the reference host by their collectives).
    Merge {
        /// The traces (a directory stands for the traces directly in it).
        #[arg(required = true, num_args = 1..)]
        traces: Vec<PathBuf>,
        /// The merged trace.
        #[arg(short, long)]
        output: PathBuf,
        /// Replace the output file if it exists.
        #[arg(short, long)]
        force: bool,
    },
    /// Timeline of a trace (cuflight, Kineto JSON or nsys SQLite) for Perfetto or Kineto-style tools, or
    /// fleet tables (Parquet) of one or many traces for DuckDB, Spark or Trino.
    Export {
        /// The trace; several (one job's ranks or hosts, or a directory of them) are put on one clock first, as
        /// `cuflight merge` does.
        #[arg(required = true, num_args = 1..)]
        traces: Vec<PathBuf>,
        /// Default: chrome when the output is named *.json or *.json.gz, else perfetto.
        #[arg(long, value_enum)]
        format: Option<ExportFormat>,
        /// Output file (default: the trace's name with .perfetto-trace or .json); a Chrome JSON output named *.gz
        /// is gzip-compressed (HTA, TensorBoard and Perfetto read it); with --format parquet, a directory
        /// (default: the first trace's name with .parquet).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Replace the output if it exists (a Parquet directory only if it is a previous cuflight export).
        #[arg(short, long)]
        force: bool,
        /// Draw only the instances of this NVTX range or annotation (NAME, every instance, or NAME/N, the Nth from
        /// 1; NAME* for every name that starts so; as stats' option): what overlaps them, the device work their
        /// calls launched, and device memory at its level. For a trace too large to open whole.
        #[arg(long, value_name = "NAME[/N]", value_parser = Filter::parse_nvtx, conflicts_with = "filter_time")]
        filter_nvtx: Option<Filter>,
        /// Draw only this stretch of the timeline: FROM/TO after its start, in seconds or with a unit (1.5/2.5,
        /// 1500ms/2500ms), as the report's +s times.
        #[arg(long, value_name = "FROM/TO", value_parser = Filter::parse_time)]
        filter_time: Option<Filter>,
    },
    /// Rewrites a trace whose recording was cut short (collector killed, disk full) as a complete one: every
    /// complete block, and a footer saying what was lost. Every command already reads such a trace, with a
    /// warning.
    Recover {
        trace: PathBuf,
        /// Output file (default: the trace's name with .recovered.cuf).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Replace the output file if it exists.
        #[arg(short, long)]
        force: bool,
    },
}

impl Cmd {
    /// The traces a command reads (`-` among them is standard input).
    /// The subcommand's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Cmd::Stats { .. } => "stats",
            Cmd::Recover { .. } => "recover",
            Cmd::Diff { .. } => "diff",
            Cmd::Report { .. } => "report",
            Cmd::Merge { .. } => "merge",
            Cmd::Export { .. } => "export",
            _ => "this command",
        }
    }

    /// The traces of commands that read several as one job (a directory among them stands for its traces).
    pub fn job_traces(&mut self) -> Option<&mut Vec<PathBuf>> {
        match self {
            Cmd::Report { traces, .. }
            | Cmd::Merge { traces, .. }
            | Cmd::Export { traces, .. }
            | Cmd::Stats { traces, .. } => Some(traces),
            _ => None,
        }
    }

    pub fn trace_paths(&mut self) -> Vec<&mut PathBuf> {
        match self {
            Cmd::Recover { trace, .. } => vec![trace],
            Cmd::Stats { traces, .. } => traces.iter_mut().collect(),
            Cmd::Report { traces, .. } | Cmd::Diff { traces, .. } | Cmd::Merge { traces, .. } => {
                traces.iter_mut().collect()
            }
            Cmd::Export { traces, .. } => traces.iter_mut().collect(),
            _ => Vec::new(),
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
    /// A self-contained page with plots (no network needed).
    Html,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ExportFormat {
    /// Perfetto protobuf (open in ui.perfetto.dev or trace_processor).
    Perfetto,
    /// Kineto-compatible Chrome JSON (Holistic Trace Analysis, TensorBoard, chrome://tracing).
    Chrome,
    /// A directory of Parquet tables (kernels, copies, memsets, api, nvtx, memory, steps, processes),
    /// hive-partitioned by host and rank (schema: docs/parquet.md).
    Parquet,
}

impl ExportFormat {
    /// The format asked for, or the one the output's name says (`.json`, `.json.gz`: Chrome JSON), else Perfetto.
    pub fn chosen(asked: Option<ExportFormat>, output: Option<&std::path::Path>) -> ExportFormat {
        let named = |suffix: &str| output.and_then(|o| o.to_str()).is_some_and(|o| o.ends_with(suffix));
        asked.unwrap_or(if named(".json") || named(".json.gz") { ExportFormat::Chrome } else { ExportFormat::Perfetto })
    }
}

/// The commands whose `--format json` output has a published schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SchemaOf {
    Stats,
    Report,
    Diff,
    Doctor,
    Ps,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum TimeUnitArg {
    #[value(alias = "nsec", alias = "nanoseconds")]
    Ns,
    #[value(alias = "usec", alias = "microseconds")]
    Us,
    #[value(alias = "msec", alias = "milliseconds")]
    Ms,
    #[value(alias = "sec", alias = "seconds")]
    S,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum StatsFormat {
    Table,
    Json,
    Csv,
}

/// `--step NAME`: a name every range starts with (the empty one) would make every range a step.
fn parse_step_name(text: &str) -> Result<String, String> {
    match text.trim() {
        "" => Err("a range name is needed (steps are the ranges with this name, or starting with it)".into()),
        _ => Ok(text.to_string()),
    }
}

pub fn parse_report(text: &str) -> Result<stats::Choice, String> {
    stats::Choice::parse(text)
}
