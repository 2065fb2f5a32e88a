//! What a CUDA call's return code says: its name (CUDA's own, from the headers: [`super::cuda_error_names`]) and
//! what it means for the run. The agent records every call's return code (an API call's `b`); Nsight Systems
//! exports theirs (`returnValue`); torch.profiler's traces hold none.
//!
//! Runtime (`cudaError_t`) and driver (`CUresult`) codes share their numbers for the errors that matter here
//! (driver_types.h and cuda.h: out of memory 2, not ready 600, illegal address 700, ...).

use super::cuda_error_names::{DRIVER, RUNTIME};

/// What a failed call means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// A device-side fault (an illegal address, a failed launch, a device assert, an uncorrectable ECC error):
    /// driver_types.h on cudaErrorIllegalAddress, "This leaves the process in an inconsistent state and any
    /// further CUDA work will return the same error". The run is over from here.
    Sticky,
    /// No device memory for an allocation (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY: 2).
    OutOfMemory,
    /// Any other failure.
    Error,
    /// An answer the program asked for rather than a failure: work not done yet (600) from a query, peer access
    /// already on or not on (704, 705), host memory already registered or not (712, 713), a symbol or entry point
    /// not found by a lookup (500), device flags set on an active device (708), the runtime unloading at exit (4),
    /// a pointer's attributes asked of host memory (1 from cuPointerGetAttribute: how NCCL and PyTorch tell
    /// host from device pointers), a context destroyed at exit (709); and whatever `cudaGetLastError` or
    /// `cudaPeekAtLastError` return, which is an earlier call's error reported again (PyTorch clears the "not
    /// ready" of a query, or the out of memory its allocator recovered from, that way), counted where it happened.
    Expected,
}

impl ErrorClass {
    /// The class of `code` returned by the call named `api` (0 is success: no class).
    pub fn of(api: &str, code: u32) -> Option<ErrorClass> {
        Some(match code {
            0 => return None,
            _ if api.starts_with("cudaGetLastError") || api.starts_with("cudaPeekAtLastError") => ErrorClass::Expected,
            214 | 700 | 710 | 714..=719 => ErrorClass::Sticky,
            2 => ErrorClass::OutOfMemory,
            4 | 500 | 600 | 704 | 705 | 708 | 709 | 712 | 713 => ErrorClass::Expected,
            1 if api.contains("PointerGetAttribute") => ErrorClass::Expected,
            _ => ErrorClass::Error,
        })
    }

    /// As a label or key: `sticky`, `out_of_memory`, `error`, `expected` (the JSON's spelling).
    pub fn key(self) -> &'static str {
        match self {
            ErrorClass::Sticky => "sticky",
            ErrorClass::OutOfMemory => "out_of_memory",
            ErrorClass::Error => "error",
            ErrorClass::Expected => "expected",
        }
    }

    /// As a person reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::OutOfMemory => "out of memory",
            class => class.key(),
        }
    }
}

/// CUDA's name for `code`: the runtime's when `runtime`, else the driver's ("unknown (N)" for a code neither
/// release names: a newer CUDA's, or a hostile file's).
pub fn error_name(runtime: bool, code: u32) -> String {
    let table = if runtime { RUNTIME } else { DRIVER };
    match table.binary_search_by_key(&code, |&(c, _)| c) {
        Ok(i) => table[i].1.to_string(),
        Err(_) => format!("unknown ({code})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_as_the_headers_name_them() {
        assert_eq!(error_name(true, 2), "cudaErrorMemoryAllocation");
        assert_eq!(error_name(false, 2), "CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(error_name(true, 700), "cudaErrorIllegalAddress");
        assert_eq!(error_name(false, 700), "CUDA_ERROR_ILLEGAL_ADDRESS");
        assert_eq!(error_name(true, 600), "cudaErrorNotReady");
        assert_eq!(error_name(true, 123_456), "unknown (123456)");
        assert!(RUNTIME.windows(2).all(|w| w[0].0 < w[1].0) && DRIVER.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn failures_are_told_from_answers() {
        assert_eq!(ErrorClass::of("cudaStreamSynchronize", 700), Some(ErrorClass::Sticky));
        assert_eq!(ErrorClass::of("cudaMalloc", 2), Some(ErrorClass::OutOfMemory));
        assert_eq!(ErrorClass::of("cudaStreamQuery", 600), Some(ErrorClass::Expected));
        assert_eq!(ErrorClass::of("cuPointerGetAttribute", 1), Some(ErrorClass::Expected));
        assert_eq!(ErrorClass::of("cudaMemcpy", 1), Some(ErrorClass::Error));
        assert_eq!(ErrorClass::of("cudaMalloc", 0), None);
        assert_eq!(ErrorClass::of("cudaGetLastError", 2), Some(ErrorClass::Expected), "reported again, not twice");
    }
}
