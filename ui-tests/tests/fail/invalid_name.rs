use aac_tools::{Text, ToolError, mcp_tool};

/// MCP tool names have no spaces.
#[mcp_tool(read_only, scope = "notes:read", name = "list notes")]
async fn spaced() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}

/// `..` is a path segment every client resolves: `POST /tools/..` names no tool.
#[mcp_tool(read_only, scope = "notes:read", name = "..")]
async fn dots() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}
