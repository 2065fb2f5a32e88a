//! A duration (or size) distribution in bounded memory: count, total, min, max, mean and standard deviation
//! exactly (Welford's running moments, merged with Chan's formula), and the median exactly up to
//! [`EXACT`] values, from a log-linear histogram beyond (within 1/2048 of the value, 0.05%). `nsys stats`
//! prints Med and StdDev beside Avg because an average alone misleads (a few long `cudaDeviceSynchronize` calls
//! among many short ones); the stats accumulator keeps one of these per name, never the events.

use rustc_hash::FxHashMap;

/// Values kept as they are before the histogram takes over.
const EXACT: usize = 4096;
/// Values below this fall in buckets of their own; above, 1024 buckets per power of two.
const LINEAR: u64 = 1024;
const SUB_BITS: u32 = 10;

#[derive(Default, Clone, Debug)]
pub struct Dist {
    pub count: u64,
    pub total: u64,
    pub min: u64,
    pub max: u64,
    mean: f64,
    m2: f64,
    exact: Vec<u64>,
    /// Bucket -> count, once more than `EXACT` values were seen (then `exact` is empty).
    hist: Option<FxHashMap<u32, u64>>,
}

fn bucket(v: u64) -> u32 {
    if v < LINEAR {
        return v as u32;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (e - SUB_BITS)) & (LINEAR - 1);
    (LINEAR + (e - SUB_BITS) as u64 * LINEAR + sub) as u32
}

/// The middle of bucket `b`'s range of values.
fn bucket_value(b: u32) -> u64 {
    let b = b as u64;
    if b < LINEAR {
        return b;
    }
    let e = (b - LINEAR) / LINEAR + SUB_BITS as u64;
    let sub = (b - LINEAR) % LINEAR;
    let low = (1u64 << e) | (sub << (e - SUB_BITS as u64));
    let width = 1u64 << (e - SUB_BITS as u64);
    low + width / 2
}

impl Dist {
    pub fn add(&mut self, v: u64) {
        self.min = if self.count == 0 { v } else { self.min.min(v) };
        self.max = self.max.max(v);
        self.count += 1;
        self.total = self.total.saturating_add(v);
        let delta = v as f64 - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (v as f64 - self.mean);
        match &mut self.hist {
            Some(h) => *h.entry(bucket(v)).or_default() += 1,
            None => {
                self.exact.push(v);
                if self.exact.len() > EXACT {
                    self.spill();
                }
            }
        }
    }

    fn spill(&mut self) {
        let mut h = self.hist.take().unwrap_or_default();
        for v in self.exact.drain(..) {
            *h.entry(bucket(v)).or_default() += 1;
        }
        self.exact.shrink_to_fit();
        self.hist = Some(h);
    }

    pub fn merge(&mut self, o: &Dist) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = o.clone();
            return;
        }
        let n = (self.count + o.count) as f64;
        let delta = o.mean - self.mean;
        self.m2 += o.m2 + delta * delta * self.count as f64 * o.count as f64 / n;
        self.mean += delta * o.count as f64 / n;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.count += o.count;
        self.total = self.total.saturating_add(o.total);
        if self.hist.is_none() && o.hist.is_none() && self.exact.len() + o.exact.len() <= EXACT {
            self.exact.extend_from_slice(&o.exact);
            return;
        }
        self.spill();
        let h = self.hist.get_or_insert_with(Default::default);
        for &v in &o.exact {
            *h.entry(bucket(v)).or_default() += 1;
        }
        for (&b, &c) in o.hist.iter().flatten() {
            *h.entry(b).or_default() += c;
        }
    }

    pub fn avg(&self) -> u64 {
        self.total / self.count.max(1)
    }

    /// The median: exact (the mean of the two middle values for an even count) up to `EXACT` values, else the
    /// middle of the histogram bucket holding it.
    pub fn median(&self) -> u64 {
        if self.count == 0 {
            return 0;
        }
        match &self.hist {
            None => {
                let mut v = self.exact.clone();
                v.sort_unstable();
                let n = v.len();
                if n % 2 == 1 {
                    v[n / 2]
                } else {
                    v[n / 2 - 1] / 2 + v[n / 2] / 2 + (v[n / 2 - 1] % 2 + v[n / 2] % 2) / 2
                }
            }
            Some(h) => {
                let mut buckets: Vec<(u32, u64)> = h.iter().map(|(&b, &c)| (b, c)).collect();
                buckets.sort_unstable();
                let half = self.count.div_ceil(2);
                let mut seen = 0;
                for (b, c) in buckets {
                    seen += c;
                    if seen >= half {
                        return bucket_value(b).clamp(self.min, self.max);
                    }
                }
                self.max
            }
        }
    }

    /// The sample standard deviation (n - 1 in the denominator, as `nsys stats`); 0 for fewer than two values.
    pub fn stddev(&self) -> u64 {
        if self.count < 2 {
            return 0;
        }
        (self.m2 / (self.count - 1) as f64).max(0.0).sqrt().round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_sets_are_exact() {
        let mut d = Dist::default();
        for v in [8867, 10, 2_000_000, 9000, 8000] {
            d.add(v);
        }
        assert_eq!((d.count, d.min, d.max, d.median(), d.avg()), (5, 10, 2_000_000, 8867, 405_175));
        // Sample standard deviation of the five values.
        assert_eq!(d.stddev(), 891_542); // statistics.stdev in Python
        let mut even = Dist::default();
        for v in [1, 2, 3, 10] {
            even.add(v);
        }
        assert_eq!(even.median(), 2); // (2 + 3) / 2 in integers
    }

    #[test]
    fn large_sets_keep_the_median_within_one_percent_and_moments_exact() {
        let mut d = Dist::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut all = Vec::new();
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = 1_000 + x % 5_000_000;
            all.push(v);
            d.add(v);
        }
        all.sort_unstable();
        let exact = all[all.len() / 2 - 1] / 2 + all[all.len() / 2] / 2;
        let got = d.median();
        assert!((got as f64 / exact as f64 - 1.0).abs() < 0.001, "{got} vs {exact}");
        let mean = all.iter().sum::<u64>() as f64 / all.len() as f64;
        let var = all.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / (all.len() - 1) as f64;
        assert!((d.stddev() as f64 - var.sqrt()).abs() <= 1.0);
        assert!(d.hist.as_ref().is_some_and(|h| h.len() < 30_000), "bounded memory");
    }

    #[test]
    fn merging_equals_adding_everything_to_one() {
        let (mut a, mut b, mut all) = (Dist::default(), Dist::default(), Dist::default());
        for v in 0..9000u64 {
            let v = v * v % 7919;
            if v % 3 == 0 { &mut a } else { &mut b }.add(v);
            all.add(v);
        }
        a.merge(&b);
        assert_eq!((a.count, a.total, a.min, a.max), (all.count, all.total, all.min, all.max));
        assert_eq!(a.stddev(), all.stddev());
        assert_eq!(a.median(), all.median());
        let mut small = Dist::default();
        small.add(5);
        let mut empty = Dist::default();
        empty.merge(&small);
        assert_eq!((empty.median(), empty.stddev()), (5, 0));
    }

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for v in [0u64, 1, 1023, 1024, 1025, 2047, 2048, 1 << 20, (1 << 20) + 12345, u64::MAX] {
            let b = bucket(v);
            assert!(b >= last);
            last = b;
            let mid = bucket_value(b) as f64;
            assert!(v < LINEAR && mid == v as f64 || (mid / v as f64 - 1.0).abs() < 0.001, "{v} -> {mid}");
        }
    }
}
