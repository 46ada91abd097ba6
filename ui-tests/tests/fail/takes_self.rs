use aac_tools::{Text, ToolError, mcp_tool};

struct Notes;

impl Notes {
    /// Tools are free functions.
    #[mcp_tool(read_only, scope = "notes:read")]
    async fn count(&self) -> Result<Text, ToolError> {
        Ok(Text("done".into()))
    }
}

fn main() {}
