//! The options of the capture commands (`record`, `launch`, `dump`, `attach`): what to trace, when to record,
//! sampling windows, how to inject the agent. `cli.rs` holds the subcommands that take them.

use clap::ValueEnum;
use cuflight_collector::capture::attach;
use cuflight_collector::capture::window::Range;
use std::path::PathBuf;
use std::time::Duration;

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
    /// --cuda-graph-trace=graph: one record per replay instead of one per node, which spares each replay's launch
    /// call about 1.1 us a node (an H200's figure); the kernels inside graphs are then not seen), hes (Blackwell's
    /// hardware kernel timestamps, where CUPTI offers them; not with attach), api-records (the calls from CUPTI's
    /// API activity records, as Kineto takes them, instead of callbacks into cuflight: no Python stacks, so not
    /// with python; CUDA 12.5 and later; not measured against callbacks on a GPU yet).
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
pub enum InjectArg {
    /// CUDA_INJECTION64_PATH and NVTX_INJECTION64_PATH (the CUDA driver loads the agent).
    Driver,
    /// LD_PRELOAD.
    Preload,
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
    /// and for automatic dumps when the program crashes, hangs, hits a sticky CUDA error, gets SIGUSR2 or takes a
    /// slow step (--dump-on-slow-step).
    #[arg(long, value_parser = attach::parse_duration)]
    pub flight_recorder: Option<Duration>,
    /// Where automatic dumps go (default: the current directory).
    #[arg(long, requires = "flight_recorder")]
    pub dump_dir: Option<PathBuf>,
    /// Dump when a thread waits in a synchronising CUDA call this long while no GPU work completes.
    #[arg(long, value_parser = attach::parse_duration, requires = "flight_recorder")]
    pub hang_timeout: Option<Duration>,
    /// Dump when a step (the program's NVTX step ranges, ProfilerStep, cuflight.step(); each thread's against
    /// its own, a server's prefill, decode and mixed iterations each against their own kind) takes FACTOR times
    /// the median of the 16 before it and 10 ms more, e.g. 3 or 3x (at its end; a step still running once it has run half the span); at most
    /// one such dump per recorder span, 8 a process, and none for a slow step within a quarter of the time of one
    /// already dumped (a periodic evaluation step is dumped once).
    #[arg(long, value_name = "FACTOR", value_parser = parse_factor, requires = "flight_recorder")]
    pub dump_on_slow_step: Option<f64>,
    /// The most the dumps in --dump-dir may take (all of them, any process's): an automatic dump that would
    /// take them past it is not written, and says so. SIZE as 4G, 500M (base 1024). Default: a tenth of its file
    /// system, 4 GiB at most (systemd-coredump's MaxUse).
    #[arg(long, value_name = "SIZE", value_parser = parse_budget, requires = "flight_recorder")]
    pub dump_max_use: Option<u64>,
    /// What the file system of --dump-dir keeps available for the program: an automatic dump that would leave
    /// less is not written, and says so. Default: 15% of the file system, 4 GiB at most (systemd-coredump's
    /// KeepFree); 0 keeps nothing.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "flight_recorder")]
    pub dump_keep_free: Option<u64>,
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

/// `--dump-on-slow-step`'s factor: `3` or `3x`, from 1.1 to 1000.
fn parse_factor(v: &str) -> Result<f64, String> {
    let f: f64 =
        v.trim().trim_end_matches(['x', 'X']).parse().map_err(|_| format!("'{v}' is not a factor (e.g. 3 or 3x)"))?;
    if !(1.1..=1000.0).contains(&f) {
        return Err(format!("'{v}': a slow step is 1.1 to 1000 times the typical one"));
    }
    Ok(f)
}

/// A size in bytes: `4G`, `500M`, `64k`, `1.5G`, `4GiB`, `1024` (K, M, G, T to the base of 1024, as systemd
/// reads them).
fn parse_size(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let digits = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let shift = match unit.trim().to_ascii_lowercase().trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("'{v}' is not a size (e.g. 4G, 500M)")),
    };
    let n: f64 = number.parse().map_err(|_| format!("'{v}' is not a size (e.g. 4G, 500M)"))?;
    let bytes = n * (1u64 << shift) as f64;
    if !(0.0..=u64::MAX as f64 / 2.0).contains(&bytes) {
        return Err(format!("'{v}': too large a size"));
    }
    Ok(bytes.round() as u64)
}

/// `--dump-max-use`: a size above zero (zero would refuse every dump, which leaving out the automatic dumps'
/// causes says better).
fn parse_budget(v: &str) -> Result<u64, String> {
    match parse_size(v)? {
        0 => Err(format!("'{v}': a budget of 0 refuses every dump")),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_systemd_reads_them() {
        let sz = super::parse_size;
        assert_eq!((sz("4G"), sz("500M"), sz("64k"), sz("1024")), (Ok(4 << 30), Ok(500 << 20), Ok(64 << 10), Ok(1024)));
        assert_eq!((sz("1.5G"), sz("2GiB"), sz(" 3 MB"), sz("0")), (Ok(3 << 29), Ok(2 << 30), Ok(3 << 20), Ok(0)));
        for bad in ["", "G", "4X", "-1G", "1e30T", "4 G B x"] {
            assert!(sz(bad).is_err(), "{bad}");
        }
        assert!(super::parse_budget("0").is_err() && super::parse_budget("1k") == Ok(1024));
    }
}
