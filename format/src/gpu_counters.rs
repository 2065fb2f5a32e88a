//! Whether the agent sampled the device's counters (`SegmentHeader::gpu_counters`: a code in the low byte, the
//! CUPTI result that decided it in the next 16 bits, above them which tool holds the counters or which call
//! refused), and what `record`, `stats` and `report` say of it: one line with why and what would allow it.

/// Counters were sampled.
pub const SAMPLING: u32 = 1;
/// This CUPTI has no PM sampling (before CUDA 12.6).
pub const NO_API: u32 = 2;
/// CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: profiling is restricted to administrators.
pub const DENIED: u32 = 3;
/// CUPTI_ERROR_HARDWARE_BUSY: another client holds the counters.
pub const BUSY: u32 = 4;
/// CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED.
pub const MIG: u32 = 5;
/// The GPU or CUPTI refused the counters cuflight asks for (not supported, unknown metrics, several passes).
pub const UNSUPPORTED: u32 = 6;
/// Another CUPTI call failed (its result says which).
pub const FAILED: u32 = 7;
/// The previous window's sampler was still decoding its backlog when this window began.
pub const STILL_FINISHING: u32 = 8;
/// The program ended (or the window closed) while the sampler was still setting up: the [`Step`] it had reached,
/// and the result of the call that failed as it ended, if one did.
pub const ENDED_EARLY: u32 = 9;
/// What [`describe`] says of [`ENDED_EARLY`], before where the set-up was.
pub const ENDED_EARLY_SAYS: &str = "the recording ended while CUPTI's PM sampling was still being set up";

/// The CUPTI calls of the counters' set-up and sampling, named by [`Step`] numbers: a refusal other than
/// [`BUSY`] carries the one that refused in [`encode`]'s top byte (its `holder`), so that the user reads which call
/// failed, not only its result.
pub const STEPS: [&str; 15] = [
    "cuptiProfilerInitialize",
    "cuptiDeviceGetChipName",
    "cuptiPmSamplingGetCounterAvailability",
    "cuptiPmSamplingEnable",
    "cuptiProfilerHostInitialize",
    "cuptiProfilerHostConfigAddMetrics",
    "cuptiProfilerHostGetConfigImageSize",
    "cuptiProfilerHostGetConfigImage",
    "cuptiProfilerHostGetNumOfPasses",
    "cuptiPmSamplingSetConfig",
    "cuptiPmSamplingGetCounterDataSize",
    "cuptiPmSamplingCounterDataImageInitialize",
    "cuptiPmSamplingStart",
    "cuptiPmSamplingDecodeData",
    "cuptiPmSamplingGetCounterDataInfo",
];

/// A call of [`STEPS`], from 1 (0: none named).
pub type Step = u8;

/// The [`Step`] of the call named `name` (0 where it is none of [`STEPS`]).
pub const fn step(name: &str) -> Step {
    crate::position_in(&STEPS, name) as Step
}

/// " at NAME" for a refusal's [`Step`], or nothing.
fn at_step(step: u32) -> String {
    match (step as usize).checked_sub(1).and_then(|i| STEPS.get(i)) {
        Some(name) => format!(" at {name}"),
        None => String::new(),
    }
}

/// Programs seen holding the counters when CUPTI said they were busy (`holder` of [`encode`]).
pub const HOLDERS: [&str; 4] = [
    "DCGM's host engine (nv-hostengine) with profiling metrics on",
    "dcgm-exporter",
    "Nsight Compute (ncu)",
    "Nsight Systems (nsys) with --gpu-metrics-devices",
];

/// The process names (`/proc/PID/comm`) of [`HOLDERS`], in the same order.
pub const HOLDER_PROCESSES: [&str; 4] = ["nv-hostengine", "dcgm-exporter", "ncu", "nsys"];

/// `code` with the CUPTI result behind it and, for [`BUSY`], which of [`HOLDERS`] was found running (+1; 0 none);
/// for the other refusals, the [`Step`] that refused.
pub fn encode(code: u32, cupti_result: u32, holder: u32) -> u32 {
    code | (cupti_result & 0xffff) << 8 | (holder & 0xff) << 24
}

