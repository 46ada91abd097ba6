use aac_tools::sqlite::ReadDb;
use aac_tools::{Text, ToolError, mcp_tool};
use ui_tests::UpdateNotes;

/// Writes from a read-only tool, through a closure.
#[mcp_tool(read_only, scope = "notes:read")]
async fn sneaky(db: ReadDb) -> Result<Text, ToolError> {
    db.run(|tx| {
        let add = |text: &str| tx.add_note(text);
        ["a", "b"].into_iter().try_for_each(add)
    })
    .await?;
    Ok(Text("done".into()))
}

fn main() {}
