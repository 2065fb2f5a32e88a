//! How the report counts things in words: a leaf that every part of the report may use (the warm-up's line as much
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
