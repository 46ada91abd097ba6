use aac_tools::sqlite::DeleteDb;
use aac_tools::{Text, ToolError, mcp_tool};

/// Asks for more than it may have.
#[mcp_tool(idempotent, scope = "notes:write")]
async fn greedy(db: DeleteDb) -> Result<Text, ToolError> {
    let _ = db;
    Ok(Text("done".into()))
}

fn main() {}
