use aac_tools::{Text, ToolError, mcp_tool};

/// A comma left out between two arguments.
#[mcp_tool(read_only scope = "notes:read")]
async fn uncomma() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
