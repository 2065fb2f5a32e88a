//! The JSON Schema of `cuflight stats --format json`: [`Stats`]'s own, derived from its types by schemars (their
//! doc comments are its descriptions), with what the command adds around it: the per-event tables
//! ([`event_trace::layout`]) and the nvtx table's two parts. Published by `cuflight schema stats`.

use super::event_trace;
use super::reports::Report;
use super::Stats;
use serde_json::{json, Map, Value};

pub fn json_schema() -> Value {
    let mut schema = crate::schema::serialized::<Stats>();
    let Some(top) = schema.as_object_mut() else { return schema };
    // `--report` prints the tables it names (and with them `not_recorded`), so no key is always there.
    top.remove("required");
    let Some(properties) = top.get_mut("properties").and_then(Value::as_object_mut) else { return schema };
    // Each table's description: its title on the terminal, and the name `--report` takes.
    let empty = Stats::compute(&cuflight_trace::model::trace::Trace::default());
    for report in Report::ALL {
        let (name, key) = report.names();
        if let Some(table) = properties.get_mut(key).and_then(Value::as_object_mut) {
            let title = empty.table(report, false).title().to_string();
            let own = table.get("description").and_then(Value::as_str).map(|d| format!(" {d}")).unwrap_or_default();
            table.insert("description".into(), format!("{title}: `--report {name}`.{own}").into());
        }
    }
    let nvtx = properties.get("nvtx").cloned().unwrap_or(Value::Bool(true));
    for part in Report::PARTS {
        let (name, key) = part.names();
        let mut s = nvtx.clone();
        s["description"] = format!("`--report {name}` only: the rows of `nvtx` of that kind of range").into();
        properties.insert(key.into(), s);
    }
    for report in Report::EVENT_TRACES {
        let (name, key) = report.names();
        let Some((title, columns)) = event_trace::layout(report) else { continue };
        let mut row = Map::new();
        for (header, column) in columns {
            // A cell is a number, a text, or null where the column does not apply to the row (a kernel's bytes).
            let description = format!("{header}; null where it does not apply to the row");
            row.insert((*column).into(), json!({"type": ["integer", "string", "null"], "description": description}));
        }
        let keys: Vec<&str> = columns.iter().map(|c| c.1).collect();
        properties.insert(
            key.into(),
            json!({
                "description": format!("`--report {name}` only: {title}; a row per event, times in ns from the \
                                        start of the trace's timeline"),
                "type": "array",
                "items": {"type": "object", "properties": row, "required": keys},
            }),
        );
    }
    schema
}
