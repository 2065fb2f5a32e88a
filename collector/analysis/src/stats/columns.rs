//! The columns every duration summary of `stats` shares, as `nsys stats` prints them: the share, total,
//! instances, average, median, least, most and standard deviation.

/// `nsys stats`' columns of a duration summary, in its order ([`stat_cells`] after the share).
pub const DURATION_COLUMNS: [&str; 8] =
    ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"];

/// Total, count, then avg, median, min, max and stddev: the cells every summary row shares.
pub fn stat_cells(total: u64, count: u64, stats: [u64; 5]) -> Vec<String> {
    let mut cells = vec![total.to_string(), count.to_string()];
    cells.extend(stats.iter().map(u64::to_string));
    cells
}
