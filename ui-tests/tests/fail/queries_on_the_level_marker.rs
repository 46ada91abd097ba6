//! An `Update…` query implemented for the level marker `Write` rather than a transaction,
//! which takes a transaction of any level as an argument: a method without `self` is
//! refused by `#[queries]` itself, whatever the trait is implemented for.
use aac_tools::access::{Level, Write};
use aac_tools::sqlite::{ReadDb, Tx};
use aac_tools::{Text, ToolError, mcp_tool, queries};

#[queries]
pub trait UpdateNotes {
    fn add_note<L: Level>(tx: &Tx<'_, L>, text: &str) -> Result<(), ToolError>;
}

impl UpdateNotes for Write {
    fn add_note<L: Level>(tx: &Tx<'_, L>, text: &str) -> Result<(), ToolError> {
        tx.conn()
            .execute("INSERT INTO notes (text) VALUES (?1)", [text])?;
        Ok(())
    }
}

/// Writes from a read-only tool through the marker.
#[mcp_tool(read_only, scope = "notes:read")]
async fn sneaky(db: ReadDb) -> Result<Text, ToolError> {
    db.run(|tx| Write::add_note(tx, "hello")).await?;
    Ok(Text("done".into()))
}

fn main() {}
