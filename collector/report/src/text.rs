//! The terminal rendering of a report: the verdict first, then the findings with their evidence and fix, then
//! per process the breakdowns, the steps and the top kernels.

use super::findings::{counted, ms, Finding};
use super::short_names::short_name;
use super::{ProcessReport, Report};
use cuflight_analysis::table::Table;
use cuflight_trace::model::cuda_errors::ErrorClass;

pub fn who(f: &Finding) -> String {
    let who = f.rank.map_or(format!("pid {}", f.pid), |r| format!("rank {r} (pid {})", f.pid));
    f.trace.as_ref().map_or(who.clone(), |t| format!("{who} in {t}"))
}

fn finding(out: &mut String, i: usize, f: &Finding, origin: u64, share_of: &str) {
    let cost = if f.time_lost_ns > 0 {
        format!("{:.1}% of {share_of}, {} lost", f.share * 100.0, ms(f.time_lost_ns))
    } else {
        String::new()
    };
    out.push_str(&format!("\n {}. [{}] {}  {cost}  {}\n", i + 1, severity(f.severity), f.kind, who(f)));
    out.push_str(&format!("    {}\n", f.summary));
    let ev = &f.evidence;
    for fact in &ev.facts {
        out.push_str(&format!("    - {fact}\n"));
    }
    if !ev.steps.is_empty() {
        let s: Vec<String> = ev.steps.iter().take(3).map(|s| format!("{} {}", s.name, ms(s.lost_ns))).collect();
        out.push_str(&format!("    - worst steps: {}\n", s.join(", ")));
    }
    let s: Vec<String> =
        shown_calls(f).take(3).map(|c| format!("{} x{} ({})", c.name, c.count, ms(c.total_ns))).collect();
    if !s.is_empty() {
        out.push_str(&format!("    - {}: {}\n", calls_label(f), s.join(", ")));
    }
    if f.kind != "hot_kernels" {
        for k in ev.kernels.iter().take(3) {
            out.push_str(&format!("    - kernel {} x{} {}\n", short_name(&k.name), k.count, ms(k.total_ns)));
        }
        if let Some(e) = ev.examples.first() {
            let at = super::run::relative(e.start_ns, origin);
            out.push_str(&format!("    - longest: {} at {at}, {}\n", e.what, ms(e.duration_ns)));
        }
    }
    for s in f.sources.iter().take(3) {
        let code = super::sources::source_text(&s.file, s.line).map_or(String::new(), |c| format!(": {c}"));
        out.push_str(&format!(
            "    - at {}{code} ({}, {})\n",
            s.location(true),
            counted(s.count, "call", "calls"),
            ms(s.ns)
        ));
    }
    out.push_str(&format!("    fix: {}\n", f.fix));
}

/// The calls a finding names, less those whose time reads 0.00 ms: CloverLeaf's launch_bound, 5.82 ms lost, listed
/// "cudaMalloc x8 (0.00 ms), cudaLaunchKernel x2 (0.00 ms)", which says nothing of where its time went. JSON keeps
/// them all.
pub fn shown_calls(f: &Finding) -> impl Iterator<Item = &super::findings::CallRow> {
    f.evidence.api_calls.iter().filter(|c| c.total_ns >= 5_000)
}

/// Idle-time findings list the CUDA calls the idle time happened in or right after; the others, the calls found.
pub fn calls_label(f: &Finding) -> &'static str {
    match f.kind {
        "data_loading" | "launch_bound" | "cpu_bound" => "idle in or right after",
        "sync_stall" | "allocator_churn" => "calls",
        "cross_stream_wait" | "collective_wait" | "graph_wait" | "host_function_wait" | "unseen_gpu_work" => "waits",
        "host_polling" => "polling with",
        _ => "calls",
    }
}

pub fn severity(s: super::Severity) -> &'static str {
    match s {
        super::Severity::Info => "info",
        super::Severity::Low => "low",
        super::Severity::Medium => "medium",
        super::Severity::High => "high",
    }
}

