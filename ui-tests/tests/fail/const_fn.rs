use aac_tools::{Text, ToolError, mcp_tool};

/// Tools run when they are called, not at compile time.
#[mcp_tool(read_only, scope = "notes:read")]
const async fn fixed() -> Result<Text, ToolError> {
    Ok(Text(String::new()))
}

fn main() {}
