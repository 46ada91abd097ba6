use aac_tools::{mcp_tool, Text, ToolError};

/// Tools are safe to call.
#[mcp_tool(read_only, scope = "notes:read")]
async unsafe fn risky() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
