//! The JSON text the Chrome export writes, by hand: integers and exact microseconds without the formatting
//! machinery, string literals escaped as RFC 8259 asks, and complete and metadata events appended to a buffer
//! handed to the writer in chunks.

use std::fmt;
use std::io::Write;

/// Nanoseconds as Kineto's microsecond text, exactly (`1234567` → `1234.567`).
pub fn us(ns: u64) -> String {
    Us(ns).to_string()
}

/// [`us`] without the allocation.
pub(super) struct Us(pub(super) u64);

impl fmt::Display for Us {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// A JSON string literal (RFC 8259 escaping).
pub(super) struct Js<'a>(pub(super) &'a str);

impl fmt::Display for Js<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        let s = self.0;
        let mut from = 0;
        for (i, b) in s.bytes().enumerate() {
            let esc = match b {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0..=0x1f => "",
                _ => continue,
            };
            f.write_str(&s[from..i])?;
            if esc.is_empty() {
                write!(f, "\\u{b:04x}")?;
            } else {
                f.write_str(esc)?;
            }
            from = i + 1;
        }
        f.write_str(&s[from..])?;
        f.write_str("\"")
    }
}

/// Appends `v` in decimal, without the formatting machinery (most of what this export writes is integers).
pub(super) fn push_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(cuflight_format::decimal::digits(v, &mut [0u8; 20]));
}

/// Appends [`Us`]'s text.
pub(super) fn push_us(buf: &mut Vec<u8>, ns: u64) {
    push_u64(buf, ns / 1000);
    let frac = ns % 1000;
    buf.extend_from_slice(&[b'.', b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8]);
}

/// Appends [`Js`]'s text; names rarely need escaping, so those that do not are copied as they are.
pub(super) fn push_js(buf: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    } else {
        let _ = write!(buf, "{}", Js(s));
    }
}

/// Events are written into `buf`, handed to `w` in chunks of about this size.
pub(super) const OUTPUT_CHUNK: usize = 1 << 20;

pub(super) struct Out<W: Write> {
    pub(super) w: W,
    pub(super) buf: Vec<u8>,
    pub(super) first: bool,
    pub(super) events: u64,
}

impl<W: Write> Out<W> {
    /// Starts the next trace event (the separator) and counts it.
    pub(super) fn next(&mut self) -> std::io::Result<&mut Vec<u8>> {
        if self.buf.len() >= OUTPUT_CHUNK {
            self.drain()?;
        }
        if !std::mem::take(&mut self.first) {
            self.buf.extend_from_slice(b",\n");
        }
        self.events += 1;
        Ok(&mut self.buf)
    }

    /// Hands what is buffered to the writer.
    pub(super) fn drain(&mut self) -> std::io::Result<()> {
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// A complete ("X") event; `args` is the inside of the args object.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn complete(
        &mut self,
        cat: &str,
        name: &str,
        pid: u64,
        tid: u64,
        start: u64,
        end: u64,
        args: fmt::Arguments,
    ) -> std::io::Result<()> {
        self.complete_with(cat, name, pid, tid, start, end, |b| {
            let _ = b.write_fmt(args);
        })
    }

    /// [`Out::complete`] with the args written by `args` into the buffer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn complete_with(
        &mut self,
        cat: &str,
        name: &str,
        pid: u64,
        tid: u64,
        start: u64,
        end: u64,
        args: impl FnOnce(&mut Vec<u8>),
    ) -> std::io::Result<()> {
        let b = self.next()?;
        b.extend_from_slice(br#"{"ph":"X","cat":"#);
        push_js(b, cat);
        b.extend_from_slice(br#","name":"#);
        push_js(b, name);
        b.extend_from_slice(br#","pid":"#);
        push_u64(b, pid);
        b.extend_from_slice(br#","tid":"#);
        push_u64(b, tid);
        b.extend_from_slice(br#","ts":"#);
        push_us(b, start);
        b.extend_from_slice(br#","dur":"#);
        push_us(b, end.saturating_sub(start));
        b.extend_from_slice(br#","args":{"#);
        args(b);
        b.extend_from_slice(b"}}");
        Ok(())
    }

    pub(super) fn metadata(&mut self, what: &str, pid: u64, tid: u64, name: &str) -> std::io::Result<()> {
        write!(self.next()?, r#"{{"ph":"M","name":"{what}","pid":{pid},"tid":{tid},"args":{{"name":{}}}}}"#, Js(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_written_numbers_and_strings_match_their_display() {
        for v in [0, 7, 999, 1000, 1001, 123_456_789, u32::MAX as u64, u64::MAX] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            push_u64(&mut a, v);
            push_us(&mut b, v);
            assert_eq!(String::from_utf8(a).unwrap(), v.to_string());
            assert_eq!(String::from_utf8(b).unwrap(), us(v));
        }
        for s in ["", "gemm", "void k<1>(float*)", "a\"b", "back\\slash", "tab\tnew\nline", "\u{1}", "µs ünïcode"] {
            let mut a = Vec::new();
            push_js(&mut a, s);
            assert_eq!(String::from_utf8(a).unwrap(), Js(s).to_string(), "{s:?}");
        }
    }

    #[test]
    fn strings_are_escaped_as_json() {
        let s = "a\"b\\c\nd\u{1}é<>";
        let text = Js(s).to_string();
        assert_eq!(serde_json::from_str::<String>(&text).unwrap(), s);
        assert_eq!(text, r#""a\"b\\c\nd\u0001é<>""#);
    }
}
