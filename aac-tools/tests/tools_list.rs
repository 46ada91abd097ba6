//! The `tools/list` JSON of sample tools, asserted field by field.

use aac_tools::{Registry, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct GetIssueArgs {
    /// The issue's UUID or key (`AAC-42`).
    issue_id: String,
}

#[derive(Serialize, JsonSchema)]
struct Issue {
    id: String,
    title: String,
}

/// Get one issue.
///
/// Accepts the UUID or the key.
#[mcp_tool(read_only, scope = "issues:read", title = "Get issue")]
async fn get_issue(args: GetIssueArgs) -> Result<Issue, ToolError> {
    Ok(Issue {
        id: args.issue_id,
        title: "t".into(),
    })
}

#[derive(Deserialize, JsonSchema)]
struct DeleteArgs {
    issue_id: String,
}

/// Delete an issue permanently.
#[mcp_tool(
    destructive,
    idempotent,
    open_world,
    scope = "issues:write",
    scope = "issues:read"
)]
async fn delete_issue(args: DeleteArgs) -> Result<Text, ToolError> {
    Ok(Text(format!("deleted {}", args.issue_id)))
}

/// Ping.
#[mcp_tool(scope = "misc:run", name = "ping.now")]
async fn ping() -> Result<Vec<String>, ToolError> {
    Ok(vec!["pong".into()])
}

fn registry() -> Registry {
    Registry::collect().expect("registry builds")
}

#[test]
fn read_only_tool_is_listed_field_by_field() {
    let registry = registry();
    let tool = registry.get("get_issue").expect("listed").json();
    assert_eq!(tool["name"], "get_issue");
    assert_eq!(tool["title"], "Get issue");
    assert_eq!(
        tool["description"],
        "Get one issue.\n\nAccepts the UUID or the key."
    );
    assert_eq!(
        tool["annotations"],
        json!({
            "title": "Get issue",
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
            "openWorldHint": false,
        })
    );
    assert_eq!(
        tool["inputSchema"],
        json!({
            "type": "object",
            "properties": {
                "issue_id": {"type": "string", "description": "The issue's UUID or key (`AAC-42`)."}
            },
            "required": ["issue_id"],
            "additionalProperties": false,
        })
    );
    assert_eq!(tool["outputSchema"]["type"], "object");
    assert_eq!(tool["outputSchema"]["required"], json!(["id", "title"]));
    assert!(tool["inputSchema"].get("$schema").is_none());
    assert_eq!(
        tool["_meta"],
        json!({"aac-tools.dev/scopes": ["issues:read"], "aac-tools.dev/access": "read"})
    );
}

#[test]
fn destructive_tool_has_confirm_and_every_hint() {
    let registry = registry();
    let tool = registry.get("delete_issue").expect("listed").json();
    assert_eq!(tool["title"], "Delete issue");
    assert_eq!(
        tool["annotations"],
        json!({
            "title": "Delete issue",
            "readOnlyHint": false,
            "destructiveHint": true,
            "idempotentHint": true,
            "openWorldHint": true,
        })
    );
    assert_eq!(
        tool["inputSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    assert_eq!(
        tool["inputSchema"]["required"],
        json!(["issue_id", "confirm"])
    );
    assert!(
        tool.get("outputSchema").is_none(),
        "plain text has no output schema"
    );
    assert_eq!(
        tool["_meta"]["aac-tools.dev/scopes"],
        json!(["issues:write", "issues:read"])
    );
    assert_eq!(tool["_meta"]["aac-tools.dev/access"], "delete");
}

#[test]
fn tool_without_arguments_and_non_object_output() {
    let registry = registry();
    let tool = registry.get("ping.now").expect("renamed").json();
    assert_eq!(
        tool["inputSchema"],
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    assert_eq!(
        tool["annotations"],
        json!({
            "title": "Ping now",
            "readOnlyHint": false,
            "destructiveHint": false,
            "idempotentHint": false,
            "openWorldHint": false,
        })
    );
    assert_eq!(tool["outputSchema"]["required"], json!(["result"]));
    assert_eq!(
        tool["outputSchema"]["properties"]["result"]["type"],
        "array"
    );
}

#[test]
fn tools_are_ordered_by_name() {
    let names: Vec<&str> = registry().tools().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["delete_issue", "get_issue", "ping.now"]);
}

#[test]
fn manifest_is_deterministic_and_carries_scopes() {
    let a = registry().manifest().to_owned();
    let b = registry().manifest().to_owned();
    assert_eq!(a, b);
    let doc: serde_json::Value = serde_json::from_str(&a).unwrap();
    assert_eq!(
        doc["tools"][0]["scopes"],
        json!(["issues:write", "issues:read"])
    );
    assert_eq!(doc["tools"][1]["name"], "get_issue");
    assert!(a.ends_with("}\n"));
}

#[test]
fn tool_objects_have_exactly_the_mcp_fields() {
    let registry = registry();
    let keys = |name: &str| -> Vec<String> {
        let mut keys: Vec<String> = registry
            .get(name)
            .unwrap()
            .json()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys("get_issue"),
        [
            "_meta",
            "annotations",
            "description",
            "inputSchema",
            "name",
            "outputSchema",
            "title"
        ]
    );
    // Plain text: no outputSchema.
    assert_eq!(
        keys("delete_issue"),
        [
            "_meta",
            "annotations",
            "description",
            "inputSchema",
            "name",
            "title"
        ]
    );
    let get = registry.get("get_issue").unwrap().json();
    assert_eq!(
        get["outputSchema"],
        json!({
            "type": "object",
            "properties": {"id": {"type": "string"}, "title": {"type": "string"}},
            "required": ["id", "title"],
        })
    );
    for entry in registry.tools() {
        let annotations = entry.json()["annotations"].as_object().unwrap();
        for hint in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(annotations[hint].is_boolean(), "{} {hint}", entry.name());
        }
        assert_eq!(entry.json()["inputSchema"]["type"], "object");
        assert!(entry.json()["inputSchema"].get("$schema").is_none());
        assert_eq!(entry.input_schema(), &entry.json()["inputSchema"]);
    }
}

#[test]
fn the_list_is_built_once_and_served_as_built() {
    let registry = registry();
    let first = registry.get("get_issue").unwrap().json() as *const serde_json::Value;
    let again = registry.get("get_issue").unwrap().json() as *const serde_json::Value;
    assert!(
        std::ptr::eq(first, again),
        "the same object, not a rebuilt one"
    );
    let server = aac_tools::Server::builder(registry.clone())
        .audit_disabled()
        .build()
        .unwrap();
    let listed = server.list_tools_json(None);
    let expected: Vec<&serde_json::Value> = registry.tools().iter().map(|t| t.json()).collect();
    assert_eq!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        expected
    );
}
