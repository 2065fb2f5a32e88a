//! One device's PM sampling, in the order the CUPTI guide's PM sampling section and NVIDIA's `pm_sampling` sample
//! set it up: the chip's name and counter availability, Enable, a profiler host object for the chip with the
//! metrics added (those the chip refuses, or that would need a second pass, are left out), its configuration
//! image, SetConfig, a counter data image, Start; then Decode into the image, each completed sample's times and
//! values, and the image initialised again. Every call is made off the program's threads, by the sampler.

use cuflight_format::gpu_counters as verdict;
use cuflight_format::view::GpuSample;
use cupti_sys::cuda13 as c;
use cupti_sys::pm_sampling::PmSamplingApi;
use std::ffi::{c_char, CStr};
use std::time::Instant;

/// What cuflight samples, under the names one pass held together on an H200 (GH100, 2026-11-28,
/// tests/gpu/pm_sampling.cu): SM active and elapsed cycles, tensor pipes, DRAM read and write throughput,
/// the graphics engine's active and elapsed cycles, and PCIe bytes each way.
const METRICS: [&CStr; 9] = [
    c"sm__cycles_active.avg",
    c"sm__cycles_elapsed.avg",
    c"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    c"dram__read_throughput.avg.pct_of_peak_sustained_elapsed",
    c"dram__write_throughput.avg.pct_of_peak_sustained_elapsed",
    c"gr__cycles_active.avg",
    c"gr__cycles_elapsed.max",
    c"pcie__read_bytes.sum",
    c"pcie__write_bytes.sum",
];

/// Samples a counter data image holds: at 35.5 KB a sample (measured on the H200) about 9 MB a device.
const IMAGE_SAMPLES: u32 = 256;
/// The hardware buffer the raw samples wait in until decoded.
const HARDWARE_BUFFER_BYTES: usize = 64 << 20;

/// Why a device gives no counters: a [`verdict`] code, the CUPTI result behind it, and the call that gave it.
pub type Refusal = (u32, c::CUptiResult, verdict::Step);

/// CUPTI's parameter struct `$ty`, zeroed, its `structSize` the header's `*_STRUCT_SIZE` (the end of `$last`).
macro_rules! params {
    ($ty:ident, $last:ident) => {{
        // SAFETY: CUPTI's parameter structs are plain C data: all-zero is valid (null pointers, zero sizes).
        let mut p: c::$ty = unsafe { std::mem::zeroed() };
        p.structSize = std::mem::offset_of!(c::$ty, $last) + field_size(|q: &c::$ty| &q.$last);
        p
    }};
}

fn field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

fn refusal(step: verdict::Step, r: c::CUptiResult) -> Refusal {
    let code = match r {
        c::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES | c::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => {
            verdict::DENIED
        }
        c::CUPTI_ERROR_HARDWARE_BUSY => verdict::BUSY,
        c::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED => verdict::MIG,
        c::CUPTI_ERROR_NOT_SUPPORTED | c::CUPTI_ERROR_INVALID_METRIC_NAME | c::CUPTI_ERROR_NOT_COMPATIBLE => {
            verdict::UNSUPPORTED
        }
        _ => verdict::FAILED,
    };
    (code, r, step)
}

