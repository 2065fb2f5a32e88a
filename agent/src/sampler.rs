//! `cuflight record --sample 1/N`: one step of every N recorded whole, CUPTI quiet in between.
//!
//! CUPTI is set up once, at `InitializeInjection`, then paused at once: our callbacks and activity kinds are
//! disabled, which is what CUPTI costs nothing for (cupti_callbacks.h, `cuptiEnableDomain`: "enable or disable
//! all callbacks in a domain"; cupti_activity.h, `cuptiActivityDisable`). Steps are found by the program's own
//! ranges (the step-name rule of `cuflight_format::step_names`, NVTX push/pop and start/end, or
//! `cuflight.step()`), which reach the agent through NVTX injection without CUPTI. In each block of N steps one
//! is chosen at random (stratified: no period of the program's, an evaluation every 10 steps say, lines up with
//! the choice) and recorded from its start to its end; a `Sampled` event then states what was recorded. Re-arming
//! only enables what was disabled: CUPTI is not initialised again for each step (its set-up took 15 ms a window
//! on an H200, issue 52).
//!
//! A program that marks no step is sampled in time slices (a second) instead (one in N, chosen the same way), until
//! its first step, from a thread of the agent's own.
//!
//! While paused only the step ranges themselves are kept (every step's host time is in the trace, so the report
//! knows how many steps ran and how long each took); the program's other NVTX ranges and marks are not.
//!
//! The same step boundaries serve the flight recorder's slow-step dumps ([`crate::slow_steps`]) where no step is
//! sampled: steps are then only timed, each thread's own ([`crate::open_steps`]), and every range is kept.
//!
//! The kernels a recorded step launched may still run when it ends: activity kinds are disabled only when the
//! next step starts (or at the next chosen step's end), the callbacks at once. What CUPTI delivers between is
//! kept by the collector only where it belongs to a recorded step's calls.

use crate::open_steps::{self, Slot};
use crate::thread_rings::{self, ThreadState};
use crate::{clock, slow_steps};
use cuflight_format::{EventKind, RawEvent};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// N of `--sample 1/N` (0: not sampling).
static ONE_IN: AtomicU32 = AtomicU32::new(0);
/// Whether the current step is recorded (the program's NVTX ranges are then kept whole).
static RECORDING: AtomicBool = AtomicBool::new(false);

/// The step sampling follows, read without the lock by every NVTX call while sampling (written under it): none, a
/// push/pop range (ending when its domain's depth on thread `tid` falls back to `depth`) or a start/end range
/// (also `cuflight.step()`'s). One process-wide: CUPTI is armed for the whole process, whichever thread steps.
const NONE: u8 = 0;
const PUSHED: u8 = 1;
const STARTED: u8 = 2;
static OPEN_KIND: AtomicU8 = AtomicU8::new(NONE);
/// PUSHED: tid << 32 | depth; STARTED: the range id.
static OPEN_KEY: AtomicU64 = AtomicU64::new(0);
static OPEN_DOMAIN: AtomicU32 = AtomicU32::new(0);

/// Taken only where a step or time slice begins or ends, never on a plain NVTX call.
struct Sampler {
    /// The step's start and index (from 0, counted from the run's first step).
    started_ns: u64,
    index: u64,
    /// Steps begun.
    steps: u64,
    /// The step of the current block of N that is recorded.
    chosen: u64,
    /// Activity kinds are still enabled after a recorded step's end (its kernels may still run).
    kinds_on: bool,
    /// CUPTI was enabled again for the next step, the one chosen.
    armed: bool,
    /// What the choices derive from: the same in every process of one `record` (`CUFLIGHT_SAMPLE_SEED`), so the
    /// ranks of a job record the same steps.
    seed: u64,
    /// Until the program's first step: one-second slices begun, the one chosen in the current block, and
    /// whether one is being recorded.
    slices: u64,
    slice_chosen: u64,
    slice_recording: bool,
}

static SAMPLER: Mutex<Sampler> = Mutex::new(Sampler {
    started_ns: 0,
    index: 0,
    steps: 0,
    chosen: 0,
    kinds_on: false,
    armed: false,
    seed: 0,
    slices: 0,
    slice_chosen: 0,
    slice_recording: false,
});

