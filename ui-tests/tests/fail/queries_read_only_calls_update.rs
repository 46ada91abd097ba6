use aac_tools::sqlite::ReadDb;
use aac_tools::{Text, ToolError, mcp_tool};
use ui_tests::UpdateTasks;

/// Writes from a read-only tool through a `#[queries]` trait that writes no bound.
#[mcp_tool(read_only, scope = "tasks:read")]
async fn sneaky(db: ReadDb) -> Result<Text, ToolError> {
    db.run(|tx| tx.add_task("hello")).await?;
    Ok(Text("done".into()))
}

fn main() {}
