//! A command's JSON made to fit what a tool returns, still JSON: a report of a long run (a row per step) or the
//! stats of a program with thousands of kernel names is larger than an assistant should read at once, and a text
//! cut in the middle is neither valid JSON nor says what is missing. The largest arrays are shortened instead,
//! keeping their first rows (the tables are sorted most costly first; steps in their order), until the whole fits,
//! and a member `cut` says which arrays lost rows and how many they had.

use serde_json::{json, Value};

/// `value` as indented JSON text of at most `budget` bytes, where shortening arrays can get it there.
pub fn fit(mut value: Value, budget: usize) -> String {
    let mut cuts: Vec<(String, usize, usize)> = Vec::new();
    // Sizes are measured compact, and the text is indented: aim lower by what the indentation added, and again.
    let mut target = budget;
    for _ in 0..4 {
        shorten(&mut value, target, &mut cuts);
        let text = with_note(&value, &cuts);
        if text.len() <= budget {
            return text;
        }
        target = (target as u128 * budget as u128 / text.len() as u128) as usize;
    }
    with_note(&value, &cuts)
}

fn with_note(value: &Value, cuts: &[(String, usize, usize)]) -> String {
    let mut value = value.clone();
    if !cuts.is_empty() {
        if let Value::Object(members) = &mut value {
            members.insert("cut".into(), cut_note(cuts));
        }
    }
    serde_json::to_string_pretty(&value).unwrap_or_default()
}

/// Halves the largest array until `value` (with the note on what was cut) is at most `budget` bytes compact.
fn shorten(value: &mut Value, budget: usize, cuts: &mut Vec<(String, usize, usize)>) {
    // Each round halves the largest array: a few dozen rounds at most, each one walk over the value.
    for _ in 0..64 {
        let mut largest = None;
        let size = sized(value, &mut String::new(), &mut largest) + cuts_size(cuts);
        let Some((_, path, len)) = largest.filter(|_| size > budget) else { break };
        let Some(array) = value.pointer_mut(&path).and_then(Value::as_array_mut) else { break };
        let keep = len / 2;
        array.truncate(keep);
        match cuts.iter_mut().find(|c| c.0 == path) {
            Some(c) => c.2 = keep,
            None => cuts.push((path, len, keep)),
        }
    }
}

fn cut_note(cuts: &[(String, usize, usize)]) -> Value {
    let arrays: Vec<Value> =
        cuts.iter().map(|(path, had, kept)| json!({"array": path, "rows": had, "shown": kept})).collect();
    json!({"why": "the whole is larger than a tool returns: these arrays keep only their first rows (ask for less: \
                   `findings`, `trace_stats` with `tables`, `kernel`, `step`)",
           "arrays": arrays})
}

fn cuts_size(cuts: &[(String, usize, usize)]) -> usize {
    serde_json::to_string(&cut_note(cuts)).map_or(0, |t| t.len())
}

/// `value`'s size as compact JSON (near enough: keys' escapes aside), found bottom up in one walk, noting the
/// largest array of two rows or more met on the way in `best` (size, pointer, rows).
fn sized(value: &Value, at: &mut String, best: &mut Option<(usize, String, usize)>) -> usize {
    let size = match value {
        Value::Array(items) => {
            let mut size = 2 + items.len().saturating_sub(1);
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                size += sized(item, at, best);
                at.truncate(len);
            }
            if items.len() >= 2 && best.as_ref().is_none_or(|b| size > b.0) {
                *best = Some((size, at.clone(), items.len()));
            }
            size
        }
        Value::Object(members) => {
            let mut size = 2 + members.len().saturating_sub(1);
            for (key, member) in members {
                let len = at.len();
                at.push('/');
                at.push_str(&key.replace('~', "~0").replace('/', "~1"));
                size += key.len() + 3 + sized(member, at, best);
                at.truncate(len);
            }
            size
        }
        scalar => serde_json::to_string(scalar).map_or(0, |t| t.len()),
    };
    size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_value_is_unchanged_and_a_large_one_keeps_its_first_rows_and_says_so() {
        let small = json!({"a": [1, 2, 3]});
        assert_eq!(serde_json::from_str::<Value>(&fit(small.clone(), 1000)).unwrap(), small);
        let steps: Vec<Value> = (0..2000).map(|i| json!({"name": format!("step{i}"), "ns": i * 1000})).collect();
        let big = json!({"verdict": "launch_bound", "processes": [{"pid": 7, "steps": steps, "top": [1, 2]}]});
        let text = fit(big, 16 << 10);
        assert!(text.len() <= 20 << 10, "{}", text.len());
        let v: Value = serde_json::from_str(&text).expect("still JSON");
        assert_eq!(v["verdict"], "launch_bound");
        let kept = v["processes"][0]["steps"].as_array().unwrap();
        assert!(!kept.is_empty() && kept[0]["name"] == "step0");
        assert_eq!(v["processes"][0]["top"], json!([1, 2]), "the short arrays stay whole");
        let cut = &v["cut"]["arrays"][0];
        assert_eq!((cut["array"].as_str(), cut["rows"].as_u64()), (Some("/processes/0/steps"), Some(2000)));
        assert_eq!(cut["shown"].as_u64(), Some(kept.len() as u64));
    }

    #[test]
    fn keys_with_slashes_are_escaped_in_pointers() {
        let rows: Vec<Value> = (0..500).map(|i| json!(format!("row {i} with some text"))).collect();
        let v: Value = serde_json::from_str(&fit(json!({"a/b~c": rows}), 2000)).unwrap();
        assert_eq!(v["cut"]["arrays"][0]["array"], "/a~1b~0c");
        assert!(v["a/b~c"].as_array().unwrap().len() < 500);
    }
}
