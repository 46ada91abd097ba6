use aac_tools::{Text, ToolError, mcp_tool};

/// MCP tool names have no spaces.
#[mcp_tool(read_only, scope = "notes:read", name = "list notes")]
async fn spaced() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
