//! The job view in the terminal and in the HTML report: the ranks side by side, the critical path of a typical
//! step, and the rank × step heatmap (in HTML, cells coloured from the fastest to the slowest step).

use super::super::findings::ms;
use super::super::html_escape::esc;
use super::collectives::Method;
use super::JobReport;
use cuflight_analysis::table::Table;
use std::fmt::Write;

/// Steps the terminal heatmap shows (the HTML one shows all).
const TEXT_STEPS: usize = 8;
/// Ranks the terminal shows (the HTML and JSON have all).
const TEXT_RANKS: usize = 16;
/// Critical-path segments listed, longest first.
const SEGMENTS_SHOWN: usize = 8;

fn signed_ms(ns: i64) -> String {
    format!("{}{:.2} ms", if ns < 0 { "-" } else { "+" }, ns.unsigned_abs() as f64 / 1e6)
}

impl JobReport {
    /// How the clocks were put on one, in words.
    pub fn clock_line(&self) -> String {
        let hosts = self.clocks.hosts.len();
        let clocks = match self.clocks.basis {
            "one host" => "one host's clock".to_string(),
            "aligned" => {
                let worst = self.clocks.hosts.iter().map(|h| h.residual_ns).max().unwrap_or(0);
                format!("{hosts} hosts aligned on their collectives (residual {:.1} µs at most)", worst as f64 / 1e3)
            }
            _ => format!("{hosts} hosts placed by REALTIME only (NTP error: arrivals inferred from durations)"),
        };
        let method = match self.method {
            Method::Arrival => "arrivals compared on that clock",
            Method::Duration => "arrivals inferred from collective durations",
        };
        let ranks = match self.world_size as usize {
            w if w > self.ranks.len() => format!(
                "{} of {w} ranks (the others' traces were not given: who waits for whom is among these)",
                self.ranks.len()
            ),
            _ => format!("{} ranks", self.ranks.len()),
        };
        format!("{ranks}; {clocks}; {} collectives matched across ranks, {method}", self.collectives)
    }

    fn rank_cells(&self) -> Vec<Vec<String>> {
        self.ranks
            .iter()
            .map(|r| {
                let waited_for: Vec<String> =
                    r.waited_for.iter().take(2).map(|(w, ns)| format!("{} ({})", short_who(w), ms(*ns))).collect();
                vec![
                    r.who.clone(),
                    if r.host.is_empty() { "-".into() } else { r.host.clone() },
                    r.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                    r.steps.to_string(),
                    ms(r.mean_step_ns),
                    r.gpu_utilization.map_or("-".into(), |u| format!("{:.1}%", u * 100.0)),
                    format!("{:.1}%", r.compute_pct),
                    format!("{:.1}%", r.non_compute_pct),
                    format!("{:.1}%", r.idle_pct),
                    ms(r.comm_ns),
                    r.comm_overlap_pct.map_or("-".into(), |p| format!("{p:.1}%")),
                    ms(r.waited_ns),
                    format!("{}/{}", r.times_last, r.collectives),
                    if r.collectives == 0 { "-".into() } else { signed_ms(r.median_lateness_ns) },
                    if waited_for.is_empty() { "-".into() } else { waited_for.join(", ") },
                ]
            })
            .collect()
    }

