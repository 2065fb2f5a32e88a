//! What a timeline draws, the one rule for the Perfetto export (which draws it) and the report (which counts
//! times from where that timeline starts, so that "at +1.2 s" in a report is 1.2 s on the timeline).

use crate::model::memory::is_device;
use cuflight_format::{EventKind, RawEvent};

/// Whether a timeline draws `e`: a slice (API calls, device work, synchronisations, ranges, and NVTX ranges,
/// whose push or start and pop or end are their slice's ends), an instant (NVTX marks), or a counter value at its
/// time (device memory allocated or freed: host memory draws nothing; a device counter sample).
pub fn drawn(e: &RawEvent) -> bool {
    match e.kind() {
        Some(
            EventKind::Api
            | EventKind::Kernel
            | EventKind::Memcpy
            | EventKind::Memset
            | EventKind::Sync
            | EventKind::Range
            | EventKind::NvtxMark
            | EventKind::NvtxPush
            | EventKind::NvtxPop
            | EventKind::NvtxStart
            | EventKind::NvtxEnd
            | EventKind::GpuSample,
        ) => true,
        Some(EventKind::Alloc | EventKind::Free) => is_device(e),
        _ => false,
    }
}
