use aac_tools::{ResourceContents, ToolError, mcp_resource};

/// A template variable that is never closed.
#[mcp_resource(uri = "notes://{id", scope = "notes:read")]
async fn note() -> Result<ResourceContents, ToolError> {
    Ok(ResourceContents::text("note"))
}

fn main() {}
