use aac_tools::{Text, ToolError, mcp_tool};

/// The default name is the function's, held to MCP's rule for tool names: ASCII only.
#[mcp_tool(read_only, scope = "notes:read")]
async fn lösche_notiz() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
