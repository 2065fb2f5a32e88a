//! Traces recorded with `record --sample 1/N`: one step of every N recorded whole (chosen at random in each
//! block of N), only the step ranges of the others. The report analyses the recorded steps and extrapolates to
//! every step the run made, saying how: steps run and recorded, the step time of all of them against that of
//! the recorded ones (a biased sample shows there), kernel time per step with its 95% confidence interval.

use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::windows::Windows;
use serde::Serialize;

/// The agent's `Sampled` events of one process: what it recorded whole.
#[derive(Debug, Clone, Default)]
pub struct SampledSpans {
    /// N of one in N (0: not a sampled trace).
    pub one_in: u64,
    /// Recorded steps, and their indexes in the run (from 0).
    pub spans: Vec<(u64, u64)>,
    pub indexes: Vec<u64>,
    /// Recorded time slices (before the program's first step, or in a program that marks none), and how many
    /// slices the run began (the highest index seen, plus one).
    pub slices: Vec<(u64, u64)>,
    pub slices_run: u64,
}

impl SampledSpans {
    pub fn event(&mut self, e: &RawEvent) {
        if e.kind() == Some(EventKind::Sampled) && e.end >= e.start {
            let (index, one_in) = e.as_sampled();
            self.one_in = one_in;
            // Bounded by the trace itself: one event a recorded step or slice.
            if e.is_sampled_slice() {
                self.slices.push((e.start, e.end));
                self.slices_run = self.slices_run.max(index.saturating_add(1));
            } else {
                self.spans.push((e.start, e.end));
                self.indexes.push(index);
            }
        }
    }
}

/// What choosing the recorded steps left for the report to say.
#[derive(Debug, Clone, Default)]
pub struct Chosen {
    pub one_in: u64,
    /// Time slices rather than steps were recorded (the program marks no steps).
    pub slices: bool,
    /// Every step the trace holds a range of, and their durations (host, ns).
    pub steps_run: u64,
    pub step_ns_all: Vec<u64>,
    pub steps_recorded: u64,
    /// Recorded steps among the warm-up steps, left out.
    pub warmup_left_out: u64,
    /// Which steps were recorded (their indexes in the run, from 0; empty for slices).
    pub recorded: Vec<u64>,
    /// Host durations (each step's own range) of the steps past the warm-up, recorded and not (none for slices).
    pub step_ns_recorded: Vec<u64>,
    pub step_ns_unrecorded: Vec<u64>,
}

impl Chosen {
    /// How much longer, on average, the recorded steps ran than those not recorded (each by its own range, ns);
    /// None where either is missing or the recorded ones were not longer.
    pub fn recorded_steps_longer_ns(&self) -> Option<u64> {
        let mean = |v: &[u64]| (!v.is_empty()).then(|| v.iter().map(|&n| n as f64).sum::<f64>() / v.len() as f64);
        let (recorded, others) = (mean(&self.step_ns_recorded)?, mean(&self.step_ns_unrecorded)?);
        (recorded > others).then_some((recorded - others) as u64)
    }
}

