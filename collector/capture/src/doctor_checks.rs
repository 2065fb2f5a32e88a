//! The names of `cuflight doctor`'s checks, and which of them covers a failure that `record`, `attach` or `serve`
//! met, so that each such message ends by naming the check that says more (the doctor's own code is in the
//! `cuflight` binary; this is the one place both sides read the names from).

/// libcuflight.so found beside the binary (or at `$CUFLIGHT_AGENT`) and built for this machine.
pub const AGENT: &str = "agent";
/// The NVIDIA driver: its kernel module, libcuda.so.1, the CUDA release it supports, its GPUs.
pub const DRIVER: &str = "driver";
/// The libcupti a program would use, and the others found on the machine.
pub const CUPTI: &str = "cupti";
/// A probe program recorded end to end: the agent set CUPTI up and a memset's record arrived.
pub const RECORDING: &str = "recording";
/// Other tools that hold CUPTI or inject into programs (nsys, Kineto's daemon, an injection variable).
pub const OTHER_TOOLS: &str = "other-tools";
/// GPU performance counters (`--gpu-metrics`): the driver's admin-only restriction, a tool holding them.
pub const COUNTERS: &str = "counters";
/// ptrace, for `attach --inject` into a program cuflight did not start.
pub const PTRACE: &str = "ptrace";
/// Room for the agent's rings (memfd, counted against the container's memory limit; not /dev/shm).
pub const MEMORY: &str = "memory";
/// A container, MIG, MPS or WSL: what each changes.
pub const ENVIRONMENT: &str = "environment";
/// The clock source, which every recorded call reads.
pub const CLOCK: &str = "clock";

/// Every check, in the order the doctor runs and shows them.
pub const ALL: [&str; 10] =
    [AGENT, DRIVER, CUPTI, RECORDING, OTHER_TOOLS, COUNTERS, PTRACE, MEMORY, ENVIRONMENT, CLOCK];

/// The check that covers a failure message (an agent's status, an attach error, a counters refusal).
pub fn covering(failure: &str) -> Option<&'static str> {
    let f = failure.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| f.contains(w));
    Some(if has(&["libcuflight.so", "cuflight_agent"]) {
        AGENT
    } else if has(&["another cupti client", "cupti subscriber", "already subscribed"]) {
        OTHER_TOOLS
    } else if has(&["performance counters", "device counters", "pm sampling"]) {
        COUNTERS
    } else if has(&["ptrace"]) {
        PTRACE
    } else if has(&["libcupti", "cupti api version", "cupti version", "supports cuda 12.0"]) {
        CUPTI
    } else if has(&["cupti_error_unknown", "libcuda", "cuinit", "no cuda-capable", "cuda driver"]) {
        DRIVER
    } else if has(&["memfd", "cannot allocate memory"]) {
        MEMORY
    } else {
        return None;
    })
}

/// `failure` followed by a pointer to the doctor's check for it, when one covers it.
pub fn with_pointer(failure: &str) -> String {
    match covering(failure) {
        Some(check) => format!("{failure} (`cuflight doctor` checks this: {check})"),
        None => failure.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failures_cuflight_reports_name_the_check_that_covers_them() {
        // The texts below are those of sys::loader::LoadError, agent::setup and format::gpu_counters.
        let cases = [
            ("no libcupti found; set CUFLIGHT_CUPTI to its path (tried /usr/local/cuda/...)", CUPTI),
            ("CUPTI API version 18 at /x/libcupti.so is CUDA 11.x; cuflight supports CUDA 12.0 and later", CUPTI),
            ("another CUPTI client (nsys) is already subscribed", OTHER_TOOLS),
            ("no device counters: the driver restricts GPU performance counters to administrators", COUNTERS),
            ("kernel.yama.ptrace_scope is 3: run as root or with CAP_SYS_PTRACE", PTRACE),
            ("cuptiSubscribe failed: CUPTI_ERROR_UNKNOWN", DRIVER),
            ("cannot find libcuflight.so next to the cuflight binary", AGENT),
        ];
        for (text, check) in cases {
            assert_eq!(covering(text), Some(check), "{text}");
            assert!(with_pointer(text).ends_with(&format!("(`cuflight doctor` checks this: {check})")));
        }
        assert_eq!(covering("the program exited"), None);
        assert_eq!(with_pointer("the program exited"), "the program exited");
    }
}
