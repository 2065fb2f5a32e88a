//! The command line of `cuflight`: its subcommands and their options (clap), kept apart from what they do
//! (`main.rs`).

use clap::{Parser, Subcommand, ValueEnum};
use cuflight_collector::analysis::stats;
use cuflight_collector::analysis::stats::filter::Filter;
use cuflight_collector::capture::attach;
use cuflight_collector::capture::window::Range;
use std::path::PathBuf;
use std::time::Duration;

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
    DoctorProbe { file: PathBuf },
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
        /// processes, devices. A row per event, only when named: cuda_gpu_trace (kernels, copies, memsets),
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
        #[arg(long)]
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
        #[arg(long)]
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

/// Sampling windows (`record` and `attach` alike).
#[derive(clap::Args)]
pub struct SamplingArgs {
    /// Sampling: start a window this often (the agent is dormant and CUPTI-free in between); window N is written
    /// to <output stem>-N.<ext>.
    #[arg(long, value_parser = attach::parse_duration, requires = "count")]
    pub every: Option<Duration>,
    /// How many sampling windows (with --every).
    #[arg(long, requires = "every", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub count: Option<u32>,
}

/// What the agent traces (`record` and `launch`; `attach --trace` chooses for its window).
#[derive(clap::Args)]
pub struct TraceArgs {
    /// What to trace, comma-separated, as nsys's -t: cuda (always), queries (also the runtime calls that only
    /// read state: cudaGetDevice, cudaGetLastError, ...), nvtx, memory (CUPTI memory records), sync (CUPTI
    /// synchronization records: what each wait waited for; CUPTI then intercepts every runtime call, about 175 ns
    /// each on an H100), overhead (CUPTI overhead records), python (the Python source line behind each
    /// synchronising call, copy, allocation and every 1024th launch), graphs (CUDA graphs at graph level, as nsys's
    /// --cuda-graph-trace=graph: one record per replay instead of one per node; the kernels inside graphs are then
    /// not seen), hes (Blackwell's hardware kernel timestamps, where CUPTI offers them; not with attach).
    /// Default: cuda,nvtx,memory,overhead,python.
    #[arg(short = 't', long, value_parser = parse_trace, value_name = "LIST")]
    pub trace: Option<u32>,
    /// Python stacks of CUDA calls (on by default; `off` is the same as leaving python out of --trace).
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub python_stacks: Option<String>,
    /// Device counters (CUPTI PM sampling): SM, Tensor Core, DRAM and PCIe activity sampled every INTERVAL
    /// (default 100us, 10 kHz; e.g. 20us, 1ms, 50kHz), joined to kernels by `stats --report gpu_metrics`.
    /// Decoding costs the agent's own thread about 70 us of CPU a sample (H200), never the program's threads.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, require_equals = true, default_missing_value = "100us",
          value_parser = parse_sampling_interval)]
    pub gpu_metrics: Option<u64>,
}

impl TraceArgs {
    /// Whether the agents are asked for `bit` (the mask asked for, or the default).
    pub fn asks(&self, bit: u32) -> bool {
        self.trace.unwrap_or(cuflight_format::tracing::DEFAULT) & bit != 0
    }

    /// Hands the choice to the agents of the processes started from here (through their environment).
    pub fn apply(&self) {
        use cuflight_format::tracing::{describe, DEFAULT, PYTHON};
        let mut mask = self.trace;
        match self.python_stacks.as_deref() {
            Some("off") => mask = Some(mask.unwrap_or(DEFAULT) & !PYTHON),
            Some("on") => mask = Some(mask.unwrap_or(DEFAULT) | PYTHON),
            _ => {}
        }
        if let Some(mask) = mask {
            std::env::set_var("CUFLIGHT_TRACE", describe(mask));
        }
        if let Some(ns) = self.gpu_metrics {
            std::env::set_var("CUFLIGHT_GPU_METRICS", ns.to_string());
        }
    }
}

