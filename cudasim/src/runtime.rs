//! The simulated CUDA runtime (`libcudart.so.13`): the exported C API, each call wrapped in CUPTI callbacks.

use crate::activity::emit;
use crate::context::{self, current_device, kernel_name};
use crate::cupti::api_call;
use crate::device::{self, Event, Work, NEXT_EVENT_ID};
use crate::memory::{self, Space};
use crate::records::SimRecord;
use crate::{c, guard, now_ns, CudaError};
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

thread_local! {
    static LAST_ERROR: Cell<CudaError> = const { Cell::new(0) };
}

static EVENTS: Lazy<Mutex<HashMap<usize, Arc<Event>>>> = Lazy::new(|| Mutex::new(HashMap::new()));

pub(crate) fn set_error(e: CudaError) -> CudaError {
    if e != c::cudaSuccess {
        LAST_ERROR.with(|l| l.set(e));
    }
    e
}

/// Writes `v` through an out-parameter; false if it is null.
pub(crate) fn put<T>(p: *mut T, v: T) -> bool {
    if p.is_null() {
        return false;
    }
    // SAFETY: non-null out-parameter supplied by the caller of a CUDA API, valid for a write of T by contract.
    unsafe { p.write(v) };
    true
}

fn memory_record(release: bool, address: usize, bytes: usize, space: Space, stream: u32, is_async: bool) {
    emit(SimRecord::Memory {
        release,
        timestamp: now_ns(),
        device: current_device(),
        stream,
        correlation: crate::cupti_state::current_correlation(),
        address: address as u64,
        bytes: bytes as u64,
        memory_kind: space.cupti_kind(),
        is_async,
    });
}

pub(crate) const fn cname(s: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(s.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("missing NUL"),
    }
}

fn alloc_into(out: *mut *mut c_void, size: usize, space: Space, stream: u32, is_async: bool) -> CudaError {
    if out.is_null() {
        return c::cudaErrorInvalidValue;
    }
    match memory::alloc(size, space, current_device()) {
        Some(p) => {
            put(out, p as *mut c_void);
            memory_record(false, p as usize, size, space, stream, is_async);
            c::cudaSuccess
        }
        None => c::cudaErrorMemoryAllocation,
    }
}

fn sync_device() {
    for s in device::device_streams(current_device()) {
        s.synchronize();
    }
}

/// Frees after an implicit device synchronisation, as cudaFree and cudaFreeHost do.
fn free_sync(p: *mut c_void, spaces: &[Space]) -> CudaError {
    if p.is_null() {
        return c::cudaSuccess;
    }
    sync_device();
    match memory::free(p as *mut u8, spaces) {
        Some((len, space)) => {
            memory_record(true, p as usize, len, space, 0, false);
            c::cudaSuccess
        }
        None => c::cudaErrorInvalidDevicePointer,
    }
}

