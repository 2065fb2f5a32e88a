//! The line `cuflight record` keeps on stderr while it records, when stderr is a terminal (as `nsys profile`
//! and `perf record` do): elapsed time, processes, events and events per second, drops, file size. Redrawn once
//! a second in place, cleared before the summary; never written to a pipe or a file.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// A recording's progress (see `session::Session::progress`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub processes: usize,
    pub events: u64,
    pub dropped: u64,
    pub bytes: u64,
}

pub struct StatusLine {
    on: bool,
    started: Instant,
    last: Instant,
    last_events: u64,
    shown: bool,
}

impl StatusLine {
    pub fn for_stderr() -> StatusLine {
        let now = Instant::now();
        StatusLine { on: std::io::stderr().is_terminal(), started: now, last: now, last_events: 0, shown: false }
    }

    /// Redraws the line when a second has passed since the last time (`progress` is asked only then).
    pub fn show(&mut self, progress: impl FnOnce() -> Progress) {
        if !self.on || self.last.elapsed() < Duration::from_secs(1) {
            return;
        }
        let p = progress();
        let dt = self.last.elapsed().as_secs_f64();
        let rate = p.events.saturating_sub(self.last_events) as f64 / dt.max(1e-3);
        self.last = Instant::now();
        self.last_events = p.events;
        let line = render(self.started.elapsed(), &p, rate);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{line}");
        let _ = err.flush();
        self.shown = true;
    }

    pub fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
            self.shown = false;
        }
    }
}

fn render(elapsed: Duration, p: &Progress, rate: f64) -> String {
    let secs = elapsed.as_secs();
    format!(
        "cuflight: recording {}:{:02} | {} process{} | {} events ({}/s) | {} dropped | {}",
        secs / 60,
        secs % 60,
        p.processes,
        if p.processes == 1 { "" } else { "es" },
        p.events,
        si(rate),
        p.dropped,
        bytes(p.bytes)
    )
}

fn si(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

fn bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_reads_like_a_progress_meter() {
        let p = Progress { processes: 2, events: 1_234_567, dropped: 0, bytes: 5 << 20 };
        assert_eq!(
            render(Duration::from_secs(75), &p, 250_000.0),
            "cuflight: recording 1:15 | 2 processes | 1234567 events (250.0k/s) | 0 dropped | 5.0 MiB"
        );
        let one = Progress { processes: 1, events: 10, dropped: 3, bytes: 100 };
        assert!(render(Duration::ZERO, &one, 10.0).contains("| 1 process |"));
    }
}
