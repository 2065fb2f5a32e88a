//! **Test double.** CUPTI's PM sampling (`cupti_pmsampling.h`), the profiler host API that configures it and
//! evaluates its samples (`cupti_profiler_host.h`), the chip name (`cupti_target.h`) and the profiler's set-up
//! (`cupti_profiler_target.h`), as their headers document them (CUDA 13.0 and 12.6+; each entry point's errors
//! are the `\retval`s of its header). What the samples count is `pm_counters.rs`.
//!
//! The images are opaque to clients, so their contents here are the simulator's own; their sizes follow the
//! real ones where measured: a counter data image takes 35.5 KB a sample (H200, 2026-11-28: 2.13 GB for 60,000
//! samples of 13 metrics). Facts the model keeps: samples cover `samplingInterval` ns each from Start, on CUPTI's
//! clock (the H200's samples and CUPTI's timestamps agreed); a sample is decoded once it is complete; DecodeData
//! fills the image until it is full (`COUNTER_DATA_FULL`: re-initialise it) or the hardware buffer is empty
//! (`END_OF_RECORDS`); a hardware buffer too small for the samples waiting overflows (`KEEP_OLDEST`: the newest
//! are lost, `overflow` set and CUPTI_ERROR_OUT_OF_MEMORY, as the header says; `KEEP_LATEST`: the oldest are).
//! Assumed, not measured: a raw sample takes 4 KiB of the hardware buffer. Not modelled: the first sample
//! starting before Start (seen on the H200), sysclk trigger mode (its interval is taken as ns at 1 GHz).
//!
//! `CUDASIM_PM_SAMPLING` plays what stops a real client: `denied` (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES from the
//! availability query and Enable, as with `NVreg_RestrictProfilingToAdminUsers=1` or a container without the
//! capability), `busy` (CUPTI_ERROR_HARDWARE_BUSY from Enable: another client such as DCGM profiling holds the
//! counters), `mig` (CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED) and `invalid` (CUPTI_ERROR_INVALID_PARAMETER from
//! SetConfig, which cupti_pmsampling.h lists "if any pParams is not valid"; played whatever the parameters, since an
//! H200's doctor probe met result 1 in its set-up on 2026-12-01 with the parameters an H200 had
//! sampled with on 2026-11-28, at a call the agent did not yet name).

use crate::c;
use crate::pm_counters::{self, is_modelled_metric, RawCounters, RAW_FIELDS};
use crate::release::current as rel;
use crate::MAX_DEVICES;
use parking_lot::Mutex;
use std::ffi::{c_char, CStr};

pub(crate) const CHIP: &CStr = c"GH100";
const SAMPLE_BYTES: usize = 35_500;
const DATA_HEADER: usize = 32;
const DATA_MAGIC: u64 = u64::from_le_bytes(*b"SIMPMCD1");
pub(crate) const CONFIG_MAGIC: u64 = u64::from_le_bytes(*b"SIMPMCF1");
const AVAILABILITY: &[u8; 16] = b"SIMPMAV1GH100\0\0\0";
const HW_RECORD_BYTES: u64 = 4096;

/// One enabled device's sampler (`CUpti_PmSampling_Object`).
struct Sampler {
    device: u32,
    interval_ns: u64,
    hardware_buffer: u64,
    keep_latest: bool,
    configured: bool,
    started_at: Option<u64>,
    stopped_at: Option<u64>,
    /// The next sample (index from Start) the hardware buffer holds.
    next: u64,
}

static SAMPLERS: Mutex<Vec<Option<Sampler>>> = Mutex::new(Vec::new());

fn mode() -> &'static str {
    static MODE: once_cell::sync::Lazy<String> =
        once_cell::sync::Lazy::new(|| std::env::var("CUDASIM_PM_SAMPLING").unwrap_or_default());
    MODE.as_str()
}

fn refusal() -> Option<c::CUptiResult> {
    if !rel().has_pm_sampling() {
        return Some(c::CUPTI_ERROR_NOT_SUPPORTED);
    }
    match mode() {
        "denied" => Some(c::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES),
        "mig" => Some(c::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED),
        _ => None,
    }
}

/// The object pointer handed out for `device` (1-based, so never null) and back.
fn object_of(device: u32) -> *mut c::CUpti_PmSampling_Object {
    (device as usize + 1) as *mut c::CUpti_PmSampling_Object
}

