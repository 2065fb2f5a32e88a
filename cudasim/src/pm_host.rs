//! **Test double.** The profiler host API (`cupti_profiler_host.h`) for PM sampling: a host object for a chip,
//! the metrics added to it, the configuration image built from them and its number of passes, and the values
//! of each decoded sample. The real one (in NVIDIA's CUPTI wheel, with libnvperf_host.so) loads libcuda.so.1 on
//! first use and returns CUPTI_ERROR_UNKNOWN (999) without a driver (measured 2026-11-28 with CUPTI 13.5 on this
//! project's GPU-less CI), so the simulator models this half too. It knows one chip, GH100 (what the H200
//! answered), and the metrics of `pm_counters.rs`; any other name is CUPTI_ERROR_INVALID_METRIC_NAME, as the
//! header documents for ConfigAddMetrics and EvaluateToGpuValues.

use crate::c;
use crate::pm_counters::is_modelled_metric;
use crate::pm_sampling::{bytes_mut, get_u64, image_header, names, put_u64, sample_at, string, CHIP, CONFIG_MAGIC};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Host objects by the handle given out for them: the metrics added so far.
static HOSTS: Mutex<Option<HashMap<usize, Vec<String>>>> = Mutex::new(None);
static NEXT_HOST: AtomicUsize = AtomicUsize::new(1);

fn with_host<R>(object: *mut c::CUpti_Profiler_Host_Object, f: impl FnOnce(&mut Vec<String>) -> R) -> Option<R> {
    HOSTS.lock().get_or_insert_with(HashMap::new).get_mut(&(object as usize)).map(f)
}

cupti_entry!(
    fn cuptiProfilerHostInitialize(p: *mut c::CUpti_Profiler_Host_Initialize_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: pChipName is the client's C string or null.
        let chip = unsafe { string(p.pChipName) };
        if p.profilerType != c::CUPTI_PROFILER_TYPE_PM_SAMPLING
            && p.profilerType != c::CUPTI_PROFILER_TYPE_RANGE_PROFILER
        {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        if chip != CHIP.to_str().ok() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        crate::timing::pm_host_initialize();
        let handle = NEXT_HOST.fetch_add(1, Ordering::Relaxed);
        HOSTS.lock().get_or_insert_with(HashMap::new).insert(handle, Vec::new());
        p.pHostObject = handle as *mut c::CUpti_Profiler_Host_Object;
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiProfilerHostDeinitialize(p: *mut c::CUpti_Profiler_Host_Deinitialize_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        match HOSTS.lock().get_or_insert_with(HashMap::new).remove(&(p.pHostObject as usize)) {
            Some(_) => c::CUPTI_SUCCESS,
            None => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiProfilerHostConfigAddMetrics(p: *mut c::CUpti_Profiler_Host_ConfigAddMetrics_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: the client passes numMetrics names.
        let Some(added) = (unsafe { names(p.ppMetricNames, p.numMetrics) }) else {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        };
        if !added.iter().all(|m| is_modelled_metric(m)) {
            return c::CUPTI_ERROR_INVALID_METRIC_NAME;
        }
        with_host(p.pHostObject, |metrics| {
            metrics.extend(added.iter().map(|m| m.to_string()));
            c::CUPTI_SUCCESS
        })
        .unwrap_or(c::CUPTI_ERROR_INVALID_PARAMETER)
    }
);

/// The configuration image: a magic, the number of passes, the number of metrics.
const CONFIG_BYTES: usize = 24;

cupti_entry!(
    fn cuptiProfilerHostGetConfigImageSize(p: *mut c::CUpti_Profiler_Host_GetConfigImageSize_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        match with_host(p.pHostObject, |m| m.len()) {
            Some(n) if n > 0 => {
                p.configImageSize = CONFIG_BYTES;
                c::CUPTI_SUCCESS
            }
            _ => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiProfilerHostGetConfigImage(p: *mut c::CUpti_Profiler_Host_GetConfigImage_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        let Some(n) = with_host(p.pHostObject, |m| m.len()) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: the client passed an image of configImageSize bytes.
        match unsafe { bytes_mut(p.pConfigImage, p.configImageSize) } {
            Some(image) if image.len() >= CONFIG_BYTES && n > 0 => {
                put_u64(image, 0, CONFIG_MAGIC);
                put_u64(image, 8, 1); // every set of the modelled metrics fits one pass (the H200 held all 13)
                put_u64(image, 16, n as u64);
                c::CUPTI_SUCCESS
            }
            _ => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiProfilerHostGetNumOfPasses(p: *mut c::CUpti_Profiler_Host_GetNumOfPasses_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: the client passed an image of configImageSize bytes.
        match unsafe { bytes_mut(p.pConfigImage, p.configImageSize) } {
            Some(image) if get_u64(image, 0) == CONFIG_MAGIC => {
                p.numOfPasses = get_u64(image, 8) as usize;
                c::CUPTI_SUCCESS
            }
            _ => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiProfilerHostEvaluateToGpuValues(p: *mut c::CUpti_Profiler_Host_EvaluateToGpuValues_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        if with_host(p.pHostObject, |_| ()).is_none() || p.pMetricValues.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        // SAFETY: the client passes numMetrics names.
        let Some(wanted) = (unsafe { names(p.ppMetricNames, p.numMetrics) }) else {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        };
        // SAFETY: the client passed an image of counterDataImageSize bytes.
        let Some(image) = (unsafe { bytes_mut(p.pCounterDataImage as *mut u8, p.counterDataImageSize) }) else {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        };
        let Some((_, populated)) = image_header(image) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        if p.rangeIndex as u64 >= populated {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        let (_, _, raw) = sample_at(image, p.rangeIndex as u64);
        crate::timing::pm_evaluate();
        let values: Option<Vec<f64>> = wanted.iter().map(|m| raw.metric(m)).collect();
        let Some(values) = values else { return c::CUPTI_ERROR_INVALID_METRIC_NAME };
        // SAFETY: the client's array holds numMetrics doubles.
        let out = unsafe { std::slice::from_raw_parts_mut(p.pMetricValues, values.len()) };
        out.copy_from_slice(&values);
        c::CUPTI_SUCCESS
    }
);