const CHIP_NAME: verdict::Step = verdict::step("cuptiDeviceGetChipName");
const AVAILABILITY: verdict::Step = verdict::step("cuptiPmSamplingGetCounterAvailability");
const ENABLE: verdict::Step = verdict::step("cuptiPmSamplingEnable");
const HOST_INITIALIZE: verdict::Step = verdict::step("cuptiProfilerHostInitialize");
const ADD_METRICS: verdict::Step = verdict::step("cuptiProfilerHostConfigAddMetrics");
const CONFIG_IMAGE_SIZE: verdict::Step = verdict::step("cuptiProfilerHostGetConfigImageSize");
const CONFIG_IMAGE: verdict::Step = verdict::step("cuptiProfilerHostGetConfigImage");
const PASSES: verdict::Step = verdict::step("cuptiProfilerHostGetNumOfPasses");
const SET_CONFIG: verdict::Step = verdict::step("cuptiPmSamplingSetConfig");
const DATA_SIZE: verdict::Step = verdict::step("cuptiPmSamplingGetCounterDataSize");
const IMAGE_INITIALIZE: verdict::Step = verdict::step("cuptiPmSamplingCounterDataImageInitialize");
const START: verdict::Step = verdict::step("cuptiPmSamplingStart");
const DECODE: verdict::Step = verdict::step("cuptiPmSamplingDecodeData");
const DATA_INFO: verdict::Step = verdict::step("cuptiPmSamplingGetCounterDataInfo");

/// Told the set-up's next call before it is made; false when the sampler was asked to stop meanwhile (the program
/// exiting, the window closing).
pub type Progress<'a> = &'a dyn Fn(verdict::Step) -> bool;

/// Before the call `step` of the set-up: the set-up goes no further once asked to stop, since its calls may take
/// long and, at exit, would run while the process tears itself down.
fn checkpoint(progress: Progress, step: verdict::Step) -> Result<(), Refusal> {
    if progress(step) {
        Ok(())
    } else {
        Err((verdict::ENDED_EARLY, c::CUPTI_SUCCESS, step))
    }
}

/// The result of the call `step` (a [`verdict::STEPS`] number).
fn ok(step: verdict::Step, r: c::CUptiResult) -> Result<(), Refusal> {
    if r == c::CUPTI_SUCCESS {
        Ok(())
    } else {
        Err(refusal(step, r))
    }
}

/// What one [`DeviceSampler::drain`] found.
pub struct Drained {
    /// The hardware buffer overflowed: samples were lost.
    pub overflowed: bool,
    /// Time ran out with samples still waiting: the sampler decodes slower than the device samples.
    pub behind: bool,
}

/// A host object with a configuration built for some of [`METRICS`].
struct HostConfig {
    host: *mut c::CUpti_Profiler_Host_Object,
    image: Vec<u8>,
    passes: usize,
}

pub struct DeviceSampler {
    api: PmSamplingApi,
    pub device: u32,
    object: *mut c::CUpti_PmSampling_Object,
    config: HostConfig,
    names: Vec<*const c_char>,
    image: Vec<u8>,
    values: Vec<f64>,
    /// Where each of [`METRICS`] is in `names` (None: left out).
    slot: [Option<usize>; METRICS.len()],
    running: bool,
    /// The first sample after Start is still to be dropped: its start lay before Start on the H200 (2026-11-28,
    /// tests/gpu/pm_sampling.cu), so its interval and counters are not the ones its times say.
    first_pending: bool,
}

// SAFETY: the pointers are CUPTI handles and C strings of 'static metrics, used by the sampler thread alone.
unsafe impl Send for DeviceSampler {}

