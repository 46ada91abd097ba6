use aac_tools::{Text, ToolError, mcp_tool};

/// Tools use Rust's calling convention.
#[mcp_tool(read_only, scope = "notes:read")]
async extern "C" fn exported() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
