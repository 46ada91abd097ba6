//! A destructive tool's `confirm` is accepted (and required) at the top level whatever
//! its arguments' type, and required nowhere else: an enum whose every variant is closed
//! (`deny_unknown_fields`) can run, and a recursive type's nested nodes need no `confirm`.
// The arguments are read through `Debug`, which dead-code analysis does not count.
#![allow(dead_code)]

use aac_tools::audit::MemorySink;
use aac_tools::{
    CallRequest, Principal, Registry, Server, StaticTokens, Status, Text, ToolError, mcp_tool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Internally tagged, closed: every `oneOf` branch has `additionalProperties: false`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "op", deny_unknown_fields)]
enum Op {
    One { id: i64 },
    All,
}

/// Delete one note or all of them.
#[mcp_tool(destructive, scope = "t:delete")]
async fn purge(args: Op) -> Result<Text, ToolError> {
    Ok(Text(format!("{args:?}")))
}

/// Untagged, of closed structs: every `anyOf` branch is a `$ref` to a definition with
/// `additionalProperties: false`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
enum Target {
    Id(ById),
    Tag(ByTag),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ById {
    id: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ByTag {
    tag: String,
}

/// Delete by id or by tag.
#[mcp_tool(destructive, scope = "t:delete")]
async fn purge_by(args: Target) -> Result<Text, ToolError> {
    Ok(Text(format!("{args:?}")))
}

/// Recursive: `children.items` is `{"$ref": "#"}`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Tree {
    name: String,
    #[serde(default)]
    children: Vec<Tree>,
}

/// Delete a tree of folders.
#[mcp_tool(destructive, scope = "t:delete")]
async fn prune(args: Tree) -> Result<Text, ToolError> {
    Ok(Text(format!("{args:?}")))
}

fn server() -> Server {
    Server::builder(Registry::collect_module(module_path!()).unwrap())
        .verifier(StaticTokens::new().with("t", Principal::new("t", ["t:delete"])))
        .audit(MemorySink::new())
        .build()
        .unwrap()
}

async fn call(server: &Server, tool: &str, arguments: Value) -> Result<String, (Status, String)> {
    let answer = server
        .call(CallRequest::new(tool, Some(arguments)).bearer("t"))
        .await;
    match answer.error() {
        Some(err) => Err((err.status(), err.reason().to_owned())),
        None => Ok(answer.to_mcp_json()["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()),
    }
}

fn confirm_missing() -> Result<String, (Status, String)> {
    Err((Status::BadRequest, "destructive_flag_missing".to_owned()))
}

#[tokio::test]
async fn a_closed_enum_runs_with_confirm_and_only_with_it() {
    let server = server();
    for (tool, arguments, ran) in [
        ("purge", json!({"op": "All"}), "All"),
        ("purge", json!({"op": "One", "id": 3}), "One { id: 3 }"),
        ("purge_by", json!({"id": 3}), "Id(ById { id: 3 })"),
        (
            "purge_by",
            json!({"tag": "old"}),
            "Tag(ByTag { tag: \"old\" })",
        ),
    ] {
        assert_eq!(
            call(&server, tool, arguments.clone()).await,
            confirm_missing()
        );
        let mut confirmed = arguments.clone();
        confirmed["confirm"] = json!(true);
        assert_eq!(
            call(&server, tool, confirmed).await,
            Ok(ran.to_owned()),
            "{tool} {arguments}"
        );
    }
    // Still closed: a property of no variant is refused, whether or not it is confirmed.
    let answer = call(
        &server,
        "purge",
        json!({"op": "All", "id": 1, "confirm": true}),
    )
    .await;
    assert_eq!(
        answer,
        Err((Status::BadRequest, "invalid_arguments".to_owned()))
    );
}

#[tokio::test]
async fn a_recursive_type_needs_confirm_at_the_top_only() {
    let server = server();
    let nested = json!({"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]});
    assert_eq!(
        call(&server, "prune", nested.clone()).await,
        confirm_missing()
    );
    let mut confirmed = nested;
    confirmed["confirm"] = json!(true);
    let ran = call(&server, "prune", confirmed).await.expect("ran");
    assert!(ran.contains("name: \"c\""), "{ran}");
    // A nested node is still the type: one with a property it lacks is refused.
    let odd = json!({"name": "a", "confirm": true, "children": [{"name": "b", "x": 1}]});
    assert_eq!(
        call(&server, "prune", odd).await,
        Err((Status::BadRequest, "invalid_arguments".to_owned()))
    );
}

/// What `tools/list` and the manifest advertise is the schema the calls above were
/// validated against: `confirm` required at the root only, and no node referring to it.
#[test]
fn the_advertised_schema_requires_confirm_at_the_root_only() {
    let registry = Registry::collect_module(module_path!()).unwrap();
    let manifest: Value = serde_json::from_str(registry.manifest()).unwrap();
    for entry in registry.tools() {
        let schema = entry.input_schema();
        let listed = manifest["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == entry.name())
            .unwrap();
        assert_eq!(&listed["inputSchema"], schema);
        assert_eq!(requiring_confirm(schema), 1, "{schema}");
        // A recursive type's nodes refer to the arguments as they are, not to the root.
        assert!(!schema.to_string().contains(r##""$ref":"#""##), "{schema}");
        assert!(
            schema["required"]
                .as_array()
                .unwrap()
                .contains(&json!("confirm"))
        );
    }
}

/// How many `required` lists of the schema name `confirm`.
fn requiring_confirm(schema: &Value) -> usize {
    match schema {
        Value::Object(map) => {
            let here = map
                .get("required")
                .and_then(Value::as_array)
                .is_some_and(|r| r.contains(&json!("confirm")));
            usize::from(here) + map.values().map(requiring_confirm).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(requiring_confirm).sum(),
        _ => 0,
    }
}
