//! The string region's layout, shared by a segment's shared memory and a trace file's string records: a string's
//! id is the byte offset of its entry, a little-endian u32 length then the bytes, padded to 4; offset 0 holds no
//! string, so id 0 means "no name".

/// Splits published string bytes (starting at region offset `base`) into `(id, bytes)` pairs. Stops at the first
/// entry that does not fit, which only a corrupt segment or file can produce.
pub fn parse_strings(base: u64, bytes: &[u8]) -> impl Iterator<Item = (u32, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
        let s = bytes.get(at + 4..at + 4 + len)?;
        let id = base + at as u64;
        at += (4 + len).next_multiple_of(4);
        Some((id as u32, s))
    })
}

/// A string region built in memory, laid out as the agent lays one out in its segment: for tools that write
/// traces themselves (the synthetic-trace generators, tests).
#[derive(Clone, Debug)]
pub struct StringRegion {
    bytes: Vec<u8>,
}

impl Default for StringRegion {
    fn default() -> Self {
        // Offset 0 is reserved: id 0 is "no string".
        StringRegion { bytes: vec![0; 4] }
    }
}

impl StringRegion {
    /// Appends `s`; returns its id (every call appends, as the agent's interner does for a string it has not seen).
    pub fn intern(&mut self, s: &str) -> u32 {
        let id = self.bytes.len() as u32;
        self.bytes.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(s.as_bytes());
        self.bytes.resize(self.bytes.len().next_multiple_of(4), 0);
        id
    }

    /// The region's bytes from offset 0.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_regions_parse_back() {
        let mut r = StringRegion::default();
        let ids = [r.intern("k"), r.intern(""), r.intern("cudaLaunchKernel")];
        assert_eq!(ids, [4, 12, 16]);
        let parsed: Vec<_> = parse_strings(0, &r.bytes()[4..]).map(|(id, s)| (id + 4, s.to_vec())).collect();
        assert_eq!(parsed, [(4, b"k".to_vec()), (12, vec![]), (16, b"cudaLaunchKernel".to_vec())]);
    }
}
