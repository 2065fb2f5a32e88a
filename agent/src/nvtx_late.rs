//! NVTX for an agent loaded into a running process (`cuflight attach --inject`).
//!
//! NVTX v3 is header-only: every library that uses it (libtorch, NCCL, the program itself) carries a private,
//! hidden `nvtxGlobals_v3` (nvtxDetail/nvtxImpl.h) whose function-pointer slots its NVTX calls go through, and
//! reads `NVTX_INJECTION64_PATH` once, at its first NVTX call. Loaded later, the agent finds those globals by
//! their shape, in the writable data of every mapped file, and fills them as an injection would:
//!
//! - `initState` (u32, padded to 8), then `etblCallbacks` = {16, GetModuleFunctionTable} and
//!   `etblVersionInfo` = {24, version 3 | reserved 0 << 32, SetInjectionNvtxVersion}: five words that rarely
//!   occur together by chance;
//! - then the slots, then `functionTable_CORE` = {NULL, &slot\[0\], &slot\[1\], ...}: pointers back into the same
//!   struct at the addresses just found, which nothing else holds.
//!
//! Only a candidate that passes both checks, whose callbacks point into executable memory of the same file, is
//! touched. What it holds decides what is done (nvtxInit.h's protocol):
//! - COMPLETE with every slot empty (no injection was found) or ours: filled through its own
//!   `GetModuleFunctionTable`, as `InitializeInjectionNvtx2` would.
//! - FRESH (no NVTX call yet): claimed by the same compare-and-swap its own first call would make, filled, the
//!   slots left on their lazy-init functions emptied (as `nvtxSetInitFunctionsToNoops` does; an init function
//!   left behind would call itself for ever), then marked COMPLETE with a release store.
//! - A slot holding someone else's function (nsys or another tool injected at start): left alone, counted.
//! - STARTED (a thread is initialising it now): left for the next attach.
//!
//! Memory is read through `/proc/self/mem`, so a library unloaded during the scan is an I/O error, not a fault.

use crate::nvtx;
use cupti_sys::cuda13 as c;
use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

const FRESH: u32 = 0;
const STARTED: u32 = 1;
const COMPLETE: u32 = 2;
/// Offset of the first slot: initState (8 with padding) + etblCallbacks (16) + etblVersionInfo (24).
const SLOTS: u64 = 48;
/// Most slots a table may have before `functionTable_CORE` (64 in NVTX 3.1; room for growth).
const MAX_SLOTS: usize = 256;
/// Largest mapping scanned (a library's writable data; a bigger one is not a library's .data).
const MAX_MAPPING: u64 = 1 << 30;

/// What a scan found, over the agent's life.
#[derive(Default, Clone, Copy, Debug, PartialEq)]
pub struct Found {
    /// Tables now calling the agent.
    pub hooked: u32,
    /// Tables holding another tool's functions.
    pub foreign: u32,
}

static HOOKED: Mutex<Option<HashSet<u64>>> = Mutex::new(None);
static FOREIGN: AtomicU32 = AtomicU32::new(0);

/// Finds and fills every NVTX table in the process (see the module's comment). Not a hot path: the control
/// thread runs it when the agent arrives and at each attach (libraries loaded since then).
pub fn hook_tables() -> Found {
    let Ok(mem) = std::fs::File::open("/proc/self/mem") else { return found() };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return found() };
    let regions = Regions::parse(&maps);
    let mut foreign = 0;
    for &(lo, hi, ref path) in regions.writable.iter() {
        for base in candidates(&mem, lo, hi) {
            if HOOKED.lock().map(|h| h.as_ref().is_some_and(|h| h.contains(&base))).unwrap_or(true) {
                continue;
            }
            match verify(&mem, base, &regions, path) {
                Some(slots) => match hook(&mem, base, slots) {
                    Outcome::Hooked => {
                        if let Ok(mut h) = HOOKED.lock() {
                            h.get_or_insert_with(HashSet::new).insert(base);
                        }
                    }
                    Outcome::Foreign => foreign += 1,
                    Outcome::Busy => {}
                },
                None => continue,
            }
        }
    }
    FOREIGN.store(foreign, Ordering::Relaxed);
    found()
}

fn found() -> Found {
    let hooked = HOOKED.lock().map(|h| h.as_ref().map_or(0, |h| h.len() as u32)).unwrap_or(0);
    Found { hooked, foreign: FOREIGN.load(Ordering::Relaxed) }
}

/// The process's file mappings: writable ones to scan, executable ones to check pointers against.
struct Regions {
    writable: Vec<(u64, u64, String)>,
    executable: Vec<(u64, u64, String)>,
}

impl Regions {
    fn parse(maps: &str) -> Regions {
        let mut r = Regions { writable: Vec::new(), executable: Vec::new() };
        for line in maps.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(range), Some(perms), Some(path)) = (f.first(), f.get(1), f.get(5)) else { continue };
            let Some((lo, hi)) = range.split_once('-') else { continue };
            let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else { continue };
            if !path.starts_with('/') || hi <= lo {
                continue;
            }
            if perms.starts_with("rw") && perms.ends_with('p') && hi - lo <= MAX_MAPPING {
                r.writable.push((lo, hi, path.to_string()));
            } else if perms.as_bytes().get(2) == Some(&b'x') {
                r.executable.push((lo, hi, path.to_string()));
            }
        }
        // Only the data of loaded code (a file also mapped executable): never shared memory such as the agent's
        // own segment (a memfd), whose untouched pages a read would populate.
        let code: HashSet<String> = r.executable.iter().map(|(_, _, p)| p.clone()).collect();
        r.writable.retain(|(_, _, p)| code.contains(p) && !p.starts_with("/memfd:"));
        r
    }

    fn code_of(&self, addr: u64, path: &str) -> bool {
        self.executable.iter().any(|(lo, hi, p)| (*lo..*hi).contains(&addr) && p == path)
    }
}

