use aac_tools::{mcp_tool, Text, ToolError};

/// The scope is not a string literal.
#[mcp_tool(read_only, scope = notes_read)]
async fn bare() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
