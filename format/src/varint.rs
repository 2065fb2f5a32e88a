//! LEB128 varints and zigzag: the one implementation the trace file, its codec and the collector's protobuf
//! writer share.

#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes `v` at the start of `dst` (which must hold its [`encoded_len`]: ten bytes hold any u64); returns the
/// bytes written.
#[inline(always)]
pub fn write_into(dst: &mut [u8], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        dst[i] = v as u8 | 0x80;
        v >>= 7;
        i += 1;
    }
    dst[i] = v as u8;
    i + 1
}

/// Bytes `v` takes as a varint.
#[inline]
pub fn encoded_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros()).div_ceil(7) as usize
}

/// Reads a varint at `*at` and moves past it; `None` when the buffer ends inside it or it runs past 10 bytes.
#[inline]
pub fn get(buf: &[u8], at: &mut usize) -> Option<u64> {
    // Most values in a trace (deltas, small ids) take one byte.
    let first = *buf.get(*at)?;
    if first < 0x80 {
        *at += 1;
        return Some(first as u64);
    }
    get_long(buf, at)
}

#[inline(never)]
fn get_long(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edges() {
        let vals = [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX];
        let mut buf = Vec::new();
        for v in vals {
            put(&mut buf, v);
        }
        let mut at = 0;
        for v in vals {
            assert_eq!(get(&buf, &mut at), Some(v));
        }
        assert_eq!(get(&buf, &mut at), None);
        for v in vals {
            let mut dst = [0u8; 10];
            let n = write_into(&mut dst, v);
            assert_eq!(n, encoded_len(v));
            let mut one = Vec::new();
            put(&mut one, v);
            assert_eq!(&dst[..n], &one[..]);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn overlong_input_is_rejected() {
        let mut at = 0;
        assert_eq!(get(&[0xff; 11], &mut at), None);
    }
}
