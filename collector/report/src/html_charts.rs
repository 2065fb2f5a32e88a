//! The HTML report's SVG charts, drawn here (no scripts): every chart has its axes with units, tick labels and
//! a legend; the step chart labels its steps; the utilisation chart has a time axis counted from the start of
//! the Perfetto timeline and marks the step boundaries.

use super::html_escape::esc;
use super::ProcessReport;
use std::fmt::Write;

pub const CATEGORIES: [(&str, &str); 7] = [
    ("Kernel", "#4e79a7"),
    ("Memcpy", "#f28e2b"),
    ("Memset", "#edc948"),
    ("Runtime", "#e15759"),
    ("DataLoader", "#76b7b2"),
    ("CPU Exec", "#59a14f"),
    ("Other", "#bab0ac"),
];

const W: f64 = 900.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;

/// About `n` round tick values (1, 2 or 5 times a power of ten) from 0 to at least `max`.
pub fn ticks(max: f64, n: usize) -> Vec<f64> {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return vec![0.0, 1.0];
    }
    let raw = max / n.max(1) as f64;
    let pow = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * pow).find(|s| *s >= raw).unwrap_or(10.0 * pow);
    let count = (max / step).ceil() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

/// A tick value without needless decimals ("0.5", "12", "1.25").
fn label(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The left axis: grid lines, tick labels and the title, for values 0..=top drawn from `y0` (bottom) up `height`.
fn y_axis(out: &mut String, values: &[f64], top: f64, y0: f64, height: f64, title: &str) {
    for &v in values {
        let y = y0 - v / top * height;
        let _ = write!(
            out,
            "<line x1={LEFT} y1={y:.1} x2={} y2={y:.1} class=grid /><text x={} y={:.1} class=axis \
             text-anchor=end>{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            label(v)
        );
    }
    let mid = y0 - height / 2.0;
    let _ = write!(
        out,
        "<text x=14 y={mid:.1} class=title transform=\"rotate(-90 14 {mid:.1})\" text-anchor=middle>{}</text>\
         <line x1={LEFT} y1={y0} x2={LEFT} y2={:.1} class=frame />",
        esc(title),
        y0 - height
    );
}

fn legend(out: &mut String, y: f64, items: &[(&str, &str)]) {
    for (i, (name, color)) in items.iter().enumerate() {
        let x = LEFT + i as f64 * 118.0;
        let _ = write!(
            out,
            "<rect x={x} y={:.1} width=10 height=10 fill=\"{color}\"/><text x={} y={y:.1} class=axis>{}</text>",
            y - 9.0,
            x + 14.0,
            esc(name)
        );
    }
}

/// Stacked bars, one per step (at most 200), heights in ms, each step labelled below its bar (thinned to fit).
pub fn step_chart(out: &mut String, p: &ProcessReport) {
    let steps: Vec<_> = p.steps.iter().take(200).collect();
    if steps.is_empty() {
        return;
    }
    let (h, top_pad, plot_h) = (330.0, 12.0, 230.0);
    let y0 = top_pad + plot_h;
    let max_ms = steps.iter().map(|s| s.duration_ns).max().unwrap_or(1).max(1) as f64 / 1e6;
    let ys = ticks(max_ms, 5);
    let top = *ys.last().unwrap_or(&1.0);
    let shown = if p.steps.len() > steps.len() {
        format!(" (first {} of {})", steps.len(), p.steps.len())
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "<h3>Per-step breakdown{shown}</h3><svg width={W} height={h} viewBox=\"0 0 {W} {h}\" role=img \
         aria-label=\"per-step breakdown\">"
    );
    y_axis(out, &ys, top, y0, plot_h, "time per step (ms)");
    let bw = (W - LEFT - RIGHT) / steps.len() as f64;
    let every = (steps.len() as f64 / 20.0).ceil().max(1.0) as usize;
    for (i, s) in steps.iter().enumerate() {
        let parts = [s.kernel_ns, s.memcpy_ns, s.memset_ns, s.runtime_ns, s.dataloader_ns, s.cpu_exec_ns, s.other_ns];
        let x = LEFT + i as f64 * bw;
        let mut y = y0;
        for (v, (name, color)) in parts.iter().zip(CATEGORIES) {
            let ph = *v as f64 / 1e6 / top * plot_h;
            if ph <= 0.0 {
                continue;
            }
            y -= ph;
            let _ = write!(
                out,
                "<rect x={x:.1} y={y:.1} width={:.1} height={ph:.1} fill=\"{color}\"><title>{} {name}: {:.3} ms \
                 ({:.1}%)</title></rect>",
                (bw - 1.0).max(0.5),
                esc(&s.name),
                *v as f64 / 1e6,
                100.0 * *v as f64 / s.duration_ns.max(1) as f64
            );
        }
        if i % every == 0 {
            // The step's own number where its name has one (ProfilerStep#12 → 12), else its position.
            let tag =
                s.name.rsplit('#').next().filter(|t| t.parse::<u64>().is_ok()).map_or(i.to_string(), str::to_string);
            let _ = write!(
                out,
                "<text x={:.1} y={:.1} class=axis text-anchor=middle>{}</text>",
                x + bw / 2.0,
                y0 + 14.0,
                esc(&tag)
            );
        }
    }
    let _ = write!(
        out,
        "<line x1={LEFT} y1={y0} x2={} y2={y0} class=frame /><text x={:.1} y={:.1} class=title \
         text-anchor=middle>step</text>",
        W - RIGHT,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        y0 + 32.0
    );
    legend(out, h - 12.0, &CATEGORIES);
    out.push_str("</svg>");
}

/// Kernel-busy share over the GPU's span, on a time axis in ms from the timeline's start, with the steps'
/// boundaries as dashed lines (labelled when there are few).
pub fn utilization_chart(out: &mut String, p: &ProcessReport) {
    let (Some((span_start, span_end)), false) = (p.utilization_span_ns, p.utilization_over_time.is_empty()) else {
        return;
    };
    let origin = p.run.trace_start_ns;
    let (h, top_pad, plot_h) = (230.0, 12.0, 160.0);
    let y0 = top_pad + plot_h;
    let ms = |t: u64| t.saturating_sub(origin) as f64 / 1e6;
    let (t0, t1) = (ms(span_start), ms(span_end).max(ms(span_start) + 1e-6));
    let x_of = |t: f64| LEFT + (t - t0) / (t1 - t0) * (W - LEFT - RIGHT);
    let _ = write!(
        out,
        "<h3>GPU utilisation over time</h3><p class=note>Kernel-busy share of 100 equal slices of the GPU's span \
         ({:.3} ms); time from the start of the timeline, as on the Perfetto timeline; dashed lines are step \
         boundaries{}.</p><svg width={W} height={h} viewBox=\"0 0 {W} {h}\" role=img aria-label=\"GPU utilisation\">",
        t1 - t0,
        match p.steps.len().div_ceil(60) {
            0 | 1 => String::new(),
            k => format!(" (every {k}th of {} steps)", p.steps.len()),
        }
    );
    y_axis(out, &[0.0, 25.0, 50.0, 75.0, 100.0], 100.0, y0, plot_h, "kernel busy (%)");
    let n = p.utilization_over_time.len() as f64;
    let mut points = format!("{LEFT},{y0} ");
    for (i, u) in p.utilization_over_time.iter().enumerate() {
        let y = y0 - u.clamp(0.0, 1.0) * plot_h;
        let (a, b) = (t0 + i as f64 / n * (t1 - t0), t0 + (i + 1) as f64 / n * (t1 - t0));
        let _ = write!(points, "{:.1},{y:.1} {:.1},{y:.1} ", x_of(a), x_of(b));
    }
    let _ = write!(points, "{},{y0}", W - RIGHT);
    let _ = write!(out, "<polygon points=\"{points}\" fill=#4e79a7 opacity=0.85 />");
    let few = p.steps.len() <= 12;
    // At most about 60 marks over the whole run (every k-th step), never a hatch over part of it.
    let stride = p.steps.len().div_ceil(60).max(1);
    for s in p.steps.iter().step_by(stride) {
        let t = ms(s.start_ns);
        if t < t0 || t > t1 {
            continue;
        }
        let x = x_of(t);
        let _ = write!(
            out,
            "<line x1={x:.1} y1={top_pad} x2={x:.1} y2={y0} class=step><title>{} starts at {:.3} ms</title></line>",
            esc(&s.name),
            t
        );
        if few {
            let _ =
                write!(out, "<text x={:.1} y={:.1} class=steplabel>{}</text>", x + 2.0, top_pad + 9.0, esc(&s.name));
        }
    }
    // Round times on the timeline (not offsets from the span's start).
    let step = ticks(t1 - t0, 8).get(1).copied().unwrap_or(1.0);
    let first = (t0 / step).ceil() as u64;
    for t in (first..).map(|i| i as f64 * step).take_while(|&t| t <= t1 + 1e-9).take(50) {
        let x = x_of(t);
        let _ = write!(
            out,
            "<line x1={x:.1} y1={y0} x2={x:.1} y2={:.1} class=frame /><text x={x:.1} y={:.1} class=axis \
             text-anchor=middle>{}</text>",
            y0 + 4.0,
            y0 + 16.0,
            label(t)
        );
    }
    let _ = write!(
        out,
        "<line x1={LEFT} y1={y0} x2={} y2={y0} class=frame /><text x={:.1} y={:.1} class=title \
         text-anchor=middle>time from the start of the timeline (ms)</text></svg>",
        W - RIGHT,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        y0 + 36.0
    );
}

/// One horizontal stacked bar of named parts (ms), with the values in the legend.
pub fn parts_bar(out: &mut String, title: &str, parts: &[(&str, u64, &str)]) {
    let total: u64 = parts.iter().map(|p| p.1).sum();
    let _ = write!(out, "<h3>{}</h3>", esc(title));
    if total == 0 {
        out.push_str("<p class=note>none</p>");
        return;
    }
    let h = 34.0 + 20.0 * parts.len().div_ceil(3) as f64;
    let _ = write!(out, "<svg width={W} height={h} viewBox=\"0 0 {W} {h}\" role=img aria-label=\"{}\">", esc(title));
    let mut x = LEFT;
    for (name, v, color) in parts {
        let w = *v as f64 / total as f64 * (W - LEFT - RIGHT);
        if w > 0.0 {
            let _ = write!(
                out,
                "<rect x={x:.1} y=4 width={w:.1} height=18 fill=\"{color}\"><title>{}: {:.3} ms</title></rect>",
                esc(name),
                *v as f64 / 1e6
            );
        }
        x += w;
    }
    for (i, (name, v, color)) in parts.iter().enumerate() {
        let (col, row) = (i % 3, i / 3);
        let (lx, ly) = (LEFT + col as f64 * 280.0, 44.0 + row as f64 * 20.0);
        let _ = write!(
            out,
            "<rect x={lx} y={:.1} width=10 height=10 fill=\"{color}\"/><text x={} y={ly:.1} class=axis>{}: {:.3} ms \
             ({:.1}%)</text>",
            ly - 9.0,
            lx + 14.0,
            esc(name),
            *v as f64 / 1e6,
            100.0 * *v as f64 / total as f64
        );
    }
    out.push_str("</svg>");
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        let labels = |v: Vec<f64>| v.into_iter().map(super::label).collect::<Vec<_>>().join(" ");
        assert_eq!(labels(super::ticks(9.3, 5)), "0 2 4 6 8 10");
        assert_eq!(labels(super::ticks(0.042, 4)), "0 0.02 0.04 0.06");
        assert_eq!(labels(super::ticks(0.0, 5)), "0 1");
        assert_eq!(super::label(0.020000000000000004), "0.02");
    }
}