impl DeviceSampler {
    /// Sets up and starts sampling device `device` every `interval_ns`, telling `progress` each stage first.
    pub fn open(
        api: PmSamplingApi,
        device: u32,
        interval_ns: u64,
        progress: Progress,
    ) -> Result<DeviceSampler, Refusal> {
        checkpoint(progress, CHIP_NAME)?;
        let mut chip = params!(CUpti_Device_GetChipName_Params, pChipName);
        chip.deviceIndex = device as usize;
        // SAFETY: a valid parameter struct.
        ok(CHIP_NAME, unsafe { (api.device_get_chip_name)(&mut chip) })?;
        if chip.pChipName.is_null() {
            return Err((verdict::FAILED, c::CUPTI_ERROR_UNKNOWN, CHIP_NAME));
        }
        let availability = counter_availability(&api, device)?;
        checkpoint(progress, ENABLE)?;
        let mut enable = params!(CUpti_PmSampling_Enable_Params, pPmSamplingObject);
        enable.deviceIndex = device as usize;
        // SAFETY: a valid parameter struct.
        ok(ENABLE, unsafe { (api.enable)(&mut enable) })?;
        let object = enable.pPmSamplingObject;
        let disable = || {
            let mut p = params!(CUpti_PmSampling_Disable_Params, pPmSamplingObject);
            p.pPmSamplingObject = object;
            // SAFETY: a valid parameter struct naming the object Enable gave.
            unsafe { (api.disable)(&mut p) };
        };
        let (config, chosen) = match choose_metrics(&api, chip.pChipName, &availability, progress) {
            Ok(c) => c,
            Err(why) => {
                disable();
                return Err(why);
            }
        };
        let mut s = DeviceSampler {
            api,
            device,
            object,
            config,
            names: chosen.iter().map(|&i| METRICS[i].as_ptr()).collect(),
            image: Vec::new(),
            values: vec![0.0; chosen.len()],
            slot: [None; METRICS.len()],
            running: false,
            first_pending: true,
        };
        for (at, &i) in chosen.iter().enumerate() {
            s.slot[i] = Some(at);
        }
        let started = checkpoint(progress, SET_CONFIG)
            .and_then(|()| s.configure(interval_ns))
            .and_then(|()| checkpoint(progress, START))
            .and_then(|()| s.start());
        if let Err(why) = started {
            s.close();
            return Err(why);
        }
        Ok(s)
    }

    fn configure(&mut self, interval_ns: u64) -> Result<(), Refusal> {
        let mut set = params!(CUpti_PmSampling_SetConfig_Params, hwBufferAppendMode);
        set.pPmSamplingObject = self.object;
        set.configSize = self.config.image.len();
        set.pConfig = self.config.image.as_ptr();
        set.hardwareBufferSize = HARDWARE_BUFFER_BYTES;
        set.samplingInterval = interval_ns;
        set.triggerMode = c::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
        // Keep the oldest: an overflow is then reported (and counted) rather than silently replacing samples.
        set.hwBufferAppendMode = c::CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
        // SAFETY: a valid parameter struct; the config image outlives the call.
        let mut r = unsafe { (self.api.set_config)(&mut set) };
        if r == c::CUPTI_ERROR_NOT_SUPPORTED {
            // Turing and GA100 sample by system clock cycles only (cupti_pmsampling.h): at a system clock of
            // about 1 GHz, as many cycles as ns.
            set.triggerMode = c::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL;
            // SAFETY: as above.
            r = unsafe { (self.api.set_config)(&mut set) };
        }
        ok(SET_CONFIG, r)?;
        let mut size = params!(CUpti_PmSampling_GetCounterDataSize_Params, counterDataSize);
        size.pPmSamplingObject = self.object;
        size.pMetricNames = self.names.as_mut_ptr();
        size.numMetrics = self.names.len();
        size.maxSamples = IMAGE_SAMPLES;
        // SAFETY: a valid parameter struct; the names outlive the call.
        ok(DATA_SIZE, unsafe { (self.api.get_counter_data_size)(&mut size) })?;
        // Bounded: an answer past 64 MB a device is not an image size cuflight will allocate.
        if size.counterDataSize == 0 || size.counterDataSize > 64 << 20 {
            return Err((verdict::FAILED, c::CUPTI_ERROR_UNKNOWN, DATA_SIZE));
        }
        self.image = vec![0; size.counterDataSize];
        self.initialize_image()
    }

    fn initialize_image(&mut self) -> Result<(), Refusal> {
        let mut init = params!(CUpti_PmSampling_CounterDataImage_Initialize_Params, pCounterData);
        init.pPmSamplingObject = self.object;
        init.counterDataSize = self.image.len();
        init.pCounterData = self.image.as_mut_ptr();
        // SAFETY: a valid parameter struct over our image.
        ok(IMAGE_INITIALIZE, unsafe { (self.api.counter_data_image_initialize)(&mut init) })
    }

