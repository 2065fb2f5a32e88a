//! The doctor's checks that read the machine, not CUDA: ptrace, memory for the rings, the environment
//! (container, MIG, MPS, WSL), the clock, and which other tools run. Each verdict is a pure function of the facts
//! read, so that tests can hand it any machine.

use super::{Check, Level};
use cuflight_collector::capture::doctor_checks as checks;
use std::path::Path;

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// What this process may do beyond an ordinary user.
#[derive(Clone, Copy, Debug, Default)]
pub struct Privileges {
    pub root: bool,
    pub cap_sys_ptrace: bool,
    pub cap_sys_admin: bool,
}

impl Privileges {
    pub fn of_this_process() -> Privileges {
        let caps = read("/proc/self/status")
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string())))
            .and_then(|v| u64::from_str_radix(&v, 16).ok())
            .unwrap_or(0);
        // capability.h: CAP_SYS_PTRACE 19, CAP_SYS_ADMIN 21.
        Privileges {
            root: cuflight_format::channel::euid() == 0,
            cap_sys_ptrace: caps >> 19 & 1 == 1,
            cap_sys_admin: caps >> 21 & 1 == 1,
        }
    }
}

pub fn ptrace(p: Privileges) -> Check {
    let scope = read("/proc/sys/kernel/yama/ptrace_scope").and_then(|s| s.trim().parse().ok());
    ptrace_verdict(scope, p)
}

/// Yama's rules (Documentation/admin-guide/LSM/Yama.rst): 0 any process of the same user, 1 only descendants
/// unless CAP_SYS_PTRACE, 2 only with CAP_SYS_PTRACE, 3 never (until reboot).
pub fn ptrace_verdict(scope: Option<u32>, p: Privileges) -> Check {
    let launch = "`cuflight launch` starts programs with a dormant agent that `attach` reaches without ptrace";
    let (level, found, fix) = match scope {
        None | Some(0) => (Level::Ok, "ptrace allowed for your own processes (no Yama restriction)".to_string(), None),
        Some(s @ (1 | 2)) if p.cap_sys_ptrace => {
            (Level::Ok, format!("kernel.yama.ptrace_scope is {s}; this process has CAP_SYS_PTRACE"), None)
        }
        Some(1) => (
            Level::Warn,
            "kernel.yama.ptrace_scope is 1: ptrace reaches only a tracer's descendants, so `attach --inject` \
             cannot load the agent into a running program"
                .to_string(),
            Some(format!(
                "sudo sysctl kernel.yama.ptrace_scope=0, or run cuflight with CAP_SYS_PTRACE (docker run --cap-add \
                 SYS_PTRACE); or {launch}"
            )),
        ),
        Some(2) => (
            Level::Warn,
            "kernel.yama.ptrace_scope is 2: only CAP_SYS_PTRACE may ptrace, so `attach --inject` cannot load the \
             agent"
                .to_string(),
            Some(format!("run cuflight as root or with CAP_SYS_PTRACE; or {launch}")),
        ),
        Some(s) => (
            Level::Warn,
            format!("kernel.yama.ptrace_scope is {s}: ptrace is off for everyone until reboot; `attach --inject` cannot work"),
            Some(format!("{launch}; or lower ptrace_scope in the boot configuration and reboot")),
        ),
    };
    Check { check: checks::PTRACE, result: level, found, fix }
}

/// The cgroup v2 memory limit and use of this process's cgroup, and /dev/shm's size (both from the kernel's
/// files: /proc/self/cgroup, memory.max, memory.current, /proc/self/mountinfo).
pub fn memory() -> Check {
    let cgroup = read("/proc/self/cgroup")
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string)))
        .map(|p| Path::new("/sys/fs/cgroup").join(p.trim_start_matches('/')));
    let read_in = |name: &str| cgroup.as_ref().and_then(|d| std::fs::read_to_string(d.join(name)).ok());
    let limit = read_in("memory.max").and_then(|s| s.trim().parse::<u64>().ok());
    let used = read_in("memory.current").and_then(|s| s.trim().parse::<u64>().ok());
    let shm = read("/proc/self/mountinfo").and_then(|m| shm_size(&m));
    memory_verdict(limit, used, shm)
}

