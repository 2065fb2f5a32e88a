//! The CUDA releases the simulator models (`CUDASIM_CUPTI_VERSION`), each from NVIDIA's own documents: what
//! `cuptiGetVersion` answers, which record layout each activity kind is written in, and how buffers and
//! timestamps behave. An unknown value is an error (the process stops with one line), never a silent default.
//!
//! Sources:
//! - API versions: the version history in `cupti_version.h` (12.9 and 13.5 headers): v19 = CUDA 12.0, v22 = 12.4,
//!   v24 = 12.6, v26 = 12.8, v27 = 12.9, v28 = 12.9 Update 1; from 13.0 the format is xxyyzz (130000 = 13.0).
//! - Kernel records: CUPTI 12.0 release notes (Kernel8 replaced by Kernel9); CUPTI Python 13.0 notes (Kernel10
//!   introduced, Kernel9 removed), 13.2 (Kernel11 in, Kernel10 out), 13.3.1 (Kernel11 "dropped in 13.3.0", i.e.
//!   Kernel12 from 13.3); the 13.4 documentation marks Kernel12 deprecated (Kernel13 from 13.4).
//! - Memcpy/Synchronization: CUPTI Python 12.8 notes (Memcpy6 and Synchronization2 introduced, Memcpy5 and
//!   Synchronization removed). Memcpy7: the 13.4 documentation marks Memcpy6 deprecated in favour of Memcpy7;
//!   Memset5 is taken to arrive with it (both are in the 13.5 header, neither in 13.2's activity list).
//! - Memory: CUPTI 12.6 release notes (field `source` added to the memory record: Memory4).
//! - NULL buffers: below API version 27 a NULL buffer from the request callback crashes libcupti (Kineto issue
//!   1275; Kineto PR 1534 accepts NULL only from version 27).
//! - Per-thread buffers: `CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER` "default value is 0" in the 12.9 header,
//!   "default value is 1" in the 13.5 header.
//! - `cuptiSubscribe_v2`: CUPTI Python 13.0 notes (subscribe_v2 added). `cuptiActivityGetStructSize`: 13.x header
//!   only ("Only versions >= 130000 are supported"). Timestamp callbacks: documented in both headers.
//! - Multi-subscriber mode and the per-subscriber (v2) Activity API: CUPTI Python 13.5 notes (see `subscribers.rs`).