fn with_sampler(
    object: *mut c::CUpti_PmSampling_Object,
    f: impl FnOnce(&mut Sampler) -> c::CUptiResult,
) -> c::CUptiResult {
    let index = (object as usize).wrapping_sub(1);
    let mut samplers = SAMPLERS.lock();
    match samplers.get_mut(index).and_then(Option::as_mut) {
        Some(s) => f(s),
        None => c::CUPTI_ERROR_INVALID_OPERATION,
    }
}

/// # Safety
/// `p` is null or a C string.
pub(crate) unsafe fn string<'a>(p: *const c_char) -> Option<&'a str> {
    // SAFETY: by the caller's contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_str().ok()).flatten()
}

/// # Safety
/// `names` holds `n` C strings.
pub(crate) unsafe fn names<'a>(names: *const *const c_char, n: usize) -> Option<Vec<&'a str>> {
    if names.is_null() || n == 0 || n > 4096 {
        return None;
    }
    // SAFETY: by the caller's contract, `names` holds `n` pointers.
    let pointers = unsafe { std::slice::from_raw_parts(names, n) };
    // SAFETY: each is a C string, by the caller's contract.
    pointers.iter().map(|&p| unsafe { string(p) }).collect()
}

/// # Safety
/// `p` points at `len` writable bytes, or is null.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut u8, len: usize) -> Option<&'a mut [u8]> {
    // SAFETY: by the caller's contract.
    (!p.is_null() && len > 0).then(|| unsafe { std::slice::from_raw_parts_mut(p, len) })
}

pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
}

pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

