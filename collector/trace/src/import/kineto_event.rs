//! One `traceEvents` element of a Chrome/Kineto trace, parsed by hand from the scanner's window: only the members
//! cuflight reads are decoded (names and short strings borrowed from the bytes, numbers from their text), and
//! everything else is skipped without being built into values.
//!
//! Members of the wrong type read as absent rather than failing the whole trace: a tracer that writes
//! `"dur": "5"` loses that event's duration, not the file. Below the parser, what an event's members mean: ids,
//! copy kinds from a memcpy's name.

use super::json_scan::{as_i64, as_u64, next_or_close, skip_value, string, token, us_to_ns, ws, Scanned};
use std::borrow::Cow;

/// A pid, tid or flow id: a number, or a string (hashed to a stable number, the text kept for names).
pub enum Id<'a> {
    Num(u64),
    Text(Cow<'a, str>),
}

#[derive(Default)]
pub struct Event<'a> {
    /// Phase and category as bytes (compared, rarely shown).
    pub ph: Cow<'a, [u8]>,
    pub cat: Cow<'a, [u8]>,
    /// An instant's scope: `g` (global), `p` (process), `t` (thread, the default).
    pub scope: Cow<'a, [u8]>,
    pub name: Cow<'a, str>,
    pub pid: Option<Id<'a>>,
    pub tid: Option<Id<'a>>,
    /// The text of `ts` (a number, or a number in a string): epoch microseconds like 1712195495506161.2 need
    /// more digits than f64 holds, so they are converted exactly from the decimal text.
    pub ts: Option<&'a str>,
    /// Nanoseconds.
    pub dur: Option<u64>,
    pub id: Option<Id<'a>>,
    pub args: Args<'a>,
}

/// The args cuflight reads.
#[derive(Default)]
pub struct Args<'a> {
    pub correlation: Option<i64>,
    pub device: Option<i64>,
    pub stream: Option<i64>,
    pub cbid: Option<i64>,
    pub bytes: Option<i64>,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
    pub registers: Option<i64>,
    pub shared_memory: Option<i64>,
    pub name: Option<Cow<'a, str>>,
    /// A `process_labels` metadata event's labels.
    pub labels: Option<Cow<'a, str>>,
    pub cuda_sync_kind: Option<Cow<'a, str>>,
    pub domain: Option<Cow<'a, str>>,
    pub is_async: Option<bool>,
    pub pinned: Option<bool>,
    pub addr: Option<i64>,
    pub signed_bytes: Option<i64>,
    pub device_type: Option<i64>,
    pub device_id: Option<i64>,
    /// Kineto's "External id": links an operator to the runtime calls it made (and TensorBoard, through them,
    /// to its kernels).
    pub external_id: Option<i64>,
    /// cuflight's own export: the return code of a CUDA call that failed.
    pub return_code: Option<i64>,
    /// Kineto's figures on a kernel (kept to recover a device its trace does not describe).
    pub blocks_per_sm: Option<f64>,
    pub occupancy_pct: Option<i64>,
    /// An operator's arguments TensorBoard reads, as their JSON text: "Input Dims" (or "Input dims"),
    /// "Input type", "Call stack"; and its scalar arguments' values ("Concrete Inputs": an attention's
    /// `is_causal`).
    pub input_dims: Option<&'a [u8]>,
    pub input_type: Option<&'a [u8]>,
    pub call_stack: Option<&'a [u8]>,
    pub concrete_inputs: Option<&'a [u8]>,
    pub sequence: Option<i64>,
    /// What PyTorch's `record_param_comms` says of a collective (2.x): "Collective name", "In msg nelems", "Out msg
    /// nelems", "dtype", "Group size", as their JSON text.
    pub comms: [Option<&'a [u8]>; 5],
}

/// The keys of [`Args::comms`], in its order.
pub const COMMS_KEYS: [&str; 5] = ["Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size"];

impl<'a> Args<'a> {
    /// The arguments an operator's range keeps, by key, as their JSON text: its shapes, types, scalar values and
    /// stack, and what a collective's record says of it.
    pub fn operator_fields(&self) -> [(&'static str, Option<&'a [u8]>); 9] {
        let c = &self.comms;
        [
            ("Input Dims", self.input_dims),
            ("Input type", self.input_type),
            ("Concrete Inputs", self.concrete_inputs),
            ("Call stack", self.call_stack),
            (COMMS_KEYS[0], c[0]),
            (COMMS_KEYS[1], c[1]),
            (COMMS_KEYS[2], c[2]),
            (COMMS_KEYS[3], c[3]),
            (COMMS_KEYS[4], c[4]),
        ]
    }
}

