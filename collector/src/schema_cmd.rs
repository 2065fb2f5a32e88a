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
