use aac_tools::{mcp_tool, Text, ToolError};

/// A key given twice.
#[mcp_tool(read_only, scope = "notes:read", name = "notes", name = "list_notes")]
async fn twice() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
