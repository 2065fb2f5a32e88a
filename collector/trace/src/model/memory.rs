//! Live memory: the one replay of allocations and frees that stats, the report and both exports use.
//!
//! Sources disagree on what a free says. The agent's frees carry the address only (CUPTI's `cudaFree` params);
//! torch.profiler's `[memory]` events carry a signed size and sometimes no address at all. One rule covers both:
//!
//! - an allocation adds its size; at an address already live (its free was missed) it replaces that block;
//! - a free of a live address removes that block, whatever size the free itself claims;
//! - any other free (no address, or one allocated before the trace began) removes the size it carries (0 for
//!   the agent's), never more than is live;
//! - an allocation decides its block's kind; a free of an unknown block counts by its own kind; an unknown kind
//!   (only hostile input has one) counts as device memory.

use cuflight_format::{EventKind, RawEvent};
use rustc_hash::FxHashMap;

/// What one allocation or free did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub device: bool,
    /// Bytes added (an allocation) or removed (a free, negative).
    pub delta: i64,
    /// Live bytes of this kind afterwards.
    pub live: u64,
}

/// Live bytes by kind, replayed event by event (callers feed events in time order).
#[derive(Default)]
pub struct LiveMemory {
    blocks: FxHashMap<(u32, u64), (u64, bool)>,
    device: u64,
    pinned: u64,
}

pub fn is_device(e: &RawEvent) -> bool {
    e.as_mem_op().on_device()
}

impl LiveMemory {
    /// Applies `e` (an Alloc or Free of process `pid`); None for any other kind.
    pub fn apply(&mut self, pid: u32, e: &RawEvent) -> Option<Change> {
        match e.kind()? {
            EventKind::Alloc => {
                let op = e.as_mem_op();
                let device = op.on_device();
                if op.address != 0 {
                    if let Some((old, old_device)) = self.blocks.insert((pid, op.address), (op.bytes, device)) {
                        *self.bucket(old_device) = self.bucket(old_device).saturating_sub(old);
                    }
                }
                let live = self.bucket(device);
                *live = live.saturating_add(op.bytes);
                Some(Change { device, delta: op.bytes.min(i64::MAX as u64) as i64, live: *live })
            }
            EventKind::Free => {
                let op = e.as_mem_op();
                let (bytes, device) = match (op.address != 0).then(|| self.blocks.remove(&(pid, op.address))).flatten()
                {
                    Some(block) => block,
                    None => (op.bytes, op.on_device()),
                };
                let live = self.bucket(device);
                let removed = bytes.min(*live);
                *live -= removed;
                Some(Change { device, delta: -(removed.min(i64::MAX as u64) as i64), live: *live })
            }
            _ => None,
        }
    }

    fn bucket(&mut self, device: bool) -> &mut u64 {
        if device {
            &mut self.device
        } else {
            &mut self.pinned
        }
    }

    /// The live block at `address` of process `pid`: its bytes, and whether it is device memory.
    pub fn block(&self, pid: u32, address: u64) -> Option<(u64, bool)> {
        self.blocks.get(&(pid, address)).copied()
    }

    /// Live device bytes now.
    pub fn device(&self) -> u64 {
        self.device
    }

    /// Live pinned host bytes now.
    pub fn pinned(&self) -> u64 {
        self.pinned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::event::MemKind;

    fn mem(kind: EventKind, t: u64, addr: u64, bytes: u64) -> RawEvent {
        RawEvent::mem_op(kind == EventKind::Free, 1, t, MemKind::Device, addr, bytes)
    }

    #[test]
    fn frees_by_address_remove_the_block_whatever_size_they_claim() {
        let mut m = LiveMemory::default();
        m.apply(1, &mem(EventKind::Alloc, 1, 0x100, 64));
        m.apply(1, &mem(EventKind::Alloc, 2, 0x200, 32));
        let c = m.apply(1, &mem(EventKind::Free, 3, 0x100, 0)).unwrap();
        assert_eq!((c.delta, c.live), (-64, 32));
        // Same address in another process is another block.
        assert_eq!(m.apply(2, &mem(EventKind::Free, 4, 0x200, 0)).unwrap().delta, 0);
        assert_eq!(m.device(), 32);
    }

    #[test]
    fn signed_size_events_without_addresses_return_to_their_start() {
        // torch.profiler `[memory]` events with no address: +size, then -size.
        let mut m = LiveMemory::default();
        for step in 0..10 {
            for i in 0..5 {
                m.apply(1, &mem(EventKind::Alloc, step * 100 + i, 0, 1 << 30));
            }
            for i in 0..5 {
                m.apply(1, &mem(EventKind::Free, step * 100 + 50 + i, 0, 1 << 30));
            }
            assert_eq!(m.device(), 0, "step {step}");
        }
    }

    #[test]
    fn frees_of_unknown_blocks_never_take_more_than_is_live() {
        let mut m = LiveMemory::default();
        m.apply(1, &mem(EventKind::Alloc, 1, 0x100, 10));
        let c = m.apply(1, &mem(EventKind::Free, 2, 0x999, 1 << 40)).unwrap();
        assert_eq!((c.delta, c.live), (-10, 0));
        // A missed free: the block at a reused address is replaced, not counted twice.
        m.apply(1, &mem(EventKind::Alloc, 3, 0x300, 8));
        m.apply(1, &mem(EventKind::Alloc, 4, 0x300, 8));
        assert_eq!(m.device(), 8);
        // Pinned memory is its own bucket, decided by the allocation.
        let pinned = RawEvent::mem_op(false, 1, 5, MemKind::PinnedHost, 0x400, 4);
        m.apply(1, &pinned);
        assert_eq!((m.device(), m.pinned()), (8, 4));
        assert!(!m.apply(1, &mem(EventKind::Free, 6, 0x400, 0)).unwrap().device, "the allocation decides the kind");
        assert_eq!(m.pinned(), 0);
    }
}
