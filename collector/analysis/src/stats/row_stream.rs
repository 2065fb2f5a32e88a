//! A table written row by row as its rows are made, for the reports with a row per event (`cuda_gpu_trace`,
//! `cuda_api_trace`, ...), which grow with the trace: memory holds a preview, never the table. On the terminal the
//! column widths are those of the header and the first [`PREVIEW_ROWS`] rows (a later, wider cell pushes its line
//! out instead of every line being held back); CSV is written as [`Table`](crate::table::Table) writes it; JSON is
//! one member of the caller's object, an array of one object per row.

use super::reports::Style;
use crate::table::{csv_field, push_csv_field, terminal_safe, TimeUnit};
use std::io::{self, Write};

/// Rows held to size the terminal's columns.
pub const PREVIEW_ROWS: usize = 1000;

/// One cell: a number, a text, or nothing (a column that does not apply to the row: a kernel's bytes). Texts
/// are borrowed from the trace's strings where they can be: a row costs no allocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell<'a> {
    Int(u64),
    Text(&'a str),
    Owned(String),
    Empty,
}

impl Cell<'_> {
    fn to_owned_cell(&self) -> Cell<'static> {
        match self {
            Cell::Int(n) => Cell::Int(*n),
            Cell::Text(s) => Cell::Owned(s.to_string()),
            Cell::Owned(s) => Cell::Owned(s.clone()),
            Cell::Empty => Cell::Empty,
        }
    }

    /// Appends the cell as text (numbers in decimal, nothing for an empty cell).
    fn push_to(&self, out: &mut String) {
        match self {
            Cell::Int(n) => out.push_str(itoa::Buffer::new().format(*n)),
            Cell::Text(s) => out.push_str(s),
            Cell::Owned(s) => out.push_str(s),
            Cell::Empty => {}
        }
    }

    fn as_text(&self) -> Option<&str> {
        match self {
            Cell::Text(s) => Some(s),
            Cell::Owned(s) => Some(s),
            _ => None,
        }
    }
}

/// A column: its header on the terminal and in CSV, its key in JSON.
pub type Column = (&'static str, &'static str);

pub struct RowStream<'a> {
    out: &'a mut dyn Write,
    style: Style,
    title: String,
    columns: &'static [Column],
    preview: Vec<Vec<Cell<'static>>>,
    widths: Option<Vec<usize>>,
    rows: u64,
    /// The first write that failed: later rows are not written, and `finish` returns it.
    failed: Option<io::Error>,
    /// The line being made, and a cell's text, kept between rows.
    line: String,
    cell: String,
    /// Unit of the time columns on the terminal and in CSV (and which columns those are).
    unit: TimeUnit,
    is_time: Vec<bool>,
}

impl<'a> RowStream<'a> {
    /// Begins the table (CSV and JSON write their header at once; the terminal waits for its preview); the
    /// time columns (headers ending in `(ns)`) in `unit`, except in JSON.
    pub fn new(
        out: &'a mut dyn Write,
        style: Style,
        title: &str,
        json_key: &str,
        columns: &'static [Column],
        unit: TimeUnit,
    ) -> Self {
        let unit = if style == Style::Json { TimeUnit::Ns } else { unit };
        let is_time = columns.iter().map(|c| unit != TimeUnit::Ns && unit.header(c.0).is_some()).collect();
        let mut s = RowStream {
            out,
            style,
            title: title.to_string(),
            columns,
            preview: Vec::new(),
            widths: None,
            rows: 0,
            failed: None,
            line: String::new(),
            cell: String::new(),
            unit,
            is_time,
        };
        let head = match style {
            Style::Csv => {
                let names: Vec<String> = columns.iter().map(|c| csv_field(&s.header(c.0))).collect();
                format!("# {title}\n{}\n", names.join(","))
            }
            Style::Json => format!("{}: [", serde_json::Value::from(json_key)),
            Style::Table => String::new(),
        };
        s.put(&head);
        s
    }

