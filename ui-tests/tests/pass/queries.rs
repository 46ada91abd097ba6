//! Every allowed use of `#[queries]` traits: each level reaches its own and the lower
//! ones, directly, through a helper and in a closure; a trait written in the user's
//! crate with default methods and a bound written by hand.

use aac_tools::access::{Delete, Level, MayUpdate, Read, Write};
use aac_tools::sqlite::{Db, Tx};
use aac_tools::{Text, ToolError, mcp_tool, queries};
use ui_tests::{DeleteTasks, ReadTasks, UpdateTasks};

/// Local queries: a default method, a bound the name would give anyway.
#[queries]
pub trait UpdateLabels {
    fn label(&self, text: &str) -> Result<(), ToolError>
    where
        Self: MayUpdate;
    fn label_twice(&self, text: &str) -> Result<(), ToolError> {
        self.label(text)?;
        self.label(text)
    }
}

impl<L: Level> UpdateLabels for Tx<'_, L> {
    fn label(&self, text: &str) -> Result<(), ToolError> {
        self.conn()
            .execute("INSERT INTO labels (text) VALUES (?1)", [text])?;
        Ok(())
    }
}

fn helper<Q: UpdateTasks + MayUpdate>(queries: &Q) -> Result<(), ToolError> {
    queries.add_task("from a helper")
}

/// Read.
#[mcp_tool(read_only, scope = "tasks:read")]
async fn read(db: Db<Read>) -> Result<Text, ToolError> {
    Ok(Text(db.run(|tx| tx.count_tasks()).await?.to_string()))
}

/// Read and update.
#[mcp_tool(scope = "tasks:write")]
async fn write(db: Db<Write>) -> Result<Text, ToolError> {
    db.run(|tx| {
        tx.add_task("direct")?;
        helper(tx)?;
        tx.label_twice("urgent")?;
        let add = |title: &str| tx.add_task(title);
        ["a", "b"].into_iter().try_for_each(add)?;
        tx.count_tasks()
    })
    .await?;
    Ok(Text("written".into()))
}

/// Read, update and delete.
#[mcp_tool(destructive, scope = "tasks:write")]
async fn delete(db: Db<Delete>) -> Result<Text, ToolError> {
    let gone = db
        .run(|tx| {
            tx.add_task("last")?;
            tx.label("gone")?;
            Ok(tx.delete_tasks()? as i64 - tx.count_tasks()?)
        })
        .await?;
    Ok(Text(gone.to_string()))
}

fn main() {
    let registry = aac_tools::Registry::collect().unwrap();
    assert_eq!(registry.len(), 3);
}
