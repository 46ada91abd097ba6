use aac_tools::{ToolError, mcp_tool};

struct Summary {
    notes: u32,
}

/// The output is not `Serialize + JsonSchema`.
#[mcp_tool(read_only, scope = "notes:read")]
async fn summary() -> Result<Summary, ToolError> {
    Ok(Summary { notes: 1 })
}

fn main() {}
