//! The steps' table of a terminal report: past a dozen steps the first three and the nine slowest (one rule,
//! which the HTML report shares), under a title with the steps' spread.

use super::findings::ms;
use super::steps::{StepRow, StepSource};
use super::ProcessReport;
use cuflight_analysis::table::Table;

fn pct(part: u64, whole: u64) -> String {
    super::findings::percent(part, whole).map_or("-".into(), |p| format!("{p:.1}%"))
}

/// Rows a step table shows at most, and how many of them are the run's first steps.
const SHOWN_STEPS: usize = 12;
const FIRST_STEPS: usize = 3;

/// Steps the text and HTML show whole: all of them up to [`SHOWN_STEPS`], else the first [`FIRST_STEPS`] (how the
/// run began) and the slowest of the rest (what a user looks for in a long run), in step order.
pub(crate) fn shown_steps(steps: &[StepRow]) -> Vec<usize> {
    if steps.len() <= SHOWN_STEPS {
        return (0..steps.len()).collect();
    }
    let mut rest: Vec<usize> = (FIRST_STEPS..steps.len()).collect();
    rest.sort_by_key(|&i| std::cmp::Reverse(steps[i].duration_ns));
    rest.truncate(SHOWN_STEPS - FIRST_STEPS);
    rest.sort_unstable();
    (0..FIRST_STEPS).chain(rest).collect()
}

/// " (median M, p90 P, slowest S)" of the steps' times, where there are more steps than the table shows.
pub(crate) fn step_spread(p: &ProcessReport) -> String {
    match &p.step_spread {
        Some(s) if p.steps.len() > SHOWN_STEPS => {
            format!(" (median {}, p90 {}, slowest {})", ms(s.median_ns), ms(s.p90_ns), ms(s.slowest_ns))
        }
        _ => String::new(),
    }
}

/// A step's row; with `counters`, its SM, Tensor Core and DRAM shares of peak before its name.
fn step_cells(r: &StepRow, counters: bool) -> Vec<String> {
    let d = r.duration_ns;
    let share = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}%"));
    let c = r.counters;
    let counted = [c.and_then(|c| c.sm_active_pct), c.and_then(|c| c.tensor_active_pct), c.and_then(|c| c.dram_pct)];
    let counted = counted.into_iter().map(share).filter(|_| counters);
    let mut cells = vec![
        format!("{:.3}", d as f64 / 1e6),
        pct(r.kernel_ns, d),
        pct(r.memcpy_ns, d),
        pct(r.memset_ns, d),
        pct(r.runtime_ns, d),
        pct(r.dataloader_ns, d),
        pct(r.cpu_exec_ns, d),
        pct(r.other_ns, d),
        format!("{:.1}%", r.gpu_utilization * 100.0),
    ];
    cells.extend(counted);
    cells.push(r.name.clone());
    cells
}

/// The steps' table: the first ones, then (in a long run) the slowest, and the total.
pub(crate) fn step_table(out: &mut String, p: &ProcessReport) {
    let Some(t) = &p.step_total else {
        return;
    };
    let source = match p.step_source {
        StepSource::Option => "--step",
        StepSource::ProfilerStep => "ProfilerStep annotations",
        StepSource::Nvtx => "NVTX ranges",
        StepSource::Pattern => "the repeating launch pattern",
        StepSource::None if p.sampling.as_ref().is_some_and(|s| s.unit == "slice") => {
            "the time slices `record --sample` recorded"
        }
        StepSource::None => "none",
    };
    let counters = t.counters.is_some();
    let mut table = Table::new(
        format!(
            "  Steps (from {source}): {}, mean {}{}, GPU utilisation {:.1}%",
            p.steps.len(),
            ms(t.duration_ns / p.steps.len().max(1) as u64),
            step_spread(p),
            t.gpu_utilization * 100.0
        ),
        &[
            &["Time (ms)", "Kernel", "Memcpy", "Memset", "Runtime", "DataLoader", "CPU Exec", "Other", "GPU util"][..],
            if counters { &["SM", "Tensor", "DRAM"][..] } else { &[][..] },
            &["Step"][..],
        ]
        .concat(),
    );
    let long = p.steps.len() > SHOWN_STEPS;
    for i in shown_steps(&p.steps) {
        let mut cells = step_cells(&p.steps[i], counters);
        if long && i >= FIRST_STEPS {
            *cells.last_mut().unwrap() += " (among the slowest)";
        }
        table.row(cells);
        // One gap: between how the run began and the slowest steps after (each marked so, in step order).
        if long && i + 1 == FIRST_STEPS {
            table.row(vec!["...".to_string(); if counters { 13 } else { 10 }]);
        }
    }
    table.row(step_cells(t, counters));
    table.render(out);
}
