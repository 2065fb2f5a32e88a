//! Which communication kernels of different ranks are one collective, when each rank joined it and how long each
//! waited for the last.
//!
//! A collective (all-reduce, all-gather, a send/recv pair) completes at nearly the same instant on every rank
//! that takes part: nobody leaves before the last has joined and the data has gone round. So on one clock (one
//! host's, or hosts aligned by [`cuflight_trace::model::align`]) kernels of one name whose ends lie within a tolerance
//! are one collective, one kernel per rank. That matching survives ranks that run different collectives (pipeline
//! send/recv between neighbours, sub-groups) and traces that hold a sample of each rank's kernels, where "the
//! k-th kernel of every rank" pairs strangers. Without a common clock (hosts placed only by NTP, milliseconds
//! apart) the k-th kernel of a name on each rank is taken as the same collective, as the order of collectives in
//! one process group is the same on all its ranks.
//!
//! A rank's **arrival** is when its kernel started; on a common clock the last arrival is when the collective
//! could begin, and each rank's **wait** is the time from its own arrival to the last one's (at most its kernel's
//! duration). Without a common clock arrivals are read off durations: the ends coincide, so a kernel that ran d
//! ns longer started d ns earlier.

use rustc_hash::FxHashMap;

/// One rank's communication kernel: its order among the rank's communication kernels, its name (an id shared
/// by all ranks), and its start and end on the rank's own clock and on the job's.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub ordinal: u32,
    pub name: u32,
    pub own_start: u64,
    pub start: i64,
    pub end: i64,
}

/// One rank's part in a collective.
#[derive(Debug, Clone, Copy)]
pub struct Member {
    pub rank: usize,
    pub op: Op,
    /// When it joined, on the scale the method compares (see the module docs).
    pub arrival: i64,
    /// Time it waited for the last rank to join.
    pub wait: u64,
}

#[derive(Debug, Clone)]
pub struct Instance {
    pub name: u32,
    /// One per rank, by rank index.
    pub members: Vec<Member>,
    /// Index into `members` of the last to join.
    pub last: usize,
}

impl Instance {
    /// The latest end among the members (on the job's clock).
    pub fn end(&self) -> i64 {
        self.members.iter().map(|m| m.op.end).max().unwrap_or(0)
    }

