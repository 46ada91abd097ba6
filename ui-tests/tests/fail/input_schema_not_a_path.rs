use aac_tools::{mcp_tool, Text, ToolError};

/// `input_schema` names a function.
#[mcp_tool(read_only, scope = "notes:read", input_schema = "{}")]
async fn custom() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