/// Which of the `n` steps (or slices) of block `block` is recorded: splitmix64 of the seed and the block, so the
/// choice depends on nothing but them (not on how many slices went before the first step).
fn pick(seed: u64, block: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(block.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % n
}

/// Slices are chosen apart from steps.
const SLICE_SALT: u64 = 0x5a17_c35e_0000_0001;

/// A program that marks no step (or none yet) is sampled in slices this long, one in N: a second, or
/// `CUFLIGHT_SAMPLE_SLICE_MS` (10 ms to an hour).
fn slice() -> std::time::Duration {
    let ms = std::env::var("CUFLIGHT_SAMPLE_SLICE_MS").ok().and_then(|v| v.trim().parse::<u64>().ok());
    std::time::Duration::from_millis(ms.unwrap_or(1000).clamp(10, 3_600_000))
}

/// Starts sampling time slices until the program's first step (after CUPTI was set up and paused).
pub fn start_slices() {
    if !sampling() {
        return;
    }
    let slice = slice();
    let _ = std::thread::Builder::new().name("cuflight-sample".into()).spawn(move || {
        let _ = std::panic::catch_unwind(|| loop {
            {
                let mut s = SAMPLER.lock();
                if s.steps > 0 {
                    return; // steps are sampled from now on ([`Sampler::begin`] ended the slice)
                }
                s.next_slice(clock::monotonic_ns());
            }
            std::thread::sleep(slice);
        });
    });
}

/// How the sampler turns CUPTI on and off (the set-up's, handed over so that this module depends on nothing
/// that calls it).
#[derive(Clone, Copy)]
pub struct Switches {
    /// Enables the callbacks and activity kinds of the set-up again.
    pub resume: fn() -> Result<(), String>,
    pub pause_callbacks: fn(),
    pub pause_activity: fn(),
}

fn nothing() {}
fn refused() -> Result<(), String> {
    Err("not sampling".into())
}

static SWITCHES: Mutex<Switches> =
    Mutex::new(Switches { resume: refused, pause_callbacks: nothing, pause_activity: nothing });

fn switches() -> Switches {
    *SWITCHES.lock()
}

/// `CUFLIGHT_SAMPLE=N` (set by `cuflight record --sample 1/N`): N from 2 to 1,000,000, else not sampling.
pub fn configure_from_env(with: Switches) {
    let n = std::env::var("CUFLIGHT_SAMPLE").ok().and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(0);
    if (2..=1_000_000).contains(&n) {
        *SWITCHES.lock() = with;
        let mut s = SAMPLER.lock();
        s.seed = std::env::var("CUFLIGHT_SAMPLE_SEED")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| clock::monotonic_ns() ^ (std::process::id() as u64).rotate_left(32));
        s.chosen = pick(s.seed, 0, n as u64);
        ONE_IN.store(n, Ordering::Release);
    }
}

/// Whether this run samples steps.
#[inline]
pub fn sampling() -> bool {
    ONE_IN.load(Ordering::Relaxed) != 0
}

/// Whether step boundaries are followed: to sample steps, or to time them for the flight recorder's slow-step
/// dumps.
#[inline]
pub fn tracking_steps() -> bool {
    sampling() || crate::slow_steps::watching()
}

/// Whether the program's NVTX ranges and marks are kept now: always, unless sampling between recorded steps.
#[inline]
pub fn keeps_everything() -> bool {
    !sampling() || RECORDING.load(Ordering::Relaxed)
}

impl Sampler {
    /// The time slice being recorded ends, and the next begins (recorded if it is the one chosen in its block).
    fn next_slice(&mut self, now: u64) {
        let n = ONE_IN.load(Ordering::Relaxed) as u64;
        if self.slice_recording {
            self.end_slice(now);
        } else if self.kinds_on {
            (switches().pause_activity)();
            self.kinds_on = false;
        }
        let index = self.slices;
        self.slices += 1;
        if index.is_multiple_of(n) {
            self.slice_chosen = pick(self.seed ^ SLICE_SALT, index / n, n);
        }
        if index % n == self.slice_chosen && (switches().resume)().is_ok() {
            (self.slice_recording, self.started_ns, self.index) = (true, now, index);
            RECORDING.store(true, Ordering::Release);
        }
    }

    fn end_slice(&mut self, now: u64) {
        self.slice_recording = false;
        RECORDING.store(false, Ordering::Release);
        (switches().pause_callbacks)();
        close_calls();
        self.kinds_on = true;
        let one_in = ONE_IN.load(Ordering::Relaxed) as u64;
        thread_rings::push(RawEvent::sampled_slice(self.started_ns, now.max(self.started_ns), self.index, one_in));
    }

    fn begin(&mut self, kind: u8, key: u64, domain: u32, now: u64) {
        if self.slice_recording {
            // The program's first step: the slice ends here, steps are sampled from now on.
            self.end_slice(now);
        }
        let n = ONE_IN.load(Ordering::Relaxed) as u64;
        let index = self.steps;
        self.steps += 1;
        OPEN_KEY.store(key, Ordering::Relaxed);
        OPEN_DOMAIN.store(domain, Ordering::Relaxed);
        OPEN_KIND.store(kind, Ordering::Release);
        self.started_ns = now;
        self.index = index;
        if index == 0 {
            // The first step: nothing was armed ahead of it.
            self.armed = self.chosen == 0 && (switches().resume)().is_ok();
        }
        if index % n == self.chosen {
            // Armed when the step before ended (or just now, for the first).
            RECORDING.store(self.armed, Ordering::Release);
            self.armed = false;
        }
    }

