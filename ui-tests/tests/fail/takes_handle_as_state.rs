use aac_tools::sqlite::DeleteDb;
use aac_tools::{State, Text, ToolError, mcp_tool};

/// Takes a delete handle someone registered as shared state.
#[mcp_tool(scope = "notes:write")]
async fn sneaky(db: State<DeleteDb>) -> Result<Text, ToolError> {
    Ok(Text(format!("{:?}", *db)))
}

fn main() {}
