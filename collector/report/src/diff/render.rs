//! `cuflight diff` as text for a terminal and as one self-contained HTML page (JSON is the serialised [`Diff`]).

use super::Diff;
use cuflight_analysis::table::Table;
use std::fmt::Write;

pub use crate::findings::ms;

fn ms_cell(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// Run labels: A, B, C, ... (files are long).
fn label(i: usize) -> String {
    let letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    match letters.get(i) {
        Some(&c) => (c as char).to_string(),
        None => format!("#{}", i + 1),
    }
}

/// A kernel's time per step and what makes it: "7.245 = 2 x 3.623".
fn kernel_cell(s: super::KernelStat) -> String {
    let calls = if (s.count_per_step - s.count_per_step.round()).abs() < 0.05 {
        format!("{:.0}", s.count_per_step)
    } else {
        format!("{:.1}", s.count_per_step)
    };
    format!("{} = {calls} x {}", ms_cell(s.per_step_ns), ms_cell(s.mean_ns))
}

/// Kernel rows shown in text and HTML (JSON has every kernel).
const SHOWN_KERNELS: usize = 15;

fn short(name: &str) -> String {
    crate::shorten(name, 70, "...")
}

impl Diff {
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let n = self.runs.len();
        let chosen = self.runs.iter().any(|r| r.filtered.is_some());
        let mut t = Table::new(
            if chosen { "Runs (the steps the filter chose in each)" } else { "Runs (steady steps; warm-up left out)" },
            &["Run", "Step (ms)", "vs prev", "GPU util", "Kernels/step", "Kernel ms/step", "Steps", "File"],
        );
        for (i, r) in self.runs.iter().enumerate() {
            t.row(vec![
                label(i),
                ms_cell(r.step_ns),
                r.step_ratio.map_or("-".into(), |x| format!("{:+.1}%", (x - 1.0) * 100.0)),
                format!("{:.1}%", r.gpu_util * 100.0),
                format!("{:.1}", r.kernels),
                ms_cell(r.kernel_ns),
                match (r.warmup_steps, r.sampled_one_in) {
                    (_, Some(n)) => format!("{} (1 in {n} recorded)", r.steps),
                    (0, None) => r.steps.to_string(),
                    (w, None) => format!("{} (+{w} warm-up)", r.steps),
                },
                r.file.clone(),
            ]);
        }
        t.render(&mut out);
        for (i, r) in self.runs.iter().enumerate() {
            let _ = writeln!(out, "  {}: {}", label(i), r.verdict);
        }
        if !self.summary.is_empty() {
            out.push_str("\nChanges:\n");
            for s in &self.summary {
                let _ = writeln!(out, "  {s}");
            }
        }
        // Columns: one per run, one per change (run before → run), then the name.
        let headers = |last: &str, changes: bool| -> Vec<String> {
            let mut h: Vec<String> = (0..n).map(label).collect();
            if changes {
                h.extend((1..n).map(|i| format!("{}→{}", label(i - 1), label(i))));
            }
            h.push(last.to_string());
            h
        };
        if !self.findings.is_empty() {
            let mut t = Table::with_headers("Findings (share of step time)", headers("Finding", true));
            for f in &self.findings {
                let mut row: Vec<String> =
                    f.share.iter().map(|s| s.map_or("-".into(), |s| format!("{:.1}%", s * 100.0))).collect();
                row.extend(f.change.iter().map(|c| c.to_string()));
                row.push(f.kind.to_string());
                t.row(row);
            }
            t.render(&mut out);
        }
        if !self.categories.is_empty() {
            let mut t = Table::with_headers("Kernel time per step by category (ms)", headers("Category", false));
            for c in &self.categories {
                let mut row: Vec<String> = c.per_step_ns.iter().map(|&ns| ms_cell(ns)).collect();
                row.push(c.category.to_string());
                t.row(row);
            }
            t.render(&mut out);
        }
        if !self.counters.is_empty() {
            let mut t = Table::with_headers(
                "Device counters: SM / Tensor Cores / DRAM, % of peak (record --gpu-metrics)",
                headers("Device or kind of work", false),
            );
            let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
            for c in &self.counters {
                let mut row: Vec<String> = c
                    .runs
                    .iter()
                    .map(|s| {
                        s.map_or("-".into(), |s| {
                            format!("{}/{}/{}", pct(s.sm_active_pct), pct(s.tensor_active_pct), pct(s.dram_pct))
                        })
                    })
                    .collect();
                row.push(c.name.clone());
                t.row(row);
            }
            t.render(&mut out);
        }
        let moved: Vec<_> = self.kernels.iter().filter(|k| k.change.iter().any(|c| *c != "same")).collect();
        if !moved.is_empty() {
            let mut t = Table::with_headers(
                "Kernels that changed (ms per step = calls per step x mean ms; faster or slower by the time per step)",
                headers("Kernel", true),
            );
            for k in moved.iter().take(SHOWN_KERNELS) {
                let mut row: Vec<String> = k.runs.iter().map(|s| s.map_or("-".into(), kernel_cell)).collect();
                row.extend(k.change.iter().map(|c| c.to_string()));
                row.push(short(&k.name));
                t.row(row);
            }
            t.render(&mut out);
            if moved.len() > SHOWN_KERNELS {
                let _ = writeln!(out, "  ... and {} more (--format json)", moved.len() - SHOWN_KERNELS);
            }
        }
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }

    pub fn to_html(&self) -> String {
        let esc = crate::escape_html;
        let n = self.runs.len();
        let mut out = String::from(
            "<!doctype html><html><head><meta charset=utf-8><title>cuflight diff</title><style>\
             body{font:14px system-ui,sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin:1em 0}\
             td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}.num{text-align:right}\
             .faster,.resolved,.reduced{color:#1a7f37}.slower,.new,.grew{color:#cf222e}.gained,.lost{color:#8250df}</style></head><body>\
             <h1>cuflight diff</h1>",
        );
        out.push_str("<h2>Runs</h2><table><tr><th>Run</th><th>File</th><th class=num>Steady step</th><th class=num>vs previous</th><th class=num>GPU util</th><th class=num>Kernels/step</th><th>Verdict</th></tr>");
        for (i, r) in self.runs.iter().enumerate() {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{:.1}%</td><td class=num>{:.1}</td><td>{}</td></tr>",
                label(i),
                esc(&r.file),
                ms(r.step_ns),
                r.step_ratio.map_or("-".into(), |x| format!("{:+.1}%", (x - 1.0) * 100.0)),
                r.gpu_util * 100.0,
                r.kernels,
                esc(&r.verdict)
            );
        }
        out.push_str("</table><ul>");
        for s in &self.summary {
            let _ = write!(out, "<li>{}</li>", esc(s));
        }
        out.push_str("</ul>");
        let head = |out: &mut String, last: &str, changes: bool| {
            out.push_str("<tr>");
            for i in 0..n {
                let _ = write!(out, "<th class=num>{}</th>", label(i));
            }
            if changes {
                for i in 1..n {
                    let _ = write!(out, "<th>{}→{}</th>", label(i - 1), label(i));
                }
            }
            let _ = write!(out, "<th>{last}</th></tr>");
        };
        out.push_str("<h2>Findings (share of step time)</h2><table>");
        head(&mut out, "Finding", true);
        for f in &self.findings {
            out.push_str("<tr>");
            for s in &f.share {
                let _ = write!(out, "<td class=num>{}</td>", s.map_or("-".into(), |s| format!("{:.1}%", s * 100.0)));
            }
            for c in &f.change {
                let _ = write!(out, "<td class={c}>{c}</td>");
            }
            let _ = write!(out, "<td title=\"{}\">{}</td></tr>", esc(&f.summary), f.kind);
        }
        out.push_str("</table><h2>Kernel time per step by category</h2><table>");
        head(&mut out, "Category", false);
        for c in &self.categories {
            out.push_str("<tr>");
            for &ns in &c.per_step_ns {
                let _ = write!(out, "<td class=num>{}</td>", ms(ns));
            }
            let _ = write!(out, "<td>{}</td></tr>", c.category);
        }
        out.push_str(
            "</table><h2>Kernels (ms per step = calls per step x mean ms; faster or slower by the time per step)</h2><table>",
        );
        head(&mut out, "Kernel", true);
        for k in self.kernels.iter().take(4 * SHOWN_KERNELS) {
            out.push_str("<tr>");
            for s in &k.runs {
                let _ = write!(out, "<td class=num>{}</td>", s.map_or("-".into(), kernel_cell));
            }
            for c in &k.change {
                let _ = write!(out, "<td class={c}>{c}</td>");
            }
            let _ = write!(out, "<td>{}</td></tr>", esc(&k.name));
        }
        out.push_str("</table>");
        for w in &self.warnings {
            let _ = write!(out, "<p>warning: {}</p>", esc(w));
        }
        out.push_str("</body></html>\n");
        out
    }
}
