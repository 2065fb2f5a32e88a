//! For the terminal: NVTX ranges whose names differ only by numbers (`ProfilerStep#0` ... `ProfilerStep#999`,
//! `layer_3/attn`) become one row, so the default tables stay a few screens long whatever the run's length. JSON
//! and CSV keep every row.

use std::cmp::Ordering;

/// The name with every run of digits replaced by `*` (`ProfilerStep#12` → `ProfilerStep#*`).
pub fn pattern(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// Names in natural order: runs of digits compare as numbers (`#2` before `#10`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (trim_zeros(&a[..da]), trim_zeros(&b[..db]));
                let ord = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if ord != Ordering::Equal {
                    return ord;
                }
                (a, b) = (&a[da..], &b[db..]);
            }
            (Some(x), Some(y)) if x != y => return x.cmp(y),
            _ => (a, b) = (&a[1..], &b[1..]),
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().take_while(|&&c| c == b'0').count();
    &d[n.min(d.len().saturating_sub(1))..]
}

/// Rows as the terminal shows them: a row alone, or the rows of one name pattern together.
pub enum Shown<'a, T> {
    One(&'a T),
    Group { pattern: String, rows: Vec<&'a T> },
}

/// Groups rows whose `key` (domain, kind...) is equal and whose names share a pattern, when a pattern has two or
/// more names; each group sits where its first row was.
pub fn group<'a, T>(rows: &[&'a T], name: impl Fn(&T) -> &str, key: impl Fn(&T) -> String) -> Vec<Shown<'a, T>> {
    let mut index: std::collections::HashMap<(String, String), usize> = Default::default();
    let mut out: Vec<Shown<'a, T>> = Vec::new();
    let mut members: Vec<Vec<&'a T>> = Vec::new();
    for &r in rows {
        let p = pattern(name(r));
        let at = *index.entry((key(r), p.clone())).or_insert_with(|| {
            members.push(Vec::new());
            out.push(Shown::Group { pattern: p, rows: Vec::new() });
            members.len() - 1
        });
        members[at].push(r);
    }
    out.into_iter()
        .zip(members)
        .map(|(shown, rows)| match shown {
            Shown::Group { pattern, .. } if rows.len() > 1 => Shown::Group { pattern, rows },
            _ => Shown::One(rows[0]),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_names_share_a_pattern_and_sort_naturally() {
        assert_eq!(pattern("ProfilerStep#12"), "ProfilerStep#*");
        assert_eq!(pattern("layer_3/attn_10"), "layer_*/attn_*");
        assert_eq!(pattern("forward"), "forward");
        let mut v = vec!["ProfilerStep#10", "ProfilerStep#2", "ProfilerStep#1", "a", "ProfilerStep#007"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#007", "ProfilerStep#10", "a"]);
    }

    #[test]
    fn only_patterns_with_several_names_are_grouped() {
        let rows = ["ProfilerStep#0", "forward", "ProfilerStep#1", "step 3"];
        let refs: Vec<&&str> = rows.iter().collect();
        let shown = group(&refs, |r| r, |_| String::new());
        let kinds: Vec<String> = shown
            .iter()
            .map(|s| match s {
                Shown::One(r) => r.to_string(),
                Shown::Group { pattern, rows } => format!("{pattern} x{}", rows.len()),
            })
            .collect();
        assert_eq!(kinds, ["ProfilerStep#* x2", "forward", "step 3"]);
    }
}