runtime_fn!(cudaMalloc(devPtr: *mut *mut c_void, size: usize) => CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, cudaMalloc_v3020_params {
    // The real runtime allocates through the driver: CUPTI reports the nested driver call too.
    let mut dptr: c::CUdeviceptr = 0;
    let r = crate::driver::mem_alloc(&mut dptr, size);
    if r != c::CUDA_SUCCESS || !put(devPtr, dptr as *mut c_void) {
        return c::cudaErrorMemoryAllocation;
    }
    c::cudaSuccess
});
runtime_fn!(cudaFree(devPtr: *mut c_void) => CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, cudaFree_v3020_params {
    free_sync(devPtr, &[Space::Device, Space::Managed])
});
runtime_fn!(cudaMallocHost(ptr: *mut *mut c_void, size: usize) => CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, cudaMallocHost_v3020_params {
    alloc_into(ptr, size, Space::Pinned, 0, false)
});
runtime_fn!(cudaHostAlloc(pHost: *mut *mut c_void, size: usize, flags: c_uint) => CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, cudaHostAlloc_v3020_params {
    let _ = flags;
    alloc_into(pHost, size, Space::Pinned, 0, false)
});
runtime_fn!(cudaFreeHost(ptr: *mut c_void) => CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, cudaFreeHost_v3020_params {
    free_sync(ptr, &[Space::Pinned])
});
runtime_fn!(cudaMallocManaged(devPtr: *mut *mut c_void, size: usize, flags: c_uint) => CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000, cudaMallocManaged_v6000_params {
    let _ = flags;
    alloc_into(devPtr, size, Space::Managed, 0, false)
});
runtime_fn!(cudaMallocAsync(devPtr: *mut *mut c_void, size: usize, hStream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, cudaMallocAsync_v11020_params {
    match device::stream(hStream as usize, current_device()) {
        Some(s) => alloc_into(devPtr, size, Space::Device, s.id, true),
        None => c::cudaErrorInvalidResourceHandle,
    }
});
runtime_fn!(cudaFreeAsync(devPtr: *mut c_void, hStream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, cudaFreeAsync_v11020_params {
    let Some(s) = device::stream(hStream as usize, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    let Some((Space::Device, _)) = memory::lookup(devPtr as usize) else { return c::cudaErrorInvalidDevicePointer };
    // Stream-ordered: the memory stays usable by work queued before the free.
    let len = memory_len(devPtr as usize);
    memory_record(true, devPtr as usize, len, Space::Device, s.id, true);
    s.enqueue(Work::Free(devPtr as usize)).map_or(c::cudaErrorUnknown, |_| c::cudaSuccess)
});

fn memory_len(p: usize) -> usize {
    // Sizes are only needed for the MEMORY2 record; lookup by exact base.
    memory::size_of(p).unwrap_or(0)
}

/// Queues a copy; blocks the host as CUDA does (synchronous copies, and async copies touching pageable memory).
fn copy(dst: *mut c_void, src: *const c_void, count: usize, stream: c::cudaStream_t, is_async: bool) -> CudaError {
    let Some(s) = device::stream(stream as usize, current_device()) else {
        return c::cudaErrorInvalidResourceHandle;
    };
    if count == 0 {
        return c::cudaSuccess;
    }
    if dst.is_null() || src.is_null() {
        return c::cudaErrorInvalidValue;
    }
    let (d, sr) = (memory::lookup(dst as usize), memory::lookup(src as usize));
    let pageable = d.is_none() || sr.is_none();
    let device_only = matches!((d, sr), (Some((Space::Device, _)), Some((Space::Device, _))));
    let Some(seq) = s.enqueue(Work::Memcpy { dst: dst as usize, src: src as usize, bytes: count, is_async }) else {
        return c::cudaErrorUnknown;
    };
    if (!is_async && !device_only) || (is_async && pageable) {
        s.wait_for(seq);
    }
    c::cudaSuccess
}

runtime_fn!(cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: c::cudaMemcpyKind) => CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, cudaMemcpy_v3020_params {
    let _ = kind;
    copy(dst, src, count, std::ptr::null_mut(), false)
});
runtime_fn!(cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, count: usize, kind: c::cudaMemcpyKind, stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, cudaMemcpyAsync_v3020_params {
    let _ = kind;
    copy(dst, src, count, stream, true)
});

fn set(dst: *mut c_void, value: c_int, count: usize, stream: c::cudaStream_t, is_async: bool) -> CudaError {
    let Some(s) = device::stream(stream as usize, current_device()) else {
        return c::cudaErrorInvalidResourceHandle;
    };
    if memory::lookup(dst as usize).is_none() {
        return c::cudaErrorInvalidValue;
    }
    s.enqueue(Work::Memset { dst: dst as usize, value: value as u8, bytes: count, is_async })
        .map_or(c::cudaErrorUnknown, |_| c::cudaSuccess)
}

runtime_fn!(cudaMemset(devPtr: *mut c_void, value: c_int, count: usize) => CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, cudaMemset_v3020_params {
    set(devPtr, value, count, std::ptr::null_mut(), false)
});
runtime_fn!(cudaMemsetAsync(devPtr: *mut c_void, value: c_int, count: usize, stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, cudaMemsetAsync_v3020_params {
    set(devPtr, value, count, stream, true)
});

/// # Safety
/// Called from C like `cudaLaunchKernel`; in the simulator `func` is a host function `void k(void **args)` and
/// `args` ends with a NULL entry (see the crate docs).
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn cudaLaunchKernel(
    func: *const c_void,
    gridDim: c::dim3,
    blockDim: c::dim3,
    args: *mut *mut c_void,
    sharedMem: usize,
    stream: c::cudaStream_t,
) -> CudaError {
    guard(c::cudaErrorUnknown, || {
        if let Err(e) = crate::driver::ensure_init() {
            return set_error(e);
        }
        if func.is_null() {
            return set_error(c::cudaErrorInvalidValue);
        }
        let params = c::cudaLaunchKernel_v7000_params { func, gridDim, blockDim, args, sharedMem, stream };
        let name = kernel_name(func as usize);
        let r = api_call(
            c::CUPTI_CB_DOMAIN_RUNTIME_API,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
            c"cudaLaunchKernel",
            &params,
            name.as_ptr(),
            || {
                let grid = [gridDim.x, gridDim.y, gridDim.z];
                let block = [blockDim.x, blockDim.y, blockDim.z];
                // The real runtime launches through the driver; CUPTI reports the nested cuLaunchKernel.
                crate::driver::launch(func as usize, grid, block, sharedMem as u32, stream as usize, args)
            },
        );
        set_error(r)
    })
}

runtime_fn!(cudaStreamCreate(pStream: *mut c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamCreate_v3020, cudaStreamCreate_v3020_params {
    if put(pStream, device::create_stream(current_device(), 0) as c::cudaStream_t) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
runtime_fn!(cudaStreamCreateWithFlags(pStream: *mut c::cudaStream_t, flags: c_uint) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamCreateWithFlags_v5000, cudaStreamCreateWithFlags_v5000_params {
    if put(pStream, device::create_stream(current_device(), flags) as c::cudaStream_t) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
runtime_fn!(cudaStreamDestroy(stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamDestroy_v5050, cudaStreamDestroy_v5050_params {
    if device::destroy_stream(stream as usize) { c::cudaSuccess } else { c::cudaErrorInvalidResourceHandle }
});
runtime_fn!(cudaStreamSynchronize(stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, cudaStreamSynchronize_v3020_params {
    let Some(s) = device::stream(stream as usize, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    if s.invalidate_capture() {
        return c::cudaErrorStreamCaptureUnsupported;
    }
    let t0 = now_ns();
    s.synchronize();
    device::sync_record(c::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, s.id, 0, t0);
    c::cudaSuccess
});
runtime_fn!(cudaStreamQuery(stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamQuery_v3020, cudaStreamQuery_v3020_params {
    match device::stream(stream as usize, current_device()) {
        Some(s) if s.is_idle() => c::cudaSuccess,
        Some(_) => c::cudaErrorNotReady,
        None => c::cudaErrorInvalidResourceHandle,
    }
});

fn event(handle: c::cudaEvent_t) -> Option<Arc<Event>> {
    EVENTS.lock().get(&(handle as usize)).cloned()
}

fn create_event(out: *mut c::cudaEvent_t) -> CudaError {
    let ev = Arc::new(Event { id: NEXT_EVENT_ID.fetch_add(1, Ordering::Relaxed), ..Default::default() });
    let handle = Arc::as_ptr(&ev) as usize;
    if !put(out, handle as c::cudaEvent_t) {
        return c::cudaErrorInvalidValue;
    }
    EVENTS.lock().insert(handle, ev);
    c::cudaSuccess
}

runtime_fn!(cudaEventCreate(event: *mut c::cudaEvent_t) => CUPTI_RUNTIME_TRACE_CBID_cudaEventCreate_v3020, cudaEventCreate_v3020_params {
    create_event(event)
});
runtime_fn!(cudaEventCreateWithFlags(event: *mut c::cudaEvent_t, flags: c_uint) => CUPTI_RUNTIME_TRACE_CBID_cudaEventCreateWithFlags_v3020, cudaEventCreateWithFlags_v3020_params {
    let _ = flags;
    create_event(event)
});
runtime_fn!(cudaEventDestroy(event: c::cudaEvent_t) => CUPTI_RUNTIME_TRACE_CBID_cudaEventDestroy_v3020, cudaEventDestroy_v3020_params {
    if EVENTS.lock().remove(&(event as usize)).is_some() { c::cudaSuccess } else { c::cudaErrorInvalidResourceHandle }
});
runtime_fn!(cudaEventRecord(event: c::cudaEvent_t, stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020, cudaEventRecord_v3020_params {
    let (Some(ev), Some(s)) = (self::event(event), device::stream(stream as usize, current_device())) else {
        return c::cudaErrorInvalidResourceHandle;
    };
    // cuda_runtime_api.h, cudaEventRecord: it "can be called multiple times on the same event and will overwrite
    // the previously captured state"; cudaEventQuery returns "cudaErrorNotReady if any captured work is incomplete".
    let mut recorded = ev.recorded.lock();
    ev.timestamp.store(0, Ordering::Release);
    let Some(seq) = s.enqueue(Work::Record(ev.clone())) else { return c::cudaErrorUnknown };
    if seq == 0 {
        // Captured into a graph: this simulator keeps no event nodes, so the event stays complete.
        ev.timestamp.store(now_ns(), Ordering::Release);
    }
    *recorded = Some((s, seq));
    c::cudaSuccess
});
runtime_fn!(cudaEventSynchronize(event: c::cudaEvent_t) => CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, cudaEventSynchronize_v3020_params {
    let Some(ev) = self::event(event) else { return c::cudaErrorInvalidResourceHandle };
    let recorded = ev.recorded.lock().clone();
    if let Some((s, seq)) = recorded {
        let t0 = now_ns();
        s.wait_for(seq);
        device::sync_record(c::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, s.id, ev.id, t0);
    }
    c::cudaSuccess
});
runtime_fn!(cudaEventQuery(event: c::cudaEvent_t) => CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020, cudaEventQuery_v3020_params {
    let Some(ev) = self::event(event) else { return c::cudaErrorInvalidResourceHandle };
    let done = ev.recorded.lock().as_ref().is_none_or(|(_, _)| ev.timestamp.load(Ordering::Acquire) != 0);
    if done { c::cudaSuccess } else { c::cudaErrorNotReady }
});
runtime_fn!(cudaEventElapsedTime(ms: *mut f32, start: c::cudaEvent_t, end: c::cudaEvent_t) => CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v12080, cudaEventElapsedTime_v12080_params {
    let (Some(a), Some(b)) = (event(start), event(end)) else { return c::cudaErrorInvalidResourceHandle };
    let (ta, tb) = (a.timestamp.load(Ordering::Acquire), b.timestamp.load(Ordering::Acquire));
    if ta == 0 || tb == 0 {
        return c::cudaErrorNotReady;
    }
    if put(ms, (tb as f64 - ta as f64) as f32 / 1e6) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
runtime_fn!(cudaStreamWaitEvent(stream: c::cudaStream_t, event: c::cudaEvent_t, flags: c_uint) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, cudaStreamWaitEvent_v3020_params {
    let _ = flags;
    let (Some(ev), Some(s)) = (self::event(event), device::stream(stream as usize, current_device())) else {
        return c::cudaErrorInvalidResourceHandle;
    };
    let recorded = ev.recorded.lock().clone();
    if let Some((other, seq)) = recorded {
        s.enqueue(Work::Wait(other, seq));
    }
    device::sync_record(c::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, s.id, ev.id, now_ns());
    c::cudaSuccess
});

runtime_fn!(cudaDeviceSynchronize() => CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020 {
    let t0 = now_ns();
    sync_device();
    device::sync_record(c::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, u32::MAX, 0, t0);
    c::cudaSuccess
});
runtime_fn!(cudaDeviceReset() => CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020 {
    sync_device();
    c::cudaSuccess
});
runtime_fn!(cudaProfilerStart() => CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000 { c::cudaSuccess });
runtime_fn!(cudaProfilerStop() => CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000 { c::cudaSuccess });

runtime_fn!(cudaGetDeviceCount(count: *mut c_int) => CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceCount_v3020, cudaGetDeviceCount_v3020_params {
    if put(count, crate::driver::device_count() as c_int) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
runtime_fn!(cudaSetDevice(device: c_int) => CUPTI_RUNTIME_TRACE_CBID_cudaSetDevice_v3020, cudaSetDevice_v3020_params {
    if device < 0 || device as u32 >= crate::driver::device_count() {
        return c::cudaErrorInvalidDevice;
    }
    context::set_current_device(device as u32);
    c::cudaSuccess
});
runtime_fn!(cudaGetDevice(device: *mut c_int) => CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020, cudaGetDevice_v3020_params {
    if put(device, current_device() as c_int) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
runtime_fn!(cudaGetDeviceProperties(prop: *mut c::cudaDeviceProp, device: c_int) => CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceProperties_v12000, cudaGetDeviceProperties_v12000_params {
    if device < 0 || device as u32 >= crate::driver::device_count() {
        return c::cudaErrorInvalidDevice;
    }
    if put(prop, crate::driver::device_properties()) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
runtime_fn!(cudaMemGetInfo(free: *mut usize, total: *mut usize) => CUPTI_RUNTIME_TRACE_CBID_cudaMemGetInfo_v3020, cudaMemGetInfo_v3020_params {
    let total_bytes = crate::driver::device_properties().totalGlobalMem;
    if put(free, total_bytes) && put(total, total_bytes) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
runtime_fn!(cudaRuntimeGetVersion(runtimeVersion: *mut c_int) => CUPTI_RUNTIME_TRACE_CBID_cudaRuntimeGetVersion_v3020, cudaRuntimeGetVersion_v3020_params {
    if put(runtimeVersion, c::CUDART_VERSION as c_int) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});
runtime_fn!(cudaDriverGetVersion(driverVersion: *mut c_int) => CUPTI_RUNTIME_TRACE_CBID_cudaDriverGetVersion_v3020, cudaDriverGetVersion_v3020_params {
    if put(driverVersion, c::CUDA_VERSION as c_int) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});

/// The error queries dispatch runtime callbacks as every runtime call does: cupti_runtime_cbid.h gives them ids
/// (cudaGetLastError 10, cudaPeekAtLastError 11, cudaGetErrorString 12, cudaGetErrorName 209), and an H100 trace
/// of GPT-2's `generate` recorded through the runtime domain (issue 26) held 134,173 cudaGetLastError and 6,192
/// cudaGetErrorString calls. Unlike other calls they neither initialise CUDA nor set the last error.
fn error_query(cbid: u32, name: &'static CStr, body: impl FnOnce() -> CudaError) -> CudaError {
    crate::cupti::api_call(c::CUPTI_CB_DOMAIN_RUNTIME_API, cbid, name, &(), std::ptr::null(), body)
}

/// # Safety
/// Called from C like `cudaGetLastError`.
#[no_mangle]
pub unsafe extern "C" fn cudaGetLastError() -> CudaError {
    guard(c::cudaErrorUnknown, || {
        error_query(c::CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, c"cudaGetLastError", || {
            LAST_ERROR.with(|l| l.replace(c::cudaSuccess))
        })
    })
}

/// # Safety
/// Called from C like `cudaPeekAtLastError`.
#[no_mangle]
pub unsafe extern "C" fn cudaPeekAtLastError() -> CudaError {
    guard(c::cudaErrorUnknown, || {
        error_query(c::CUPTI_RUNTIME_TRACE_CBID_cudaPeekAtLastError_v3020, c"cudaPeekAtLastError", || {
            LAST_ERROR.with(|l| l.get())
        })
    })
}

fn error_string(error: CudaError) -> &'static CStr {
    match error {
        c::cudaSuccess => c"no error",
        c::cudaErrorInvalidValue => c"invalid argument",
        c::cudaErrorMemoryAllocation => c"out of memory",
        c::cudaErrorInitializationError => c"initialization error",
        c::cudaErrorNoDevice => c"no CUDA-capable device is detected",
        c::cudaErrorInvalidDevice => c"invalid device ordinal",
        c::cudaErrorInvalidDevicePointer => c"invalid device pointer",
        c::cudaErrorInvalidResourceHandle => c"invalid resource handle",
        c::cudaErrorNotReady => c"device not ready",
        c::cudaErrorNotSupported => c"operation not supported (by cudasim)",
        _ => c"unknown error",
    }
}

/// An error query that returns a static string: its callbacks, then the string.
fn string_query<P>(cbid: u32, name: &'static CStr, params: &P, text: &'static CStr) -> *const c_char {
    guard(c"unknown error".as_ptr(), || {
        crate::cupti::api_call(c::CUPTI_CB_DOMAIN_RUNTIME_API, cbid, name, params, std::ptr::null(), || 0);
        text.as_ptr()
    })
}

/// # Safety
/// Called from C like `cudaGetErrorString`; returns a static string.
#[no_mangle]
pub unsafe extern "C" fn cudaGetErrorString(error: CudaError) -> *const c_char {
    let params = c::cudaGetErrorString_v3020_params { error };
    let cbid = c::CUPTI_RUNTIME_TRACE_CBID_cudaGetErrorString_v3020;
    string_query(cbid, c"cudaGetErrorString", &params, error_string(error))
}

/// # Safety
/// Called from C like `cudaGetErrorName`; returns a static string.
#[no_mangle]
pub unsafe extern "C" fn cudaGetErrorName(error: CudaError) -> *const c_char {
    let params = c::cudaGetErrorName_v6050_params { error };
    let text = if error == c::cudaSuccess { c"cudaSuccess" } else { c"cudaError" };
    string_query(c::CUPTI_RUNTIME_TRACE_CBID_cudaGetErrorName_v6050, c"cudaGetErrorName", &params, text)
}

/// Registration hooks that nvcc-generated host code calls; a C test may call `__cudaRegisterFunction` itself to
/// give a kernel its device name.
#[no_mangle]
pub extern "C" fn __cudaRegisterFatBinary(_fat_cubin: *mut c_void) -> *mut *mut c_void {
    static HANDLE: usize = 0;
    &HANDLE as *const usize as *mut *mut c_void
}

#[no_mangle]
pub extern "C" fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

#[no_mangle]
pub extern "C" fn __cudaUnregisterFatBinary(_handle: *mut *mut c_void) {}

/// # Safety
/// Called from C: `device_name` must be NUL-terminated when non-null.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn __cudaRegisterFunction(
    _handle: *mut *mut c_void,
    host_fun: *const c_char,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: c_int,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _block_dim: *mut c_void,
    _grid_dim: *mut c_void,
    _w_size: *mut c_int,
) {
    guard((), || {
        if host_fun.is_null() || device_name.is_null() {
            return;
        }
        // SAFETY: non-null, NUL-terminated by the contract above.
        let name = unsafe { CStr::from_ptr(device_name) }.to_owned();
        context::name_kernel(host_fun as usize, name);
    })
}

/// **cudasim only** (a test double's table, standing in for the parameter layout a real driver reads from the
/// cubin's kernel metadata): kernel `func` takes `count` parameters of `sizes[i]` bytes (at most 8 each). A
/// registered kernel is launched with exactly that many arguments, so its argument array needs no NULL entry.
/// Returns 0, or 1 for a bad table.
///
/// # Safety
/// `sizes` must point at `count` values.
#[no_mangle]
pub unsafe extern "C" fn cudasimRegisterKernelParams(func: *const c_void, count: c_int, sizes: *const usize) -> c_int {
    guard(1, || {
        if func.is_null() || !(0..=64).contains(&count) || (count > 0 && sizes.is_null()) {
            return 1;
        }
        let sizes = if count == 0 {
            Vec::new()
        } else {
            // SAFETY: `count` values at `sizes`, by the contract above.
            unsafe { std::slice::from_raw_parts(sizes, count as usize) }.to_vec()
        };
        if sizes.iter().any(|&s| s == 0 || s > 8) {
            return 1;
        }
        context::register_kernel_params(func as usize, sizes);
        0
    })
}

/// Runtime entry points the simulator does not implement: they fail cleanly with cudaErrorNotSupported. Declared
/// without parameters, which is ABI-safe on x86-64 SysV for any caller (the caller owns its arguments).
macro_rules! unsupported {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> CudaError {
            set_error(c::cudaErrorNotSupported)
        }
    )*};
}

unsupported!(cudaLaunchCooperativeKernel);
