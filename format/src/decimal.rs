//! Integers as decimal text with neither allocation nor the formatting machinery: the agent writes them where
//! it may not allocate (a flight recorder's dump after a crash), the Chrome export writes millions of them.

/// The decimal digits of `v`, written at the end of `digits`.
#[inline]
pub fn digits(mut v: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &digits[i..]
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_width_reads_back() {
        let mut buf = [0u8; 20];
        for v in [0, 7, 10, 99, 100, 12345, u32::MAX as u64, u64::MAX] {
            assert_eq!(super::digits(v, &mut buf), v.to_string().as_bytes());
        }
    }
}
