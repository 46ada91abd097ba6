use aac_tools::{Text, ToolError, mcp_tool};

/// A policy that does not exist.
#[mcp_tool(destructive, scope = "notes:write", confirm = "always")]
async fn wipe() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
