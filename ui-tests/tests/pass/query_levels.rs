//! Every allowed combination of tool level, handle and query.

use aac_tools::access::{Delete, MayUpdate, Read, Write};
use aac_tools::sqlite::{Db, Tx};
use aac_tools::{Text, ToolError, mcp_tool};
use ui_tests::{DeleteNotes, ReadNotes, UpdateNotes};

fn greet<Q: UpdateNotes + MayUpdate>(queries: &Q) -> Result<(), ToolError> {
    queries.add_note("hello")
}

/// Read.
#[mcp_tool(read_only, scope = "notes:read")]
async fn read(db: Db<Read>) -> Result<Text, ToolError> {
    Ok(Text(db.run(|tx| tx.count_notes()).await?.to_string()))
}

/// Read and update, directly, through a helper and through a closure.
#[mcp_tool(scope = "notes:write")]
async fn write(db: Db<Write>) -> Result<Text, ToolError> {
    db.run(|tx| {
        tx.add_note("direct")?;
        greet(tx)?;
        let add = |text: &str| tx.add_note(text);
        ["a", "b"].into_iter().try_for_each(add)?;
        tx.count_notes()
    })
    .await?;
    Ok(Text("written".into()))
}

/// Read, update and delete.
#[mcp_tool(destructive, scope = "notes:write")]
async fn delete(db: Db<Delete>) -> Result<Text, ToolError> {
    let gone = db
        .run(|tx: &Tx<'_, Delete>| {
            tx.add_note("last words")?;
            greet(tx)?;
            let before = tx.count_notes()?;
            Ok(tx.delete_notes()? as i64 - before)
        })
        .await?;
    Ok(Text(gone.to_string()))
}

/// A handle below the tool's level reaches that level's queries.
#[mcp_tool(destructive, scope = "notes:write")]
async fn modest(reader: Db<Read>, writer: Db<Write>) -> Result<Text, ToolError> {
    let count = reader.run(|tx| tx.count_notes()).await?;
    writer.run(|tx| tx.add_note("modest")).await?;
    Ok(Text(count.to_string()))
}

/// A write tool may hold a read handle.
#[mcp_tool(scope = "notes:write")]
async fn modest_writer(reader: Db<Read>) -> Result<Text, ToolError> {
    Ok(Text(reader.run(|tx| tx.count_notes()).await?.to_string()))
}

fn main() {
    let registry = aac_tools::Registry::collect().unwrap();
    assert_eq!(registry.len(), 5);
}
