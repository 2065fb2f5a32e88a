//! `nvtx_pushpop_trace`, as `nsys stats` defines it: every NVTX push/pop range with its place in its thread's
//! stack: level (0 outermost), parent, the ids of the stack down to it, how many ranges it holds directly and
//! their time, and its own time without them. nsys nests ranges by containment on a thread whatever their domain
//! and names them `domain:name` (an empty domain for the default one); so does this. Ranges are numbered in the
//! order they open.
//!
//! Streamed: a thread's ranges are held until its outermost open range closes, then written in start order, so
//! memory holds the open nest of each thread, not the trace. Rows are in start order within each outermost range
//! (nsys sorts the whole table by start).

use super::row_stream::{Cell, Column};
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;

pub const COLUMNS: &[Column] = &[
    ("Start (ns)", "start_ns"),
    ("End (ns)", "end_ns"),
    ("Duration (ns)", "duration_ns"),
    ("DurChild (ns)", "child_ns"),
    ("DurNonChild (ns)", "own_ns"),
    ("Name", "name"),
    ("PID", "pid"),
    ("TID", "tid"),
    ("Lvl", "level"),
    ("NumChild", "children"),
    ("RangeId", "range_id"),
    ("ParentId", "parent_id"),
    ("RangeStack", "range_stack"),
    ("NameTree", "name_tree"),
];

struct Open {
    id: u64,
    domain: u64,
    name: String,
    start: u64,
    children: u64,
    child_ns: u64,
}

/// A closed range, waiting for its outermost range to close.
struct Closed {
    start: u64,
    end: u64,
    child_ns: u64,
    children: u64,
    name: String,
    level: usize,
    id: u64,
    parent: Option<u64>,
    stack: String,
}

#[derive(Default)]
struct Thread {
    open: Vec<Open>,
    closed: Vec<Closed>,
}

#[derive(Default)]
pub struct PushPopTrace {
    threads: FxHashMap<(u32, u32), Thread>,
    next_id: u64,
}

impl PushPopTrace {
    /// Feeds an event of process `key`; once a thread's outermost range closes, calls `row` with each of the
    /// ranges it held, in start order: its start (for a filter) and its cells, times from `origin`.
    pub fn feed(&mut self, key: u32, p: &Process, e: &RawEvent, origin: u64, mut row: impl FnMut(u64, &[Cell])) {
        match e.kind() {
            Some(EventKind::NvtxPush) => {
                self.next_id += 1;
                let domain = e.as_nvtx().domain;
                let name = match domain {
                    0 => format!(":{}", p.string(e.name)),
                    d => format!("{}:{}", p.nvtx_domain(d), p.string(e.name)),
                };
                let open = Open { id: self.next_id, domain, name, start: e.start, children: 0, child_ns: 0 };
                self.threads.entry((key, e.tid)).or_default().open.push(open);
            }
            Some(EventKind::NvtxPop) => {
                let Some(t) = self.threads.get_mut(&(key, e.tid)) else { return };
                // The innermost open range of the pop's domain (a pop with none open closes nothing).
                let Some(at) = t.open.iter().rposition(|o| o.domain == e.as_nvtx().domain) else { return };
                let stack: String = t.open[..=at].iter().map(|o| format!(":{}", o.id)).collect();
                let o = t.open.remove(at);
                let duration = e.start.saturating_sub(o.start);
                let parent = at.checked_sub(1).map(|i| &mut t.open[i]);
                let parent_id = parent.map(|p| {
                    p.children += 1;
                    p.child_ns += duration;
                    p.id
                });
                t.closed.push(Closed {
                    start: o.start,
                    end: e.start.max(o.start),
                    child_ns: o.child_ns,
                    children: o.children,
                    name: o.name,
                    level: at,
                    id: o.id,
                    parent: parent_id,
                    stack,
                });
                if t.open.is_empty() {
                    let mut closed = std::mem::take(&mut t.closed);
                    closed.sort_by_key(|c| (c.start, c.level));
                    for c in &closed {
                        let tree = format!("{}{}", "--".repeat(c.level), c.name);
                        row(
                            c.start,
                            &[
                                Cell::Int(c.start.saturating_sub(origin)),
                                Cell::Int(c.end.saturating_sub(origin)),
                                Cell::Int(c.end - c.start),
                                Cell::Int(c.child_ns),
                                Cell::Int((c.end - c.start).saturating_sub(c.child_ns)),
                                Cell::Text(&c.name),
                                Cell::Int(p.info.pid as u64),
                                Cell::Int(e.tid as u64),
                                Cell::Int(c.level as u64),
                                Cell::Int(c.children),
                                Cell::Int(c.id),
                                c.parent.map_or(Cell::Empty, Cell::Int),
                                Cell::Text(&c.stack),
                                Cell::Owned(tree),
                            ],
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step holding forward (holding a matmul) and backward: levels, parents, children and their time, the
    /// stack's ids, and rows in start order once the step closes.
    #[test]
    fn a_nest_of_ranges_comes_out_in_start_order_with_its_shape() {
        let mut p = Process::default();
        for (id, s) in [(1, "step"), (2, "forward"), (3, "matmul"), (4, "backward")] {
            p.strings.insert(id, s.to_string());
        }
        let push = |t, name| RawEvent { name, ..RawEvent::new(EventKind::NvtxPush, 7, t, t) };
        let pop = |t| RawEvent::new(EventKind::NvtxPop, 7, t, t);
        let mut trace = PushPopTrace::default();
        let mut rows: Vec<Vec<String>> = Vec::new();
        let events = [push(0, 1), push(10, 2), push(12, 3), pop(20), pop(40), push(50, 4), pop(90), pop(100)];
        for e in &events {
            trace.feed(1, &p, e, 0, |_, cells| {
                rows.push(
                    cells
                        .iter()
                        .map(|c| match c {
                            Cell::Int(n) => n.to_string(),
                            Cell::Text(s) => s.to_string(),
                            Cell::Owned(s) => s.clone(),
                            Cell::Empty => "-".into(),
                        })
                        .collect(),
                )
            });
            if e.start < 100 {
                assert!(rows.is_empty(), "held until the step closes");
            }
        }
        let got: Vec<String> = rows.iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            got,
            [
                "0 100 100 70 30 :step 0 7 0 2 1 - :1 :step",
                "10 40 30 8 22 :forward 0 7 1 1 2 1 :1:2 --:forward",
                "12 20 8 0 8 :matmul 0 7 2 0 3 2 :1:2:3 ----:matmul",
                "50 90 40 0 40 :backward 0 7 1 0 4 1 :1:4 --:backward",
            ]
        );
    }
}
