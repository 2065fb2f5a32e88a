//! Device counters while recording (`cuflight record --gpu-metrics`, which sets `CUFLIGHT_GPU_METRICS` to the
//! sampling interval in ns): CUPTI's PM sampling on every device, on a thread of its own. Decoding and evaluating
//! cost host time (33-88 µs and 34-35 µs a sample on an H200, 2026-11-28), so they never run on the program's
//! threads: the sampler decodes every [`DECODE_PERIOD`], evaluates each sample's metrics and writes one
//! [`EventKind::GpuSample`](cuflight_format::EventKind::GpuSample) per sample into the delivery ring, on the clock
//! device records use. Its verdict, its sample and overflow counts and the CPU time it spent are in the segment
//! header; where the counters are refused (privileges, another tool, MIG, an old CUPTI) the recording goes on
//! without them and the verdict says why.

mod device;

use crate::{clock, cupti, devices, state, thread_rings};
use cuflight_format::gpu_counters as verdict;
use cuflight_format::RawEvent;
use cupti_sys::pm_sampling::PmSamplingApi;
use device::DeviceSampler;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the sampler decodes: at 10 kHz, 200 samples a time, within the image's 256. Also the most one pass
/// over a device decodes for, so that every device and the counts in the segment keep up while it is behind.
const DECODE_PERIOD: Duration = Duration::from_millis(20);
/// The most the last pass, after Stop, decodes for: within [`finish`]'s wait, however long the backlog.
const FINAL_DRAIN: Duration = Duration::from_millis(1000);
/// Devices sampled at most (each holds a counter data image of about 9 MB).
const MAX_DEVICES: u32 = 16;

static STOP: AtomicBool = AtomicBool::new(false);
static THREAD: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// The sampling interval asked for (`CUFLIGHT_GPU_METRICS`, ns; 0: no counters). Bounded to 1 µs..1 s: CUPTI
/// accepts finer, but below 1 µs the decoding alone would outrun a core.
pub fn interval_ns() -> u64 {
    std::env::var("CUFLIGHT_GPU_METRICS").ok().and_then(|v| v.trim().parse::<u64>().ok()).map_or(0, |ns| {
        if ns == 0 {
            0
        } else {
            ns.clamp(1_000, 1_000_000_000)
        }
    })
}

fn set_verdict(code: u32, result: u32, holder: u32) {
    if let Some(seg) = state::segment() {
        seg.header().gpu_counters.store(verdict::encode(code, result, holder), Ordering::Relaxed);
    }
}

/// Starts the sampler when counters were asked for (once a recording window; a new window starts it again).
pub fn start(api: Option<PmSamplingApi>) {
    let interval = interval_ns();
    if interval == 0 {
        return;
    }
    let Some(api) = api else {
        set_verdict(verdict::NO_API, 0, 0);
        return;
    };
    let mut thread = THREAD.lock();
    match thread.take() {
        Some(h) if h.is_finished() => {
            let _ = h.join();
        }
        Some(h) => {
            // Sampling already (started twice in one window), or the last window's sampler still finishing.
            *thread = Some(h);
            if STOP.load(Ordering::Acquire) {
                set_verdict(verdict::STILL_FINISHING, 0, 0);
            }
            return;
        }
        None => {}
    }
    // At exit the sampler writes what the hardware buffer still holds before the final flush takes the last
    // records: registered after that flush's handler (`cupti::flush_at_exit`, at set-up), so it runs first.
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: registering a plain extern "C" handler with libc.
        unsafe { libc::atexit(at_exit) };
    });
    STOP.store(false, Ordering::Release);
    let spawned = std::thread::Builder::new().name("cuflight-counters".into()).spawn(move || {
        let _ = std::panic::catch_unwind(|| run(api, interval));
    });
    match spawned {
        Ok(h) => *thread = Some(h),
        Err(_) => set_verdict(verdict::FAILED, 0, 0),
    }
}

