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

pub struct Table {
    title: String,
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&'static str]) -> Table {
        Table { title: title.into(), headers: headers.to_vec(), rows: Vec::new() }
    }

    /// Adds a row. Cells are made safe for a terminal: control characters escaped (a name is whatever the
    /// program or another tool wrote), and names cut to [`NAME_WIDTH`] characters (JSON keeps them whole).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(|c| terminal_safe(&c)).collect());
    }

    pub fn render(&self, out: &mut String) {
        out.push_str(&format!("\n{}\n", self.title));
        if self.rows.is_empty() {
            out.push_str("  (none)\n");
            return;
        }
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let last = self.headers.len() - 1;
        let line = |cells: Vec<&str>, out: &mut String| {
            let mut s = String::from(" ");
            for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                // The last column holds names: left-aligned and never padded.
                if i == last {
                    s.push_str(&format!(" {c}"));
                } else {
                    s.push_str(&format!(" {c:>w$}"));
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(self.headers.clone(), out);
        line(widths.iter().map(|w| &"----------------------------------------"[..(*w).min(40)]).collect(), out);
        for r in &self.rows {
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
}
