use aac_tools::{Text, ToolError, mcp_tool};

#[mcp_tool(read_only, scope = "notes:read")]
async fn undocumented() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
