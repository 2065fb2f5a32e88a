//! Opens libcupti at run time and resolves the entry points cuflight uses.
//!
//! Search order (first that opens wins), so that the agent uses the CUPTI of the process's own CUDA:
//! 1. `$CUFLIGHT_CUPTI` (a path);
//! 2. a libcupti already mapped into the process (a framework loaded it);
//! 3. next to the process's libcudart: its own directory, then the PyPI wheel layouts `nvidia/cu13/lib` (CUDA 13)
//!    and `nvidia/cuda_cupti/lib` (CUDA 12 `nvidia-cuda-cupti-cu12`);
//! 4. `/usr/local/cuda-X.Y/extras/CUPTI/lib64` for the process's runtime version X.Y (nvcc links cudart
//!    statically by default, so there may be no libcudart to look beside);
//! 5. `$CUDA_HOME/extras/CUPTI/lib64`, then `/usr/local/cuda/extras/CUPTI/lib64` (after the process's own CUDA:
//!    when they disagree, the process's wins);
//! 6. `libcupti.so.13`, then `libcupti.so.12`, through the dynamic loader's own search.

use crate::cuda13 as c;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

/// Why libcupti could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The advice comes first: the agent's status holds 512 bytes, and long paths (a conda env, a deep checkout)
    /// must not push it out. The list is cut to [`TRIED_SHOWN_BYTES`], saying how many were left out.
    #[error("no libcupti found; set CUFLIGHT_CUPTI to its path (tried {0})")]
    NotFound(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{path} lacks symbol {symbol}: not a CUPTI library, or too old")]
    MissingSymbol { path: String, symbol: &'static str },
}

/// What the search for libcupti knows about the process.
#[derive(Clone, Copy, Debug, Default)]
pub struct SearchInputs<'a> {
    pub override_path: Option<&'a str>,
    pub mapped_cupti: Option<&'a Path>,
    pub mapped_cudart: Option<&'a Path>,
    /// The process's CUDA runtime version (major, minor), when known.
    pub runtime: Option<(u32, u32)>,
    pub cuda_home: Option<&'a str>,
}

/// Where to look for libcupti, in order (pure, for tests).
pub fn candidates(i: SearchInputs) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = i.override_path.filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    if let Some(p) = i.mapped_cupti {
        out.push(p.to_path_buf());
    }
    if let Some(dir) = i.mapped_cudart.and_then(Path::parent) {
        out.push(dir.join("libcupti.so.13"));
        out.push(dir.join("libcupti.so.12"));
        // .../site-packages/nvidia/<component>/lib/libcudart.so.N
        if let Some(nvidia) = dir.parent().and_then(Path::parent) {
            out.push(nvidia.join("cu13/lib/libcupti.so.13"));
            out.push(nvidia.join("cuda_cupti/lib/libcupti.so.12"));
        }
        // A toolkit's lib64/libcudart.so.X next to extras/CUPTI/lib64.
        if let Some(toolkit) = dir.parent() {
            out.push(toolkit.join("extras/CUPTI/lib64/libcupti.so"));
        }
    }
    if let Some((major, minor)) = i.runtime {
        out.push(PathBuf::from(format!("/usr/local/cuda-{major}.{minor}/extras/CUPTI/lib64/libcupti.so")));
    }
    if let Some(home) = i.cuda_home.filter(|h| !h.is_empty()) {
        out.push(Path::new(home).join("extras/CUPTI/lib64/libcupti.so"));
    }
    out.push(PathBuf::from("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"));
    out.push(PathBuf::from("libcupti.so.13"));
    out.push(PathBuf::from("libcupti.so.12"));
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// The runtime version (major, minor) a libcudart file name carries (`libcudart.so.12.4.127`), following
/// symbolic links to the real file.
pub fn runtime_version_of(cudart: &Path) -> Option<(u32, u32)> {
    let real = std::fs::canonicalize(cudart).unwrap_or_else(|_| cudart.to_path_buf());
    let name = real.file_name()?.to_string_lossy().into_owned();
    let mut parts = name.split_once(".so.")?.1.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok())?;
    Some((major, minor))
}

