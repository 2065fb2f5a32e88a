//! A one-pass JSON scanner for Chrome/Kineto traces: the document streams through a window, and each item (the
//! top-level keys, each `traceEvents` element) is parsed straight from the window's bytes. A parse that runs off
//! the window's end reports [`Scan::More`]; the window then keeps the unfinished item, reads more behind it and
//! the item is parsed again, so no byte is copied into a per-event buffer and none is read twice by two parsers
//! (the splitter-then-serde path it replaces read every byte twice). Memory stays bounded by the window, which
//! grows only for an item larger than itself.
//!
//! The primitives are deliberately lenient where leniency costs nothing (a skipped value's strings are not
//! checked for UTF-8), and strict where a mistake would misplace data (nesting, string ends, truncation).

use std::borrow::Cow;
use std::io::Read;

/// Why a parse stopped.
#[derive(Debug)]
pub enum Scan {
    /// The window ends inside the item: read more and parse it again.
    More,
    /// The bytes are not JSON of the expected shape.
    Bad(&'static str),
}

pub type Scanned<T> = Result<T, Scan>;

/// The index of the first non-whitespace byte at or after `i`.
#[inline]
pub fn ws(b: &[u8], mut i: usize) -> Scanned<usize> {
    while let Some(&c) = b.get(i) {
        if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
            return Ok(i);
        }
        i += 1;
    }
    Err(Scan::More)
}

/// Skips whitespace and the byte `c`; the index after it.
#[inline]
pub fn expect(b: &[u8], i: usize, c: u8, what: &'static str) -> Scanned<usize> {
    let i = ws(b, i)?;
    if b[i] == c {
        Ok(i + 1)
    } else {
        Err(Scan::Bad(what))
    }
}

/// A string as written between its quotes, and whether it holds escapes.
#[derive(Clone, Copy)]
pub struct RawStr<'a> {
    pub bytes: &'a [u8],
    pub escaped: bool,
}

impl<'a> RawStr<'a> {
    /// The string's text: borrowed when it has no escapes, decoded otherwise.
    pub fn text(self) -> Scanned<Cow<'a, str>> {
        if !self.escaped {
            return std::str::from_utf8(self.bytes).map(Cow::Borrowed).map_err(|_| Scan::Bad("invalid UTF-8"));
        }
        unescape(self.bytes).map(Cow::Owned)
    }

    /// The string's bytes with escapes decoded (for comparing keys).
    pub fn key(self) -> Scanned<Cow<'a, [u8]>> {
        if !self.escaped {
            return Ok(Cow::Borrowed(self.bytes));
        }
        unescape(self.bytes).map(|s| Cow::Owned(s.into_bytes()))
    }
}

/// The string whose opening quote is at `i` (after whitespace), and the index after its closing quote.
#[inline]
pub fn string(b: &[u8], i: usize) -> Scanned<(RawStr<'_>, usize)> {
    let i = ws(b, i)?;
    if b[i] != b'"' {
        return Err(Scan::Bad("expected a string"));
    }
    let (mut j, mut escaped) = (i + 1, false);
    loop {
        // Eight bytes at a time: the first quote or backslash among them, found with word arithmetic (most
        // strings in a trace are short, where a vector search costs more to set up than it saves).
        while let Some(word) = b.get(j..j + 8) {
            let w = u64::from_le_bytes([word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7]]);
            let hits = zero_bytes(w ^ QUOTES) | zero_bytes(w ^ BACKSLASHES);
            if hits != 0 {
                j += (hits.trailing_zeros() / 8) as usize;
                break;
            }
            j += 8;
        }
        match b.get(j) {
            Some(b'"') => return Ok((RawStr { bytes: &b[i + 1..j], escaped }, j + 1)),
            Some(b'\\') => {
                escaped = true;
                j += 2; // the escaped byte is never the closing quote
            }
            Some(_) => j += 1,
            None => return Err(Scan::More),
        }
    }
}

const QUOTES: u64 = 0x2222_2222_2222_2222;
const BACKSLASHES: u64 = 0x5c5c_5c5c_5c5c_5c5c;

