//! The CUPTI API callback: every runtime call, and direct (non-nested) driver calls of interest, become one
//! [`EventKind::Api`] event at exit; allocation and free calls also become Alloc/Free events, with the sizes and
//! addresses read from the real `*_params` structs.

use crate::{clock, cupti, state, thread_rings};
use cuflight_format::calls::PythonStacks;
use cuflight_format::event::MemKind;
use cuflight_format::view::{ApiCall, MemOp};
use cuflight_format::{EventKind, RawEvent};
use cupti_sys::cuda13 as c;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU32, Ordering};

/// Counts recording windows (CUPTI set up anew), so per-thread call depths from an earlier window are dropped.
static WINDOW: AtomicU32 = AtomicU32::new(1);

/// A new recording window begins (`setup::start`).
pub fn new_window() {
    WINDOW.fetch_add(1, Ordering::Relaxed);
}

/// This thread's runtime call depth, reset if it was counted in an earlier window.
#[inline]
fn current_depth(t: &thread_rings::ThreadState) -> u32 {
    let window = WINDOW.load(Ordering::Relaxed);
    if t.depth_window.get() != window {
        t.depth_window.set(window);
        t.runtime_depth.set(0);
    }
    t.runtime_depth.get()
}

/// The callback to subscribe with. `CUFLIGHT_NOOP_CALLBACK=1` (a measurement aid, for `tests/gpu/overhead.cu`'s
/// comparison on a GPU) subscribes one that returns at once: the program then pays cuflight's CUPTI configuration
/// (its callback ids, activity kinds, timestamp callback and thread ids) without the agent's own work, and the
/// trace holds device records only.
pub fn subscriber_callback() -> c::CUpti_CallbackFunc {
    if std::env::var_os("CUFLIGHT_NOOP_CALLBACK").is_some_and(|v| v == "1") {
        Some(noop_callback)
    } else {
        Some(api_callback)
    }
}

extern "C" fn noop_callback(_user: *mut c_void, _domain: c::CUpti_CallbackDomain, _cbid: u32, _cbdata: *const c_void) {}

/// # Safety
/// Called by CUPTI with `cbdata` pointing to a `CUpti_CallbackData` for the API domains we enabled.
pub unsafe extern "C" fn api_callback(
    _user: *mut c_void,
    domain: c::CUpti_CallbackDomain,
    cbid: u32,
    cbdata: *const c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        if cbdata.is_null() || crate::teardown::on_callback(domain, cbdata) {
            return;
        }
        if !state::enabled() {
            if state::inherited_cupti() {
                // Callbacks inherited from a profiled parent across fork: say once why this child is silent.
                state::disable(
                    "fork child of a process that was already profiling CUDA (its CUPTI state belongs to the parent)",
                );
            }
            return;
        }
        // SAFETY: CUPTI passes a CUpti_CallbackData for the runtime and driver domains.
        let data = unsafe { &*(cbdata as *const c::CUpti_CallbackData) };
        handle(domain, cbid, data);
    });
}

