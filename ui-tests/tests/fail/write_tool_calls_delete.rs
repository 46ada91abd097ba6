use aac_tools::sqlite::WriteDb;
use aac_tools::{Text, ToolError, mcp_tool};
use ui_tests::DeleteNotes;

/// Deletes from a tool that is not `destructive`.
#[mcp_tool(scope = "notes:write")]
async fn tidy(db: WriteDb) -> Result<Text, ToolError> {
    db.run(|tx| tx.delete_notes()).await?;
    Ok(Text("done".into()))
}

fn main() {}
