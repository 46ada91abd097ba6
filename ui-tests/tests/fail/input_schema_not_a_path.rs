use aac_tools::{Text, ToolError, mcp_tool};

/// `input_schema` names a function.
#[mcp_tool(read_only, scope = "notes:read", input_schema = "{}")]
async fn custom() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
