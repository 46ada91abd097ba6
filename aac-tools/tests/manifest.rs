//! The tools manifest: deterministic, the same tool objects as `tools/list` plus scopes,
//! and checked against a committed copy (`tests/manifest.json`) so that any change to a
//! tool's permissions shows up in review.
//!
//! After changing the fixture tools below, refresh the committed copy with:
//!
//! ```sh
//! AAC_TOOLS_UPDATE_MANIFEST=1 cargo test -p aac-tools --test manifest
//! ```

use std::path::Path;

use aac_tools::{Registry, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/manifest.json");
const REFRESH: &str = "AAC_TOOLS_UPDATE_MANIFEST=1 cargo test -p aac-tools --test manifest";

#[derive(Deserialize, JsonSchema)]
struct ListArgs {
    /// Only issues in this status.
    status: Option<String>,
    /// At most this many (1 to 100).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

#[derive(Serialize, JsonSchema)]
struct Issue {
    key: String,
    title: String,
}

/// List issues, newest first.
#[mcp_tool(read_only, scope = "issues:read")]
async fn list_issues(args: ListArgs) -> Result<Vec<Issue>, ToolError> {
    let _ = (args.status, args.limit);
    Ok(Vec::new())
}

#[derive(Deserialize, JsonSchema)]
struct IssueKey {
    /// The issue's key, such as `AAC-42`.
    key: String,
}

/// Close an issue.
#[mcp_tool(idempotent, scope = "issues:write", audit_fields = ["key"])]
async fn close_issue(args: IssueKey) -> Result<Issue, ToolError> {
    Ok(Issue {
        key: args.key,
        title: String::new(),
    })
}

/// Delete an issue permanently.
///
/// Its comments go with it.
#[mcp_tool(
    destructive,
    idempotent,
    open_world,
    scope = "issues:write",
    scope = "issues:delete"
)]
async fn delete_issue(args: IssueKey) -> Result<Text, ToolError> {
    Ok(Text(format!("deleted {}", args.key)))
}

fn registry() -> Registry {
    Registry::collect().expect("the fixture tools build")
}

#[test]
fn the_committed_manifest_is_fresh() {
    let registry = registry();
    if std::env::var_os("AAC_TOOLS_UPDATE_MANIFEST").is_some() {
        std::fs::write(COMMITTED, registry.manifest()).expect("the manifest is written");
    }
    if let Err(drift) = registry.check_manifest(COMMITTED, REFRESH) {
        panic!("{drift}");
    }
}

#[test]
fn the_manifest_is_the_same_bytes_run_after_run() {
    let a = registry().manifest().to_owned();
    let b = registry().manifest().to_owned();
    assert_eq!(a, b);
    assert!(a.ends_with("}\n"));
    // Keys sorted at every level, pretty-printed, so that the bytes depend neither on
    // serde_json's features nor on the order the tools were linked in.
    let mut doc: Value = serde_json::from_str(&a).unwrap();
    doc.sort_all_objects();
    assert_eq!(a, serde_json::to_string_pretty(&doc).unwrap() + "\n");
}

#[test]
fn the_manifest_holds_the_tools_list_objects_plus_scopes() {
    let registry = registry();
    let doc: Value = serde_json::from_str(registry.manifest()).unwrap();
    let tools = doc["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["close_issue", "delete_issue", "list_issues"]);
    for (tool, entry) in tools.iter().zip(registry.tools()) {
        let mut expected = entry.json().clone();
        expected["scopes"] = json!(entry.def().scopes());
        assert_eq!(tool, &expected, "{}", entry.name());
    }
    assert_eq!(tools[1]["scopes"], json!(["issues:write", "issues:delete"]));
}

#[test]
fn a_stale_manifest_says_what_changed_and_how_to_refresh_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tools.json");
    let registry = registry();

    // Missing.
    let drift = registry.check_manifest(&path, REFRESH).unwrap_err();
    let message = drift.to_string();
    assert!(message.contains("the file does not exist"), "{message}");
    assert!(
        message.ends_with(&format!("\n\n    {REFRESH}\n")),
        "{message}"
    );

    // One tool changed (a scope dropped), one removed, one added.
    let mut doc: Value = serde_json::from_str(registry.manifest()).unwrap();
    let tools = doc["tools"].as_array_mut().unwrap();
    tools[1]["scopes"] = json!(["issues:write"]);
    tools.remove(2);
    tools.push(json!({"name": "old_tool", "scopes": ["x:y"]}));
    write(&path, &serde_json::to_string_pretty(&doc).unwrap());
    let message = registry
        .check_manifest(&path, REFRESH)
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        format!(
            "the tools manifest `{}` is stale: `delete_issue` changed (`scopes`), `list_issues` added, \
             `old_tool` removed.\nReview the change, then refresh it with:\n\n    {REFRESH}\n",
            path.display()
        )
    );

    // Same content, other bytes.
    let compact =
        serde_json::to_string(&serde_json::from_str::<Value>(registry.manifest()).unwrap())
            .unwrap();
    write(&path, &compact);
    let message = registry
        .check_manifest(&path, REFRESH)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("is stale: its formatting differs."),
        "{message}"
    );

    // Not a manifest at all.
    write(&path, "hello");
    let message = registry
        .check_manifest(&path, REFRESH)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("the committed file is not a tools manifest"),
        "{message}"
    );

    // Fresh.
    write(&path, registry.manifest());
    registry.check_manifest(&path, REFRESH).unwrap();
}

#[test]
fn a_registry_that_links_no_tool_fails_the_check_whatever_the_file_says() {
    // What an integration test that never uses its crate builds: `Registry::collect()`
    // finds nothing linked, and a manifest of nothing written and checked by the same test
    // would pass for ever.
    let empty = Registry::from_defs([]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tools.json");
    write(&path, empty.manifest());
    let message = empty
        .check_manifest(&path, REFRESH)
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("no tool, resource or prompt is linked into this binary"),
        "{message}"
    );
    assert!(message.contains("registry()"), "{message}");
    // A registry with tools still passes against its own manifest.
    let registry = registry();
    write(&path, registry.manifest());
    registry.check_manifest(&path, REFRESH).unwrap();
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}
