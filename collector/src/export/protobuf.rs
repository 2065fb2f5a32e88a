//! A minimal protobuf writer (proto2 wire format: varints, fixed64, doubles, length-delimited fields) for the
//! Perfetto exporter. Nested messages are encoded into buffers reused from a pool, then length-prefixed into
//! their parent, so a steady stream of packets allocates nothing.

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

#[derive(Default)]
pub struct Writer {
    stack: Vec<Vec<u8>>,
    pool: Vec<Vec<u8>>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Writer {
    /// Starts a top-level message; `finish` returns its bytes.
    pub fn begin(&mut self) {
        let buf = self.pool.pop().unwrap_or_default();
        self.stack.push(buf);
    }

    fn top(&mut self) -> &mut Vec<u8> {
        if self.stack.is_empty() {
            self.stack.push(Vec::new());
        }
        let last = self.stack.len() - 1;
        &mut self.stack[last]
    }

    fn tag(&mut self, field: u32, wire: u32) {
        put_varint(self.top(), ((field << 3) | wire) as u64);
    }

    pub fn uint(&mut self, field: u32, v: u64) {
        self.tag(field, VARINT);
        put_varint(self.top(), v);
    }

    pub fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    pub fn fixed64(&mut self, field: u32, v: u64) {
        self.tag(field, FIXED64);
        self.top().extend_from_slice(&v.to_le_bytes());
    }

    pub fn double(&mut self, field: u32, v: f64) {
        self.tag(field, FIXED64);
        self.top().extend_from_slice(&v.to_le_bytes());
    }

    pub fn bytes(&mut self, field: u32, v: &[u8]) {
        self.tag(field, LEN);
        put_varint(self.top(), v.len() as u64);
        self.top().extend_from_slice(v);
    }

    pub fn string(&mut self, field: u32, v: &str) {
        self.bytes(field, v.as_bytes());
    }

    /// A nested message in `field`, written by `f`.
    pub fn message(&mut self, field: u32, f: impl FnOnce(&mut Self)) {
        self.begin();
        f(self);
        let inner = self.stack.pop().unwrap_or_default();
        self.bytes(field, &inner);
        self.recycle(inner);
    }

    /// Ends the top-level message and hands its bytes to `sink`.
    pub fn finish<R>(&mut self, sink: impl FnOnce(&[u8]) -> R) -> R {
        let buf = self.stack.pop().unwrap_or_default();
        let r = sink(&buf);
        self.recycle(buf);
        r
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        self.pool.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_wire_format() {
        let mut w = Writer::default();
        w.begin();
        w.uint(1, 150);
        w.string(2, "hi");
        w.message(3, |w| w.uint(1, 1));
        w.fixed64(4, 1);
        let bytes = w.finish(|b| b.to_vec());
        assert_eq!(bytes, [0x08, 0x96, 0x01, 0x12, 2, b'h', b'i', 0x1a, 2, 0x08, 1, 0x21, 1, 0, 0, 0, 0, 0, 0, 0]);
    }
}
