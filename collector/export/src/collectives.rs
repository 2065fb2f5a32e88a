//! The collective each communication kernel ran, for the timelines: what the host's range around its launch asked
//! for (PyTorch's `nccl:all_reduce`, NCCL's NVTX `ncclAllReduce`), else what its name says, by the rule the report
//! and `stats` follow ([`cuflight_trace::model::collectives`]). NCCL 2.1x runs every collective without a kernel
//! of its own on `ncclKernel_SendRecv_*` (RCCL on `ncclDevKernel_Generic`): on the timeline its slice then says
//! which collective it was. The ranges are read in a pass of their own, only where a process ran such a kernel.

use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::collectives::{self, Collective, CollectiveSpans};
use cuflight_trace::model::kernel_category::is_collective_kernel;
use cuflight_trace::model::launches::Joined;
use cuflight_trace::model::ranges::Pairer;
use cuflight_trace::model::source::EventSource;
use cuflight_trace::model::trace::{Process, TraceError};
use rustc_hash::{FxHashMap, FxHashSet};

/// Each process's collective ranges, by process key: empty where no process ran a collective kernel.
pub(crate) struct Collectives(FxHashMap<u32, CollectiveSpans>);

impl Collectives {
    /// Reads the host's collective ranges of every process whose names include a collective kernel's.
    pub fn of(source: &mut EventSource) -> Result<Collectives, TraceError> {
        let with_comm: FxHashSet<u32> = source
            .processes
            .iter()
            .filter(|(_, p)| p.strings.values().any(|s| is_collective_kernel(s)))
            .map(|(&k, _)| k)
            .collect();
        let mut spans: FxHashMap<u32, CollectiveSpans> = FxHashMap::default();
        if with_comm.is_empty() {
            return Ok(Collectives(spans));
        }
        let mut pairers: FxHashMap<u32, Pairer> = FxHashMap::default();
        source.for_each(|key, p, e| {
            if !with_comm.contains(&key) {
                return;
            }
            let range = if e.kind() == Some(EventKind::Range) && !e.as_range().on_device {
                Some((e.tid, (e.start, e.end.max(e.start)), e.name))
            } else {
                pairers.entry(key).or_default().feed(e).map(|r| (r.tid, (r.start, r.end), r.name))
            };
            if let Some((tid, span, name)) = range {
                if let Some(c) = collectives::of_range(p.string(name)) {
                    spans.entry(key).or_default().add(tid, span, c, None);
                }
            }
        })?;
        spans.values_mut().for_each(CollectiveSpans::finish);
        Ok(Collectives(spans))
    }

    /// The collective kernel `e` of process `key` ran (None for any other event), `joined` to its launch call.
    pub fn of_kernel(&self, key: u32, p: &Process, e: &RawEvent, joined: Option<Joined>) -> Option<Collective> {
        let name = p.string(e.name);
        if e.kind() != Some(EventKind::Kernel) || !is_collective_kernel(name) {
            return None;
        }
        let around = joined.and_then(|j| self.0.get(&key)?.around(j.call.tid, (j.call.start, j.call.end)));
        around.or_else(|| collectives::of_kernel(name))
    }
}
