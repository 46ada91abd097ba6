use aac_tools::{Text, ToolError, mcp_tool};

/// Cannot be both.
#[mcp_tool(read_only, destructive, scope = "notes:write")]
async fn both() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