/// Parses the object starting at `i` (after whitespace) into `e` (filled in place: an event is large to move);
/// returns the index after its closing brace.
pub fn parse_event<'a>(b: &'a [u8], i: usize, e: &mut Event<'a>) -> Scanned<usize> {
    members(b, i, |key, b, at| {
        Ok(match key {
            b"ph" => raw(b, at, &mut e.ph)?,
            b"cat" => raw(b, at, &mut e.cat)?,
            b"s" => raw(b, at, &mut e.scope)?,
            b"name" => text(b, at, &mut e.name)?,
            b"pid" => id(b, at, &mut e.pid)?,
            b"tid" => id(b, at, &mut e.tid)?,
            b"id" => id(b, at, &mut e.id)?,
            b"ts" => {
                let at = ws(b, at)?;
                if b[at] == b'"' {
                    let (s, end) = string(b, at)?;
                    e.ts = std::str::from_utf8(s.bytes).ok();
                    end
                } else {
                    let (tok, end) = token(b, at)?;
                    e.ts = std::str::from_utf8(tok).ok();
                    end
                }
            }
            b"dur" => match number(b, at)? {
                (Some(tok), end) => {
                    // A negative duration reads as none (0).
                    e.dur = std::str::from_utf8(tok).ok().and_then(us_to_ns);
                    end
                }
                (None, end) => end,
            },
            b"args" => args(b, at, &mut e.args)?,
            _ => skip_value(b, at)?,
        })
    })
}

fn args<'a>(b: &'a [u8], at: usize, a: &mut Args<'a>) -> Scanned<usize> {
    let at = ws(b, at)?;
    if b[at] != b'{' {
        return skip_value(b, at);
    }
    members(b, at, |key, b, at| {
        Ok(match key {
            b"correlation" => int(b, at, &mut a.correlation)?,
            b"device" => int(b, at, &mut a.device)?,
            b"stream" => int(b, at, &mut a.stream)?,
            b"cbid" => int(b, at, &mut a.cbid)?,
            b"bytes" => int(b, at, &mut a.bytes)?,
            b"grid" => dims(b, at, &mut a.grid)?,
            b"block" => dims(b, at, &mut a.block)?,
            b"registers per thread" => int(b, at, &mut a.registers)?,
            b"shared memory" => int(b, at, &mut a.shared_memory)?,
            b"name" => opt_text(b, at, &mut a.name)?,
            b"labels" => opt_text(b, at, &mut a.labels)?,
            b"cuda_sync_kind" => opt_text(b, at, &mut a.cuda_sync_kind)?,
            b"domain" => opt_text(b, at, &mut a.domain)?,
            b"async" => boolean(b, at, &mut a.is_async)?,
            b"pinned" => boolean(b, at, &mut a.pinned)?,
            b"Addr" => int(b, at, &mut a.addr)?,
            b"Bytes" => int(b, at, &mut a.signed_bytes)?,
            b"Device Type" => int(b, at, &mut a.device_type)?,
            b"Device Id" => int(b, at, &mut a.device_id)?,
            b"External id" | b"external id" => int(b, at, &mut a.external_id)?,
            b"return" => int(b, at, &mut a.return_code)?,
            b"blocks per SM" => float(b, at, &mut a.blocks_per_sm)?,
            b"est. achieved occupancy %" => int(b, at, &mut a.occupancy_pct)?,
            b"Input Dims" | b"Input dims" => raw_value(b, at, &mut a.input_dims)?,
            b"Input type" => raw_value(b, at, &mut a.input_type)?,
            b"Call stack" => raw_value(b, at, &mut a.call_stack)?,
            b"Concrete Inputs" => raw_value(b, at, &mut a.concrete_inputs)?,
            b"Sequence number" => int(b, at, &mut a.sequence)?,
            b"Collective name" => raw_value(b, at, &mut a.comms[0])?,
            b"In msg nelems" => raw_value(b, at, &mut a.comms[1])?,
            b"Out msg nelems" => raw_value(b, at, &mut a.comms[2])?,
            b"dtype" => raw_value(b, at, &mut a.comms[3])?,
            b"Group size" => raw_value(b, at, &mut a.comms[4])?,
            _ => skip_value(b, at)?,
        })
    })
}

/// Walks the members of the object at `i`, calling `member(key, bytes, index of the value)`, which returns the
/// index after the value; returns the index after the closing brace.
fn members<'a>(
    b: &'a [u8],
    i: usize,
    mut member: impl FnMut(&[u8], &'a [u8], usize) -> Scanned<usize>,
) -> Scanned<usize> {
    let mut at = super::json_scan::expect(b, i, b'{', "expected an object")?;
    at = ws(b, at)?;
    if b[at] == b'}' {
        return Ok(at + 1);
    }
    loop {
        let (key, after) = string(b, at)?;
        let after = super::json_scan::expect(b, after, b':', "expected ':'")?;
        let key = key.key()?;
        let end = member(&key, b, after)?;
        let (next, closed) = next_or_close(b, end, b'}')?;
        if closed {
            return Ok(next);
        }
        at = next;
    }
}

/// A number's text, or `None` (the value skipped) for any other type.
fn number(b: &[u8], at: usize) -> Scanned<(Option<&[u8]>, usize)> {
    let at = ws(b, at)?;
    if matches!(b[at], b'-' | b'0'..=b'9') {
        let (tok, end) = token(b, at)?;
        return Ok((Some(tok), end));
    }
    Ok((None, skip_value(b, at)?))
}

fn int(b: &[u8], at: usize, out: &mut Option<i64>) -> Scanned<usize> {
    let (tok, end) = number(b, at)?;
    *out = tok.and_then(as_i64);
    Ok(end)
}