/// Addresses in [lo, hi) where the header's five words appear.
fn candidates(mem: &std::fs::File, lo: u64, hi: u64) -> Vec<u64> {
    const CHUNK: u64 = 1 << 20;
    const HEAD: u64 = 48; // the words checked, read again at a chunk's end
    let mut out = Vec::new();
    let mut buf = vec![0u8; (CHUNK + HEAD) as usize];
    let mut at = lo;
    while at < hi {
        let len = (hi - at).min(CHUNK + HEAD) as usize;
        if mem.read_exact_at(&mut buf[..len], at).is_err() {
            break;
        }
        let words: Vec<u64> = buf[..len].as_chunks::<8>().0.iter().map(|w| u64::from_le_bytes(*w)).collect();
        for (i, w) in words.windows(6).enumerate() {
            if (i as u64) * 8 >= CHUNK {
                break;
            }
            if w[1] == 16 && w[3] == 24 && w[4] == 3 && w[2] != 0 && w[5] != 0 && w[0] <= u64::from(COMPLETE) {
                out.push(at + i as u64 * 8);
            }
        }
        at += CHUNK;
    }
    out
}

/// The number of slots when `base` is an `nvtxGlobals_v3` of a library mapped from `path`.
fn verify(mem: &std::fs::File, base: u64, regions: &Regions, path: &str) -> Option<usize> {
    let mut head = [0u8; 48];
    mem.read_exact_at(&mut head, base).ok()?;
    let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
    if !regions.code_of(word(&head, 2), path) || !regions.code_of(word(&head, 5), path) {
        return None;
    }
    let mut after = vec![0u8; (MAX_SLOTS + 3) * 8];
    mem.read_exact_at(&mut after, base + SLOTS).ok()?;
    (1..=MAX_SLOTS).find(|&j| {
        word(&after, j) == 0 && word(&after, j + 1) == base + SLOTS && word(&after, j + 2) == base + SLOTS + 8
    })
}

enum Outcome {
    Hooked,
    Foreign,
    Busy,
}

/// Fills the table at `base` (verified, `slots` function pointers long) according to its state.
fn hook(mem: &std::fs::File, base: u64, slots: usize) -> Outcome {
    let mut raw = vec![0u8; slots * 8];
    if mem.read_exact_at(&mut raw, base + SLOTS).is_err() {
        return Outcome::Busy;
    }
    let values: Vec<usize> = raw.as_chunks::<8>().0.iter().map(|w| u64::from_le_bytes(*w) as usize).collect();
    // SAFETY: `base` is a live, verified nvtxGlobals_v3 (read back just now): initState is its first, aligned
    // u32, which NVTX itself accesses atomically.
    let state = unsafe { AtomicU32::from_ptr(base as *mut u32) };
    match state.load(Ordering::Acquire) {
        COMPLETE => {
            if values.iter().any(|&f| f != 0 && !nvtx::ours(f)) {
                return Outcome::Foreign;
            }
            install(base);
            Outcome::Hooked
        }
        FRESH => {
            if state.compare_exchange(FRESH, STARTED, Ordering::AcqRel, Ordering::Acquire).is_err() {
                return Outcome::Busy; // its own first call got there first
            }
            // Whatever happens from here (even a panic), the table ends COMPLETE with no lazy-init slot left:
            // its threads spin while it is STARTED.
            let _complete = Complete { state, base, slots };
            install(base);
            Outcome::Hooked
        }
        _ => Outcome::Busy,
    }
}

/// Finishes a claimed FRESH table (see `hook`): empties the slots not ours, then publishes COMPLETE.
struct Complete<'a> {
    state: &'a AtomicU32,
    base: u64,
    slots: usize,
}

impl Drop for Complete<'_> {
    fn drop(&mut self) {
        for i in 0..self.slots {
            // SAFETY: slot i of the claimed table (aligned pointer-sized words; NVTX reads them without barriers
            // and relies on their natural atomicity, as nvtxInit.h states).
            let slot = unsafe { AtomicU64::from_ptr((self.base + SLOTS + 8 * i as u64) as *mut u64) };
            if !nvtx::ours(slot.load(Ordering::Relaxed) as usize) {
                slot.store(0, Ordering::Relaxed);
            }
        }
        self.state.store(COMPLETE, Ordering::Release);
    }
}

fn install(base: u64) {
    // SAFETY: etblCallbacks lies at offset 8 of the verified globals, an NvtxExportTableCallbacks whose function
    // points into the same library's code (checked by `verify`).
    let callbacks = unsafe { &*((base + 8) as *const c::NvtxExportTableCallbacks) };
    nvtx::install_callbacks(callbacks);
}
