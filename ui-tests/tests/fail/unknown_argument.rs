use aac_tools::{mcp_tool, Text, ToolError};

/// Typo and not async.
#[mcp_tool(readonly, scope = "notes:read")]
fn typo() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
