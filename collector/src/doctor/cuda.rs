//! The doctor's CUDA checks: the agent's library, the driver (asked by a probe process of our own, so a broken
//! driver cannot take the doctor down), the libcupti a program would load, and a probe recorded end to end the
//! way `cuflight record` records a program.

use super::{Check, Level};
use crate::deadline::{wait_with_deadline, Ended};
use cuflight_collector::capture::doctor_checks as checks;
use cuflight_collector::capture::private_dir::PrivateDir;
use cuflight_collector::capture::record::{self, Inject, RecordOptions, RecordSummary};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The probe's answer, as it writes it (a copy of cupti-sys's `DriverProbe` that serde can carry).
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema, Deserialize)]
pub struct ProbeFacts {
    pub load_error: Option<String>,
    pub library: Option<String>,
    pub driver_version: Option<i32>,
    /// The call that failed: (name, code, the driver's name for it).
    pub failed: Option<(String, u32, String)>,
    pub devices: Vec<(String, i32, i32)>,
    pub work_done: bool,
    pub simulator: bool,
}

/// `cuflight doctor-probe FILE [--work-ms MS]`: asks the driver, gives the GPU work for `work` at least, and writes
/// what it said into FILE. A watchdog ends the process if the driver does not answer in time (a hung driver must
/// not hang the doctor).
pub fn probe_main(out: &Path, work: Duration) -> anyhow::Result<i32> {
    std::thread::spawn(|| {
        std::thread::sleep(PROBE_TIMEOUT);
        std::process::exit(124);
    });
    let p = cupti_sys::driver_probe::probe_driver(work);
    let facts = ProbeFacts {
        load_error: p.load_error,
        library: p.library,
        driver_version: p.driver_version,
        failed: p.failed.map(|f| (f.call.to_string(), f.code, f.name)),
        devices: p.devices.into_iter().map(|d| (d.name, d.capability.0, d.capability.1)).collect(),
        work_done: p.work_done,
        simulator: p.simulator,
    };
    std::fs::write(out, serde_json::to_vec(&facts)?)?;
    Ok(0)
}

const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the recorded probe keeps the GPU busy: long enough for the device counters' sampler, which the agent
/// starts with CUDA and which sets up on a thread of its own, to finish its set-up and sample. On the H200
/// (2026-12-01) a probe of ~20 ms ended with the set-up failed at an unnamed step, where a long program sampled.
pub const RECORDED_PROBE_WORK: Duration = Duration::from_millis(1500);

pub fn agent() -> (Check, Option<PathBuf>) {
    let Some(path) = record::find_agent() else {
        let found = match std::env::var_os("CUFLIGHT_AGENT") {
            Some(p) => format!("CUFLIGHT_AGENT={} is not a file", Path::new(&p).display()),
            None => "no libcuflight.so beside the cuflight binary or in ../lib".into(),
        };
        let fix = "install with `python3 -m pip install .` (binary and agent together), copy target/release/\
                   libcuflight.so beside the binary, or set CUFLIGHT_AGENT to its path";
        return (Check { check: checks::AGENT, result: Level::Fail, found, fix: Some(fix.into()) }, None);
    };
    let shown = path.display().to_string();
    let check = match elf_machine(&path) {
        Some(m) if m == this_machine() => Check {
            check: checks::AGENT,
            result: Level::Ok,
            found: format!("{shown} ({})", machine_name(m)),
            fix: None,
        },
        Some(m) => Check {
            check: checks::AGENT,
            result: Level::Fail,
            found: format!(
                "{shown} is built for {}, this machine is {}",
                machine_name(m),
                machine_name(this_machine())
            ),
            fix: Some("install the cuflight build for this machine's architecture".into()),
        },
        None => Check {
            check: checks::AGENT,
            result: Level::Fail,
            found: format!("{shown} is not a 64-bit ELF shared library"),
            fix: Some("reinstall cuflight".into()),
        },
    };
    let ok = check.result == Level::Ok;
    (check, ok.then_some(path))
}

/// The ELF `e_machine` of a 64-bit little-endian ELF file (elf.h: EM_X86_64 62, EM_AARCH64 183).
fn elf_machine(path: &Path) -> Option<u16> {
    use std::io::Read;
    let mut head = [0u8; 20];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    (head[..4] == *b"\x7fELF" && head[4] == 2 && head[5] == 1).then(|| u16::from_le_bytes([head[18], head[19]]))
}

fn this_machine() -> u16 {
    if cfg!(target_arch = "aarch64") {
        183
    } else {
        62
    }
}

fn machine_name(m: u16) -> String {
    match m {
        62 => "x86_64".into(),
        183 => "aarch64".into(),
        m => format!("ELF machine {m}"),
    }
}

