//! How the report counts things and writes durations in words: a leaf that every part of the report may use (the warm-up's line as much
//! as the findings').

/// What a sentence says on ROCm: one rule with `stats` ([`cuflight_trace::model::platform_terms`]).
pub use cuflight_trace::model::platform_terms::in_rocm_terms;

/// A count and its noun, singular for one: "1 call", "3 calls".
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How often something happened: "once", "3 times".
pub fn times(n: u64) -> String {
    if n == 1 {
        "once".into()
    } else {
        format!("{n} times")
    }
}

/// A fraction (0 to 1) as a percentage in words: whole percents, but one decimal below 10% so that a small share
/// is not "0%" beside a table's "0.2%" (HTA's trace_compare pair: 0.2% GPU utilisation read "0% → 0%").
pub fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p > 0.0 && p < 9.95 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// A duration as the report writes it ("12.34 ms"): the one rule for text, HTML and diff. Under 5 µs, which two
/// decimals of a millisecond would write as nothing ("0.00 ms idle", 50% of a test trace's 40 ns), in µs or ns.
pub fn ms(ns: u64) -> String {
    match ns {
        1..=999 => format!("{ns} ns"),
        1_000..=4_999 => format!("{:.1} µs", ns as f64 / 1e3),
        _ => format!("{:.2} ms", ns as f64 / 1e6),
    }
}

/// A short duration in microseconds ("5.5 µs"); under 0.1 µs in ns.
pub fn format_us(ns: u64) -> String {
    match ns {
        1..=99 => format!("{ns} ns"),
        _ => format!("{:.1} µs", ns as f64 / 1e3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_too_short_for_milliseconds_keep_their_figure() {
        assert_eq!(ms(0), "0.00 ms");
        assert_eq!(ms(40), "40 ns");
        assert_eq!(ms(3_000), "3.0 µs");
        assert_eq!(ms(5_000), "0.01 ms");
        assert_eq!(ms(12_345_678), "12.35 ms");
        assert_eq!(percent(0.002), "0.2%");
        assert_eq!((format_us(10), format_us(5_500)), ("10 ns".to_string(), "5.5 µs".to_string()));
    }
}
