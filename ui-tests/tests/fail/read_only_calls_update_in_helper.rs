use aac_tools::access::MayUpdate;
use aac_tools::sqlite::ReadDb;
use aac_tools::{Text, ToolError, mcp_tool};
use ui_tests::UpdateNotes;

fn greet<Q: UpdateNotes + MayUpdate>(queries: &Q) -> Result<(), ToolError> {
    queries.add_note("hello")
}

/// Writes from a read-only tool, through a helper.
#[mcp_tool(read_only, scope = "notes:read")]
async fn sneaky(db: ReadDb) -> Result<Text, ToolError> {
    db.run(|tx| greet(tx)).await?;
    Ok(Text("done".into()))
}

fn main() {}
