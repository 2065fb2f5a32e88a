//! The simulated driver (`libcuda.so.1`): `cuInit` loads the injection library named by `CUDA_INJECTION64_PATH`
//! and calls its `InitializeInjection`, exactly as the real driver does, before any API callback can fire.

use crate::context::{current_device, kernel_name};
use crate::cupti::api_call;
use crate::device::{self, Work, MAX_DEVICES};
use crate::memory::{self, Space};
use crate::records::SimRecord;
use crate::{c, guard, now_ns};
use once_cell::sync::OnceCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};

static INIT: OnceCell<Result<(), u32>> = OnceCell::new();

/// Number of simulated devices: `CUDASIM_DEVICES` (default 1, at most 8; 0 behaves like a machine without GPU).
pub(crate) fn device_count() -> u32 {
    std::env::var("CUDASIM_DEVICES").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1).min(MAX_DEVICES)
}

/// Runs `cuInit` once per process; the runtime calls this before its first API call, as cudart does.
pub(crate) fn ensure_init() -> Result<(), u32> {
    *INIT.get_or_init(|| {
        if device_count() == 0 {
            return Err(c::cudaErrorNoDevice);
        }
        // The modelled release is fixed at initialisation; an unknown one stops here with one line.
        let _ = crate::release::current();
        load_injection();
        Ok(())
    })
}

fn load_injection() {
    let Some(path) = std::env::var_os("CUDA_INJECTION64_PATH").filter(|p| !p.is_empty()) else {
        return;
    };
    let Ok(cpath) = CString::new(path.as_encoded_bytes()) else {
        return;
    };
    // SAFETY: dlopen with a NUL-terminated path.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        eprintln!("cudasim: cannot load CUDA_INJECTION64_PATH={}", path.to_string_lossy());
        return;
    }
    // SAFETY: dlsym on a live handle with a NUL-terminated name.
    let init = unsafe { libc::dlsym(handle, c"InitializeInjection".as_ptr()) };
    if !init.is_null() {
        // SAFETY: the documented signature `int InitializeInjection(void)` (the real driver ignores its result
        // too).
        let init: extern "C" fn() -> c_int = unsafe { std::mem::transmute(init) };
        init();
    }
}

/// An H100-like device (the name says it is simulated), or with `CUDASIM_GPU=b200` a Blackwell B200: compute
/// capability 10.0 (CUDA's table of compute capabilities), 180 GB (DGX B200's datasheet: 1,440 GB for eight
/// GPUs); its 148 SMs are taken from public deviceQuery reports, not an NVIDIA document, and only the compute
/// capability matters to what it models (`hw_trace.rs`). The rest is the H100's.
pub(crate) fn device_properties() -> c::cudaDeviceProp {
    // SAFETY: cudaDeviceProp is plain C data; all-zero is valid.
    let mut p: c::cudaDeviceProp = unsafe { std::mem::zeroed() };
    let blackwell = crate::hw_trace::blackwell();
    let name: &[u8] = if blackwell { b"NVIDIA B200 (cudasim)" } else { b"NVIDIA H100 80GB HBM3 (cudasim)" };
    for (dst, src) in p.name.iter_mut().zip(name) {
        *dst = *src as c_char;
    }
    p.totalGlobalMem = if blackwell { 180 << 30 } else { 80 << 30 };
    p.sharedMemPerBlock = 48 << 10;
    p.regsPerBlock = 65536;
    p.warpSize = 32;
    p.maxThreadsPerBlock = 1024;
    p.maxThreadsDim = [1024, 1024, 64];
    p.maxGridSize = [i32::MAX, 65535, 65535];
    (p.major, p.minor) = if blackwell { (10, 0) } else { (9, 0) };
    p.multiProcessorCount = if blackwell { 148 } else { 132 };
    p.l2CacheSize = 50 << 20;
    p.maxThreadsPerMultiProcessor = 2048;
    p.sharedMemPerMultiprocessor = 228 << 10;
    p.regsPerMultiprocessor = 65536;
    p.memoryBusWidth = 5120;
    p
}

