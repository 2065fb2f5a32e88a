//! `cuflight launch --flight-recorder DUR --dump-on-slow-step FACTOR`: the flight recorder dumps the last DUR when
//! a step takes FACTOR times as long as the steps before it, so that the straggler a platform team is paged for
//! is on disk with what led to it, without anyone at the keyboard.
//!
//! Steps are the program's own (the step-name rule of `cuflight_format::step_names`, through NVTX or
//! `cuflight.step()`), found by the same step boundaries as `record --sample` ([`crate::sampler`]), each thread's
//! own ([`crate::open_steps`]). A serving engine's prefills, decodes and mixed iterations are each compared with
//! their own kind (a prefill is slower than a decode by nature), and each thread's steps with its own (a server's
//! thread per GPU, or a pipeline's stages, need not take alike): the first [`THREADS`] threads that step have a
//! history each, later ones share one. The typical step is the median of the last [`HISTORY`] of its kind, after
//! the first [`WARMUP`] (compilation, allocator growth); a step is slow when it took FACTOR times that and at least
//! [`MIN_EXCESS_NS`] more (a thread the OS left waiting a few milliseconds is no straggler). A slow step joins the history like any other, so
//! a program that stays slower stops being dumped once the new pace is its median.
//!
//! A slow step is dumped at its end, whole. One still running is dumped before its end only once it has run half
//! the recorder's span and is slow: waiting longer would let the rings overwrite how it began, and a stall that
//! never ends its step (a collective waiting on a lost rank, a deadlock on the host) is caught while it lasts. The
//! control thread looks at every open step five times a second ([`check_open`]). The steps running when one was
//! dumped so (every thread's, where a stall holds them all) ask for nothing more, then or at their end.
//!
//! Disks fill: one slow-step dump per recorder span (a dump holds the whole span anyway) and [`MAX_DUMPS`] a
//! process at most; and a slow step that took about as long as one already dumped of its kind (within a quarter) is
//! not dumped again, so an evaluation or checkpoint every N steps, named as a step, is dumped once and leaves the
//! dumps to a slowdown of another size. The step's end only stores what it saw and raises a flag the control thread (`crate::flight`)
//! takes within 200 ms: it flushes CUPTI (the step's last kernels) and writes the image.

use crate::clock;
use crate::flight_config::CONFIG;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Steps of each kind kept to find the typical one.
pub const HISTORY: usize = 16;
/// Steps of each kind never compared (nor kept): the program warming up.
pub const WARMUP: u64 = 3;
/// Steps of a kind needed before any is compared.
const MIN_HISTORY: usize = 8;
/// A slow step is also this much longer than the typical one: scheduling hiccups of a few milliseconds are common
/// on a loaded machine and say nothing about the program.
pub const MIN_EXCESS_NS: u64 = 10_000_000;
/// Slow-step dumps a process writes at most.
pub const MAX_DUMPS: u32 = 8;

/// The durations of one kind's recent steps, and of the slow ones already dumped.
#[derive(Clone, Copy)]
struct Kind {
    seen: u64,
    recent: [u64; HISTORY],
    filled: usize,
    next: usize,
    dumped: [u64; MAX_DUMPS as usize],
    dumped_n: usize,
}

impl Kind {
    const NEW: Kind =
        Kind { seen: 0, recent: [0; HISTORY], filled: 0, next: 0, dumped: [0; MAX_DUMPS as usize], dumped_n: 0 };

    /// Whether a slow step of `ns` is like one already dumped (within a quarter of its time): a periodic
    /// evaluation or checkpoint step, named as a step, is dumped once, not once a span.
    fn like_dumped(&self, ns: u64) -> bool {
        self.dumped[..self.dumped_n].iter().any(|&d| ns.abs_diff(d) <= d / 4)
    }

    fn note_dumped(&mut self, ns: u64) {
        if self.dumped_n < self.dumped.len() {
            self.dumped[self.dumped_n] = ns;
            self.dumped_n += 1;
        }
    }

    /// The median of the kept durations, once there are enough.
    fn typical(&self) -> Option<u64> {
        if self.filled < MIN_HISTORY {
            return None;
        }
        let mut sorted = self.recent;
        let kept = &mut sorted[..self.filled];
        kept.sort_unstable();
        Some(kept[self.filled / 2])
    }

    /// The typical step where a step of `ns` is slow by `factor_x1000` / 1000 against it.
    fn slow(&self, ns: u64, factor_x1000: u64) -> Option<u64> {
        if self.seen <= WARMUP {
            return None;
        }
        self.typical().filter(|&typical| {
            ns.saturating_mul(1000) >= typical.saturating_mul(factor_x1000)
                && ns >= typical.saturating_add(MIN_EXCESS_NS)
        })
    }

