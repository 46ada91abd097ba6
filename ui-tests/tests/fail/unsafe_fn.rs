use aac_tools::{Text, ToolError, mcp_tool};

/// Tools are safe to call.
#[mcp_tool(read_only, scope = "notes:read")]
async unsafe fn risky() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