/// `cuMemAlloc_v2` with its CUPTI callbacks (called directly, or nested inside `cudaMalloc`).
pub(crate) fn mem_alloc(dptr: *mut c::CUdeviceptr, bytesize: usize) -> c::CUresult {
    let params = c::cuMemAlloc_v2_params { dptr, bytesize };
    api_call(
        c::CUPTI_CB_DOMAIN_DRIVER_API,
        c::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
        c"cuMemAlloc_v2",
        &params,
        std::ptr::null(),
        || {
            if dptr.is_null() {
                return c::CUDA_ERROR_INVALID_VALUE;
            }
            let Some(p) = memory::alloc(bytesize, Space::Device, current_device()) else {
                return c::CUDA_ERROR_OUT_OF_MEMORY;
            };
            // SAFETY: non-null out-parameter from the caller.
            unsafe { dptr.write(p as c::CUdeviceptr) };
            crate::activity::emit(SimRecord::Memory {
                release: false,
                timestamp: now_ns(),
                device: current_device(),
                stream: 0,
                correlation: crate::cupti_state::current_correlation(),
                address: p as u64,
                bytes: bytesize as u64,
                memory_kind: Space::Device.cupti_kind(),
                is_async: false,
            });
            c::CUDA_SUCCESS
        },
    )
}

/// `cuLaunchKernel` with its CUPTI callbacks: copies the NULL-terminated argument array and queues the kernel.
pub(crate) fn launch(
    f: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: usize,
    args: *mut *mut c_void,
) -> u32 {
    let name = kernel_name(f);
    let params = c::cuLaunchKernel_params {
        f: f as c::CUfunction,
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: block[0],
        blockDimY: block[1],
        blockDimZ: block[2],
        sharedMemBytes: shared,
        hStream: stream as c::CUstream,
        kernelParams: args,
        extra: std::ptr::null_mut(),
    };
    api_call(
        c::CUPTI_CB_DOMAIN_DRIVER_API,
        c::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
        c"cuLaunchKernel",
        &params,
        name.as_ptr(),
        || {
            crate::timing::kernel_first_launch(f);
            crate::timing::kernel_launch();
            if grid.contains(&0) || block.contains(&0) || block.iter().product::<u32>() > 1024 {
                return c::cudaErrorInvalidConfiguration;
            }
            let Some(s) = device::stream(stream, current_device()) else {
                return c::cudaErrorInvalidResourceHandle;
            };
            let mut values = Vec::new();
            if let Some(sizes) = crate::context::kernel_params(f) {
                // A kernel with registered parameters: exactly that many, each of its own size (zero-extended).
                for (i, &size) in sizes.iter().enumerate() {
                    if args.is_null() {
                        return c::cudaErrorInvalidValue;
                    }
                    // SAFETY: `args` holds one pointer per registered parameter, as kernelParams does for cuLaunchKernel.
                    let p = unsafe { *args.wrapping_add(i) } as *const u8;
                    if p.is_null() {
                        return c::cudaErrorInvalidValue;
                    }
                    let mut bytes = [0u8; 8];
                    // SAFETY: each pointer refers to a parameter of `size` bytes (1..=8).
                    unsafe { std::ptr::copy_nonoverlapping(p, bytes.as_mut_ptr(), size) };
                    values.push(u64::from_le_bytes(bytes));
                }
            } else {
                for i in 0..64 {
                    if args.is_null() {
                        break;
                    }
                    // SAFETY: the simulator's fallback convention: `args` is a NULL-terminated array of pointers to
                    // 8-byte arguments (see the crate docs).
                    let p = unsafe { *args.wrapping_add(i) };
                    if p.is_null() {
                        break;
                    }
                    // SAFETY: as above; each entry points at an argument of at least 8 bytes.
                    values.push(unsafe { (p as *const u64).read_unaligned() });
                }
            }
            // SAFETY: the app passed a kernel, which in the simulator is a host function taking `void **args`.
            let func = unsafe { std::mem::transmute::<usize, device::KernelFn>(f) };
            let work = Work::Kernel {
                f: func,
                args: values,
                grid: grid.map(|v| v as i32),
                block: block.map(|v| v as i32),
                shared: shared as i32,
                name: name.as_ptr(),
            };
            s.enqueue(work).map_or(c::cudaErrorUnknown, |_| c::cudaSuccess)
        },
    )
}

/// # Safety
/// Called from C like `cuInit`.
#[no_mangle]
pub unsafe extern "C" fn cuInit(_flags: c_uint) -> c::CUresult {
    guard(c::CUDA_ERROR_UNKNOWN, || match ensure_init() {
        Ok(()) => c::CUDA_SUCCESS,
        Err(_) => c::CUDA_ERROR_NO_DEVICE,
    })
}

/// # Safety
/// Called from C like `cuDriverGetVersion`.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c::CUresult {
    if version.is_null() {
        return c::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null out-parameter.
    unsafe { version.write(c::CUDA_VERSION as c_int) };
    c::CUDA_SUCCESS
}

