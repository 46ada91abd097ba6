use aac_tools::{Text, ToolError, mcp_tool};

/// Tools are `async`.
#[mcp_tool(read_only, scope = "notes:read")]
fn blocking() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