fn process(out: &mut String, p: &ProcessReport) {
    out.push_str(&format!("\n== {} from {}\n", p.title(), p.file));
    // The section's prose up to its tables, in the terms of the platform it ran on (the names the trace holds
    // come after it).
    let prose = out.len();
    for (label, value) in p.run.facts() {
        out.push_str(&format!("  {label}: {value}\n"));
    }
    gpu_time_lines(out, p);
    if let Some(c) = &p.critical_path {
        path_lines(out, &critical_path_line(c), c);
        if let Some(s) = &p.slow_step_path {
            path_lines(out, &slow_path_line(s, c), &s.path);
        }
    }
    if let Some(w) = warmup_line(&p.warmup) {
        out.push_str(&format!("  {w}\n"));
    }
    if let Some(l) = first_runs_line(&p.warmup) {
        out.push_str(&format!("  {l}\n"));
    }
    // What the Python stacks cost (above the threshold the warnings say so, with the switch).
    let cheap =
        |s: &super::stack_cost::StackCost| s.in_steps > 0 && s.exposed_share_of_steps <= super::stack_cost::MAX_SHARE;
    if let Some(s) = p.python_stacks.filter(cheap) {
        out.push_str(&format!(
            "  Python stacks: {} read in steps, {:.1} us a step, {:.1} us of it with the GPU idle ({:.2}% of step time)\n",
            s.in_steps,
            s.per_step_ns as f64 / 1e3,
            s.exposed_per_step_ns() as f64 / 1e3,
            s.exposed_share_of_steps * 100.0
        ));
    }
    if let Some(f) = &p.filtered {
        out.push_str(&format!("  Filtered: analysed {f}\n"));
    }
    if let Some(s) = &p.sampling {
        for line in s.describe() {
            out.push_str(&format!("  Sampled: {line}\n"));
        }
    }
    if p.run.rocm {
        let said = p.run.said(&out[prose..]);
        out.truncate(prose);
        out.push_str(&said);
    }
    super::text_steps::step_table(out, p);
    if let Some(it) = &p.iterations {
        iterations(out, it);
    }
    kernel_tables(out, p);
    let failed: Vec<_> = p.cuda_errors.iter().filter(|r| r.class != ErrorClass::Expected).collect();
    if !failed.is_empty() {
        let title = "  CUDA calls that failed (`cuflight stats --report cuda_api_errors` lists every return code)";
        let mut t = Table::new(p.run.said(title), &["Count", "First at", "Class", "Error", "API"]);
        for r in failed.iter().take(10) {
            let first = format!("+{:.6} s", r.first_ns as f64 / 1e9);
            t.row(vec![r.count.to_string(), first, r.class.as_str().into(), r.error.clone(), r.api.clone()]);
        }
        t.render(out);
    }
    for w in &p.warnings {
        out.push_str(&format!("  warning: {w}\n"));
    }
}

/// The GPU's time split as HTA splits it, and its idle time by the report's causes.
fn gpu_time_lines(out: &mut String, p: &ProcessReport) {
    let b = &p.breakdown;
    out.push_str(&format!(
        "  GPU time breakdown (HTA definitions) over {} ({} GPU ops): idle {:.1}%, compute {:.1}%, non-compute {:.1}%\n",
        ms(b.span_ns),
        b.gpu_ops,
        b.percent(b.idle_ns),
        b.percent(b.compute_ns),
        b.percent(b.non_compute_ns)
    ));
    if let Some(s) = &p.sampling {
        out.push_str(&format!("    {}\n", s.breakdown_note()));
    }
    let mut left_out = Vec::new();
    let n = &b.not_gpu_work;
    if n.context_syncs > 0 {
        let what = "context synchronisation(s) (host waits on no stream, which the trace writes as stream 4294967295)";
        left_out.push(format!("{} {what}", n.context_syncs));
    }
    if n.host_ops > 0 {
        let what = "host operator(s) with a stream argument (kernel launchers such as Triton's, run on the CPU)";
        left_out.push(format!("{} {what}", n.host_ops));
    }
    if !left_out.is_empty() {
        out.push_str(&format!(
            "    not GPU work, left out where HTA counts it as GPU ops (so HTA's figures differ): {}\n",
            left_out.join("; ")
        ));
    }
    let i = &p.idle_breakdown;
    out.push_str(&format!(
        "  idle by cause (per stream, HTA): host wait {}, kernel wait {}, other {}\n",
        ms(i.host_wait_ns.max(0) as u64),
        ms(i.kernel_wait_ns.max(0) as u64),
        ms(i.other_ns.max(0) as u64)
    ));
    let c = &p.idle_causes;
    // Only where graphs were traced node by node: the profiler's own part, kept out of launch overhead.
    let tracing = match c.graph_tracing_ns {
        0 => String::new(),
        ns => format!(", CUPTI tracing graph nodes {} (the profiler's)", ms(ns)),
    };
    // Only where CUDA set itself up inside the analysed time (most steady steps have none).
    let setup = match c.cuda_setup_ns {
        0 => String::new(),
        ns => format!(", CUDA set-up {}", ms(ns)),
    };
    out.push_str(&format!(
        "  idle {} {}: data loading {}, sync stalls {}, launch overhead {}, host CPU work {}, allocator {}, \
         host polling {}, CUDA graph capture {}{setup}{tracing}; queued work waiting {} (on another stream's event {}, collectives {}, host functions {}, \
         CUDA graphs {}, GPU work not in the trace {}, unexplained {})\n",
        // Without steps the findings cover the whole trace's window.
        if p.step_total.is_some() { "inside steps" } else { "in the time covered" },
        ms(c.idle_in_steps_ns),
        ms(c.data_loading_ns),
        ms(c.sync_stall_ns),
        ms(c.launch_bound_ns),
        ms(c.cpu_bound_ns),
        ms(c.allocator_churn_ns),
        ms(c.host_polling_ns),
        ms(c.graph_setup_ns),
        ms(c.device_wait_ns),
        ms(c.cross_stream_wait_ns),
        ms(c.collective_wait_ns),
        ms(c.host_function_wait_ns),
        ms(c.graph_wait_ns),
        ms(c.unseen_work_ns),
        ms(c.idle_unexplained_ns)
    ));
}