fn handle(domain: c::CUpti_CallbackDomain, cbid: u32, data: &c::CUpti_CallbackData) {
    let runtime = domain == c::CUPTI_CB_DOMAIN_RUNTIME_API;
    let flight = crate::flight::armed();
    if !runtime && nested(false) {
        // A driver call the runtime makes on our behalf (every runtime launch makes one): not recorded, so its
        // callbacks return before reading the clock. A flight recorder watches only its result for sticky errors
        // (the runtime call returns the same code, but may have entered before the recorder was armed).
        if flight && data.callbackSite == c::CUPTI_API_EXIT && !data.functionReturnValue.is_null() {
            // SAFETY: at exit CUPTI points this at the call's CUresult (a 32-bit enum).
            crate::flight::cuda_result(unsafe { *(data.functionReturnValue as *const u32) });
        }
        return;
    }
    if data.callbackSite == c::CUPTI_API_ENTER {
        if runtime && cbid == c::CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020 {
            // The context and its pending records die with the reset: collect the finished ones first. Not
            // forced: a forced flush hands over unfinished records (NVIDIA's injection sample flushes with 0).
            cupti::flush(false);
        }
        let start = clock::monotonic_ns();
        if !data.correlationData.is_null() {
            // SAFETY: CUPTI gives each call a u64 slot shared by its enter and exit callbacks.
            unsafe { *data.correlationData = start };
        }
        let python =
            crate::trace_choice::trace_mask() & cuflight_format::tracing::PYTHON != 0 && crate::pystack::available();
        // One thread-local access (a __tls_get_addr call in a dlopen'ed library) for the depth and the stack.
        let outermost = thread_rings::with_thread(|t| {
            let depth = current_depth(t) + runtime as u32;
            t.runtime_depth.set(depth);
            let outermost = depth <= runtime as u32;
            // The Python stack is read on the way in: a synchronising call then reads it while the GPU still
            // works through its queue, where on the way out every microsecond would delay the next launch.
            if python && outermost && python_stack_wanted(runtime, cbid, &t.py) {
                crate::pystack::record(&t.py, data.correlationId, start, &|ev| t.push(ev));
            }
            outermost
        });
        if flight && crate::call_roles::waits_for_gpu(runtime, cbid) && outermost.unwrap_or(true) {
            crate::flight::sync_enter();
        }
        return;
    }
    let end = clock::monotonic_ns();
    if flight {
        watch_exit(runtime, cbid, data);
    }
    if crate::call_roles::touches_graphs(runtime, cbid) {
        crate::teardown::saw_graphs();
    }
    // One thread-local access for the depth bookkeeping and the pushes; without TLS (exit) the slow path.
    let done = thread_rings::with_thread(|t| {
        let depth = current_depth(t);
        if runtime {
            t.runtime_depth.set(depth.saturating_sub(1));
        } else if depth > 0 {
            return; // a driver call made by the runtime on our behalf
        }
        on_exit(runtime, cbid, data, end, |ev| t.push(ev));
    });
    if done.is_none() {
        on_exit(runtime, cbid, data, end, thread_rings::push);
    }
    if runtime && cbid == c::CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000 {
        cupti::flush(false);
    }
}

/// A call made inside another runtime call on this thread (a driver call the runtime makes on our behalf). At
/// enter and at exit alike, a runtime call's own depth is counted.
fn nested(runtime: bool) -> bool {
    thread_rings::with_thread(|t| current_depth(t) > runtime as u32).unwrap_or(false)
}

/// The flight recorder's watch on a call's exit (before the runtime depth is unwound): sticky errors, and the end
/// of a wait for the GPU.
#[cold]
fn watch_exit(runtime: bool, cbid: u32, data: &c::CUpti_CallbackData) {
    if crate::call_roles::waits_for_gpu(runtime, cbid) && !nested(runtime) {
        crate::flight::sync_exit();
    }
    if !data.functionReturnValue.is_null() {
        // SAFETY: at exit CUPTI points this at the call's cudaError_t / CUresult (both 32-bit enums).
        crate::flight::cuda_result(unsafe { *(data.functionReturnValue as *const u32) });
    }
}

fn on_exit(runtime: bool, cbid: u32, data: &c::CUpti_CallbackData, end: u64, push: impl Fn(RawEvent)) {
    let start = if data.correlationData.is_null() {
        end
    } else {
        // SAFETY: as above; written at enter.
        unsafe { *data.correlationData }
    };
    let ret = if data.functionReturnValue.is_null() {
        0
    } else {
        // SAFETY: at exit CUPTI points this at the call's cudaError_t / CUresult (both 32-bit enums).
        unsafe { *(data.functionReturnValue as *const u32) }
    };
    if start == 0 {
        // The call entered before the agent was armed (CUPTI hands the exit callback an untouched, zeroed slot:
        // on an H100 such calls came out starting at boot, lasting the machine's uptime). Its start is unknown:
        // left out and counted, never written with a made-up start.
        unseen_begin();
    } else {
        let mut ev = RawEvent::api_call(0, start, end, ApiCall { runtime, cbid, result: ret as u64, external: 0 });
        ev.correlation = data.correlationId;
        crate::sampler::saw_call(data.correlationId);
        ev.name = api_name(runtime, cbid, data);
        push(ev);
    }
    // An allocation or free is a point at the call's exit, which was seen: it stays.
    if ret == 0 && !data.functionParams.is_null() {
        if let Some(mem) = memory_event(runtime, cbid, data.functionParams, end) {
            push(mem);
        }
    }
}

fn python_stack_wanted(runtime: bool, cbid: u32, py: &crate::pystack::ThreadPy) -> bool {
    match crate::call_roles::python_stacks(runtime, cbid) {
        PythonStacks::Every => true,
        PythonStacks::Sampled => {
            // A countdown rather than a count and a remainder: a division on every launch costs more than the
            // rest of this test. The first launch of a thread is sampled, then every `every`th.
            let every = crate::pystack::launch_every();
            let left = py.launches.get();
            let sampled = left <= 1 && every != 0;
            py.launches.set(if left <= 1 { every } else { left - 1 });
            sampled
        }
        PythonStacks::None => false,
    }
}

