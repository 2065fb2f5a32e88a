//! Small accumulators the window sweep keeps per process, each bounded by what it reports (distinct names,
//! distinct durations, five examples), never by the number of events.

use super::spans::Span;
use cuflight_format::RawEvent;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Exact order statistics of durations, kept as counts per distinct value.
#[derive(Default, Debug)]
pub struct Counts {
    by_value: FxHashMap<u64, u64>,
    n: u64,
}

impl Counts {
    pub fn add(&mut self, v: u64) {
        *self.by_value.entry(v).or_default() += 1;
        self.n += 1;
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    fn sorted(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.by_value.iter().map(|(&v, &c)| (v, c)).collect();
        v.sort_unstable();
        v
    }

    /// The value at index n/2 of the sorted values (the upper median), 0 when empty: [`super::spans::median`].
    pub fn median(&self) -> u64 {
        let mut seen = 0;
        for (v, c) in self.sorted() {
            seen += c;
            if seen > self.n / 2 {
                return v;
            }
        }
        0
    }

    /// How many values are below `v`.
    pub fn below(&self, v: u64) -> u64 {
        self.by_value.iter().filter(|(&x, _)| x < v).map(|(_, c)| c).sum()
    }
}

/// The longest events (at most five), longest first; of equal ones, the earliest seen.
#[derive(Default, Debug)]
pub struct Longest(pub Vec<RawEvent>);

impl Longest {
    pub fn add(&mut self, e: &RawEvent) {
        let at = self.0.partition_point(|w| w.duration() >= e.duration());
        if at < 5 {
            self.0.insert(at, *e);
            self.0.truncate(5);
        }
    }
}

/// Kernels grouped by name: (count, total ns, the first one's launch configuration `a, b, c`).
#[derive(Default, Debug)]
pub struct KernelAgg {
    pub by_name: FxHashMap<u32, (u64, u64, [u64; 3])>,
    pub count: u64,
    pub total_ns: u64,
}

impl KernelAgg {
    pub fn add(&mut self, e: &RawEvent) {
        let r = self.by_name.entry(e.name).or_insert((0, 0, e.launch_key()));
        r.0 += 1;
        r.1 = r.1.saturating_add(e.duration());
        self.count += 1;
        self.total_ns = self.total_ns.saturating_add(e.duration());
    }
}

/// Spans that arrive sorted by start, merged as they come: only the total is kept.
#[derive(Default, Debug)]
pub struct UnionTotal {
    current: Option<Span>,
    total: u64,
}

impl UnionTotal {
    pub fn push(&mut self, (s, e): Span) {
        if e <= s {
            return;
        }
        match &mut self.current {
            Some(c) if s <= c.1 => c.1 = c.1.max(e),
            Some(c) => {
                self.total += c.1 - c.0;
                *c = (s, e);
            }
            None => self.current = Some((s, e)),
        }
    }

    pub fn total(&self) -> u64 {
        self.total + self.current.map_or(0, |c| c.1 - c.0)
    }
}

/// Copies of one kind (pageable, or the others) that start inside steps.
#[derive(Default, Debug)]
pub struct Copies {
    pub count: u64,
    pub bytes: u64,
    pub busy_ns: u64,
    /// Time inside windows (pageable) or inside windows with no compute beside it (the others).
    pub lost_ns: u64,
    pub longest: Longest,
}

impl Copies {
    pub fn add(&mut self, e: &RawEvent) {
        self.count += 1;
        self.bytes = self.bytes.saturating_add(e.as_copy().bytes);
        self.busy_ns = self.busy_ns.saturating_add(e.duration());
        self.longest.add(e);
    }
}

/// Rows of calls by name: (count, total ns).
pub type CallTotals = BTreeMap<String, (u64, u64)>;

pub fn add_call(rows: &mut CallTotals, name: &str, ns: u64) {
    match rows.get_mut(name) {
        Some(r) => {
            r.0 += 1;
            r.1 = r.1.saturating_add(ns);
        }
        None => {
            rows.insert(name.to_string(), (1, ns));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_give_the_same_median_as_sorting() {
        for v in [vec![], vec![5], vec![5, 1], vec![5, 1, 9], vec![3, 3, 1, 7, 7, 7, 2, 9]] {
            let mut c = Counts::default();
            v.iter().for_each(|&x| c.add(x));
            assert_eq!(c.median(), super::super::spans::median(v.clone()), "{v:?}");
            assert_eq!(c.below(7), v.iter().filter(|&&x| x < 7).count() as u64);
        }
    }

    #[test]
    fn the_longest_keep_the_first_of_equals() {
        let mut l = Longest::default();
        for (i, d) in [5u64, 9, 5, 9, 1, 9, 9, 9].iter().enumerate() {
            l.add(&RawEvent::new(cuflight_format::EventKind::Memcpy, i as u32, 100, 100 + d));
        }
        let tids: Vec<u32> = l.0.iter().map(|e| e.tid).collect();
        assert_eq!(tids, vec![1, 3, 5, 6, 7]);
    }
}

/// Kernel time of the analysed steps by kind of work ([`cuflight_trace::model::kernel_category`]).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct CategoryShare {
    /// The kernel category (gemm, attention, communication, ...).
    pub category: &'static str,
    /// Its kernels in the analysed steps.
    pub count: u64,
    /// Their device time, summed.
    pub total_ns: u64,
    /// Of all kernel time in the analysed steps.
    pub share_of_kernel_time: f64,
    /// Per step, when there are steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_step_ns: Option<u64>,
}

impl KernelAgg {
    /// The kernels by category, largest first; `name` gives a kernel's name from its string id.
    pub fn by_category<'a>(&self, name: impl Fn(u32) -> &'a str, steps: usize) -> Vec<CategoryShare> {
        use cuflight_trace::model::kernel_category::{kernel_category, Category};
        let mut sums: Vec<(Category, u64, u64)> = Vec::new();
        for (&id, &(count, total, _)) in &self.by_name {
            let c = kernel_category(name(id));
            match sums.iter_mut().find(|s| s.0 == c) {
                Some(s) => {
                    s.1 += count;
                    s.2 = s.2.saturating_add(total);
                }
                None => sums.push((c, count, total)),
            }
        }
        sums.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        sums.into_iter()
            .map(|(c, count, total_ns)| CategoryShare {
                category: c.as_str(),
                count,
                total_ns,
                share_of_kernel_time: if self.total_ns == 0 { 0.0 } else { total_ns as f64 / self.total_ns as f64 },
                per_step_ns: (steps > 0).then(|| total_ns / steps as u64),
            })
            .collect()
    }
}
