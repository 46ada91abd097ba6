use aac_tools::{ResourceContents, ToolError, mcp_resource};

/// Denied by default: no scope, no resource.
#[mcp_resource(uri = "notes://all", mime_type = "text/plain")]
async fn notes() -> Result<ResourceContents, ToolError> {
    Ok(ResourceContents::text("notes"))
}

fn main() {}
