//! Steps from the repeating pattern of a process's work, for traces without step annotations: the smallest
//! period P such that the sequence of kernel launches repeats with period P (90% of positions match) and some
//! kernel name recurs every P launches; each step begins at the launch that the host typically paused longest
//! before (the median over the steps).
//!
//! Kernel names alone cannot cut a loop of one kernel repeating (PyTorch's eager loop of one elementwise
//! operator, a benchmark): every launch would be a "step". There the calls that make the host wait for the GPU
//! (synchronisations, synchronous copies such as `.item()`'s) join the sequence as names of their own, and a
//! loop that waits every N launches has steps of N launches and a wait. Where kernel names do repeat with a
//! longer period they decide alone: a program that logs its loss every tenth step keeps steps of one iteration.

use super::window::HostRange;
use rustc_hash::{FxHashMap, FxHashSet};

/// Steps of the launch sequence `seq` ((launch time, kernel name)), with `waits` ((start, call name) of each, and
/// where the last ended) to cut a loop of one repeating kernel; the last step ends at `last_end` (the end of the
/// last GPU op), or with its wait where waits cut the steps.
pub fn steps(mut seq: Vec<(u64, u32)>, (waits, waits_end): (Vec<(u64, u32)>, u64), last_end: u64) -> Vec<HostRange> {
    seq.sort_by_key(|x| x.0);
    let by_kernels = period(&seq);
    if by_kernels.is_none_or(|p| p == 1) && waits.len() >= 3 {
        let mut merged = seq.clone();
        merged.extend(waits.iter().copied());
        merged.sort_by_key(|x| x.0);
        if let Some(p) = period(&merged).filter(|&p| p > 1) {
            return cut(&merged, p, last_end.max(waits_end));
        }
        if let Some(steps) = between_waits(&seq, &waits, last_end.max(waits_end)) {
            return steps;
        }
    }
    by_kernels.map_or_else(Vec::new, |p| cut(&seq, p, last_end))
}

/// Steps of a process's launches (time, name, thread) and waits (start, name, thread), as [`steps`] cuts them,
/// unless several threads launch at once. PyTorch hands a step from the main thread (forward) to the autograd
/// thread (backward) and back, a few switches a step, and their launches make one loop. Threads that launch
/// concurrently (a replica per GPU, a server's workers) interleave their loops into a sequence that repeats
/// nothing, or cut "steps" of a few launches each (400 threads of 200 launches and a wait each made 398 steps, most
/// of them 0 ms): where the launching thread changes more than once in eight launches, the busiest thread's
/// launches and waits are the loop, and where that loop has no steps of two launches or more there are none.
pub fn steps_of_threads(
    mut seq: Vec<(u64, u32, u32)>,
    waits: Vec<(u64, u32, u32)>,
    waits_end: u64,
    last_end: u64,
) -> Vec<HostRange> {
    let strip = |v: Vec<(u64, u32, u32)>, keep: Option<u32>| {
        v.into_iter().filter(|x| keep.is_none_or(|t| x.2 == t)).map(|x| (x.0, x.1)).collect::<Vec<_>>()
    };
    seq.sort_by_key(|x| x.0);
    let switches = seq.windows(2).filter(|w| w[0].2 != w[1].2).count();
    if seq.len() < MIN_INTERLEAVED || switches * 8 <= seq.len() {
        return steps(strip(seq, None), (strip(waits, None), waits_end), last_end);
    }
    let mut per_thread: FxHashMap<u32, usize> = FxHashMap::default();
    for x in &seq {
        *per_thread.entry(x.2).or_default() += 1;
    }
    let busiest = per_thread.into_iter().max_by_key(|&(tid, n)| (n, std::cmp::Reverse(tid))).map(|x| x.0);
    let (seq, waits) = (strip(seq, busiest), strip(waits, busiest));
    let launches = seq.len();
    let cut = steps(seq, (waits, waits_end), last_end);
    if cut.len() * 2 > launches {
        return Vec::new();
    }
    cut
}

/// Launches below which no interleaving is judged: a handful says nothing of a loop.
const MIN_INTERLEAVED: usize = 64;

/// Steps that end at the host's waits, where the launches repeat with no period but the host waits after each
/// batch of them: a model server's engine loop (continuous batching makes every iteration different: a few
/// decodes, then one that also prefills) reads each iteration's tokens back before it schedules the next. It
/// takes 6 waits at least, launches between 90% of consecutive waits, and no stretch holding a tenth of all
/// launches (a few waits scattered through one long loop are not its rhythm). Each step runs from the first
/// launch after a wait to the next such launch; the last ends at `last_end`.
fn between_waits(seq: &[(u64, u32)], waits: &[(u64, u32)], last_end: u64) -> Option<Vec<HostRange>> {
    if waits.len() < 6 || seq.is_empty() {
        return None;
    }
    let mut at: Vec<u64> = waits.iter().map(|w| w.0).collect();
    at.sort_unstable();
    // Launches in each stretch: before the first wait, between consecutive ones, after the last.
    let mut per = vec![0usize; at.len() + 1];
    for &(t, _) in seq {
        per[at.partition_point(|&w| w < t)] += 1;
    }
    let between = &per[1..at.len()];
    let holding = between.iter().filter(|&&n| n > 0).count();
    if holding * 10 < between.len() * 9 || per.iter().any(|&n| n * 10 > seq.len()) {
        return None;
    }
    let mut starts: Vec<u64> = Vec::with_capacity(at.len() + 1);
    let mut k = 0;
    for (i, &(t, _)) in seq.iter().enumerate() {
        let stretch = at.partition_point(|&w| w < t);
        if i == 0 || stretch != k {
            starts.push(t);
            k = stretch;
        }
    }
    Some(
        starts
            .iter()
            .enumerate()
            .map(|(i, &start)| HostRange {
                start,
                end: starts.get(i + 1).copied().unwrap_or(last_end),
                name: 0,
                tid: 0,
            })
            .collect(),
    )
}

