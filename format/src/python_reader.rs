//! Why the agent reads no Python stacks in a Python process (`SegmentHeader::python_reader`'s low byte; the
//! interpreter's minor version above it), and what `record` and `stats` say of it.

/// Stacks are read.
pub const READING: u32 = 1;
/// A release the reader has no layout for.
pub const UNKNOWN_RELEASE: u32 = 2;
/// A free-threaded build (another object header), by the interpreter's own description of itself.
pub const FREE_THREADED: u32 = 3;
/// The interpreter describes its layout otherwise than the release's headers (a debug or patched build).
pub const OTHER_LAYOUT: u32 = 4;
/// The type objects the reader checks pointers against are not exported.
pub const NO_TYPES: u32 = 5;
/// The releases the reader has layouts for (the agent's generated layouts; a test checks they agree).
pub const FIRST_MINOR: u32 = 9;
pub const LAST_MINOR: u32 = 15;

/// `code` with the interpreter's minor version.
pub fn encode(code: u32, minor: u32) -> u32 {
    code | (minor & 0xff) << 8
}

/// Why no stacks were read, for the user; None when they were (or nobody looked).
pub fn describe(value: u32) -> Option<String> {
    let minor = value >> 8 & 0xff;
    let range = format!("3.{FIRST_MINOR} to 3.{LAST_MINOR}");
    Some(match value & 0xff {
        UNKNOWN_RELEASE => format!("CPython 3.{minor} is not a release the stack reader knows ({range})"),
        FREE_THREADED => format!("free-threaded CPython 3.{minor} is not supported by the stack reader"),
        OTHER_LAYOUT => {
            format!("CPython 3.{minor} describes its own layout otherwise than its release's headers (a debug or patched build)")
        }
        NO_TYPES => format!("CPython 3.{minor} does not export the code, str and bytes types the reader checks"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_names_the_release_and_reading_says_nothing() {
        assert_eq!(describe(0), None);
        assert_eq!(describe(encode(READING, 12)), None);
        for code in [UNKNOWN_RELEASE, FREE_THREADED, OTHER_LAYOUT, NO_TYPES] {
            let why = describe(encode(code, 16)).unwrap();
            assert!(why.contains("CPython 3.16"), "{why}");
        }
        assert!(describe(encode(FREE_THREADED, 14)).unwrap().starts_with("free-threaded"));
        // A value from another process is only read, never trusted: an unknown code says nothing.
        assert_eq!(describe(0xffff_ff77), None);
    }
}
