//! What `cuflight doctor` asks of the CUDA driver, through the driver API only (`libcuda.so.1` ships with every
//! driver; a program's runtime and CUPTI may live anywhere): where the library is, the CUDA release it supports,
//! whether it initialises, its devices, and one small piece of GPU work (a memset on the primary context) for
//! CUPTI to record. Run in a child process of its own: a broken driver may hang or crash, and the doctor must
//! still say so.
//!
//! Entry points and their exported names are cuda.h's (CUDA 12 and 13): `cuMemAlloc` is `cuMemAlloc_v2`,
//! `cuMemsetD8` is `cuMemsetD8_v2`, `cuMemFree` is `cuMemFree_v2` and `cuDevicePrimaryCtxRelease` is
//! `cuDevicePrimaryCtxRelease_v2` since CUDA 11.

use crate::cuda13 as c;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// A driver call that did not return CUDA_SUCCESS: which, its code, and the driver's name for the code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    pub call: &'static str,
    pub code: u32,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbedDevice {
    pub name: String,
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
}

/// What the driver answered. Each later step runs only when the ones before it succeeded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverProbe {
    /// `dlopen("libcuda.so.1")`'s error when the library is missing.
    pub load_error: Option<String>,
    /// The file the loader mapped.
    pub library: Option<String>,
    /// `cuDriverGetVersion`: 1000 × major + 10 × minor (12080 is CUDA 12.8).
    pub driver_version: Option<i32>,
    /// The first call that failed, if any.
    pub failed: Option<Failed>,
    pub devices: Vec<ProbedDevice>,
    /// The memset on device 0 completed (its CUPTI record is the recording's to find).
    pub work_done: bool,
    /// The library is cudasim, cuflight's CPU stand-in for the driver (it exports `cudasim_*` entry points).
    pub simulator: bool,
}

type InitFn = unsafe extern "C" fn(c_uint) -> c::CUresult;
type IntOutFn = unsafe extern "C" fn(*mut c_int) -> c::CUresult;
type NameFn = unsafe extern "C" fn(c::CUresult, *mut *const c_char) -> c::CUresult;
type DeviceNameFn = unsafe extern "C" fn(*mut c_char, c_int, c::CUdevice) -> c::CUresult;
type AttributeFn = unsafe extern "C" fn(*mut c_int, c::CUdevice_attribute, c::CUdevice) -> c::CUresult;
type RetainFn = unsafe extern "C" fn(*mut c::CUcontext, c::CUdevice) -> c::CUresult;
type ReleaseFn = unsafe extern "C" fn(c::CUdevice) -> c::CUresult;
type SetCurrentFn = unsafe extern "C" fn(c::CUcontext) -> c::CUresult;
type AllocFn = unsafe extern "C" fn(*mut c::CUdeviceptr, usize) -> c::CUresult;
type MemsetFn = unsafe extern "C" fn(c::CUdeviceptr, u8, usize) -> c::CUresult;
type FreeFn = unsafe extern "C" fn(c::CUdeviceptr) -> c::CUresult;
type SyncFn = unsafe extern "C" fn() -> c::CUresult;

/// The opened driver library.
struct Driver {
    handle: *mut c_void,
}

impl Driver {
    /// The exported function `name` (NUL-terminated) as `F`, or None when this driver lacks it.
    ///
    /// # Safety
    /// `F` must be the C signature cuda.h gives `name`.
    unsafe fn get<F: Copy>(&self, name: &CStr) -> Option<F> {
        // SAFETY: a live dlopen handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.handle, name.as_ptr()) };
        if p.is_null() {
            return None;
        }
        debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: the caller names the symbol's C signature; function pointers and data pointers share a size here.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    fn error_name(&self, code: c::CUresult) -> String {
        // SAFETY: cuGetErrorName's signature in cuda.h.
        let Some(f) = (unsafe { self.get::<NameFn>(c"cuGetErrorName") }) else {
            return format!("CUresult {code}");
        };
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: a valid out-pointer; the driver writes a static string or leaves it null.
        let r = unsafe { f(code, &mut s) };
        if r != c::CUDA_SUCCESS || s.is_null() {
            return format!("CUresult {code}");
        }
        // SAFETY: the driver returned a NUL-terminated static string.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    fn check(&self, call: &'static str, r: c::CUresult) -> Result<(), Failed> {
        match r {
            c::CUDA_SUCCESS => Ok(()),
            code => Err(Failed { call, code, name: self.error_name(code) }),
        }
    }

