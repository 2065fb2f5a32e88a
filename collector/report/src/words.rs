//! How the report counts things and writes durations in words: a leaf that every part of the report may use (the warm-up's line as much
//! as the findings').

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

/// A duration as the report writes it ("12.34 ms"): the one rule for text, HTML and diff.
pub fn ms(ns: u64) -> String {
    format!("{:.2} ms", ns as f64 / 1e6)
}

/// A short duration in microseconds ("5.5 µs").
pub fn format_us(ns: u64) -> String {
    format!("{:.1} µs", ns as f64 / 1e3)
}
