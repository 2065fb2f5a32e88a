//! The one thing the injector needs from an ELF file: the value of a dynamic symbol (`dlopen` in the target's
//! libc). The file is read from the target's own root (`/proc/PID/root/...`), so a process in a container is
//! looked up in its own libc. Everything is bounds-checked: a malformed file is an error, never a panic.

use std::path::Path;

/// Largest file read (libc is about 2 MiB).
const MAX_FILE: u64 = 256 << 20;

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off.checked_add(2)?)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off.checked_add(4)?)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off.checked_add(8)?)?.try_into().ok()?))
}

/// A parsed 64-bit little-endian ELF file's dynamic symbols.
pub struct Symbols {
    bytes: Vec<u8>,
    dynsym: (usize, usize, usize),
    dynstr: (usize, usize),
    /// The lowest PT_LOAD's p_vaddr minus its p_offset (0 for ordinary shared libraries).
    pub load_bias: u64,
    /// Where the executable PT_LOAD segments end (p_vaddr + p_memsz, the highest): the rest of that page is
    /// mapped executable and belongs to no section, the one place code can be put without allocating.
    pub exec_end: Option<u64>,
}

impl Symbols {
    pub fn read(path: &Path) -> Result<Symbols, String> {
        // The target's file system may be a container's, written by whoever runs it: a FIFO or device under
        // libc's name would block or never end.
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("{}: not a regular file", path.display()));
        }
        if meta.len() > MAX_FILE {
            return Err(format!("{}: larger than {} MiB", path.display(), MAX_FILE >> 20));
        }
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Symbols::parse(bytes)
            .ok_or_else(|| format!("{}: not a 64-bit little-endian ELF with dynamic symbols", path.display()))
    }

    fn parse(bytes: Vec<u8>) -> Option<Symbols> {
        let b = &bytes;
        if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
            return None;
        }
        let (phoff, shoff) = (u64_at(b, 0x20)? as usize, u64_at(b, 0x28)? as usize);
        let (phentsize, phnum) = (u16_at(b, 0x36)? as usize, u16_at(b, 0x38)? as usize);
        let (shentsize, shnum) = (u16_at(b, 0x3a)? as usize, u16_at(b, 0x3c)? as usize);
        let (mut load_bias, mut exec_end) = (None, None::<u64>);
        for i in 0..phnum {
            let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
            if u32_at(b, ph)? == 1 {
                // PT_LOAD: p_offset at +8, p_vaddr at +16; the first one (lowest, as the ABI orders them) counts.
                let bias = u64_at(b, ph + 16)?.wrapping_sub(u64_at(b, ph + 8)?);
                load_bias.get_or_insert(bias);
                // p_flags at +4 (PF_X = 1), p_memsz at +40.
                if u32_at(b, ph + 4)? & 1 != 0 {
                    let end = u64_at(b, ph + 16)?.checked_add(u64_at(b, ph + 40)?)?;
                    exec_end = Some(exec_end.map_or(end, |e| e.max(end)));
                }
            }
        }
        let mut dynsym = None;
        for i in 0..shnum {
            let sh = shoff.checked_add(i.checked_mul(shentsize)?)?;
            if u32_at(b, sh + 4)? == 11 {
                // SHT_DYNSYM: sh_offset +24, sh_size +32, sh_link +40 (its string table), sh_entsize +56.
                let (off, size, link, entsize) =
                    (u64_at(b, sh + 24)?, u64_at(b, sh + 32)?, u32_at(b, sh + 40)?, u64_at(b, sh + 56)?);
                let strsh = shoff.checked_add((link as usize).checked_mul(shentsize)?)?;
                let (stroff, strsize) = (u64_at(b, strsh + 24)?, u64_at(b, strsh + 32)?);
                if entsize < 24
                    || off.checked_add(size)? > b.len() as u64
                    || stroff.checked_add(strsize)? > b.len() as u64
                {
                    return None;
                }
                dynsym = Some(((off as usize, size as usize, entsize as usize), (stroff as usize, strsize as usize)));
            }
        }
        let (dynsym, dynstr) = dynsym?;
        Some(Symbols { bytes, dynsym, dynstr, load_bias: load_bias.unwrap_or(0), exec_end })
    }

    /// The value of the defined function symbol `name` (any version), if there is one.
    pub fn function(&self, name: &str) -> Option<u64> {
        let (off, size, entsize) = self.dynsym;
        let (stroff, strsize) = self.dynstr;
        let strings = self.bytes.get(stroff..stroff + strsize)?;
        (0..size / entsize).find_map(|i| {
            let sym = off + i * entsize;
            let (st_name, st_info, st_shndx, st_value) = (
                u32_at(&self.bytes, sym)? as usize,
                *self.bytes.get(sym + 4)?,
                u16_at(&self.bytes, sym + 6)?,
                u64_at(&self.bytes, sym + 8)?,
            );
            let sym_name = strings.get(st_name..)?.split(|&c| c == 0).next()?;
            // STT_FUNC (2) or STT_GNU_IFUNC would need resolving; only plain, defined functions are taken.
            (sym_name == name.as_bytes() && st_info & 0xf == 2 && st_shndx != 0 && st_value != 0).then_some(st_value)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_dlopen_in_this_process_libc_and_refuses_garbage() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("libc.so")).unwrap();
        let syms = Symbols::read(Path::new(libc)).unwrap();
        assert!(syms.function("dlopen").or(syms.function("__libc_dlopen_mode")).is_some());
        assert!(syms.function("no_such_function_anywhere").is_none());
        assert!(syms.exec_end.is_some_and(|e| e > 0), "libc has an executable segment");
        for bad in [vec![], b"\x7fELF".to_vec(), vec![0x7f, b'E', b'L', b'F', 2, 1, 0, 0], vec![0xffu8; 4096]] {
            assert!(Symbols::parse(bad).is_none());
        }
    }

    #[test]
    fn a_damaged_libc_is_an_error_or_a_lookup_never_a_panic() {
        // A container's libc is whatever its owner put there: flip bytes of the real one, cut it, and look up.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("libc.so")).unwrap();
        let original = std::fs::read(libc).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..300 {
            let mut bytes = original.clone();
            // Headers and tables live in the first and last pages: damage those most.
            for _ in 0..8 {
                let at = match next() % 3 {
                    0 => (next() % 4096) as usize,
                    1 => bytes.len() - 1 - (next() % 8192) as usize,
                    _ => (next() % bytes.len() as u64) as usize,
                };
                bytes[at] = next() as u8;
            }
            if round % 10 == 0 {
                bytes.truncate((next() % bytes.len() as u64) as usize);
            }
            if let Some(syms) = Symbols::parse(bytes) {
                let _ = syms.function("dlopen");
            }
        }
    }
}
