//! Device facts (name, memory, compute capability, SM count) as [`EventKind::Device`] events, read through the
//! driver API once CUDA is up (from the flush thread, never from inside `InitializeInjection`).

use crate::{state, thread_rings};
use cuflight_format::view::DeviceInfo;
use cuflight_format::{EventKind, RawEvent};
use std::ffi::{c_char, c_int, c_void, CStr};

type GetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type TotalMem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
type GetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

// CUdevice_attribute values (cuda.h).
const ATTR_SM_COUNT: c_int = 16;
const ATTR_CC_MAJOR: c_int = 75;
const ATTR_CC_MINOR: c_int = 76;

/// The driver this process already loaded. libcudart opens libcuda.so.1 with RTLD_LOCAL in most programs, so
/// its symbols are not in the global scope: ask the loader for the library itself (RTLD_NOLOAD never loads one).
fn driver() -> *mut c_void {
    // SAFETY: dlopen with a NUL-terminated name; RTLD_NOLOAD only returns an already loaded library (and takes a
    // reference, which is never dropped: the driver stays loaded for the process's life anyway).
    let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        libc::RTLD_DEFAULT
    } else {
        h
    }
}

fn sym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: dlsym on a live handle (or the global scope) with a NUL-terminated name.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

pub fn record() {
    let h = driver();
    let (count, name, mem, attr) = (
        sym(h, c"cuDeviceGetCount"),
        sym(h, c"cuDeviceGetName"),
        sym(h, c"cuDeviceTotalMem_v2"),
        sym(h, c"cuDeviceGetAttribute"),
    );
    if [count, name, mem, attr].iter().any(|p| p.is_null()) {
        return;
    }
    // Each is the driver's exported function with the cuda.h signature above.
    // SAFETY: cuDeviceGetCount.
    let count = unsafe { std::mem::transmute::<*mut c_void, GetCount>(count) };
    // SAFETY: cuDeviceGetName.
    let name = unsafe { std::mem::transmute::<*mut c_void, GetName>(name) };
    // SAFETY: cuDeviceTotalMem_v2.
    let mem = unsafe { std::mem::transmute::<*mut c_void, TotalMem>(mem) };
    // SAFETY: cuDeviceGetAttribute.
    let attr = unsafe { std::mem::transmute::<*mut c_void, GetAttribute>(attr) };
    let mut n = 0;
    // SAFETY: valid out-pointer.
    if unsafe { count(&mut n) } != 0 {
        return;
    }
    let driver_version = driver_version();
    for dev in 0..n.min(64) {
        let mut buf = [0 as c_char; 256];
        let (mut bytes, mut sms, mut major, mut minor) = (0usize, 0, 0, 0);
        // SAFETY: a valid buffer of the given length.
        unsafe { name(buf.as_mut_ptr(), buf.len() as c_int, dev) };
        // SAFETY: a valid out-pointer.
        unsafe { mem(&mut bytes, dev) };
        // SAFETY: valid out-pointers, for the attributes cuda.h numbers so.
        unsafe { attr(&mut sms, ATTR_SM_COUNT, dev) };
        // SAFETY: as above.
        unsafe { attr(&mut major, ATTR_CC_MAJOR, dev) };
        // SAFETY: as above.
        unsafe { attr(&mut minor, ATTR_CC_MINOR, dev) };
        buf[255] = 0;
        let name_bytes = buf.map(|c| c as u8);
        let label = CStr::from_bytes_until_nul(&name_bytes).unwrap_or_default();
        let mut ev = RawEvent::new(EventKind::Device, 0, 0, 0);
        ev.device = dev as u32;
        ev.name = state::intern(label.to_bytes());
        ev.set_device(DeviceInfo {
            memory_bytes: bytes as u64,
            compute_capability: (major as u32, minor as u32),
            multiprocessors: sms as u64,
            driver_version,
        });
        thread_rings::push(ev);
    }
}

/// How many devices the driver sees, once it is initialised (None before, or without a driver).
pub fn count() -> Option<u32> {
    let count = sym(driver(), c"cuDeviceGetCount");
    if count.is_null() {
        return None;
    }
    // SAFETY: the driver's cuDeviceGetCount, with the cuda.h signature of `GetCount`.
    let count = unsafe { std::mem::transmute::<*mut c_void, GetCount>(count) };
    let mut n = 0;
    // SAFETY: valid out-pointer.
    (unsafe { count(&mut n) } == 0).then_some(n.max(0) as u32)
}

/// Calls `f`, a `cudaRuntimeGetVersion` or `cuDriverGetVersion` found with dlsym (null: not loaded): the version,
/// or None when there is no such function or it fails.
fn get_version(f: *mut c_void) -> Option<u32> {
    type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
    if f.is_null() {
        return None;
    }
    // SAFETY: both functions have the signature above (cuda_runtime_api.h, cuda.h) and need no initialisation.
    let f = unsafe { std::mem::transmute::<*mut c_void, GetVersion>(f) };
    let mut v = 0;
    // SAFETY: valid out-pointer.
    (unsafe { f(&mut v) } == 0).then_some(v.max(0) as u32)
}

/// Makes one trivial CUDA call on this thread, so that its API callbacks run here: `cudaRuntimeGetVersion` of the
/// runtime the program loaded (a local read, the call Kineto makes to reach an exit callsite for its teardown,
/// pytorch/kineto#1554), else the driver's `cuDriverGetVersion` (a runtime linked statically exports nothing).
pub fn trivial_call() {
    let runtime = sym(libc::RTLD_DEFAULT, c"cudaRuntimeGetVersion");
    let _ = get_version(if runtime.is_null() { sym(driver(), c"cuDriverGetVersion") } else { runtime });
}

/// The driver's version (`cuDriverGetVersion`, e.g. 13000), 0 when no driver is loaded.
pub fn driver_version() -> u32 {
    get_version(sym(driver(), c"cuDriverGetVersion")).unwrap_or(0)
}
