//! Activity records in the layout of the CUPTI version the simulator claims (12.9 or 13.5).

use crate::c;
use cupti_sys::cuda12 as c12;
use std::ffi::c_char;

/// What happened on the simulated device, before it is laid out as a versioned CUPTI record.
pub(crate) enum SimRecord {
    Kernel {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        grid: [i32; 3],
        block: [i32; 3],
        dynamic_shared: i32,
        name: *const c_char,
    },
    Memcpy {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        bytes: u64,
        copy_kind: u8,
        src_kind: u8,
        dst_kind: u8,
        is_async: bool,
    },
    Memset {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        bytes: u64,
        value: u32,
        memory_kind: u16,
        is_async: bool,
    },
    Memory {
        release: bool,
        timestamp: u64,
        device: u32,
        stream: u32,
        correlation: u32,
        address: u64,
        bytes: u64,
        memory_kind: u32,
        is_async: bool,
    },
    Sync {
        start: u64,
        end: u64,
        kind: u32,
        stream: u32,
        correlation: u32,
        event: u32,
    },
}

/// Size of one record of `kind` in the claimed version, rounded to CUPTI's 8-byte record alignment.
pub(crate) fn record_size(kind: c::CUpti_ActivityKind, v12: bool) -> usize {
    use std::mem::size_of;
    let s = match (kind, v12) {
        (c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | c::CUPTI_ACTIVITY_KIND_KERNEL, true) => {
            size_of::<c12::CUpti_ActivityKernel9>()
        }
        (c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | c::CUPTI_ACTIVITY_KIND_KERNEL, false) => {
            size_of::<c::CUpti_ActivityKernel13>()
        }
        (c::CUPTI_ACTIVITY_KIND_MEMCPY, true) => size_of::<c12::CUpti_ActivityMemcpy6>(),
        (c::CUPTI_ACTIVITY_KIND_MEMCPY, false) => size_of::<c::CUpti_ActivityMemcpy7>(),
        (c::CUPTI_ACTIVITY_KIND_MEMSET, true) => size_of::<c12::CUpti_ActivityMemset4>(),
        (c::CUPTI_ACTIVITY_KIND_MEMSET, false) => size_of::<c::CUpti_ActivityMemset5>(),
        (c::CUPTI_ACTIVITY_KIND_MEMORY2, _) => size_of::<c::CUpti_ActivityMemory4>(),
        (c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, _) => size_of::<c::CUpti_ActivitySynchronization2>(),
        (c::CUPTI_ACTIVITY_KIND_OVERHEAD, _) => size_of::<c::CUpti_ActivityOverhead3>(),
        _ => 8,
    };
    s.next_multiple_of(8)
}

macro_rules! fill_kernel {
    ($ty:ty, $buf:expr, $start:expr, $end:expr, $device:expr, $stream:expr, $corr:expr, $grid:expr, $block:expr, $dyn:expr, $name:expr) => {{
        // SAFETY: all-zero bytes are a valid value of this plain C struct.
        let mut r: $ty = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        r.start = $start;
        r.end = $end;
        r.completed = $end;
        r.deviceId = $device;
        r.contextId = $device + 1;
        r.streamId = $stream;
        r.correlationId = $corr;
        [r.gridX, r.gridY, r.gridZ] = $grid;
        [r.blockX, r.blockY, r.blockZ] = $block;
        r.dynamicSharedMemory = $dyn;
        r.registersPerThread = 32;
        r.name = $name;
        r.launchType = 0;
        // SAFETY: the caller checked the record fits at this offset; unaligned writes are fine for memcpy.
        unsafe { ($buf as *mut $ty).write_unaligned(r) };
    }};
}

macro_rules! fill_memcpy {
    ($ty:ty, $buf:expr, $start:expr, $end:expr, $device:expr, $stream:expr, $corr:expr, $bytes:expr, $ck:expr, $sk:expr, $dk:expr, $async:expr) => {{
        // SAFETY: all-zero bytes are a valid value of this plain C struct.
        let mut r: $ty = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_MEMCPY;
        r.copyKind = $ck;
        r.srcKind = $sk;
        r.dstKind = $dk;
        r.flags = if $async { 1 } else { 0 }; // CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC
        r.bytes = $bytes;
        r.start = $start;
        r.end = $end;
        r.deviceId = $device;
        r.contextId = $device + 1;
        r.streamId = $stream;
        r.correlationId = $corr;
        r.runtimeCorrelationId = $corr;
        // SAFETY: the caller checked the record fits at this offset.
        unsafe { ($buf as *mut $ty).write_unaligned(r) };
    }};
}

macro_rules! fill_memset {
    ($ty:ty, $buf:expr, $start:expr, $end:expr, $device:expr, $stream:expr, $corr:expr, $bytes:expr, $value:expr, $mk:expr, $async:expr) => {{
        // SAFETY: all-zero bytes are a valid value of this plain C struct.
        let mut r: $ty = unsafe { std::mem::zeroed() };
        r.kind = c::CUPTI_ACTIVITY_KIND_MEMSET;
        r.value = $value;
        r.bytes = $bytes;
        r.start = $start;
        r.end = $end;
        r.deviceId = $device;
        r.contextId = $device + 1;
        r.streamId = $stream;
        r.correlationId = $corr;
        r.flags = if $async { 1 } else { 0 }; // CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC
        r.memoryKind = $mk;
        // SAFETY: the caller checked the record fits at this offset.
        unsafe { ($buf as *mut $ty).write_unaligned(r) };
    }};
}

