use aac_tools::sqlite::WriteDb;
use aac_tools::{ResourceContents, ToolError, mcp_resource};

/// Resources are read-only: a writing handle does not compile.
#[mcp_resource(uri = "notes://all", scope = "notes:read")]
async fn notes(db: WriteDb) -> Result<ResourceContents, ToolError> {
    let _ = db;
    Ok(ResourceContents::text("notes"))
}

fn main() {}
