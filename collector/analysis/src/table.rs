//! Plain-text tables for the terminal, right-aligned numbers, in the manner of `nsys stats`.

/// Widest cell a table prints; longer names end in `…`.
pub const NAME_WIDTH: usize = 160;

/// `s` with control characters escaped (`\n`, `\x1b`, ...) and cut to [`NAME_WIDTH`] characters.
pub fn terminal_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(NAME_WIDTH * 4));
    for (n, c) in s.chars().enumerate() {
        if n >= NAME_WIDTH {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// One CSV field (RFC 4180): quoted where it holds a comma, a quote or edge spaces; control characters escaped as
/// for the terminal; names whole.
pub fn csv_field(c: &str) -> String {
    let mut out = String::with_capacity(c.len() + 2);
    push_csv_field(c, &mut out);
    out
}

/// [`csv_field`], appended to `out`.
pub fn push_csv_field(c: &str, out: &mut String) {
    let quoted = c.contains([',', '"']) || c.starts_with(' ') || c.ends_with(' ');
    // Control characters are C0, DEL and C1 (U+0080..U+009F, whose UTF-8 starts with 0xC2): a byte scan finds
    // the fields without any, which go out in spans.
    let maybe_control = c.bytes().any(|b| b < 0x20 || b == 0x7f || b == 0xc2);
    if !maybe_control || !c.chars().any(char::is_control) {
        if !quoted {
            out.push_str(c);
            return;
        }
        out.push('"');
        for (i, part) in c.split('"').enumerate() {
            if i > 0 {
                out.push_str("\"\"");
            }
            out.push_str(part);
        }
        out.push('"');
        return;
    }
    if quoted {
        out.push('"');
    }
    for ch in c.chars() {
        match ch {
            '"' => out.push_str("\"\""),
            ch if ch.is_control() => out.extend(ch.escape_default()),
            ch => out.push(ch),
        }
    }
    if quoted {
        out.push('"');
    }
}

/// The unit of a table's time columns (nsys's `--timeunit`): every column whose header says `(ns)` is written in
/// it, exactly (as many decimals as the unit has nanoseconds' digits); JSON keeps nanoseconds, its keys say so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeUnit {
    #[default]
    Ns,
    Us,
    Ms,
    S,
}

impl TimeUnit {
    pub fn label(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Us => "us",
            TimeUnit::Ms => "ms",
            TimeUnit::S => "s",
        }
    }

    /// `ns` nanoseconds in this unit.
    pub fn format(self, ns: u64) -> String {
        match self {
            TimeUnit::Ns => ns.to_string(),
            TimeUnit::Us => format!("{}.{:03}", ns / 1_000, ns % 1_000),
            TimeUnit::Ms => format!("{}.{:06}", ns / 1_000_000, ns % 1_000_000),
            TimeUnit::S => format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000),
        }
    }

    /// A column header in this unit: `Avg (ns)` -> `Avg (ms)`; None for a column that is not a time.
    pub fn header(self, header: &str) -> Option<String> {
        header.strip_suffix(" (ns)").map(|h| format!("{h} ({})", self.label()))
    }
}

pub struct Table {
    title: String,
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Printed instead of the rows (a table whose records were not recorded at all).
    note: Option<String>,
    /// The last column holds names (left-aligned, unpadded); otherwise it is right-aligned like the rest.
    names_last: bool,
}

impl Table {
    /// The title above the table (with the report's name in brackets).
    pub fn title(&self) -> &str {
        &self.title
    }

    /// Says the table's own words (its title and note) otherwise: on another platform, say. Its cells are data.
    pub fn retell(&mut self, say: impl Fn(&str) -> String) {
        self.title = say(&self.title);
        self.note = self.note.as_deref().map(&say);
    }

