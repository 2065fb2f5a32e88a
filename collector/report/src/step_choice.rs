//! Which steps a report analyses: the steps a filter chose (`--filter-nvtx`, `--filter-time`), those a sampled
//! trace recorded (`record --sample`), and the steady ones after warm-up. Each keeps or drops a plan's steps
//! ([`Plan`]) before the sweep.

use super::plan::Plan;
use super::spans::Span;
use super::steps::{StepSource, Steps};
use cuflight_trace::model::windows::Windows;
use rustc_hash::FxHashMap;

impl Plan {
    /// Keeps the steps that start inside `chosen` (`--filter-nvtx`, `--filter-time`), warm-up or not (they were
    /// chosen); without steps, the chosen stretches of the trace become the windows. Returns (kept, there were).
    pub fn keep_steps_in(&mut self, chosen: &Windows) -> (usize, usize) {
        (self.warmup.included, self.warmup.filtered) = (true, true);
        let total = self.steps.windows.len();
        if self.no_steps {
            let (first, last) = self.steps.windows.first().copied().unwrap_or_default();
            let spans: Vec<Span> =
                chosen.spans.iter().map(|&(s, e)| (s.max(first), e.min(last))).filter(|(s, e)| s < e).collect();
            self.steps.names = (1..=spans.len()).map(|i| format!("stretch {i}")).collect();
            self.steps.windows = spans;
            return (self.steps.windows.len(), total);
        }
        let with_host = self.steps.host.len() == total;
        let keep: Vec<bool> = (0..total)
            .map(|i| chosen.holds(if with_host { self.steps.host[i].start } else { self.steps.windows[i].0 }))
            .collect();
        self.keep_only(&keep);
        (self.steps.windows.len(), total)
    }

    /// `record --sample`: keeps the recorded steps (warm-up apart: the other steps hold no GPU work) and notes
    /// what to say of them; false for a trace recorded whole.
    pub fn keep_sampled_steps(&mut self) -> bool {
        // A program that marked no step range was sampled in time slices: steps found in its launch pattern are
        // not its own and lie only inside the recorded slices, so the slices are the stretches analysed.
        if self.sampled.spans.is_empty() && !self.sampled.slices.is_empty() && !self.no_steps {
            let (first, last) = self.clock.span.unwrap_or_default();
            self.no_steps = true;
            self.steps = Steps {
                source: StepSource::None,
                host: Vec::new(),
                windows: vec![(first, last)],
                names: vec!["whole trace".into()],
            };
            self.warmup = Default::default();
        }
        let starts: Vec<u64> =
            if self.no_steps { Vec::new() } else { self.steps.windows.iter().map(|w| w.0).collect() };
        // Host time where the steps are ranges (each step's own range, whether recorded or not).
        let step_ns: Vec<u64> = if self.steps.host.len() == starts.len() {
            self.steps.host.iter().map(|r| r.end.saturating_sub(r.start)).collect()
        } else {
            self.steps.windows.iter().map(|&(s, e)| e.saturating_sub(s)).collect()
        };
        let warm = self.warmup.steps.min(starts.len());
        let Some((kept, chosen)) = super::sampled::choose(&self.sampled, &starts, step_ns, warm) else { return false };
        self.keep_steps_in(&kept);
        // Warm-up steps were left out above, not analysed where a filter chose them; and a recorded step running
        // a kernel for the first time in the trace proves nothing (the steps between were not recorded).
        (self.warmup.included, self.warmup.filtered) = (false, false);
        self.warmup.later.clear();
        self.sampling = Some(chosen);
        true
    }

    /// Keeps the steps whose `keep` is true.
    fn keep_only(&mut self, keep: &[bool]) {
        fn only<T>(v: &mut Vec<T>, keep: &[bool]) {
            *v = std::mem::take(v).into_iter().zip(keep).filter(|(_, &k)| k).map(|(x, _)| x).collect();
        }
        let with_host = self.steps.host.len() == self.steps.windows.len();
        only(&mut self.steps.windows, keep);
        only(&mut self.steps.names, keep);
        if with_host {
            only(&mut self.steps.host, keep);
        }
    }

    /// Whether the trace holds 1 in 50 or fewer of the CUDA calls its correlation ids number
    /// ([`Plan::api_id_coverage`]): sampled or filtered, so GPU work, launches and synchronisations are missing.
    pub fn calls_sampled(&self) -> bool {
        self.api_id_coverage.is_some_and(|c| c < 0.02)
    }

    /// Leaves the warm-up steps, and the later steps that paid for first-time work again (a recompilation), out of
    /// the steps every analysis covers (the report's default): one-off costs, each named with its own.
    pub fn leave_out_warmup(&mut self) {
        if self.no_steps {
            return;
        }
        let k = self.warmup.steps.min(self.steps.windows.len());
        self.steps.host.drain(..k.min(self.steps.host.len()));
        self.steps.windows.drain(..k);
        self.steps.names.drain(..k);
        if !self.warmup.later.is_empty() {
            let later: Vec<u64> = self.warmup.later.iter().map(|f| f.start_ns).collect();
            let keep: Vec<bool> = self.steps.windows.iter().map(|w| !later.contains(&w.0)).collect();
            self.keep_only(&keep);
        }
    }
}

/// `--filter-nvtx`/`--filter-time` on one trace's plans: each process keeps the steps that start inside the
/// stretches `filter` chooses in `source` ([`Plan::keep_steps_in`]); processes left with none are dropped, and a
/// trace where none is left is an error. Returns what each process kept, in words, for its report.
pub fn choose(
    plans: &mut FxHashMap<u32, Plan>,
    filter: &cuflight_trace::model::filter::Filter,
    source: &mut cuflight_trace::model::source::EventSource,
    file: &str,
) -> Result<FxHashMap<u32, String>, super::ReportError> {
    let stretches = filter.windows(source).map_err(|e| super::ReportError::Filter(file.to_string(), e))?;
    let mut said = FxHashMap::default();
    for (&k, p) in plans.iter_mut() {
        // A sampled trace: among the steps it recorded whole (the others hold no GPU work).
        p.keep_sampled_steps();
        let (kept, of) = p.keep_steps_in(&stretches);
        let what = if p.no_steps { "stretches" } else { "steps" };
        said.insert(k, format!("the {kept} of {of} {what} that start inside {}", filter.kept(&stretches)));
    }
    if plans.values().all(|p| p.steps.windows.is_empty()) {
        return Err(super::ReportError::NoStepChosen(file.to_string(), filter.kept(&stretches)));
    }
    plans.retain(|_, p| !p.steps.windows.is_empty());
    Ok(said)
}
