//! `cuflight doctor`: every check a recording depends on, in one run, each with what it found and the one-line
//! fix (as `nsys status --environment` does for Nsight Systems). It ends with whether `cuflight record` would
//! work here, and exits 0 exactly then. The checks' names are `capture::doctor_checks`'s, which the failures of
//! `record`, `attach` and `serve` point to.

mod cuda;
mod machine;

use crate::cli::Format;
use anyhow::Result;
use cuflight_collector::capture::doctor_checks as checks;
use serde::Serialize;

pub use cuda::probe_main;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The check passed.
    Ok,
    /// Worth knowing; changes nothing a recording needs.
    Note,
    /// A feature beyond a plain recording (attach --inject, counters) will not work, or costs more.
    Warn,
    /// A recording will not work.
    Fail,
    /// Not tried: an earlier check failed.
    Skipped,
}

impl Level {
    fn shown(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Note => "note",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
            Level::Skipped => "--",
        }
    }
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Check {
    /// The check's name; a failure of `record`, `attach` or `serve` names the check that says more.
    #[schemars(schema_with = "check_names")]
    pub check: &'static str,
    /// ok, note, warn, fail, or skipped (not tried: an earlier check failed).
    pub result: Level,
    /// What the check found, in words.
    pub found: String,
    /// The one-line fix, when there is something to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn check_names(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": checks::ALL})
}

/// What `cuflight doctor --format json` prints.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Diagnosis {
    /// Whether `cuflight record` would work here (then the doctor exits 0): no check failed.
    record_would_work: bool,
    /// Every check, in the order the doctor runs them.
    checks: Vec<Check>,
}

pub fn run(format: Format) -> Result<i32> {
    let checks = run_checks();
    let d = Diagnosis { record_would_work: !checks.iter().any(|c| c.result == Level::Fail), checks };
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&d)?),
        Format::Table => print!("{}", render(&d)),
    }
    Ok(if d.record_would_work { 0 } else { 1 })
}

fn run_checks() -> Vec<Check> {
    let (agent, agent_path) = cuda::agent();
    let module = std::fs::read_to_string("/proc/driver/nvidia/version").ok();
    let module = module.as_deref().and_then(cuda::kernel_module_version);
    let probe = cuda::probe_driver();
    let driver = cuda::driver(&probe, module.as_deref());
    let recorded = match (&agent_path, driver.result) {
        (Some(a), Level::Ok | Level::Note) => Some(cuda::record_probe(a)),
        _ => None,
    };
    let libraries = cuda::cupti_libraries();
    let facts = probe.as_ref().ok();
    let driver_cuda = facts.and_then(|f| f.driver_version);
    let cupti = verdicts::cupti(recorded.as_ref(), &libraries, driver_cuda);
    let recording = verdicts::recording(recorded.as_ref(), agent.result, driver.result);
    let processes = machine::processes();
    let env_vars: Vec<(&str, Option<String>)> = ["CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "LD_PRELOAD"]
        .into_iter()
        .map(|n| (n, std::env::var(n).ok()))
        .collect();
    let privileges = machine::Privileges::of_this_process();
    let admin_only = std::fs::read_to_string("/proc/driver/nvidia/params")
        .ok()
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("RmProfilingAdminOnly:").map(|v| v.trim() == "1")));
    let holders: Vec<String> = processes
        .iter()
        .filter(|p| cuflight_format::gpu_counters::HOLDER_PROCESSES.contains(&p.comm.as_str()))
        .map(|p| format!("{} ({})", p.comm, p.pid))
        .collect();
    let counters = verdicts::counters(recorded.as_ref(), admin_only, privileges, &holders);
    let device_names: Vec<String> = facts.map(|f| f.devices.iter().map(|d| d.0.clone()).collect()).unwrap_or_default();
    vec![
        agent,
        driver,
        cupti,
        recording,
        machine::other_tools(&env_vars, &processes),
        counters,
        machine::ptrace(privileges),
        machine::memory(),
        machine::environment(&machine::Surroundings::read(&device_names, &processes)),
        machine::clock(),
    ]
}

