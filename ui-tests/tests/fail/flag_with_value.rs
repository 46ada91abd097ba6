use aac_tools::{mcp_tool, Text, ToolError};

/// Flags take no value.
#[mcp_tool(read_only = true, scope = "notes:read")]
async fn valued() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
