//! Scopes, names, titles and descriptions.

use aac_tools::{Registry, Text, ToolError, mcp_tool};
use serde_json::json;

/// Get one note.
///
/// Accepts the id or the slug.
///
///     indented lines are kept as written
#[mcp_tool(
    read_only,
    scope = "notes:read",
    scope = "tags:read",
    scope = "v2_api:read-all"
)]
async fn get_note() -> Result<Text, ToolError> {
    Ok(Text("note".into()))
}

/// This doc comment is replaced by the description.
#[mcp_tool(
    name = "notes.archive-all",
    title = "Archive every note",
    description = "Archive every note of the workspace.",
    scope = "notes:write"
)]
async fn archive() -> Result<Text, ToolError> {
    Ok(Text("archived".into()))
}

#[doc = "A description from a `#[doc]` attribute."]
#[mcp_tool(scope = "notes:write")]
async fn r#type() -> Result<Text, ToolError> {
    Ok(Text("typed".into()))
}

fn main() {
    let registry = Registry::collect().unwrap();
    let get = registry.get("get_note").unwrap().json();
    assert_eq!(get["title"], "Get note");
    assert_eq!(
        get["description"],
        "Get one note.\n\nAccepts the id or the slug.\n\n    indented lines are kept as written"
    );
    assert_eq!(
        get["_meta"]["aac-tools.dev/scopes"],
        json!(["notes:read", "tags:read", "v2_api:read-all"])
    );
    let archive = registry.get("notes.archive-all").unwrap().json();
    assert_eq!(archive["title"], "Archive every note");
    assert_eq!(archive["annotations"]["title"], "Archive every note");
    assert_eq!(
        archive["description"],
        "Archive every note of the workspace."
    );
    let typed = registry.get("type").unwrap().json();
    assert_eq!(
        typed["description"],
        "A description from a `#[doc]` attribute."
    );
}
