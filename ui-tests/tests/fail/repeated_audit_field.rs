use aac_tools::{Text, ToolError, mcp_tool};

/// An audit field named twice.
#[mcp_tool(scope = "notes:write", audit_fields = ["title", "title"])]
async fn audited() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
