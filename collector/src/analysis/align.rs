//! Clocks across hosts. Each process's times are its host's CLOCK_MONOTONIC; its clock pairs give its host's
//! REALTIME offset, which puts every host on the epoch within NTP's error (milliseconds). Collectives refine it:
//! the k-th collective of a name ends at nearly the same instant on every rank that takes part (a ring or tree
//! completes together), so for each host the median, over matching collectives, of (the reference host's end −
//! this host's end) is how far its clock is off. The reference is the host of the lowest rank (or the first
//! process). What is left, the median distance of the matched ends from the shift, is reported as the residual.

use crate::analysis::report::plan::Plan;
use crate::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// How one host's clock was put on the reference's.
#[derive(Debug, Clone, Serialize)]
pub struct HostShift {
    pub host: String,
    /// Added to this host's epoch times (after the REALTIME offset); 0 for the reference.
    pub shift_ns: i64,
    /// Collective ends matched with the reference host's (0: none, the host keeps its REALTIME placement).
    pub matched: u64,
    /// Median |end difference − shift| over the matched collectives.
    pub residual_ns: u64,
    pub reference: bool,
}

/// One process, as alignment sees it: its host, rank, REALTIME offset, and its collectives' (name, end) on the
/// epoch, in order.
pub struct Member {
    pub host: String,
    pub rank: Option<u32>,
    pub collectives: Vec<(String, i64)>,
}

impl Member {
    pub fn new(p: &Process, plan: &Plan, realtime_offset: i64) -> Member {
        let host = if p.info.host.is_empty() { "unknown".to_string() } else { p.info.host.clone() };
        let collectives = plan
            .comm
            .iter()
            .map(|c| (p.string(c.name).to_string(), (c.start + c.duration) as i64 + realtime_offset))
            .collect();
        Member { host, rank: p.rank, collectives }
    }
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
    let mut hosts: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for m in members.iter().filter(|m| m.host != reference) {
        let deltas = hosts.entry(m.host.clone()).or_default();
        let mine = keyed(m);
        for r in &refs {
            for (key, end) in &mine {
                if let Some(theirs) = r.get(key) {
                    deltas.push(theirs - end);
                }
            }
        }
    }
    let mut out = vec![HostShift { host: reference, shift_ns: 0, matched: 0, residual_ns: 0, reference: true }];
    for (host, mut deltas) in hosts {
        if deltas.is_empty() {
            out.push(HostShift { host, shift_ns: 0, matched: 0, residual_ns: 0, reference: false });
            continue;
        }
        deltas.sort_unstable();
        let shift = deltas[deltas.len() / 2];
        let mut dev: Vec<u64> = deltas.iter().map(|d| (d - shift).unsigned_abs()).collect();
        dev.sort_unstable();
        out.push(HostShift {
            host,
            shift_ns: shift,
            matched: deltas.len() as u64,
            residual_ns: dev[dev.len() / 2],
            reference: false,
        });
    }
    out
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
        // No collectives in common: no shift, said so.
        let lone = align(&[member("a", 0, &a), Member { host: "c".into(), rank: Some(1), collectives: vec![] }]);
        assert_eq!((lone[1].matched, lone[1].shift_ns), (0, 0));
    }
}