/// The high bit of each zero byte of `w` is set (bits above the first zero byte may be set spuriously, so only
/// the lowest set bit is meaningful).
#[inline]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(0x0101_0101_0101_0101) & !w & 0x8080_8080_8080_8080
}

/// Decodes JSON escapes; a lone surrogate becomes U+FFFD rather than an error (some tracers write them).
fn unescape(raw: &[u8]) -> Scanned<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    let hex = |at: usize| -> Scanned<u32> {
        let digits = raw.get(at..at + 4).ok_or(Scan::Bad("short \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| Scan::Bad("bad \\u escape"))?;
        u32::from_str_radix(text, 16).map_err(|_| Scan::Bad("bad \\u escape"))
    };
    while i < raw.len() {
        let c = raw[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = *raw.get(i + 1).ok_or(Scan::Bad("bad escape"))?;
        i += 2;
        let ch = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = hex(i)?;
                i += 4;
                let code = if (0xD800..0xDC00).contains(&hi) && raw.get(i..i + 2) == Some(b"\\u") {
                    match hex(i + 2)? {
                        lo @ 0xDC00..=0xDFFF => {
                            i += 6;
                            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                        }
                        _ => 0xFFFD,
                    }
                } else {
                    hi
                };
                char::from_u32(code).unwrap_or('\u{FFFD}')
            }
            _ => return Err(Scan::Bad("bad escape")),
        };
        let mut utf8 = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut utf8).as_bytes());
    }
    String::from_utf8(out).map_err(|_| Scan::Bad("invalid UTF-8"))
}

/// A number or literal (`true`, `false`, `null`) at `i`: its text and the index after it.
#[inline]
pub fn token(b: &[u8], i: usize) -> Scanned<(&[u8], usize)> {
    let i = ws(b, i)?;
    let mut j = i;
    while let Some(&c) = b.get(j) {
        if !(c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.')) {
            if j == i {
                return Err(Scan::Bad("expected a value"));
            }
            return Ok((&b[i..j], j));
        }
        j += 1;
    }
    // A token can never end a document whose top level is an object: more bytes decide where it ends.
    Err(Scan::More)
}

/// Skips the value at `i` (any type, nested or not); the index after it.
pub fn skip_value(b: &[u8], i: usize) -> Scanned<usize> {
    let i = ws(b, i)?;
    match b[i] {
        b'"' => string(b, i).map(|(_, end)| end),
        b'{' | b'[' => skip_nested(b, i),
        _ => token(b, i).map(|(_, end)| end),
    }
}

/// Skips an object or array by its brackets, jumping over strings (which may hold brackets). Nesting deeper
/// than 128 is refused (as serde_json does): the open brackets fit in one u128, no allocation.
fn skip_nested(b: &[u8], i: usize) -> Scanned<usize> {
    let (mut open, mut depth) = (0u128, 0u32);
    let mut j = i;
    while let Some(&c) = b.get(j) {
        match c {
            b'"' => {
                j = string(b, j)?.1;
                continue;
            }
            b'{' | b'[' => {
                if depth == 128 {
                    return Err(Scan::Bad("nested too deep"));
                }
                open = open << 1 | (c == b'{') as u128;
                depth += 1;
            }
            b'}' | b']' => {
                if depth == 0 || (open & 1 == 1) != (c == b'}') {
                    return Err(Scan::Bad("mismatched brackets"));
                }
                open >>= 1;
                depth -= 1;
                if depth == 0 {
                    return Ok(j + 1);
                }
            }
            _ => {}
        }
        j += 1;
    }
    Err(Scan::More)
}

/// After a member or element: skips whitespace and a ',' (returns `(index, false)`) or the closing `close`
/// (returns `(index, true)`).
#[inline]
pub fn next_or_close(b: &[u8], i: usize, close: u8) -> Scanned<(usize, bool)> {
    let i = ws(b, i)?;
    match b[i] {
        b',' => Ok((i + 1, false)),
        c if c == close => Ok((i + 1, true)),
        _ => Err(Scan::Bad("expected ',' or a closing bracket")),
    }
}

