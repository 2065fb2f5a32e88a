//! Interval arithmetic on sorted, disjoint `[start, end)` spans (ns): the vocabulary of every analysis.

pub type Span = (u64, u64);

/// Sorted, disjoint, non-empty spans covering the same time as `v` (compacted in place: no second buffer).
pub fn merge(mut v: Vec<Span>) -> Vec<Span> {
    v.retain(|s| s.1 > s.0);
    v.sort_unstable();
    let mut w = 0;
    for r in 0..v.len() {
        let (s, e) = v[r];
        if w > 0 && s <= v[w - 1].1 {
            v[w - 1].1 = v[w - 1].1.max(e);
        } else {
            v[w] = (s, e);
            w += 1;
        }
    }
    v.truncate(w);
    v.shrink_to_fit();
    v
}

/// [`merge`] built span by span: spans that come sorted by start (events are) are merged as they arrive, so
/// the union never holds more than its result; any out of order makes it keep them all and merge at the end.
#[derive(Default)]
pub struct Union {
    spans: Vec<Span>,
    sorted: bool,
    last_start: u64,
}

impl Union {
    pub fn new() -> Union {
        Union { spans: Vec::new(), sorted: true, last_start: 0 }
    }

    pub fn push(&mut self, (s, e): Span) {
        if e <= s {
            return;
        }
        if !self.sorted || s < self.last_start {
            self.sorted = false;
            self.spans.push((s, e));
            return;
        }
        self.last_start = s;
        match self.spans.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => self.spans.push((s, e)),
        }
    }

    pub fn finish(self) -> Vec<Span> {
        if self.sorted {
            let mut v = self.spans;
            v.shrink_to_fit();
            v
        } else {
            merge(self.spans)
        }
    }
}

pub fn total(u: &[Span]) -> u64 {
    u.iter().map(|(s, e)| e - s).sum()
}

/// The spans of `u` (merged) that overlap `[s, e)`, clipped to it.
pub fn clip(u: &[Span], s: u64, e: u64) -> impl Iterator<Item = Span> + '_ {
    let first = u.partition_point(|x| x.1 <= s);
    u[first..].iter().take_while(move |x| x.0 < e).map(move |x| (x.0.max(s), x.1.min(e))).filter(|x| x.1 > x.0)
}

/// Time of `u` (merged) inside `[s, e)`.
pub fn within(u: &[Span], s: u64, e: u64) -> u64 {
    clip(u, s, e).map(|(a, b)| b - a).sum()
}

/// `a` minus `b` (both merged).
pub fn subtract(a: &[Span], b: &[Span]) -> Vec<Span> {
    let mut out = Vec::new();
    for &(s, e) in a {
        let mut t = s;
        for (bs, be) in clip(b, s, e) {
            if bs > t {
                out.push((t, bs));
            }
            t = be;
        }
        if t < e {
            out.push((t, e));
        }
    }
    out
}

/// `a` intersected with `b` (both merged).
pub fn intersect(a: &[Span], b: &[Span]) -> Vec<Span> {
    a.iter().flat_map(|&(s, e)| clip(b, s, e)).collect()
}

/// Median of a list (0 when empty).
pub fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable(mid).1
}

/// Whether `t` falls inside one of `windows` (sorted, not overlapping).
pub fn in_windows(windows: &[(u64, u64)], t: u64) -> bool {
    window_of(windows, t).is_some()
}

/// The one of `windows` (sorted, not overlapping) that `t` falls inside.
pub fn window_of(windows: &[(u64, u64)], t: u64) -> Option<usize> {
    windows.partition_point(|w| w.0 <= t).checked_sub(1).filter(|&i| t < windows[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_union_built_span_by_span_equals_merge_in_any_order() {
        let spans = [(5, 9), (1, 3), (2, 4), (9, 12), (20, 20), (15, 18), (16, 17), (4, 4)];
        let mut sorted = spans.to_vec();
        sorted.sort_unstable();
        for input in [spans.to_vec(), sorted] {
            let mut u = Union::new();
            input.iter().for_each(|&s| u.push(s));
            assert_eq!(u.finish(), merge(input.clone()), "{input:?}");
        }
    }

    #[test]
    fn set_operations() {
        let a = merge(vec![(10, 20), (0, 5), (15, 30), (40, 40)]);
        assert_eq!(a, vec![(0, 5), (10, 30)]);
        let b = merge(vec![(3, 12), (25, 50)]);
        assert_eq!(subtract(&a, &b), vec![(0, 3), (12, 25)]);
        assert_eq!(intersect(&a, &b), vec![(3, 5), (10, 12), (25, 30)]);
        assert_eq!(within(&a, 4, 26), 1 + 16);
        assert_eq!(total(&a), 25);
        assert_eq!(median(vec![5, 1, 9]), 5);
    }
}
