use aac_tools::{Text, ToolError, mcp_tool};

/// The doc comment is overridden by an empty description.
#[mcp_tool(read_only, scope = "notes:read", description = "  ")]
async fn blank() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
