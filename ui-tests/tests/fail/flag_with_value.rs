use aac_tools::{Text, ToolError, mcp_tool};

/// Flags take no value.
#[mcp_tool(read_only = true, scope = "notes:read")]
async fn valued() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