    /// After a step ended: arms the next step when it is the one chosen, so that enabling CUPTI again costs the
    /// gap between steps, not the recorded step's own time.
    fn after(&mut self) {
        let n = ONE_IN.load(Ordering::Relaxed) as u64;
        let next = self.steps;
        if next.is_multiple_of(n) {
            self.chosen = pick(self.seed, next / n, n);
        }
        if next % n == self.chosen {
            // CUPTI refusing leaves that step unrecorded; the next block tries again.
            self.armed = (switches().resume)().is_ok();
        }
    }

    fn end(&mut self, now: u64) {
        OPEN_KIND.store(NONE, Ordering::Release);
        let recorded = RECORDING.swap(false, Ordering::AcqRel);
        if recorded {
            (switches().pause_callbacks)();
            close_calls();
            let one_in = ONE_IN.load(Ordering::Relaxed) as u64;
            thread_rings::push(RawEvent::sampled(self.started_ns, now.max(self.started_ns), self.index, one_in));
            // Its kernels may still run: the kinds stay on until the next step ends.
            self.kinds_on = true;
            self.after();
            return;
        }
        if self.kinds_on {
            (switches().pause_activity)();
            self.kinds_on = false;
        }
        self.after();
    }
}

/// Which step ended: the one sampling follows, or a thread's step where steps are only timed.
#[derive(Clone, Copy)]
pub enum StepEnd {
    Sampled,
    Timed(Slot),
}

/// A range is pushed on this thread (`t`) in `domain`, whose depth was `depth` before, at `at`: whether it is
/// kept. `step` reads its name, only where it may begin a step: the step's kind, None for a range that is no step.
pub fn pushed(t: &ThreadState, domain: u32, depth: i32, at: u64, step: impl FnOnce() -> Option<u8>) -> bool {
    if !sampling() {
        open_steps::pushed(&t.open_step, thread_rings::tid, (domain, depth, at), step);
        return true;
    }
    may_begin(step, || (PUSHED, (thread_rings::tid() as u64) << 32 | depth as u32 as u64, domain, at))
}

/// Sampling: a range that may begin a step starts: whether it is kept. `step` reads its name, `open` says how the
/// step would end (kind, key, domain) and when it began; both only where no step is open.
fn may_begin(step: impl FnOnce() -> Option<u8>, open: impl FnOnce() -> (u8, u64, u32, u64)) -> bool {
    if OPEN_KIND.load(Ordering::Acquire) != NONE || step().is_none() {
        return keeps_everything();
    }
    // A step begins: the lock is taken (a step boundary, not a call; held briefly but by the time slices'
    // thread while it arms CUPTI, which a step start must not slip past).
    let mut s = SAMPLER.lock();
    if OPEN_KIND.load(Ordering::Acquire) != NONE {
        return keeps_everything();
    }
    let (kind, key, domain, at) = open();
    s.begin(kind, key, domain, at);
    true
}

/// A range is popped on this thread (`t`) in `domain`, its depth falling to `depth`: (kept, the step it ends). A
/// step's end stops recording once its pop is written: call [`step_ended`] then.
#[inline]
pub fn popping(t: &ThreadState, domain: u32, depth: i32) -> (bool, Option<StepEnd>) {
    if !sampling() {
        return (true, open_steps::popping(&t.open_step, domain, depth).map(StepEnd::Timed));
    }
    let ends = OPEN_KIND.load(Ordering::Acquire) == PUSHED
        && OPEN_DOMAIN.load(Ordering::Relaxed) == domain
        && OPEN_KEY.load(Ordering::Relaxed) == (thread_rings::tid() as u64) << 32 | depth as u32 as u64;
    (ends || keeps_everything(), ends.then_some(StepEnd::Sampled))
}

/// A start/end range starts (`id`): whether it is kept.
pub fn started(id: u64, step: impl FnOnce() -> Option<u8>) -> bool {
    if !sampling() {
        open_steps::started(id, thread_rings::tid, clock::monotonic_ns, step);
        return true;
    }
    may_begin(step, || (STARTED, id, 0, clock::monotonic_ns()))
}

/// A start/end range ends: (kept, the step it ends; then call [`step_ended`] once its end is written).
#[inline]
pub fn ending(id: u64) -> (bool, Option<StepEnd>) {
    if !sampling() {
        return (true, open_steps::ending(id).map(StepEnd::Timed));
    }
    let ends = OPEN_KIND.load(Ordering::Acquire) == STARTED && OPEN_KEY.load(Ordering::Relaxed) == id;
    (ends || keeps_everything(), ends.then_some(StepEnd::Sampled))
}

