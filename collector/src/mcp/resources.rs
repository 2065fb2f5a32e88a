//! The MCP server's resources: the JSON Schemas of what the tools return (those `cuflight schema` prints), so an
//! assistant can learn what every field of a report, a stats table or a diff means when it needs to, without the
//! schemas (68 KB each for stats and report) filling every `tools/list` answer as `outputSchema`s would.

use crate::cli::SchemaOf;
use clap::ValueEnum;
use serde_json::{json, Value};

/// The specification's error code for a resource that does not exist.
pub const RESOURCE_NOT_FOUND: i64 = -32002;

const PREFIX: &str = "cuflight://schema/";

fn name_of(of: SchemaOf) -> String {
    of.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
}

/// The URI of the schema of `of`'s output, as tool descriptions cite it.
pub fn uri(of: SchemaOf) -> String {
    format!("{PREFIX}{}", name_of(of))
}

pub fn list() -> Value {
    let resources: Vec<Value> = SchemaOf::value_variants()
        .iter()
        .map(|&of| {
            let name = name_of(of);
            json!({"uri": uri(of), "name": format!("{name}.schema.json"),
                   "title": format!("JSON Schema of cuflight {name} --format json"),
                   "description": format!("What every member of `cuflight {name} --format json` means (JSON Schema \
                                           draft 2020-12): read it to interpret a tool's result."),
                   "mimeType": "application/schema+json"})
        })
        .collect();
    json!({"resources": resources})
}

/// `resources/read`. Err: (JSON-RPC error code, message).
pub fn read(params: &Value) -> Result<Value, (i64, String)> {
    let asked = params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or((super::INVALID_PARAMS, "`uri` must be a string: one that resources/list lists".into()))?;
    let of = SchemaOf::value_variants()
        .iter()
        .copied()
        .find(|&of| uri(of) == asked)
        .ok_or_else(|| (RESOURCE_NOT_FOUND, format!("no resource {asked} (resources/list lists them)")))?;
    let text = serde_json::to_string_pretty(&crate::schema_cmd::schema(of)).unwrap_or_default();
    Ok(json!({"contents": [{"uri": asked, "mimeType": "application/schema+json", "text": text}]}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_schema_reads_back_and_an_unknown_one_is_not_found() {
        let listed = list();
        let uris: Vec<&str> =
            listed["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
        assert!(uris.contains(&"cuflight://schema/report"), "{uris:?}");
        for u in &uris {
            let r = read(&json!({"uri": u})).unwrap();
            let schema: Value = serde_json::from_str(r["contents"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema", "{u}");
        }
        assert_eq!(read(&json!({"uri": "cuflight://schema/nope"})).unwrap_err().0, RESOURCE_NOT_FOUND);
        assert_eq!(read(&json!({})).unwrap_err().0, super::super::INVALID_PARAMS);
    }
}