/// A plain decimal integer (optional '-', at most 18 digits), without going through `str`.
#[inline]
fn small_int(tok: &[u8]) -> Option<i64> {
    let (neg, digits) = match tok.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, tok),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut v = 0i64;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as i64;
    }
    Some(if neg { -v } else { v })
}

/// Reads a number token as i64 the way JSON readers widen: integers exactly (u64 beyond i64 wraps), floats
/// truncated; anything else is `None`.
pub fn as_i64(tok: &[u8]) -> Option<i64> {
    if let Some(v) = small_int(tok) {
        return Some(v);
    }
    let text = std::str::from_utf8(tok).ok()?;
    if tok.iter().any(|c| matches!(c, b'.' | b'e' | b'E')) {
        return text.parse::<f64>().ok().filter(|v| v.is_finite()).map(|v| v as i64);
    }
    text.parse::<i64>()
        .ok()
        .or_else(|| text.parse::<u64>().ok().map(|v| v as i64))
        .or_else(|| text.parse::<f64>().ok().map(|v| v as i64))
}

/// Reads a number token as u64 the way JSON readers widen ids: negative integers wrap, floats truncate.
pub fn as_u64(tok: &[u8]) -> Option<u64> {
    if let Some(v) = small_int(tok) {
        return Some(v as u64);
    }
    let text = std::str::from_utf8(tok).ok()?;
    if tok.iter().any(|c| matches!(c, b'.' | b'e' | b'E')) {
        return text.parse::<f64>().ok().map(|v| v as u64);
    }
    text.parse::<u64>()
        .ok()
        .or_else(|| text.parse::<i64>().ok().map(|v| v as u64))
        .or_else(|| text.parse::<f64>().ok().map(|v| v as u64))
}

/// Decimal microseconds as written (a number's text, or a number in a string) to integer nanoseconds: exactly,
/// rounding on the fourth decimal, since epoch microseconds like `1712195495506161.2` need more digits than f64
/// holds; through f64 only for an exponent. Negative or not a number: `None`.
pub fn us_to_ns(raw: &str) -> Option<u64> {
    // What Kineto writes (up to 16 integer digits, up to 3 decimals) is converted without going through `str`.
    let b = raw.as_bytes();
    let (int, frac) = b.split_at(memchr::memchr(b'.', b).unwrap_or(b.len()));
    let frac = frac.get(1..).unwrap_or_default();
    if (1..=16).contains(&int.len()) && frac.len() <= 3 && int.iter().chain(frac).all(u8::is_ascii_digit) {
        let digits = |s: &[u8]| s.iter().fold(0u64, |v, &c| v * 10 + (c - b'0') as u64);
        return Some(digits(int) * 1000 + digits(frac) * [0, 100, 10, 1][frac.len()]);
    }
    let raw = raw.trim().trim_matches('"');
    if raw.contains(['e', 'E']) {
        let v: f64 = raw.parse().ok()?;
        return (v >= 0.0).then(|| (v * 1000.0).round() as u64);
    }
    let (int, frac) = raw.split_once('.').unwrap_or((raw, ""));
    let int: u64 = int.parse().ok()?;
    let mut frac_ns = 0u64;
    for (i, c) in frac.chars().take(3).enumerate() {
        frac_ns += c.to_digit(10)? as u64 * [100, 10, 1][i];
    }
    // Round on the fourth decimal (sub-nanosecond).
    let round = frac.chars().nth(3).and_then(|c| c.to_digit(10)).is_some_and(|d| d >= 5) as u64;
    int.checked_mul(1000)?.checked_add(frac_ns + round)
}

/// The largest single item (one event, one top-level value) the window grows to hold.
const MAX_ITEM: usize = 1 << 30;

/// A window over a stream: `buf[pos..end]` is read and not yet consumed.
pub struct Window<R> {
    src: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("unexpected end of JSON (truncated file?)")]
    Eof,
    #[error("a single JSON item is larger than {} MiB", MAX_ITEM >> 20)]
    TooLarge,
    #[error("{0}")]
    Bad(&'static str),
}

