//! Clocks across hosts. Each process's times are its host's CLOCK_MONOTONIC; its clock pairs give its host's
//! REALTIME offset, which puts every host on the epoch within NTP's error (milliseconds). Collectives refine it:
//! the k-th collective of a name ends at nearly the same instant on every rank that takes part (a ring or tree
//! completes together), so for each host the median, over matching collectives, of (the reference host's end −
//! this host's end) is how far its clock is off. The reference is the host of the lowest rank (or the first
//! process). What is left, the median distance of the matched ends from the shift, is reported as the residual.
//!
//! Clocks also drift apart over a run (NTP slewing one host, or not yet settled): with enough matched
//! collectives the shift is followed through the run, as the median of each successive stretch of at least
//! [`KNOT_MIN`] of them, interpolated between stretches (their knots).

use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// How one host's clock was put on the reference's.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HostShift {
    /// The host.
    pub host: String,
    /// Added to this host's epoch times (after the REALTIME offset); 0 for the reference. The median over the
    /// run; `knots` follow it through the run when it changes.
    pub shift_ns: i64,
    /// Collective ends matched with the reference host's (0: none, the host keeps its REALTIME placement).
    pub matched: u64,
    /// Median |end difference − shift at that time| over the matched collectives.
    pub residual_ns: u64,
    /// Whether this is the reference host (every other host is shifted onto its clock).
    pub reference: bool,
    /// (this host's epoch time, shift) at the middle of successive stretches of matched collectives; between
    /// knots the shift is interpolated (see [`HostShift::at`]). Empty: `shift_ns` throughout.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub knots: Vec<(i64, i64)>,
}

/// Matched collectives per knot, at least.
pub const KNOT_MIN: usize = 16;
const MAX_KNOTS: usize = 64;

impl HostShift {
    /// The shift at this host's epoch time `t`. Beyond the first and last knots the end stretches' slope goes
    /// on for one more stretch's length, then the shift holds.
    pub fn at(&self, t: i64) -> i64 {
        let k = &self.knots;
        if k.len() < 2 {
            return k.first().map_or(self.shift_ns, |x| x.1);
        }
        let n = k.len();
        let (i, t) = if t < k[0].0 {
            (1, t.max(k[0].0 - (k[1].0 - k[0].0)))
        } else if t >= k[n - 1].0 {
            (n - 1, t.min(k[n - 1].0 + (k[n - 1].0 - k[n - 2].0)))
        } else {
            (k.partition_point(|x| x.0 <= t), t)
        };
        let ((t0, s0), (t1, s1)) = (k[i - 1], k[i]);
        let frac = (t - t0) as i128 * (s1 - s0) as i128 / (t1 - t0).max(1) as i128;
        s0.saturating_add(frac.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
    }
}

/// Puts one process's own times on the job's clock: its REALTIME offset, then its host's shift.
#[derive(Debug, Clone, Default)]
pub struct ToJob {
    pub realtime: i64,
    shift: Option<HostShift>,
}

impl ToJob {
    pub fn new(realtime: i64, host: Option<&HostShift>) -> ToJob {
        ToJob { realtime, shift: host.filter(|h| h.shift_ns != 0 || !h.knots.is_empty()).cloned() }
    }

    /// Within ±2^61 ns (±73 years around the epoch): any two such times subtract without overflow, whatever a
    /// hostile trace holds.
    pub fn at(&self, own: u64) -> i64 {
        const LIMIT: i64 = 1 << 61;
        let epoch = (own.min(i64::MAX as u64) as i64).saturating_add(self.realtime);
        epoch.saturating_add(self.shift.as_ref().map_or(0, |h| h.at(epoch))).clamp(-LIMIT, LIMIT)
    }

    /// [`ToJob::at`] for times that must stay unsigned (before the epoch: 0).
    pub fn at_u64(&self, own: u64) -> u64 {
        self.at(own).max(0) as u64
    }

    /// `e` with its times on the job's clock: the one rule for an event, merged or streamed. Timeless events (at
    /// 0) stay at 0; an end never comes before its start where it did not before.
    pub fn event(&self, e: &mut cuflight_format::RawEvent) {
        if e.start != 0 {
            let ended = e.end >= e.start;
            e.start = self.at_u64(e.start);
            e.end = self.at_u64(e.end);
            if ended {
                e.end = e.end.max(e.start);
            }
        }
    }