/// Paths of the shared objects mapped into this process whose file name starts with `prefix`.
pub fn mapped_library(prefix: &str) -> Option<PathBuf> {
    struct Search<'a> {
        prefix: &'a str,
        found: Option<PathBuf>,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid dl_phdr_info.
        let info = unsafe { &*info };
        // SAFETY: `data` is the &mut Search passed below, alive for the call.
        let search = unsafe { &mut *(data as *mut Search) };
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

/// `cuptiSubscribe_v2` (CUDA 13.0+): names the tool that holds CUPTI when it refuses us.
pub type SubscribeV2 = unsafe extern "C" fn(
    *mut c::CUpti_SubscriberHandle,
    c::CUpti_CallbackFunc,
    *mut c_void,
    *mut c::CUpti_SubscriberParams,
) -> c::CUptiResult;
/// `cuptiActivityRegisterTimestampCallback` (12.x and 13.x headers).
pub type RegisterTimestampCallback = unsafe extern "C" fn(c::CUpti_TimestampCallbackFunc) -> c::CUptiResult;
/// `cuptiActivityGetStructSize` (13.x): the size of `kind`'s record in a CUPTI version (0 = this one).
pub type GetStructSize = unsafe extern "C" fn(c::CUpti_ActivityKind, u32, *mut usize) -> c::CUptiResult;

/// The per-subscriber (v2) Activity API of CUPTI 13.5 (cupti_activity.h), used in multi-subscriber mode: the
/// same calls as the legacy ones, for one subscriber's kinds and buffers.
/// `cuptiActivityEnable_v2` / `cuptiActivityDisable_v2`.
pub type ActivityKindV2 = unsafe extern "C" fn(
    c::CUpti_SubscriberHandle,
    c::CUpti_ActivityKind,
    *mut c::CUpti_ActivityConfig,
) -> c::CUptiResult;
/// `cuptiActivityRegisterCallbacks_v2`.
pub type RegisterCallbacksV2 = unsafe extern "C" fn(
    c::CUpti_SubscriberHandle,
    c::CUpti_BuffersCallbackRequestFunc_v2,
    c::CUpti_BuffersCallbackCompleteFunc_v2,
) -> c::CUptiResult;
/// `cuptiActivityGetNextRecord_v2`.
pub type GetNextRecordV2 =
    unsafe extern "C" fn(c::CUpti_SubscriberHandle, *mut u8, usize, *mut *mut c::CUpti_Activity) -> c::CUptiResult;
/// `cuptiActivityGetNumDroppedRecords_v2`.
pub type GetNumDroppedRecordsV2 =
    unsafe extern "C" fn(c::CUpti_SubscriberHandle, c::CUcontext, u32, *mut usize) -> c::CUptiResult;

#[derive(Clone, Copy)]
pub struct ActivityV2 {
    pub enable: ActivityKindV2,
    pub disable: ActivityKindV2,
    pub register_callbacks: RegisterCallbacksV2,
    pub get_next_record: GetNextRecordV2,
    pub get_num_dropped_records: GetNumDroppedRecordsV2,
}

/// `cuptiActivityEnableHWTrace` (CUDA 12.8 and later).
pub type EnableHwTrace = unsafe extern "C" fn(u8) -> c::CUptiResult;
/// `cuptiActivitySetAttribute` (every release): a global Activity API attribute.
pub type SetAttribute = unsafe extern "C" fn(c::CUpti_ActivityAttribute, *mut usize, *mut c_void) -> c::CUptiResult;
/// `cuptiActivitySetAttribute_v2` (13.x): one subscriber's attribute in multi-subscriber mode.
pub type SetAttributeV2 = unsafe extern "C" fn(
    c::CUpti_SubscriberHandle,
    c::CUpti_ActivityAttribute,
    *mut usize,
    *mut c_void,
) -> c::CUptiResult;
/// `cuptiActivityEnableRuntimeApi` / `cuptiActivityEnableDriverApi`: API activity records for one callback id.
pub type EnableApiRecords = unsafe extern "C" fn(c::CUpti_CallbackId, u8) -> c::CUptiResult;
/// `cuptiActivityEnableRuntimeApi_v2` / `cuptiActivityEnableDriverApi_v2` (13.x): the same for one subscriber.
pub type EnableApiRecordsV2 =
    unsafe extern "C" fn(c::CUpti_SubscriberHandle, c::CUpti_CallbackId, u8) -> c::CUptiResult;

/// Per-call API activity records (`cuptiActivityEnableRuntimeApi`/`DriverApi`, cupti_activity.h), both domains
/// or neither.
#[derive(Clone, Copy)]
pub struct ApiRecords {
    pub runtime: EnableApiRecords,
    pub driver: EnableApiRecords,
    /// The per-subscriber forms, where the release has them (13.x).
    pub v2: Option<(EnableApiRecordsV2, EnableApiRecordsV2)>,
}

/// Entry points that only some releases export: looked up one by one, absent ones are `None`, so one agent
/// binary serves every release.
#[derive(Clone, Copy, Default)]
pub struct CuptiOptional {
    pub subscribe_v2: Option<SubscribeV2>,
    pub register_timestamp_callback: Option<RegisterTimestampCallback>,
    pub get_struct_size: Option<GetStructSize>,
    /// All five v2 Activity entry points, or none.
    pub activity_v2: Option<ActivityV2>,
    /// The device counters' entry points (CUDA 12.6+), all or none.
    pub pm_sampling: Option<crate::pm_sampling::PmSamplingApi>,
    /// Hardware Event System kernel timestamps (CUDA 12.8+; Blackwell and later GPUs).
    pub enable_hw_trace: Option<EnableHwTrace>,
    pub set_attribute: Option<SetAttribute>,
    pub set_attribute_v2: Option<SetAttributeV2>,
    pub api_records: Option<ApiRecords>,
}

impl CuptiOptional {
    fn resolve(handle: *mut c_void) -> CuptiOptional {
        let sym = |name: &CStr| {
            // SAFETY: handle is a live dlopen handle and the name is NUL-terminated.
            let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        CuptiOptional {
            subscribe_v2: sym(c"cuptiSubscribe_v2").map(|p| {
                // SAFETY: CUPTI's exported cuptiSubscribe_v2 (cupti_callbacks.h, 13.x).
                unsafe { std::mem::transmute::<*mut c_void, SubscribeV2>(p) }
            }),
            register_timestamp_callback: sym(c"cuptiActivityRegisterTimestampCallback").map(|p| {
                // SAFETY: CUPTI's exported cuptiActivityRegisterTimestampCallback (cupti_activity.h).
                unsafe { std::mem::transmute::<*mut c_void, RegisterTimestampCallback>(p) }
            }),
            get_struct_size: sym(c"cuptiActivityGetStructSize").map(|p| {
                // SAFETY: CUPTI's exported cuptiActivityGetStructSize (cupti_activity.h, 13.x).
                unsafe { std::mem::transmute::<*mut c_void, GetStructSize>(p) }
            }),
            // Each with the signature the 13.5 cupti_activity.h declares for it (as in ActivityV2).
            activity_v2: (|| {
                let enable = sym(c"cuptiActivityEnable_v2")?;
                let disable = sym(c"cuptiActivityDisable_v2")?;
                let register = sym(c"cuptiActivityRegisterCallbacks_v2")?;
                let next = sym(c"cuptiActivityGetNextRecord_v2")?;
                let dropped = sym(c"cuptiActivityGetNumDroppedRecords_v2")?;
                Some(ActivityV2 {
                    // SAFETY: CUPTI's exported cuptiActivityEnable_v2.
                    enable: unsafe { std::mem::transmute::<*mut c_void, ActivityKindV2>(enable) },
                    // SAFETY: CUPTI's exported cuptiActivityDisable_v2.
                    disable: unsafe { std::mem::transmute::<*mut c_void, ActivityKindV2>(disable) },
                    // SAFETY: CUPTI's exported cuptiActivityRegisterCallbacks_v2.
                    register_callbacks: unsafe { std::mem::transmute::<*mut c_void, RegisterCallbacksV2>(register) },
                    // SAFETY: CUPTI's exported cuptiActivityGetNextRecord_v2.
                    get_next_record: unsafe { std::mem::transmute::<*mut c_void, GetNextRecordV2>(next) },
                    // SAFETY: CUPTI's exported cuptiActivityGetNumDroppedRecords_v2.
                    get_num_dropped_records: unsafe {
                        std::mem::transmute::<*mut c_void, GetNumDroppedRecordsV2>(dropped)
                    },
                })
            })(),
            pm_sampling: crate::pm_sampling::PmSamplingApi::resolve(handle),
            enable_hw_trace: sym(c"cuptiActivityEnableHWTrace").map(|p| {
                // SAFETY: CUPTI's exported cuptiActivityEnableHWTrace (cupti_activity.h, 12.8 and later).
                unsafe { std::mem::transmute::<*mut c_void, EnableHwTrace>(p) }
            }),
            set_attribute: sym(c"cuptiActivitySetAttribute").map(|p| {
                // SAFETY: CUPTI's exported cuptiActivitySetAttribute (cupti_activity.h).
                unsafe { std::mem::transmute::<*mut c_void, SetAttribute>(p) }
            }),
            set_attribute_v2: sym(c"cuptiActivitySetAttribute_v2").map(|p| {
                // SAFETY: CUPTI's exported cuptiActivitySetAttribute_v2 (cupti_activity.h, 13.x).
                unsafe { std::mem::transmute::<*mut c_void, SetAttributeV2>(p) }
            }),
            api_records: (|| {
                let runtime = sym(c"cuptiActivityEnableRuntimeApi")?;
                let driver = sym(c"cuptiActivityEnableDriverApi")?;
                let v2 = sym(c"cuptiActivityEnableRuntimeApi_v2").zip(sym(c"cuptiActivityEnableDriverApi_v2"));
                Some(ApiRecords {
                    // SAFETY: CUPTI's exported cuptiActivityEnableRuntimeApi (cupti_activity.h).
                    runtime: unsafe { std::mem::transmute::<*mut c_void, EnableApiRecords>(runtime) },
                    // SAFETY: CUPTI's exported cuptiActivityEnableDriverApi (cupti_activity.h).
                    driver: unsafe { std::mem::transmute::<*mut c_void, EnableApiRecords>(driver) },
                    v2: v2.map(|(r, d)| {
                        // SAFETY: CUPTI's exported cuptiActivityEnableRuntimeApi_v2 (cupti_activity.h, 13.x).
                        let runtime = unsafe { std::mem::transmute::<*mut c_void, EnableApiRecordsV2>(r) };
                        // SAFETY: CUPTI's exported cuptiActivityEnableDriverApi_v2 (cupti_activity.h, 13.x).
                        let driver = unsafe { std::mem::transmute::<*mut c_void, EnableApiRecordsV2>(d) };
                        (runtime, driver)
                    }),
                })
            })(),
        }
    }
}

/// Most bytes of paths a [`LoadError::NotFound`] lists.
pub const TRIED_SHOWN_BYTES: usize = 300;

/// The paths tried, joined, cut after [`TRIED_SHOWN_BYTES`] with a count of those left out.
fn tried_list(tried: &[String]) -> String {
    let mut shown = String::new();
    let mut listed = 0;
    for path in tried {
        if listed > 0 && shown.len() + path.len() + 2 > TRIED_SHOWN_BYTES {
            break;
        }
        if listed > 0 {
            shown.push_str(", ");
        }
        shown.push_str(path);
        listed += 1;
    }
    match tried.len() - listed {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// An opened libcupti.
pub struct Cupti {
    pub api: CuptiApi,
    pub optional: CuptiOptional,
    pub path: String,
}

impl Cupti {
    /// Opens the first libcupti of [`candidates`] for this process's environment.
    pub fn load() -> Result<Cupti, LoadError> {
        let (override_path, cuda_home) = (std::env::var("CUFLIGHT_CUPTI").ok(), std::env::var("CUDA_HOME").ok());
        let (mapped_cupti, mapped_cudart) = (mapped_library("libcupti.so"), mapped_library("libcudart.so"));
        // Never call into CUDA here: this runs inside cuInit (InitializeInjection), where a runtime call re-enters
        // the driver's initialisation. A statically linked cudart leaves no file name to read: then $CUDA_HOME.
        let runtime = mapped_cudart.as_deref().and_then(runtime_version_of);
        if let Some((major, minor)) = runtime.filter(|&(major, _)| major < 12) {
            return Err(LoadError::Unsupported(format!(
                "the program uses CUDA {major}.{minor}; cuflight supports CUDA 12.0 and later"
            )));
        }
        let list = candidates(SearchInputs {
            override_path: override_path.as_deref(),
            mapped_cupti: mapped_cupti.as_deref(),
            mapped_cudart: mapped_cudart.as_deref(),
            runtime,
            cuda_home: cuda_home.as_deref(),
        });
        for path in &list {
            let Ok(cpath) = CString::new(path.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: dlopen with a NUL-terminated path; RTLD_NOW so missing dependencies fail here, not later.
            let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                continue;
            }
            // The file the loader found (a bare soname says nothing of where it came from); the first libcupti
            // mapped is this one, since a mapped one is the search's second candidate and the first that opens.
            let shown = mapped_library("libcupti.so").unwrap_or_else(|| path.clone()).display().to_string();
            let optional = CuptiOptional::resolve(handle);
            return CuptiApi::resolve(handle, &shown).map(|api| Cupti { api, optional, path: shown });
        }
        let tried: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
        Err(LoadError::NotFound(tried_list(&tried)))
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
    fn not_found_gives_its_advice_first_and_bounds_the_list() {
        let deep =
            "/home/someone/a/much/longer/checkout/of/a/project/.venv/lib/python3.12/site-packages/nvidia/cu13/lib";
        let tried: Vec<String> = (0..12).map(|i| format!("{deep}/libcupti.so.{i}")).collect();
        let msg = LoadError::NotFound(tried_list(&tried)).to_string();
        assert!(msg.starts_with("no libcupti found; set CUFLIGHT_CUPTI to its path (tried /home/"), "{msg}");
        assert!(msg.len() < 512 && msg.ends_with(" more)"), "{} bytes: {msg}", msg.len());
        let few = LoadError::NotFound(tried_list(&["/a/libcupti.so".into(), "libcupti.so.13".into()])).to_string();
        assert!(few.ends_with("(tried /a/libcupti.so, libcupti.so.13)"), "{few}");
    }

    #[test]
    fn search_order_follows_the_documented_priority() {
        let list = candidates(SearchInputs {
            override_path: Some("/opt/my/libcupti.so"),
            mapped_cupti: Some(Path::new("/mapped/libcupti.so.12")),
            mapped_cudart: Some(Path::new("/venv/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12")),
            runtime: Some((12, 4)),
            cuda_home: Some("/opt/cuda-13.0"),
        });
        let shown: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            shown,
            [
                "/opt/my/libcupti.so",
                "/mapped/libcupti.so.12",
                "/venv/site-packages/nvidia/cuda_runtime/lib/libcupti.so.13",
                "/venv/site-packages/nvidia/cuda_runtime/lib/libcupti.so.12",
                "/venv/site-packages/nvidia/cu13/lib/libcupti.so.13",
                "/venv/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
                "/venv/site-packages/nvidia/cuda_runtime/extras/CUPTI/lib64/libcupti.so",
                "/usr/local/cuda-12.4/extras/CUPTI/lib64/libcupti.so",
                "/opt/cuda-13.0/extras/CUPTI/lib64/libcupti.so",
                "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                "libcupti.so.13",
                "libcupti.so.12",
            ],
            "the process's own CUDA (its libcudart, its runtime version) comes before $CUDA_HOME"
        );
    }

    #[test]
    fn empty_environment_falls_back_to_the_toolkit_and_the_loader() {
        let list = candidates(SearchInputs { override_path: Some(""), ..Default::default() });
        assert_eq!(
            list,
            [
                PathBuf::from("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"),
                PathBuf::from("libcupti.so.13"),
                PathBuf::from("libcupti.so.12")
            ]
        );
    }

    #[test]
    fn runtime_versions_come_from_versioned_file_names() {
        assert_eq!(runtime_version_of(Path::new("/nonexistent/libcudart.so.12.4.127")), Some((12, 4)));
        assert_eq!(runtime_version_of(Path::new("/nonexistent/libcudart.so.11.8.89")), Some((11, 8)));
        assert_eq!(runtime_version_of(Path::new("/nonexistent/libcudart.so.13")), None);
    }

    #[test]
    fn finds_libc_among_mapped_libraries() {
        assert!(mapped_library("libc.so").is_some());
        assert!(mapped_library("libdoes-not-exist").is_none());
    }
}
