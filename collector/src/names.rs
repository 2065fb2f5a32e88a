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
