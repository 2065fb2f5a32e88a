//! `cuflight schema`: the JSON Schema of a command's `--format json` output, derived by schemars from the types
//! that are serialised (their doc comments are the descriptions), so the published schemas (docs/guide/schemas/,
//! written by scripts/gen-reference, checked by CI) cannot drift from what the commands print.

use crate::cli::SchemaOf;
use anyhow::Result;
use cuflight_collector::analysis::schema::serialized;
use cuflight_collector::analysis::stats;
use cuflight_collector::capture::agents::AgentRow;
use cuflight_collector::report::diff::Diff;
use cuflight_collector::report::Report;
use serde_json::Value;

pub fn print(of: SchemaOf) -> Result<i32> {
    println!("{}", serde_json::to_string_pretty(&schema(of))?);
    Ok(0)
}

pub fn schema(of: SchemaOf) -> Value {
    let (mut schema, command) = match of {
        SchemaOf::Stats => (stats::schema::json_schema(), "cuflight stats --format json"),
        SchemaOf::Report => (serialized::<Report>(), "cuflight report --format json"),
        SchemaOf::Diff => (serialized::<Diff>(), "cuflight diff --format json"),
        SchemaOf::Doctor => (serialized::<crate::doctor::Diagnosis>(), "cuflight doctor --format json"),
        SchemaOf::Ps => (serialized::<Vec<AgentRow>>(), "cuflight ps --format json"),
    };
    // Objects may gain members in later releases: a reader must accept members it does not know.
    schema["description"] = format!(
        "What `{command}` prints (cuflight {}). Times are in nanoseconds unless a name says otherwise; members \
         may be added in later releases.",
        env!("CARGO_PKG_VERSION")
    )
    .into();
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// The paths of the members that have no description, so that the reference documents every JSON field (a
    /// new member without a doc comment fails here, not in a reader's guesswork).
    fn undescribed(node: &Value, at: &str, out: &mut Vec<String>) {
        match node {
            Value::Object(map) => {
                if let Some(Value::Object(members)) = map.get("properties") {
                    for (name, member) in members {
                        if member.get("description").is_none() {
                            out.push(format!("{at}.{name}"));
                        }
                    }
                }
                for (key, value) in map {
                    let at = if key == "properties" { at.to_string() } else { format!("{at}/{key}") };
                    undescribed(value, &at, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| undescribed(item, at, out)),
            _ => {}
        }
    }

    #[test]
    fn every_member_of_every_schema_is_described() {
        let mut missing = Vec::new();
        for of in SchemaOf::value_variants() {
            let name = of.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default();
            undescribed(&schema(*of), &name, &mut missing);
        }
        assert!(missing.is_empty(), "{} members without a description:\n{}", missing.len(), missing.join("\n"));
    }
}
