use aac_tools::{Text, ToolError, mcp_tool};

/// A comma left out after a value: one error, at the next key.
#[mcp_tool(scope = "notes:read" read_only)]
async fn uncomma() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
