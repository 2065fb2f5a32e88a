//! What the driver knows of the calling thread and the loaded code: the current device (a thread's current
//! context, in the driver's terms; `cudaSetDevice` sets it) and, per kernel function, its name and parameter
//! layout (from the module's metadata in real CUDA; registered or looked up by symbol here). Below both the
//! runtime and the driver, which each read it.

use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};

thread_local! {
    static CURRENT_DEVICE: Cell<u32> = const { Cell::new(0) };
}

static KERNEL_NAMES: Lazy<Mutex<HashMap<usize, &'static CStr>>> = Lazy::new(|| Mutex::new(HashMap::new()));
/// Parameter sizes of registered kernels (see `cudasimRegisterKernelParams`).
static KERNEL_PARAMS: Lazy<Mutex<HashMap<usize, Vec<usize>>>> = Lazy::new(|| Mutex::new(HashMap::new()));

pub(crate) fn current_device() -> u32 {
    CURRENT_DEVICE.with(|d| d.get())
}

pub(crate) fn set_current_device(device: u32) {
    CURRENT_DEVICE.with(|d| d.set(device));
}

/// Kernel `f` is called `name` (its device-side name, as `__cudaRegisterFunction` gives it).
pub(crate) fn name_kernel(f: usize, name: CString) {
    KERNEL_NAMES.lock().insert(f, Box::leak(name.into_boxed_c_str()));
}

/// The registered parameter sizes of kernel `f`, if any.
pub(crate) fn kernel_params(f: usize) -> Option<Vec<usize>> {
    KERNEL_PARAMS.lock().get(&f).cloned()
}

pub(crate) fn register_kernel_params(f: usize, sizes: Vec<usize>) {
    KERNEL_PARAMS.lock().insert(f, sizes);
}

/// The kernel's name: from `__cudaRegisterFunction`, else its symbol (`dladdr`), else its address.
pub(crate) fn kernel_name(f: usize) -> &'static CStr {
    let mut names = KERNEL_NAMES.lock();
    if let Some(n) = names.get(&f) {
        return n;
    }
    // SAFETY: dladdr only inspects the address; Dl_info is plain data.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let found = unsafe { libc::dladdr(f as *const c_void, &mut info) } != 0 && !info.dli_sname.is_null();
    let name = if found {
        // SAFETY: dli_sname is a NUL-terminated symbol name from the loader.
        unsafe { CStr::from_ptr(info.dli_sname) }.to_owned()
    } else {
        CString::new(format!("kernel_{f:#x}")).unwrap_or_default()
    };
    let leaked: &'static CStr = Box::leak(name.into_boxed_c_str());
    names.insert(f, leaked);
    leaked
}
