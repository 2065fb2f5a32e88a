//! CUPTI's device counter entry points: PM sampling (`cupti_pmsampling.h`, CUDA 12.6 and later), the profiler
//! host API that chooses metrics, builds the configuration and turns raw counters into values
//! (`cupti_profiler_host.h`), the chip name they take (`cupti_target.h`) and the profiler's set-up
//! (`cupti_profiler_target.h`). Every one takes
//! a single parameter struct (its `structSize` set to the struct's size) and returns a `CUptiResult`.
//!
//! Resolved all together from an opened libcupti, or not at all: a CUPTI without them (before 12.6) records
//! without counters, and says so.

use crate::cuda13 as c;
use std::ffi::{c_void, CStr};

/// An entry point taking `*mut P`.
pub type Entry<P> = unsafe extern "C" fn(*mut P) -> c::CUptiResult;

/// The entry points the recorder and the collector use.
#[derive(Clone, Copy)]
pub struct PmSamplingApi {
    /// The profiler's set-up, which PM sampling needs before `cuptiPmSamplingEnable` (cupti_profiler_target.h).
    pub profiler_initialize: Entry<c::CUpti_Profiler_Initialize_Params>,
    pub profiler_deinitialize: Entry<c::CUpti_Profiler_DeInitialize_Params>,
    pub device_get_chip_name: Entry<c::CUpti_Device_GetChipName_Params>,
    pub host_initialize: Entry<c::CUpti_Profiler_Host_Initialize_Params>,
    pub host_deinitialize: Entry<c::CUpti_Profiler_Host_Deinitialize_Params>,
    pub host_config_add_metrics: Entry<c::CUpti_Profiler_Host_ConfigAddMetrics_Params>,
    pub host_get_config_image_size: Entry<c::CUpti_Profiler_Host_GetConfigImageSize_Params>,
    pub host_get_config_image: Entry<c::CUpti_Profiler_Host_GetConfigImage_Params>,
    pub host_get_num_of_passes: Entry<c::CUpti_Profiler_Host_GetNumOfPasses_Params>,
    pub host_evaluate_to_gpu_values: Entry<c::CUpti_Profiler_Host_EvaluateToGpuValues_Params>,
    pub get_counter_availability: Entry<c::CUpti_PmSampling_GetCounterAvailability_Params>,
    pub enable: Entry<c::CUpti_PmSampling_Enable_Params>,
    pub disable: Entry<c::CUpti_PmSampling_Disable_Params>,
    pub set_config: Entry<c::CUpti_PmSampling_SetConfig_Params>,
    pub start: Entry<c::CUpti_PmSampling_Start_Params>,
    pub stop: Entry<c::CUpti_PmSampling_Stop_Params>,
    pub decode_data: Entry<c::CUpti_PmSampling_DecodeData_Params>,
    pub get_counter_data_size: Entry<c::CUpti_PmSampling_GetCounterDataSize_Params>,
    pub counter_data_image_initialize: Entry<c::CUpti_PmSampling_CounterDataImage_Initialize_Params>,
    pub get_counter_data_info: Entry<c::CUpti_PmSampling_GetCounterDataInfo_Params>,
    pub counter_data_get_sample_info: Entry<c::CUpti_PmSampling_CounterData_GetSampleInfo_Params>,
}

impl PmSamplingApi {
    /// Every entry point from the library at `handle`, or None if one is missing.
    pub fn resolve(handle: *mut c_void) -> Option<PmSamplingApi> {
        // Each resolved symbol is cast to the signature its header declares for it (one parameter struct pointer,
        // a CUptiResult back), which `Entry<P>` spells with the header's struct.
        fn entry<P>(handle: *mut c_void, name: &CStr) -> Option<Entry<P>> {
            // SAFETY: handle is a live dlopen handle and the name is NUL-terminated.
            let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
            // SAFETY: a non-null symbol of CUPTI's with this name has this signature (see above).
            (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, Entry<P>>(p) })
        }
        Some(PmSamplingApi {
            profiler_initialize: entry(handle, c"cuptiProfilerInitialize")?,
            profiler_deinitialize: entry(handle, c"cuptiProfilerDeInitialize")?,
            device_get_chip_name: entry(handle, c"cuptiDeviceGetChipName")?,
            host_initialize: entry(handle, c"cuptiProfilerHostInitialize")?,
            host_deinitialize: entry(handle, c"cuptiProfilerHostDeinitialize")?,
            host_config_add_metrics: entry(handle, c"cuptiProfilerHostConfigAddMetrics")?,
            host_get_config_image_size: entry(handle, c"cuptiProfilerHostGetConfigImageSize")?,
            host_get_config_image: entry(handle, c"cuptiProfilerHostGetConfigImage")?,
            host_get_num_of_passes: entry(handle, c"cuptiProfilerHostGetNumOfPasses")?,
            host_evaluate_to_gpu_values: entry(handle, c"cuptiProfilerHostEvaluateToGpuValues")?,
            get_counter_availability: entry(handle, c"cuptiPmSamplingGetCounterAvailability")?,
            enable: entry(handle, c"cuptiPmSamplingEnable")?,
            disable: entry(handle, c"cuptiPmSamplingDisable")?,
            set_config: entry(handle, c"cuptiPmSamplingSetConfig")?,
            start: entry(handle, c"cuptiPmSamplingStart")?,
            stop: entry(handle, c"cuptiPmSamplingStop")?,
            decode_data: entry(handle, c"cuptiPmSamplingDecodeData")?,
            get_counter_data_size: entry(handle, c"cuptiPmSamplingGetCounterDataSize")?,
            counter_data_image_initialize: entry(handle, c"cuptiPmSamplingCounterDataImageInitialize")?,
            get_counter_data_info: entry(handle, c"cuptiPmSamplingGetCounterDataInfo")?,
            counter_data_get_sample_info: entry(handle, c"cuptiPmSamplingCounterDataGetSampleInfo")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library without them (libc here, as a CUPTI before 12.6 would be) gives none, not a partial set.
    #[test]
    fn a_library_without_pm_sampling_gives_none() {
        // SAFETY: dlopen of the C library, which every process has mapped.
        let handle = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!handle.is_null());
        assert!(PmSamplingApi::resolve(handle).is_none());
    }
}