/// The `size=` of the tmpfs mounted on /dev/shm, in bytes (mountinfo's super options, e.g. `size=65536k`).
pub fn shm_size(mountinfo: &str) -> Option<u64> {
    // The last mount on /dev/shm is the one in use (a later mount hides those beneath it).
    let line = mountinfo.lines().rfind(|l| l.split(' ').nth(4) == Some("/dev/shm"))?;
    let opts = line.rsplit(' ').next()?;
    let size = opts.split(',').find_map(|o| o.strip_prefix("size="))?;
    let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit()).unwrap_or(size.len()));
    let n: u64 = digits.parse().ok()?;
    let mult = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// What a recording holds in memory: the segment's strings (4 MiB) and one 1 MiB ring per thread that calls
/// CUDA (format's default Layout), and CUPTI's activity buffers; 64 MiB covers a program of 50 such threads.
const RINGS_NEED: u64 = 64 << 20;

pub fn memory_verdict(limit: Option<u64>, used: Option<u64>, shm: Option<u64>) -> Check {
    let mib = |b: u64| format!("{} MiB", b >> 20);
    let shm_note = match shm {
        Some(s) => format!("; /dev/shm is {} but cuflight does not use it", mib(s)),
        None => String::new(),
    };
    let base = "the agent's rings are an anonymous memfd (up to 4 MiB of strings and 1 MiB per thread that calls \
                CUDA), counted against this cgroup's memory";
    let (level, found, fix) = match (limit, used) {
        (Some(limit), Some(used)) if limit.saturating_sub(used) < RINGS_NEED => (
            Level::Warn,
            format!(
                "{base}: the limit is {} and {} of it is in use, less than the {} a recording may add{shm_note}",
                mib(limit),
                mib(used),
                mib(RINGS_NEED)
            ),
            Some(
                "raise the container's memory limit, or record fewer threads (CUFLIGHT_RING_EVENTS smaller rings)"
                    .into(),
            ),
        ),
        (Some(limit), _) => (Level::Ok, format!("{base}: limit {}{shm_note}", mib(limit)), None),
        _ => (Level::Ok, format!("{base}: no cgroup memory limit{shm_note}"), None),
    };
    Check { check: checks::MEMORY, result: level, found, fix }
}

/// The facts about where this runs that change what cuflight can do.
#[derive(Clone, Debug, Default)]
pub struct Surroundings {
    pub container: Option<&'static str>,
    pub wsl: bool,
    /// An MPS control daemon or pipe directory seen.
    pub mps: bool,
    /// Devices that are MIG instances (by name or `CUDA_VISIBLE_DEVICES`).
    pub mig: bool,
}

impl Surroundings {
    pub fn read(device_names: &[String], processes: &[Process]) -> Surroundings {
        let container = if Path::new("/.dockerenv").exists() {
            Some("Docker")
        } else if Path::new("/run/.containerenv").exists() {
            Some("Podman")
        } else if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            Some("Kubernetes")
        } else if read("/proc/1/cgroup").is_some_and(|c| c.contains("docker") || c.contains("kubepods")) {
            Some("a container")
        } else {
            None
        };
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
        Surroundings {
            container,
            wsl: read("/proc/version").is_some_and(|v| v.to_ascii_lowercase().contains("microsoft")),
            mps: std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").is_some()
                || Path::new("/tmp/nvidia-mps/control").exists()
                || processes.iter().any(|p| p.comm == "nvidia-cuda-mps-control"),
            mig: visible.contains("MIG-") || device_names.iter().any(|n| n.contains("MIG")),
        }
    }
}