/// The recorded steps of a sampled process to analyse (those outside warm-up, unless only warm-up was recorded)
/// and what to say of them; None for a trace recorded whole. `step_starts` and `step_ns_all`: every step's start
/// and host duration; `warm`: how many leading steps are warm-up.
pub fn choose(
    sampled: &SampledSpans,
    step_starts: &[u64],
    step_ns_all: Vec<u64>,
    warm: usize,
) -> Option<(Windows, Chosen)> {
    if sampled.one_in == 0 {
        return None;
    }
    if step_starts.is_empty() {
        // No steps: the time slices the agent recorded are the stretches analysed.
        if sampled.slices.is_empty() {
            return None;
        }
        let chosen = Chosen {
            one_in: sampled.one_in,
            slices: true,
            steps_run: sampled.slices_run,
            step_ns_all: Vec::new(),
            steps_recorded: sampled.slices.len() as u64,
            warmup_left_out: 0,
            recorded: Vec::new(),
            step_ns_recorded: Vec::new(),
            step_ns_unrecorded: Vec::new(),
        };
        return Some((Windows::new(sampled.slices.clone()), chosen));
    }
    // The warm-up rule read every step's host time; recorded steps among the warm-up ones are left out.
    let warm_end = if warm > 0 { step_starts.get(warm).copied().unwrap_or(u64::MAX) } else { 0 };
    let steady: Vec<(u64, u64)> = sampled.spans.iter().copied().filter(|s| s.1 >= warm_end).collect();
    let kept = if steady.is_empty() { sampled.spans.clone() } else { steady };
    // Which steps were recorded, by time (a recorded span holds the step's start): the agent's step indexes
    // need not be positions in this list.
    let mut spans = sampled.spans.clone();
    spans.sort_unstable();
    let in_recorded = |t: u64| spans.partition_point(|s| s.0 <= t).checked_sub(1).is_some_and(|i| t <= spans[i].1);
    let (recorded, unrecorded): (Vec<usize>, Vec<usize>) =
        (warm..step_starts.len().min(step_ns_all.len())).partition(|&i| in_recorded(step_starts[i]));
    let (step_ns_recorded, step_ns_unrecorded) =
        (recorded.iter().map(|&i| step_ns_all[i]).collect(), unrecorded.iter().map(|&i| step_ns_all[i]).collect());
    let chosen = Chosen {
        one_in: sampled.one_in,
        slices: false,
        steps_run: step_ns_all.len() as u64,
        step_ns_all,
        steps_recorded: sampled.spans.len() as u64,
        warmup_left_out: (sampled.spans.len() - kept.len()) as u64,
        recorded: sampled.indexes.clone(),
        step_ns_recorded,
        step_ns_unrecorded,
    };
    Some((Windows::new(kept), chosen))
}

/// The report's section on a sampled trace.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Sampling {
    /// N of `record --sample 1/N`.
    pub one_in: u64,
    /// What was sampled: "step", or "slice" (time slices, the program marking no steps); the `steps_*` fields
    /// count those.
    pub unit: &'static str,
    /// The longest span recorded (ms): a slice's length (a second unless `CUFLIGHT_SAMPLE_SLICE_MS` said).
    pub longest_ms: f64,
    /// Steps (or slices) the run made, recorded or not.
    pub steps_run: u64,
    /// Those recorded whole.
    pub steps_recorded: u64,
    /// Those analysed: recorded and not warm-up.
    pub steps_analysed: u64,
    /// Recorded steps left out as warm-up.
    pub warmup_left_out: u64,
    /// Mean step time of every step the run made, and of the steps analysed (ms).
    pub step_ms_all: f64,
    /// Mean time of the steps analysed (ms), as the step table has them (to the end of their GPU work).
    pub step_ms_analysed: f64,
    /// Mean host time (each step's own range) of the steps past the warm-up that were recorded, and of those that
    /// were not (ms; 0 when none): the latter is the program's own step time, without what recording costs a step.
    pub step_ms_recorded: f64,
    /// See `step_ms_recorded`.
    pub step_ms_unrecorded: f64,
    /// Kernel time per analysed step (ms): mean and the half-width of its 95% confidence interval (0 with one
    /// step: unknown).
    pub kernel_ms_per_step: f64,
    /// The half-width of the 95% confidence interval of `kernel_ms_per_step` (0 with one step: unknown).
    pub kernel_ms_ci95: f64,
    /// Kernel time of the whole run, extrapolated: per step times the steps run (s).
    pub kernel_s_run: f64,
    /// The steps recorded, by index in the run from 0 (the same in every process of one `record`, so a job's
    /// ranks recorded the same steps).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<u64>,
}

