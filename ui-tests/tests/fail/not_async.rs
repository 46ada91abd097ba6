use aac_tools::{mcp_tool, Text, ToolError};

/// Tools are `async`.
#[mcp_tool(read_only, scope = "notes:read")]
fn blocking() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