fn render(d: &Diagnosis) -> String {
    let count = |l: Level| d.checks.iter().filter(|c| c.result == l).count();
    let (fails, warns) = (count(Level::Fail), count(Level::Warn));
    let mut out = if d.record_would_work {
        format!("cuflight doctor: `cuflight record` would work here ({warns} warning(s))\n")
    } else {
        format!(
            "cuflight doctor: `cuflight record` would NOT work here ({fails} failed check(s), {warns} warning(s))\n"
        )
    };
    for c in &d.checks {
        out.push_str(&format!("  {:<5} {:<12} {}\n", c.result.shown(), c.check, c.found));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("  {:<5} {:<12} fix: {fix}\n", "", ""));
        }
    }
    out
}

/// The verdicts that weigh CUDA's answers together (pure, for tests).
mod verdicts {
    use super::cuda::{cuda_release, Recorded};
    use super::{checks, Check, Level};
    use cuflight_format::gpu_counters as verdict;
    use std::path::PathBuf;

    fn release((major, minor): (u32, u32)) -> String {
        format!("CUDA {major}.{minor}")
    }

    pub fn cupti(
        recorded: Option<&Recorded>,
        libraries: &[(PathBuf, Option<(u32, u32)>)],
        driver: Option<i32>,
    ) -> Check {
        let newer_than_driver = |v: Option<(u32, u32)>| match (v, driver) {
            (Some((major, minor)), Some(d)) => (major * 1000 + minor * 10) as i32 > d,
            _ => false,
        };
        let listed: Vec<String> = libraries
            .iter()
            .map(|(p, v)| match v {
                Some(v) if newer_than_driver(Some(*v)) => {
                    format!("{} ({}, newer than the driver)", p.display(), release(*v))
                }
                Some(v) => format!("{} ({})", p.display(), release(*v)),
                None => p.display().to_string(),
            })
            .collect();
        let also = if listed.is_empty() { String::new() } else { format!("; on this machine: {}", listed.join(", ")) };
        let too_new = libraries.iter().any(|(_, v)| newer_than_driver(*v));
        let newer_fix = driver.map(|d| {
            format!(
                "a program whose CUDA is newer than the driver's (CUDA {}) may find CUPTI refused: update the driver, \
                 or use a CUDA no newer than it",
                cuda_release(d)
            )
        });
        let check = |result, found: String, fix: Option<String>| Check { check: checks::CUPTI, result, found, fix };
        match recorded {
            Some(Recorded { cupti: Some((path, api)), .. }) => {
                let level = if too_new { Level::Warn } else { Level::Ok };
                let found = format!(
                    "the probe loaded {path} (CUPTI API {api}); a program loads the libcupti beside its own libcudart \
                     first{also}"
                );
                check(level, found, too_new.then_some(newer_fix).flatten())
            }
            Some(Recorded { agent_off: Some(why), .. }) if why.contains("libcupti") || why.contains("CUPTI") => {
                let (level, fix) = if libraries.is_empty() {
                    (
                        Level::Fail,
                        "install CUPTI for your CUDA (python3 -m pip install nvidia-cuda-cupti-cu12, or the toolkit's \
                         extras/CUPTI), or set CUFLIGHT_CUPTI to a libcupti.so",
                    )
                } else {
                    (
                        Level::Warn,
                        "a program finds the libcupti beside its own CUDA runtime; for others set CUFLIGHT_CUPTI or \
                         CUDA_HOME to one listed here",
                    )
                };
                check(level, format!("the probe's agent: {why}{also}"), Some(fix.into()))
            }
            _ if libraries.is_empty() => check(
                Level::Fail,
                "no libcupti found (CUFLIGHT_CUPTI, CUDA_HOME, /usr/local/cuda*, LD_LIBRARY_PATH, python3's \
                 nvidia wheels)"
                    .into(),
                Some(
                    "install CUPTI for your CUDA (python3 -m pip install nvidia-cuda-cupti-cu12, or a CUDA toolkit)"
                        .into(),
                ),
            ),
            _ => check(Level::Note, format!("not loaded by a probe{also}"), None),
        }
    }

