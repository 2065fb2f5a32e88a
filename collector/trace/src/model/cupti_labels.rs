//! Human labels for the CUPTI enumerations that appear in records: copy kinds, memory kinds and synchronization
//! types, in cuflight's short form and in the words `nsys stats` prints.

use cuflight_format::view::{CopyKind, MemoryKind};

/// CUPTI memcpy kind → short name.
pub fn memcpy_kind(k: CopyKind) -> &'static str {
    match k.0 {
        1 => "HtoD",
        2 => "DtoH",
        3 => "HtoA",
        4 => "AtoH",
        5 => "AtoA",
        6 => "AtoD",
        7 => "DtoA",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        _ => "unknown",
    }
}

/// CUPTI memory kind → short name.
pub fn memory_kind(k: MemoryKind) -> &'static str {
    match k.0 {
        1 => "pageable",
        2 => "pinned",
        3 => "device",
        4 => "array",
        5 => "managed",
        6 => "device_static",
        7 => "managed_static",
        _ => "unknown",
    }
}

/// CUPTI memory kind → the label `nsys stats` prints (its ENUM_CUDA_MEM_KIND).
pub fn memory_kind_label(k: MemoryKind) -> &'static str {
    match k.0 {
        1 => "Pageable",
        2 => "Pinned",
        3 => "Device",
        4 => "Array",
        5 => "Managed",
        6 => "Device Static",
        7 => "Managed Static",
        _ => "Unknown",
    }
}

/// Name (ours, or Kineto's `cuda_sync_kind`) → CUPTI synchronization type.
pub fn sync_kind_from_name(name: &str) -> u8 {
    (1..=4).find(|&k| sync_kind(k) == name).unwrap_or(match name {
        "Event Sync" => 1,
        "Stream Wait Event" => 2,
        "Stream Sync" => 3,
        "Context Sync" | "Device Sync" => 4,
        _ => 0,
    })
}

/// CUPTI synchronization type → name.
pub fn sync_kind(k: u8) -> &'static str {
    match k {
        1 => "cudaEventSynchronize",
        2 => "cudaStreamWaitEvent",
        3 => "cudaStreamSynchronize",
        4 => "cudaDeviceSynchronize",
        _ => "unknown",
    }
}

/// A copy kind as `nsys stats` names the operation ("[CUDA memcpy Host-to-Device]").
pub fn memcpy_operation(kind: CopyKind) -> &'static str {
    match memcpy_kind(kind) {
        "HtoD" => "[CUDA memcpy Host-to-Device]",
        "DtoH" => "[CUDA memcpy Device-to-Host]",
        "DtoD" => "[CUDA memcpy Device-to-Device]",
        "HtoH" => "[CUDA memcpy Host-to-Host]",
        "PtoP" => "[CUDA memcpy Peer-to-Peer]",
        "HtoA" => "[CUDA memcpy Host-to-Array]",
        "AtoH" => "[CUDA memcpy Array-to-Host]",
        "AtoA" => "[CUDA memcpy Array-to-Array]",
        "AtoD" => "[CUDA memcpy Array-to-Device]",
        "DtoA" => "[CUDA memcpy Device-to-Array]",
        _ => "[CUDA memcpy Unknown]",
    }
}
