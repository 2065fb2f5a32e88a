//! The reports `cuflight stats --report` names (nsys's names where it has one, the names older nsys releases
//! gave them, the JSON keys of their tables) and how they are written.

use super::kernel_names::KernelNames;

/// One report of `cuflight stats --report`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    Kernels,
    KernGrid,
    Categories,
    /// Communication time by collective (cuflight's: nsys has no such report).
    Collectives,
    Api,
    KernExec,
    MemTime,
    MemSize,
    Memcpy,
    Memset,
    Memory,
    Nvtx,
    NvtxGpuProj,
    NvtxKern,
    Sync,
    PythonSync,
    Graphs,
    /// torch.compile's Triton kernels by what they fuse (cuflight's).
    Triton,
    /// GEMM and attention operators by shape (cuflight's: nsys has no shapes).
    GemmPerf,
    AttentionPerf,
    /// Device counters joined to kernels (cuflight's: nsys shows GPU metrics only as timeline rows).
    GpuMetrics,
    /// Calls that returned an error (cuflight's: nsys has no such report).
    ApiErrors,
    Processes,
    Devices,
    GpuSum,
    ApiGpuSum,
    /// nvtx_sum's push/pop and start/end rows apart (only by name: `nvtx` holds them all).
    NvtxPushPop,
    NvtxStartEnd,
    /// A row per event (streamed by [`super::event_trace`], not held in [`super::Stats`]).
    GpuTrace,
    ApiTrace,
    KernExecTrace,
    NvtxPushPopTrace,
}

impl Report {
    pub const ALL: [Report; 26] = [
        Report::Kernels,
        Report::KernGrid,
        Report::Categories,
        Report::Collectives,
        Report::Api,
        Report::KernExec,
        Report::MemTime,
        Report::MemSize,
        Report::Memcpy,
        Report::Memset,
        Report::Memory,
        Report::Nvtx,
        Report::NvtxGpuProj,
        Report::NvtxKern,
        Report::Sync,
        Report::PythonSync,
        Report::Graphs,
        Report::Triton,
        Report::GemmPerf,
        Report::AttentionPerf,
        Report::GpuMetrics,
        Report::ApiErrors,
        Report::Processes,
        Report::Devices,
        Report::GpuSum,
        Report::ApiGpuSum,
    ];

    /// The reports with a row per event: only by name (`nsys stats` prints them only when asked), streamed.
    pub const EVENT_TRACES: [Report; 4] =
        [Report::GpuTrace, Report::ApiTrace, Report::KernExecTrace, Report::NvtxPushPopTrace];

    /// Whether the report's rows name kernels (and take `:base` or `:mangled`).
    pub fn names_kernels(self) -> bool {
        use Report::*;
        matches!(self, Kernels | KernGrid | KernExec | NvtxKern | GpuTrace | KernExecTrace | GpuSum | ApiGpuSum)
    }

    /// Reports printed only when named, and not by the per-event pass: parts of another report's table.
    pub const PARTS: [Report; 2] = [Report::NvtxPushPop, Report::NvtxStartEnd];

    pub fn is_event_trace(self) -> bool {
        Report::EVENT_TRACES.contains(&self)
    }

    /// What the terminal shows by default: all but the per-range x per-kernel table, which grows with the run, the
    /// combined summaries, which repeat the kernel, memory and API tables, the per-launch and per-shape kernel
    /// tables, which `nsys stats` does not print by default either, and the GEMMs by shape (`--report`
    /// shows them; JSON and CSV hold everything).
    pub fn default_text() -> Vec<Report> {
        let left_out = [
            Report::NvtxKern,
            Report::KernExec,
            Report::KernGrid,
            Report::GpuSum,
            Report::ApiGpuSum,
            Report::GemmPerf,
            Report::AttentionPerf,
            Report::GpuMetrics,
            Report::Triton,
            Report::Collectives,
        ];
        Report::ALL.into_iter().filter(|r| !left_out.contains(r)).collect()
    }

