//! Wall-clock times as people write them: an instant in UTC, and how far apart two are.

/// CLOCK_REALTIME ns as "2026-11-24 17:55:01 UTC" (the civil calendar from days since 1970, Howard Hinnant's
/// algorithm); "-" for 0.
pub fn utc(ns: u64) -> String {
    if ns == 0 {
        return "-".into();
    }
    let secs = ns / 1_000_000_000;
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem / 60 % 60, rem % 60)
}

/// A wall-clock distance in the unit that reads best: "3 min", "5 h", "12 days".
pub fn duration_words(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    match s {
        0..=5_399 => format!("{} min", s / 60),
        5_400..=172_799 => format!("{:.0} h", s as f64 / 3600.0),
        _ => format!("{:.0} days", s as f64 / 86_400.0),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn instants_and_distances_read_as_people_write_them() {
        assert_eq!(super::utc(1_795_542_901_000_000_000), "2026-11-24 17:55:01 UTC");
        assert_eq!(super::utc(951_782_400_000_000_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(super::utc(0), "-");
        let s = 1_000_000_000;
        assert_eq!(super::duration_words(61 * s), "1 min");
        assert_eq!(super::duration_words(3 * 3600 * s), "3 h");
        assert_eq!(super::duration_words(400 * 86_400 * s), "400 days");
    }
}
