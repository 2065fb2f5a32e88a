//! Plain-text tables for the terminal, right-aligned numbers, in the manner of `nsys stats`.

pub struct Table {
    title: String,
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&'static str]) -> Table {
        Table { title: title.into(), headers: headers.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
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