    /// Adds a step; returns the typical step before it where this one is slow by `factor_x1000` / 1000.
    fn add(&mut self, ns: u64, factor_x1000: u64) -> Option<u64> {
        self.seen += 1;
        if self.seen <= WARMUP {
            return None;
        }
        let slow = self.slow(ns, factor_x1000);
        self.recent[self.next] = ns;
        self.next = (self.next + 1) % HISTORY;
        self.filled = (self.filled + 1).min(HISTORY);
        slow
    }
}

/// Threads with a step history of their own; the others share the last.
pub const THREADS: usize = 8;

/// Per thread that steps (by the first [`THREADS`], the others in the last), per kind: a plain step, then a serving
/// engine's prefill, decode and mixed iterations ([`kind_index`]).
struct Histories {
    threads: [u32; THREADS],
    kinds: [[Kind; 4]; THREADS],
}

impl Histories {
    /// The history of `thread`'s steps of `kind`.
    fn of(&mut self, thread: u32, kind: u8) -> &mut Kind {
        let i = match self.threads.iter().position(|&t| t == thread) {
            Some(i) => i,
            None => match self.threads.iter().position(|&t| t == 0) {
                Some(free) if thread != 0 => {
                    self.threads[free] = thread;
                    free
                }
                _ => THREADS - 1,
            },
        };
        &mut self.kinds[i][usize::from(kind).min(3)]
    }
}

static HISTORIES: Mutex<Histories> = Mutex::new(Histories { threads: [0; THREADS], kinds: [[Kind::NEW; 4]; THREADS] });
/// The slow step being dumped, for the control thread's line: its duration and the typical one, ns.
static SLOW_NS: AtomicU64 = AtomicU64::new(0);
static TYPICAL_NS: AtomicU64 = AtomicU64::new(0);
/// When the last slow-step dump was asked for (0: never), and how many were.
static LAST_DUMP_NS: AtomicU64 = AtomicU64::new(0);
static DUMPS: AtomicU32 = AtomicU32::new(0);
/// When a step was last dumped while still running (0: never): the steps already running then (a stall often holds
/// every thread's step, a thread per GPU waiting in one collective) were in that dump, and are not dumped again
/// while they last or at their end. And whether the step being dumped was still running.
static RUNNING_DUMP_AT: AtomicU64 = AtomicU64::new(0);
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Set when the flight recorder runs (`crate::flight::arm`), and when a slow step wants a dump (the control thread
/// takes it: [`take_wanted`]). This module asks; the recorder, which depends on it, dumps.
static ARMED: AtomicBool = AtomicBool::new(false);
static WANTED: AtomicBool = AtomicBool::new(false);

/// The flight recorder runs: steps are watched from now on where `--dump-on-slow-step` asked.
pub fn arm() {
    ARMED.store(true, Ordering::Release);
}

/// Whether steps are watched: a flight recorder asked to dump slow steps, once it runs. The flag first: every NVTX
/// call asks, and the configuration is read (once, allocating) only by a recorder that runs.
#[inline]
pub fn watching() -> bool {
    ARMED.load(Ordering::Relaxed) && CONFIG.slow_step_x1000 != 0
}

/// Whether a slow step asked for a dump since the last look (the control thread's).
pub fn take_wanted() -> bool {
    WANTED.swap(false, Ordering::AcqRel)
}

/// The index of a step's kind from its name: 0 a plain step, 1 prefill, 2 decode, 3 mixed.
pub fn kind_index(name: &str) -> u8 {
    use cuflight_format::step_names::{iteration_kind, IterationKind};
    match iteration_kind(name) {
        None => 0,
        Some(IterationKind::Prefill) => 1,
        Some(IterationKind::Decode) => 2,
        Some(IterationKind::Mixed) => 3,
    }
}

/// A step of kind `kind` that `thread` began at `started_ns` ended after `ns`: a dump is asked for where it is slow
/// and the limits allow. Takes a lock at a step's end only, never on a plain call.
pub fn ended(thread: u32, kind: u8, started_ns: u64, ns: u64) {
    if !watching() {
        return;
    }
    let mut histories = HISTORIES.lock();
    let k = histories.of(thread, kind);
    let Some(typical) = k.add(ns, CONFIG.slow_step_x1000) else { return };
    if started_ns <= RUNNING_DUMP_AT.load(Ordering::Acquire) || k.like_dumped(ns) {
        return; // running when a running step was dumped, or like one dumped
    }
    if ask(ns, typical, false) {
        k.note_dumped(ns);
    }
}

/// The control thread's look at the steps in progress (only timed ones are open: none while sampling): one is
/// dumped once where it has already run long enough to be slow.
pub fn check_open() {
    if !watching() {
        return;
    }
    for open in crate::open_steps::open_now() {
        check_running(open);
    }
}

fn check_running(open: crate::open_steps::Open) {
    let crate::open_steps::Open { started_ns, class, thread } = open;
    if started_ns <= RUNNING_DUMP_AT.load(Ordering::Acquire) {
        return;
    }
    let ran = clock::monotonic_ns().saturating_sub(started_ns);
    if ran < CONFIG.span_ns / 2 {
        return;
    }
    let k = *HISTORIES.lock().of(thread, class);
    // Slow, and longer than the slow steps like it already dumped.
    let Some(typical) = k.slow(ran, CONFIG.slow_step_x1000).filter(|_| !k.like_dumped(ran)) else { return };
    if ask(ran, typical, true) {
        RUNNING_DUMP_AT.store(clock::monotonic_ns(), Ordering::Release);
    }
}

/// Asks for a dump of a step of `ns` (`running`: still) against `typical`, where the limits allow: whether it was
/// asked for. A step's end and the control thread may ask at once: one of them wins the time of the last dump.
fn ask(ns: u64, typical: u64, running: bool) -> bool {
    let now = clock::monotonic_ns();
    let last = LAST_DUMP_NS.load(Ordering::Acquire);
    if (last != 0 && now.saturating_sub(last) < CONFIG.span_ns) || DUMPS.load(Ordering::Acquire) >= MAX_DUMPS {
        return false;
    }
    if LAST_DUMP_NS.compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return false;
    }
    DUMPS.fetch_add(1, Ordering::AcqRel);
    RUNNING.store(running, Ordering::Relaxed);
    SLOW_NS.store(ns, Ordering::Relaxed);
    TYPICAL_NS.store(typical, Ordering::Relaxed);
    WANTED.store(true, Ordering::Release);
    true
}

