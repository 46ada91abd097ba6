use aac_tools::{Text, ToolError, mcp_tool};

/// `name` without its value.
#[mcp_tool(read_only, scope = "notes:read", name)]
async fn nameless() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
