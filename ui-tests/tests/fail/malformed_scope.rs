use aac_tools::{mcp_tool, Text, ToolError};

/// The scope is not `resource:action`.
#[mcp_tool(read_only, scope = "Notes.read")]
async fn shouting() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