/// The step's closing pop or end was written.
pub fn step_ended(which: StepEnd) {
    let now = clock::monotonic_ns();
    match which {
        StepEnd::Sampled => SAMPLER.lock().end(now),
        StepEnd::Timed(slot) => {
            if let Some(o) = open_steps::ended(slot) {
                slow_steps::ended(o.thread, o.class, o.started_ns, now.saturating_sub(o.started_ns));
            }
        }
    }
}

/// `cuflight.step()`: the step `previous` (a range id, 0 none) ends and `id` starts; the step marks are kept.
pub fn marked(previous: u64, id: u64) {
    if !sampling() {
        if let Some(slot) = open_steps::ending(previous) {
            step_ended(StepEnd::Timed(slot));
        }
        open_steps::started(id, thread_rings::tid, clock::monotonic_ns, || Some(0));
        return;
    }
    let mut s = SAMPLER.lock();
    let now = clock::monotonic_ns();
    if previous != 0 && OPEN_KIND.load(Ordering::Acquire) == STARTED && OPEN_KEY.load(Ordering::Relaxed) == previous {
        s.end(now);
    }
    if OPEN_KIND.load(Ordering::Acquire) == NONE {
        s.begin(STARTED, id, 0, now);
    }
}

/// The correlation ids of the calls the recorded steps made: the current step's first (0: none yet) and, for
/// the last few recorded steps, first << 32 | last. CUPTI numbers calls in increasing order (cupti_activity.h,
/// `correlationId`: "each function invocation is assigned a unique correlation ID").
static CURRENT_FIRST: AtomicU32 = AtomicU32::new(0);
static CURRENT_LAST: AtomicU32 = AtomicU32::new(0);
/// The recorded steps' calls, oldest first, in a ring: CUPTI hands records over when a buffer fills or at the next
/// flush (a second by default), by which time a program of 1 ms steps recorded one in ten has recorded a hundred
/// more; 4096 covers that many seconds of such a program, 32 KB.
const KEPT_STEPS: usize = 4096;
static RECORDED_CALLS: [AtomicU64; KEPT_STEPS] = [const { AtomicU64::new(0) }; KEPT_STEPS];
static RECORDED: AtomicU64 = AtomicU64::new(0);

/// A call the agent recorded (its exit callback), while sampling: bounds the step's device work.
#[inline]
pub fn saw_call(correlation: u32) {
    if !sampling() || correlation == 0 {
        return;
    }
    if CURRENT_FIRST.load(Ordering::Relaxed) == 0 {
        let _ = CURRENT_FIRST.compare_exchange(0, correlation, Ordering::Relaxed, Ordering::Relaxed);
    }
    CURRENT_LAST.fetch_max(correlation, Ordering::Relaxed);
}

/// The recorded step ended: its calls' span joins those whose device work is kept.
fn close_calls() {
    let (first, last) = (CURRENT_FIRST.swap(0, Ordering::AcqRel), CURRENT_LAST.swap(0, Ordering::AcqRel));
    if first != 0 {
        // Only the step-ending thread writes here (under the sampler's lock).
        let n = RECORDED.load(Ordering::Relaxed);
        RECORDED_CALLS[n as usize % KEPT_STEPS].store((first as u64) << 32 | last.max(first) as u64, Ordering::Release);
        RECORDED.store(n + 1, Ordering::Release);
    }
}

/// Whether a kernel, copy or memset record belongs to a recorded step's calls (always, when not sampling).
pub fn keeps_device_work(ev: &RawEvent) -> bool {
    if !sampling()
        || !matches!(ev.kind(), Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset))
        || ev.correlation == 0
    {
        return true;
    }
    let c = ev.correlation;
    // The calls since CUPTI was armed for the current (or next) recorded step.
    let first = CURRENT_FIRST.load(Ordering::Acquire);
    if first != 0 && c >= first {
        return true;
    }
    // Newest first: spans rise with the correlation ids, so a record past a span's end lies between recorded steps.
    let n = RECORDED.load(Ordering::Acquire);
    for i in (n.saturating_sub(KEPT_STEPS as u64)..n).rev() {
        let span = RECORDED_CALLS[i as usize % KEPT_STEPS].load(Ordering::Acquire);
        let (first, last) = ((span >> 32) as u32, span as u32);
        if c > last {
            return false;
        }
        if c >= first {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::pick;

    /// The same seed and block choose the same step; over many blocks every offset is chosen, about evenly.
    #[test]
    fn choices_depend_on_the_seed_and_block_alone() {
        assert_eq!(pick(42, 7, 10), pick(42, 7, 10));
        let mut seen = [0u32; 10];
        for block in 0..10_000 {
            seen[pick(42, block, 10) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
        assert!((0..50).any(|b| pick(1, b, 10) != pick(2, b, 10)));
    }
}