    pub fn new(title: impl Into<String>, headers: &[&'static str]) -> Table {
        Table::with_headers(title, headers.iter().map(|h| h.to_string()).collect())
    }

    /// A table whose column names are data (step names, ranks): made terminal-safe as cells are.
    pub fn with_headers(title: impl Into<String>, headers: Vec<String>) -> Table {
        Table { title: title.into(), headers, rows: Vec::new(), note: None, names_last: true }
    }

    /// A table whose last column is a figure like the others (a heatmap's last step), right-aligned.
    pub fn figures_last(mut self) -> Table {
        self.names_last = false;
        self
    }

    /// Adds a row. When rendered for a terminal, cells are made safe: control characters escaped (a name is
    /// whatever the program or another tool wrote), and names cut to [`NAME_WIDTH`] characters (JSON and CSV
    /// keep them whole).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The time columns (headers ending in `(ns)`) in `unit`.
    pub fn in_time_unit(&mut self, unit: TimeUnit) {
        if unit == TimeUnit::Ns {
            return;
        }
        for (i, h) in self.headers.iter_mut().enumerate() {
            let Some(renamed) = unit.header(h) else { continue };
            *h = renamed;
            for row in &mut self.rows {
                if let Some(ns) = row.get(i).and_then(|c| c.parse::<u64>().ok()) {
                    row[i] = unit.format(ns);
                }
            }
        }
    }

    /// Shows `note` instead of any rows (e.g. "not recorded: ...").
    pub fn note(&mut self, note: String) {
        self.note = Some(note);
    }

    /// The table as CSV (RFC 4180): a `# title` line, the header, the rows; names whole, control characters
    /// escaped as for the terminal.
    pub fn to_csv(&self, out: &mut String) {
        let field = csv_field;
        out.push_str(&format!("# {}\n", self.title));
        if let Some(note) = &self.note {
            out.push_str(&format!("# {note}\n"));
            return;
        }
        out.push_str(&self.headers.iter().map(|h| field(h)).collect::<Vec<_>>().join(","));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&r.iter().map(|c| field(c)).collect::<Vec<_>>().join(","));
            out.push('\n');
        }
    }

    pub fn render(&self, out: &mut String) {
        let rows: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().map(|c| terminal_safe(c)).collect()).collect();
        out.push_str(&format!("\n{}\n", self.title));
        if let Some(note) = &self.note {
            out.push_str(&format!("  ({})\n", terminal_safe(note)));
            return;
        }
        if self.rows.is_empty() {
            out.push_str("  (none)\n");
            return;
        }
        let headers: Vec<String> = self.headers.iter().map(|h| terminal_safe(h)).collect();
        let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let last = if self.names_last { self.headers.len() - 1 } else { usize::MAX };
        let line = |cells: Vec<&str>, out: &mut String| {
            let mut s = String::from(" ");
            for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                // A last column of names: left-aligned and never padded.
                if i == last {
                    s.push_str(&format!(" {c}"));
                } else {
                    s.push_str(&format!(" {c:>w$}"));
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(headers.iter().map(String::as_str).collect(), out);
        line(widths.iter().map(|w| &"----------------------------------------"[..(*w).min(40)]).collect(), out);
        for r in &rows {
            line(r.iter().map(String::as_str).collect(), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_drive_the_terminal_or_flood_it() {
        assert_eq!(terminal_safe("k\x1b[2J\n"), "k\\u{1b}[2J\\n");
        let long = "x".repeat(10_000);
        assert_eq!(terminal_safe(&long).chars().count(), NAME_WIDTH + 1);
        assert_eq!(terminal_safe("gemm<float>"), "gemm<float>");
    }

    #[test]
    fn csv_quotes_what_needs_it_and_keeps_names_whole() {
        let mut t = Table::new("T", &["Count", "Name"]);
        let long = "y".repeat(500);
        t.row(vec!["3".into(), "f<a, b>\"q\"".into()]);
        t.row(vec!["1".into(), long.clone()]);
        t.row(vec!["2".into(), "k\x1b[2J".into()]);
        let mut out = String::new();
        t.to_csv(&mut out);
        assert_eq!(out, format!("# T\nCount,Name\n3,\"f<a, b>\"\"q\"\"\"\n1,{long}\n2,k\\u{{1b}}[2J\n"));
        // C1 controls (two bytes in UTF-8) are escaped too; text around quotes goes out whole.
        assert_eq!(csv_field("a\u{85}b"), "a\\u{85}b");
        assert_eq!(csv_field("é, \"x\" ü"), "\"é, \"\"x\"\" ü\"");
    }

    /// nsys's `--timeunit`: time columns exact in the unit asked for, the others as they were.
    #[test]
    fn time_columns_take_the_unit_asked_for() {
        let mut t = Table::new("T", &["Total Time (ns)", "Instances", "Med (ns)", "Name"]);
        t.row(vec!["1234567".into(), "3".into(), "5".into(), "k (ns)".into()]);
        t.in_time_unit(TimeUnit::Ms);
        let mut out = String::new();
        t.to_csv(&mut out);
        assert_eq!(out, "# T\nTotal Time (ms),Instances,Med (ms),Name\n1.234567,3,0.000005,k (ns)\n");
        assert_eq!(TimeUnit::S.format(12_000_000_001), "12.000000001");
        assert_eq!(TimeUnit::Us.format(999), "0.999");
    }

    #[test]
    fn a_last_column_of_figures_lines_up_as_the_others_do() {
        let render = |t: &Table| {
            let mut out = String::new();
            t.render(&mut out);
            out
        };
        let mut names = Table::new("T", &["Ms", "Name"]);
        names.row(vec!["12.5".into(), "gemm".into()]);
        names.row(vec!["1.0".into(), "a_longer_name".into()]);
        assert_eq!(render(&names), "\nT\n    Ms Name\n  ---- -------------\n  12.5 gemm\n   1.0 a_longer_name\n");
        let mut figures = Table::with_headers("T", vec!["Rank".into(), "#0".into()]).figures_last();
        figures.row(vec!["r0".into(), "13.52 (3.44)".into()]);
        figures.row(vec!["r1".into(), "14.35".into()]);
        assert_eq!(
            render(&figures),
            "\nT\n  Rank           #0\n  ---- ------------\n    r0 13.52 (3.44)\n    r1        14.35\n"
        );
    }
}