cupti_entry!(
    fn cuptiProfilerInitialize(p: *mut c::CUpti_Profiler_Initialize_Params) {
        if p.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiProfilerDeInitialize(p: *mut c::CUpti_Profiler_DeInitialize_Params) {
        if p.is_null() {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiDeviceGetChipName(p: *mut c::CUpti_Device_GetChipName_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        if p.deviceIndex >= crate::driver::device_count() as usize {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        p.pChipName = CHIP.as_ptr();
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiPmSamplingGetCounterAvailability(p: *mut c::CUpti_PmSampling_GetCounterAvailability_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        if p.deviceIndex >= crate::driver::device_count() as usize {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        if let Some(why) = refusal() {
            return why;
        }
        // The header's two calls: a null image asks for the size.
        if p.pCounterAvailabilityImage.is_null() {
            p.counterAvailabilityImageSize = AVAILABILITY.len();
            return c::CUPTI_SUCCESS;
        }
        // SAFETY: the client passed an image of counterAvailabilityImageSize bytes.
        match unsafe { bytes_mut(p.pCounterAvailabilityImage, p.counterAvailabilityImageSize) } {
            Some(b) if b.len() >= AVAILABILITY.len() => {
                b[..AVAILABILITY.len()].copy_from_slice(AVAILABILITY);
                c::CUPTI_SUCCESS
            }
            _ => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiPmSamplingEnable(p: *mut c::CUpti_PmSampling_Enable_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        let device = p.deviceIndex;
        if device >= crate::driver::device_count() as usize || device >= MAX_DEVICES as usize {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        if let Some(why) = refusal() {
            return why;
        }
        if mode() == "busy" {
            return c::CUPTI_ERROR_HARDWARE_BUSY;
        }
        let mut samplers = SAMPLERS.lock();
        samplers.resize_with(MAX_DEVICES as usize, || None);
        if samplers[device].is_some() {
            return c::CUPTI_ERROR_INVALID_OPERATION;
        }
        samplers[device] = Some(Sampler {
            device: device as u32,
            interval_ns: 0,
            hardware_buffer: 0,
            keep_latest: false,
            configured: false,
            started_at: None,
            stopped_at: None,
            next: 0,
        });
        p.pPmSamplingObject = object_of(device as u32);
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiPmSamplingDisable(p: *mut c::CUpti_PmSampling_Disable_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        let index = (p.pPmSamplingObject as usize).wrapping_sub(1);
        let mut samplers = SAMPLERS.lock();
        match samplers.get_mut(index).and_then(Option::take) {
            Some(s) => {
                pm_counters::set_recording(s.device, false);
                c::CUPTI_SUCCESS
            }
            None => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);

cupti_entry!(
    fn cuptiPmSamplingSetConfig(p: *mut c::CUpti_PmSampling_SetConfig_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        if p.pConfig.is_null()
            || p.configSize < 16
            || p.samplingInterval == 0
            || p.hardwareBufferSize == 0
            || mode() == "invalid"
        {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        // SAFETY: the client passed a config image of configSize bytes.
        let config = unsafe { std::slice::from_raw_parts(p.pConfig, p.configSize) };
        if get_u64(config, 0) != CONFIG_MAGIC {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        if get_u64(config, 8) != 1 {
            return c::CUPTI_ERROR_NOT_SUPPORTED; // "config image which require multiple passes"
        }
        let (interval, buffer, latest) = (
            p.samplingInterval,
            p.hardwareBufferSize as u64,
            p.hwBufferAppendMode == c::CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_LATEST,
        );
        with_sampler(p.pPmSamplingObject, |s| {
            (s.interval_ns, s.hardware_buffer, s.keep_latest, s.configured) = (interval, buffer, latest, true);
            c::CUPTI_SUCCESS
        })
    }
);

cupti_entry!(
    fn cuptiPmSamplingStart(p: *mut c::CUpti_PmSampling_Start_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        with_sampler(p.pPmSamplingObject, |s| {
            if !s.configured || (s.started_at.is_some() && s.stopped_at.is_none()) {
                return c::CUPTI_ERROR_INVALID_OPERATION;
            }
            crate::timing::pm_start_stop(true);
            pm_counters::set_recording(s.device, true);
            (s.started_at, s.stopped_at, s.next) = (Some(crate::now_ns()), None, 0);
            c::CUPTI_SUCCESS
        })
    }
);

cupti_entry!(
    fn cuptiPmSamplingStop(p: *mut c::CUpti_PmSampling_Stop_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        with_sampler(p.pPmSamplingObject, |s| {
            if s.started_at.is_none() || s.stopped_at.is_some() {
                return c::CUPTI_ERROR_INVALID_OPERATION;
            }
            s.stopped_at = Some(crate::now_ns());
            crate::timing::pm_start_stop(false);
            c::CUPTI_SUCCESS
        })
    }
);

cupti_entry!(
    fn cuptiPmSamplingGetCounterDataSize(p: *mut c::CUpti_PmSampling_GetCounterDataSize_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: the client passes numMetrics names.
        let Some(metrics) = (unsafe { names(p.pMetricNames, p.numMetrics) }) else {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        };
        if p.maxSamples == 0 || !metrics.iter().all(|m| is_modelled_metric(m)) {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        p.counterDataSize = DATA_HEADER + p.maxSamples as usize * SAMPLE_BYTES;
        with_sampler(p.pPmSamplingObject, |_| c::CUPTI_SUCCESS)
    }
);

cupti_entry!(
    fn cuptiPmSamplingCounterDataImageInitialize(p: *mut c::CUpti_PmSampling_CounterDataImage_Initialize_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: the client passed an image of counterDataSize bytes.
        let Some(image) = (unsafe { bytes_mut(p.pCounterData, p.counterDataSize) }) else {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        };
        if image.len() < DATA_HEADER + SAMPLE_BYTES {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        }
        let capacity = ((image.len() - DATA_HEADER) / SAMPLE_BYTES) as u64;
        with_sampler(p.pPmSamplingObject, |s| {
            put_u64(image, 0, DATA_MAGIC);
            put_u64(image, 8, capacity);
            put_u64(image, 16, 0);
            put_u64(image, 24, s.device as u64);
            c::CUPTI_SUCCESS
        })
    }
);

/// The image's (capacity, populated samples), or None if it is not an initialised counter data image.
pub(crate) fn image_header(image: &[u8]) -> Option<(u64, u64)> {
    let (capacity, populated) = (get_u64(image, 8), get_u64(image, 16));
    let fits = capacity.checked_mul(SAMPLE_BYTES as u64).and_then(|b| b.checked_add(DATA_HEADER as u64));
    (get_u64(image, 0) == DATA_MAGIC && fits.is_some_and(|b| b <= image.len() as u64) && populated <= capacity)
        .then_some((capacity, populated))
}

pub(crate) fn sample_at(image: &[u8], index: u64) -> (u64, u64, RawCounters) {
    let at = DATA_HEADER + index as usize * SAMPLE_BYTES;
    let mut raw = [0.0; RAW_FIELDS];
    for (i, v) in raw.iter_mut().enumerate() {
        *v = f64::from_bits(get_u64(image, at + 16 + 8 * i));
    }
    (get_u64(image, at), get_u64(image, at + 8), RawCounters::from_array(raw))
}

cupti_entry!(
    fn cuptiPmSamplingDecodeData(p: *mut c::CUpti_PmSampling_DecodeData_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: the client passed an image of counterDataImageSize bytes.
        let Some(image) = (unsafe { bytes_mut(p.pCounterDataImage, p.counterDataImageSize) }) else {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        };
        let Some((capacity, mut populated)) = image_header(image) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        let mut stop = c::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS;
        let mut overflow = false;
        let result = with_sampler(p.pPmSamplingObject, |s| {
            let Some(t0) = s.started_at else { return c::CUPTI_ERROR_INVALID_OPERATION };
            let interval = s.interval_ns.max(1);
            let until = pm_counters::complete_until(s.device, s.stopped_at.unwrap_or_else(crate::now_ns));
            let complete = until.saturating_sub(t0) / interval;
            let room = (s.hardware_buffer / HW_RECORD_BYTES).max(1);
            if complete.saturating_sub(s.next) > room {
                if s.keep_latest {
                    s.next = complete - room;
                } else {
                    overflow = true;
                }
            }
            let to_cupti = crate::activity::cupti_time_converter();
            let last = if overflow { s.next + room } else { complete };
            while s.next < last {
                if populated == capacity {
                    stop = c::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL;
                    break;
                }
                let (from, to) = (t0 + s.next * interval, t0 + (s.next + 1) * interval);
                let raw = pm_counters::counters(s.device, from, to, from);
                let at = DATA_HEADER + populated as usize * SAMPLE_BYTES;
                put_u64(image, at, to_cupti(from));
                put_u64(image, at + 8, to_cupti(to));
                for (i, v) in raw.to_array().into_iter().enumerate() {
                    put_u64(image, at + 16 + 8 * i, v.to_bits());
                }
                populated += 1;
                s.next += 1;
            }
            if overflow {
                s.next = complete; // the newest samples were lost in the full buffer
            }
            c::CUPTI_SUCCESS
        });
        let decoded = populated.saturating_sub(get_u64(image, 16));
        crate::timing::pm_decode(decoded);
        put_u64(image, 16, populated);
        p.decodeStopReason = stop;
        p.overflow = overflow as u8;
        match result {
            c::CUPTI_SUCCESS if overflow => c::CUPTI_ERROR_OUT_OF_MEMORY,
            r => r,
        }
    }
);

cupti_entry!(
    fn cuptiPmSamplingGetCounterDataInfo(p: *mut c::CUpti_PmSampling_GetCounterDataInfo_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: the client passed an image of counterDataImageSize bytes.
        let Some(image) = (unsafe { bytes_mut(p.pCounterDataImage as *mut u8, p.counterDataImageSize) }) else {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        };
        let Some((capacity, populated)) = image_header(image) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        (p.numTotalSamples, p.numPopulatedSamples, p.numCompletedSamples) =
            (capacity as usize, populated as usize, populated as usize);
        c::CUPTI_SUCCESS
    }
);

cupti_entry!(
    fn cuptiPmSamplingCounterDataGetSampleInfo(p: *mut c::CUpti_PmSampling_CounterData_GetSampleInfo_Params) {
        // SAFETY: the client's parameter struct, checked for null.
        let Some(p) = (unsafe { p.as_mut() }) else { return c::CUPTI_ERROR_INVALID_PARAMETER };
        // SAFETY: the client passed an image of counterDataImageSize bytes.
        let Some(image) = (unsafe { bytes_mut(p.pCounterDataImage as *mut u8, p.counterDataImageSize) }) else {
            return c::CUPTI_ERROR_INVALID_PARAMETER;
        };
        match image_header(image) {
            Some((_, populated)) if (p.sampleIndex as u64) < populated => {
                let (start, end, _) = sample_at(image, p.sampleIndex as u64);
                (p.startTimestamp, p.endTimestamp) = (start, end);
                c::CUPTI_SUCCESS
            }
            _ => c::CUPTI_ERROR_INVALID_PARAMETER,
        }
    }
);
