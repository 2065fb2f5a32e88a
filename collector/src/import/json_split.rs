//! Splits a Chrome-trace JSON stream into its `traceEvents` elements without holding the document: one pass
//! over the bytes tracks strings and nesting, each element of the top-level `traceEvents` array is handed out
//! as its own byte slice (to be parsed from a slice, which serde_json does several times faster than from a
//! reader), and everything else is collected into a small "rest" document with that array emptied.
//! Memory stays bounded by the largest single event.

use std::io::BufRead;

#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("unexpected end of JSON (truncated file?)")]
    Eof,
    #[error("traceEvents holds something other than objects")]
    NotObjects,
    #[error("event {index}: {message}")]
    Event { index: u64, message: String },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dest {
    Rest,
    Element,
    Drop,
}

/// Streams `input`, calling `on_event` with each `traceEvents` element; returns the rest of the document.
///
/// Bytes are copied in runs (a run ends where its destination changes) and string contents are skipped with
/// a tight search for the next quote or backslash, so the scan costs a few instructions per byte.
pub fn split<R: BufRead>(
    mut input: R,
    mut on_event: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<(Vec<u8>, u64), SplitError> {
    let mut rest = Vec::new();
    let mut element = Vec::new();
    let (mut depth, mut in_string, mut escape) = (0u32, false, false);
    // The last string directly in the top-level object (a key, when followed by ':'); only those are copied.
    let mut key = Vec::new();
    let mut key_open = false;
    let mut in_events = false;
    let mut events = 0u64;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        let mut dest = if in_events && depth >= 3 {
            Dest::Element
        } else if in_events && depth == 2 {
            Dest::Drop
        } else {
            Dest::Rest
        };
        let mut seg = 0;
        let mut i = 0;
        macro_rules! flush {
            ($to:expr) => {{
                match dest {
                    Dest::Rest => rest.extend_from_slice(&chunk[seg..$to]),
                    Dest::Element => element.extend_from_slice(&chunk[seg..$to]),
                    Dest::Drop => {}
                }
                seg = $to;
            }};
        }
        while i < n {
            if in_string {
                // Skip to the next quote or backslash (or the chunk's end).
                if escape {
                    escape = false;
                    if key_open {
                        key.push(chunk[i]);
                    }
                    i += 1;
                    continue;
                }
                let stop = memchr::memchr2(b'"', b'\\', &chunk[i..]).map_or(n, |p| i + p);
                if key_open {
                    key.extend_from_slice(&chunk[i..stop]);
                }
                if stop == n {
                    break;
                }
                if chunk[stop] == b'\\' {
                    escape = true;
                } else {
                    in_string = false;
                    key_open = false;
                }
                i = stop + 1;
                continue;
            }
            if in_events && depth >= 3 {
                // Inside an element only quotes and braces decide where it ends (brackets nest inside them,
                // balanced; a malformed element fails when it is parsed): jump to the next one.
                match memchr::memchr3(b'"', b'{', b'}', &chunk[i..]) {
                    Some(p) => i += p,
                    None => break,
                }
            }
            let b = chunk[i];
            match b {
                b'"' => {
                    in_string = true;
                    if depth == 1 {
                        key.clear();
                        key_open = true;
                    }
                }
                b'{' | b'[' => {
                    depth += 1;
                    if depth == 2 && b == b'[' && key == b"traceEvents" {
                        in_events = true; // the '[' itself stays in the rest
                        flush!(i + 1);
                        dest = Dest::Drop;
                    } else if in_events && depth == 3 {
                        if b != b'{' {
                            return Err(SplitError::NotObjects);
                        }
                        flush!(i);
                        dest = Dest::Element;
                    }
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1).ok_or(SplitError::NotObjects)?;
                    if in_events && depth == 2 {
                        // An element that lies within this chunk is parsed in place, without a copy.
                        let parsed = if element.is_empty() {
                            let whole = &chunk[seg..i + 1];
                            seg = i + 1;
                            on_event(whole)
                        } else {
                            flush!(i + 1);
                            on_event(&element)
                        };
                        parsed.map_err(|message| SplitError::Event { index: events, message })?;
                        events += 1;
                        element.clear();
                        dest = Dest::Drop;
                    } else if in_events && depth == 1 {
                        in_events = false;
                        flush!(i);
                        dest = Dest::Rest;
                    }
                }
                b',' | b' ' | b'\n' | b'\r' | b'\t' => {}
                _ if in_events && depth == 2 => return Err(SplitError::NotObjects),
                _ => {}
            }
            i += 1;
        }
        match dest {
            Dest::Rest => rest.extend_from_slice(&chunk[seg..n]),
            Dest::Element => element.extend_from_slice(&chunk[seg..n]),
            Dest::Drop => {}
        }
        input.consume(n);
    }
    if depth != 0 || in_string {
        return Err(SplitError::Eof);
    }
    Ok((rest, events))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(doc: &str) -> Result<(String, Vec<String>), SplitError> {
        let mut seen = Vec::new();
        let (rest, _) = split(std::io::BufReader::with_capacity(7, doc.as_bytes()), |e| {
            seen.push(String::from_utf8_lossy(e).into_owned());
            Ok(())
        })?;
        Ok((String::from_utf8(rest).unwrap(), seen))
    }

    #[test]
    fn elements_come_out_whole_and_the_rest_keeps_other_keys() {
        let doc = r#"{"schemaVersion": 1, "traceEvents": [{"name": "a]}\"", "args": {"x": [1, 2]}}, {"ph": "X"}], "distributedInfo": {"rank": 3}}"#;
        let (rest, events) = run(doc).unwrap();
        assert_eq!(events, vec![r#"{"name": "a]}\"", "args": {"x": [1, 2]}}"#, r#"{"ph": "X"}"#]);
        let v: serde_json::Value = serde_json::from_str(&rest).unwrap();
        assert_eq!(v["distributedInfo"]["rank"], 3);
        assert_eq!(v["traceEvents"], serde_json::json!([]));
    }

    #[test]
    fn truncation_and_foreign_shapes_are_errors() {
        assert!(matches!(run(r#"{"traceEvents": [{"a": 1}, {"b""#), Err(SplitError::Eof)));
        assert!(matches!(run(r#"{"traceEvents": [1, 2]}"#), Err(SplitError::NotObjects)));
        // A nested "traceEvents" key is not the top-level array.
        let (rest, events) = run(r#"{"other": {"traceEvents": [1]}}"#).unwrap();
        assert!(events.is_empty() && rest.contains("other"));
    }
}
