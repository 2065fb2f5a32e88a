//! The framework operators open on each launching thread as the sweep goes (torch.profiler's `cpu_op`s), so that
//! a launch can say which outermost operator issued it: the host's time in that operator before the launch is the
//! operator's own work (its dispatch, an allocator growing), not the step's input being prepared.

use cuflight_trace::model::range_roles;
use rustc_hash::FxHashMap;

/// An operator's start, end and name.
type Open = (u64, u64, u32);

/// Deeper than this, a thread's operators are not kept (ATen nests a few levels: aten::ones, aten::empty, ...).
const MAX_DEPTH: usize = 64;

#[derive(Default)]
pub(super) struct OpenOperators {
    by_thread: FxHashMap<u32, Vec<Open>>,
}

impl OpenOperators {
    /// An imported host range of `category` on a launching thread, in start order.
    pub fn range(&mut self, tid: u32, category: &str, (start, end): (u64, u64), name: u32) {
        if !range_roles::is_operator_category(category) || end <= start {
            return;
        }
        let open = self.by_thread.entry(tid).or_default();
        open.retain(|o| o.1 > start);
        if open.len() < MAX_DEPTH {
            open.push((start, end, name));
        }
    }

    /// The outermost operator on `tid` around the call `(start, end)` (its start and name), if one is open.
    pub fn around(&mut self, tid: u32, (start, end): (u64, u64)) -> Option<(u64, u32)> {
        let open = self.by_thread.get_mut(&tid)?;
        open.retain(|o| o.1 > start);
        open.iter().find(|o| o.0 <= start && o.1 >= end).map(|o| (o.0, o.2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_names_the_outermost_operator_around_it() {
        let mut ops = OpenOperators::default();
        ops.range(1, "cpu_op", (570, 2815), 10); // aten::ones
        ops.range(1, "cpu_op", (574, 2761), 11); // aten::empty, ended before the launch
        ops.range(1, "cpu_op", (2764, 2814), 12); // aten::fill_
        ops.range(1, "user_annotation", (0, 3154), 13); // annotations are no operators
        assert_eq!(ops.around(1, (2775, 2811)), Some((570, 10)));
        assert_eq!(ops.around(2, (2775, 2811)), None, "another thread's");
        assert_eq!(ops.around(1, (2900, 2910)), None, "all ended");
    }
}
