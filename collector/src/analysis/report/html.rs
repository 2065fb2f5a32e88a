//! A self-contained HTML report: inline CSS and SVG plots drawn here (no scripts, fonts or network), so it opens
//! anywhere, offline, and can be attached to a ticket.

use super::findings::{ms, Finding};
use super::gpu_findings::short_name;
use super::text::{severity, who};
use super::{ProcessReport, Report};
use std::fmt::Write;

/// Kernel names cut to fit the table (the full name is the cell's tooltip).
fn short_label(name: &str) -> String {
    super::gpu_findings::shorten(name, 44, "…")
}

const CATEGORIES: [(&str, &str); 7] = [
    ("Kernel", "#4e79a7"),
    ("Memcpy", "#f28e2b"),
    ("Memset", "#edc948"),
    ("Runtime", "#e15759"),
    ("DataLoader", "#76b7b2"),
    ("CPU Exec", "#59a14f"),
    ("Other", "#bab0ac"),
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn finding_card(out: &mut String, f: &Finding) {
    let color = match f.severity {
        super::Severity::High => "#c0392b",
        super::Severity::Medium => "#e67e22",
        super::Severity::Low => "#7f8c8d",
        super::Severity::Info => "#2980b9",
    };
    let cost = if f.time_lost_ns > 0 {
        format!("{:.1}% of step time · {} lost", f.share * 100.0, ms(f.time_lost_ns))
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
    for fact in &f.evidence.facts {
        let _ = write!(out, "<li>{}</li>", esc(fact));
    }
    if !f.evidence.api_calls.is_empty() {
        let calls: Vec<String> = f
            .evidence
            .api_calls
            .iter()
            .take(3)
            .map(|c| format!("{} ×{} ({})", esc(&c.name), c.count, ms(c.total_ns)))
            .collect();
        let _ = write!(out, "<li>{}: {}</li>", super::text::calls_label(f), calls.join(", "));
    }
    if f.kind != "hot_kernels" {
        for k in f.evidence.kernels.iter().take(3) {
            let _ = write!(out, "<li>kernel {} ×{} ({})</li>", esc(&short_name(&k.name)), k.count, ms(k.total_ns));
        }
    }
    let _ = write!(out, "</ul><p class=fix><b>Fix:</b> {}</p></div>", esc(&f.fix));
}

/// Stacked bars, one per step (at most 200), heights in ms.
fn step_chart(out: &mut String, p: &ProcessReport) {
    let steps: Vec<_> = p.steps.iter().take(200).collect();
    if steps.is_empty() {
        return;
    }
    let (w, h, left, bottom) = (900.0, 260.0, 50.0, 30.0);
    let max = steps.iter().map(|s| s.duration_ns).max().unwrap_or(1).max(1) as f64;
    let bw = (w - left - 10.0) / steps.len() as f64;
    let _ =
        write!(out, "<h3>Per-step breakdown</h3><svg width={w} height={h} role=img aria-label=\"per-step breakdown\">");
    let _ = write!(out, "<text x=0 y=14 class=axis>{}</text>", ms(max as u64));
    for (i, s) in steps.iter().enumerate() {
        let parts = [s.kernel_ns, s.memcpy_ns, s.memset_ns, s.runtime_ns, s.dataloader_ns, s.cpu_exec_ns, s.other_ns];
        let mut y = h - bottom;
        for (v, (label, color)) in parts.iter().zip(CATEGORIES) {
            let ph = *v as f64 / max * (h - bottom - 20.0);
            if ph <= 0.0 {
                continue;
            }
            y -= ph;
            let _ = write!(
                out,
                "<rect x={:.1} y={y:.1} width={:.1} height={ph:.1} fill=\"{color}\"><title>{} {label}: {}</title></rect>",
                left + i as f64 * bw,
                (bw - 1.0).max(0.5),
                esc(&s.name),
                ms(*v)
            );
        }
    }
    let _ = write!(out, "<line x1={left} y1={} x2={w} y2={} stroke=#333 />", h - bottom, h - bottom);
    for (i, (label, color)) in CATEGORIES.iter().enumerate() {
        let x = left + i as f64 * 115.0;
        let _ = write!(
            out,
            "<rect x={x} y={} width=10 height=10 fill=\"{color}\"/><text x={} y={} class=axis>{label}</text>",
            h - 14.0,
            x + 14.0,
            h - 4.0
        );
    }
    out.push_str("</svg>");
}

fn utilization_chart(out: &mut String, p: &ProcessReport) {
    if p.utilization_over_time.is_empty() {
        return;
    }
    let (w, h) = (900.0, 140.0);
    let n = p.utilization_over_time.len() as f64;
    let mut points = format!("0,{h} ");
    for (i, u) in p.utilization_over_time.iter().enumerate() {
        let _ = write!(
            points,
            "{:.1},{:.1} {:.1},{:.1} ",
            i as f64 / n * w,
            h - u * (h - 10.0),
            (i + 1) as f64 / n * w,
            h - u * (h - 10.0)
        );
    }
    let _ = write!(points, "{w},{h}");
    let _ = write!(
        out,
        "<h3>GPU utilisation over time (kernel-busy share, {} of GPU span)</h3><svg width={w} height={h} role=img \
         aria-label=\"GPU utilisation\"><rect width={w} height={h} fill=#f4f6f8 /><polygon points=\"{points}\" \
         fill=#4e79a7 opacity=0.85 /><text x=4 y=14 class=axis>100%</text></svg>",
        ms(p.breakdown.span_ns)
    );
}

fn kernel_chart(out: &mut String, p: &ProcessReport) {
    if p.top_kernels.is_empty() {
        return;
    }
    out.push_str("<h3>Top kernels</h3><table><tr><th>Kernel</th><th>Share of kernel time</th><th>Total</th><th>Count</th><th>Grid</th><th>Block</th><th>Regs</th><th>Occupancy</th></tr>");
    for k in &p.top_kernels {
        let _ = write!(
            out,
            "<tr><td title=\"{}\">{}</td><td><div class=kbar style=\"width:{:.0}px\"></div> {:.1}%</td><td>{}</td><td>{}</td><td>{}×{}×{}</td><td>{}×{}×{}</td><td>{}</td><td>{}</td></tr>",
            esc(&k.name),
            esc(&short_label(&k.name)),
            k.share_of_kernel_time * 200.0,
            k.share_of_kernel_time * 100.0,
            ms(k.total_ns),
            k.count,
            k.grid[0], k.grid[1], k.grid[2],
            k.block[0], k.block[1], k.block[2],
            k.registers_per_thread,
            k.occupancy.map_or("-".into(), |o| format!("{:.0}%", o * 100.0))
        );
    }
    out.push_str("</table>");
}

impl Report {
    /// The report as one self-contained HTML page.
    pub fn to_html(&self) -> String {
        render(self)
    }
}

fn render(r: &Report) -> String {
    let mut out = String::from(
        "<!doctype html><html><head><meta charset=utf-8><title>cuflight report</title><style>\
         body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:960px}\
         .verdict{font-size:18px;padding:12px;background:#fdf2e9;border-radius:6px}\
         .card{margin:12px 0;padding:8px 12px;background:#fafafa;border-radius:4px}\
         .sev{color:#fff;padding:1px 6px;border-radius:3px;font-size:12px}.cost,.who{color:#555;margin-left:8px}\
         .bar{height:6px;background:#eee;margin:6px 0}.bar div{height:6px}.fix{color:#1a5276}\
         .axis{font-size:11px;fill:#333}table{border-collapse:collapse;width:100%}td,th{padding:2px 6px;\
         text-align:left;border-bottom:1px solid #eee;font-size:12px;white-space:nowrap}.kbar{display:inline-block;height:10px;background:#4e79a7}\
         </style></head><body><h1>cuflight report</h1>",
    );
    let _ = write!(out, "<p class=verdict>{}</p><h2>Findings</h2>", esc(&r.verdict));
    if r.findings.is_empty() {
        out.push_str("<p>No bottleneck found.</p>");
    }
    for f in &r.findings {
        finding_card(&mut out, f);
    }
    for p in &r.processes {
        let rank = p.rank.map_or(String::new(), |r| format!(", rank {r}"));
        let b = &p.breakdown;
        let _ = write!(
            out,
            "<h2>{} (pid {}{rank})</h2><p>GPU time breakdown (HTA definitions) over {}: idle {:.1}%, compute {:.1}%, \
             non-compute {:.1}%</p>",
            esc(&p.command),
            p.pid,
            ms(b.span_ns),
            b.percent(b.idle_ns),
            b.percent(b.compute_ns),
            b.percent(b.non_compute_ns)
        );
        step_chart(&mut out, p);
        utilization_chart(&mut out, p);
        kernel_chart(&mut out, p);
        for w in &p.warnings {
            let _ = write!(out, "<p class=cost>warning: {}</p>", esc(w));
        }
    }
    out.push_str("</body></html>\n");
    out
}