pub fn environment(s: &Surroundings) -> Check {
    let mut found = Vec::new();
    let mut fixes = Vec::new();
    if let Some(c) = s.container {
        found.push(format!(
            "in {c}: `attach` reaches only agents in this container's network namespace, and ptrace and counters \
             follow its capabilities"
        ));
        fixes.push("run cuflight inside the same container as the program".to_string());
    }
    if s.mig {
        found.push("MIG instances: kernels are traced, device counters (--gpu-metrics) are not available".into());
        fixes.push("record counters on a whole GPU".to_string());
    }
    if s.mps {
        found.push("MPS: hardware kernel timestamps (--trace hes) are not available under MPS".into());
    }
    if s.wsl {
        found.push("WSL: CUPTI's support is limited there; device counters and hes are not available".into());
    }
    let level = if found.is_empty() { Level::Ok } else { Level::Note };
    if found.is_empty() {
        found.push("no container, MIG, MPS or WSL seen".into());
    }
    let fix = (!fixes.is_empty()).then(|| fixes.join("; "));
    Check { check: checks::ENVIRONMENT, result: level, found: found.join("; "), fix }
}

/// The kernel's clock source and what a clock read costs here, measured: the agent reads the clock twice per
/// recorded call.
pub fn clock() -> Check {
    let source = read("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    const READS: u32 = 20_000;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t0 = std::time::Instant::now();
        for _ in 0..READS {
            std::hint::black_box(cuflight_format::segment::monotonic_ns());
        }
        best = best.min(t0.elapsed().as_nanos() as f64 / READS as f64);
    }
    clock_verdict(&source, best)
}

pub fn clock_verdict(source: &str, ns_per_read: f64) -> Check {
    let found = format!("clock source {source}, {ns_per_read:.0} ns a read");
    // A vDSO read costs tens of ns; hpet and acpi_pm cannot be read from user space, so each read is a system
    // call (hundreds of ns to microseconds), paid twice on every recorded call.
    let slow_source = matches!(source, "hpet" | "acpi_pm");
    let fix = if slow_source {
        "each recorded call reads the clock twice: prefer the tsc clock source (echo tsc | sudo tee \
         /sys/devices/system/clocksource/clocksource0/current_clocksource, if the kernel lists it as available)"
    } else if ns_per_read > 250.0 {
        // The source can already be read from user space (tsc, kvm-clock): the time goes to a hypervisor that
        // traps the read, or to an emulator (qemu-user) running this process. No setting here changes that.
        "the clock source is already one user space reads directly: reads this slow mean a hypervisor traps them \
         or an emulator runs cuflight; each recorded call pays two, so expect more overhead here than on bare metal"
    } else {
        return Check { check: checks::CLOCK, result: Level::Ok, found, fix: None };
    };
    let (level, fix) = (Level::Warn, Some(fix.to_string()));
    Check { check: checks::CLOCK, result: level, found, fix }
}

/// One process of this user: its name and the profiling libraries it has mapped.
#[derive(Clone, Debug, Default)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    pub cupti: bool,
    pub nsys: bool,
    pub cuflight: bool,
}

/// The processes this user may read, with what their maps say (at most 4,096, not this one).
pub fn processes() -> Vec<Process> {
    let me = std::process::id();
    let uid = cuflight_format::channel::euid();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me || out.len() >= 4096 {
            continue;
        }
        let dir = entry.path();
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else { continue };
        let owner = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|u| u.split_whitespace().nth(1));
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default().trim().to_string();
        let mut p = Process { pid, comm, ..Process::default() };
        if owner.and_then(|u| u.parse::<u32>().ok()) == Some(uid) {
            let maps = std::fs::read_to_string(dir.join("maps")).unwrap_or_default();
            p.cupti = maps.contains("libcupti.so");
            p.nsys = maps.contains("libToolsInjection");
            p.cuflight = maps.contains("libcuflight.so");
        }
        out.push(p);
    }
    out
}