fn float(b: &[u8], at: usize, out: &mut Option<f64>) -> Scanned<usize> {
    let (tok, end) = number(b, at)?;
    *out = tok.and_then(|t| std::str::from_utf8(t).ok()?.parse().ok());
    Ok(end)
}

/// A value's JSON text as it stands (checked well-formed by the skip).
fn raw_value<'a>(b: &'a [u8], at: usize, out: &mut Option<&'a [u8]>) -> Scanned<usize> {
    let at = ws(b, at)?;
    let end = skip_value(b, at)?;
    *out = Some(&b[at..end]);
    Ok(end)
}

fn boolean(b: &[u8], at: usize, out: &mut Option<bool>) -> Scanned<usize> {
    let at = ws(b, at)?;
    if matches!(b[at], b't' | b'f') {
        let (tok, end) = token(b, at)?;
        *out = match tok {
            b"true" => Some(true),
            b"false" => Some(false),
            _ => None,
        };
        return Ok(end);
    }
    skip_value(b, at)
}

fn opt_text<'a>(b: &'a [u8], at: usize, out: &mut Option<Cow<'a, str>>) -> Scanned<usize> {
    let at = ws(b, at)?;
    if b[at] != b'"' {
        return skip_value(b, at);
    }
    let (s, end) = string(b, at)?;
    *out = Some(s.text()?);
    Ok(end)
}

/// A string's bytes with escapes decoded, not checked for UTF-8; other types read as empty.
fn raw<'a>(b: &'a [u8], at: usize, out: &mut Cow<'a, [u8]>) -> Scanned<usize> {
    let at = ws(b, at)?;
    if b[at] != b'"' {
        return skip_value(b, at);
    }
    let (s, end) = string(b, at)?;
    *out = s.key()?;
    Ok(end)
}

fn text<'a>(b: &'a [u8], at: usize, out: &mut Cow<'a, str>) -> Scanned<usize> {
    let mut v = None;
    let end = opt_text(b, at, &mut v)?;
    *out = v.unwrap_or_default();
    Ok(end)
}

/// A number (a negative one wraps, as JSON readers widen it to u64), or a string that holds one or a label.
fn id<'a>(b: &'a [u8], at: usize, out: &mut Option<Id<'a>>) -> Scanned<usize> {
    let at = ws(b, at)?;
    if b[at] == b'"' {
        let (s, end) = string(b, at)?;
        let s = s.text()?;
        *out = Some(s.parse().map_or(Id::Text(s), Id::Num));
        return Ok(end);
    }
    let (tok, end) = number(b, at)?;
    *out = tok.and_then(as_u64).map(Id::Num);
    Ok(end)
}

/// `[x, y, z]`: missing or non-numeric entries read as 1.
fn dims(b: &[u8], at: usize, out: &mut Option<[u32; 3]>) -> Scanned<usize> {
    let mut at = ws(b, at)?;
    if b[at] != b'[' {
        return skip_value(b, at);
    }
    let mut d = [1u32; 3];
    at = ws(b, at + 1)?;
    if b[at] == b']' {
        *out = Some(d);
        return Ok(at + 1);
    }
    let mut k = 0;
    loop {
        let (tok, end) = number(b, at)?;
        if let (Some(slot), Some(v)) = (d.get_mut(k), tok.and_then(as_i64)) {
            *slot = v.max(0) as u32;
        }
        k += 1;
        let (next, closed) = next_or_close(b, end, b']')?;
        if closed {
            *out = Some(d);
            return Ok(next);
        }
        at = next;
    }
}

/// pid/tid as numbers; strings (some traces name threads) hash to a stable number.
pub(super) fn id_of(v: &Option<Id>) -> u64 {
    match v {
        Some(Id::Num(n)) => *n,
        Some(Id::Text(s)) => stable_hash(s) & 0x7fff_ffff,
        None => 0,
    }
}

pub(super) fn u(v: Option<i64>) -> Option<u64> {
    v.map(|n| n.max(0) as u64)
}

/// "Memcpy HtoD (Pageable -> Device)" → (CUPTI copy kind, source kind, destination kind).
pub(super) fn memcpy_kinds(name: &str) -> (u8, u8, u8) {
    let kind = ["HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"]
        .iter()
        .position(|k| name.contains(k))
        .map_or(0, |i| i as u8 + 1);
    let (src, dst) = name
        .split_once('(')
        .and_then(|(_, rest)| rest.trim_end_matches(')').split_once("->"))
        .map_or((0, 0), |(s, d)| (memory_kind(s.trim()), memory_kind(d.trim())));
    (kind, src, dst)
}

pub(super) fn memory_kind(s: &str) -> u8 {
    match s.to_ascii_lowercase().as_str() {
        "pageable" => 1,
        "pinned" => 2,
        "device" => 3,
        "array" => 4,
        "managed" => 5,
        _ => 0,
    }
}

/// FNV-1a: a hash that stays the same across runs and builds, so that a pid or tid Kineto writes as text maps
/// to the same number on every import.
fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}
