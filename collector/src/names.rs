//! Human names for CUPTI enumerations that appear in events.

/// CUPTI memcpy kind → short name.
pub fn memcpy_kind(k: u8) -> &'static str {
    match k {
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
pub fn memory_kind(k: u8) -> &'static str {
    match k {
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

/// FNV-1a: a hash that stays the same across runs and builds (for ids derived from names).
pub fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}