    pub fn to_text(&self, out: &mut String) {
        let which = self.run.as_ref().map_or(String::new(), |r| format!(" ({})", r.words()));
        out.push_str(&format!("\n== The job{which}: {}\n", self.clock_line()));
        let mut t =
            Table::new("  Ranks side by side (breakdown: HTA's; overlap: of communication time)", &RANK_HEADERS);
        let notable = self.notable_ranks();
        let cells = self.rank_cells();
        for &i in &notable {
            t.row(cells[i].clone());
        }
        t.render(out);
        if notable.len() < self.ranks.len() {
            out.push_str(&format!(
                "  ({} of {} ranks: those last most often and those that waited most; all in --format json or html)\n",
                notable.len(),
                self.ranks.len()
            ));
        }
        match (&self.critical_path, &self.critical_path_missing) {
            (Some(c), _) => {
                let parts: Vec<String> = c
                    .work_by_rank
                    .iter()
                    .map(|(w, ns)| format!("{} work {} ({:.0}%)", short_who(w), ms(*ns), pct(*ns, c.duration_ns)))
                    .chain(std::iter::once(format!(
                        "collectives {} ({:.0}%)",
                        ms(c.collective_ns),
                        pct(c.collective_ns, c.duration_ns)
                    )))
                    .collect();
                out.push_str(&format!(
                    "\n  Critical path of {} (the step of median span: {} across ranks, {}): {}\n",
                    c.step,
                    ms(c.duration_ns),
                    collectives(c.collectives),
                    parts.join(", ")
                ));
                let mut longest: Vec<&super::critical::Segment> = c.segments.iter().collect();
                longest.sort_by_key(|s| std::cmp::Reverse(s.duration_ns));
                longest.truncate(SEGMENTS_SHOWN);
                longest.sort_by_key(|s| s.start_ns);
                for s in longest {
                    out.push_str(&format!(
                        "    +{:>10.3} ms  {:>10}  {:<10} {}{}\n",
                        (s.start_ns - c.start_ns) as f64 / 1e6,
                        ms(s.duration_ns),
                        s.kind,
                        if s.kind == "work" { format!("{}: ", short_who(&s.who)) } else { String::new() },
                        if s.kind == "work" {
                            s.what.clone()
                        } else {
                            format!("{} (last in: {})", s.what, short_who(&s.who))
                        }
                    ));
                    if !s.gpu_work.is_empty() {
                        let work: Vec<String> = s
                            .gpu_work
                            .iter()
                            .map(|(n, ns)| format!("{} {}", cuflight_analysis::table::terminal_safe(n), ms(*ns)))
                            .collect();
                        out.push_str(&format!("{:>31}GPU: {}\n", "", work.join(", ")));
                    }
                }
            }
            (None, Some(why)) => out.push_str(&format!("\n  No critical path: {why}.\n")),
            (None, None) => {}
        }
        let h = &self.heatmap;
        if !h.steps.is_empty() {
            let shown = h.steps.len().min(TEXT_STEPS);
            let mut headers = vec!["Rank".to_string()];
            headers.extend(h.steps.iter().take(shown).map(|s| short_step(s)));
            let more =
                if h.steps.len() > shown { format!(", first {shown} of {}", h.steps.len()) } else { String::new() };
            let mut t = Table::with_headers(
                format!("  Step time per rank, ms (waiting for other ranks in brackets){more}"),
                headers,
            )
            .figures_last();
            for r in notable.iter().copied().filter(|&r| r < h.ranks.len()) {
                let who = &h.ranks[r];
                let mut row = vec![short_who(who).to_string()];
                for k in 0..shown {
                    row.push(match (h.step_ns[r][k], h.waited_ns[r][k]) {
                        (Some(d), Some(w)) if w > 0 => format!("{:.2} ({:.2})", d as f64 / 1e6, w as f64 / 1e6),
                        (Some(d), _) => format!("{:.2}", d as f64 / 1e6),
                        _ => "-".into(),
                    });
                }
                t.row(row);
            }
            t.render(out);
        }
    }

    /// The ranks the terminal shows: all of a small job; of a large one, the [`TEXT_RANKS`] / 2 last most often
    /// and those that waited most, in rank order.
    fn notable_ranks(&self) -> Vec<usize> {
        let n = self.ranks.len();
        if n <= TEXT_RANKS {
            return (0..n).collect();
        }
        let mut by_last: Vec<usize> = (0..n).collect();
        by_last.sort_by_key(|&i| (std::cmp::Reverse(self.ranks[i].times_last), i));
        let mut by_wait: Vec<usize> = (0..n).collect();
        by_wait.sort_by_key(|&i| (std::cmp::Reverse(self.ranks[i].waited_ns), i));
        let mut shown: Vec<usize> = by_last.into_iter().take(TEXT_RANKS / 2).collect();
        let waited: Vec<usize> = by_wait.into_iter().filter(|i| !shown.contains(i)).take(TEXT_RANKS / 2).collect();
        shown.extend(waited);
        shown.sort_unstable();
        shown
    }

    pub fn to_html(&self, out: &mut String) {
        let which = self.run.as_ref().map_or(String::new(), |r| format!(" ({})", r.words()));
        let _ = write!(out, "<h2>The job{}</h2><p>{}.</p>", esc(&which), esc(&self.clock_line()));
        out.push_str("<table><tr>");
        for h in RANK_HEADERS {
            let _ = write!(out, "<th>{}</th>", esc(h));
        }
        out.push_str("</tr>");
        for row in self.rank_cells() {
            out.push_str("<tr>");
            for (i, c) in row.iter().enumerate() {
                let class = if (2..14).contains(&i) { " class=num" } else { "" };
                let _ = write!(out, "<td{class}>{}</td>", esc(c));
            }
            out.push_str("</tr>");
        }
        out.push_str(
            "</table><p class=note>Waited: time inside collectives waiting for the last rank to join, in steps. \
             Last: collectives this rank joined last, of those it took part in. Late: median of how much later \
             it joined than the others.</p>",
        );
        if let Some(c) = &self.critical_path {
            self.critical_html(out, c);
        } else if let Some(why) = &self.critical_path_missing {
            let _ = write!(out, "<p class=note>No critical path: {}.</p>", esc(why));
        }
        self.heatmap_html(out);
    }

