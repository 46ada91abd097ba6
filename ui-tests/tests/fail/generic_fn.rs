use aac_tools::{Text, ToolError, mcp_tool};

/// One tool has one schema.
#[mcp_tool(read_only, scope = "notes:read")]
async fn generic<T: Default>() -> Result<Text, ToolError> {
    let _ = T::default();
    Ok(Text("done".into()))
}

fn main() {}