/// A sampling interval in ns: `100us`, `1ms`, `20000ns` or a rate, `10kHz`; 1 us to 1 s.
fn parse_sampling_interval(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 =
        number.trim().parse().map_err(|_| format!("'{text}' is not an interval (e.g. 100us, 1ms, 10kHz)"))?;
    let ns = match unit.to_ascii_lowercase().as_str() {
        "ns" => value,
        "us" => value * 1e3,
        "ms" => value * 1e6,
        "s" => value * 1e9,
        "hz" => 1e9 / value,
        "khz" => 1e6 / value,
        _ => return Err(format!("'{text}': unknown unit '{unit}' (use ns, us, ms, s, Hz or kHz)")),
    };
    if !ns.is_finite() || !(1e3..=1e9).contains(&ns) {
        return Err(format!("'{text}': the sampling interval must be between 1us and 1s (1 MHz to 1 Hz)"));
    }
    Ok(ns.round() as u64)
}

/// `1/N` (or `N`) with N from 2 to 1,000,000: one step of every N.
fn parse_sample(text: &str) -> Result<u32, String> {
    let n = text.trim().strip_prefix("1/").unwrap_or(text.trim());
    match n.parse::<u32>() {
        Ok(n) if (2..=1_000_000).contains(&n) => Ok(n),
        Ok(1) => Err("1/1 is every step: leave --sample out to record the whole run".into()),
        _ => Err(format!("'{text}': give 1/N, one step of every N (N from 2 to 1000000), e.g. 1/10")),
    }
}

fn parse_trace(text: &str) -> Result<u32, String> {
    cuflight_format::tracing::parse(text)
}

/// A window bounded by the program's own marks (`record` and `attach` alike).
#[derive(clap::Args)]
pub struct WindowArgs {
    /// Keep N steps (step-like NVTX ranges: ProfilerStep#N, step, train_step, ...), like torch.profiler's
    /// active steps.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "capture_range")]
    pub steps: Option<u32>,
    /// Steps to let pass first (torch.profiler's wait + warmup).
    #[arg(long, requires = "steps", default_value_t = 0)]
    pub skip_steps: u32,
    /// Keep only what lies inside the program's own marks: cudaProfilerApi (cudaProfilerStart..Stop) or
    /// nvtx:NAME[@DOMAIN] (the first NVTX range of that name).
    #[arg(long, value_parser = Range::parse)]
    pub capture_range: Option<Range>,
}

impl WindowArgs {
    pub fn range(self) -> Option<Range> {
        match self.steps {
            Some(count) => Some(Range::Steps { skip: self.skip_steps, count }),
            None => self.capture_range,
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

#[derive(Clone, Copy, ValueEnum)]
pub enum InjectArg {
    /// CUDA_INJECTION64_PATH and NVTX_INJECTION64_PATH (the CUDA driver loads the agent).
    Driver,
    /// LD_PRELOAD.
    Preload,
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

pub fn parse_report(text: &str) -> Result<stats::Choice, String> {
    stats::Choice::parse(text)
}

#[derive(clap::Args)]
pub struct RecordArgs {
    /// Trace file to write (default: cuflight-N.cuf in the current directory).
    #[arg(short, long, help_heading = "Output")]
    pub output: Option<PathBuf>,
    /// Replace the output file if it exists.
    #[arg(short, long, help_heading = "Output")]
    pub force: bool,
    /// Print `cuflight stats` of the trace once it is written (nsys's --stats=true).
    #[arg(
        long,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL",
        conflicts_with = "every",
        help_heading = "Output"
    )]
    pub stats: Option<bool>,
    #[command(flatten, next_help_heading = "What to record")]
    pub trace: TraceArgs,
    /// How the agent enters the program.
    #[arg(long, value_enum, default_value_t = InjectArg::Driver, help_heading = "What to record")]
    pub inject: InjectArg,
    /// How long to record, as nsys's -d: 10s, 500ms, 2m. Alone, the trace keeps this much from when recording
    /// is armed (after --delay) and the program runs on to its end; with --every, each sampling window's
    /// length (default 10s, at most --every; with --steps or --capture-range, the longest it may wait and last).
    #[arg(short = 'd', long, value_parser = attach::parse_duration, help_heading = "When to record")]
    pub duration: Option<Duration>,
    /// Start keeping events this long after recording is armed (nsys's -y).
    #[arg(
        short = 'y',
        long,
        value_parser = attach::parse_duration,
        conflicts_with = "every",
        help_heading = "When to record"
    )]
    pub delay: Option<Duration>,
    #[command(flatten, next_help_heading = "When to record")]
    pub window: WindowArgs,
    #[command(flatten, next_help_heading = "When to record")]
    pub sampling: SamplingArgs,
    /// Record one step of every N whole (1/N: one chosen at random in each block of N steps), CUPTI quiet in
    /// between; every step's own range is kept, so `report` and `stats` extrapolate to the whole run and say
    /// how. Steps are the program's step-like NVTX ranges (ProfilerStep#N, step, train_step, ...) or
    /// `cuflight.step()` marks; a program that marks none is sampled in one-second slices. Every process of
    /// the run records the same steps (for a multi-node job, export the same CUFLIGHT_SAMPLE_SEED on each).
    #[arg(
        long,
        value_name = "1/N",
        value_parser = parse_sample,
        conflicts_with_all = ["every", "steps", "capture_range", "delay", "duration"],
        help_heading = "When to record"
    )]
    pub sample: Option<u32>,
    /// How often the agent flushes CUPTI's activity buffers, in ms (default 1000).
    #[arg(long, help_heading = "Tuning")]
    pub flush_ms: Option<u64>,
    /// How often the collector drains the rings, in ms.
    #[arg(long, default_value_t = 10, help_heading = "Tuning")]
    pub drain_ms: u64,
    /// Seconds to keep recording processes that outlive the command.
    #[arg(long, default_value_t = 10, help_heading = "Tuning")]
    pub linger_secs: u64,
    /// The program and its arguments: options end at the first word that is not one (as with `nsys profile`);
    /// `--` before it works too.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        num_args = 1..,
        value_name = "COMMAND",
        help_heading = "Arguments"
    )]
    pub command: Vec<String>,
}