    fn critical_html(&self, out: &mut String, c: &super::critical::CriticalPath) {
        let _ = write!(
            out,
            "<h3>Critical path of {} (the step of median span: {} across ranks, {})</h3>",
            esc(&c.step),
            ms(c.duration_ns),
            collectives(c.collectives)
        );
        let palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"];
        let color = |who: &str| {
            let i = self.ranks.iter().position(|r| r.who == who).unwrap_or(0);
            palette[i % palette.len()]
        };
        let (w, left) = (900.0, 0.0);
        let _ = write!(out, "<svg width={w} height=30 viewBox=\"0 0 {w} 30\" role=img aria-label=\"critical path\">");
        for s in &c.segments {
            let x = left + (s.start_ns - c.start_ns) as f64 / c.duration_ns.max(1) as f64 * w;
            let width = s.duration_ns as f64 / c.duration_ns.max(1) as f64 * w;
            let fill = if s.kind == "collective" { "#bab0ac" } else { color(&s.who) };
            let work: Vec<String> = s.gpu_work.iter().map(|(n, ns)| format!("{n} {}", ms(*ns))).collect();
            let work = if work.is_empty() { String::new() } else { format!("; GPU: {}", work.join(", ")) };
            let _ = write!(
                out,
                "<rect x={x:.1} y=4 width={width:.1} height=20 fill=\"{fill}\"><title>{}: {} ({}){}</title></rect>",
                esc(&s.who),
                esc(&s.what),
                ms(s.duration_ns),
                esc(&work)
            );
        }
        out.push_str("</svg><ul>");
        for (who, ns) in &c.work_by_rank {
            let _ = write!(
                out,
                "<li><span class=kbar style=\"width:10px;background:{}\"></span> {} work: {} ({:.0}%)</li>",
                color(who),
                esc(who),
                ms(*ns),
                pct(*ns, c.duration_ns)
            );
        }
        let _ = write!(
            out,
            "<li><span class=kbar style=\"width:10px;background:#bab0ac\"></span> collectives once all had joined: \
             {} ({:.0}%)</li></ul>",
            ms(c.collective_ns),
            pct(c.collective_ns, c.duration_ns)
        );
    }

    fn heatmap_html(&self, out: &mut String) {
        let h = &self.heatmap;
        if h.steps.is_empty() {
            return;
        }
        heat_grid(
            out,
            h,
            "Step time per rank",
            "each rank's step time; in a job that synchronises every step they are alike, and the grid below says \
             who waited",
            &h.step_ns,
        );
        if h.waited_ns.iter().flatten().any(|w| w.is_some_and(|w| w > 0)) {
            heat_grid(
                out,
                h,
                "Time waiting for other ranks, per step",
                "the time each rank spent inside collectives waiting for the last to join: the straggler's row is \
                 the light one",
                &h.waited_ns,
            );
        }
    }
}

/// One rank x step grid, cells coloured white (lowest) to dark red (highest); hovering names the step.
fn heat_grid(out: &mut String, h: &super::Heatmap, title: &str, note: &str, values: &[Vec<Option<u64>>]) {
    let all: Vec<u64> = values.iter().flatten().flatten().copied().collect();
    let (lo, hi) = (all.iter().min().copied().unwrap_or(0), all.iter().max().copied().unwrap_or(0));
    let _ = write!(
        out,
        "<h3>{}</h3><p class=note>ms; {} (lightest {}, darkest {}).</p><div style=\"overflow-x:auto\">\
         <table class=heat><tr><th>Rank</th>",
        esc(title),
        esc(note),
        ms(lo),
        ms(hi)
    );
    for s in &h.steps {
        let _ = write!(out, "<th title=\"{}\">{}</th>", esc(s), esc(&short_step(s)));
    }
    out.push_str("</tr>");
    for (r, who) in h.ranks.iter().enumerate() {
        let _ = write!(out, "<tr><td>{}</td>", esc(who));
        for (k, v) in values[r].iter().enumerate() {
            match v {
                Some(d) => {
                    let t = if hi > lo { (d - lo) as f64 / (hi - lo) as f64 } else { 0.0 };
                    let (g, b) = ((235.0 - 180.0 * t) as u8, (225.0 - 190.0 * t) as u8);
                    let _ = write!(
                        out,
                        "<td class=num style=\"background:rgb(250,{g},{b})\" title=\"{}: {}\">{:.1}</td>",
                        esc(&h.steps[k]),
                        ms(*d),
                        *d as f64 / 1e6
                    );
                }
                None => out.push_str("<td class=num>-</td>"),
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</table></div>");
}

const RANK_HEADERS: [&str; 15] = [
    "Rank",
    "Host",
    "GPU",
    "Steps",
    "Mean step",
    "GPU util",
    "Compute",
    "Non-compute",
    "Idle",
    "Comm",
    "Overlap",
    "Waited",
    "Last",
    "Late",
    "Waited most for",
];

fn collectives(n: usize) -> String {
    format!("{n} collective{}", if n == 1 { "" } else { "s" })
}

fn pct(part: u64, whole: u64) -> f64 {
    crate::findings::percent(part, whole).unwrap_or(0.0)
}

/// "rank 3 (local 3) pid 412" → "rank 3"; a process with no rank keeps its pid.
fn short_who(who: &str) -> &str {
    match who.find(" (").or_else(|| who.find(" pid")) {
        Some(i) if who.starts_with("rank ") => &who[..i],
        _ => who,
    }
}

/// "ProfilerStep#551" → "#551".
fn short_step(s: &str) -> String {
    s.strip_prefix("ProfilerStep").map_or_else(|| s.to_string(), str::to_string)
}