/// Why no counters were sampled, for the user; None when they were (or nobody asked).
pub fn describe(value: u32) -> Option<String> {
    let result = value >> 8 & 0xffff;
    Some(match value & 0xff {
        NO_API => {
            "no device counters: this CUPTI has no PM sampling (it came with CUDA 12.6; use a CUDA 12.6 or later \
                   CUPTI, e.g. the nvidia-cuda-cupti wheel)"
                .into()
        }
        DENIED => "no device counters: the driver restricts GPU performance counters to administrators \
                   (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); allow them with the nvidia module option \
                   NVreg_RestrictProfilingToAdminUsers=0, or run as root (in a container: with CAP_SYS_ADMIN)"
            .into(),
        BUSY => {
            let who = match (value >> 24) as usize {
                0 => "another tool (DCGM profiling metrics, Nsight Compute or Nsight Systems GPU metrics)".to_string(),
                h => HOLDERS.get(h - 1).map_or("another tool".to_string(), |s| s.to_string()),
            };
            format!(
                "no device counters: {who} holds the GPU's performance counters (CUPTI_ERROR_HARDWARE_BUSY); pause \
                 it (DCGM: dcgmi profile --pause) for the recording"
            )
        }
        MIG => "no device counters: CUPTI cannot sample counters on a MIG instance; record on a whole GPU".into(),
        UNSUPPORTED => format!(
            "no device counters: this GPU or CUPTI refused the counters cuflight samples (CUPTI result {result}{})",
            at_step(value >> 24)
        ),
        FAILED => format!(
            "no device counters: setting up CUPTI's PM sampling failed (CUPTI result {result}{})",
            at_step(value >> 24)
        ),
        ENDED_EARLY => {
            let when = match (result, (value >> 24) as usize) {
                (_, 0) => "before the driver listed its devices".to_string(),
                (0, s) => STEPS.get(s - 1).map_or(String::new(), |name| format!("at {name}")),
                (r, s) => STEPS.get(s - 1).map_or(format!("CUPTI result {r}"), |name| {
                    format!("{name} returned CUPTI result {r} as it ended")
                }),
            };
            format!("no device counters: {ENDED_EARLY_SAYS} ({when}); counters need a program or window that outlasts their set-up")
        }
        STILL_FINISHING => "no device counters in this window: the previous window's sampler was still decoding \
                            its samples; leave more time between windows or sample less often (--gpu-metrics=INTERVAL)"
            .into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_set_up_names_the_cupti_call_that_failed() {
        let enable = step("cuptiPmSamplingEnable");
        assert_eq!(enable, 4);
        let why = describe(encode(FAILED, 1, enable as u32)).unwrap();
        assert!(why.ends_with("(CUPTI result 1 at cuptiPmSamplingEnable)"), "{why}");
        let unnamed = describe(encode(FAILED, 1, 0)).unwrap();
        assert!(unnamed.ends_with("(CUPTI result 1)"), "{unnamed}");
        assert_eq!(step("cuptiSomethingElse"), 0);
        assert!(describe(encode(FAILED, 1, 200)).unwrap().ends_with("(CUPTI result 1)"), "a step no build names");
    }

    #[test]
    fn every_refusal_says_what_would_allow_counters_and_sampling_says_nothing() {
        assert_eq!(describe(0), None);
        assert_eq!(describe(encode(SAMPLING, 0, 0)), None);
        assert!(describe(encode(DENIED, 35, 0)).unwrap().contains("NVreg_RestrictProfilingToAdminUsers=0"));
        assert!(describe(encode(BUSY, 26, 1)).unwrap().contains("nv-hostengine"));
        assert!(describe(encode(BUSY, 26, 0)).unwrap().contains("DCGM"));
        assert!(describe(encode(FAILED, 999, 0)).unwrap().contains("999"));
        assert!(describe(encode(STILL_FINISHING, 0, 0)).unwrap().contains("previous window"));
        let set_config = step("cuptiPmSamplingSetConfig") as u32;
        let ended = describe(encode(ENDED_EARLY, 1, set_config)).unwrap();
        assert!(ended.contains("(cuptiPmSamplingSetConfig returned CUPTI result 1 as it ended)"), "{ended}");
        let abandoned = describe(encode(ENDED_EARLY, 0, set_config)).unwrap();
        assert!(abandoned.contains("(at cuptiPmSamplingSetConfig)"), "{abandoned}");
        assert!(describe(encode(ENDED_EARLY, 0, 0)).unwrap().contains("before the driver listed its devices"));
        // Read from another process: an unknown code or holder says nothing wrong.
        assert_eq!(describe(0xffff_ff77), None);
        assert!(describe(encode(BUSY, 26, 200)).unwrap().contains("another tool"));
    }
}