impl SimRecord {
    pub(crate) fn activity_kind(&self) -> c::CUpti_ActivityKind {
        match self {
            SimRecord::Kernel { .. } => c::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            SimRecord::Memcpy { .. } => c::CUPTI_ACTIVITY_KIND_MEMCPY,
            SimRecord::Memset { .. } => c::CUPTI_ACTIVITY_KIND_MEMSET,
            SimRecord::Memory { .. } => c::CUPTI_ACTIVITY_KIND_MEMORY2,
            SimRecord::Sync { .. } => c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
        }
    }

    /// Writes the record at `buf + at`.
    ///
    /// # Safety
    /// `buf + at .. + record_size(kind, v12)` must be writable.
    pub(crate) unsafe fn write(&self, buf: *mut u8, at: usize, v12: bool) {
        // SAFETY: guaranteed by the caller.
        let p = unsafe { buf.add(at) };
        match *self {
            SimRecord::Kernel { start, end, device, stream, correlation, grid, block, dynamic_shared, name } => {
                if v12 {
                    fill_kernel!(
                        c12::CUpti_ActivityKernel9,
                        p,
                        start,
                        end,
                        device,
                        stream,
                        correlation,
                        grid,
                        block,
                        dynamic_shared,
                        name
                    )
                } else {
                    fill_kernel!(
                        c::CUpti_ActivityKernel13,
                        p,
                        start,
                        end,
                        device,
                        stream,
                        correlation,
                        grid,
                        block,
                        dynamic_shared,
                        name
                    )
                }
            }
            SimRecord::Memcpy {
                start,
                end,
                device,
                stream,
                correlation,
                bytes,
                copy_kind,
                src_kind,
                dst_kind,
                is_async,
            } => {
                if v12 {
                    fill_memcpy!(
                        c12::CUpti_ActivityMemcpy6,
                        p,
                        start,
                        end,
                        device,
                        stream,
                        correlation,
                        bytes,
                        copy_kind,
                        src_kind,
                        dst_kind,
                        is_async
                    )
                } else {
                    fill_memcpy!(
                        c::CUpti_ActivityMemcpy7,
                        p,
                        start,
                        end,
                        device,
                        stream,
                        correlation,
                        bytes,
                        copy_kind,
                        src_kind,
                        dst_kind,
                        is_async
                    )
                }
            }
            SimRecord::Memset { start, end, device, stream, correlation, bytes, value, memory_kind, is_async } => {
                if v12 {
                    fill_memset!(
                        c12::CUpti_ActivityMemset4,
                        p,
                        start,
                        end,
                        device,
                        stream,
                        correlation,
                        bytes,
                        value,
                        memory_kind,
                        is_async
                    )
                } else {
                    fill_memset!(
                        c::CUpti_ActivityMemset5,
                        p,
                        start,
                        end,
                        device,
                        stream,
                        correlation,
                        bytes,
                        value,
                        memory_kind,
                        is_async
                    )
                }
            }
            SimRecord::Memory {
                release,
                timestamp,
                device,
                stream,
                correlation,
                address,
                bytes,
                memory_kind,
                is_async,
            } => {
                // SAFETY: all-zero bytes are a valid value of this plain C struct.
                let mut r: c::CUpti_ActivityMemory4 = unsafe { std::mem::zeroed() };
                r.kind = c::CUPTI_ACTIVITY_KIND_MEMORY2;
                r.memoryOperationType = if release {
                    c::CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
                } else {
                    c::CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                };
                r.memoryKind = memory_kind;
                r.correlationId = correlation;
                r.address = address;
                r.bytes = bytes;
                r.timestamp = timestamp;
                r.processId = std::process::id();
                r.deviceId = device;
                r.contextId = device + 1;
                r.streamId = stream;
                r.isAsync = is_async as u32;
                // SAFETY: the caller checked the record fits at this offset.
                unsafe { (p as *mut c::CUpti_ActivityMemory4).write_unaligned(r) };
            }
            SimRecord::Sync { start, end, kind, stream, correlation, event } => {
                // SAFETY: all-zero bytes are a valid value of this plain C struct.
                let mut r: c::CUpti_ActivitySynchronization2 = unsafe { std::mem::zeroed() };
                r.kind = c::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
                r.type_ = kind;
                r.start = start;
                r.end = end;
                r.correlationId = correlation;
                r.contextId = 1;
                r.streamId = stream;
                r.cudaEventId = event;
                // SAFETY: the caller checked the record fits at this offset.
                unsafe { (p as *mut c::CUpti_ActivitySynchronization2).write_unaligned(r) };
            }
        }
    }
}