/// A serving engine's iterations by kind, its requests, and what could not be attributed.
fn iterations(out: &mut String, it: &super::iterations::Iterations) {
    if !it.kinds.is_empty() {
        let mut t = Table::new(format!("  {}", it.title()), super::iterations::HEADERS);
        for row in it.rows() {
            t.row(row);
        }
        t.render(out);
    }
    if let Some(line) = it.requests_line() {
        out.push_str(&format!("  {line}\n"));
    }
    for n in &it.not_attributed {
        out.push_str(&format!("  not attributed: {n}\n"));
    }
}

/// Kernel time by category, and the top kernels with their launch configuration.
fn kernel_tables(out: &mut String, p: &ProcessReport) {
    if !p.categories.is_empty() {
        let mut t =
            Table::new("  Kernel time by category", &["Share", "Total (ms)", "Per step (ms)", "Count", "Category"]);
        for c in &p.categories {
            t.row(vec![
                format!("{:.1}%", c.share_of_kernel_time * 100.0),
                format!("{:.3}", c.total_ns as f64 / 1e6),
                c.per_step_ns.map_or("-".into(), |n| format!("{:.3}", n as f64 / 1e6)),
                c.count.to_string(),
                c.category.to_string(),
            ]);
        }
        t.render(out);
    }
    if !p.top_kernels.is_empty() {
        let mut t = Table::new(
            "  Top kernels",
            &["Total (ms)", "Count", "Mean (µs)", "Share", "Grid", "Block", "Regs", "Occupancy", "Name"],
        );
        for k in &p.top_kernels {
            t.row(vec![
                format!("{:.3}", k.total_ns as f64 / 1e6),
                k.count.to_string(),
                format!("{:.1}", k.mean_ns as f64 / 1e3),
                format!("{:.1}%", k.share_of_kernel_time * 100.0),
                format!("{}x{}x{}", k.grid[0], k.grid[1], k.grid[2]),
                format!("{}x{}x{}", k.block[0], k.block[1], k.block[2]),
                k.registers_per_thread.to_string(),
                k.occupancy.map_or("-".into(), |o| format!("{:.0}%", o * 100.0)),
                short_name(&k.name),
            ]);
        }
        t.render(out);
    }
}

/// A critical path's line and its three longest links.
fn path_lines(out: &mut String, line: &str, c: &super::step_path::StepPath) {
    out.push_str(&format!("  {line}\n"));
    for l in c.longest.iter().take(3) {
        out.push_str(&format!("    - {} {}: {}\n", ms(l.duration_ns), l.kind, l.what));
    }
}

/// The critical path of the typical step in one line: what its time is made of.
pub fn critical_path_line(c: &super::step_path::StepPath) -> String {
    path_line(c, "a typical step", &format!("{}, {}", c.step, ms(c.step_ns)))
}

/// The critical path of a slow step in one line, with how slow and which steps it stands for.
pub fn slow_path_line(s: &super::step_path::SlowStepPath, typical: &super::step_path::StepPath) -> String {
    let c = &s.path;
    let times = c.step_ns as f64 / typical.step_ns.max(1) as f64;
    let of = if s.group_steps <= 1 {
        format!("the slowest of {} steps", s.of_steps)
    } else {
        format!("the middle one of the slowest {} of {} steps", s.group_steps, s.of_steps)
    };
    path_line(c, "a slow step", &format!("{}, {}, {times:.1}x the typical; {of}", c.step, ms(c.step_ns)))
}

