//! A minimal protobuf writer (proto2 wire format: varints, fixed64, doubles, length-delimited fields) for the
//! Perfetto exporter.
//!
//! Everything is written into one buffer, which the caller drains when it likes. A nested message reserves one length byte, is written in place, and
//! its length is patched in afterwards; only a message of 128 bytes or more needs its bytes shifted to make room
//! for a longer length. So nesting copies nothing in the common case and the encoding stays canonical (the
//! smallest varint), which keeps files small.

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

use cuflight_format::varint::{encoded_len, put as put_varint, write_into};

impl Writer {
    /// Bytes written and not yet drained.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    #[inline]
    fn tag(&mut self, field: u32, wire: u32) {
        put_varint(&mut self.buf, ((field << 3) | wire) as u64);
    }

    #[inline]
    pub fn uint(&mut self, field: u32, v: u64) {
        self.tag(field, VARINT);
        put_varint(&mut self.buf, v);
    }

    pub fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    pub fn fixed64(&mut self, field: u32, v: u64) {
        self.tag(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn double(&mut self, field: u32, v: f64) {
        self.tag(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bytes(&mut self, field: u32, v: &[u8]) {
        self.tag(field, LEN);
        put_varint(&mut self.buf, v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    pub fn string(&mut self, field: u32, v: &str) {
        self.bytes(field, v.as_bytes());
    }

    /// A nested message in `field`, written by `f` directly into the buffer.
    pub fn message(&mut self, field: u32, f: impl FnOnce(&mut Self)) {
        self.tag(field, LEN);
        let at = self.buf.len();
        self.buf.push(0);
        f(self);
        let len = self.buf.len() - at - 1;
        if len < 0x80 {
            // Nearly every message: its one reserved length byte holds the length.
            self.buf[at] = len as u8;
            return;
        }
        let need = encoded_len(len as u64);
        if need > 1 {
            // Rare: make room for a longer length by shifting the message body.
            let body_end = self.buf.len();
            self.buf.resize(body_end + need - 1, 0);
            self.buf.copy_within(at + 1..body_end, at + need);
        }
        write_into(&mut self.buf[at..at + need], len as u64);
    }

    /// Hands the bytes written so far to `sink` and starts over.
    pub fn drain<R>(&mut self, sink: impl FnOnce(&[u8]) -> R) -> R {
        let r = sink(&self.buf);
        self.buf.clear();
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

    #[test]
    fn dims_print_like_display() {
        let mut s = String::new();
        dims(&mut s, [108, 1, 4294967295]);
        assert_eq!(s, "108,1,4294967295");
    }
}