/// The period of `seq` (sorted by time), if it repeats.
fn period(seq: &[(u64, u32)]) -> Option<usize> {
    let n = seq.len();
    if n < 6 {
        return None;
    }
    let mut positions: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
    for (i, &(_, name)) in seq.iter().enumerate() {
        positions.entry(name).or_default().push(i);
    }
    let mut periods: Vec<usize> = positions
        .values()
        .filter(|pos| pos.len() >= 3)
        .filter_map(|pos| {
            let mut gaps: FxHashMap<usize, usize> = FxHashMap::default();
            for w in pos.windows(2) {
                *gaps.entry(w[1] - w[0]).or_default() += 1;
            }
            let (&period, &count) = gaps.iter().max_by_key(|(g, c)| (**c, std::cmp::Reverse(**g)))?;
            (count * 5 >= (pos.len() - 1) * 4).then_some(period)
        })
        .collect();
    periods.sort_unstable();
    periods.dedup();
    // A step holds every name that recurs (3 times or more); this rules out periods that only repeat one
    // kernel among many (1000 identical tiny kernels per step make a period of 1 otherwise).
    let recurring = positions.values().filter(|pos| pos.len() >= 3).count();
    let periodic = |p: usize| {
        let matches = (0..n - p).filter(|&i| seq[i].1 == seq[i + p].1).count();
        let distinct: FxHashSet<u32> = seq[..p.min(n)].iter().map(|x| x.1).collect();
        n >= 3 * p && matches * 10 >= (n - p) * 9 && distinct.len() * 10 >= recurring * 9
    };
    periods.into_iter().find(|&p| periodic(p))
}