/// A path in one line: `which` step (`about` it) and what its time is made of.
fn path_line(c: &super::step_path::StepPath, which: &str, about: &str) -> String {
    // Links that round to 0% are left out (the two-rank trace's path read "host work 100%, gemm kernels 0%, GPU
    // queue 0%, sync 0%..."); the first is kept whatever its share. JSON keeps every kind.
    let parts: Vec<String> = c
        .by_kind
        .iter()
        .take(6)
        .enumerate()
        .filter(|(i, g)| *i == 0 || g.share >= 0.005)
        .map(|(_, g)| format!("{} {:.0}%", g.what, g.share * 100.0))
        .collect();
    let sampled = if c.calls_sampled {
        " (the trace sampled its CUDA calls: launches and waits missing from it may hold the step where this shows \
         host work)"
    } else {
        ""
    };
    format!(
        "Critical path of {which} ({about}; shortening a link saves up to its length): {}{sampled}",
        parts.join(", ")
    )
}

/// What the warm-up steps were and did, and whether the analyses cover them (None: no warm-up found).
pub fn warmup_line(w: &super::warmup::Warmup) -> Option<String> {
    if w.steps == 0 {
        return None;
    }
    let names: Vec<String> = w
        .detail
        .iter()
        .take(3)
        .map(|d| {
            let kind = d.kind.map_or(String::new(), |k| format!(", {k}"));
            format!("{} {}{kind}", d.name, ms(d.duration_ns))
        })
        .collect();
    let more = if w.detail.len() > 3 { ", ..." } else { "" };
    let apart = if w.filtered {
        "analysed where the filter chose them"
    } else if w.included {
        "analysed with the rest (--include-warmup)"
    } else {
        "left out of the verdict, findings and steps below (--include-warmup keeps them)"
    };
    Some(format!(
        "Warm-up: {} step{}, {} ({}{more}; {}): {}; {apart}",
        w.steps,
        if w.steps == 1 { "" } else { "s" },
        ms(w.ns),
        names.join("; "),
        w.steady_by_kind_words(ms).map_or_else(
            || format!("steady steps take {}", ms(w.steady_step_ns)),
            |k| format!("steady steps by kind: {k}")
        ),
        w.describe()
    ))
}

/// The later steps that did first-time work (recompilations, lazy captures), each with its cost; None when there were
/// none.
pub fn first_runs_line(w: &super::warmup::Warmup) -> Option<String> {
    if w.later.is_empty() {
        return None;
    }
    let steps: Vec<String> = w
        .later
        .iter()
        .take(5)
        .map(|f| {
            let mut did = Vec::new();
            if f.new_kernels > 0 {
                let what = if f.recompiled { "a torch.compile recompilation: " } else { "" };
                let kind = if f.recompiled { "new Triton kernel" } else { "kernel" };
                let e = f
                    .examples
                    .first()
                    .map_or(String::new(), |n| format!(", e.g. {}", super::short_names::short_name(n)));
                let s = if f.new_kernels == 1 { "" } else { "s" };
                did.push(format!("{what}{} {kind}{s} the trace had not run before{e}", f.new_kernels));
            }
            if f.graphs_instantiated > 0 {
                did.push(format!(
                    "{} captured and instantiated: a batch size or input shape first met then",
                    counted(f.graphs_instantiated, "CUDA graph", "CUDA graphs")
                ));
            }
            let of = f.kind.map_or(String::new(), |k| format!(", {k}"));
            let cost = if f.cost_ns > 0 { format!("+{}", ms(f.cost_ns)) } else { "no slower".to_string() };
            format!("{}{of} {cost} ({})", f.name, did.join("; "))
        })
        .collect();
    let more = if w.later.len() > 5 { format!(", and {} more", w.later.len() - 5) } else { String::new() };
    let cost: u64 = w.later.iter().map(|f| f.cost_ns).sum();
    let apart = if w.filtered {
        "analysed where the filter chose them"
    } else if w.included {
        "analysed with the rest (--include-warmup)"
    } else {
        "left out with the warm-up (--include-warmup keeps them)"
    };
    Some(format!(
        "Steps doing first-time work after warm-up (slow with kernels not run before; CUDA graphs captured): {} step(s), \
         {} over the steady {} in all: \
         {}{more}; {apart}",
        w.later.len(),
        ms(cost),
        w.steady_by_kind_words(ms).map_or_else(|| ms(w.steady_step_ns), |k| format!("median of their kind ({k})")),
        steps.join("; ")
    ))
}

