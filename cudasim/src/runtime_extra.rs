//! Runtime entry points PyTorch calls beyond the basics (cuda_runtime_api.h): page-locking the application's
//! memory, 2D and peer copies, extended launches, function attributes, occupancy and device attributes. Values
//! describe the simulated H100 (`driver::device_properties`); kernel attributes are what the simulator reports
//! in its kernel records (32 registers per thread, no static shared memory).

use crate::context::current_device;
use crate::device::{self, Work};
use crate::memory;
use crate::runtime::put;
use crate::{c, CudaError};
use std::ffi::{c_int, c_uint, c_void};

runtime_fn!(cudaHostRegister(ptr: *mut c_void, size: usize, flags: c_uint) => CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000, cudaHostRegister_v4000_params {
    let _ = flags;
    if memory::register(ptr as usize, size, current_device()) { c::cudaSuccess } else { c::cudaErrorHostMemoryAlreadyRegistered }
});

runtime_fn!(cudaHostUnregister(ptr: *mut c_void) => CUPTI_RUNTIME_TRACE_CBID_cudaHostUnregister_v4000, cudaHostUnregister_v4000_params {
    if memory::unregister(ptr as usize) { c::cudaSuccess } else { c::cudaErrorHostMemoryNotRegistered }
});

/// Queues a 2D copy (`Work::Memcpy2D`); blocks like a 1D copy of the same memory would.
fn copy_2d(work: Work, stream: usize) -> CudaError {
    let Work::Memcpy2D { dst, dpitch, src, spitch, width, height, is_async } = work else {
        return c::cudaErrorInvalidValue;
    };
    if width > dpitch || width > spitch {
        return c::cudaErrorInvalidPitchValue;
    }
    if width == 0 || height == 0 {
        return c::cudaSuccess;
    }
    let Some(s) = device::stream(stream, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    let pageable = memory::lookup(dst).is_none() || memory::lookup(src).is_none();
    let Some(seq) = s.enqueue(work) else {
        return c::cudaErrorUnknown;
    };
    if !is_async || pageable {
        s.wait_for(seq);
    }
    c::cudaSuccess
}

runtime_fn!(cudaMemcpy2D(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c::cudaMemcpyKind) => CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020, cudaMemcpy2D_v3020_params {
    let _ = kind;
    let (dst, src) = (dst as usize, src as usize);
    copy_2d(Work::Memcpy2D { dst, dpitch, src, spitch, width, height, is_async: false }, 0)
});

runtime_fn!(cudaMemcpy2DAsync(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c::cudaMemcpyKind, stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020, cudaMemcpy2DAsync_v3020_params {
    let _ = kind;
    let (dst, src) = (dst as usize, src as usize);
    copy_2d(Work::Memcpy2D { dst, dpitch, src, spitch, width, height, is_async: true }, stream as usize)
});

// cuda_runtime_api.h, cudaLaunchHostFunc: returns cudaSuccess, cudaErrorInvalidResourceHandle (a bad stream),
// cudaErrorInvalidValue (here: a null function) or cudaErrorNotSupported.
runtime_fn!(cudaLaunchHostFunc(stream: c::cudaStream_t, fn_: c::cudaHostFn_t, userData: *mut c_void) => CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000, cudaLaunchHostFunc_v10000_params {
    let Some(f) = fn_ else { return c::cudaErrorInvalidValue };
    let Some(s) = device::stream(stream as usize, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    s.enqueue(Work::HostFn(f, userData as usize)).map_or(c::cudaErrorUnknown, |_| c::cudaSuccess)
});

fn copy_peer(
    dst: usize,
    dst_device: c_int,
    src: usize,
    src_device: c_int,
    count: usize,
    stream: usize,
    is_async: bool,
) -> CudaError {
    let n = crate::driver::device_count() as c_int;
    if !(0..n).contains(&dst_device) || !(0..n).contains(&src_device) {
        return c::cudaErrorInvalidDevice;
    }
    if count == 0 {
        return c::cudaSuccess;
    }
    let Some(s) = device::stream(stream, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    let Some(seq) = s.enqueue(Work::Memcpy { dst, src, bytes: count, is_async }) else { return c::cudaErrorUnknown };
    if !is_async {
        s.wait_for(seq);
    }
    c::cudaSuccess
}

runtime_fn!(cudaMemcpyPeer(dst: *mut c_void, dstDevice: c_int, src: *const c_void, srcDevice: c_int, count: usize) => CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000, cudaMemcpyPeer_v4000_params {
    copy_peer(dst as usize, dstDevice, src as usize, srcDevice, count, 0, false)
});

runtime_fn!(cudaMemcpyPeerAsync(dst: *mut c_void, dstDevice: c_int, src: *const c_void, srcDevice: c_int, count: usize, stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000, cudaMemcpyPeerAsync_v4000_params {
    copy_peer(dst as usize, dstDevice, src as usize, srcDevice, count, stream as usize, true)
});

runtime_fn!(cudaLaunchKernelExC(config: *const c::cudaLaunchConfig_t, func: *const c_void, args: *mut *mut c_void) => CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, cudaLaunchKernelExC_v11060_params {
    // SAFETY: null or the caller's launch configuration (its attributes are not modelled).
    let Some(cfg) = (unsafe { config.as_ref() }) else { return c::cudaErrorInvalidValue };
    if func.is_null() {
        return c::cudaErrorInvalidValue;
    }
    let grid = [cfg.gridDim.x, cfg.gridDim.y, cfg.gridDim.z];
    let block = [cfg.blockDim.x, cfg.blockDim.y, cfg.blockDim.z];
    crate::driver::launch(func as usize, grid, block, cfg.dynamicSmemBytes as u32, cfg.stream as usize, args)
});

runtime_fn!(cudaFuncGetAttributes(attr: *mut c::cudaFuncAttributes, func: *const c_void) => CUPTI_RUNTIME_TRACE_CBID_cudaFuncGetAttributes_v3020, cudaFuncGetAttributes_v3020_params {
    if func.is_null() {
        return c::cudaErrorInvalidDeviceFunction;
    }
    // SAFETY: cudaFuncAttributes is plain C data; all-zero is valid.
    let mut a: c::cudaFuncAttributes = unsafe { std::mem::zeroed() };
    let p = crate::driver::device_properties();
    a.maxThreadsPerBlock = p.maxThreadsPerBlock;
    a.numRegs = 32;
    a.ptxVersion = p.major * 10 + p.minor;
    a.binaryVersion = a.ptxVersion;
    a.maxDynamicSharedSizeBytes = p.sharedMemPerBlock as c_int;
    if put(attr, a) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});

runtime_fn!(cudaFuncSetAttribute(func: *const c_void, attr: c::cudaFuncAttribute, value: c_int) => CUPTI_RUNTIME_TRACE_CBID_cudaFuncSetAttribute_v9000, cudaFuncSetAttribute_v9000_params {
    if func.is_null() || attr >= c::cudaFuncAttributeMax || value < 0 {
        return c::cudaErrorInvalidValue;
    }
    c::cudaSuccess
});

/// Blocks of `block_size` threads resident on one multiprocessor: bounded by its 2048 threads and 32 blocks.
fn occupancy(num_blocks: *mut c_int, func: *const c_void, block_size: c_int) -> CudaError {
    if func.is_null() || block_size <= 0 {
        return c::cudaErrorInvalidValue;
    }
    let p = crate::driver::device_properties();
    let n = (p.maxThreadsPerMultiProcessor / block_size).min(32);
    if put(num_blocks, n) {
        c::cudaSuccess
    } else {
        c::cudaErrorInvalidValue
    }
}

runtime_fn!(cudaOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks: *mut c_int, func: *const c_void, blockSize: c_int, dynamicSMemSize: usize) => CUPTI_RUNTIME_TRACE_CBID_cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6050, cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6050_params {
    let _ = dynamicSMemSize;
    occupancy(numBlocks, func, blockSize)
});

runtime_fn!(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks: *mut c_int, func: *const c_void, blockSize: c_int, dynamicSMemSize: usize, flags: c_uint) => CUPTI_RUNTIME_TRACE_CBID_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000, cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000_params {
    let _ = (dynamicSMemSize, flags);
    occupancy(numBlocks, func, blockSize)
});

runtime_fn!(cudaDeviceGetAttribute(value: *mut c_int, attr: c::cudaDeviceAttr, device: c_int) => CUPTI_RUNTIME_TRACE_CBID_cudaDeviceGetAttribute_v5000, cudaDeviceGetAttribute_v5000_params {
    if device < 0 || device as u32 >= crate::driver::device_count() {
        return c::cudaErrorInvalidDevice;
    }
    let p = crate::driver::device_properties();
    let v = match attr {
        c::cudaDevAttrMaxThreadsPerBlock => p.maxThreadsPerBlock,
        c::cudaDevAttrWarpSize => p.warpSize,
        c::cudaDevAttrMultiProcessorCount => p.multiProcessorCount,
        c::cudaDevAttrL2CacheSize => p.l2CacheSize,
        c::cudaDevAttrMaxThreadsPerMultiProcessor => p.maxThreadsPerMultiProcessor,
        c::cudaDevAttrComputeCapabilityMajor => p.major,
        c::cudaDevAttrComputeCapabilityMinor => p.minor,
        c::cudaDevAttrMaxSharedMemoryPerMultiprocessor => p.sharedMemPerMultiprocessor as c_int,
        c::cudaDevAttrMaxSharedMemoryPerBlockOptin => (227 << 10) as c_int,
        c::cudaDevAttrMaxBlocksPerMultiprocessor => 32,
        _ => return c::cudaErrorInvalidValue,
    };
    if put(value, v) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