impl<R: Read> Window<R> {
    pub fn new(src: R) -> Window<R> {
        Window { src, buf: vec![0; 1 << 20], pos: 0, end: 0, eof: false }
    }

    /// Runs `parse` over the unread bytes until it finds its item whole, then consumes what it used. `parse`
    /// must have no effect before it succeeds: it may run again on a longer window.
    pub fn item<T>(&mut self, mut parse: impl FnMut(&[u8]) -> Scanned<(T, usize)>) -> Result<T, WindowError> {
        loop {
            match parse(&self.buf[self.pos..self.end]) {
                Ok((value, used)) => {
                    self.pos += used;
                    return Ok(value);
                }
                Err(Scan::Bad(what)) => return Err(WindowError::Bad(what)),
                Err(Scan::More) if self.eof => return Err(WindowError::Eof),
                Err(Scan::More) => self.refill()?,
            }
        }
    }

    /// Whether only whitespace is left.
    pub fn at_end(&mut self) -> Result<bool, WindowError> {
        loop {
            match ws(&self.buf[self.pos..self.end], 0) {
                Ok(_) => return Ok(false),
                Err(_) if self.eof => return Ok(true),
                Err(_) => {
                    self.pos = self.end;
                    self.refill()?
                }
            }
        }
    }

    /// Keeps the unfinished item, then fills the window behind it (grown when the item already fills it), so an
    /// item is parsed again only after the window has at least doubled its share.
    fn refill(&mut self) -> Result<(), WindowError> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_ITEM {
                return Err(WindowError::TooLarge);
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        while self.end < self.buf.len() {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_tokens_and_skips_find_their_ends() {
        let (s, end) = string(br#"  "a\"b" x"#, 0).unwrap();
        assert_eq!((s.text().unwrap().as_ref(), end), ("a\"b", 8));
        assert_eq!(string(br#""\u00e9\ud83d\ude00""#, 0).unwrap().0.text().unwrap(), "é😀");
        assert!(matches!(string(br#""abc"#, 0), Err(Scan::More)));
        assert!(matches!(string(br#""ab\"#, 0), Err(Scan::More)));
        assert_eq!(token(b" -12.5e3,", 0).unwrap(), (&b"-12.5e3"[..], 8));
        assert!(matches!(token(b"12", 0), Err(Scan::More)));
        let doc = br#"{"a": [1, {"b": "]}"}], "c": null} tail"#;
        assert_eq!(skip_value(doc, 0).unwrap(), doc.len() - 5);
        assert!(matches!(skip_value(b"[1, 2}", 0), Err(Scan::Bad(_))));
        assert!(matches!(skip_value(b"[1, [2]", 0), Err(Scan::More)));
    }

    #[test]
    fn numbers_read_as_readers_widen_them() {
        assert_eq!(as_i64(b"42"), Some(42));
        assert_eq!(as_i64(b"-3.9"), Some(-3));
        assert_eq!(as_i64(b"18446744073709551615"), Some(-1));
        assert_eq!(as_i64(b"null"), None);
        assert_eq!(us_to_ns("2.25"), Some(2250));
        assert_eq!(us_to_ns("7"), Some(7000));
        assert_eq!(us_to_ns("1.0004"), Some(1000));
        assert_eq!(us_to_ns("-1"), None);
    }

    #[test]
    fn the_window_grows_for_an_item_larger_than_itself() {
        let big = format!("[{}]", "1,".repeat(1 << 20) + "1");
        let mut w = Window::new(big.as_bytes());
        let end = w.item(|b| skip_value(b, 0).map(|e| (e, e))).unwrap();
        assert_eq!(end, big.len());
        assert!(w.at_end().unwrap());
        let mut cut = Window::new(&big.as_bytes()[..1000]);
        assert!(matches!(cut.item(|b| skip_value(b, 0).map(|e| (e, e))), Err(WindowError::Eof)));
    }
}
