//! What a report is about: the command, the host, the devices and CUDA versions, when it ran, the span of its
//! timeline and what the recording lost. Report times are given relative to `trace_start_ns`, the first
//! instant the Perfetto timeline of the same file shows (its UI counts from there), so "at +1.234 s" in a
//! report is 1.234 s on that timeline.

use cuflight_format::file::Drops;
use cuflight_format::RawEvent;
use serde::Serialize;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunDevice {
    /// The CUDA device ordinal.
    pub ordinal: u32,
    /// The device's name.
    pub name: String,
    /// 0 when the trace did not say.
    pub memory_bytes: u64,
    /// "9.0"; "?" when the trace did not say.
    pub compute_capability: String,
    /// Its streaming multiprocessors (0 when the trace did not say).
    pub multiprocessors: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunSummary {
    /// The program and its arguments.
    pub command_line: Vec<String>,
    /// The host it ran on.
    pub host: String,
    /// Wall-clock start of the recording (CLOCK_REALTIME ns; 0 for imports that do not say).
    pub started_realtime_ns: u64,
    /// The file's timeline: first start and last end of what the Perfetto export draws, over all its processes.
    pub trace_start_ns: u64,
    /// The timeline's last end.
    pub trace_end_ns: u64,
    /// The devices the process saw.
    pub devices: Vec<RunDevice>,
    /// Ordinals of the devices this process's GPU work ran on.
    pub used_devices: Vec<u32>,
    /// `cuDriverGetVersion` (13000 = 13.0), 0 unknown.
    pub cuda_driver_version: u32,
    /// The CUDA runtime's version where an imported trace says, 0 unknown.
    pub cuda_runtime_version: u32,
    /// `cuptiGetVersion`, 0 unknown.
    pub cupti_version: u32,
    /// The HIP runtime's version in a trace recorded on ROCm (HIP_VERSION's form: 60443483 = 6.4.43483); absent
    /// elsewhere.
    #[serde(skip_serializing_if = "is_zero")]
    pub hip_runtime_version: u32,
    /// Recorded on ROCm (the trace says so, or its GPUs run 64-wide wavefronts): the report speaks of HIP's calls
    /// and tools, not CUDA's; absent elsewhere.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rocm: bool,
    /// Records lost by cause (each counted once, in one cause).
    pub drops: Drops,
    /// Records lost, every cause once (drops and refused events; not the calls in flight at arming).
    pub dropped_total: u64,
    /// Calls the agent left out (in flight when it was armed) and events the reader refused (impossible times).
    pub unseen_begin: u64,
    /// Events the reader refused (impossible times).
    pub refused: u64,
    /// The agent flushed and finished (false: the process died abruptly and its last device records are missing).
    pub finished: bool,
    /// Why the agent turned itself off, if it did.
    pub agent_status: String,
}

impl RunSummary {
    /// `at` on the timeline, as "+1.234567 s".
    pub fn at(&self, at: u64) -> String {
        relative(at, self.trace_start_ns)
    }
}

pub fn relative(at: u64, start: u64) -> String {
    let d = at as i128 - start as i128;
    format!(
        "{}{}.{:06} s",
        if d < 0 { "-" } else { "+" },
        d.unsigned_abs() / 1_000_000_000,
        d.unsigned_abs() / 1000 % 1_000_000
    )
}

/// "13.0" from 13000 (a driver's or runtime's version); "-" for 0.
pub fn driver_version(v: u32) -> String {
    if v == 0 {
        "-".into()
    } else {
        format!("{}.{}", v / 1000, v % 1000 / 10)
    }
}

/// HIP's version number as HIP writes it (`hip_version.h`: major × 10,000,000 + minor × 100,000 + patch):
/// 60443483 → "6.4.43483".
pub fn hip_version(v: u32) -> String {
    format!("{}.{}.{}", v / 10_000_000, v % 10_000_000 / 100_000, v % 100_000)
}

impl RunSummary {
    /// A sentence of the report as this run's platform says it: HIP's terms on ROCm
    /// ([`super::words::in_rocm_terms`]), as written elsewhere.
    pub fn said(&self, text: &str) -> String {
        if self.rocm {
            super::words::in_rocm_terms(text)
        } else {
            text.to_string()
        }
    }
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// Sorted ordinals as people write them: "1-7", "0, 2, 5-6".
pub fn ordinals(sorted: &[u32]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        runs.push(match j - i {
            0 => sorted[i].to_string(),
            _ => format!("{}-{}", sorted[i], sorted[j]),
        });
        i = j + 1;
    }
    runs.join(", ")
}

/// A Device event as a row (the first of each ordinal is kept by the caller).
pub fn device(e: &RawEvent, name: &str) -> RunDevice {
    let d = e.as_device();
    let (major, minor) = d.compute_capability;
    RunDevice {
        ordinal: e.device,
        name: name.to_string(),
        memory_bytes: d.memory_bytes,
        compute_capability: if major == 0 { "?".into() } else { format!("{major}.{minor}") },
        multiprocessors: d.multiprocessors,
    }
}

pub use cuflight_trace::model::wall_clock::utc;

impl RunSummary {
    /// One line per fact, for the text report and the HTML summary: (label, value).
    pub fn facts(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let command = self.command_line.join(" ");
        if !command.trim().is_empty() {
            out.push(("Command", command));
        }
        if !self.host.is_empty() {
            out.push(("Host", self.host.clone()));
        }
        out.push(("Started", utc(self.started_realtime_ns)));
        out.push((
            "Timeline",
            format!("{:.3} ms (times below are from its start, as on the Perfetto timeline)", self.span_ms()),
        ));
        // The GPUs the process's work ran on in full; the others it could see (Kineto lists every GPU of the
        // node) in one line, by name.
        let mut devices: Vec<&RunDevice> = self.devices.iter().collect();
        devices.sort_by_key(|d| d.ordinal);
        let (used, idle): (Vec<&RunDevice>, Vec<&RunDevice>) =
            devices.into_iter().partition(|d| self.used_devices.contains(&d.ordinal));
        for d in &used {
            let figures = match d.compute_capability.as_str() {
                // AMD calls its multiprocessors compute units (deviceProperties' numSms: 304 on an MI300X).
                "?" if d.name.starts_with("AMD ") => format!("{} CUs", d.multiprocessors),
                "?" => format!("{} SMs", d.multiprocessors),
                cc => format!("compute capability {cc}, {} SMs", d.multiprocessors),
            };
            out.push((
                "GPU",
                match d.memory_bytes {
                    // A device the trace did not describe (a Kineto trace's, recovered from its kernels): what is
                    // known, after the name that says how, and no placeholder for its memory.
                    0 => format!("{}: {}: {figures}", d.ordinal, d.name),
                    m => format!("{}: {} ({:.1} GiB, {figures})", d.ordinal, d.name, m as f64 / (1u64 << 30) as f64),
                },
            ));
        }
        if !idle.is_empty() {
            let mut by_name: Vec<(&str, Vec<u32>)> = Vec::new();
            for d in &idle {
                match by_name.iter_mut().find(|(n, _)| *n == d.name) {
                    Some((_, ordinals)) => ordinals.push(d.ordinal),
                    None => by_name.push((&d.name, vec![d.ordinal])),
                }
            }
            let groups: Vec<String> = by_name
                .iter()
                .map(|(name, o)| match o.len() {
                    1 => format!("{}: {name}", ordinals(o)),
                    n => format!("{}: {n} x {name}", ordinals(o)),
                })
                .collect();
            let label = if used.is_empty() { "GPUs" } else { "Other GPUs" };
            out.push((label, format!("{} (no work of this process ran there)", groups.join("; "))));
        }
        let cupti = if self.cupti_version == 0 { "-".to_string() } else { self.cupti_version.to_string() };
        let runtime = match self.cuda_runtime_version {
            0 => String::new(),
            v => format!(", runtime {}", driver_version(v)),
        };
        if self.rocm {
            let hip = match self.hip_runtime_version {
                0 => "-".to_string(),
                v => hip_version(v),
            };
            out.push(("ROCm", format!("HIP runtime {hip}")));
        } else {
            let driver = driver_version(self.cuda_driver_version);
            out.push(("CUDA", format!("driver {driver}{runtime}, CUPTI API {cupti}")));
        }
        let refused = (self.refused, "impossible times, such as an end before its start, refused on reading");
        out.push(("Recording", self.drops.lost_line(&[refused])));
        if let Some(names) = self.drops.names_not_kept() {
            out.push(("Names", names));
        }
        if self.unseen_begin > 0 {
            // Not lost: begun before the window, so their start is unknown and they are left out.
            let what = format!(
                "{} calls in flight when recording was armed, left out (their start is unknown)",
                self.unseen_begin
            );
            out.push(("Unseen", what));
        }
        if !self.finished {
            out.push(("Ended", "abruptly: the last device records the agent had not flushed are missing".into()));
        }
        if !self.agent_status.is_empty() {
            out.push(("Agent", format!("off: {}", self.agent_status)));
        }
        out
    }

    pub fn span_ms(&self) -> f64 {
        self.trace_end_ns.saturating_sub(self.trace_start_ns) as f64 / 1e6
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn wall_clock_and_relative_times_read_as_people_write_them() {
        assert_eq!(super::relative(2_500_123_456, 1_000_000_000), "+1.500123 s");
        assert_eq!(super::relative(999_000_000, 1_000_000_000), "-0.001000 s");
        assert_eq!(super::driver_version(12040), "12.4");
        assert_eq!(super::ordinals(&[1, 2, 3, 4, 5, 6, 7]), "1-7");
        assert_eq!(super::ordinals(&[0, 2, 5, 6]), "0, 2, 5-6");
        assert_eq!(super::ordinals(&[3]), "3");
    }
}
