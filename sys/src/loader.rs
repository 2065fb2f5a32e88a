//! Opens libcupti at run time and resolves the entry points cuflight uses.
//!
//! Search order (first that opens wins), so that the agent uses the CUPTI matching the process's CUDA:
//! 1. `$CUFLIGHT_CUPTI` (a path);
//! 2. a libcupti already mapped into the process (a framework loaded it);
//! 3. `$CUDA_HOME/extras/CUPTI/lib64/libcupti.so`;
//! 4. next to the process's libcudart: its own directory, then the PyPI wheel layouts `nvidia/cu13/lib` (CUDA 13)
//!    and `nvidia/cuda_cupti/lib` (CUDA 12 `nvidia-cuda-cupti-cu12`);
//! 5. `libcupti.so.13`, then `libcupti.so.12`, through the dynamic loader's own search.

use crate::cuda13 as c;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

/// Why libcupti could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("no libcupti found (tried {0}); set CUFLIGHT_CUPTI to its path")]
    NotFound(String),
    #[error("{path} lacks symbol {symbol}: not a CUPTI library, or too old")]
    MissingSymbol { path: String, symbol: &'static str },
}

/// Where to look for libcupti, in order (pure, for tests).
pub fn candidates(
    override_path: Option<&str>,
    mapped_cupti: Option<&Path>,
    cuda_home: Option<&str>,
    mapped_cudart: Option<&Path>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = override_path.filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    if let Some(p) = mapped_cupti {
        out.push(p.to_path_buf());
    }
    if let Some(home) = cuda_home.filter(|h| !h.is_empty()) {
        out.push(Path::new(home).join("extras/CUPTI/lib64/libcupti.so"));
    }
    if let Some(dir) = mapped_cudart.and_then(Path::parent) {
        out.push(dir.join("libcupti.so.13"));
        out.push(dir.join("libcupti.so.12"));
        // .../site-packages/nvidia/<component>/lib/libcudart.so.N
        if let Some(nvidia) = dir.parent().and_then(Path::parent) {
            out.push(nvidia.join("cu13/lib/libcupti.so.13"));
            out.push(nvidia.join("cuda_cupti/lib/libcupti.so.12"));
        }
    }
    out.push(PathBuf::from("libcupti.so.13"));
    out.push(PathBuf::from("libcupti.so.12"));
    out
}

/// Paths of the shared objects mapped into this process whose file name starts with `prefix`.
pub fn mapped_library(prefix: &str) -> Option<PathBuf> {
    struct Search<'a> {
        prefix: &'a str,
        found: Option<PathBuf>,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid dl_phdr_info; `data` is the &mut Search passed below.
        let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader for the call's duration.
        let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
        let path = Path::new(name.as_ref());
        if path.file_name().is_some_and(|f| f.to_string_lossy().starts_with(search.prefix)) {
            search.found = Some(path.to_path_buf());
            return 1;
        }
        0
    }
    let mut search = Search { prefix, found: None };
    // SAFETY: `visit` only reads the loader's records and writes into `search`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found
}