/// Runs `cuflight doctor-probe` with nothing injected, and reads its answer.
pub fn probe_driver() -> Result<ProbeFacts, String> {
    let dir = PrivateDir::new("doctor").map_err(|e| format!("{e:#}"))?;
    let out = dir.path().join("probe.json");
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the cuflight binary: {e}"))?;
    let mut child = std::process::Command::new(exe)
        .arg("doctor-probe")
        .arg(&out)
        .env_remove("CUDA_INJECTION64_PATH")
        .env_remove("NVTX_INJECTION64_PATH")
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the probe: {e}"))?;
    // The probe stops itself at PROBE_TIMEOUT; this is for a probe stuck where it cannot.
    let status = match wait_with_deadline(&mut child, PROBE_TIMEOUT + Duration::from_secs(5), None) {
        Ok(Ended::Exited(s) | Ended::Stopped(s)) => s,
        Ok(Ended::Killed) => return Err("the driver did not answer within 60 s (the probe was stopped)".into()),
        Err(e) => return Err(format!("cannot wait for the probe: {e}")),
    };
    read_facts(&out).ok_or_else(|| match status.code() {
        Some(124) => "the driver did not answer within 60 s (the probe stopped itself)".to_string(),
        _ => format!("the probe ended ({status}) inside the driver before it could answer"),
    })
}