/// Steps of `period` entries of `seq`, each beginning at the in-period offset with the longest typical pause
/// before it: the median over the steps, so that one stall (start-up, a collection) cannot move every boundary.
fn cut(seq: &[(u64, u32)], period: usize, last_end: u64) -> Vec<HostRange> {
    let n = seq.len();
    let mut pauses = Vec::with_capacity(n / period + 1);
    let offset = (0..period)
        .max_by_key(|&o| {
            pauses.clear();
            pauses.extend((o..n).step_by(period).filter(|&i| i > 0).map(|i| seq[i].0 - seq[i - 1].0));
            let mid = pauses.len() / 2;
            (!pauses.is_empty()).then(|| *pauses.select_nth_unstable(mid).1)
        })
        .unwrap_or(0);
    let starts: Vec<usize> = (offset..n).step_by(period).collect();
    starts
        .iter()
        .enumerate()
        .filter(|(_, &s)| s + period <= n)
        .map(|(k, &s)| {
            let end = starts.get(k + 1).map_or(last_end, |&next| seq[next].0);
            HostRange { start: seq[s].0, end, name: 0, tid: 0 }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (time, name) entries.
    type Seq = Vec<(u64, u32)>;

    /// `steps` launches of kernel 1 per step, 10 apart, each step ending in a wait (name 2) of `wait` ns.
    fn one_kernel_loop(steps: usize, per_step: usize, wait: u64) -> (Seq, Seq) {
        let (mut seq, mut waits, mut t) = (vec![], vec![], 0);
        for _ in 0..steps {
            for _ in 0..per_step {
                seq.push((t, 1));
                t += 10;
            }
            waits.push((t, 2));
            t += wait;
        }
        (seq, waits)
    }

    #[test]
    fn a_loop_of_one_kernel_is_cut_at_its_waits() {
        let (seq, waits) = one_kernel_loop(6, 200, 5000);
        let got = steps(seq.clone(), (waits, 0), 100_000);
        assert_eq!(got.len(), 6, "{got:?}");
        // Each step begins at the first launch after a wait; the first at the first launch.
        let step = 200 * 10 + 5000;
        for (k, s) in got.iter().enumerate() {
            assert_eq!(s.start, k as u64 * step);
        }
        assert_eq!(got[0].end, step);
        // The last step ends with its wait, not at the last kernel's end (the wait comes after it).
        let (seq, waits) = one_kernel_loop(6, 200, 5000);
        let wait_end = waits.last().unwrap().0 + 4000;
        let got = steps(seq.clone(), (waits, wait_end), seq.last().unwrap().0 + 5);
        assert_eq!(got.last().unwrap().end, wait_end);
        // Without the waits, every launch is a step of its own: what kernel names alone can say.
        assert_eq!(steps(seq, (vec![], 0), 100_000).len(), 1200);
    }

    #[test]
    fn one_long_stall_does_not_move_the_boundaries() {
        let (mut seq, waits) = one_kernel_loop(8, 50, 3000);
        // A 100 us stall (start-up, a garbage collection) before the 21st launch of the first step.
        for x in seq.iter_mut().skip(20) {
            x.0 += 100_000;
        }
        let waits: Vec<(u64, u32)> = waits.into_iter().map(|(t, n)| (t + 100_000, n)).collect();
        let got = steps(seq.clone(), (waits.clone(), 0), 1_000_000);
        assert_eq!(got.len(), 8, "{got:?}");
        // Every step but the first begins at the first launch after a wait.
        for s in &got[1..] {
            assert!(waits.iter().any(|w| seq.iter().find(|k| k.0 > w.0).is_some_and(|k| k.0 == s.start)), "{s:?}");
        }
    }

    #[test]
    fn kernel_names_decide_where_they_repeat_with_a_longer_period() {
        // Steps of kernels 1, 3, 4; a wait (name 2) every second step, as a loop that logs every other step.
        let (mut seq, mut waits, mut t) = (vec![], vec![], 0);
        for k in 0..8 {
            t += 1000;
            for name in [1, 3, 4] {
                seq.push((t, name));
                t += 10;
            }
            if k % 2 == 1 {
                waits.push((t, 2));
            }
        }
        assert_eq!(steps(seq, (waits, 0), t + 100).len(), 8);
    }

    #[test]
    fn an_engine_loop_with_no_period_is_cut_at_its_waits() {
        // Continuous batching: decodes (a replay, name 5) every iteration, a prefill of 8 launches (name 1) every
        // fourth; the host waits (name 2) at each iteration's end.
        let (mut seq, mut waits, mut t) = (vec![], vec![], 0);
        for it in 0..40 {
            if it % 4 == 0 {
                for _ in 0..8 {
                    seq.push((t, 1));
                    t += 10;
                }
            }
            seq.push((t, 5));
            t += 10;
            waits.push((t, 2));
            t += 100;
        }
        let got = steps(seq.clone(), (waits, t - 90), t);
        assert_eq!(got.len(), 40, "{got:?}");
        assert_eq!(got[0].start, 0);
        assert_eq!(got[1].start, 8 * 10 + 10 + 100);
        assert_eq!(got.last().unwrap().end, t);
    }

    #[test]
    fn irregular_waits_change_nothing() {
        let (seq, _) = one_kernel_loop(1, 600, 0);
        let waits = vec![(15, 2), (1005, 2), (4005, 2)];
        let starts = |v: Vec<HostRange>| v.iter().map(|r| (r.start, r.end)).collect::<Vec<_>>();
        assert_eq!(starts(steps(seq.clone(), (waits, 0), 6000)), starts(steps(seq, (vec![], 0), 6000)));
    }

    /// Steps of kernels `names`, 1000 apart, on `tid`; each launch 10 after the one before.
    fn thread_loop(tid: u32, steps: u64, names: &[u32], offset: u64) -> Vec<(u64, u32, u32)> {
        let per = names.len() as u64 * 10 + 1000;
        (0..steps)
            .flat_map(|k| names.iter().enumerate().map(move |(i, &n)| (offset + k * per + i as u64 * 10, n, tid)))
            .collect()
    }

    #[test]
    fn a_step_handed_between_threads_is_one_loop() {
        // PyTorch: forward (kernels 1, 2) on the main thread, backward (3, 4, 5) on the autograd thread, in turn.
        let mut seq = vec![];
        for k in 0..30u64 {
            let t = k * 2000;
            seq.extend([(t, 1, 1), (t + 10, 2, 1), (t + 500, 3, 2), (t + 510, 4, 2), (t + 520, 5, 2)]);
        }
        assert_eq!(steps_of_threads(seq, vec![], 0, 70_000).len(), 30);
    }

    #[test]
    fn threads_launching_at_once_are_cut_by_the_busiest_threads_loop() {
        // Two replicas, one per GPU, each looping over kernels 1, 2, 3 (the second thread 5 ns behind): their
        // launches alternate, and each replica has 40 steps.
        let mut seq = thread_loop(1, 40, &[1, 2, 3], 0);
        seq.extend(thread_loop(2, 39, &[1, 2, 3], 5));
        let got = steps_of_threads(seq, vec![], 0, 50_000);
        assert_eq!(got.len(), 40, "{got:?}");
        // 400 threads each launching one kernel 200 times, then waiting: no thread's loop has a step of two
        // launches or more, so there are no steps (the whole trace is one window), not 200 of one launch.
        let mut seq = vec![];
        let mut waits = vec![];
        for tid in 0..400u32 {
            seq.extend((0..200u64).map(|i| (i * 400 + u64::from(tid), 1, tid)));
            waits.push((200 * 400 + u64::from(tid), 9, tid));
        }
        assert!(steps_of_threads(seq, waits, 90_000, 90_000).is_empty());
    }
}
