//! Keeps every track's slices properly nested, as Perfetto's format requires.
//!
//! A slice is two packets, SLICE_BEGIN and SLICE_END, and an END carries no id: trace processor sorts packets by
//! timestamp (equal timestamps keep file order) and closes the innermost open slice of the track. Two slices of
//! one track that overlap without nesting would be paired wrongly: a kernel that starts 2 µs before the previous
//! one ends (clock skew in CUPTI's records, common in real traces) would be drawn with the other's end. Such a
//! slice goes to an overlap lane of its track instead, a sibling track named "... (overlap N)", so every slice
//! keeps its own start and end.
//!
//! Slices mostly arrive in start order; a launch call held until its work appears and an NVTX range written
//! when it closes arrive late. Each lane keeps the slices open at the track's latest start (a stack: each
//! contains the ones above it) and the last few that closed; a late slice is checked against both.

/// Slices that closed before the latest start, kept to check late slices against (a held launch call comes at
/// most a few calls late).
const RECENT: usize = 16;
/// Lanes beyond the track itself. A slice that fits none goes to the last (misdrawn, never lost).
pub(super) const MAX_LANES: usize = 32;

#[derive(Default)]
struct Lane {
    /// Open slices (start, end), outermost first: each contains the next.
    open: Vec<(u64, u64)>,
    recent: [(u64, u64); RECENT],
    recent_at: usize,
}

impl Lane {
    /// Closes the slices that end by `at`, the track's new latest start.
    fn sweep(&mut self, at: u64) {
        while let Some(&top) = self.open.last().filter(|t| t.1 <= at) {
            self.open.pop();
            self.recent[self.recent_at % RECENT] = top;
            self.recent_at += 1;
        }
    }

    /// Whether slice [s, e], written after every slice of this lane so far, nests with all of them.
    fn fits_late(&self, s: u64, e: u64) -> bool {
        let kept = self.recent_at.min(RECENT);
        self.open.iter().chain(&self.recent[..kept]).all(|&j| nests_after(j, s, e))
    }

    /// Records slice [s, e] on this lane; `latest` is the track's latest start.
    fn add(&mut self, s: u64, e: u64, latest: u64) {
        if e <= latest && s < latest {
            // A late slice already closed at the latest start: later slices (in order) cannot meet it.
            self.recent[self.recent_at % RECENT] = (s, e);
            self.recent_at += 1;
            return;
        }
        // Below: the slices that contain it; above: those it contains.
        let at = self.open.iter().take_while(|j| j.0 <= s && e <= j.1).count();
        self.open.insert(at, (s, e));
    }
}

/// Whether slice `i` = [s, e], written after slice `j`, is paired correctly with it by a timestamp sort that
/// keeps file order at equal timestamps: disjoint, or one within the other, with ties resolved by that order.
fn nests_after(j: (u64, u64), s: u64, e: u64) -> bool {
    // j ends before i begins (at equal times j's END is first in the file).
    j.1 <= s
        // i ends before j begins (strictly: at equal times j's BEGIN, earlier in the file, would come first).
        || e < j.0
        // j contains i (j's BEGIN comes first at an equal start; at an equal end both close at that time).
        || (j.0 <= s && e <= j.1)
        // i contains j (a strictly earlier start, so i's BEGIN is first; at an equal end both close then).
        || (s < j.0 && j.1 <= e)
}

/// The lanes of one track.
#[derive(Default)]
pub(super) struct TrackLanes {
    lanes: Vec<Lane>,
    /// The latest slice start seen on the track.
    latest: u64,
}