use once_cell::sync::Lazy;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    V9,
    V10,
    V12,
    V13,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Memcpy {
    V5,
    V6,
    V7,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Memset {
    V4,
    V5,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Memory {
    V3,
    V4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sync {
    V1,
    V2,
}

/// One modelled release.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Release {
    pub name: &'static str,
    /// What `cuptiGetVersion` answers.
    pub api_version: u32,
    pub kernel: Kernel,
    pub memcpy: Memcpy,
    pub memset: Memset,
    pub memory: Memory,
    pub sync: Sync,
}

impl Release {
    pub fn null_buffer_crashes(&self) -> bool {
        self.api_version < 27
    }
    pub fn per_thread_buffers(&self) -> bool {
        self.api_version >= 130000
    }
    pub fn has_subscribe_v2(&self) -> bool {
        self.api_version >= 130000
    }
    pub fn has_struct_size(&self) -> bool {
        self.api_version >= 130000
    }
    /// PM sampling and the profiler host API (cupti_pmsampling.h and cupti_profiler_host.h first shipped with
    /// CUDA 12.6). A real CUPTI before it lacks the symbols; the simulator, which exports them always, answers
    /// CUPTI_ERROR_NOT_SUPPORTED instead.
    pub fn has_pm_sampling(&self) -> bool {
        self.api_version >= 24
    }
    /// `cuptiActivityEnableHWTrace`: CUDA 12.8 and later (see `hw_trace.rs`).
    pub fn has_hw_trace(&self) -> bool {
        self.api_version >= 26
    }
    /// Multi-subscriber mode with the per-subscriber (v2) Activity API: see `subscribers.rs`.
    pub fn has_multiple_subscribers(&self) -> bool {
        self.api_version >= 130500
    }
}

const fn r(name: &'static str, api_version: u32, k: Kernel, m: Memcpy, s: Memset, mem: Memory, y: Sync) -> Release {
    Release { name, api_version, kernel: k, memcpy: m, memset: s, memory: mem, sync: y }
}

pub(crate) const RELEASES: &[Release] = &[
    r("12.0", 19, Kernel::V9, Memcpy::V5, Memset::V4, Memory::V3, Sync::V1),
    r("12.4", 22, Kernel::V9, Memcpy::V5, Memset::V4, Memory::V3, Sync::V1),
    r("12.6", 24, Kernel::V9, Memcpy::V5, Memset::V4, Memory::V4, Sync::V1),
    r("12.8", 26, Kernel::V9, Memcpy::V6, Memset::V4, Memory::V4, Sync::V2),
    r("12.9", 28, Kernel::V9, Memcpy::V6, Memset::V4, Memory::V4, Sync::V2),
    r("13.0", 130000, Kernel::V10, Memcpy::V6, Memset::V4, Memory::V4, Sync::V2),
    r("13.3", 130300, Kernel::V12, Memcpy::V6, Memset::V4, Memory::V4, Sync::V2),
    r("13.5", 130500, Kernel::V13, Memcpy::V7, Memset::V5, Memory::V4, Sync::V2),
];

/// `CUDASIM_CUPTI_VERSION`: a release above, `12`/`13` (the newest of each), or `api:N` to claim API version N
/// with 13.5 behaviour (to test how clients refuse versions they do not know). Unset means 13.5.
pub(crate) fn parse(v: Option<&str>) -> Result<Release, String> {
    let newest = RELEASES[RELEASES.len() - 1];
    let v = v.map(str::trim).unwrap_or("");
    let name = match v {
        "" | "13" => "13.5",
        "12" => "12.9",
        other => other,
    };
    if let Some(n) = name.strip_prefix("api:") {
        let api_version = n.parse().map_err(|_| format!("CUDASIM_CUPTI_VERSION={v}: api:N needs a number"))?;
        return Ok(Release { name: "custom", api_version, ..newest });
    }
    RELEASES.iter().copied().find(|r| r.name == name).ok_or_else(|| {
        let known: Vec<&str> = RELEASES.iter().map(|r| r.name).collect();
        format!("CUDASIM_CUPTI_VERSION={v} is not a modelled release (one of {}, 12, 13, api:N)", known.join(", "))
    })
}

/// The release this process models; an unknown `CUDASIM_CUPTI_VERSION` stops the process with one line.
pub(crate) fn current() -> Release {
    static R: Lazy<Release> = Lazy::new(|| match parse(std::env::var("CUDASIM_CUPTI_VERSION").ok().as_deref()) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("cudasim: {why}");
            std::process::exit(97);
        }
    });
    *R
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_aliases_and_errors() {
        assert_eq!(parse(None).unwrap().api_version, 130500);
        assert_eq!(parse(Some("12")).unwrap().api_version, 28);
        assert_eq!(parse(Some("12.0")).unwrap().memcpy, Memcpy::V5);
        assert_eq!(parse(Some("13.3")).unwrap().kernel, Kernel::V12);
        assert_eq!(parse(Some("api:11")).unwrap().api_version, 11);
        assert!(parse(Some("12.1")).unwrap_err().contains("not a modelled release"));
        assert!(parse(Some("11")).is_err());
        assert!(parse(Some("12.8")).unwrap().null_buffer_crashes());
        assert!(!parse(Some("12.9")).unwrap().null_buffer_crashes());
        assert!(
            parse(Some("13.0")).unwrap().per_thread_buffers() && !parse(Some("12.9")).unwrap().per_thread_buffers()
        );
    }
}
