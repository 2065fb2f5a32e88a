//! The hot path allocates nothing: after a thread's first event, CUPTI API callbacks (enter and exit, including
//! an allocation whose size is read from the real params struct), event pushes and interning of known strings
//! run under a counting allocator and must not allocate once.

use cuflight::callbacks::api_callback;
use cuflight::thread_rings;
use cuflight_format::{EventKind, RawEvent};
use cupti_sys::cuda13 as c;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.try_with(Cell::get).unwrap_or(false) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn call(cbid: u32, site: u32, params: *const c_void, ret: &mut u32, slot: &mut u64) {
    let data = c::CUpti_CallbackData {
        callbackSite: site,
        functionName: c"cudaMalloc".as_ptr(),
        functionParams: params,
        functionReturnValue: ret as *mut u32 as *mut c_void,
        symbolName: std::ptr::null(),
        context: std::ptr::null_mut(),
        contextUid: 1,
        correlationData: slot,
        correlationId: 7,
    };
    // SAFETY: a well-formed CUpti_CallbackData, as CUPTI passes it.
    unsafe {
        api_callback(std::ptr::null_mut(), c::CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &data as *const _ as *const c_void)
    };
}

#[test]
fn callbacks_pushes_and_interning_do_not_allocate() {
    // The agent hands its segment to the session's collector: this test plays the collector's listener.
    let session = format!("noalloc-{}", std::process::id());
    let listener = cuflight_format::channel::Listener::bind(&session).unwrap();
    std::env::set_var("CUFLIGHT_SESSION", &session);
    std::env::set_var("CUFLIGHT_RING_EVENTS", "65536");

    let mut dev: *mut c_void = 0x7f00_0000_1000 as *mut c_void;
    let params = c::cudaMalloc_v3020_params { devPtr: &mut dev, size: 4096 };
    let p = &params as *const _ as *const c_void;
    let (mut ret, mut slot) = (0u32, 0u64);
    // Warm-up: the thread's first event creates the segment, claims a ring and interns the names.
    call(c::CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, c::CUPTI_API_ENTER, p, &mut ret, &mut slot);
    call(c::CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, c::CUPTI_API_EXIT, p, &mut ret, &mut slot);
    let id = thread_rings::intern(b"ProfilerStep#1");
    assert_ne!(id, 0, "recording into a segment");

    COUNTING.with(|c| c.set(true));
    for _ in 0..10_000 {
        call(c::CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, c::CUPTI_API_ENTER, p, &mut ret, &mut slot);
        call(c::CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, c::CUPTI_API_EXIT, p, &mut ret, &mut slot);
        assert_eq!(thread_rings::intern(b"ProfilerStep#1"), id);
        thread_rings::push(RawEvent { name: id, ..RawEvent::new(EventKind::NvtxPush, 0, 1, 1) });
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0, "allocations on the hot path");
    assert!(listener.accept().is_some_and(|r| r.is_ok()), "the segment was handed over");
}
