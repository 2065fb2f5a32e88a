//! How events are laid out inside an events block, before zstd.
//!
//! Version 2 files (tag [`crate::file::TAG_EVENT_COLUMNS`]) split a block by event kind and store each kind's
//! events column by column, each column at one fixed width:
//!
//! ```text
//! varint n   u8 kind * n   u8 sub * n        (the order of events in the block)
//! for each kind present, in ascending order, for each of the 11 columns:
//!   u8 width (0..=8)   that kind's values in block order, each `width` bytes little-endian
//! columns: flags | start: zigzag delta from the previous start | duration: zigzag | correlation: zigzag
//!   delta from the previous correlation | tid ^ prev | name ^ prev | device ^ prev | stream ^ prev |
//!   a ^ prev | b ^ prev | c ^ prev        ("prev": the same field of the previous event of the same kind)
//! ```
//!
//! Why: within one kind most fields repeat (an API call's name, thread and callback id; a kernel's stream and
//! launch shape), so XOR with the previous value makes them zero, and a column that is zero throughout takes
//! no bytes at all. What does vary (timestamps, kernel names) sits beside values of its own kind, where zstd
//! finds it fast. A fixed width per column is written without a branch per byte, which LEB128 varints need
//! (their mispredictions cost more than all the rest of encoding). Numbers: `collector/benches/drain.rs`.
//!
//! Version 1 files (tag [`crate::file::TAG_EVENTS`]) stored events row by row in varints; they are still read.

use crate::event::RawEvent;
use crate::varint;

const COLUMNS: usize = 11;
const KINDS: usize = 256;
const MAX_VARINT: usize = 10;

/// Encodes blocks of events, keeping its buffers from one block to the next.
#[derive(Default)]
pub struct EventEncoder {
    /// The block's events, grouped by kind (stable).
    sorted: Vec<RawEvent>,
    /// The varints of a block, before they are appended to the output.
    work: Vec<u8>,
}

/// The column values of `e` before the deltas and XORs against the previous event of its kind.
#[inline(always)]
fn fields(e: &RawEvent) -> [u64; COLUMNS] {
    [
        e.flags as u64,
        e.start,
        e.end.wrapping_sub(e.start),
        e.correlation as u64,
        e.tid as u64,
        e.name as u64,
        e.device as u64,
        e.stream as u64,
        e.a,
        e.b,
        e.c,
    ]
}

/// What is stored for column `i` given this event's value and the previous one of the same kind.
#[inline(always)]
fn relate(i: usize, now: u64, prev: u64) -> u64 {
    match i {
        0 => now,
        1 => varint::zigzag(now.wrapping_sub(prev) as i64),
        2 => varint::zigzag(now as i64),
        3 => varint::zigzag((now as u32).wrapping_sub(prev as u32) as i32 as i64),
        _ => now ^ prev,
    }
}

/// The inverse of [`relate`]; `None` for a value no encoder writes.
#[inline(always)]
fn unrelate(i: usize, stored: u64, prev: u64) -> Option<u64> {
    Some(match i {
        0 => u16::try_from(stored).ok()? as u64,
        1 => prev.wrapping_add(varint::unzigzag(stored) as u64),
        2 => varint::unzigzag(stored) as u64,
        3 => (prev as u32).wrapping_add(i32::try_from(varint::unzigzag(stored)).ok()? as u32) as u64,
        4..=7 => u32::try_from(stored ^ prev).ok()? as u64,
        _ => stored ^ prev,
    })
}

/// Column `I` of the events `members` (indices into `out`), stored one after another from `*at`, written
/// straight into the events' fields (the duration into `end`, made absolute once all columns are read).
#[inline(always)]
fn decode_column<const I: usize>(raw: &[u8], at: &mut usize, members: &[u32], out: &mut [RawEvent]) -> Option<()> {
    let mut prev = 0u64;
    for &m in members {
        prev = unrelate(I, varint::get(raw, at)?, prev)?;
        let e = out.get_mut(m as usize)?;
        // `unrelate` has checked each narrow column's range.
        match I {
            0 => e.flags = prev as u16,
            1 => e.start = prev,
            2 => e.end = prev,
            3 => e.correlation = prev as u32,
            4 => e.tid = prev as u32,
            5 => e.name = prev as u32,
            6 => e.device = prev as u32,
            7 => e.stream = prev as u32,
            8 => e.a = prev,
            9 => e.b = prev,
            _ => e.c = prev,
        }
    }
    Some(())
}

