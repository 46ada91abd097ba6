use aac_tools::{Text, mcp_tool};

/// The error is not a `ToolError`.
#[mcp_tool(read_only, scope = "notes:read")]
async fn stringly() -> Result<Text, String> {
    Err("no".to_owned())
}

fn main() {}
