use aac_tools::{mcp_tool, Text, ToolError};

/// The same scope twice.
#[mcp_tool(read_only, scope = "notes:read", scope = "notes:read")]
async fn again() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