    fn missing(call: &'static str) -> Failed {
        Failed { call, code: 0, name: "not exported by this driver".into() }
    }
}

/// Asks the driver everything [`DriverProbe`] holds, its memsets spread over `work` at least. Loads `libcuda.so.1`
/// into this process and initialises it: call it from a process made for it.
pub fn probe_driver(work: std::time::Duration) -> DriverProbe {
    let mut out = DriverProbe::default();
    // SAFETY: dlopen with a NUL-terminated name; RTLD_NOW so a broken install fails here.
    let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns the last error as a NUL-terminated string, or null.
        let e = unsafe { libc::dlerror() };
        out.load_error = Some(if e.is_null() {
            "libcuda.so.1 not found".into()
        } else {
            // SAFETY: non-null, NUL-terminated, valid until the next dl call.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        });
        return out;
    }
    let driver = Driver { handle };
    // SAFETY: a live handle and a NUL-terminated name; only whether the symbol exists is read.
    out.simulator = !unsafe { libc::dlsym(handle, c"cudasim_machine_monotonic_ns".as_ptr()) }.is_null();
    out.library = crate::loader::mapped_library("libcuda.so").map(|p| p.display().to_string());
    if let Err(f) = steps(&driver, &mut out, work) {
        out.failed = Some(f);
    }
    out
}

fn steps(d: &Driver, out: &mut DriverProbe, work: std::time::Duration) -> Result<(), Failed> {
    // SAFETY: cuda.h's signature for the name.
    let version = unsafe { d.get::<IntOutFn>(c"cuDriverGetVersion") }.ok_or(Driver::missing("cuDriverGetVersion"))?;
    let mut v = 0;
    // SAFETY: a valid out-pointer.
    d.check("cuDriverGetVersion", unsafe { version(&mut v) })?;
    out.driver_version = Some(v);
    // SAFETY: cuda.h's signature for the name.
    let init = unsafe { d.get::<InitFn>(c"cuInit") }.ok_or(Driver::missing("cuInit"))?;
    // SAFETY: flags must be 0 (cuda.h).
    d.check("cuInit", unsafe { init(0) })?;
    // SAFETY: cuda.h's signature for the name.
    let count = unsafe { d.get::<IntOutFn>(c"cuDeviceGetCount") }.ok_or(Driver::missing("cuDeviceGetCount"))?;
    let mut n = 0;
    // SAFETY: a valid out-pointer.
    d.check("cuDeviceGetCount", unsafe { count(&mut n) })?;
    for dev in 0..n.clamp(0, 64) {
        out.devices.push(device(d, dev)?);
    }
    if n > 0 {
        out.work_done = memset_on_device_0(d, work)?;
    }
    Ok(())
}

fn device(d: &Driver, dev: c::CUdevice) -> Result<ProbedDevice, Failed> {
    // SAFETY: cuda.h's signature for the name.
    let name_fn = unsafe { d.get::<DeviceNameFn>(c"cuDeviceGetName") }.ok_or(Driver::missing("cuDeviceGetName"))?;
    // SAFETY: cuda.h's signature for the name.
    let attr =
        unsafe { d.get::<AttributeFn>(c"cuDeviceGetAttribute") }.ok_or(Driver::missing("cuDeviceGetAttribute"))?;
    let mut buf = [0 as c_char; 256];
    // SAFETY: the buffer holds `len` bytes.
    d.check("cuDeviceGetName", unsafe { name_fn(buf.as_mut_ptr(), buf.len() as c_int - 1, dev) })?;
    // SAFETY: NUL-terminated: the driver writes at most len bytes and the last byte stays 0.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers.
    d.check("cuDeviceGetAttribute", unsafe { attr(&mut major, c::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) })?;
    // SAFETY: a valid out-pointer.
    d.check("cuDeviceGetAttribute", unsafe { attr(&mut minor, c::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) })?;
    Ok(ProbedDevice { name, capability: (major, minor) })
}

/// 1 MiB memsets on device 0's primary context, each synchronised, twenty at least and until `work` passed: GPU
/// work for CUPTI to record, and for a device-counter sampler to see.
fn memset_on_device_0(d: &Driver, work: std::time::Duration) -> Result<bool, Failed> {
    // SAFETY: cuda.h's signature for the name.
    let retain =
        unsafe { d.get::<RetainFn>(c"cuDevicePrimaryCtxRetain") }.ok_or(Driver::missing("cuDevicePrimaryCtxRetain"))?;
    // SAFETY: cuda.h's signature for the name.
    let release = unsafe { d.get::<ReleaseFn>(c"cuDevicePrimaryCtxRelease_v2") }
        .ok_or(Driver::missing("cuDevicePrimaryCtxRelease_v2"))?;
    // SAFETY: cuda.h's signature for the name.
    let set_current = unsafe { d.get::<SetCurrentFn>(c"cuCtxSetCurrent") }.ok_or(Driver::missing("cuCtxSetCurrent"))?;
    // SAFETY: cuda.h's signature for the name.
    let alloc = unsafe { d.get::<AllocFn>(c"cuMemAlloc_v2") }.ok_or(Driver::missing("cuMemAlloc_v2"))?;
    // SAFETY: cuda.h's signature for the name.
    let memset = unsafe { d.get::<MemsetFn>(c"cuMemsetD8_v2") }.ok_or(Driver::missing("cuMemsetD8_v2"))?;
    // SAFETY: cuda.h's signature for the name.
    let free = unsafe { d.get::<FreeFn>(c"cuMemFree_v2") }.ok_or(Driver::missing("cuMemFree_v2"))?;
    // SAFETY: cuda.h's signature for the name.
    let sync = unsafe { d.get::<SyncFn>(c"cuCtxSynchronize") }.ok_or(Driver::missing("cuCtxSynchronize"))?;
    let mut ctx: c::CUcontext = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; device 0 exists (the count was positive).
    d.check("cuDevicePrimaryCtxRetain", unsafe { retain(&mut ctx, 0) })?;
    let memsets = || -> Result<(), Failed> {
        // SAFETY: a context the driver just returned.
        d.check("cuCtxSetCurrent", unsafe { set_current(ctx) })?;
        let mut ptr: c::CUdeviceptr = 0;
        const BYTES: usize = 1 << 20;
        const ROUNDS: usize = 20;
        // SAFETY: a valid out-pointer.
        d.check("cuMemAlloc", unsafe { alloc(&mut ptr, BYTES) })?;
        // Spread out (a ms apart), so that a device-counter sampler started with the recording sees the GPU busy.
        let began = std::time::Instant::now();
        let mut synced = Ok(());
        for round in 0.. {
            if round >= ROUNDS && began.elapsed() >= work {
                break;
            }
            // SAFETY: `ptr` holds BYTES bytes of device memory.
            let set = d.check("cuMemsetD8", unsafe { memset(ptr, 0, BYTES) });
            // SAFETY: no arguments; the context is current.
            synced = set.and_then(|()| d.check("cuCtxSynchronize", unsafe { sync() }));
            if synced.is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: `ptr` came from cuMemAlloc above and is freed once.
        let freed = d.check("cuMemFree", unsafe { free(ptr) });
        synced.and(freed)
    };
    let done = memsets();
    // SAFETY: releases the retain above; the primary context goes when its last user releases it.
    let released = d.check("cuDevicePrimaryCtxRelease", unsafe { release(0) });
    done.and(released).map(|()| true)
}