    /// How much later than the others (their median) `rank` joined; `None` if it did not take part.
    pub fn lateness(&self, rank: usize) -> Option<i64> {
        let me = self.members.iter().find(|m| m.rank == rank)?;
        let mut others: Vec<i64> = self.members.iter().filter(|m| m.rank != rank).map(|m| m.arrival).collect();
        if others.is_empty() {
            return None;
        }
        others.sort_unstable();
        // The lower median: with two others, the earlier one (the rank that was kept waiting).
        Some(me.arrival - others[(others.len() - 1) / 2])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Arrivals compared on one clock.
    Arrival,
    /// Durations compared (clocks not known to agree).
    Duration,
}

/// Kernels of one name whose ends lie within `tolerance` of each other's on the job's clock, one per rank.
/// A kernel left alone (its rank was descheduled as the collective ended, or its end was stamped late) then
/// joins the collective of its name that lacks its rank, runs while it runs (every member of a collective runs
/// from the last arrival to its own end, so all share an instant) and ended nearest, within ten tolerances.
/// Returns the collectives two ranks or more took part in, by end, and per rank how many of its kernels matched
/// no other rank's.
pub fn match_by_end(ops: &[Vec<Op>], tolerance: i64) -> (Vec<Instance>, Vec<u64>) {
    let mut all: Vec<(i64, usize, usize)> =
        ops.iter().enumerate().flat_map(|(r, v)| v.iter().enumerate().map(move |(i, o)| (o.end, r, i))).collect();
    all.sort_unstable();
    // Clusters still open: (anchor end, name, members' (rank, op index)).
    let mut open: Vec<Cluster> = Vec::new();
    let mut closed: Vec<Cluster> = Vec::new();
    for (end, r, i) in all {
        let name = ops[r][i].name;
        let mut k = 0;
        while k < open.len() {
            if open[k].0 < end.saturating_sub(tolerance) {
                closed.push(open.swap_remove(k));
            } else {
                k += 1;
            }
        }
        // The latest anchor is the nearest: every open one ended at or before this kernel.
        let join = open.iter_mut().filter(|c| c.1 == name && c.2.iter().all(|m| m.0 != r)).max_by_key(|c| c.0);
        match join {
            Some(c) => c.2.push((r, i)),
            None => open.push((end, name, vec![(r, i)])),
        }
    }
    closed.append(&mut open);
    closed.sort_by_key(|c| c.0);
    let (mut multi, single): (Vec<Cluster>, Vec<Cluster>) = closed.into_iter().partition(|c| c.2.len() > 1);
    let mut unmatched = vec![0u64; ops.len()];
    for (end, name, members) in single {
        let (r, i) = members[0];
        let me = ops[r][i];
        let from = multi.partition_point(|c| c.0 < end.saturating_sub(10 * tolerance));
        let best = (from..multi.len())
            .take_while(|&k| multi[k].0 <= end.saturating_add(10 * tolerance))
            .filter(|&k| multi[k].1 == name && multi[k].2.iter().all(|m| m.0 != r))
            .filter(|&k| {
                let latest_start = multi[k].2.iter().map(|&(r, i)| ops[r][i].start).max().unwrap_or(i64::MIN);
                let earliest_end = multi[k].2.iter().map(|&(r, i)| ops[r][i].end).min().unwrap_or(i64::MAX);
                me.start.max(latest_start) <= me.end.min(earliest_end)
            })
            .min_by_key(|&k| (multi[k].0 - end).abs());
        match best {
            Some(k) => multi[k].2.push((r, i)),
            None => unmatched[r] += 1,
        }
    }
    let out = multi
        .into_iter()
        .map(|(_, name, members)| {
            instance(name, members.iter().map(|&(r, i)| (r, ops[r][i])).collect(), Method::Arrival)
        })
        .collect();
    (out, unmatched)
}

/// A collective being matched: (anchor end, name, members' (rank, op index)).
type Cluster = (i64, u32, Vec<(usize, usize)>);

/// The k-th kernel of a name on every rank that has one is one collective.
pub fn match_by_occurrence(ops: &[Vec<Op>]) -> (Vec<Instance>, Vec<u64>) {
    let mut by_key: FxHashMap<(u32, u32), Vec<(usize, Op)>> = FxHashMap::default();
    for (r, v) in ops.iter().enumerate() {
        let mut seen: FxHashMap<u32, u32> = FxHashMap::default();
        for o in v {
            let n = seen.entry(o.name).or_default();
            by_key.entry((o.name, *n)).or_default().push((r, *o));
            *n += 1;
        }
    }
    let mut unmatched = vec![0u64; ops.len()];
    let mut out = Vec::new();
    for ((name, _), members) in by_key {
        if members.len() < 2 {
            unmatched[members[0].0] += 1;
            continue;
        }
        out.push(instance(name, members, Method::Duration));
    }
    // In the lowest rank's order (its ordinals are in time order).
    out.sort_by_key(|i| (i.members[0].rank, i.members[0].op.ordinal));
    (out, unmatched)
}

fn instance(name: u32, mut members: Vec<(usize, Op)>, method: Method) -> Instance {
    members.sort_by_key(|m| m.0);
    let arrival = |o: &Op| match method {
        Method::Arrival => o.start,
        Method::Duration => o.start - o.end,
    };
    let (last, latest) = members
        .iter()
        .enumerate()
        .map(|(i, m)| (i, arrival(&m.1)))
        .max_by_key(|&(i, a)| (a, std::cmp::Reverse(i)))
        .expect("two members");
    let members = members
        .into_iter()
        .map(|(rank, op)| {
            let duration = (op.end - op.start).max(0) as u64;
            let a = arrival(&op);
            Member { rank, op, arrival: a, wait: ((latest - a).max(0) as u64).min(duration) }
        })
        .collect();
    Instance { name, members, last }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(ordinal: u32, name: u32, start: i64, end: i64) -> Op {
        Op { ordinal, name, own_start: start as u64, start, end }
    }

    #[test]
    fn kernels_are_paired_by_their_ends_and_waits_follow_the_last_arrival() {
        // Rank 1 joins the first all-reduce 3 µs late and the second 1 µs late; rank 0's trace also holds a
        // kernel rank 1's sample lacks (a collective of rank 0's other group), which stays unmatched.
        let r0 = vec![op(0, 7, 0, 10_000), op(1, 7, 11_000, 12_000), op(2, 7, 20_000, 25_000)];
        let r1 = vec![op(0, 7, 3_000, 10_004), op(1, 7, 21_000, 25_010)];
        let (inst, unmatched) = match_by_end(&[r0, r1], 200);
        assert_eq!(inst.len(), 2);
        assert_eq!(unmatched, vec![1, 0]);
        let first = &inst[0];
        assert_eq!(first.members[first.last].rank, 1);
        assert_eq!((first.members[0].wait, first.members[1].wait), (3_000, 0));
        assert_eq!(first.lateness(1), Some(3_000));
        assert_eq!(inst[1].members[0].op.ordinal, 2);
        assert_eq!(inst[1].members[0].wait, 1_000);
    }

    #[test]
    fn back_to_back_collectives_are_not_merged() {
        // Two all-reduces 50 ns apart on both ranks, well within the tolerance: one kernel per rank each.
        let r = |d: i64| vec![op(0, 1, 0, 1_000 + d), op(1, 1, 1_000 + d, 1_050 + d)];
        let (inst, unmatched) = match_by_end(&[r(0), r(3)], 10_000);
        assert_eq!(inst.len(), 2);
        assert_eq!(unmatched, vec![0, 0]);
        assert!(inst.iter().all(|i| i.members.len() == 2 && i.members[0].op.ordinal == i.members[1].op.ordinal));
    }

    #[test]
    fn a_kernel_that_ended_late_joins_the_collective_it_ran_with() {
        // Rank 2's end was stamped 3 tolerances late; it still ran while the others did, so it is theirs. Rank
        // 3's kernel of that name ran after the collective: a collective of its own group, unmatched.
        let r0 = vec![op(0, 1, 0, 1_000)];
        let r1 = vec![op(0, 1, 500, 1_010)];
        let r2 = vec![op(0, 1, 100, 1_300)];
        let r3 = vec![op(0, 1, 1_450, 1_600)];
        let (inst, unmatched) = match_by_end(&[r0, r1, r2, r3], 100);
        assert_eq!(inst.len(), 1);
        assert_eq!(inst[0].members.iter().map(|m| m.rank).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(unmatched, vec![0, 0, 0, 1]);
    }

    #[test]
    fn without_a_common_clock_the_longer_kernel_waited() {
        // Clocks a second apart: the k-th kernels pair up and the shorter one joined last.
        let r0 = vec![op(0, 1, 0, 5_000), op(1, 2, 6_000, 7_000)];
        let r1 = vec![op(0, 1, 1_000_000_000, 1_000_002_000), op(1, 2, 1_000_003_000, 1_000_004_000)];
        let (inst, unmatched) = match_by_occurrence(&[r0, r1]);
        assert_eq!((inst.len(), unmatched), (2, vec![0, 0]));
        assert_eq!(inst[0].members[inst[0].last].rank, 1);
        assert_eq!(inst[0].members[0].wait, 3_000);
        assert_eq!(inst[0].lateness(1), Some(3_000));
    }
}