macro_rules! cupti_api {
    ($($field:ident : $sym:literal => fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// The CUPTI entry points cuflight calls, resolved from one library.
        #[derive(Clone, Copy)]
        pub struct CuptiApi {
            $(pub $field: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl CuptiApi {
            fn resolve(handle: *mut c_void, path: &str) -> Result<CuptiApi, LoadError> {
                Ok(CuptiApi {
                    $($field: {
                        let name = concat!($sym, "\0");
                        // SAFETY: handle is a live dlopen handle and the name is NUL-terminated.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr() as *const c_char) };
                        if p.is_null() {
                            return Err(LoadError::MissingSymbol { path: path.to_string(), symbol: $sym });
                        }
                        // SAFETY: the symbol is CUPTI's exported function with this C signature (cupti.h).
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p) }
                    },)*
                })
            }
        }
    };
}

cupti_api! {
    get_version: "cuptiGetVersion" => fn(*mut u32) -> c::CUptiResult;
    get_result_string: "cuptiGetResultString" => fn(c::CUptiResult, *mut *const c_char) -> c::CUptiResult;
    subscribe: "cuptiSubscribe" => fn(*mut c::CUpti_SubscriberHandle, c::CUpti_CallbackFunc, *mut c_void) -> c::CUptiResult;
    unsubscribe: "cuptiUnsubscribe" => fn(c::CUpti_SubscriberHandle) -> c::CUptiResult;
    enable_domain: "cuptiEnableDomain" => fn(u32, c::CUpti_SubscriberHandle, c::CUpti_CallbackDomain) -> c::CUptiResult;
    enable_callback: "cuptiEnableCallback" => fn(u32, c::CUpti_SubscriberHandle, c::CUpti_CallbackDomain, c::CUpti_CallbackId) -> c::CUptiResult;
    get_callback_name: "cuptiGetCallbackName" => fn(c::CUpti_CallbackDomain, u32, *mut *const c_char) -> c::CUptiResult;
    activity_enable: "cuptiActivityEnable" => fn(c::CUpti_ActivityKind) -> c::CUptiResult;
    activity_disable: "cuptiActivityDisable" => fn(c::CUpti_ActivityKind) -> c::CUptiResult;
    activity_register_callbacks: "cuptiActivityRegisterCallbacks" => fn(c::CUpti_BuffersCallbackRequestFunc, c::CUpti_BuffersCallbackCompleteFunc) -> c::CUptiResult;
    activity_flush_all: "cuptiActivityFlushAll" => fn(u32) -> c::CUptiResult;
    activity_get_next_record: "cuptiActivityGetNextRecord" => fn(*mut u8, usize, *mut *mut c::CUpti_Activity) -> c::CUptiResult;
    activity_get_num_dropped_records: "cuptiActivityGetNumDroppedRecords" => fn(c::CUcontext, u32, *mut usize) -> c::CUptiResult;
    get_timestamp: "cuptiGetTimestamp" => fn(*mut u64) -> c::CUptiResult;
    set_thread_id_type: "cuptiSetThreadIdType" => fn(c::CUpti_ActivityThreadIdType) -> c::CUptiResult;
    finalize: "cuptiFinalize" => fn() -> c::CUptiResult;
}

/// An opened libcupti.
pub struct Cupti {
    pub api: CuptiApi,
    pub path: String,
}

impl Cupti {
    /// Opens the first libcupti of [`candidates`] for this process's environment.
    pub fn load() -> Result<Cupti, LoadError> {
        let list = candidates(
            std::env::var("CUFLIGHT_CUPTI").ok().as_deref(),
            mapped_library("libcupti.so").as_deref(),
            std::env::var("CUDA_HOME").ok().as_deref(),
            mapped_library("libcudart.so").as_deref(),
        );
        for path in &list {
            let Ok(cpath) = CString::new(path.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: dlopen with a NUL-terminated path; RTLD_NOW so missing dependencies fail here, not later.
            let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                continue;
            }
            let shown = path.display().to_string();
            return CuptiApi::resolve(handle, &shown).map(|api| Cupti { api, path: shown });
        }
        let tried: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
        Err(LoadError::NotFound(tried.join(", ")))
    }

    /// CUPTI's text for a result code.
    pub fn result_string(&self, r: c::CUptiResult) -> String {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; CUPTI returns a static string or leaves it null.
        if unsafe { (self.api.get_result_string)(r, &mut s) } == c::CUPTI_SUCCESS && !s.is_null() {
            // SAFETY: CUPTI's result strings are static NUL-terminated strings.
            return unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
        }
        format!("CUPTI error {r}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_order_follows_the_documented_priority() {
        let list = candidates(
            Some("/opt/my/libcupti.so"),
            Some(Path::new("/mapped/libcupti.so.12")),
            Some("/usr/local/cuda"),
            Some(Path::new("/venv/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12")),
        );
        let shown: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            shown,
            [
                "/opt/my/libcupti.so",
                "/mapped/libcupti.so.12",
                "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                "/venv/site-packages/nvidia/cuda_runtime/lib/libcupti.so.13",
                "/venv/site-packages/nvidia/cuda_runtime/lib/libcupti.so.12",
                "/venv/site-packages/nvidia/cu13/lib/libcupti.so.13",
                "/venv/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
                "libcupti.so.13",
                "libcupti.so.12",
            ]
        );
    }

    #[test]
    fn empty_environment_falls_back_to_the_loader() {
        let list = candidates(Some(""), None, None, None);
        assert_eq!(list, [PathBuf::from("libcupti.so.13"), PathBuf::from("libcupti.so.12")]);
    }

    #[test]
    fn finds_libc_among_mapped_libraries() {
        assert!(mapped_library("libc.so").is_some());
        assert!(mapped_library("libdoes-not-exist").is_none());
    }
}