    /// The name `--report` takes (nsys's where it has one) and the JSON key of the table.
    pub fn names(self) -> (&'static str, &'static str) {
        match self {
            Report::Kernels => ("cuda_gpu_kern_sum", "kernels"),
            Report::KernGrid => ("cuda_gpu_kern_gb_sum", "kern_gb"),
            Report::Categories => ("categories", "categories"),
            Report::Collectives => ("collectives", "collectives"),
            Report::Api => ("cuda_api_sum", "api"),
            Report::KernExec => ("cuda_kern_exec_sum", "kern_exec"),
            Report::MemTime => ("cuda_gpu_mem_time_sum", "gpu_mem_time"),
            Report::MemSize => ("cuda_gpu_mem_size_sum", "gpu_mem_size"),
            Report::Memcpy => ("memcpy", "memcpy"),
            Report::Memset => ("memset", "memset"),
            Report::Memory => ("memory", "memory"),
            Report::Nvtx => ("nvtx_sum", "nvtx"),
            Report::NvtxGpuProj => ("nvtx_gpu_proj_sum", "nvtx_gpu_proj"),
            Report::NvtxKern => ("nvtx_kern_sum", "nvtx_kern"),
            Report::Sync => ("sync", "sync"),
            Report::PythonSync => ("python_sync_sum", "python_sync"),
            Report::Graphs => ("graphs", "graphs"),
            Report::Triton => ("triton", "triton"),
            Report::GemmPerf => ("gemm_perf", "gemm_perf"),
            Report::AttentionPerf => ("attention_perf", "attention_perf"),
            Report::GpuMetrics => ("gpu_metrics", "gpu_metrics"),
            Report::ApiErrors => ("cuda_api_errors", "api_errors"),
            Report::Processes => ("processes", "processes"),
            Report::Devices => ("devices", "devices"),
            Report::GpuSum => ("cuda_gpu_sum", "gpu_sum"),
            Report::NvtxPushPop => ("nvtx_pushpop_sum", "nvtx_pushpop"),
            Report::NvtxStartEnd => ("nvtx_startend_sum", "nvtx_startend"),
            Report::ApiGpuSum => ("cuda_api_gpu_sum", "api_gpu_sum"),
            Report::GpuTrace => ("cuda_gpu_trace", "gpu_trace"),
            Report::ApiTrace => ("cuda_api_trace", "api_trace"),
            Report::KernExecTrace => ("cuda_kern_exec_trace", "kern_exec_trace"),
            Report::NvtxPushPopTrace => ("nvtx_pushpop_trace", "nvtx_pushpop_trace"),
        }
    }

    /// One name of `--report` (a report name, a JSON key, or the name older nsys releases gave it, which scripts
    /// still pass: gpukernsum, cudaapisum, ...).
    pub fn parse(want: &str) -> Result<Report, String> {
        let want = want.trim();
        let older = match want {
            "gpukernsum" => Some(Report::Kernels),
            "gpukerngbsum" => Some(Report::KernGrid),
            "cudaapisum" => Some(Report::Api),
            "kernexecsum" => Some(Report::KernExec),
            "gpusum" => Some(Report::GpuSum),
            "gpumemtimesum" => Some(Report::MemTime),
            "gpumemsizesum" => Some(Report::MemSize),
            "nvtxsum" => Some(Report::Nvtx),
            "nvtxppsum" => Some(Report::NvtxPushPop),
            "nvtxsesum" => Some(Report::NvtxStartEnd),
            "gputrace" => Some(Report::GpuTrace),
            "cudaapitrace" => Some(Report::ApiTrace),
            "kernexectrace" => Some(Report::KernExecTrace),
            "nvtxpptrace" => Some(Report::NvtxPushPopTrace),
            _ => None,
        };
        if let Some(r) = older {
            return Ok(r);
        }
        let all = Report::ALL.into_iter().chain(Report::PARTS).chain(Report::EVENT_TRACES);
        all.clone().find(|r| r.names().0 == want || r.names().1 == want).ok_or_else(|| {
            let known: Vec<&str> = all.map(|r| r.names().0).collect();
            format!("unknown report '{want}' (known: {})", known.join(", "))
        })
    }
}

/// A report as `--report` names it, with the kernel-name form the kernel reports take after a colon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub report: Report,
    pub kernel_names: KernelNames,
}

impl Choice {
    /// `name[:base|:mangled]`.
    pub fn parse(want: &str) -> Result<Choice, String> {
        let (name, arg) = match want.trim().split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (want.trim(), None),
        };
        let report = Report::parse(name)?;
        let kernel_names = match arg {
            None => KernelNames::Full,
            Some(a) if report.names_kernels() => KernelNames::parse(a).map_err(|e| format!("{name}: {e}"))?,
            Some(a) => return Err(format!("{name} takes no argument (':{a}'); only the kernel reports do")),
        };
        Ok(Choice { report, kernel_names })
    }
}

/// How the tables are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Style {
    #[default]
    Table,
    Csv,
    Json,
}
