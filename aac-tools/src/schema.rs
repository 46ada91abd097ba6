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
    close_nested(root);
    if destructive {
        add_confirm(root)?;
    }
    Ok(schema)
}

/// The keywords that make an object schema closed, open on purpose, or composed: a node
/// with any of them is left as it is.
const LEAVE_AS_IS: [&str; 10] = [
    "additionalProperties",
    "unevaluatedProperties",
    "patternProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "$ref",
    "if",
    "dependentSchemas",
    "not",
];

/// Close the nested objects of an input schema as the root is closed, so that an unknown
/// field is refused at any depth (`/inner/bogus`), not only at the root: every object
/// schema with `properties` and none of [`LEAVE_AS_IS`] gets `additionalProperties:
/// false`, inline or under `$defs`. Left open, where closing could refuse what the type
/// takes: a definition referred to next to sibling properties or from an `allOf` (or from
/// an `anyOf`/`oneOf` of a node with properties of its own: a flattened struct or enum, or
/// the payload of an internally tagged newtype variant, whose fields the branch alone does
/// not list), what such a definition refers to as a whole (a newtype's `{"$ref": …}`, its
/// branches), and an inline branch of those. A definition is one schema wherever it is
/// used: one merged somewhere stays open everywhere (a copy per use would close the rest).
fn close_nested(root: &mut Map<String, Value>) {
    let mut open = std::collections::HashSet::new();
    for (key, value) in root.iter() {
        if key != "$defs" && key != "definitions" {
            merged_refs(value, &mut open, 0);
        } else if let Value::Object(defs) = value {
            defs.values().for_each(|def| merged_refs(def, &mut open, 0));
        }
    }
    // The root's own composition: its branches are merged with its properties.
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = root.get(key) {
            open.extend(branches.iter().filter_map(def_name));
        }
    }
    // A definition merged into others merges whatever it refers to as a whole: a newtype
    // (`{"$ref": …}`) and its branches too, through every such step.
    let mut pending: Vec<String> = open.iter().cloned().collect();
    while let Some(name) = pending.pop() {
        let Some(def) = ["$defs", "definitions"]
            .iter()
            .find_map(|defs| root.get(*defs).and_then(|d| d.get(name.as_str())))
        else {
            continue;
        };
        let mut refers = Vec::new();
        refers.extend(def_name(def));
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = def.get(key) {
                refers.extend(branches.iter().filter_map(def_name));
            }
        }
        for target in refers {
            if open.insert(target.clone()) {
                pending.push(target);
            }
        }
    }
    if let Some(Value::Object(props)) = root.get_mut("properties") {
        props.values_mut().for_each(|p| close_schema(p, true, 0));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(value) = root.get_mut(key) {
            close_schema(value, true, 0);
        }
    }
    for defs in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = root.get_mut(defs) {
            for (name, def) in defs.iter_mut() {
                close_schema(def, !open.contains(name.as_str()), 0);
            }
        }
    }
}

/// The definition a `{"$ref": "#/$defs/Name"}` names: the fragment percent-decoded (a
/// name with a space, `<` or a letter outside ASCII is written `C%20Thing`), then read as
/// a JSON pointer's segment.
fn def_name(node: &Value) -> Option<String> {
    let target = node.get("$ref")?.as_str()?;
    let name = target
        .strip_prefix("#/$defs/")
        .or_else(|| target.strip_prefix("#/definitions/"))?;
    let bytes = name.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                decoded.push(u8::try_from(high * 16 + low).unwrap_or(b'%'));
                i += 3;
            }
            (b, _, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    let name = String::from_utf8(decoded).ok()?;
    Some(name.replace("~1", "/").replace("~0", "~"))
}

/// Whether an object schema's node brings properties of its own besides its branches.
fn has_own_properties(map: &Map<String, Value>) -> bool {
    ["properties", "patternProperties"]
        .iter()
        .any(|k| map.contains_key(*k))
        || map
            .get("additionalProperties")
            .is_some_and(Value::is_object)
}

