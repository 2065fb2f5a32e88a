//! Whether the agent sampled the device's counters (`SegmentHeader::gpu_counters`: a code in the low byte, the
//! CUPTI result that decided it in the next 16 bits, which tool holds the counters above), and what `record`,
//! `stats` and `report` say of it: one line with why and what would allow it.

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

/// Programs seen holding the counters when CUPTI said they were busy (`holder` of [`encode`]).
pub const HOLDERS: [&str; 4] = [
    "DCGM's host engine (nv-hostengine) with profiling metrics on",
    "dcgm-exporter",
    "Nsight Compute (ncu)",
    "Nsight Systems (nsys) with --gpu-metrics-devices",
];

/// The process names (`/proc/PID/comm`) of [`HOLDERS`], in the same order.
pub const HOLDER_PROCESSES: [&str; 4] = ["nv-hostengine", "dcgm-exporter", "ncu", "nsys"];

/// `code` with the CUPTI result behind it and, for [`BUSY`], which of [`HOLDERS`] was found running (+1; 0 none).
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
            "no device counters: this GPU or CUPTI refused the counters cuflight samples (CUPTI result {result})"
        ),
        FAILED => format!("no device counters: setting up CUPTI's PM sampling failed (CUPTI result {result})"),
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
    fn every_refusal_says_what_would_allow_counters_and_sampling_says_nothing() {
        assert_eq!(describe(0), None);
        assert_eq!(describe(encode(SAMPLING, 0, 0)), None);
        assert!(describe(encode(DENIED, 35, 0)).unwrap().contains("NVreg_RestrictProfilingToAdminUsers=0"));
        assert!(describe(encode(BUSY, 26, 1)).unwrap().contains("nv-hostengine"));
        assert!(describe(encode(BUSY, 26, 0)).unwrap().contains("DCGM"));
        assert!(describe(encode(FAILED, 999, 0)).unwrap().contains("999"));
        assert!(describe(encode(STILL_FINISHING, 0, 0)).unwrap().contains("previous window"));
        // Read from another process: an unknown code or holder says nothing wrong.
        assert_eq!(describe(0xffff_ff77), None);
        assert!(describe(encode(BUSY, 26, 200)).unwrap().contains("another tool"));
    }
}
