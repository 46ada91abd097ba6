use aac_tools::access::MayUpdate;
use aac_tools::sqlite::{ReadDb, Tx};
use aac_tools::{mcp_tool, Text, ToolError};

trait UpdateNotes {
    fn add_note(&self) -> Result<(), ToolError> where Self: MayUpdate;
}
impl<L: aac_tools::access::Level> UpdateNotes for Tx<'_, L> {
    fn add_note(&self) -> Result<(), ToolError> where Self: MayUpdate { Ok(()) }
}

/// Sneaks a write.
#[mcp_tool(read_only, scope = "notes:read")]
async fn sneaky(db: ReadDb) -> Result<Text, ToolError> {
    db.run(|tx| tx.add_note()).await?;
    Ok(Text("done".into()))
}

fn main() {}
