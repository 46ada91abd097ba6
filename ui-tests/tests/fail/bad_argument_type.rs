use aac_tools::{Text, ToolError, mcp_tool};

struct NotArgs {
    _x: u32,
}

/// Bad arguments.
#[mcp_tool(read_only, scope = "notes:read")]
async fn bad(args: NotArgs) -> Result<Text, ToolError> {
    let _ = args;
    Ok(Text("done".into()))
}

fn main() {}
