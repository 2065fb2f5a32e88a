//! A minimal protobuf writer (proto2 wire format: varints, fixed64, doubles, length-delimited fields) for the
//! Perfetto exporter.
//!
//! Everything is written into one buffer, which the caller drains when it likes. A nested message reserves one
//! length byte, is written in place, and its length is patched in afterwards; only a message of 128 bytes or more
//! needs its bytes shifted to make room for a longer length. So nesting copies nothing in the common case and the encoding stays canonical (the
//! smallest varint), which keeps files small.

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

/// The most bytes one scalar field takes: a tag (field numbers here are below 2^25: five bytes) and a ten-byte
/// varint or an eight-byte fixed value.
const FIELD_MAX: usize = 15;

/// The protobuf output buffer. `buf` is all usable memory (zeroed once) and `len` how much of it holds output:
/// each field checks for room once and then writes bytes into a slice, where a `Vec::push` per byte would check
/// capacity and store the length at every byte (about a third of the export's instructions).
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
    len: usize,
}

use cuflight_format::varint::{encoded_len, write_into};

impl Writer {
    /// Bytes written and not yet drained.
    pub fn buffered(&self) -> usize {
        self.len
    }

    /// At least `n` bytes of room after the output.
    #[inline(always)]
    fn room(&mut self, n: usize) -> &mut [u8] {
        if self.buf.len() - self.len < n {
            self.grow(n);
        }
        &mut self.buf[self.len..]
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        let want = (self.len + n).max(self.buf.len() * 2).max(1 << 12);
        self.buf.resize(want, 0);
    }

    /// The tag of `field` and then `value` as a varint.
    #[inline(always)]
    fn tag_varint(&mut self, field: u32, wire: u32, value: u64) {
        let dst = self.room(FIELD_MAX);
        let n = write_into(dst, ((field << 3) | wire) as u64);
        let n = n + write_into(&mut dst[n..], value);
        self.len += n;
    }

    #[inline(always)]
    pub fn uint(&mut self, field: u32, v: u64) {
        let dst = self.room(FIELD_MAX);
        let n = write_into(dst, ((field << 3) | VARINT) as u64);
        let n = n + write_into(&mut dst[n..], v);
        self.len += n;
    }

    pub fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    #[inline(always)]
    pub fn fixed64(&mut self, field: u32, v: u64) {
        let dst = self.room(FIELD_MAX);
        let n = write_into(dst, ((field << 3) | FIXED64) as u64);
        dst[n..n + 8].copy_from_slice(&v.to_le_bytes());
        self.len += n + 8;
    }

    pub fn double(&mut self, field: u32, v: f64) {
        self.fixed64(field, v.to_bits());
    }

    pub fn bytes(&mut self, field: u32, v: &[u8]) {
        self.tag_varint(field, LEN, v.len() as u64);
        self.room(v.len())[..v.len()].copy_from_slice(v);
        self.len += v.len();
    }

    pub fn string(&mut self, field: u32, v: &str) {
        self.bytes(field, v.as_bytes());
    }

    /// A nested message in `field`, written by `f` directly into the buffer.
    #[inline(always)]
    pub fn message(&mut self, field: u32, f: impl FnOnce(&mut Self)) {
        // The tag and one byte reserved for the length.
        let dst = self.room(FIELD_MAX);
        let n = write_into(dst, ((field << 3) | LEN) as u64);
        let at = self.len + n;
        self.len = at + 1;
        f(self);
        let len = self.len - at - 1;
        if len < 0x80 {
            // Nearly every message: its one reserved length byte holds the length.
            self.buf[at] = len as u8;
            return;
        }
        self.long_length(at, len);
    }

    /// Rare: make room for a length of more than one byte by shifting the message body.
    #[cold]
    #[inline(never)]
    fn long_length(&mut self, at: usize, len: usize) {
        let need = encoded_len(len as u64);
        let body_end = self.len;
        self.room(need - 1);
        self.buf.copy_within(at + 1..body_end, at + need);
        write_into(&mut self.buf[at..at + need], len as u64);
        self.len = body_end + need - 1;
    }

