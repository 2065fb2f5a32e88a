//! Sequences of kernels on one stream that one fused kernel would replace, found as the sweep meets each kernel in
//! a step: chains of elementwise kernels (an eager GELU is eight: pow, mul, add, mul, tanh, add, mul, mul), and
//! attention computed as a GEMM, a softmax and a GEMM with only elementwise kernels (scale, mask, dropout) between.
//! Kernels are taken in the order they start on their stream, which is the order the stream runs them.

use super::window::NameFlags;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Elementwise kernels in a row on one stream before they count as a chain: two or three are the bias-and-
/// activation pairs any model has, which fusion saves little of; four and more are a decomposed function.
pub const MIN_CHAIN: usize = 4;
/// Names kept per chain, to group chains that compute the same thing (a chain longer than this is grouped by its
/// first ones and its length).
const SIGNATURE: usize = 12;
/// Distinct chains told apart; more are counted together (a model has a few dozen).
const MAX_GROUPS: usize = 4096;
/// Elementwise kernels allowed between attention's GEMMs and its softmax (scale, mask, dropout, casts).
const ATTENTION_GAP: usize = 3;

/// Chains that compute the same sequence of operations, counted together.
#[derive(Clone, Debug, Default)]
pub struct ChainGroup {
    /// Kernel names (string ids) of the first [`SIGNATURE`] kernels of a chain.
    pub names: Vec<u32>,
    /// Kernels a chain of this group runs.
    pub length: usize,
    pub chains: u64,
    pub total_ns: u64,
    /// The chains' time less their longest kernel's: a fused kernel reads the chain's inputs and writes its
    /// output once, about the time of the chain's slowest pass over the data.
    pub fusable_ns: u64,
    /// The longest chain: (start, end) on the device clock.
    pub longest: (u64, u64),
}

impl ChainGroup {
    fn add(&mut self, chain: &Chain) {
        self.chains += 1;
        self.total_ns = self.total_ns.saturating_add(chain.total_ns);
        self.fusable_ns = self.fusable_ns.saturating_add(chain.total_ns.saturating_sub(chain.longest_ns));
        // Corrupt times (an end before its start) must not wrap: a hostile trace is read as any other.
        if chain.end.saturating_sub(chain.start) > self.longest.1.saturating_sub(self.longest.0) {
            self.longest = (chain.start, chain.end);
        }
    }
}

/// What the sweep found, over every stream and step.
#[derive(Debug, Default)]
pub struct Fusable {
    /// Elementwise chains by what they compute, most time first once finished.
    pub chains: Vec<ChainGroup>,
    /// Attention computed from separate kernels: each a GEMM, a softmax and a GEMM with the elementwise kernels
    /// between them.
    pub attention: ChainGroup,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Elementwise,
    Gemm,
    Softmax,
    Other,
}

#[derive(Clone, Copy, Debug)]
struct Kernel {
    role: Role,
    start: u64,
    end: u64,
}

/// One stream's open elementwise chain.
#[derive(Debug, Default)]
struct Chain {
    names: Vec<u32>,
    length: usize,
    total_ns: u64,
    longest_ns: u64,
    start: u64,
    end: u64,
}

#[derive(Default)]
struct StreamState {
    chain: Chain,
    /// The last kernels, for attention's pattern (GEMM, gap, softmax, gap, GEMM).
    recent: VecDeque<Kernel>,
}

/// The sweep's state: per stream, the open chain and the last kernels.
#[derive(Default)]
pub struct FusionSweep {
    streams: FxHashMap<(u32, u32), StreamState>,
    chains: ChainGroups,
    attention: ChainGroup,
}

/// Closed chains by what they compute (their first names and length), and those past [`MAX_GROUPS`].
#[derive(Default)]
struct ChainGroups {
    groups: FxHashMap<(Vec<u32>, usize), ChainGroup>,
    overflow: ChainGroup,
}