/// Stops sampling and waits (at most 2 s) for the sampler to write what the hardware buffer still held: at exit,
/// before the final flush, and when a window ends.
pub fn finish() {
    STOP.store(true, Ordering::Release);
    let mut thread = THREAD.lock();
    let Some(handle) = thread.as_ref() else { return };
    let deadline = Instant::now() + Duration::from_secs(2);
    while !handle.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    // One still finishing stays here (a late CUPTI call): the next window must not start a second sampler on
    // devices this one has not closed yet, which CUPTI refuses (INVALID_OPERATION).
    if handle.is_finished() {
        if let Some(h) = thread.take() {
            let _ = h.join();
        }
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(finish);
}

/// Sleeps until the next decode or until asked to stop; true when stopping.
fn wait(period: Duration) -> bool {
    let until = Instant::now() + period;
    while Instant::now() < until {
        if STOP.load(Ordering::Acquire) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2).min(period));
    }
    STOP.load(Ordering::Acquire)
}

fn run(api: PmSamplingApi, interval: u64) {
    thread_rings::mark_agent_thread();
    // Until a device samples, the verdict says how far the set-up got: what the recording reads if the program ends
    // (or the window closes) first, even while a CUPTI call of the set-up still runs.
    let sampling = Cell::new(false);
    let progress = |step: verdict::Step| {
        if !sampling.get() {
            set_verdict(verdict::ENDED_EARLY, 0, step.into());
        }
        !STOP.load(Ordering::Acquire)
    };
    // The driver is initialising when the agent starts (InitializeInjection runs inside cuInit): wait until it
    // answers for its devices.
    let count = loop {
        if !progress(0) {
            return;
        }
        if let Some(n) = devices::count().filter(|&n| n > 0) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let cpu0 = thread_cpu_ns();
    let mut samplers = Vec::new();
    let mut refused = None;
    {
        let _cupti = cupti::calls_shared();
        let mut init = cupti_sys::cuda13::CUpti_Profiler_Initialize_Params {
            structSize: std::mem::size_of::<cupti_sys::cuda13::CUpti_Profiler_Initialize_Params>(),
            pPriv: std::ptr::null_mut(),
        };
        let initialize = verdict::step("cuptiProfilerInitialize");
        if !progress(initialize) {
            return;
        }
        // SAFETY: a valid parameter struct.
        let r = unsafe { (api.profiler_initialize)(&mut init) };
        if r != cupti_sys::cuda13::CUPTI_SUCCESS {
            refused = Some(ended_early_if_stopping((verdict::FAILED, r, initialize)));
        } else {
            for d in 0..count.min(MAX_DEVICES) {
                match DeviceSampler::open(api, d, interval, &progress) {
                    Ok(s) => {
                        samplers.push(s);
                        sampling.set(true);
                    }
                    // Asked to stop: no further device.
                    Err(why) if why.0 == verdict::ENDED_EARLY => {
                        refused.get_or_insert(why);
                        break;
                    }
                    Err(why) => {
                        refused.get_or_insert(ended_early_if_stopping(why));
                    }
                }
            }
        }
    }
    match (samplers.is_empty(), refused) {
        (true, Some((code, r, step))) if code == verdict::ENDED_EARLY => {
            set_verdict(verdict::ENDED_EARLY, r, step.into())
        }
        (true, Some((code, r, step))) => {
            // BUSY names who holds the counters; the other refusals, the call that refused.
            let holder = if code == verdict::BUSY { counter_holder() } else { u32::from(step) };
            set_verdict(code, r, holder);
        }
        (true, None) => set_verdict(verdict::FAILED, 0, 0),
        (false, _) => set_verdict(verdict::SAMPLING, 0, 0),
    }
    add_cost(cpu0);
    let mut behind = false;
    loop {
        // Behind (samples still waiting when the last pass's time ran out): decode again at once, taking up to
        // a core rather than losing samples; the hardware buffer overflows only past that.
        let stopping = if behind { STOP.load(Ordering::Acquire) } else { wait(DECODE_PERIOD) };
        let cpu0 = thread_cpu_ns();
        behind = false;
        {
            let _cupti = cupti::calls_shared();
            for s in samplers.iter_mut() {
                if stopping {
                    s.stop();
                }
                let budget = if stopping { FINAL_DRAIN } else { DECODE_PERIOD };
                behind |= drain(s, Instant::now() + budget, stopping);
            }
        }
        add_cost(cpu0);
        if stopping {
            break;
        }
    }
    let _cupti = cupti::calls_shared();
    for s in samplers {
        s.close();
    }
}

/// A call that failed once the program was ending (or the window closing) is not the GPU's refusal: at exit the
/// driver may already be tearing down what the set-up needs. A named refusal (privileges, another tool, MIG,
/// unsupported) stays what it is, and so does a failure from before the stop.
fn ended_early_if_stopping(why: device::Refusal) -> device::Refusal {
    match why {
        (verdict::FAILED, r, step) if STOP.load(Ordering::Acquire) => (verdict::ENDED_EARLY, r, step),
        other => other,
    }
}

/// Writes one device's decoded samples on the clock device records use, decoding until `until` at most; true
/// when samples still wait. What a last drain (`stopping`) leaves undecoded is lost, and counted as an overflow.
fn drain(s: &mut DeviceSampler, until: Instant, stopping: bool) -> bool {
    let Some(seg) = state::segment() else { return false };
    let header = seg.header();
    let mut shift: Option<i64> = None;
    let device = s.device;
    let result = s.drain(until, &mut |start, end, sample| {
        let offset =
            *shift.get_or_insert_with(|| clock_shift(end, header.device_clock_monotonic.load(Ordering::Relaxed) != 0));
        let (start, end) = (start.wrapping_add_signed(offset), end.wrapping_add_signed(offset));
        // The sampler's own ring, which waits for room when full: a burst of hundreds of samples in the delivery
        // ring (CUPTI's records' ring) overflowed it at 20 kHz and dropped kernel records with the samples.
        thread_rings::push(RawEvent::gpu_sample(device, start, end, sample));
        // Counted as written: a window's collector may read the count while a long drain goes on.
        header.gpu_samples.fetch_add(1, Ordering::Relaxed);
    });
    let Ok(drained) = result else { return false };
    if drained.overflowed || (stopping && drained.behind) {
        header.gpu_sample_overflows.fetch_add(1, Ordering::Relaxed);
    }
    drained.behind
}

/// What to add to a sample's timestamps to put them on the device records' clock: CLOCK_MONOTONIC when the agent
/// registered its timestamp callback, else CUPTI's default, CLOCK_REALTIME. Which clock PM samples are stamped
/// with is not documented: the sample's end lies just before "now" on its own clock, so it tells.
fn clock_shift(sample_end: u64, records_monotonic: bool) -> i64 {
    let (mono, real) = (clock::monotonic_ns(), clock::realtime_ns());
    let on_realtime = real.abs_diff(sample_end) < mono.abs_diff(sample_end);
    match (on_realtime, records_monotonic) {
        (true, true) => mono as i64 - real as i64,
        (false, false) => real as i64 - mono as i64,
        _ => 0,
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn add_cost(cpu0: u64) {
    if let Some(seg) = state::segment() {
        seg.header().gpu_sampling_ns.fetch_add(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
    }
}

/// Which of the tools that hold GPU counters runs on this machine (an index into [`verdict::HOLDERS`] + 1; 0
/// none found): a look at each process's name once, when CUPTI said the counters were busy.
fn counter_holder() -> u32 {
    const NAMES: [&str; 4] = verdict::HOLDER_PROCESSES;
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut found = 0u32;
    for entry in dir.flatten().take(100_000) {
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else { continue };
        if let Some(i) = NAMES.iter().position(|n| comm.trim() == *n) {
            let i = i as u32 + 1;
            found = if found == 0 { i } else { found.min(i) };
        }
    }
    found
}
