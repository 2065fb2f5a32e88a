//! Names cut for a terminal line (kernel names run to hundreds of characters; JSON keeps them whole).

/// A name cut to at most `max` characters, ending in `ellipsis` when cut.
pub fn shorten(name: &str, max: usize, ellipsis: &str) -> String {
    if name.chars().count() > max {
        let keep = max - ellipsis.chars().count();
        format!("{}{ellipsis}", name.chars().take(keep).collect::<String>())
    } else {
        name.to_string()
    }
}

/// Kernel names for the terminal.
pub fn short_name(name: &str) -> String {
    shorten(name, 60, "...")
}