impl TrackLanes {
    /// The lane (0: the track itself) where slice [start, end] nests with everything already written there.
    pub(super) fn place(&mut self, start: u64, end: u64) -> usize {
        let in_order = start >= self.latest;
        if in_order {
            self.latest = start;
        }
        let latest = self.latest;
        let mut chosen = None;
        for (n, lane) in self.lanes.iter_mut().enumerate() {
            let fits = if in_order {
                lane.sweep(start);
                // What remains open contains `start`; the innermost must also contain `end`.
                lane.open.last().is_none_or(|top| end <= top.1)
            } else {
                lane.fits_late(start, end)
            };
            if fits {
                chosen = Some(n);
                break;
            }
        }
        let n = chosen.unwrap_or_else(|| {
            if self.lanes.len() <= MAX_LANES {
                self.lanes.push(Lane::default());
            }
            self.lanes.len() - 1
        });
        self.lanes[n].add(start, end, latest);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs SLICE_BEGIN/END as trace processor does (sort by time, file order at ties, END closes the innermost
    /// open slice of its lane) and returns the (start, end) it reads back for each slice, in file order.
    fn read_back(slices: &[(u64, u64)], lanes: &[usize]) -> Vec<(u64, u64)> {
        let mut packets = Vec::new();
        for (i, &(s, e)) in slices.iter().enumerate() {
            packets.push((s, 2 * i, lanes[i], true, i));
            packets.push((e, 2 * i + 1, lanes[i], false, i));
        }
        packets.sort_by_key(|p| (p.0, p.1));
        let mut open: std::collections::HashMap<usize, Vec<usize>> = Default::default();
        let mut got = vec![(0, 0); slices.len()];
        for (ts, _, lane, begin, i) in packets {
            if begin {
                open.entry(lane).or_default().push(i);
                got[i].0 = ts;
            } else {
                let closed = open.get_mut(&lane).and_then(Vec::pop).expect("an END closes a slice");
                got[closed].1 = ts;
            }
        }
        got
    }

    fn placed(slices: &[(u64, u64)]) -> Vec<usize> {
        let mut t = TrackLanes::default();
        slices.iter().map(|&(s, e)| t.place(s, e)).collect()
    }

    #[test]
    fn nested_and_disjoint_slices_share_the_track() {
        let slices = [(0, 100), (10, 20), (20, 30), (30, 100), (100, 110), (110, 110), (110, 120)];
        assert_eq!(placed(&slices), vec![0; slices.len()]);
    }

    #[test]
    fn an_overlapping_slice_moves_to_a_lane_and_keeps_its_times() {
        // A kernel that starts before the previous one ends (the A100 trace's case), then a third on time.
        let slices = [(490, 525), (523, 530), (540, 550), (545, 560)];
        let lanes = placed(&slices);
        assert_eq!(lanes, vec![0, 1, 0, 1]);
        assert_eq!(read_back(&slices, &lanes), slices);
    }

    #[test]
    fn late_slices_are_checked_against_what_was_written() {
        // A held launch call written after the calls that followed it; an NVTX range written when it closed;
        // a late slice that crosses one already written.
        let slices = [(0, 1000), (30, 40), (10, 20), (50, 60), (5, 70), (35, 55), (1000, 1001), (990, 1000)];
        let lanes = placed(&slices);
        assert_eq!(read_back(&slices, &lanes), slices);
        assert_eq!(&lanes[..5], &[0, 0, 0, 0, 0]);
        assert_ne!(lanes[5], 0, "crosses (30, 40) and (50, 60)");
    }

    #[test]
    fn every_random_mix_reads_back_exactly() {
        // Deterministic pseudo-random slices, mostly in start order with some late, many overlapping.
        let mut x = 0x2545f4914f6cdd1du64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..200 {
            let mut t = 1000u64;
            let slices: Vec<(u64, u64)> = (0..60)
                .map(|_| {
                    t += next(20);
                    let s = if next(5) == 0 { t.saturating_sub(next(60)) } else { t };
                    (s, s + next(50))
                })
                .collect();
            let lanes = placed(&slices);
            assert_eq!(read_back(&slices, &lanes), slices, "{slices:?} in lanes {lanes:?}");
        }
    }
}