/// # Safety
/// Called from C like `cuDeviceGetCount`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> c::CUresult {
    if count.is_null() {
        return c::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null out-parameter.
    unsafe { count.write(device_count() as c_int) };
    c::CUDA_SUCCESS
}

/// # Safety
/// Called from C like `cuLaunchKernel` (simulator conventions for `f` and `kernelParams`, see the crate docs).
#[no_mangle]
#[allow(clippy::too_many_arguments, non_snake_case)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: c::CUfunction,
    gridDimX: c_uint,
    gridDimY: c_uint,
    gridDimZ: c_uint,
    blockDimX: c_uint,
    blockDimY: c_uint,
    blockDimZ: c_uint,
    sharedMemBytes: c_uint,
    hStream: c::CUstream,
    kernelParams: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> c::CUresult {
    guard(c::CUDA_ERROR_UNKNOWN, || {
        if ensure_init().is_err() {
            return c::CUDA_ERROR_NOT_INITIALIZED;
        }
        if f.is_null() {
            return c::CUDA_ERROR_INVALID_VALUE;
        }
        let grid = [gridDimX, gridDimY, gridDimZ];
        let block = [blockDimX, blockDimY, blockDimZ];
        match launch(f as usize, grid, block, sharedMemBytes, hStream as usize, kernelParams) {
            0 => c::CUDA_SUCCESS,
            _ => c::CUDA_ERROR_INVALID_VALUE,
        }
    })
}

/// # Safety
/// Called from C like `cuMemAlloc_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut c::CUdeviceptr, bytesize: usize) -> c::CUresult {
    guard(c::CUDA_ERROR_UNKNOWN, || {
        if ensure_init().is_err() {
            return c::CUDA_ERROR_NOT_INITIALIZED;
        }
        mem_alloc(dptr, bytesize)
    })
}

/// # Safety
/// Called from C like `cuMemFree_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: c::CUdeviceptr) -> c::CUresult {
    guard(c::CUDA_ERROR_UNKNOWN, || {
        let params = c::cuMemFree_v2_params { dptr };
        api_call(
            c::CUPTI_CB_DOMAIN_DRIVER_API,
            c::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
            c"cuMemFree_v2",
            &params,
            std::ptr::null(),
            || {
                for s in device::device_streams(current_device()) {
                    s.synchronize();
                }
                match memory::free(dptr as *mut u8, &[Space::Device]) {
                    Some(_) => c::CUDA_SUCCESS,
                    None => c::CUDA_ERROR_INVALID_VALUE,
                }
            },
        )
    })
}

/// # Safety
/// Called from C like `cuCtxSynchronize`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> c::CUresult {
    guard(c::CUDA_ERROR_UNKNOWN, || {
        for s in device::device_streams(current_device()) {
            s.synchronize();
        }
        c::CUDA_SUCCESS
    })
}

/// # Safety
/// Called from C like `cuDeviceGetName`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> c::CUresult {
    if name.is_null() || len <= 0 || dev < 0 || dev as u32 >= device_count() {
        return c::CUDA_ERROR_INVALID_VALUE;
    }
    let props = device_properties();
    let n = (len as usize - 1).min(props.name.len() - 1);
    // SAFETY: the caller's buffer holds `len` bytes; we write at most len - 1.
    unsafe { std::ptr::copy_nonoverlapping(props.name.as_ptr(), name, n) };
    // SAFETY: as above: the NUL, at n < len.
    unsafe { *name.wrapping_add(n) = 0 };
    c::CUDA_SUCCESS
}

/// # Safety
/// Called from C like `cuDeviceTotalMem_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> c::CUresult {
    if bytes.is_null() || dev < 0 || dev as u32 >= device_count() {
        return c::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null out-parameter.
    unsafe { bytes.write(device_properties().totalGlobalMem) };
    c::CUDA_SUCCESS
}

/// # Safety
/// Called from C like `cuDeviceGetAttribute` (SM count and compute capability; others are unsupported).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: c_int) -> c::CUresult {
    if value.is_null() || dev < 0 || dev as u32 >= device_count() {
        return c::CUDA_ERROR_INVALID_VALUE;
    }
    let p = device_properties();
    let v = match attrib as u32 {
        c::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => p.multiProcessorCount,
        c::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => p.major,
        c::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => p.minor,
        c::CU_DEVICE_ATTRIBUTE_WARP_SIZE => p.warpSize,
        _ => return c::CUDA_ERROR_NOT_SUPPORTED,
    };
    // SAFETY: non-null out-parameter.
    unsafe { value.write(v) };
    c::CUDA_SUCCESS
}
