//! JSON Schema generation (schemars 1, JSON Schema 2020-12) and the adjustments every
//! advertised schema gets.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

/// The root schema of `T`: draft 2020-12, definitions under `$defs`, no top-level
/// `$schema` and no top-level `title` (the tool has its own).
pub(crate) fn root_schema_for<T: JsonSchema>() -> Value {
    root_schema_with::<T>(SchemaSettings::draft2020_12())
}

/// The root schema of `T` as it is *serialized* (a tool's output): a field skipped when
/// empty (`skip_serializing_if`) is not required, an `Option` always written is. The
/// schema of how it is read (the default) required a field the output leaves out, and
/// hosts that check `structuredContent` against `outputSchema` (the TypeScript and
/// Python SDKs) refused the tool's answers.
pub(crate) fn output_schema_for<T: JsonSchema>() -> Value {
    root_schema_with::<T>(SchemaSettings::draft2020_12().for_serialize())
}

fn root_schema_with<T: JsonSchema>(settings: SchemaSettings) -> Value {
    let settings = settings.with(|s| s.meta_schema = None);
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Value::Object(map) = &mut value {
        map.remove("title");
    }
    value
}

/// Whether the root is a `oneOf` or `anyOf` whose every branch is an object (a `$ref`
/// into `$defs` followed), as an enum of struct variants is.
fn every_branch_is_an_object(root: &Map<String, Value>) -> bool {
    let Some(branches) = root
        .get("oneOf")
        .or_else(|| root.get("anyOf"))
        .and_then(Value::as_array)
    else {
        return false;
    };
    let is_object = |branch: &Value| {
        let branch = match branch.get("$ref").and_then(Value::as_str) {
            Some(reference) => reference
                .strip_prefix("#/$defs/")
                .and_then(|name| root.get("$defs")?.get(name)),
            None => Some(branch),
        };
        branch
            .and_then(|b| b.get("type"))
            .is_some_and(|t| t == "object")
    };
    !branches.is_empty() && branches.iter().all(is_object)
}

/// The input schema of a tool with no arguments.
pub(crate) fn empty_object() -> Value {
    json!({"type": "object", "properties": {}})
}

/// Make an input schema strict and complete, as advertised and as validated:
/// unknown properties are refused (`additionalProperties: false`, or
/// `unevaluatedProperties: false` when the root composes subschemas), and destructive
/// tools get their required boolean `confirm`.
pub(crate) fn finish_input_schema(mut schema: Value, destructive: bool) -> Result<Value, String> {
    let Value::Object(root) = &mut schema else {
        return Err("the input schema is not a JSON object".to_owned());
    };
    match root.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        None if root.contains_key("properties") => {
            root.insert("type".to_owned(), json!("object"));
        }
        // An enum of struct variants (`#[serde(tag = "kind")]`): every branch an object.
        None if every_branch_is_an_object(root) => {
            root.insert("type".to_owned(), json!("object"));
        }
        other => {
            return Err(format!(
                "an MCP input schema must have `\"type\": \"object\"` at its root, found {}: \
                 a tool's arguments are one struct (or an enum whose variants are all \
                 structs, tagged) deriving `Deserialize` and `JsonSchema`, such as \
                 `async fn get_note(args: GetNote)` with `struct GetNote {{ id: i64 }}`, \
                 not a bare value",
                other.map_or("no type".to_owned(), Value::to_string)
            ));
        }
    }
    if !root.contains_key("properties") {
        root.insert("properties".to_owned(), Value::Object(Map::new()));
    }
    let composed = ["allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas"]
        .iter()
        .any(|k| root.contains_key(*k));
    if !root.contains_key("additionalProperties") && !root.contains_key("unevaluatedProperties") {
        let key = if composed {
            "unevaluatedProperties"
        } else {
            "additionalProperties"
        };
        root.insert(key.to_owned(), Value::Bool(false));
    }
    if destructive {
        let properties = root
            .get_mut("properties")
            .and_then(Value::as_object_mut)
            .ok_or("`properties` is not an object")?;
        if properties.contains_key("confirm") {
            return Err(
                "a destructive tool's arguments cannot have their own `confirm` field: \
                 the framework adds it and the handler never sees it"
                    .to_owned(),
            );
        }
        properties.insert(
            "confirm".to_owned(),
            json!({
                "type": "boolean",
                "description": "This operation is destructive. Set to true only after the user has explicitly confirmed it."
            }),
        );
        let required = root
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        match required {
            Value::Array(list) => list.push(json!("confirm")),
            _ => return Err("`required` is not an array".to_owned()),
        }
    }
    Ok(schema)
}

/// An output schema as MCP wants it: an object at the root. A schema that is not
/// (`String`, `Vec<T>`, `Option<T>`…) is wrapped as `{"result": …}`; the `bool` says so.
pub(crate) fn finish_output_schema(mut schema: Value) -> (Value, bool) {
    let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
    if is_object {
        return (schema, false);
    }
    let defs = schema.as_object_mut().and_then(|m| m.remove("$defs"));
    let mut root = Map::new();
    root.insert("type".to_owned(), json!("object"));
    root.insert("properties".to_owned(), json!({ "result": schema }));
    root.insert("required".to_owned(), json!(["result"]));
    if let Some(defs) = defs {
        root.insert("$defs".to_owned(), defs);
    }
    (Value::Object(root), true)
}
