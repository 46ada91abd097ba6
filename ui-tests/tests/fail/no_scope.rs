use aac_tools::{Text, ToolError, mcp_tool};

/// Nobody could ever call it.
#[mcp_tool(read_only, idempotent)]
async fn unscoped() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