impl Sampling {
    pub fn new(c: &Chosen, rows: &[crate::steps::StepRow]) -> Sampling {
        let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
        let ms = |v: &[u64]| v.iter().map(|&n| n as f64 / 1e6).collect::<Vec<f64>>();
        let all: Vec<f64> = c.step_ns_all.iter().map(|&n| n as f64 / 1e6).collect();
        let durations: Vec<f64> = rows.iter().map(|r| r.duration_ns as f64 / 1e6).collect();
        let kernel: Vec<f64> = rows.iter().map(|r| r.kernel_ns as f64 / 1e6).collect();
        let kernel_mean = mean(&kernel);
        Sampling {
            one_in: c.one_in,
            unit: if c.slices { "slice" } else { "step" },
            longest_ms: rows.iter().map(|r| r.duration_ns).max().unwrap_or(0) as f64 / 1e6,
            steps_run: c.steps_run,
            steps_recorded: c.steps_recorded,
            steps_analysed: rows.len() as u64,
            warmup_left_out: c.warmup_left_out,
            step_ms_all: mean(&all),
            step_ms_analysed: mean(&durations),
            step_ms_recorded: mean(&ms(&c.step_ns_recorded)),
            step_ms_unrecorded: mean(&ms(&c.step_ns_unrecorded)),
            kernel_ms_per_step: kernel_mean,
            kernel_ms_ci95: half_width_95(&kernel, kernel_mean),
            kernel_s_run: kernel_mean * c.steps_run as f64 / 1e3,
            recorded: c.recorded.clone(),
        }
    }

    /// The lines the text report prints.
    pub fn describe(&self) -> Vec<String> {
        if self.unit == "slice" {
            return self.describe_slices();
        }
        let mut lines = vec![format!(
            "{} of {} steps recorded whole (one in {}, chosen at random in each block); {} analysed{}",
            self.steps_recorded,
            self.steps_run,
            self.one_in,
            self.steps_analysed,
            match self.warmup_left_out {
                0 => String::new(),
                n => format!(", {n} in the warm-up left out"),
            }
        )];
        lines.push(self.step_time_line());
        let ci = if self.steps_analysed > 1 {
            format!(" ± {:.3} ms (95% confidence, {} steps)", self.kernel_ms_ci95, self.steps_analysed)
        } else {
            " (one step: no confidence interval)".to_string()
        };
        lines.push(format!(
            "kernel time per step: {:.3} ms{ci}; over the {} steps run: {:.3} s (extrapolated)",
            self.kernel_ms_per_step, self.steps_run, self.kernel_s_run
        ));
        lines
    }
}

impl Sampling {
    /// The recorded steps' time against the others': recording makes a step slower (CUPTI's work on each launch
    /// and copy), so the steps not recorded give the program's own step time; recorded steps faster than the
    /// others by much are a sample that may not be typical.
    fn step_time_line(&self) -> String {
        let (recorded, others) = (self.step_ms_recorded, self.step_ms_unrecorded);
        if recorded <= 0.0 || others <= 0.0 {
            // Nothing to set them against (every step past the warm-up recorded, or none).
            return format!("step time: {:.3} ms over the steps analysed", self.step_ms_analysed);
        }
        let apart = recorded / others - 1.0;
        let why = if apart > 0.05 {
            format!(
                " (recorded steps {:.0}% slower: what recording costs a step, CUPTI's work on each of its launches and \
                 copies; {others:.3} ms is the program's own step time)",
                apart * 100.0
            )
        } else if apart < -0.1 {
            format!(
                " (recorded steps {:.0}% faster than the others: they may not be typical; sample more, e.g. a \
                 smaller N)",
                -apart * 100.0
            )
        } else {
            String::new()
        };
        format!(
            "step time (each step's own range): {recorded:.3} ms over the steps recorded, {others:.3} ms over those \
             not{why}"
        )
    }

    /// What HTA's split of the GPU's time means for a sampled recording: it spans the whole timeline, where what
    /// was not recorded reads as idle.
    pub fn breakdown_note(&self) -> String {
        format!(
            "a sampled recording: the {} {}s not recorded count as idle in this split (HTA's, over the whole \
             timeline); the GPU's utilisation is that of the {}s analysed, below",
            self.steps_run.saturating_sub(self.steps_recorded),
            self.unit,
            self.unit
        )
    }

