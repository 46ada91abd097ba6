use aac_tools::sqlite::WriteDb;
use aac_tools::{Text, ToolError, mcp_tool};
use ui_tests::DeleteTasks;

/// Deletes from a tool that is not `destructive` through a `#[queries]` trait.
#[mcp_tool(scope = "tasks:write")]
async fn tidy(db: WriteDb) -> Result<Text, ToolError> {
    db.run(|tx| tx.delete_tasks()).await?;
    Ok(Text("done".into()))
}

fn main() {}
