use aac_tools::{Text, ToolError, mcp_tool};

/// An empty title.
#[mcp_tool(read_only, scope = "notes:read", title = "")]
async fn untitled() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