    fn start(&mut self) -> Result<(), Refusal> {
        let mut p = params!(CUpti_PmSampling_Start_Params, pPmSamplingObject);
        p.pPmSamplingObject = self.object;
        // SAFETY: a valid parameter struct.
        ok(START, unsafe { (self.api.start)(&mut p) })?;
        self.running = true;
        Ok(())
    }

    /// Stops sampling (what is in the hardware buffer can still be decoded).
    pub fn stop(&mut self) {
        if std::mem::take(&mut self.running) {
            let mut p = params!(CUpti_PmSampling_Stop_Params, pPmSamplingObject);
            p.pPmSamplingObject = self.object;
            // SAFETY: a valid parameter struct.
            unsafe { (self.api.stop)(&mut p) };
        }
    }

    /// Decodes what the hardware buffer holds, until `until` at most, handing each completed sample's CUPTI start
    /// and end and counters to `out`.
    pub fn drain(&mut self, until: Instant, out: &mut impl FnMut(u64, u64, GpuSample)) -> Result<Drained, Refusal> {
        let mut overflowed = false;
        loop {
            let mut decode = params!(CUpti_PmSampling_DecodeData_Params, overflow);
            decode.pPmSamplingObject = self.object;
            decode.pCounterDataImage = self.image.as_mut_ptr();
            decode.counterDataImageSize = self.image.len();
            // SAFETY: a valid parameter struct over our image.
            let r = unsafe { (self.api.decode_data)(&mut decode) };
            // OUT_OF_MEMORY: the hardware buffer overflowed; what was decoded is still good.
            if r != c::CUPTI_ERROR_OUT_OF_MEMORY {
                ok(DECODE, r)?;
            }
            overflowed |= decode.overflow != 0 || r == c::CUPTI_ERROR_OUT_OF_MEMORY;
            let completed = self.completed_samples()?;
            for i in 0..completed {
                if std::mem::take(&mut self.first_pending) {
                    continue;
                }
                if let Some((start, end, sample)) = self.sample(i) {
                    out(start, end, sample);
                }
            }
            self.initialize_image()?;
            if decode.decodeStopReason != c::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL || completed == 0 {
                return Ok(Drained { overflowed, behind: false });
            }
            // More waits than the time allowed: the hardware keeps filling faster than this thread decodes.
            if Instant::now() >= until {
                return Ok(Drained { overflowed, behind: true });
            }
        }
    }

    fn completed_samples(&self) -> Result<usize, Refusal> {
        let mut info = params!(CUpti_PmSampling_GetCounterDataInfo_Params, numCompletedSamples);
        info.pCounterDataImage = self.image.as_ptr();
        info.counterDataImageSize = self.image.len();
        // SAFETY: a valid parameter struct over our image.
        ok(DATA_INFO, unsafe { (self.api.get_counter_data_info)(&mut info) })?;
        // Bounded by the image's own capacity: CUPTI's answer is not trusted to index past it.
        Ok(info.numCompletedSamples.min(IMAGE_SAMPLES as usize))
    }

    fn sample(&mut self, index: usize) -> Option<(u64, u64, GpuSample)> {
        let mut info = params!(CUpti_PmSampling_CounterData_GetSampleInfo_Params, endTimestamp);
        info.pPmSamplingObject = self.object;
        info.pCounterDataImage = self.image.as_ptr();
        info.counterDataImageSize = self.image.len();
        info.sampleIndex = index;
        // SAFETY: a valid parameter struct over our image.
        if unsafe { (self.api.counter_data_get_sample_info)(&mut info) } != c::CUPTI_SUCCESS {
            return None;
        }
        let mut eval = params!(CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues);
        eval.pHostObject = self.config.host;
        eval.pCounterDataImage = self.image.as_ptr();
        eval.counterDataImageSize = self.image.len();
        eval.rangeIndex = index;
        eval.ppMetricNames = self.names.as_mut_ptr();
        eval.numMetrics = self.names.len();
        eval.pMetricValues = self.values.as_mut_ptr();
        // SAFETY: a valid parameter struct; `values` holds one double per name.
        if unsafe { (self.api.host_evaluate_to_gpu_values)(&mut eval) } != c::CUPTI_SUCCESS {
            return None;
        }
        Some((info.startTimestamp, info.endTimestamp, self.to_sample()))
    }

