//! Host names: the one "unknown" for a trace that names none, and a name as it may appear in file and directory
//! names (`record -o run.%h.cuf`, the Parquet export's partitions).

use crate::model::trace::Process;

/// The host a process is placed by ("unknown" when its trace names none).
pub fn host_of(p: &Process) -> &str {
    if p.info.host.is_empty() {
        "unknown"
    } else {
        &p.info.host
    }
}

/// A host name in file names and as a partition value (`unknown` when the trace has none), at most 64
/// characters: Linux's HOST_NAME_MAX, so a real name is whole, and a longer one (an agent's word, another
/// process's) cannot make a file or directory name the file system refuses.
pub fn host_value(host: &str) -> String {
    if host.is_empty() {
        "unknown".into()
    } else {
        path_safe(&host.chars().take(64).collect::<String>())
    }
}

/// A value safe in a path or a URL (a hive partition value): other characters become `_`; never empty, never
/// hidden (a leading `.`).
pub fn path_safe(s: &str) -> String {
    let v: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).collect();
    if v.is_empty() || v.starts_with('.') {
        format!("_{v}")
    } else {
        v
    }
}
