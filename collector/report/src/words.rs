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

/// A duration as the report writes it ("12.34 ms"): the one rule for text, HTML and diff.
pub fn ms(ns: u64) -> String {
    format!("{:.2} ms", ns as f64 / 1e6)
}

/// A short duration in microseconds ("5.5 µs").
pub fn format_us(ns: u64) -> String {
    format!("{:.1} µs", ns as f64 / 1e3)
}
