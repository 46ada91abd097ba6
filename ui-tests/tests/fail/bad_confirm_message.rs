use aac_tools::{Text, ToolError, mcp_tool};

/// A placeholder that is not an argument name.
#[mcp_tool(destructive, scope = "notes:write", confirm_message = "Delete {note id}?")]
async fn wipe() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
