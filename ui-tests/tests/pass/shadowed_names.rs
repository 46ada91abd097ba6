//! Generated code uses absolute paths: a user's own `Result`, `Tool`, `Option`, `Box`…
//! in scope change nothing.
#![allow(dead_code)]

use aac_tools::{Registry, Text, ToolError, mcp_tool};

type Result<T> = ::std::result::Result<T, ToolError>;
struct Tool;
struct Box;
struct Vec;
struct String;
enum Option {
    Some,
    None,
}
struct Call;
struct ToolDef;
struct Value;
mod core {}
mod std {}
mod serde_json {}
mod inventory {}

/// A tool among impostors.
#[mcp_tool(read_only, scope = "names:read")]
async fn shadowed() -> Result<Text> {
    Ok(Text("fine".into()))
}

fn main() {
    assert!(Registry::collect().unwrap().get("shadowed").is_some());
}