    /// Adds a row (as many cells as columns).
    pub fn row(&mut self, cells: &[Cell]) {
        if self.failed.is_some() {
            return;
        }
        self.rows += 1;
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        match self.style {
            Style::Table if self.widths.is_none() => {
                self.preview.push(cells.iter().map(Cell::to_owned_cell).collect());
                if self.preview.len() >= PREVIEW_ROWS {
                    self.flush_preview();
                }
            }
            Style::Table => {
                self.table_line(cells, &mut line);
                self.put(&line);
            }
            Style::Csv => {
                for (i, c) in cells.iter().enumerate() {
                    if i > 0 {
                        line.push(',');
                    }
                    match c.as_text() {
                        Some(t) => push_csv_field(t, &mut line),
                        None => push_cell(c, self.is_time[i], self.unit, &mut line),
                    }
                }
                line.push('\n');
                self.put(&line);
            }
            Style::Json => {
                line.push_str(if self.rows == 1 { "\n    {" } else { ",\n    {" });
                for (i, ((_, key), c)) in self.columns.iter().zip(cells).enumerate() {
                    if i > 0 {
                        line.push_str(", ");
                    }
                    line.push('"');
                    line.push_str(key);
                    line.push_str("\": ");
                    match c {
                        Cell::Int(_) => c.push_to(&mut line),
                        Cell::Empty => line.push_str("null"),
                        _ => json_string(c.as_text().unwrap_or(""), &mut line),
                    }
                }
                line.push('}');
                self.put(&line);
            }
        }
        self.line = line;
    }

    /// Ends the table: the rows written, or the first write error.
    pub fn finish(mut self) -> io::Result<u64> {
        match self.style {
            Style::Table => {
                if self.widths.is_none() && self.preview.is_empty() {
                    let none = format!("\n{}\n  (none)\n", self.title);
                    self.put(&none);
                } else if self.widths.is_none() {
                    self.flush_preview();
                }
            }
            Style::Json => self.put(if self.rows == 0 { "]" } else { "\n  ]" }),
            Style::Csv => {}
        }
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(self.rows),
        }
    }

    fn flush_preview(&mut self) {
        let headers: Vec<String> = self.columns.iter().map(|c| self.header(c.0)).collect();
        let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.preview {
            for (i, (w, c)) in widths.iter_mut().zip(r).enumerate() {
                self.cell.clear();
                push_cell(c, self.is_time[i], self.unit, &mut self.cell);
                *w = (*w).max(shown(&self.cell).chars().count());
            }
        }
        let dashes: Vec<String> = widths.iter().map(|w| "-".repeat((*w).min(40))).collect();
        self.widths = Some(widths);
        let title = format!("\n{}\n", self.title);
        self.put(&title);
        let mut line = String::new();
        let header: Vec<Cell> = headers.iter().map(|h| Cell::Text(h)).collect();
        self.table_line(&header, &mut line);
        let dashes: Vec<Cell> = dashes.iter().map(|d| Cell::Text(d)).collect();
        self.table_line(&dashes, &mut line);
        for r in std::mem::take(&mut self.preview) {
            self.table_line(&r, &mut line);
        }
        self.put(&line);
    }

    /// Appends one terminal line: right-aligned figures, the last column (names) left-aligned and unpadded.
    fn table_line(&mut self, cells: &[Cell], line: &mut String) {
        let begin = line.len();
        line.push(' ');
        let widths = self.widths.as_deref().unwrap_or(&[]);
        for (i, c) in cells.iter().enumerate() {
            self.cell.clear();
            push_cell(c, self.is_time.get(i).copied().unwrap_or(false), self.unit, &mut self.cell);
            let text = shown(&self.cell);
            line.push(' ');
            if i + 1 < cells.len() {
                let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(text.chars().count());
                line.extend(std::iter::repeat_n(' ', pad));
            }
            line.push_str(&text);
        }
        let end = begin + line[begin..].trim_end().len();
        line.truncate(end);
        line.push('\n');
    }

    /// A column's header in the table's time unit.
    fn header(&self, h: &str) -> String {
        self.unit.header(h).unwrap_or_else(|| h.to_string())
    }

    fn put(&mut self, s: &str) {
        if self.failed.is_none() {
            if let Err(e) = self.out.write_all(s.as_bytes()) {
                self.failed = Some(e);
            }
        }
    }
}

/// A cell's text: a time column's numbers in `unit`.
fn push_cell(c: &Cell, is_time: bool, unit: TimeUnit, out: &mut String) {
    match c {
        Cell::Int(ns) if is_time => out.push_str(&unit.format(*ns)),
        _ => c.push_to(out),
    }
}

/// A cell as the terminal shows it: as it is, unless it holds control characters or is too long.
fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= crate::table::NAME_WIDTH && !s.chars().any(char::is_control) {
        std::borrow::Cow::Borrowed(s)
    } else {
        std::borrow::Cow::Owned(terminal_safe(s))
    }
}

