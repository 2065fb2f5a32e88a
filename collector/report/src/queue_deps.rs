//! What queued GPU work may have waited on, tracked as the sweep goes: the event waits a launching thread put on
//! a stream (`cudaStreamWaitEvent` before a launch into it), and the op that ended each busy stretch (what ran
//! last before a gap).

use super::window::Ender;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Event waits remembered per thread: a launch is matched against those since the previous launch into its
/// stream, which is recent (ops arrive soon after their launch), so a short history does.
const WAITS_KEPT: usize = 256;

#[derive(Default)]
pub struct StreamWaits {
    /// Per thread: start times of its recent stream-wait calls, in order.
    by_thread: FxHashMap<u32, VecDeque<u64>>,
    /// ... and of its host functions queued in streams (`cudaLaunchHostFunc`).
    host_fns: FxHashMap<u32, VecDeque<u64>>,
    /// Per stream: the launch time of the latest op seen on it.
    last_launch: FxHashMap<u64, u64>,
}

impl StreamWaits {
    /// Thread `tid` called `cudaStreamWaitEvent` (or `cuStreamWaitEvent`) at `t`.
    pub fn wait_call(&mut self, tid: u32, t: u64) {
        remember(self.by_thread.entry(tid).or_default(), t);
    }

    /// Thread `tid` queued a host function at `t`.
    pub fn host_fn_call(&mut self, tid: u32, t: u64) {
        remember(self.host_fns.entry(tid).or_default(), t);
    }

    /// An op on `stream` launched by thread `tid` at `t` (ops come in start order, which is launch order within a
    /// stream): whether that thread made a stream wait, and whether it queued a host function, since the
    /// previous launch into the stream.
    pub fn launched(&mut self, stream: u64, tid: u32, t: u64) -> (bool, bool) {
        let since = self.last_launch.insert(stream, t).unwrap_or(0);
        let between = |calls: &FxHashMap<u32, VecDeque<u64>>| {
            calls.get(&tid).is_some_and(|v| v.get(v.partition_point(|&w| w < since)).is_some_and(|&w| w <= t))
        };
        (between(&self.by_thread), between(&self.host_fns))
    }
}

fn remember(v: &mut VecDeque<u64>, t: u64) {
    if v.len() == WAITS_KEPT {
        v.pop_front();
    }
    v.push_back(t);
}

/// The op that ends each busy stretch, as stretches close.
#[derive(Default)]
pub struct Enders {
    current: Option<Ender>,
    done: VecDeque<Ender>,
}

impl Enders {
    /// An op that ends at `x.end`; `new_stretch`: it began a new busy stretch.
    pub fn op(&mut self, new_stretch: bool, x: Ender) {
        match self.current.as_mut() {
            Some(c) if !new_stretch => {
                if x.end >= c.end {
                    *c = x;
                }
            }
            Some(c) => {
                self.done.push_back(*c);
                self.current = Some(x);
            }
            None => self.current = Some(x),
        }
    }

    /// The enders with an end in `[from, to]`, by end.
    pub fn between(&self, from: u64, to: u64) -> Vec<Ender> {
        let first = self.done.partition_point(|x| x.end < from);
        let done = self.done.range(first..).take_while(|x| x.end <= to).copied();
        done.chain(self.current.filter(|c| c.end >= from && c.end <= to)).collect()
    }

    /// Forgets the enders before `t`, but the last one ending at or before it.
    pub fn trim(&mut self, t: u64) {
        while self.done.get(1).is_some_and(|x| x.end <= t) {
            self.done.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.done.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_counts_for_the_next_launch_into_a_stream_only() {
        let mut w = StreamWaits::default();
        assert!(!w.launched(7, 1, 100).0, "no wait yet");
        w.wait_call(1, 150);
        assert!(!w.launched(8, 2, 160).0, "another thread's wait");
        assert_eq!(w.launched(7, 1, 170), (true, false), "the wait since the previous launch into stream 7");
        assert!(!w.launched(7, 1, 180).0, "already used by the launch before");
        assert!(w.launched(9, 1, 190).0, "stream 9's previous launch is older than the wait");
        w.host_fn_call(1, 200);
        assert_eq!(w.launched(7, 1, 210), (false, true));
    }

    #[test]
    fn the_last_op_to_end_ends_a_stretch() {
        let mut e = Enders::default();
        e.op(true, Ender { end: 50, stream: 1, name: 1 });
        e.op(false, Ender { end: 40, stream: 2, name: 2 });
        e.op(true, Ender { end: 90, stream: 3, name: 3 });
        let got: Vec<u64> = e.between(0, 100).iter().map(|x| x.stream).collect();
        assert_eq!(got, vec![1, 3]);
        e.trim(95);
        assert_eq!(e.between(0, 100).len(), 2, "the last before is kept");
    }
}
