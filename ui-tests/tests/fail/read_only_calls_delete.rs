use aac_tools::sqlite::ReadDb;
use aac_tools::{Text, ToolError, mcp_tool};
use ui_tests::DeleteNotes;

/// Deletes from a read-only tool.
#[mcp_tool(read_only, scope = "notes:read")]
async fn sneaky(db: ReadDb) -> Result<Text, ToolError> {
    db.run(|tx| tx.delete_notes()).await?;
    Ok(Text("done".into()))
}

fn main() {}
