use aac_tools::{Text, ToolError, mcp_tool};

/// The scope is not `resource:action`.
#[mcp_tool(read_only, scope = "Notes.read")]
async fn shouting() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
