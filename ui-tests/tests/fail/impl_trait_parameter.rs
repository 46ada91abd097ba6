use aac_tools::{Text, ToolError, mcp_tool};

/// `impl Trait` is a hidden generic.
#[mcp_tool(read_only, scope = "notes:read")]
async fn hidden(text: impl ToString) -> Result<Text, ToolError> {
    Ok(Text(text.to_string()))
}

fn main() {}