/// The nesting past which schemas are left as they are (a schema is bounded anyway).
const CLOSE_DEPTH: usize = 64;

/// Collect the definitions referred to where their properties are merged with others'.
fn merged_refs(node: &Value, open: &mut std::collections::HashSet<String>, depth: usize) {
    if depth > CLOSE_DEPTH {
        return;
    }
    match node {
        Value::Object(map) => {
            let own = has_own_properties(map);
            if own && let Some(name) = def_name(node) {
                open.insert(name);
            }
            for key in ["allOf", "anyOf", "oneOf"] {
                if let Some(Value::Array(branches)) = map.get(key)
                    && (key == "allOf" || own)
                {
                    open.extend(branches.iter().filter_map(def_name));
                }
            }
            for (key, value) in map {
                if !matches!(key.as_str(), "enum" | "const" | "default" | "examples") {
                    merged_refs(value, open, depth + 1);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| merged_refs(v, open, depth + 1)),
        _ => {}
    }
}

/// Close `node` (when `closable`) and every object schema below it, through the schema
/// keywords only (never into `enum`, `const`, `default` or `examples`, which are values).
fn close_schema(node: &mut Value, closable: bool, depth: usize) {
    if depth > CLOSE_DEPTH {
        return;
    }
    let Value::Object(map) = node else {
        return;
    };
    if closable
        && map.contains_key("properties")
        && !LEAVE_AS_IS.iter().any(|k| map.contains_key(*k))
    {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    let own = has_own_properties(map);
    // The schemas of other values (a property's, an item's): each the whole of its value.
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children
                .values_mut()
                .for_each(|c| close_schema(c, true, depth + 1));
        }
    }
    for key in [
        "items",
        "additionalProperties",
        "unevaluatedProperties",
        "contains",
        "propertyNames",
    ] {
        if let Some(child) = map.get_mut(key) {
            close_schema(child, true, depth + 1);
        }
    }
    // Schemas of this same value beside this node's own (`then` with its properties,
    // `not` turned inside out): never closed themselves, their values' schemas are.
    for key in ["if", "then", "else", "not"] {
        if let Some(child) = map.get_mut(key) {
            close_schema(child, false, depth + 1);
        }
    }
    if let Some(Value::Object(children)) = map.get_mut("dependentSchemas") {
        children
            .values_mut()
            .for_each(|c| close_schema(c, false, depth + 1));
    }
    if let Some(Value::Array(children)) = map.get_mut("prefixItems") {
        children
            .iter_mut()
            .for_each(|c| close_schema(c, true, depth + 1));
    }
    // A branch is the whole of the value it takes unless its node is merged itself (a
    // definition flattened into another's properties) or adds properties of its own.
    for key in ["allOf", "anyOf", "oneOf"] {
        let merged = key == "allOf" || own;
        if let Some(Value::Array(branches)) = map.get_mut(key) {
            branches
                .iter_mut()
                .for_each(|b| close_schema(b, closable && !merged, depth + 1));
        }
    }
}

/// The name under `$defs` of a destructive tool's arguments as they are without
/// `confirm`: no Rust type is named so, so it is never one schemars wrote.
pub(crate) const ARGUMENTS_DEF: &str = "aac-tools.arguments";

const OWN_CONFIRM: &str = "a destructive tool's arguments cannot have their own `confirm` \
                           field: the framework adds it and the handler never sees it";

/// Give a destructive tool's root its required boolean `confirm`, accepted (and required)
/// at the top level whatever the arguments' type, and nowhere else:
///
/// - a recursive type refers to itself as `{"$ref": "#"}`, which would now require
///   `confirm` of every nested node: such references are pointed at a copy of the root as
///   it was, under `$defs` ([`ARGUMENTS_DEF`]);
/// - a closed subschema the root is made of (a `oneOf`/`anyOf`/`allOf` branch with
///   `additionalProperties` or `unevaluatedProperties`, as every variant of a
///   `deny_unknown_fields` enum has) would refuse the `confirm` the root requires: each
///   gets `confirm` among its `properties` too (a branch that is a `$ref` is replaced by
///   a copy, so that the definition, used elsewhere, is unchanged).
///
/// The one schema is advertised and validated, so nothing is relaxed for the caller that
/// the tool's type did not relax: only the name `confirm` is added, at the root.
fn add_confirm(root: &mut Map<String, Value>) -> Result<(), String> {
    let confirm = json!({
        "type": "boolean",
        "description": "This operation is destructive. Set to true only after the user has explicitly confirmed it."
    });
    if root.values().any(refers_to_root) {
        let mut arguments = root.clone();
        arguments.remove("$defs");
        let defs = root
            .entry("$defs")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or("`$defs` is not an object")?;
        if defs.contains_key(ARGUMENTS_DEF) {
            return Err(format!(
                "`$defs` already has a definition `{ARGUMENTS_DEF}`"
            ));
        }
        defs.insert(ARGUMENTS_DEF.to_owned(), Value::Object(arguments));
        let target = format!("#/$defs/{ARGUMENTS_DEF}");
        for value in root.values_mut() {
            point_root_references(value, &target);
        }
    }
    // In a branch, `confirm` is only allowed: the root says what it must be.
    let allowed = json!({"type": "boolean"});
    let defs = root.get("$defs").cloned().unwrap_or(Value::Null);
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = root.get_mut(key) {
            for branch in branches {
                open_for_confirm(branch, &defs, &allowed, 0)?;
            }
        }
    }
    let properties = root
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .ok_or("`properties` is not an object")?;
    if properties.contains_key("confirm") {
        return Err(OWN_CONFIRM.to_owned());
    }
    properties.insert("confirm".to_owned(), confirm);
    let required = root
        .entry("required")
        .or_insert_with(|| Value::Array(Vec::new()));
    match required {
        Value::Array(list) => list.push(json!("confirm")),
        _ => return Err("`required` is not an array".to_owned()),
    }
    Ok(())
}