    pub fn recording(recorded: Option<&Recorded>, agent: Level, driver: Level) -> Check {
        let check = |result, found: String, fix: Option<String>| Check { check: checks::RECORDING, result, found, fix };
        let Some(r) = recorded else {
            let failed = if agent == Level::Fail { checks::AGENT } else { checks::DRIVER };
            let _ = driver;
            return check(Level::Skipped, format!("not tried: the {failed} check failed"), None);
        };
        if let Some(e) = &r.error {
            return check(Level::Fail, format!("recording a probe program failed: {e}"), None);
        }
        if let Some(why) = &r.agent_off {
            let pointer = match checks::covering(why) {
                Some(c) if c != checks::RECORDING => format!("see the {c} check"),
                _ => "see the lines above".to_string(),
            };
            return check(Level::Fail, format!("the agent was off in the probe: {why}"), Some(pointer));
        }
        if r.memset_records == 0 {
            return check(
                Level::Fail,
                format!("the agent set CUPTI up, but no record of the probe's memsets arrived ({} events)", r.events),
                Some("run `cuflight doctor --format json` and report it with your driver and CUDA versions".into()),
            );
        }
        check(
            Level::Ok,
            format!("recorded a probe program: CUPTI set up, its memsets on GPU 0 recorded ({} events)", r.events),
            None,
        )
    }

    pub fn counters(
        recorded: Option<&Recorded>,
        admin_only: Option<bool>,
        p: super::machine::Privileges,
        holders: &[String],
    ) -> Check {
        let check = |result, found: String, fix: Option<String>| Check { check: checks::COUNTERS, result, found, fix };
        let running = if holders.is_empty() {
            String::new()
        } else {
            format!("; running here: {} (they take the counters while they sample)", holders.join(", "))
        };
        match recorded {
            Some(r) if r.counters_sampled => {
                return check(Level::Ok, format!("the probe sampled the GPU's performance counters{running}"), None)
            }
            Some(Recorded { counters_refused: Some(why), .. }) if why.contains(verdict::ENDED_EARLY_SAYS) => {
                let secs = super::cuda::RECORDED_PROBE_WORK.as_secs_f64();
                let found = why.split_once("; ").map_or(why.as_str(), |(found, _)| found);
                let fix = format!(
                    "the probe gave the GPU {secs:.1} s of work; record a longer program of your own with \
                     --gpu-metrics to see whether it gets counters"
                );
                return check(Level::Warn, format!("{found}{running}"), Some(fix));
            }
            Some(Recorded { counters_refused: Some(why), .. }) => {
                let (found, fix) = match why.split_once("; ") {
                    Some((found, fix)) => (found.to_string(), Some(fix.to_string())),
                    None => (why.clone(), None),
                };
                return check(Level::Warn, format!("{found}{running}"), fix);
            }
            _ => {}
        }
        if admin_only == Some(true) && !(p.root || p.cap_sys_admin) {
            return check(
                Level::Warn,
                format!("the driver restricts GPU performance counters to administrators (RmProfilingAdminOnly: 1){running}"),
                Some(
                    "set the nvidia module option NVreg_RestrictProfilingToAdminUsers=0 (a file in /etc/modprobe.d, \
                     then reload the module), or run as root (in a container: with CAP_SYS_ADMIN)"
                        .into(),
                ),
            );
        }
        match admin_only {
            Some(true) => check(
                Level::Ok,
                format!("the driver keeps performance counters to administrators, which this user is{running}"),
                None,
            ),
            Some(false) if holders.is_empty() => {
                check(Level::Ok, "the driver lets every user read performance counters".into(), None)
            }
            Some(false) => {
                check(Level::Note, format!("the driver lets every user read performance counters{running}"), None)
            }
            _ => check(Level::Note, format!("not tried: no probe sampled them{running}"), None),
        }
    }
}

#[cfg(test)]
mod tests;
