use aac_tools::sqlite::Database;
use aac_tools::{ResourceContents, State, ToolError, mcp_resource};

/// A resource cannot take the framework's storage either.
#[mcp_resource(uri = "notes://all", scope = "notes:read")]
async fn notes(db: State<Database>) -> Result<ResourceContents, ToolError> {
    let _ = db;
    Ok(ResourceContents::text("notes"))
}

fn main() {}
