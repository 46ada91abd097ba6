use aac_tools::{Text, ToolError, mcp_tool};

/// A typo in a flag.
#[mcp_tool(readonly, scope = "notes:read")]
async fn typo() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