    /// What it adds at `own` (for display).
    pub fn offset_at(&self, own: u64) -> i64 {
        self.at(own).saturating_sub(own.min(i64::MAX as u64) as i64)
    }
}

/// The shift that puts each host onto the reference, by host name.
pub fn by_host(hosts: &[HostShift]) -> rustc_hash::FxHashMap<&str, &HostShift> {
    hosts.iter().map(|h| (h.host.as_str(), h)).collect()
}

/// One process, as alignment sees it: its host, rank, and its collectives' (name, end) on the epoch (its host's
/// REALTIME offset applied), in order. Built by [`super::job_clock`].
pub struct Member {
    pub host: String,
    pub rank: Option<u32>,
    pub collectives: Vec<(String, i64)>,
}

/// Per host, the shift that puts its clock on the reference host's.
pub fn align(members: &[Member]) -> Vec<HostShift> {
    let Some(reference) = members.iter().min_by_key(|m| (m.rank.is_none(), m.rank)).map(|m| m.host.clone()) else {
        return Vec::new();
    };
    // Each process's collectives keyed by (name, occurrence of that name).
    let keyed = |m: &Member| -> FxHashMap<(String, usize), i64> {
        let mut seen: FxHashMap<&str, usize> = FxHashMap::default();
        m.collectives
            .iter()
            .map(|(name, end)| {
                let k = seen.entry(name).or_default();
                *k += 1;
                ((name.clone(), *k), *end)
            })
            .collect()
    };
    let refs: Vec<FxHashMap<(String, usize), i64>> =
        members.iter().filter(|m| m.host == reference).map(keyed).collect();
    // Per host: (its end, reference end − its end).
    let mut hosts: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for m in members.iter().filter(|m| m.host != reference) {
        let deltas = hosts.entry(m.host.clone()).or_default();
        let mine = keyed(m);
        for r in &refs {
            for (key, end) in &mine {
                if let Some(theirs) = r.get(key) {
                    deltas.push((*end, theirs - end));
                }
            }
        }
    }
    let mut out = vec![HostShift {
        host: reference,
        shift_ns: 0,
        matched: 0,
        residual_ns: 0,
        reference: true,
        knots: Vec::new(),
    }];
    for (host, mut deltas) in hosts {
        if deltas.is_empty() {
            out.push(HostShift { host, shift_ns: 0, matched: 0, residual_ns: 0, reference: false, knots: Vec::new() });
            continue;
        }
        let mut values: Vec<i64> = deltas.iter().map(|d| d.1).collect();
        values.sort_unstable();
        let mut h = HostShift {
            host,
            shift_ns: values[values.len() / 2],
            matched: deltas.len() as u64,
            residual_ns: 0,
            reference: false,
            knots: Vec::new(),
        };
        deltas.sort_unstable();
        h.knots = knots(&deltas);
        let mut dev: Vec<u64> = deltas.iter().map(|&(t, d)| (d - h.at(t)).unsigned_abs()).collect();
        dev.sort_unstable();
        h.residual_ns = dev[dev.len() / 2];
        out.push(h);
    }
    out
}

/// Knots through (time, delta) pairs sorted by time: each stretch's middle time and median delta, with at
/// least two stretches of [`KNOT_MIN`] (else none: one shift holds).
fn knots(deltas: &[(i64, i64)]) -> Vec<(i64, i64)> {
    if deltas.len() < 2 * KNOT_MIN {
        return Vec::new();
    }
    let stretches = (deltas.len() / KNOT_MIN).min(MAX_KNOTS);
    let size = deltas.len().div_ceil(stretches);
    deltas
        .chunks(size)
        .map(|c| {
            let mut v: Vec<i64> = c.iter().map(|d| d.1).collect();
            v.sort_unstable();
            (c[c.len() / 2].0, v[v.len() / 2])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(host: &str, rank: u32, ends: &[i64]) -> Member {
        Member {
            host: host.into(),
            rank: Some(rank),
            collectives: ends.iter().map(|&e| ("ncclAllReduce".to_string(), e)).collect(),
        }
    }

    #[test]
    fn a_skewed_host_is_shifted_onto_the_reference() {
        // Host b's clock runs 7.3 ms ahead; its collectives end within a few µs of a's once shifted.
        let a = [1_000_000, 2_000_000, 3_000_000, 4_000_000];
        let b: Vec<i64> = a.iter().zip([3, -5, 8, 1]).map(|(e, jitter)| e + 7_300_000 + jitter).collect();
        let shifts = align(&[member("a", 0, &a), member("a", 1, &a), member("b", 2, &b), member("b", 3, &b)]);
        assert!(shifts[0].reference && shifts[0].host == "a");
        let b = &shifts[1];
        assert_eq!((b.host.as_str(), b.matched), ("b", 16));
        assert!((b.shift_ns + 7_300_000).abs() <= 8, "{b:?}");
        assert!(b.residual_ns <= 10, "{b:?}");
        assert!(b.knots.is_empty(), "16 matched ends per rank pair: too few to follow a drift");
        // No collectives in common: no shift, said so.
        let lone = align(&[member("a", 0, &a), Member { host: "c".into(), rank: Some(1), collectives: vec![] }]);
        assert_eq!((lone[1].matched, lone[1].shift_ns), (0, 0));
    }

    #[test]
    fn a_drifting_clock_is_followed_through_the_run() {
        // Host b runs 7.3 ms ahead and gains 500 ppm: 5 ms more over a 10 s run. One shift would leave about
        // 1.25 ms of residual; the knots follow it to within a few µs.
        let a: Vec<i64> = (0..200).map(|k| 1_000_000_000 + k * 50_000_000).collect();
        let b: Vec<i64> =
            a.iter().enumerate().map(|(k, e)| e + 7_300_000 + (e - a[0]) / 2_000 + [3, -5, 8, 1][k % 4]).collect();
        let shifts = align(&[member("a", 0, &a), member("b", 1, &b)]);
        let h = &shifts[1];
        assert!(h.knots.len() >= 8, "{h:?}");
        assert!(h.residual_ns <= 30_000, "{h:?}");
        for (ea, eb) in a.iter().zip(&b).step_by(7) {
            let error = eb + h.at(*eb) - ea;
            assert!(error.abs() <= 40_000, "{error} ns off at {eb}: {h:?}");
        }
        let to_job = ToJob::new(0, Some(h));
        assert!((to_job.at(b[199] as u64) - a[199]).abs() <= 40_000);
    }
}
