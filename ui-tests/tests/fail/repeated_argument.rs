use aac_tools::{Text, ToolError, mcp_tool};

/// A key given twice.
#[mcp_tool(read_only, scope = "notes:read", name = "notes", name = "list_notes")]
async fn twice() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