/// The line the control thread prints before the dump: which step, against what.
pub fn describe() -> String {
    let (ns, typical) = (SLOW_NS.load(Ordering::Relaxed), TYPICAL_NS.load(Ordering::Relaxed));
    let took = if RUNNING.load(Ordering::Relaxed) { "has run for" } else { "took" };
    format!(
        "a step {took} {:.2} ms, {:.1}x the typical {:.2} ms (--dump-on-slow-step): dumping the flight recorder",
        ns as f64 / 1e6,
        ns as f64 / typical.max(1) as f64,
        typical as f64 / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After the warm-up and 8 steps of history, a step 3x the median (and 1 ms longer) is slow; the slow step
    /// then counts in the history, so a program that stays slower is soon its own typical.
    #[test]
    fn a_step_is_slow_against_the_median_of_its_kind() {
        let mut k = Kind::NEW;
        let x3 = 3000;
        for ns in [50_000_000, 40_000_000, 30_000_000] {
            assert_eq!(k.add(ns, x3), None, "warm-up");
        }
        for i in 0..8 {
            assert_eq!(k.add(10_000_000 + i * 100_000, x3), None);
        }
        assert_eq!(k.add(29_000_000, x3), None, "under 3x");
        assert_eq!(k.add(32_000_000, x3), Some(10_400_000));
        for _ in 0..9 {
            k.add(31_000_000, x3);
        }
        assert_eq!(k.add(35_000_000, x3), None, "the new pace is typical");
        // Tiny steps: many times as long but under 10 ms more is noise.
        let mut tiny = Kind::NEW;
        for _ in 0..12 {
            tiny.add(30_000, x3);
        }
        assert_eq!(tiny.add(5_000_000, x3), None);
        assert_eq!(tiny.add(12_000_000, x3), Some(30_000));
    }

    /// A periodic slow step (an evaluation every N steps) is dumped once; a slowdown of another size still is.
    #[test]
    fn a_slow_step_like_one_dumped_is_known() {
        let mut k = Kind::NEW;
        k.note_dumped(40_000_000);
        assert!(k.like_dumped(45_000_000) && k.like_dumped(32_000_000));
        assert!(!k.like_dumped(80_000_000) && !k.like_dumped(20_000_000));
    }

    #[test]
    fn kinds_follow_the_engines_names() {
        assert_eq!((kind_index("train_step"), kind_index("decode"), kind_index("prefill")), (0, 2, 1));
    }
}
