use aac_tools::{Text, ToolError, mcp_tool};

/// The same scope twice.
#[mcp_tool(read_only, scope = "notes:read", scope = "notes:read")]
async fn again() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