#[cold]
fn unseen_begin() {
    if let Some(agent) = state::existing_agent() {
        agent.seg.header().unseen_begin.fetch_add(1, Ordering::Relaxed);
    }
}

fn api_name(runtime: bool, cbid: u32, data: &c::CUpti_CallbackData) -> u32 {
    crate::name_cache::call_name(runtime, cbid, || {
        // SAFETY: functionName is null or a static NUL-terminated string per the CUPTI documentation.
        (!data.functionName.is_null()).then(|| unsafe { CStr::from_ptr(data.functionName) }.to_bytes())
    })
}

/// Reads `*out` where `out` is an out-parameter the call just filled (`void **`, `CUdeviceptr *`).
fn read_out(p: *const c_void) -> u64 {
    if p.is_null() {
        return 0;
    }
    // SAFETY: the call succeeded, so its out-parameter points at a written pointer-sized value.
    unsafe { *(p as *const u64) }
}

fn memory_event(runtime: bool, cbid: u32, params: *const c_void, ts: u64) -> Option<RawEvent> {
    macro_rules! p {
        ($ty:ident) => {
            // SAFETY: CUPTI's functionParams for this cbid is this params struct (generated_*_meta.h).
            unsafe { &*(params as *const c::$ty) }
        };
    }
    use MemKind::*;
    let (kind, mem, addr, bytes) = if runtime {
        match cbid {
            c::CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020 => {
                let p = p!(cudaMalloc_v3020_params);
                (EventKind::Alloc, Device, read_out(p.devPtr as _), p.size as u64)
            }
            c::CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020 => {
                let p = p!(cudaMallocHost_v3020_params);
                (EventKind::Alloc, PinnedHost, read_out(p.ptr as _), p.size as u64)
            }
            c::CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020 => {
                let p = p!(cudaHostAlloc_v3020_params);
                (EventKind::Alloc, PinnedHost, read_out(p.pHost as _), p.size as u64)
            }
            c::CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000 => {
                let p = p!(cudaMallocManaged_v6000_params);
                (EventKind::Alloc, Managed, read_out(p.devPtr as _), p.size as u64)
            }
            c::CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020 => {
                let p = p!(cudaMallocAsync_v11020_params);
                (EventKind::Alloc, DeviceAsync, read_out(p.devPtr as _), p.size as u64)
            }
            c::CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020 => {
                (EventKind::Free, Device, p!(cudaFree_v3020_params).devPtr as u64, 0)
            }
            c::CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020 => {
                (EventKind::Free, PinnedHost, p!(cudaFreeHost_v3020_params).ptr as u64, 0)
            }
            c::CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020 => {
                (EventKind::Free, DeviceAsync, p!(cudaFreeAsync_v11020_params).devPtr as u64, 0)
            }
            _ => return None,
        }
    } else {
        match cbid {
            c::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2 => {
                let p = p!(cuMemAlloc_v2_params);
                (EventKind::Alloc, Device, read_out(p.dptr as _), p.bytesize as u64)
            }
            c::CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2 => {
                let p = p!(cuMemAllocHost_v2_params);
                (EventKind::Alloc, PinnedHost, read_out(p.pp as _), p.bytesize as u64)
            }
            c::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged => {
                let p = p!(cuMemAllocManaged_params);
                (EventKind::Alloc, Managed, read_out(p.dptr as _), p.bytesize as u64)
            }
            c::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync => {
                let p = p!(cuMemAllocAsync_params);
                (EventKind::Alloc, DeviceAsync, read_out(p.dptr as _), p.bytesize as u64)
            }
            c::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2 => (EventKind::Free, Device, p!(cuMemFree_v2_params).dptr, 0),
            c::CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost => {
                (EventKind::Free, PinnedHost, p!(cuMemFreeHost_params).p as u64, 0)
            }
            c::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync => {
                (EventKind::Free, DeviceAsync, p!(cuMemFreeAsync_params).dptr, 0)
            }
            _ => return None,
        }
    };
    if addr == 0 {
        return None; // cudaFree(NULL) and friends free nothing
    }
    let mut ev = RawEvent::new(kind, 0, ts, ts);
    ev.set_mem_op(kind, MemOp { memory: Some(mem), address: addr, bytes });
    Some(ev)
}
