use aac_tools::{mcp_tool, Text, ToolError};

struct Notes;

impl Notes {
    /// Tools are free functions.
    #[mcp_tool(read_only, scope = "notes:read")]
    async fn count(&self) -> Result<Text, ToolError> {
        Ok(Text("done".into()))
    }
}

fn main() {}