fn read_facts(path: &Path) -> Option<ProbeFacts> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  ...` → `570.86.15`.
pub fn kernel_module_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    let after = line.split("Kernel Module").nth(1).unwrap_or(line);
    after.split_whitespace().find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit())).map(str::to_string)
}

pub fn cuda_release(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

pub fn driver(probe: &Result<ProbeFacts, String>, module: Option<&str>) -> Check {
    let check = |result, found: String, fix: Option<&str>| Check {
        check: checks::DRIVER,
        result,
        found,
        fix: fix.map(str::to_string),
    };
    let facts = match probe {
        Err(why) => return check(Level::Fail, why.clone(), Some("see the kernel log (dmesg) and nvidia-smi")),
        Ok(f) => f,
    };
    if let Some(e) = &facts.load_error {
        let found = match module {
            Some(m) => format!("the NVIDIA kernel module {m} is loaded but libcuda.so.1 is not found ({e})"),
            None => format!("no NVIDIA driver: no kernel module and no libcuda.so.1 ({e})"),
        };
        let fix = format!(
            "install the NVIDIA driver (its user-space libcuda.so.1 too: in a container, run it with the NVIDIA \
             Container Toolkit, --gpus all); {}",
            without_a_gpu()
        );
        return check(Level::Fail, found, Some(&fix));
    }
    let library = facts.library.as_deref().unwrap_or("libcuda.so.1");
    let who = if facts.simulator {
        format!("cudasim, cuflight's CPU stand-in for the driver ({library})")
    } else {
        match module {
            Some(m) => format!("NVIDIA driver {m} ({library})"),
            None => format!("NVIDIA driver ({library})"),
        }
    };
    let cuda = facts.driver_version.map(|v| format!(", CUDA {}", cuda_release(v))).unwrap_or_default();
    if let Some((call, code, name)) = &facts.failed {
        let fix = match (call.as_str(), *code) {
            (_, 100) => {
                "no GPU is visible to this process: check CUDA_VISIBLE_DEVICES, nvidia-smi, and (in a \
                         container) --gpus"
            }
            (_, 999) | (_, 3) => {
                "the driver could not initialise: check nvidia-smi and dmesg; the user-space \
                                   library and the kernel module must be the same version"
            }
            _ => "check nvidia-smi and dmesg",
        };
        return check(Level::Fail, format!("{who}{cuda}: {call} failed with {name} ({code})"), Some(fix));
    }
    let gpus: Vec<String> = facts.devices.iter().map(|(n, ma, mi)| format!("{n} (sm_{ma}{mi})")).collect();
    let (level, simulated) = match facts.simulator {
        true => (Level::Note, ": no GPU, recordings show simulated times"),
        false => (Level::Ok, ""),
    };
    check(level, format!("{who}{cuda}; {} GPU(s): {}{simulated}", gpus.len(), gpus.join(", ")), None)
}

/// libcupti files on this machine outside a program: `$CUFLIGHT_CUPTI`, `$CUDA_HOME`, the CUDA toolkits under
/// /usr/local, `LD_LIBRARY_PATH`, and the PyPI wheels of the first `python3` on PATH (nvidia-cuda-cupti-cu12,
/// and CUDA 13's nvidia/cu13), with the CUDA release each file's name carries.
pub fn cupti_libraries() -> Vec<(PathBuf, Option<(u32, u32)>)> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("CUFLIGHT_CUPTI") {
        files.push(PathBuf::from(p));
    }
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(Path::new(&home).join("extras/CUPTI/lib64"));
    }
    if let Ok(rd) = std::fs::read_dir("/usr/local") {
        for e in rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("cuda")) {
            dirs.push(e.path().join("extras/CUPTI/lib64"));
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths));
    }
    for site in python_paths() {
        dirs.push(site.join("nvidia/cuda_cupti/lib"));
        dirs.push(site.join("nvidia/cu13/lib"));
    }
    for dir in dirs {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        let mut names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| is_cupti_name(p)).collect();
        names.sort();
        files.extend(names);
    }
    // One entry per file (a soname and its links are one library), named as found; the release comes from the
    // real file's name (libcupti.so.12.8.90).
    let mut seen = std::collections::HashSet::new();
    files
        .into_iter()
        .filter(|p| p.is_file() && std::fs::canonicalize(p).is_ok_and(|real| seen.insert(real)))
        .map(|p| {
            let v = cupti_sys::loader::runtime_version_of(&p);
            (p, v)
        })
        .take(16)
        .collect()
}

fn is_cupti_name(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libcupti.so"))
}

/// `sys.path` of the first `python3` on PATH (bounded to 5 s: a broken interpreter must not stall the doctor).
fn python_paths() -> Vec<PathBuf> {
    let child = std::process::Command::new("python3")
        .args([
            "-S",
            "-c",
            "import site, sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else { return Vec::new() };
    if !matches!(wait_with_deadline(&mut child, Duration::from_secs(5), None), Ok(Ended::Exited(_))) {
        return Vec::new();
    }
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut out, &mut text);
    }
    text.lines().filter(|l| !l.is_empty()).map(PathBuf::from).collect()
}

/// What a recording of the probe showed: the agent's status, the libcupti it loaded, whether the memset's
/// record arrived, and the device counters' verdict.
#[derive(Debug, Default)]
pub struct Recorded {
    pub error: Option<String>,
    pub agent_off: Option<String>,
    pub cupti: Option<(String, u32)>,
    pub memset_records: u64,
    pub events: u64,
    pub counters_refused: Option<String>,
    pub counters_sampled: bool,
}

/// Records `cuflight doctor-probe` as `cuflight record` records a program, with device counters asked for.
pub fn record_probe(agent: &Path) -> Recorded {
    let mut r = Recorded::default();
    let dir = match PrivateDir::new("doctor") {
        Ok(d) => d,
        Err(e) => {
            r.error = Some(format!("{e:#}"));
            return r;
        }
    };
    let Ok(exe) = std::env::current_exe() else {
        r.error = Some("cannot find the cuflight binary".into());
        return r;
    };
    let trace = dir.path().join("probe.cuf");
    // Read by the agent at set-up; the doctor records nothing else, so its own environment is the probe's.
    std::env::set_var("CUFLIGHT_GPU_METRICS", "100000");
    let opts = RecordOptions {
        output: trace.clone(),
        command: vec![
            exe.display().to_string(),
            "doctor-probe".into(),
            dir.path().join("facts.json").display().to_string(),
            format!("--work-ms={}", RECORDED_PROBE_WORK.as_millis()),
        ],
        agent: agent.to_path_buf(),
        inject: Inject::Driver,
        drain_interval: Duration::from_millis(10),
        flush_ms: None,
        linger: Duration::from_secs(1),
        force: true,
        range: None,
        sample: None,
    };
    let recorded = record::record(&opts);
    std::env::remove_var("CUFLIGHT_GPU_METRICS");
    let summary: RecordSummary = match recorded {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(e.to_string());
            return r;
        }
    };
    r.agent_off = summary.disabled.first().map(|(_, why)| why.clone());
    r.counters_refused = summary.gpu_counters_refused.first().map(|(_, why)| why.clone());
    r.counters_sampled = summary.gpu_samples > 0;
    r.events = summary.events;
    if let Ok(t) = cuflight_collector::model::source::load_trace(&trace) {
        for p in t.processes.values() {
            if !p.info.cupti_path.is_empty() {
                r.cupti = Some((p.info.cupti_path.clone(), p.info.cupti_version));
            }
            r.memset_records +=
                p.events.iter().filter(|e| e.kind() == Some(cuflight_format::event::EventKind::Memset)).count() as u64;
        }
    }
    r
}

/// What a machine without a GPU can do: in a source checkout (the binary under its `target/`), the demo on
/// cudasim; from a wheel, which has no scripts, read traces recorded elsewhere.
fn without_a_gpu() -> &'static str {
    let exe = std::env::current_exe().unwrap_or_default();
    // A wheel puts the binary in <env>/bin and the agent in <env>/lib, wherever the environment lies.
    let bin = exe.parent().filter(|d| d.file_name().is_some_and(|n| n == "bin"));
    let installed = bin.and_then(Path::parent).is_some_and(|env| env.join("lib/libcuflight.so").is_file());
    let checkout = !installed && exe.ancestors().any(|d| d.join("scripts/demo").is_file());
    if checkout {
        "without a GPU, `scripts/demo` runs on cudasim, cuflight's CPU stand-in for CUDA"
    } else {
        "without a GPU, `cuflight report`, `stats`, `diff` and `export` read traces recorded elsewhere (cuflight's, \
         torch.profiler's, Nsight Systems' SQLite exports)"
    }
}
