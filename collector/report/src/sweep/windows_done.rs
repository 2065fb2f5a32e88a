//! A window is done when the stream has passed its end: what it held is attributed (idle causes, its step row,
//! the copies and communication it lost) and what no later window needs is trimmed.

use super::{Piece, Sweep, Swept};
use crate::spans::{clip, merge, subtract, total, Span};
use crate::window::{HostCall, NameFlags, SetupCall, WindowView};
use cuflight_trace::model::trace::Process;

impl Sweep<'_> {
    /// Finishes the windows the stream has passed by time `t`.
    pub(super) fn advance(&mut self, p: &Process, t: u64) {
        while let Some(&(_, e)) = self.windows().get(self.done) {
            // Every event that starts by the window's end has been seen, and the call stretch in progress can
            // no longer grow into it or change its class.
            let call_settled = self.call.is_none_or(|c| c.start >= e || c.end <= t);
            if t <= e || !call_settled {
                return;
            }
            self.finish_window(p);
        }
    }

    fn finish_window(&mut self, p: &Process) {
        let k = self.done;
        let windows = self.windows();
        let (s, e) = windows[k];
        let mut loader = Vec::new();
        let mut cpu = Vec::new();
        for &((a, b), is_loader) in &self.ranges {
            if b > s && a < e {
                if is_loader { &mut loader } else { &mut cpu }.push((a.max(s), b.min(e)));
            }
        }
        // A range still open has not ended by now, past the window's end.
        for (name, start) in self.pairer.unclosed() {
            if start < e && !self.plan.step_names.contains(&name) {
                let piece = (start.max(s), e);
                if self.plan.names.has(name, NameFlags::LOADER) { &mut loader } else { &mut cpu }.push(piece);
            }
        }
        // Graph set-up in the window, a capture still open at its end included.
        let open = self.capturing.values().filter(|&&began| began < e).map(|&began| (began, e));
        let graph_setup = merge(self.graph_setup.iter().copied().chain(open).filter(|x| x.1 > s && x.0 < e).collect());
        let mut setup: Vec<SetupCall> =
            self.cuda_setup.iter().filter(|x| x.span.1 > s && x.span.0 < e).copied().collect();
        setup.sort_by_key(|x| x.span.0);
        // Merged (threads inside such calls at once: the first names the stretch), so that their ends rise too.
        let mut cuda_setup: Vec<SetupCall> = Vec::with_capacity(setup.len());
        for x in setup {
            match cuda_setup.last_mut() {
                Some(last) if x.span.0 < last.span.1 => last.span.1 = last.span.1.max(x.span.1),
                _ => cuda_setup.push(x),
            }
        }
        let mut calls: Vec<HostCall> = Vec::new();
        let mut call_before = None;
        for c in self.calls.iter().chain(self.call.as_ref()) {
            if c.end <= s {
                call_before = Some(*c);
            } else if c.start <= e {
                calls.push(*c);
            }
        }
        let first_closer = self.closers.partition_point(|c| c.start < s);
        let busy_before = self.busy.ended_before(s);
        let view = WindowView {
            p,
            span: (s, e),
            busy: self.busy.overlapping((s, e)),
            busy_before,
            enders: self.enders.between(busy_before.unwrap_or(s).min(s), e),
            kernel_busy: self.kernel.overlapping((s, e)),
            compute_busy: self.compute.overlapping((s, e)),
            memcpy_busy: self.memcpy.overlapping((s, e)),
            memset_busy: self.memset.overlapping((s, e)),
            runtime_busy: self.runtime.overlapping((s, e)),
            loader: merge(loader),
            cpu: merge(cpu),
            closers: self.closers.range(first_closer..).take_while(|c| c.start <= e).copied().collect(),
            calls,
            call_before,
            graph_setup,
            cuda_setup,
            graph_nodes: &self.graph_nodes,
        };
        let n = windows.len();
        crate::idle::attribute(&view, k, n, false, &self.step_starts, &mut self.out.idle);
        if let Some(single) = self.idle_single.as_mut() {
            crate::idle::attribute(&view, k, n, true, &self.step_starts, single);
        }
        // Rows per step; and per recorded time slice of a sampled program that marks no steps (the report
        // extrapolates from them).
        if !self.plan.no_steps || self.plan.sampling.as_ref().is_some_and(|c| c.slices) {
            let mut row = crate::steps::breakdown(&view, &self.plan.steps.names[k]);
            row.counters = self.step_counters.get(k).and_then(crate::steps::StepCounters::of);
            (row.kernels, row.eager_kernels, row.graph_replays) = self.step_work.get(k).copied().unwrap_or_default();
            self.out.rows.push(row);
        }
        let clipped = |kind: &dyn Fn(Piece) -> bool| -> Vec<Span> {
            merge(
                self.pieces.iter().filter(|p| kind(p.1)).flat_map(|p| clip(std::slice::from_ref(&p.0), s, e)).collect(),
            )
        };
        self.out.pageable.lost_ns += total(&clipped(&|p| p == Piece::Pageable));
        self.out.other_copies.lost_ns += total(&subtract(&clipped(&|p| p == Piece::OtherCopy), &view.compute_busy));
        self.out.comm_exposed_ns += total(&subtract(&clipped(&|p| matches!(p, Piece::Comm(_))), &view.compute_busy));
        // Each collective's apart (two on different streams at once count in both).
        let mut slots: Vec<u8> =
            self.pieces.iter().filter_map(|p| if let Piece::Comm(s) = p.1 { Some(s) } else { None }).collect();
        slots.sort_unstable();
        slots.dedup();
        for slot in slots {
            let exposed = total(&subtract(&clipped(&|p| p == Piece::Comm(slot)), &view.compute_busy));
            self.out.comm_by_collective.exposed_ns[usize::from(slot)] += exposed;
        }
        let idle = self.stack_reads.take_idle(e, |end| self.busy.overlapping((s, end)));
        self.out.stack_cost.exposed(idle);
        let kept = self.busy.done.len()
            + self.kernel.done.len()
            + self.compute.done.len()
            + self.memcpy.done.len()
            + self.memset.done.len()
            + self.runtime.done.len()
            + self.calls.len()
            + self.closers.len()
            + self.enders.len()
            + self.ranges.len()
            + self.pieces.len();
        self.out.peak_kept = self.out.peak_kept.max(kept);
        self.done += 1;
        self.trim();
    }

    /// The start of the first window not done (what everything kept is for).
    fn next_start(&self) -> u64 {
        self.windows().get(self.done).map_or(u64::MAX, |w| w.0)
    }

    fn trim(&mut self) {
        let t = self.next_start();
        self.busy.trim(t, true);
        for g in [&mut self.kernel, &mut self.compute, &mut self.memcpy, &mut self.memset, &mut self.runtime] {
            g.trim(t, false);
        }
        while self.calls.len() > 1 && self.calls[1].end <= t {
            self.calls.pop_front();
        }
        while self.closers.front().is_some_and(|c| c.start < t) {
            self.closers.pop_front();
        }
        self.enders.trim(t);
        self.ranges.retain(|r| r.0 .1 > t);
        self.pieces.retain(|p| p.0 .1 > t);
        self.graph_setup.retain(|x| x.1 > t);
        self.cuda_setup.retain(|x| x.span.1 > t);
        self.graph_nodes.retain(|_, (end, _)| *end > t);
    }

    /// Between windows (before the first, or after a long one), what waits is trimmed as it grows.
    pub(super) fn trim_if_long(&mut self) {
        let at = self.trim_at;
        let long = |n: usize| n >= at && n.is_power_of_two();
        if long(self.busy.done.len())
            || long(self.runtime.done.len())
            || long(self.calls.len())
            || long(self.ranges.len())
            || long(self.pieces.len())
            || long(self.closers.len())
            || long(self.enders.len())
            || long(self.cuda_setup.len())
        {
            self.trim();
        }
    }

    pub fn finish(mut self, p: &Process) -> Swept {
        if let Some(c) = self.call.take() {
            self.calls.push_back(c);
        }
        self.advance(p, u64::MAX);
        while self.done < self.windows().len() {
            self.finish_window(p);
        }
        let w = self.windows().len();
        while self.out.memory_at_end.len() < w {
            self.out.memory_at_end.push(self.live.device().min(i64::MAX as u64) as i64);
        }
        if self.single_stream {
            if let Some(single) = self.idle_single.take() {
                self.out.idle = single;
            }
        }
        (self.out.breakdown, self.out.idle_split) = self.hta.finish();
        self.out.breakdown.not_gpu_work = p.not_gpu_work;
        self.out.utilization = self.utilization.finish();
        self.out.fp32_union_ns = self.fp32_union.total();
        self.out.fusable = self.fusion.finish();
        self.out.comm_union_ns = self.comm_union.total();
        self.out.comm_overlap = self.overlap.finish();
        self.out.step_paths = self.paths.walk(p);
        self.out.gpu_metrics = std::mem::take(&mut self.counters).finish(|_| Some(p));
        self.out
    }
}