    /// Hands the bytes written so far to `sink` and starts over.
    pub fn drain<R>(&mut self, sink: impl FnOnce(&[u8]) -> R) -> R {
        let r = sink(&self.buf[..self.len]);
        self.len = 0;
        r
    }
}

/// Appends `a,b,c` in decimal (kernel grid and block), without the formatting machinery.
pub fn dims(out: &mut String, d: [u32; 3]) {
    out.clear();
    for (i, v) in d.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let mut digits = [0u8; 10];
        let (mut v, mut n) = (*v, 0);
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            v /= 10;
            n += 1;
            if v == 0 {
                break;
            }
        }
        for d in digits[..n].iter().rev() {
            out.push(*d as char);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_wire_format() {
        let mut w = Writer::default();
        w.uint(1, 150);
        w.string(2, "hi");
        w.message(3, |w| w.uint(1, 1));
        w.fixed64(4, 1);
        let bytes = w.drain(|b| b.to_vec());
        assert_eq!(bytes, [0x08, 0x96, 0x01, 0x12, 2, b'h', b'i', 0x1a, 2, 0x08, 1, 0x21, 1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn long_nested_messages_get_canonical_lengths() {
        let mut w = Writer::default();
        let body = vec![7u8; 300];
        w.message(1, |w| w.message(2, |w| w.bytes(3, &body)));
        let bytes = w.drain(|b| b.to_vec());
        // field 1: len 306 = [0xb2, 0x02]; field 2: len 303 = [0xaf, 0x02]; field 3: len 300 = [0xac, 0x02]
        assert_eq!(&bytes[..9], &[0x0a, 0xb2, 0x02, 0x12, 0xaf, 0x02, 0x1a, 0xac, 0x02]);
        assert_eq!(bytes.len(), 9 + 300);
    }

    /// Random fields, nested messages of every length class and strings past the buffer's first size, against
    /// a plain encoder that pushes byte by byte.
    #[test]
    fn matches_a_bytewise_encoder() {
        use cuflight_format::varint::put;
        let mut rng = 0x853c_49e6_748f_ea9bu64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        fn reference(out: &mut Vec<u8>, ops: &[(u32, u64, usize)]) {
            for &(field, v, text) in ops {
                match v % 4 {
                    0 => {
                        put(out, (field << 3) as u64);
                        put(out, v >> (v % 64));
                    }
                    1 => {
                        put(out, (field << 3 | 1) as u64);
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                    _ => {
                        let mut body = Vec::new();
                        put(&mut body, 8);
                        put(&mut body, v);
                        body.extend(std::iter::repeat_n(b'x', text));
                        put(out, (field << 3 | 2) as u64);
                        put(out, body.len() as u64);
                        out.extend_from_slice(&body);
                    }
                }
            }
        }
        let mut w = Writer::default();
        for _ in 0..200 {
            let ops: Vec<(u32, u64, usize)> = (0..(next() % 40))
                .map(|_| ((next() % 70 + 1) as u32, next(), [0, 5, 126, 127, 300, 20_000][(next() % 6) as usize]))
                .collect();
            let mut want = Vec::new();
            reference(&mut want, &ops);
            for &(field, v, text) in &ops {
                match v % 4 {
                    0 => w.uint(field, v >> (v % 64)),
                    1 => w.fixed64(field, v),
                    _ => w.message(field, |w| {
                        w.uint(1, v);
                        w.room(text)[..text].fill(b'x');
                        w.len += text;
                    }),
                }
            }
            assert_eq!(w.drain(|b| b.to_vec()), want);
        }
    }

    #[test]
    fn dims_print_like_display() {
        let mut s = String::new();
        dims(&mut s, [108, 1, 4294967295]);
        assert_eq!(s, "108,1,4294967295");
    }
}