impl EventEncoder {
    /// Appends the encoding of `events` to `out`.
    pub fn encode(&mut self, events: &[RawEvent], out: &mut Vec<u8>) {
        let n = events.len();
        varint::put(out, n as u64);
        let head = out.len();
        out.resize(head + 2 * n, 0);
        let (kinds_out, subs_out) = out[head..].split_at_mut(n);
        let mut first = [0usize; KINDS + 1];
        for ((e, k), s) in events.iter().zip(kinds_out).zip(subs_out) {
            *k = e.kind;
            *s = e.sub;
            first[e.kind as usize + 1] += 1;
        }
        for k in 0..KINDS {
            first[k + 1] += first[k];
        }
        // Grouped by kind first (a stable counting sort), so that each column pass below keeps its previous
        // value in a register: indexing per-kind state for every field of every event costs more than the copy.
        let mut fill = first;
        if self.sorted.len() < n {
            self.sorted.resize(n, bytemuck::Zeroable::zeroed());
        }
        for e in events {
            self.sorted[fill[e.kind as usize]] = *e;
            fill[e.kind as usize] += 1;
        }
        // Varints go to a buffer sized once for the worst case (ten bytes each) and never shrunk, so the loops
        // below neither check capacity nor pay for zeroing megabytes a block.
        let worst = COLUMNS * MAX_VARINT * n;
        if self.work.len() < worst {
            self.work.resize(worst, 0);
        }
        let work = &mut self.work[..];
        let mut pos = 0;
        for k in 0..KINDS {
            let group = &self.sorted[first[k]..first[k + 1]];
            if group.is_empty() {
                continue;
            }
            macro_rules! column {
                ($($i:literal)*) => {$({
                    let mut last = 0u64;
                    for e in group {
                        let now = fields(e)[$i];
                        put(work, &mut pos, relate($i, now, last));
                        last = now;
                    }
                })*};
            }
            column!(0 1 2 3 4 5 6 7 8 9 10);
        }
        out.extend_from_slice(&work[..pos]);
    }
}

#[inline(always)]
fn put(buf: &mut [u8], at: &mut usize, v: u64) {
    // One bounds check a value: the ten bytes any u64 varint can take.
    let Some(dst) = buf.get_mut(*at..*at + MAX_VARINT) else { unreachable!("sized for the worst case") };
    *at += varint::write_into(dst, v);
}

/// Decodes a version 2 events block; `None` if it is malformed in any way (including trailing bytes).
pub fn decode_columns(raw: &[u8], max_events: usize) -> Option<Vec<RawEvent>> {
    let mut out = Vec::new();
    decode_columns_into(raw, max_events, &mut ColumnScratch::default(), &mut out)?;
    Some(out)
}

/// Working memory of [`decode_columns_into`], kept by readers that decode block after block.
#[derive(Default)]
pub struct ColumnScratch {
    order: Vec<u32>,
}

/// [`decode_columns`] into `out` (cleared first), with reused working memory: a reader decoding millions of
/// events allocates nothing per block.
// The column index picks each column's transform as well as its slot.
#[allow(clippy::needless_range_loop)]
pub fn decode_columns_into(
    raw: &[u8],
    max_events: usize,
    scratch: &mut ColumnScratch,
    out: &mut Vec<RawEvent>,
) -> Option<()> {
    out.clear();
    let mut at = 0;
    let n = usize::try_from(varint::get(raw, &mut at)?).ok()?;
    // Each event takes at least 13 bytes: never trust a count the payload cannot hold.
    if n > raw.len() / 13 + 1 || n > max_events {
        return None;
    }
    let kinds = raw.get(at..at + n)?;
    let subs = raw.get(at + n..at + 2 * n)?;
    at += 2 * n;
    // The events of each kind, in block order: a counting sort of their indices.
    let mut first = [0usize; KINDS + 1];
    for &k in kinds {
        first[k as usize + 1] += 1;
    }
    for k in 0..KINDS {
        first[k + 1] += first[k];
    }
    let mut fill = first;
    let order = &mut scratch.order;
    order.clear();
    order.resize(n, 0);
    for (i, &k) in kinds.iter().enumerate() {
        order[fill[k as usize]] = i as u32;
        fill[k as usize] += 1;
    }
    out.extend(kinds.iter().zip(subs).map(|(&kind, &sub)| RawEvent { kind, sub, ..Default::default() }));
    for k in 0..KINDS {
        let members = &order[first[k]..first[k + 1]];
        if members.is_empty() {
            continue;
        }
        // One loop per column, each with its transform and field fixed at compile time.
        macro_rules! columns {
            ($($i:literal)*) => {$(decode_column::<$i>(raw, &mut at, members, out)?;)*};
        }
        columns!(0 1 2 3 4 5 6 7 8 9 10);
    }
    if at != raw.len() {
        return None;
    }
    for e in out.iter_mut() {
        e.end = e.start.wrapping_add(e.end);
    }
    Some(())
}

