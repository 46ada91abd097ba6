//! `input_schema = path`: a schema advertised and validated verbatim.

use aac_tools::{Registry, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

mod schemas {
    pub fn query() -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 3}},
            "required": ["query"]
        })
    }
}

#[derive(Deserialize, JsonSchema)]
struct Query {
    query: String,
}

fn empty() -> Value {
    json!({"type": "object"})
}

/// A schema of its own, over an arguments type.
#[mcp_tool(read_only, scope = "notes:read", input_schema = schemas::query)]
async fn search(args: Query) -> Result<Text, ToolError> {
    Ok(Text(args.query))
}

/// A schema of its own, without arguments.
#[mcp_tool(read_only, scope = "notes:read", input_schema = empty)]
async fn nothing() -> Result<Text, ToolError> {
    Ok(Text("nothing".into()))
}

fn main() {
    let registry = Registry::collect().unwrap();
    let search = &registry.get("search").unwrap().json()["inputSchema"];
    assert_eq!(search["properties"]["query"]["minLength"], 3);
    assert_eq!(search["additionalProperties"], false);
    let nothing = &registry.get("nothing").unwrap().json()["inputSchema"];
    assert_eq!(nothing["properties"], json!({}));
}