#[derive(clap::Args)]
pub struct LaunchArgs {
    /// Record from the start into rings that keep the last DUR (e.g. 30s) of everything, for `cuflight dump`
    /// and for automatic dumps when the program crashes, hangs, hits a sticky CUDA error or gets SIGUSR2.
    #[arg(long, value_parser = attach::parse_duration)]
    pub flight_recorder: Option<Duration>,
    /// Where automatic dumps go (default: the current directory).
    #[arg(long, requires = "flight_recorder")]
    pub dump_dir: Option<PathBuf>,
    /// Dump when a thread waits in a synchronising CUDA call this long while no GPU work completes.
    #[arg(long, value_parser = attach::parse_duration, requires = "flight_recorder")]
    pub hang_timeout: Option<Duration>,
    #[command(flatten)]
    pub trace: TraceArgs,
    /// The program and its arguments: options end at the first word that is not one (as with `nsys profile`);
    /// `--` before it works too.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(clap::Args)]
pub struct DumpArgs {
    /// A pid, or the path of a dump image (cuflight-PID-TIME-N.seg).
    pub target: String,
    /// Trace file to write (default: cuflight-N.cuf in the current directory).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Keep only what ended in this last stretch (default: the recorder's own span).
    #[arg(long, value_parser = attach::parse_duration)]
    pub last: Option<Duration>,
    /// Replace the output file if it exists.
    #[arg(short, long)]
    pub force: bool,
}

#[derive(clap::Args)]
pub struct AttachArgs {
    /// The process (as `cuflight ps` lists it).
    pub pid: u32,
    /// Trace file to write (default: cuflight-N.cuf in the current directory).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// How long to record: 10s, 500ms, 2m (default 10s; with --steps or --capture-range, the longest a
    /// window may wait and last, unbounded by default).
    #[arg(long, value_parser = attach::parse_duration)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub window: WindowArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Replace the output files if they exist.
    #[arg(short, long)]
    pub force: bool,
    /// When the process has no agent (started without cuflight), load one into it first (ptrace; same user
    /// or root). NVTX ranges of libraries that initialised NVTX before are not recorded.
    #[arg(long)]
    pub inject: bool,
    /// What the window traces (as `record --trace`; default: what the program was launched with). NVTX
    /// can be left out of a window, not added to a program launched without it; hes (hardware kernel
    /// timestamps) only comes from the program's start.
    #[arg(short = 't', long, value_parser = parse_trace, value_name = "LIST")]
    pub trace: Option<u32>,
}
