//! What part of a trace `stats` summarises in the stretches a filter chose ([`Windows`]): the events that start
//! inside them. Device work counts where the call that launched it started (the kernels a `forward` range launched
//! are its kernels, though the GPU runs them after the range has closed on the host); work whose launch is not in
//! the trace, by its own start. Facts that are not timed events (devices, names, clocks) always pass.

use cuflight_format::{EventKind, RawEvent};
pub use cuflight_trace::model::filter::{Filter, FilterError};
use cuflight_trace::model::launches::LaunchJoin;
use cuflight_trace::model::trace::Process;
pub use cuflight_trace::model::windows::Windows;
use rustc_hash::FxHashMap;

/// [`Windows`] over a pass in time order: device work by its launching call's start.
pub struct Kept<'w> {
    windows: &'w Windows,
    joins: FxHashMap<u32, LaunchJoin>,
}

impl<'w> Kept<'w> {
    pub fn new(windows: &'w Windows) -> Kept<'w> {
        Kept { windows, joins: FxHashMap::default() }
    }

    /// Whether event `e` of process `key` is summarised.
    pub fn keeps(&mut self, key: u32, p: &Process, e: &RawEvent) -> bool {
        match e.kind() {
            Some(EventKind::Api) => {
                self.joins.entry(key).or_default().api(p, e);
                self.windows.holds(e.start)
            }
            Some(EventKind::Kernel | EventKind::Memcpy | EventKind::Memset) => {
                let launched = self.joins.entry(key).or_default().work(e).map_or(e.start, |j| j.call.start);
                self.windows.holds(launched)
            }
            _ => self.windows.keeps(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuflight_format::EventKind;

    /// A kernel counts where its launch started: inside the stretch though it ran after, outside though it ran
    /// inside; work whose launch is not in the trace, by its own start.
    #[test]
    fn device_work_counts_where_it_was_launched() {
        let mut p = Process::default();
        p.strings.insert(1, "cudaLaunchKernel".into());
        let w = Windows::new(vec![(100, 200)]);
        let mut kept = Kept::new(&w);
        let call = |t, corr| RawEvent { name: 1, correlation: corr, ..RawEvent::new(EventKind::Api, 7, t, t + 5) };
        let kernel = |t, corr| RawEvent { correlation: corr, ..RawEvent::new(EventKind::Kernel, 0, t, t + 50) };
        let mut keeps = |e: RawEvent| kept.keeps(3, &p, &e);
        assert!(!keeps(call(50, 1)) && keeps(call(150, 2)));
        assert!(!keeps(kernel(160, 1)), "launched before the stretch");
        assert!(keeps(kernel(300, 2)), "launched inside, run after");
        assert!(keeps(kernel(120, 9)) && !keeps(kernel(250, 9)), "no launch: its own start");
    }
}
