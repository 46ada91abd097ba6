//! Structured, text, custom and non-object outputs.

use aac_tools::{Content, Registry, Text, ToolError, ToolOutput, mcp_tool};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

#[derive(Serialize, JsonSchema)]
struct Note {
    id: u32,
    text: String,
}

/// A structured output.
#[mcp_tool(read_only, scope = "notes:read")]
async fn structured() -> Result<Note, ToolError> {
    Ok(Note {
        id: 1,
        text: "hi".into(),
    })
}

/// Plain text.
#[mcp_tool(read_only, scope = "notes:read")]
async fn text() -> Result<Text, ToolError> {
    Ok(Text("hi".into()))
}

/// Content of its own.
#[mcp_tool(read_only, scope = "notes:read")]
async fn custom() -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput::text("hi").with(Content::Image {
        data: "AA==".into(),
        mime_type: "image/png".into(),
    }))
}

/// A list.
#[mcp_tool(read_only, scope = "notes:read")]
async fn list() -> Result<Vec<Note>, ToolError> {
    Ok(Vec::new())
}

/// A number.
#[mcp_tool(read_only, scope = "notes:read")]
async fn number() -> Result<i64, ToolError> {
    Ok(42)
}

/// Maybe a note.
#[mcp_tool(read_only, scope = "notes:read")]
async fn maybe() -> Result<Option<Note>, ToolError> {
    Ok(None)
}

fn main() {
    let registry = Registry::collect().unwrap();
    let schema = |name: &str| {
        registry
            .get(name)
            .unwrap()
            .json()
            .get("outputSchema")
            .cloned()
    };
    assert_eq!(
        schema("structured").unwrap()["required"],
        json!(["id", "text"])
    );
    assert_eq!(schema("text"), None);
    assert_eq!(schema("custom"), None);
    for wrapped in ["list", "number", "maybe"] {
        let schema = schema(wrapped).unwrap();
        assert_eq!(schema["type"], "object", "{wrapped}");
        assert_eq!(schema["required"], json!(["result"]), "{wrapped}");
    }
}
