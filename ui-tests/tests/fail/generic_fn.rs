use aac_tools::{mcp_tool, Text, ToolError};

/// One tool has one schema.
#[mcp_tool(read_only, scope = "notes:read")]
async fn generic<T: Default>() -> Result<Text, ToolError> {
    let _ = T::default();
    Ok(Text("done".into()))
}

fn main() {}