/// The keywords whose values are data, not subschemas: a `"$ref"` in them is not one.
const DATA_KEYWORDS: [&str; 4] = ["const", "default", "enum", "examples"];

/// Whether some subschema of `schema` is `{"$ref": "#"}` (a recursive type's root).
fn refers_to_root(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.get("$ref").and_then(Value::as_str) == Some("#")
                || map
                    .iter()
                    .any(|(k, v)| !DATA_KEYWORDS.contains(&k.as_str()) && refers_to_root(v))
        }
        Value::Array(items) => items.iter().any(refers_to_root),
        _ => false,
    }
}

/// Every `{"$ref": "#"}` below `schema` made `{"$ref": target}`.
fn point_root_references(schema: &mut Value, target: &str) {
    match schema {
        Value::Object(map) => {
            if map.get("$ref").and_then(Value::as_str) == Some("#") {
                map.insert("$ref".to_owned(), json!(target));
            }
            for (key, value) in map.iter_mut() {
                if !DATA_KEYWORDS.contains(&key.as_str()) {
                    point_root_references(value, target);
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| point_root_references(item, target)),
        _ => {}
    }
}

/// Let a branch of the root (and the branches it is made of) take the root's `confirm`:
/// a closed one gets it among its `properties`. A branch that is a `$ref` into `$defs` is
/// replaced by a copy of the definition, changed, when the definition is closed.
fn open_for_confirm(
    branch: &mut Value,
    defs: &Value,
    confirm: &Value,
    depth: usize,
) -> Result<(), String> {
    // A definition that is its own branch, through `$ref`s: schemars writes none, and a
    // copy of it would never end.
    if depth > 16 {
        return Err("the arguments' schema nests its branches too deeply".to_owned());
    }
    if let Some(reference) = branch.get("$ref").and_then(Value::as_str) {
        let Some(target) = reference
            .strip_prefix("#/$defs/")
            .and_then(|name| defs.get(name))
        else {
            return Ok(());
        };
        let mut copy = target.clone();
        open_for_confirm(&mut copy, defs, confirm, depth + 1)?;
        if copy != *target {
            let Value::Object(map) = branch else {
                return Ok(());
            };
            let Value::Object(copy) = copy else {
                return Ok(());
            };
            map.remove("$ref");
            for (key, value) in copy {
                map.entry(key).or_insert(value);
            }
        }
        return Ok(());
    }
    let Value::Object(map) = branch else {
        return Ok(());
    };
    let has_own = map
        .get("properties")
        .is_some_and(|p| p.get("confirm").is_some());
    if has_own {
        return Err(OWN_CONFIRM.to_owned());
    }
    let closed = ["additionalProperties", "unevaluatedProperties"]
        .iter()
        .any(|k| map.get(*k).is_some_and(|v| *v != Value::Bool(true)));
    if closed {
        map.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or("a branch's `properties` is not an object")?
            .insert("confirm".to_owned(), confirm.clone());
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = map.get_mut(key) {
            for branch in branches {
                open_for_confirm(branch, defs, confirm, depth + 1)?;
            }
        }
    }
    Ok(())
}

/// The name under `$defs` of a wrapped output's own schema, when the type refers to
/// itself: no Rust type is named so, so it is never one schemars wrote.
const OUTPUT_DEF: &str = "aac-tools.output";

/// An output schema as MCP wants it: an object at the root. A schema that is not
/// (`String`, `Vec<T>`, `Option<T>`, an enum…) is wrapped as `{"result": …}`; the `bool`
/// says so. Its `$defs` move to the new root as they are.
///
/// A recursive type refers to itself as `{"$ref": "#"}`, which would now be the wrapper
/// (and every correct output refused): then the old root goes under `$defs`
/// ([`OUTPUT_DEF`]), and `result` and every reference into the old root (`#`, or a
/// pointer below it other than `#/$defs/…`) point at it.
pub(crate) fn finish_output_schema(mut schema: Value) -> Result<(Value, bool), String> {
    let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
    if is_object {
        return Ok((schema, false));
    }
    let mut defs = schema.as_object_mut().and_then(|m| m.remove("$defs"));
    let target = format!("#/$defs/{OUTPUT_DEF}");
    let mut recursive = point_old_root_references(&mut schema, &target);
    if let Some(Value::Object(defs)) = &mut defs {
        for def in defs.values_mut() {
            recursive |= point_old_root_references(def, &target);
        }
    }
    if recursive {
        let defs = defs
            .get_or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or("`$defs` is not an object")?;
        if defs.contains_key(OUTPUT_DEF) {
            return Err(format!("`$defs` already has a definition `{OUTPUT_DEF}`"));
        }
        defs.insert(OUTPUT_DEF.to_owned(), schema);
        schema = json!({ "$ref": target });
    }
    let mut root = Map::new();
    root.insert("type".to_owned(), json!("object"));
    root.insert("properties".to_owned(), json!({ "result": schema }));
    root.insert("required".to_owned(), json!(["result"]));
    if let Some(defs) = defs {
        root.insert("$defs".to_owned(), defs);
    }
    Ok((Value::Object(root), true))
}

/// Every `$ref` into the old root of a wrapped output below `schema` (`#`, or a pointer
/// below it other than `#/$defs/…`, whose definitions move as they are) pointed into
/// `target`, where the old root is now; whether there was one.
fn point_old_root_references(schema: &mut Value, target: &str) -> bool {
    let mut found = false;
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref") {
                let moved = reference
                    .strip_prefix('#')
                    .filter(|below| {
                        below.is_empty()
                            || (below.starts_with('/')
                                && *below != "/$defs"
                                && !below.starts_with("/$defs/"))
                    })
                    .map(|below| format!("{target}{below}"));
                if let Some(moved) = moved {
                    *reference = moved;
                    found = true;
                }
            }
            for (key, value) in map.iter_mut() {
                match key.as_str() {
                    // Data, not subschemas: a `"$ref"` in them is not one.
                    k if DATA_KEYWORDS.contains(&k) => {}
                    // Subschemas by name: a property may be named `default`.
                    "properties" | "patternProperties" | "dependentSchemas" | "$defs" => {
                        if let Value::Object(named) = value {
                            for subschema in named.values_mut() {
                                found |= point_old_root_references(subschema, target);
                            }
                        }
                    }
                    _ => found |= point_old_root_references(value, target),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                found |= point_old_root_references(item, target);
            }
        }
        _ => {}
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nested objects are closed, but never a schema that applies to the same value beside
    /// a node's own properties (`then`, `not`, `dependentSchemas`, a definition merged
    /// through a percent-encoded `$ref` or a newtype's `$ref`).
    #[test]
    fn only_schemas_that_are_the_whole_of_their_value_are_closed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "plain": {"type": "object", "properties": {"a": {"type": "integer"}}},
                "cond": {
                    "type": "object",
                    "properties": {"kind": {"type": "string"}},
                    "if": {"properties": {"kind": {"const": "x"}}},
                    "then": {"properties": {"x": {"type": "integer"}}},
                    "not": {"properties": {"kind": {"const": "no"}}, "required": ["kind"]},
                    "dependentSchemas": {"kind": {"properties": {"d": {"type": "integer"}}}}
                },
                "tagged": {"oneOf": [{
                    "$ref": "#/$defs/C%20Thing",
                    "properties": {"kind": {"const": "R"}},
                    "required": ["kind"]
                }]},
                "wrapped": {
                    "$ref": "#/$defs/Wrap",
                    "properties": {"kind": {"const": "W"}}
                }
            },
            "$defs": {
                "C Thing": {"type": "object", "properties": {"c": {"type": "integer"}}},
                "Wrap": {"$ref": "#/$defs/Inner"},
                "Inner": {"type": "object", "properties": {"i": {"type": "integer"}}}
            }
        });
        let finished = finish_input_schema(schema, false).unwrap();
        let validator = jsonschema::validator_for(&finished).unwrap();
        for valid in [
            json!({"plain": {"a": 1}}),
            json!({"cond": {"kind": "x", "x": 1, "d": 2}}),
            json!({"tagged": {"kind": "R", "c": 1}}),
            json!({"wrapped": {"kind": "W", "i": 1}}),
        ] {
            assert!(validator.is_valid(&valid), "{valid} refused: {finished}");
        }
        assert!(!validator.is_valid(&json!({"plain": {"a": 1, "b": 2}})));
        assert_eq!(
            finished["properties"]["plain"]["additionalProperties"],
            false
        );
        for open in [
            &finished["properties"]["cond"]["then"],
            &finished["properties"]["cond"]["not"],
            &finished["$defs"]["C Thing"],
            &finished["$defs"]["Inner"],
        ] {
            assert!(open.get("additionalProperties").is_none(), "{open}");
        }
    }

    /// A closed branch reached through `allOf` and a `$ref` takes the root's `confirm`,
    /// as a copy: the definition, which other properties may use, keeps refusing it.
    #[test]
    fn a_closed_branch_behind_a_reference_takes_confirm_as_a_copy() {
        let schema = json!({
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/A"}},
            "allOf": [{"$ref": "#/$defs/A"}],
            "unevaluatedProperties": false,
            "$defs": {"A": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "additionalProperties": false
            }}
        });
        let finished = finish_input_schema(schema, true).unwrap();
        assert_eq!(
            finished["$defs"]["A"]["properties"],
            json!({"a": {"type": "string"}})
        );
        let validator = jsonschema::validator_for(&finished).unwrap();
        assert!(validator.is_valid(&json!({"a": "x", "confirm": true})));
        assert!(!validator.is_valid(&json!({"a": "x"})));
        assert!(!validator.is_valid(&json!({"a": "x", "b": 1, "confirm": true})));
        assert!(!validator.is_valid(&json!({"confirm": true, "item": {"confirm": true}})));
    }

    /// A variant with its own `confirm` field is refused as a struct's is: the handler
    /// would never see it.
    #[test]
    fn a_branch_with_its_own_confirm_is_refused() {
        let schema = json!({
            "oneOf": [
                {"type": "object", "properties": {"confirm": {"type": "string"}}},
                {"type": "object", "properties": {"b": {"type": "string"}}}
            ]
        });
        let err = finish_input_schema(schema, true).unwrap_err();
        assert!(err.contains("their own `confirm`"), "{err}");
    }

    /// An output as the pipeline checks it: wrapped, then compiled as the registry does.
    fn output_validator(schema: Value) -> jsonschema::Validator {
        let (wrapped, wrap) = finish_output_schema(schema).unwrap();
        assert!(wrap, "{wrapped}");
        let Value::Object(wrapped) = wrapped else {
            panic!("{wrapped}")
        };
        crate::registry::compile_schema(&wrapped).unwrap()
    }

    #[derive(serde::Serialize, JsonSchema)]
    enum Expr {
        Num(i64),
        Neg(Box<Expr>),
    }

    /// A recursive enum (not an object at its root, so wrapped) refers to itself as
    /// `{"$ref": "#"}`: wrapped, that is still the enum, not the wrapper. (It was the
    /// wrapper, and every correct output was refused 500 `invalid_output`.)
    #[test]
    fn a_wrapped_recursive_output_still_refers_to_itself() {
        let schema = output_schema_for::<Expr>();
        assert!(refers_to_root(&schema), "{schema}");
        let validator = output_validator(schema);
        let negated = serde_json::to_value(Expr::Neg(Box::new(Expr::Num(1)))).unwrap();
        assert_eq!(negated, json!({"Neg": {"Num": 1}}));
        assert!(validator.is_valid(&json!({ "result": negated })));
        assert!(validator.is_valid(&json!({"result": {"Num": 2}})));
        assert!(!validator.is_valid(&json!({"result": {"Neg": {"result": {"Num": 1}}}})));
        assert!(!validator.is_valid(&json!({"Neg": {"Num": 1}})));
    }

    /// A pointer into the old root other than `#/$defs/…` (one a hand-written schema may
    /// hold), from the root or from a definition, follows the old root too; definitions
    /// stay where they are.
    #[test]
    fn a_pointer_into_a_wrapped_root_follows_it() {
        let validator = output_validator(json!({
            "type": "array",
            "prefixItems": [{"type": "string"}],
            "items": {"$ref": "#/$defs/Item"},
            "$defs": {"Item": {"anyOf": [{"$ref": "#/prefixItems/0"}, {"$ref": "#"}]}}
        }));
        assert!(validator.is_valid(&json!({"result": ["a", "b", ["c", ["d"]]]})));
        assert!(!validator.is_valid(&json!({"result": ["a", 1]})));
        assert!(!validator.is_valid(&json!({"result": ["a", {"result": ["c"]}]})));
    }

    /// A type that does not refer to itself is wrapped as it always was.
    #[test]
    fn a_wrapped_output_without_recursion_is_left_as_it_was() {
        let schema = json!({
            "type": "array",
            "items": {"$ref": "#/$defs/A"},
            "$defs": {"A": {"type": "string"}}
        });
        let (wrapped, _) = finish_output_schema(schema).unwrap();
        assert_eq!(
            wrapped,
            json!({
                "type": "object",
                "properties": {"result": {"type": "array", "items": {"$ref": "#/$defs/A"}}},
                "required": ["result"],
                "$defs": {"A": {"type": "string"}}
            })
        );
    }
}
