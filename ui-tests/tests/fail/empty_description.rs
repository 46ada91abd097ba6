use aac_tools::{mcp_tool, Text, ToolError};

/// The doc comment is overridden by an empty description.
#[mcp_tool(read_only, scope = "notes:read", description = "  ")]
async fn blank() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
