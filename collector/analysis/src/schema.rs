//! JSON Schemas of what the collector prints, from the types it serialises (schemars; their doc comments become
//! the descriptions).

use serde_json::Value;

/// The schema of `T` as serde *writes* it: a member skipped when empty (`skip_serializing_if`) is not required,
/// and nothing describes what reading it back would accept.
pub fn serialized<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::default().for_serialize().into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>()).unwrap_or_default()
}