    /// The evaluated values as fractions of peak.
    fn to_sample(&self) -> GpuSample {
        let value = |i: usize| self.slot[i].map(|at| self.values[at]).filter(|v| v.is_finite() && *v >= 0.0);
        let ratio = |active: usize, elapsed: usize| match (value(active), value(elapsed)) {
            (Some(a), Some(e)) if e > 0.0 => Some(a / e),
            _ => None,
        };
        let pct = |i: usize| value(i).map(|v| v / 100.0);
        GpuSample {
            sm_active: ratio(0, 1),
            tensor_active: pct(2),
            dram_read: pct(3),
            dram_write: pct(4),
            gpu_active: ratio(5, 6),
            pcie_bytes: value(7).zip(value(8)).map(|(r, w)| (r as u64, w as u64)),
        }
    }

    /// Stops sampling and releases the device's PM sampling object and the host object.
    pub fn close(mut self) {
        self.stop();
        let mut p = params!(CUpti_PmSampling_Disable_Params, pPmSamplingObject);
        p.pPmSamplingObject = self.object;
        // SAFETY: a valid parameter struct naming the object Enable gave.
        unsafe { (self.api.disable)(&mut p) };
        drop_host(&self.api, self.config.host);
    }
}

fn counter_availability(api: &PmSamplingApi, device: u32) -> Result<Vec<u8>, Refusal> {
    let mut avail = params!(CUpti_PmSampling_GetCounterAvailability_Params, pCounterAvailabilityImage);
    avail.deviceIndex = device as usize;
    // SAFETY: a valid parameter struct; a null image asks for the size.
    ok(AVAILABILITY, unsafe { (api.get_counter_availability)(&mut avail) })?;
    if avail.counterAvailabilityImageSize > 16 << 20 {
        return Err((verdict::FAILED, c::CUPTI_ERROR_UNKNOWN, AVAILABILITY));
    }
    let mut image = vec![0u8; avail.counterAvailabilityImageSize];
    avail.pCounterAvailabilityImage = image.as_mut_ptr();
    // SAFETY: as above, with an image of the size CUPTI asked for.
    ok(AVAILABILITY, unsafe { (api.get_counter_availability)(&mut avail) })?;
    Ok(image)
}

fn drop_host(api: &PmSamplingApi, host: *mut c::CUpti_Profiler_Host_Object) {
    if host.is_null() {
        return;
    }
    let mut p = params!(CUpti_Profiler_Host_Deinitialize_Params, pHostObject);
    p.pHostObject = host;
    // SAFETY: a valid parameter struct naming a host object CUPTI gave.
    unsafe { (api.host_deinitialize)(&mut p) };
}