/// `s` as a JSON string.
fn json_string(s: &str, out: &mut String) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f) {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::Value::from(s).to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: &[Column] = &[("Start (ns)", "start_ns"), ("Bytes", "bytes"), ("Name", "name")];

    fn written(style: Style, rows: &[Vec<Cell>]) -> String {
        let mut out = Vec::new();
        let mut s = RowStream::new(&mut out, style, "T [t]", "t", COLUMNS, TimeUnit::Ns);
        for r in rows {
            s.row(r);
        }
        assert_eq!(s.finish().unwrap(), rows.len() as u64);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_style_writes_what_its_readers_expect() {
        let rows = vec![
            vec![Cell::Int(5), Cell::Empty, Cell::Text("k<a, b>")],
            vec![Cell::Int(1200), Cell::Int(64), Cell::Text("[CUDA memset]")],
        ];
        assert_eq!(
            written(Style::Table, &rows),
            "\nT [t]\n  Start (ns) Bytes Name\n  ---------- ----- -------------\n           5       k<a, b>\n        1200    64 [CUDA memset]\n"
        );
        assert_eq!(
            written(Style::Csv, &rows),
            "# T [t]\nStart (ns),Bytes,Name\n5,,\"k<a, b>\"\n1200,64,[CUDA memset]\n"
        );
        let json = format!("{{{}}}", written(Style::Json, &rows));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["t"][0]["bytes"], serde_json::Value::Null);
        assert_eq!(v["t"][1]["name"], "[CUDA memset]");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&format!("{{{}}}", written(Style::Json, &[]))).unwrap()["t"],
            serde_json::json!([])
        );
        assert!(written(Style::Table, &[]).ends_with("(none)\n"));
        // Names are whatever a program wrote: quoted, escaped, never able to drive the terminal.
        let odd = vec![vec![Cell::Int(1), Cell::Int(2), Cell::Text("k\"q\x1b[2J")]];
        assert_eq!(written(Style::Csv, &odd).lines().last(), Some("1,2,\"k\"\"q\\u{1b}[2J\""));
        let v: serde_json::Value = serde_json::from_str(&format!("{{{}}}", written(Style::Json, &odd))).unwrap();
        assert_eq!(v["t"][0]["name"], "k\"q\x1b[2J");
        // Time columns in the unit asked for, except in JSON.
        let mut out = Vec::new();
        let mut ms = RowStream::new(&mut out, Style::Csv, "T", "t", COLUMNS, TimeUnit::Ms);
        ms.row(&rows[1]);
        ms.finish().unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "# T\nStart (ms),Bytes,Name\n0.001200,64,[CUDA memset]\n");
        assert!(written(Style::Table, &odd).ends_with("1     2 k\"q\\u{1b}[2J\n"));
    }

    /// Past the preview, rows go out as they come, under the preview's widths.
    #[test]
    fn the_terminal_holds_only_its_preview() {
        let mut out = Vec::new();
        let mut s = RowStream::new(&mut out, Style::Table, "T", "t", COLUMNS, TimeUnit::Ns);
        for i in 0..PREVIEW_ROWS as u64 - 1 {
            s.row(&[Cell::Int(i), Cell::Int(1), Cell::Text("k")]);
        }
        assert_eq!(s.preview.len(), PREVIEW_ROWS - 1);
        s.row(&[Cell::Int(7), Cell::Int(1), Cell::Text("k")]);
        s.row(&[Cell::Int(123_456_789_012), Cell::Int(1), Cell::Text("wide")]);
        assert!(s.preview.is_empty());
        s.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 4 + PREVIEW_ROWS + 1, "a blank line, the title, header and dashes, the rows");
        assert!(text.ends_with("  123456789012     1 wide\n"), "{}", &text[text.len() - 60..]);
    }

    /// A reader gone away: the error comes back once, and nothing more is written.
    #[test]
    fn a_failed_write_stops_the_table() {
        struct Closed(u32);
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                self.0 += 1;
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut out = Closed(0);
        let mut s = RowStream::new(&mut out, Style::Csv, "T", "t", COLUMNS, TimeUnit::Ns);
        for _ in 0..10 {
            s.row(&[Cell::Int(1), Cell::Int(2), Cell::Text("k")]);
        }
        assert_eq!(s.finish().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(out.0, 1);
    }
}
