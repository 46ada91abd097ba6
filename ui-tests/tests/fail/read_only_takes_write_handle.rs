use aac_tools::sqlite::WriteDb;
use aac_tools::{Text, ToolError, mcp_tool};

/// Asks for more than it may have.
#[mcp_tool(read_only, scope = "notes:read")]
async fn greedy(db: WriteDb) -> Result<Text, ToolError> {
    let _ = db;
    Ok(Text("done".into()))
}

fn main() {}
