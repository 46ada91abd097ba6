use aac_tools::{Text, ToolError, mcp_tool};

/// The scope is not a string literal.
#[mcp_tool(read_only, scope = notes_read)]
async fn bare() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
