use aac_tools::{Text, ToolError, mcp_tool};

/// A write tool is not confirmed, so it cannot name who confirms it.
#[mcp_tool(scope = "notes:write", confirm = "user")]
async fn rename() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
