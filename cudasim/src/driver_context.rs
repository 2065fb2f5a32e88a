//! The driver API's primary contexts, `cuMemsetD8` and `cuGetErrorName`: what a driver-API program (such as
//! `cuflight doctor`'s probe) calls to do GPU work without the runtime. Test double: a context here is only the
//! device it belongs to, since the rest of cudasim keeps one current device per thread (context.rs).
//!
//! From cuda.h (CUDA 12.9 and 13.5): `cuDevicePrimaryCtxRetain` returns the device's primary context, creating
//! it on first retain, and CUDA_ERROR_NOT_INITIALIZED before `cuInit`, CUDA_ERROR_INVALID_DEVICE for a device
//! out of range; `cuDevicePrimaryCtxRelease` is exported as `cuDevicePrimaryCtxRelease_v2` (CUDA 11.0 and
//! later); `cuCtxSetCurrent` binds a context to the calling thread (NULL unbinds); `cuMemsetD8` is exported as
//! `cuMemsetD8_v2`, queued on the legacy default stream and "asynchronous with respect to the host" for device
//! memory (the API synchronization behaviour section of the driver API reference); `cuGetErrorName` writes the
//! enum's name, or NULL with CUDA_ERROR_INVALID_VALUE for a code it does not know.

use crate::context::{current_device, set_current_device};
use crate::cupti::api_call;
use crate::device::{self, Work};
use crate::driver::{device_count, ensure_init};
use crate::{c, guard, memory};
use std::ffi::c_char;

/// Contexts are handed out as device + 1, so that NULL stays "no context".
fn handle_of(device: u32) -> c::CUcontext {
    (device as usize + 1) as *mut c::CUctx_st
}

/// # Safety
/// Called from C like `cuDevicePrimaryCtxRetain`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut c::CUcontext, dev: c::CUdevice) -> c::CUresult {
    guard(c::CUDA_ERROR_UNKNOWN, || {
        if ensure_init().is_err() {
            return c::CUDA_ERROR_NOT_INITIALIZED;
        }
        if pctx.is_null() {
            return c::CUDA_ERROR_INVALID_VALUE;
        }
        if dev < 0 || dev as u32 >= device_count() {
            return c::CUDA_ERROR_INVALID_DEVICE;
        }
        // SAFETY: non-null out-parameter.
        unsafe { pctx.write(handle_of(dev as u32)) };
        c::CUDA_SUCCESS
    })
}

/// # Safety
/// Called from C like `cuDevicePrimaryCtxRelease_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c::CUdevice) -> c::CUresult {
    if dev < 0 || dev as u32 >= device_count() {
        return c::CUDA_ERROR_INVALID_DEVICE;
    }
    c::CUDA_SUCCESS
}

/// # Safety
/// Called from C like `cuCtxSetCurrent`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: c::CUcontext) -> c::CUresult {
    let Some(device) = (ctx as usize).checked_sub(1) else {
        return c::CUDA_SUCCESS; // NULL: unbind (the thread keeps device 0 here)
    };
    if device >= device_count() as usize {
        return c::CUDA_ERROR_INVALID_CONTEXT;
    }
    set_current_device(device as u32);
    c::CUDA_SUCCESS
}

/// # Safety
/// Called from C like `cuMemsetD8_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: c::CUdeviceptr, uc: u8, n: usize) -> c::CUresult {
    guard(c::CUDA_ERROR_UNKNOWN, || {
        if ensure_init().is_err() {
            return c::CUDA_ERROR_NOT_INITIALIZED;
        }
        let params = c::cuMemsetD8_v2_params { dstDevice: dst, uc, N: n };
        api_call(
            c::CUPTI_CB_DOMAIN_DRIVER_API,
            c::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,
            c"cuMemsetD8_v2",
            &params,
            std::ptr::null(),
            || {
                let Some(s) = device::stream(0, current_device()) else {
                    return c::CUDA_ERROR_INVALID_CONTEXT;
                };
                if memory::lookup(dst as usize).is_none() {
                    return c::CUDA_ERROR_INVALID_VALUE;
                }
                let work = Work::Memset { dst: dst as usize, value: uc, bytes: n, is_async: false };
                s.enqueue(work).map_or(c::CUDA_ERROR_UNKNOWN, |_| c::CUDA_SUCCESS)
            },
        )
    })
}

/// # Safety
/// Called from C like `cuGetErrorName`.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: c::CUresult, p_str: *mut *const c_char) -> c::CUresult {
    if p_str.is_null() {
        return c::CUDA_ERROR_INVALID_VALUE;
    }
    let name = error_name(error);
    let (value, result) = match name {
        Some(n) => (n.as_ptr(), c::CUDA_SUCCESS),
        None => (std::ptr::null(), c::CUDA_ERROR_INVALID_VALUE),
    };
    // SAFETY: non-null out-parameter; the names are static.
    unsafe { p_str.write(value) };
    result
}

/// The names of the codes cudasim's driver returns (cuda.h's `cudaError_enum`).
fn error_name(code: c::CUresult) -> Option<&'static std::ffi::CStr> {
    Some(match code {
        c::CUDA_SUCCESS => c"CUDA_SUCCESS",
        c::CUDA_ERROR_INVALID_VALUE => c"CUDA_ERROR_INVALID_VALUE",
        c::CUDA_ERROR_OUT_OF_MEMORY => c"CUDA_ERROR_OUT_OF_MEMORY",
        c::CUDA_ERROR_NOT_INITIALIZED => c"CUDA_ERROR_NOT_INITIALIZED",
        c::CUDA_ERROR_NO_DEVICE => c"CUDA_ERROR_NO_DEVICE",
        c::CUDA_ERROR_INVALID_DEVICE => c"CUDA_ERROR_INVALID_DEVICE",
        c::CUDA_ERROR_INVALID_CONTEXT => c"CUDA_ERROR_INVALID_CONTEXT",
        c::CUDA_ERROR_NOT_SUPPORTED => c"CUDA_ERROR_NOT_SUPPORTED",
        c::CUDA_ERROR_UNKNOWN => c"CUDA_ERROR_UNKNOWN",
        _ => return None,
    })
}
