//! The arguments, `Ctx`, `State<T>` and a data handle, in any order.

use aac_tools::access::Delete;
use aac_tools::sqlite::{Db, ReadDb, WriteDb};
use aac_tools::{Ctx, Registry, State, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;

struct Greeting {
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct Name {
    name: String,
}

/// Arguments first.
#[mcp_tool(read_only, scope = "greet:read")]
async fn a(args: Name, ctx: Ctx, greeting: State<Greeting>, db: ReadDb) -> Result<Text, ToolError> {
    let _ = db;
    Ok(Text(format!(
        "{} {} from {}",
        greeting.text,
        args.name,
        ctx.tool()
    )))
}

/// Arguments last.
#[mcp_tool(scope = "greet:write")]
async fn b(
    db: WriteDb,
    greeting: State<Greeting>,
    ctx: Ctx,
    args: Name,
) -> Result<Text, ToolError> {
    let _ = (db, ctx);
    Ok(Text(format!("{} {}", greeting.text, args.name)))
}

/// Arguments in the middle, and two of the same extractor.
#[mcp_tool(destructive, scope = "greet:write")]
async fn c(ctx: Ctx, args: Name, db: Db<Delete>, again: Ctx) -> Result<Text, ToolError> {
    let _ = (db, again);
    Ok(Text(format!("{} {}", ctx.principal().subject(), args.name)))
}

/// No arguments, only extractors.
#[mcp_tool(read_only, scope = "greet:read")]
async fn d(greeting: State<Greeting>, ctx: Ctx) -> Result<Text, ToolError> {
    Ok(Text(format!("{} {}", greeting.text, ctx.transport())))
}

fn main() {
    let registry = Registry::collect().unwrap();
    for name in ["a", "b", "c"] {
        let schema = &registry.get(name).unwrap().json()["inputSchema"];
        assert_eq!(schema["properties"]["name"]["type"], "string", "{name}");
    }
    assert_eq!(
        registry.get("d").unwrap().json()["inputSchema"]["properties"],
        serde_json::json!({})
    );
}