/// Injection variables set in this shell that name another tool, and processes that hold CUPTI without a
/// cuflight agent (CUPTI takes one subscriber per process unless both sides ask to share: CUDA 13.0+).
pub fn other_tools(env: &[(&str, Option<String>)], processes: &[Process]) -> Check {
    let mut found = Vec::new();
    for (name, value) in env {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty() && !v.contains("libcuflight")) {
            found.push(format!("{name}={v} is set in this shell (`cuflight record` replaces it in the program)"));
        }
    }
    let holders: Vec<String> = processes
        .iter()
        .filter(|p| (p.cupti || p.nsys) && !p.cuflight)
        .take(8)
        .map(|p| format!("{} ({}{})", p.pid, p.comm, if p.nsys { ", under nsys" } else { "" }))
        .collect();
    if !holders.is_empty() {
        found.push(format!(
            "processes with CUPTI loaded by another tool (torch.profiler, Kineto, nsys): {}; `attach` into them \
             finds CUPTI taken",
            holders.join(", ")
        ));
    }
    let dynolog = processes.iter().any(|p| p.comm == "dynolog");
    if dynolog {
        found.push("dynolog runs here: a trace it triggers takes CUPTI in the program for its duration".into());
    }
    let (level, fix) = if found.is_empty() {
        found.push("no other profiler's injection or CUPTI client seen".into());
        (Level::Ok, None)
    } else {
        (
            Level::Note,
            Some("stop the other tool's trace in a program before cuflight records it (one CUPTI subscriber per process)".into()),
        )
    };
    Check { check: checks::OTHER_TOOLS, result: level, found: found.join("; "), fix }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptrace_scope_three_says_attach_inject_cannot_work_and_launch_still_does() {
        let c = ptrace_verdict(Some(3), Privileges { root: true, cap_sys_ptrace: true, cap_sys_admin: true });
        assert_eq!(c.result, Level::Warn);
        assert!(c.found.contains("until reboot"), "{}", c.found);
        assert!(c.fix.unwrap().contains("cuflight launch"));
        let one = ptrace_verdict(Some(1), Privileges::default());
        assert_eq!(one.result, Level::Warn);
        assert!(one.fix.unwrap().contains("ptrace_scope=0"));
        assert_eq!(
            ptrace_verdict(Some(1), Privileges { cap_sys_ptrace: true, ..Privileges::default() }).result,
            Level::Ok
        );
        assert_eq!(ptrace_verdict(None, Privileges::default()).result, Level::Ok);
    }

    #[test]
    fn a_small_dev_shm_is_not_a_problem_and_a_full_cgroup_is() {
        let info = "1 2 0:5 / /dev/shm rw - tmpfs shm rw,size=4g\n1 2 0:5 / /dev/shm rw,nosuid - tmpfs shm rw,size=65536k,inode64\n";
        assert_eq!(shm_size(info), Some(64 << 20));
        let small = memory_verdict(None, None, Some(1 << 20));
        assert_eq!(small.result, Level::Ok);
        assert!(small.found.contains("/dev/shm is 1 MiB but cuflight does not use it"), "{}", small.found);
        let full = memory_verdict(Some(512 << 20), Some(500 << 20), None);
        assert_eq!(full.result, Level::Warn);
        assert!(full.fix.is_some());
    }

    #[test]
    fn a_slow_clock_is_named_with_its_cost() {
        assert_eq!(clock_verdict("tsc", 20.0).result, Level::Ok);
        let slow = clock_verdict("hpet", 900.0);
        assert_eq!(slow.result, Level::Warn);
        assert!(slow.found.contains("hpet, 900 ns a read"));
        assert!(slow.fix.unwrap().contains("prefer the tsc"));
        // Already tsc (under qemu-user, or a hypervisor trapping rdtsc): switching to tsc is no advice.
        let trapped = clock_verdict("tsc", 478.0);
        assert_eq!(trapped.result, Level::Warn);
        assert!(!trapped.fix.as_deref().unwrap().contains("prefer the tsc"), "{trapped:?}");
    }

    #[test]
    fn another_tools_injection_and_cupti_holders_are_named() {
        let procs = [
            Process { pid: 7, comm: "python".into(), cupti: true, ..Process::default() },
            Process { pid: 8, comm: "python".into(), cupti: true, cuflight: true, ..Process::default() },
        ];
        let env = [("CUDA_INJECTION64_PATH", Some("/opt/nsys/libToolsInjection64.so".to_string()))];
        let c = other_tools(&env, &procs);
        assert_eq!(c.result, Level::Note);
        assert!(c.found.contains("CUDA_INJECTION64_PATH=/opt/nsys"), "{}", c.found);
        assert!(c.found.contains("7 (python)") && !c.found.contains("8 (python)"), "{}", c.found);
        assert_eq!(other_tools(&[("LD_PRELOAD", None)], &[]).result, Level::Ok);
    }
}
