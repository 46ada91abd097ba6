use aac_tools::{Text, ToolError, mcp_tool};

/// Audit fields are a list of strings.
#[mcp_tool(scope = "notes:write", audit_fields = "title")]
async fn audited() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