/// A host object for `chip` with `metrics` (indices into [`METRICS`]) and its configuration.
fn host_config(
    api: &PmSamplingApi,
    chip: *const c_char,
    availability: &[u8],
    metrics: &[usize],
) -> Result<HostConfig, Refusal> {
    let mut init = params!(CUpti_Profiler_Host_Initialize_Params, pSinglePassMetricSetName);
    init.profilerType = c::CUPTI_PROFILER_TYPE_PM_SAMPLING;
    init.pChipName = chip;
    init.pCounterAvailabilityImage = availability.as_ptr();
    // SAFETY: a valid parameter struct; the chip name and availability image outlive the call.
    ok(HOST_INITIALIZE, unsafe { (api.host_initialize)(&mut init) })?;
    let mut config = HostConfig { host: init.pHostObject, image: Vec::new(), passes: 0 };
    let built = (|| {
        let mut names: Vec<*const c_char> = metrics.iter().map(|&i| METRICS[i].as_ptr()).collect();
        let mut add = params!(CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);
        add.pHostObject = config.host;
        add.ppMetricNames = names.as_mut_ptr();
        add.numMetrics = names.len();
        // SAFETY: a valid parameter struct; the names outlive the call.
        ok(ADD_METRICS, unsafe { (api.host_config_add_metrics)(&mut add) })?;
        let mut size = params!(CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize);
        size.pHostObject = config.host;
        // SAFETY: a valid parameter struct.
        ok(CONFIG_IMAGE_SIZE, unsafe { (api.host_get_config_image_size)(&mut size) })?;
        if size.configImageSize == 0 || size.configImageSize > 64 << 20 {
            return Err((verdict::FAILED, c::CUPTI_ERROR_UNKNOWN, CONFIG_IMAGE_SIZE));
        }
        config.image = vec![0; size.configImageSize];
        let mut get = params!(CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);
        get.pHostObject = config.host;
        get.configImageSize = config.image.len();
        get.pConfigImage = config.image.as_mut_ptr();
        // SAFETY: a valid parameter struct over our image.
        ok(CONFIG_IMAGE, unsafe { (api.host_get_config_image)(&mut get) })?;
        let mut passes = params!(CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);
        passes.configImageSize = config.image.len();
        passes.pConfigImage = config.image.as_mut_ptr();
        // SAFETY: as above.
        ok(PASSES, unsafe { (api.host_get_num_of_passes)(&mut passes) })?;
        config.passes = passes.numOfPasses;
        Ok(())
    })();
    match built {
        Ok(()) => Ok(config),
        Err(why) => {
            drop_host(api, config.host);
            Err(why)
        }
    }
}

/// All of [`METRICS`] in one pass where the chip takes them; else, as many as one pass holds, in their order.
fn choose_metrics(
    api: &PmSamplingApi,
    chip: *const c_char,
    availability: &[u8],
    progress: Progress,
) -> Result<(HostConfig, Vec<usize>), Refusal> {
    checkpoint(progress, HOST_INITIALIZE)?;
    let all: Vec<usize> = (0..METRICS.len()).collect();
    let mut last = match host_config(api, chip, availability, &all) {
        Ok(c) if c.passes == 1 => return Ok((c, all)),
        Ok(c) => {
            drop_host(api, c.host);
            (verdict::UNSUPPORTED, c::CUPTI_ERROR_NOT_SUPPORTED, PASSES)
        }
        Err(why) => why,
    };
    let mut chosen: Vec<usize> = Vec::new();
    for i in all {
        checkpoint(progress, HOST_INITIALIZE)?;
        let trial: Vec<usize> = chosen.iter().copied().chain([i]).collect();
        match host_config(api, chip, availability, &trial) {
            Ok(c) => {
                if c.passes == 1 {
                    chosen = trial;
                }
                drop_host(api, c.host);
            }
            Err(why) => last = why,
        }
    }
    if chosen.is_empty() {
        return Err(last);
    }
    checkpoint(progress, HOST_INITIALIZE)?;
    let config = host_config(api, chip, availability, &chosen)?;
    Ok((config, chosen))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The struct sizes the parameters carry are the header's `*_STRUCT_SIZE`s: the end of the last field,
    /// without the trailing padding `size_of` would add.
    #[test]
    fn struct_sizes_are_the_headers() {
        let decode = params!(CUpti_PmSampling_DecodeData_Params, overflow);
        assert_eq!(decode.structSize, std::mem::offset_of!(c::CUpti_PmSampling_DecodeData_Params, overflow) + 1);
        assert!(decode.structSize < std::mem::size_of::<c::CUpti_PmSampling_DecodeData_Params>());
        let enable = params!(CUpti_PmSampling_Enable_Params, pPmSamplingObject);
        assert_eq!(enable.structSize, std::mem::size_of::<c::CUpti_PmSampling_Enable_Params>());
    }
}
