//! The line a code object's instruction came from, decoded from the table each CPython release keeps beside the
//! bytecode. Pure functions over the table's bytes, so the formats are tested here without an interpreter.
//!
//! - 3.9 `co_lnotab` (Objects/lnotab_notes.txt of 3.9): (byte offset increment, signed line increment) pairs
//!   from `co_firstlineno`; the line is the one in force at the last increment not past the offset.
//! - 3.10 `co_linetable` (PEP 626; lnotab_notes.txt of 3.10): (bytes covered, signed line delta) pairs, one per
//!   range; a delta of -128 marks a range with no line.
//! - 3.11 and later `co_linetable` (Objects/locations.md): entries whose first byte has bit 7 set, a code in bits
//!   3-6 and the number of code units covered, minus one, in bits 0-2. Code 15: no location; 14: long form (line
//!   delta as a signed varint, then end line, start and end columns as varints); 13: no columns (line delta only);
//!   10-12: one-line form, delta = code - 10, two column bytes; 0-9: short form, same line, one column byte.
//!   Varints: 6 bits a byte, least significant first, bit 6 = more; signed: low bit = negative, value >> 1.

/// The line of byte offset `offset` in a 3.9 `co_lnotab`.
pub fn lnotab_line(table: impl IntoIterator<Item = u8>, first_line: i64, offset: u64) -> Option<u32> {
    let mut it = table.into_iter();
    let (mut addr, mut line) = (0u64, first_line);
    while let (Some(da), Some(dl)) = (it.next(), it.next()) {
        addr += da as u64;
        if addr > offset {
            break;
        }
        line += dl as i8 as i64;
    }
    positive(line)
}

/// The line of byte offset `offset` in a 3.10 `co_linetable`.
pub fn linetable310_line(table: impl IntoIterator<Item = u8>, first_line: i64, offset: u64) -> Option<u32> {
    let mut it = table.into_iter();
    let (mut start, mut line) = (0u64, first_line);
    while let (Some(len), Some(delta)) = (it.next(), it.next()) {
        let end = start + len as u64;
        let here = if delta as i8 == -128 {
            None
        } else {
            line += delta as i8 as i64;
            Some(line)
        };
        if start <= offset && offset < end {
            return here.and_then(positive);
        }
        start = end;
    }
    None
}

/// The line of code unit `unit` (byte offset / 2) in a 3.11+ location table.
pub fn locations_line(table: impl IntoIterator<Item = u8>, first_line: i64, unit: u64) -> Option<u32> {
    let mut it = table.into_iter();
    let (mut start, mut line) = (0u64, first_line);
    while let Some(first) = it.next() {
        if first & 0x80 == 0 {
            return None; // not at an entry's start: a table read wrongly
        }
        let code = (first >> 3) & 15;
        let end = start + (first & 7) as u64 + 1;
        let here = match code {
            15 => None,
            14 => {
                line += signed_varint(&mut it)?;
                for _ in 0..3 {
                    varint(&mut it)?;
                }
                Some(line)
            }
            13 => {
                line += signed_varint(&mut it)?;
                Some(line)
            }
            10..=12 => {
                line += (code - 10) as i64;
                it.next()?;
                it.next()?;
                Some(line)
            }
            _ => {
                it.next()?;
                Some(line)
            }
        };
        if start <= unit && unit < end {
            return here.and_then(positive);
        }
        start = end;
    }
    None
}

fn varint(it: &mut impl Iterator<Item = u8>) -> Option<u64> {
    let mut b = it.next()?;
    let mut value = (b & 63) as u64;
    let mut shift = 0;
    while b & 64 != 0 {
        b = it.next()?;
        shift += 6;
        if shift > 60 {
            return None;
        }
        value |= ((b & 63) as u64) << shift;
    }
    Some(value)
}

fn signed_varint(it: &mut impl Iterator<Item = u8>) -> Option<i64> {
    let v = varint(it)?;
    let magnitude = (v >> 1) as i64;
    Some(if v & 1 != 0 { -magnitude } else { magnitude })
}

fn positive(line: i64) -> Option<u32> {
    u32::try_from(line).ok().filter(|&l| l > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_steps_through_increments() {
        // line 10 at 0, +1 at byte 6, +3 at byte 14 (a negative increment back to 12 at byte 20)
        let t = [6, 1, 8, 3, 6, (-2i8) as u8];
        assert_eq!(lnotab_line(t, 10, 0), Some(10));
        assert_eq!(lnotab_line(t, 10, 5), Some(10));
        assert_eq!(lnotab_line(t, 10, 6), Some(11));
        assert_eq!(lnotab_line(t, 10, 19), Some(14));
        assert_eq!(lnotab_line(t, 10, 40), Some(12));
    }

    #[test]
    fn pep626_ranges_and_lineless_ranges() {
        // [0,4) line 5, [4,10) no line, [10,12) line 7
        let t = [4, 0, 6, (-128i8) as u8, 2, 2];
        assert_eq!(linetable310_line(t, 5, 0), Some(5));
        assert_eq!(linetable310_line(t, 5, 3), Some(5));
        assert_eq!(linetable310_line(t, 5, 4), None);
        assert_eq!(linetable310_line(t, 5, 11), Some(7));
        assert_eq!(linetable310_line(t, 5, 12), None);
    }

    #[test]
    fn location_entries_of_every_form() {
        let entry = |code: u8, units: u8| 0x80 | code << 3 | (units - 1);
        let t = [
            entry(13, 2),
            2, // no columns: +1 (signed varint 2) -> 21, units 0-1
            entry(0, 1),
            7, // short form: same line, unit 2
            entry(11, 3),
            1,
            9,            // one-line form: +1 -> 22, units 3-5
            entry(15, 1), // no location, unit 6
            entry(14, 2),
            0x40,
            0x01,
            0,
            3,
            4, // long form: +(64 >> 1) = 32 -> 54, units 7-8
            entry(13, 1),
            3, // -1 -> 53, unit 9
        ];
        let line = |u| locations_line(t, 20, u);
        assert_eq!((line(0), line(1), line(2)), (Some(21), Some(21), Some(21)));
        assert_eq!((line(3), line(5), line(6)), (Some(22), Some(22), None));
        assert_eq!((line(7), line(8), line(9), line(10)), (Some(54), Some(54), Some(53), None));
        // A table read from the wrong place yields nothing rather than a made-up line.
        assert_eq!(locations_line([0x12, 0x34], 20, 0), None);
    }
}