impl FusionSweep {
    /// A kernel that starts in a step, on `(device, stream)`, in its stream's order.
    pub fn kernel(&mut self, names: &NameFlags, stream: (u32, u32), name: u32, start: u64, end: u64) {
        let role = if names.has(name, NameFlags::ELEMENTWISE) {
            Role::Elementwise
        } else if names.has(name, NameFlags::GEMM) {
            Role::Gemm
        } else if names.has(name, NameFlags::SOFTMAX) {
            Role::Softmax
        } else {
            Role::Other
        };
        let k = Kernel { role, start, end };
        let state = self.streams.entry(stream).or_default();
        if role == Role::Elementwise {
            let c = &mut state.chain;
            if c.length == 0 {
                c.start = start;
            }
            if c.names.len() < SIGNATURE {
                c.names.push(name);
            }
            c.length += 1;
            let ns = end.saturating_sub(start);
            c.total_ns = c.total_ns.saturating_add(ns);
            c.longest_ns = c.longest_ns.max(ns);
            c.end = c.end.max(end);
        } else {
            self.chains.close(std::mem::take(&mut state.chain));
        }
        state.recent.push_back(k);
        if state.recent.len() > 2 * ATTENTION_GAP + 3 {
            state.recent.pop_front();
        }
        if role == Role::Gemm {
            if let Some(first) = attention_from(&state.recent) {
                let pattern: Vec<Kernel> = state.recent.drain(first..).collect();
                let total = pattern.iter().map(|k| k.end.saturating_sub(k.start)).fold(0u64, u64::saturating_add);
                let span = (pattern[0].start, pattern[pattern.len() - 1].end);
                let a = &mut self.attention;
                a.chains += 1;
                a.length = a.length.max(pattern.len());
                a.total_ns = a.total_ns.saturating_add(total);
                if span.1.saturating_sub(span.0) > a.longest.1.saturating_sub(a.longest.0) {
                    a.longest = span;
                }
                state.recent.clear();
            }
        }
    }

    /// Every chain still open closed (at the end of the steps), groups sorted by time.
    pub fn finish(mut self) -> Fusable {
        for s in self.streams.values_mut() {
            self.chains.close(std::mem::take(&mut s.chain));
        }
        let mut chains: Vec<ChainGroup> = self.chains.groups.into_values().collect();
        if self.chains.overflow.chains > 0 {
            chains.push(self.chains.overflow);
        }
        chains.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.names.cmp(&b.names)));
        Fusable { chains, attention: self.attention }
    }
}

impl ChainGroups {
    fn close(&mut self, chain: Chain) {
        if chain.length < MIN_CHAIN {
            return;
        }
        let key = (chain.names.clone(), chain.length);
        let full = self.groups.len() >= MAX_GROUPS;
        match self.groups.get_mut(&key) {
            Some(g) => g.add(&chain),
            None if full => self.overflow.add(&chain),
            None => {
                let mut g = ChainGroup { names: chain.names.clone(), length: chain.length, ..ChainGroup::default() };
                g.add(&chain);
                self.groups.insert(key, g);
            }
        }
    }
}

/// Where attention's pattern starts in `recent` (which ends with a GEMM): a GEMM, at most [`ATTENTION_GAP`]
/// elementwise kernels, a softmax, at most as many elementwise kernels, then that last GEMM.
fn attention_from(recent: &VecDeque<Kernel>) -> Option<usize> {
    let mut i = recent.len().checked_sub(1)?;
    let skip_elementwise = |i: &mut usize| -> Option<()> {
        for _ in 0..=ATTENTION_GAP {
            *i = i.checked_sub(1)?;
            if recent[*i].role != Role::Elementwise {
                return Some(());
            }
        }
        None
    };
    skip_elementwise(&mut i)?;
    if recent[i].role != Role::Softmax {
        return None;
    }
    skip_elementwise(&mut i)?;
    (recent[i].role == Role::Gemm).then_some(i)
}
