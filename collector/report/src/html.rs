//! A self-contained HTML report: inline CSS and SVG charts (`html_charts`), no scripts, fonts or network, so it
//! opens anywhere, offline, and can be attached to a ticket. It says what the text report says: the verdict,
//! each finding with its evidence and fix, per process the run (command, host, GPUs, CUDA versions, drops), the
//! breakdowns, idle time by cause, the steps and the top kernels, with full kernel names. Times are relative to
//! the start of the file's Perfetto timeline.

use super::findings::{counted, ms, Finding};
use super::html_charts::{parts_bar, step_chart, utilization_chart, CATEGORIES};
use super::html_escape::esc;
use super::text::{calls_label, severity, shown_calls, who};
use super::{ProcessReport, Report};
use std::fmt::Write;

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:960px}\
    .verdict{font-size:18px;padding:12px;background:#fdf2e9;border-radius:6px}\
    .card{margin:12px 0;padding:8px 12px;background:#fafafa;border-radius:4px}\
    .sev{color:#fff;padding:1px 6px;border-radius:3px;font-size:12px}.cost,.who{color:#555;margin-left:8px}\
    .bar{height:6px;background:#eee;margin:6px 0}.bar div{height:6px}.fix{color:#1a5276}\
    .note{color:#555;font-size:12px;margin:2px 0}\
    .axis{font-size:11px;fill:#333}.title{font-size:12px;fill:#222}.grid{stroke:#e4e4e4}.frame{stroke:#333}\
    .step{stroke:#c0392b;stroke-dasharray:3 3;opacity:.7}.steplabel{font-size:10px;fill:#c0392b}\
    table{border-collapse:collapse;width:100%}td,th{padding:2px 6px;text-align:left;vertical-align:top;\
    border-bottom:1px solid #eee;font-size:12px}td.num,th.num{text-align:right;white-space:nowrap}\
    td.name{word-break:break-all;font-family:ui-monospace,monospace;font-size:11px}\
    .facts td:first-child{color:#555;width:90px}.kbar{display:inline-block;height:10px;background:#4e79a7}";

fn finding_card(out: &mut String, f: &Finding, origin: u64, share_of: &str) {
    let color = match f.severity {
        super::Severity::High => "#c0392b",
        super::Severity::Medium => "#e67e22",
        super::Severity::Low => "#7f8c8d",
        super::Severity::Info => "#2980b9",
    };
    let cost = if f.time_lost_ns > 0 {
        format!("{:.1}% of {share_of} · {} lost", f.share * 100.0, ms(f.time_lost_ns))
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "<div class=card style=\"border-left:6px solid {color}\"><div class=head><b>{}</b> <span class=sev \
         style=\"background:{color}\">{}</span> <span class=cost>{}</span> <span class=who>{}</span></div>\
         <div class=bar><div style=\"width:{:.1}%;background:{color}\"></div></div><p>{}</p><ul>",
        esc(f.kind),
        severity(f.severity),
        esc(&cost),
        esc(&who(f)),
        (f.share * 100.0).min(100.0),
        esc(&f.summary)
    );
    let ev = &f.evidence;
    for fact in &ev.facts {
        let _ = write!(out, "<li>{}</li>", esc(fact));
    }
    if !ev.steps.is_empty() {
        let steps: Vec<String> =
            ev.steps.iter().take(5).map(|s| format!("{} ({})", esc(&s.name), ms(s.lost_ns))).collect();
        let _ = write!(out, "<li>worst steps: {}</li>", steps.join(", "));
    }
    let calls: Vec<String> =
        shown_calls(f).take(5).map(|c| format!("{} ×{} ({})", esc(&c.name), c.count, ms(c.total_ns))).collect();
    if !calls.is_empty() {
        let _ = write!(out, "<li>{}: {}</li>", calls_label(f), calls.join(", "));
    }
    if f.kind != "hot_kernels" {
        for k in ev.kernels.iter().take(5) {
            let _ = write!(out, "<li>kernel <code>{}</code> ×{} ({})</li>", esc(&k.name), k.count, ms(k.total_ns));
        }
    }
    for e in ev.examples.iter().take(3) {
        let step = e.step.map_or(String::new(), |s| format!(", step {s}"));
        let _ = write!(
            out,
            "<li>example: {} at {}{step}, {}</li>",
            esc(&e.what),
            super::run::relative(e.start_ns, origin),
            ms(e.duration_ns)
        );
    }
    for s in f.sources.iter().take(5) {
        let code = super::sources::source_text(&s.file, s.line)
            .map_or(String::new(), |c| format!(": <code>{}</code>", esc(&c)));
        let _ = write!(
            out,
            "<li>at {}{code} ({}, {})</li>",
            match s.is_c_function() {
                true => format!("<code>{}</code>", esc(&s.file)),
                false => format!("<code>{}:{}</code> in {}", esc(&s.file), s.line, esc(&s.function)),
            },
            counted(s.count, "call", "calls"),
            ms(s.ns)
        );
    }
    let _ = write!(out, "</ul><p class=fix><b>Fix:</b> {}</p></div>", esc(&f.fix));
}

fn run_table(out: &mut String, p: &ProcessReport) {
    out.push_str("<table class=facts>");
    for (label, value) in p.run.facts() {
        let _ = write!(out, "<tr><td>{}</td><td>{}</td></tr>", esc(label), esc(&value));
    }
    let _ = write!(out, "<tr><td>Trace</td><td>{}</td></tr></table>", esc(&p.file));
}

fn idle_section(out: &mut String, p: &ProcessReport) {
    let c = &p.idle_causes;
    let named = c.data_loading_ns
        + c.sync_stall_ns
        + c.launch_bound_ns
        + c.cpu_bound_ns
        + c.allocator_churn_ns
        + c.host_polling_ns
        + c.graph_setup_ns
        + c.graph_tracing_ns
        + c.cuda_setup_ns
        + c.device_wait_ns;
    let mut parts = vec![
        ("data loading", c.data_loading_ns, "#76b7b2"),
        ("sync stalls", c.sync_stall_ns, "#e15759"),
        ("launch overhead", c.launch_bound_ns, "#f28e2b"),
        ("host CPU work", c.cpu_bound_ns, "#59a14f"),
        ("allocator", c.allocator_churn_ns, "#b07aa1"),
        ("host polling", c.host_polling_ns, "#ff9da7"),
        ("CUDA graph capture", c.graph_setup_ns, "#86bcb6"),
        ("CUDA set-up", c.cuda_setup_ns, "#a0cbe8"),
        ("cross-stream waits", c.cross_stream_wait_ns, "#9c755f"),
        ("collectives waiting", c.collective_wait_ns, "#4e79a7"),
        ("host function waits", c.host_function_wait_ns, "#d37295"),
        ("CUDA graph waits", c.graph_wait_ns, "#edc948"),
        ("GPU work not in the trace", c.unseen_work_ns, "#8cd17d"),
        ("unexplained (queued work waited on nothing traced)", c.idle_unexplained_ns, "#bab0ac"),
        ("unattributed", c.idle_in_steps_ns.saturating_sub(named), "#79706e"),
    ];
    // Only where graphs were traced node by node: the profiler's own part, kept out of launch overhead.
    if c.graph_tracing_ns > 0 {
        parts.insert(7, ("CUPTI tracing graph nodes (the profiler's)", c.graph_tracing_ns, "#d4a6c8"));
    }
    let said: Vec<String> = parts.iter().map(|(label, _, _)| p.run.said(label)).collect();
    let parts: Vec<(&str, u64, &str)> =
        parts.iter().zip(&said).map(|(&(_, ns, colour), l)| (l.as_str(), ns, colour)).collect();
    parts_bar(out, &format!("Idle time inside steps by cause ({} in all)", ms(c.idle_in_steps_ns)), &parts);
    let i = &p.idle_breakdown;
    parts_bar(
        out,
        "Idle time per stream (HTA's idle time breakdown)",
        &[
            ("host wait", i.host_wait_ns.max(0) as u64, "#e15759"),
            ("kernel wait", i.kernel_wait_ns.max(0) as u64, "#f28e2b"),
            ("other", i.other_ns.max(0) as u64, "#bab0ac"),
        ],
    );
}

fn kernel_table(out: &mut String, p: &ProcessReport) {
    if !p.categories.is_empty() {
        out.push_str(
            "<h3>Kernel time by category</h3><table><tr><th>Category</th><th>Share of kernel time</th>\
             <th class=num>Total</th><th class=num>Per step</th><th class=num>Count</th></tr>",
        );
        for c in &p.categories {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=num><span class=kbar style=\"width:{:.0}px\"></span> {:.1}%</td>\
                 <td class=num>{}</td><td class=num>{}</td><td class=num>{}</td></tr>",
                c.category,
                c.share_of_kernel_time * 120.0,
                c.share_of_kernel_time * 100.0,
                ms(c.total_ns),
                c.per_step_ns.map_or("-".into(), ms),
                c.count,
            );
        }
        out.push_str("</table>");
    }
    if p.top_kernels.is_empty() {
        return;
    }
    out.push_str(
        "<h3>Top kernels</h3><table><tr><th>Kernel</th><th>Share of kernel time</th><th class=num>Total</th>\
         <th class=num>Count</th><th class=num>Mean</th><th>Grid</th><th>Block</th><th class=num>Regs</th>\
         <th class=num>Occupancy</th></tr>",
    );
    for k in &p.top_kernels {
        let _ = write!(
            out,
            "<tr><td class=name>{}</td><td class=num><span class=kbar style=\"width:{:.0}px\"></span> {:.1}%</td>\
             <td class=num>{}</td><td class=num>{}</td><td class=num>{:.1} µs</td><td>{}×{}×{}</td>\
             <td>{}×{}×{}</td><td class=num>{}</td><td class=num>{}</td></tr>",
            esc(&k.name),
            k.share_of_kernel_time * 120.0,
            k.share_of_kernel_time * 100.0,
            ms(k.total_ns),
            k.count,
            k.mean_ns as f64 / 1e3,
            k.grid[0],
            k.grid[1],
            k.grid[2],
            k.block[0],
            k.block[1],
            k.block[2],
            k.registers_per_thread,
            k.occupancy.map_or("-".into(), |o| format!("{:.0}%", o * 100.0))
        );
    }
    out.push_str("</table><p class=note>Occupancy: theoretical, from block size, registers and shared memory.</p>");
}

/// A critical path's line and its longest links.
fn path_table(out: &mut String, line: &str, c: &super::step_path::StepPath) {
    let _ = write!(out, "<p>{}</p><table><tr><th class=num>Time</th><th>Link</th><th>What</th></tr>", esc(line));
    for l in &c.longest {
        let _ = write!(
            out,
            "<tr><td class=num>{}</td><td>{}</td><td>{}</td></tr>",
            ms(l.duration_ns),
            l.kind,
            esc(&l.what)
        );
    }
    out.push_str("</table>");
}

fn steps_table(out: &mut String, p: &ProcessReport) {
    if let Some(c) = &p.critical_path {
        path_table(out, &p.run.said(&super::text::critical_path_line(c)), c);
        if let Some(s) = &p.slow_step_path {
            path_table(out, &p.run.said(&super::text::slow_path_line(s, c)), &s.path);
        }
    }
    if let Some(w) = super::text::warmup_line(&p.warmup) {
        let _ = write!(out, "<p class=warmup>{}</p>", esc(&p.run.said(&w)));
    }
    if let Some(l) = super::text::first_runs_line(&p.warmup) {
        let _ = write!(out, "<p class=warmup>{}</p>", esc(&p.run.said(&l)));
    }
    if let Some(f) = &p.filtered {
        let _ = write!(out, "<p class=warmup>Filtered: analysed {}</p>", esc(f));
    }
    if let Some(s) = &p.sampling {
        for line in s.describe() {
            let _ = write!(out, "<p class=warmup>Sampled: {}</p>", esc(&line));
        }
    }
    let Some(t) = &p.step_total else { return };
    let shown = super::text_steps::shown_steps(&p.steps);
    let _ = write!(
        out,
        "<p>{} steps, mean {}{}, GPU utilisation in steps {:.1}%. Step time by category (TensorBoard's \
         definitions, first that applies){}:</p><table><tr><th>Step</th><th class=num>Start</th><th class=num>Time</th>",
        p.steps.len(),
        ms(t.duration_ns / p.steps.len().max(1) as u64),
        esc(&super::text_steps::step_spread(p)),
        t.gpu_utilization * 100.0,
        if shown.len() < p.steps.len() { "; the first steps, then the slowest, in step order" } else { "" },
    );
    for (name, _) in CATEGORIES {
        let _ = write!(out, "<th class=num>{name}</th>");
    }
    out.push_str("</tr>");
    let rows = shown.iter().map(|&i| &p.steps[i]).chain(std::iter::once(t));
    for r in rows {
        let d = r.duration_ns.max(1) as f64;
        let parts = [r.kernel_ns, r.memcpy_ns, r.memset_ns, r.runtime_ns, r.dataloader_ns, r.cpu_exec_ns, r.other_ns];
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=num>{}</td><td class=num>{}</td>",
            esc(&r.name),
            p.run.at(r.start_ns),
            ms(r.duration_ns)
        );
        for v in parts {
            let _ = write!(out, "<td class=num>{:.1}%</td>", 100.0 * v as f64 / d);
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

/// A serving engine's iterations by kind, its requests, and what could not be attributed.
fn iterations_table(out: &mut String, it: &super::iterations::Iterations) {
    if !it.kinds.is_empty() {
        let _ = write!(out, "<p>{}:</p><table><tr>", esc(&it.title()));
        for (i, h) in super::iterations::HEADERS.iter().enumerate() {
            let _ = write!(out, "<th{}>{}</th>", if i == 0 { "" } else { " class=num" }, esc(h));
        }
        out.push_str("</tr>");
        for row in it.rows() {
            out.push_str("<tr>");
            for (i, c) in row.iter().enumerate() {
                let _ = write!(out, "<td{}>{}</td>", if i == 0 { "" } else { " class=num" }, esc(c));
            }
            out.push_str("</tr>");
        }
        out.push_str("</table>");
    }
    if let Some(line) = it.requests_line() {
        let _ = write!(out, "<p>{}</p>", esc(&line));
    }
    for n in &it.not_attributed {
        let _ = write!(out, "<p class=note>Not attributed: {}</p>", esc(n));
    }
}

impl Report {
    /// The report as one self-contained HTML page.
    pub fn to_html(&self) -> String {
        render(self)
    }
}

fn render(r: &Report) -> String {
    let mut out = format!(
        "<!doctype html><html><head><meta charset=utf-8><title>cuflight report</title><style>{STYLE}</style>\
         </head><body><h1>cuflight report</h1><p class=verdict>{}</p>{}{}<h2>Findings</h2>",
        esc(&r.verdict),
        r.traces_left_out.iter().map(|why| format!("<p class=note>Left out: {}</p>", esc(why))).collect::<String>(),
        r.separate_runs.as_ref().map_or(String::new(), |why| format!("<p class=note>Separate runs: {}</p>", esc(why)))
    );
    if !r.run_verdicts.is_empty() {
        out.push_str("<ul>");
        for v in &r.run_verdicts {
            let _ = write!(out, "<li>{}: {}</li>", esc(&v.run.words()), esc(&v.verdict));
        }
        out.push_str("</ul>");
    }
    if r.findings.is_empty() {
        out.push_str("<p>No bottleneck found.</p>");
    }
    for f in &r.findings {
        finding_card(&mut out, f, r.origin_of(f), r.share_of(f));
    }
    for w in super::windows::of(r) {
        let _ = write!(out, "<h2>{}</h2><table><tr>", esc(&w.title()));
        for h in super::windows::HEADERS {
            let _ = write!(out, "<th>{}</th>", esc(h));
        }
        out.push_str("</tr>");
        for row in &w.rows {
            out.push_str("<tr>");
            for c in row.cells() {
                let _ = write!(out, "<td>{}</td>", esc(&c));
            }
            out.push_str("</tr>");
        }
        out.push_str("</table>");
    }
    for j in r.job.iter().chain(&r.run_jobs) {
        j.to_html(&mut out);
    }
    for p in &r.processes {
        let b = &p.breakdown;
        let _ = write!(out, "<h2>{}</h2>", esc(&p.title()));
        run_table(&mut out, p);
        let _ = write!(
            out,
            "<p>GPU time breakdown (HTA's definitions) over {} ({} GPU ops): idle {:.1}%, compute {:.1}%, \
             non-compute {:.1}%.</p>",
            ms(b.span_ns),
            b.gpu_ops,
            b.percent(b.idle_ns),
            b.percent(b.compute_ns),
            b.percent(b.non_compute_ns)
        );
        if let Some(s) = &p.sampling {
            let _ = write!(out, "<p>{}.</p>", esc(&s.breakdown_note()));
        }
        step_chart(&mut out, p);
        steps_table(&mut out, p);
        if let Some(it) = &p.iterations {
            iterations_table(&mut out, it);
        }
        utilization_chart(&mut out, p);
        idle_section(&mut out, p);
        kernel_table(&mut out, p);
        for w in &p.warnings {
            let _ = write!(out, "<p class=cost>warning: {}</p>", esc(w));
        }
    }
    out.push_str("</body></html>\n");
    out
}
