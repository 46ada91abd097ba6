//! No arguments, or one arguments type (plain, with enums, defaults and nested types).

use aac_tools::{Registry, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Nothing to say.
#[mcp_tool(read_only, scope = "misc:read")]
async fn ping() -> Result<Text, ToolError> {
    Ok(Text("pong".into()))
}

#[derive(Deserialize, JsonSchema)]
enum Order {
    Newest,
    Oldest,
}

#[derive(Deserialize, JsonSchema)]
struct Search {
    /// Words to look for.
    query: String,
    #[serde(default)]
    limit: Option<u8>,
    order: Order,
    tags: Vec<String>,
}

/// Search notes.
#[mcp_tool(read_only, scope = "notes:read")]
async fn search(args: Search) -> Result<Text, ToolError> {
    let order = match args.order {
        Order::Newest => "newest",
        Order::Oldest => "oldest",
    };
    Ok(Text(format!(
        "{} {:?} {order} {:?}",
        args.query, args.limit, args.tags
    )))
}

fn main() {
    let registry = Registry::collect().unwrap();
    assert_eq!(
        registry.get("ping").unwrap().json()["inputSchema"],
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    let schema = &registry.get("search").unwrap().json()["inputSchema"];
    assert_eq!(schema["required"], json!(["query", "order", "tags"]));
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["properties"]["limit"]["maximum"], 255);
    assert!(schema["$defs"]["Order"].is_object());
}