    fn describe_slices(&self) -> Vec<String> {
        let ci = if self.steps_analysed > 1 {
            format!(" ± {:.3} ms (95% confidence, {} slices)", self.kernel_ms_ci95, self.steps_analysed)
        } else {
            " (one slice: no confidence interval)".to_string()
        };
        vec![
            format!(
                "{} of {} time slices of {:.0} ms recorded whole (one in {}, chosen at random in each block): the \
                 program marks no steps (step-like NVTX ranges or cuflight.step() would sample whole steps)",
                self.steps_recorded, self.steps_run, self.longest_ms, self.one_in
            ),
            format!(
                "kernel time per slice: {:.3} ms{ci}; over the {} slices run: {:.3} s (extrapolated)",
                self.kernel_ms_per_step, self.steps_run, self.kernel_s_run
            ),
        ]
    }
}

/// Half the width of the 95% confidence interval of the mean of `v` (Student's t for small samples).
fn half_width_95(v: &[f64], mean: f64) -> f64 {
    let n = v.len();
    if n < 2 {
        return 0.0;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    // t(0.975, n-1) for 1..=30 degrees of freedom, then the normal 1.96.
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    let t = T.get(n - 2).copied().unwrap_or(1.96);
    t * (var / n as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_narrows_with_more_steps() {
        let few = [1.0, 1.2, 0.8];
        let many: Vec<f64> = few.iter().cycle().take(30).copied().collect();
        let (a, b) = (half_width_95(&few, 1.0), half_width_95(&many, 1.0));
        assert!(a > b && b > 0.0, "{a} {b}");
        assert!((a - 4.303 * (0.04f64 / 3.0).sqrt()).abs() < 1e-9);
        assert_eq!(half_width_95(&[2.0], 2.0), 0.0);
    }

    /// Recorded steps are told against the steps not recorded, by their own ranges both (the step table's
    /// durations run to the end of their GPU work, which unrecorded steps do not show): slower by more than 5% is
    /// recording's cost, faster by more than 10% a sample that may not be typical, and the steps' indexes play no
    /// part (a recorded span holds the step's start).
    #[test]
    fn recorded_steps_are_told_against_those_not_recorded() {
        // Ten steps of 10 ms a second apart; steps 3 and 7 recorded (spans a little wider than their ranges).
        let starts: Vec<u64> = (0..10).map(|i| i * 1_000_000_000).collect();
        let mut host = vec![10_000_000u64; 10];
        let sampled = |recorded_ns: u64, host: &mut Vec<u64>| {
            host[3] = recorded_ns;
            host[7] = recorded_ns;
            let mut s = SampledSpans { one_in: 5, ..Default::default() };
            for i in [7usize, 3] {
                s.spans.push((starts[i] - 10, starts[i] + recorded_ns + 1_000_000));
                s.indexes.push(i as u64 + 100);
            }
            s
        };
        let line = |recorded_ns: u64, host: &mut Vec<u64>, warm: usize| {
            let s = sampled(recorded_ns, host);
            let (_, c) = choose(&s, &starts, host.clone(), warm).unwrap();
            assert_eq!((c.step_ns_recorded.len(), c.step_ns_unrecorded.len()), (2, 8 - warm));
            Sampling::new(&c, &[]).step_time_line()
        };
        let slow = line(12_000_000, &mut host, 0);
        let said =
            "12.000 ms over the steps recorded, 10.000 ms over those not (recorded steps 20% slower: what recording";
        assert!(slow.contains(said), "{slow}");
        assert!(!line(10_400_000, &mut host, 0).contains('%'));
        let fast = line(8_000_000, &mut host, 0);
        assert!(fast.contains("20% faster than the others: they may not be typical"), "{fast}");
        // Warm-up steps are no one's step time: a slow first step is left out of the others.
        host[0] = 500_000_000;
        assert!(!line(10_000_000, &mut host, 1).contains('%'));
    }
}