impl Report {
    /// The report as text for a terminal.
    pub fn to_text(&self) -> String {
        render(self)
    }
}

/// What the terminal shows of a large job (JSON and HTML have everything).
const TEXT_FINDINGS: usize = 20;
const TEXT_PROCESSES: usize = 16;
const TEXT_WINDOWS: usize = 24;
const TEXT_RUN_JOBS: usize = 4;
const TEXT_RUN_VERDICTS: usize = 8;

fn render(r: &Report) -> String {
    let mut out = format!("Verdict: {}\n", r.verdict);
    for why in &r.traces_left_out {
        out.push_str(&format!("Left out: {why}\n"));
    }
    if let Some(why) = &r.separate_runs {
        out.push_str(&format!("Separate runs: {why}\n"));
    }
    for v in r.run_verdicts.iter().take(TEXT_RUN_VERDICTS) {
        out.push_str(&format!("  - {}: {}\n", v.run.words(), v.verdict));
    }
    if r.run_verdicts.len() > TEXT_RUN_VERDICTS {
        out.push_str(&format!(
            "  ... and {} more runs (--format json or html)\n",
            r.run_verdicts.len() - TEXT_RUN_VERDICTS
        ));
    }
    // Said first, since `stats` counts every step: a reader comparing the two must know the report's are fewer.
    let left_out: Vec<usize> = r
        .processes
        .iter()
        .filter(|p| p.warmup.steps > 0 && !p.warmup.included && !p.warmup.filtered)
        .map(|p| p.warmup.steps)
        .collect();
    if !left_out.is_empty() {
        let steps: usize = left_out.iter().sum();
        let (s, which) = match left_out.len() {
            1 => (if steps == 1 { "" } else { "s" }, String::new()),
            n => ("s", format!(" of {n} processes")),
        };
        out.push_str(&format!(
            "Warm-up left out of all below: {steps} step{s}{which} (see Warm-up under each process); `cuflight stats` \
             counts every step; --include-warmup keeps them\n"
        ));
    }
    if !r.findings.is_empty() {
        out.push_str("\nFindings, most costly first:\n");
        for (i, f) in r.findings.iter().take(TEXT_FINDINGS).enumerate() {
            finding(&mut out, i, f, r.origin_of(f), r.share_of(f));
        }
        if r.findings.len() > TEXT_FINDINGS {
            out.push_str(&format!("\n ... and {} more (--format json or html)\n", r.findings.len() - TEXT_FINDINGS));
        }
    }
    for w in super::windows::of(r) {
        let mut table = Table::new(format!("\n{}", w.title()), &super::windows::HEADERS);
        for row in w.rows.iter().take(TEXT_WINDOWS) {
            table.row(row.cells());
        }
        table.render(&mut out);
        if w.rows.len() > TEXT_WINDOWS {
            out.push_str(&format!("  ... and {} more (--format html)\n", w.rows.len() - TEXT_WINDOWS));
        }
    }
    if let Some(j) = &r.job {
        j.to_text(&mut out);
    }
    for j in r.run_jobs.iter().take(TEXT_RUN_JOBS) {
        j.to_text(&mut out);
    }
    if r.run_jobs.len() > TEXT_RUN_JOBS {
        out.push_str(&format!(
            "\n ... and {} more runs' jobs (--format json or html)\n",
            r.run_jobs.len() - TEXT_RUN_JOBS
        ));
    }
    // Of many processes, those the shown findings name, then the first ones.
    let mut shown: Vec<usize> = Vec::new();
    if r.processes.len() > TEXT_PROCESSES {
        for f in r.findings.iter().take(TEXT_FINDINGS) {
            let i = r.processes.iter().position(|p| p.holds(f));
            if let Some(i) = i.filter(|i| !shown.contains(i) && shown.len() < TEXT_PROCESSES) {
                shown.push(i);
            }
        }
        (0..r.processes.len()).for_each(|i| {
            if shown.len() < TEXT_PROCESSES && !shown.contains(&i) {
                shown.push(i);
            }
        });
        shown.sort_unstable();
    } else {
        shown = (0..r.processes.len()).collect();
    }
    for &i in &shown {
        process(&mut out, &r.processes[i]);
    }
    if shown.len() < r.processes.len() {
        out.push_str(&format!(
            "\n({} of {} processes shown: those the findings above name, then the first; all in --format json or html)\n",
            shown.len(),
            r.processes.len()
        ));
    }
    out
}