/// Decodes a row-encoded block of a version 1 file: per event kind, sub, then varints of flags, tid, start (a
/// zigzag delta from the previous event's start), duration (zigzag), correlation, name, device, stream, a, b, c.
pub fn decode_rows(raw: &[u8], max_events: usize) -> Option<Vec<RawEvent>> {
    let mut at = 0;
    let n = usize::try_from(varint::get(raw, &mut at)?).ok()?;
    // Each event takes at least 13 bytes: never trust a count the payload cannot hold.
    if n > raw.len() / 13 + 1 || n > max_events {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    let mut prev_start = 0u64;
    for _ in 0..n {
        let kind = *raw.get(at)?;
        let sub = *raw.get(at + 1)?;
        at += 2;
        let mut v = [0u64; 11];
        for slot in v.iter_mut() {
            *slot = varint::get(raw, &mut at)?;
        }
        let start = prev_start.wrapping_add(varint::unzigzag(v[2]) as u64);
        prev_start = start;
        out.push(RawEvent {
            kind,
            sub,
            flags: u16::try_from(v[0]).ok()?,
            tid: u32::try_from(v[1]).ok()?,
            start,
            end: start.wrapping_add(varint::unzigzag(v[3]) as u64),
            correlation: u32::try_from(v[4]).ok()?,
            name: u32::try_from(v[5]).ok()?,
            device: u32::try_from(v[6]).ok()?,
            stream: u32::try_from(v[7]).ok()?,
            a: v[8],
            b: v[9],
            c: v[10],
        });
    }
    (at == raw.len()).then_some(out)
}

/// The version 1 row encoding, kept to write old files in tests.
#[doc(hidden)]
pub fn encode_rows(events: &[RawEvent], out: &mut Vec<u8>) {
    varint::put(out, events.len() as u64);
    let mut prev_start = 0u64;
    for e in events {
        out.push(e.kind);
        out.push(e.sub);
        varint::put(out, e.flags as u64);
        varint::put(out, e.tid as u64);
        varint::put(out, varint::zigzag(e.start.wrapping_sub(prev_start) as i64));
        varint::put(out, varint::zigzag(e.end.wrapping_sub(e.start) as i64));
        prev_start = e.start;
        for v in [e.correlation as u64, e.name as u64, e.device as u64, e.stream as u64, e.a, e.b, e.c] {
            varint::put(out, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    fn sample() -> Vec<RawEvent> {
        let mut v = Vec::new();
        for i in 0..500u64 {
            let t = 1_000 + i * 977;
            v.push(RawEvent {
                sub: (i % 3) as u8,
                flags: (i % 5) as u16 * 1000,
                correlation: if i % 7 == 0 { u32::MAX - i as u32 } else { i as u32 },
                name: i as u32 * 31,
                device: (i % 2) as u32,
                stream: u32::MAX,
                a: u64::MAX - i,
                b: i << 40,
                c: i,
                ..RawEvent::new(EventKind::from_u8(1 + (i % 20) as u8).expect("kind"), i as u32 * 7, t, t - i % 3)
            });
        }
        // Out of order starts (a delta backwards) and the extremes.
        v.push(RawEvent::new(EventKind::Kernel, u32::MAX, 0, u64::MAX));
        v.push(RawEvent::new(EventKind::Kernel, 0, u64::MAX, 0));
        v
    }

    #[test]
    fn columns_round_trip_every_value() {
        let events = sample();
        let mut raw = Vec::new();
        EventEncoder::default().encode(&events, &mut raw);
        assert_eq!(decode_columns(&raw, 1 << 16), Some(events.clone()));
        // The encoder's buffers are reused: a second, shorter block must not carry anything over.
        let mut enc = EventEncoder::default();
        let (mut first, mut second) = (Vec::new(), Vec::new());
        enc.encode(&events, &mut first);
        enc.encode(&events[..3], &mut second);
        assert_eq!(decode_columns(&second, 1 << 16), Some(events[..3].to_vec()));
    }

    #[test]
    fn rows_round_trip_every_value() {
        let events = sample();
        let mut raw = Vec::new();
        encode_rows(&events, &mut raw);
        assert_eq!(decode_rows(&raw, 1 << 16), Some(events));
    }

    #[test]
    fn malformed_blocks_are_refused_not_trusted() {
        let events = sample();
        let mut raw = Vec::new();
        EventEncoder::default().encode(&events, &mut raw);
        for cut in [0, 1, raw.len() / 2, raw.len() - 1] {
            assert_eq!(decode_columns(&raw[..cut], 1 << 16), None, "cut at {cut}");
        }
        let mut longer = raw.clone();
        longer.push(0);
        assert_eq!(decode_columns(&longer, 1 << 16), None, "trailing bytes");
        assert_eq!(decode_columns(&raw, 10), None, "more events than the caller allows");
        // A count far beyond what the payload can hold allocates nothing.
        let mut huge = Vec::new();
        varint::put(&mut huge, u64::MAX);
        huge.extend_from_slice(&[0; 64]);
        assert_eq!(decode_columns(&huge, usize::MAX), None);
        assert_eq!(decode_rows(&huge, usize::MAX), None);
    }
}
