//! trybuild cases for `#[mcp_tool]` and the access levels: see `tests/ui.rs`.
//!
//! This library holds the query traits the cases share, written exactly as a user writes
//! their own (the pattern of `aac_tools::access`): reads on every transaction, `Update*`
//! methods gated on `MayUpdate`, `Delete*` methods gated on `MayDelete`.

use aac_tools::ToolError;
use aac_tools::access::{Level, MayDelete, MayUpdate};
use aac_tools::sqlite::Tx;

/// Queries that read notes.
pub trait ReadNotes {
    /// How many notes there are.
    fn count_notes(&self) -> Result<i64, ToolError>;
}

impl<L: Level> ReadNotes for Tx<'_, L> {
    fn count_notes(&self) -> Result<i64, ToolError> {
        Ok(self
            .conn()
            .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?)
    }
}

/// Queries that create or change notes.
pub trait UpdateNotes {
    /// Add a note.
    fn add_note(&self, text: &str) -> Result<(), ToolError>
    where
        Self: MayUpdate;
}

impl<L: Level> UpdateNotes for Tx<'_, L> {
    fn add_note(&self, text: &str) -> Result<(), ToolError>
    where
        Self: MayUpdate,
    {
        self.conn()
            .execute("INSERT INTO notes (text) VALUES (?1)", [text])?;
        Ok(())
    }
}

/// Queries that delete notes.
pub trait DeleteNotes {
    /// Delete every note; returns how many there were.
    fn delete_notes(&self) -> Result<usize, ToolError>
    where
        Self: MayDelete;
}

impl<L: Level> DeleteNotes for Tx<'_, L> {
    fn delete_notes(&self) -> Result<usize, ToolError>
    where
        Self: MayDelete,
    {
        Ok(self.conn().execute("DELETE FROM notes", [])?)
    }
}

// The same queries on tasks, under `#[queries]`: the trait's name is the contract, so no
// method writes its bound (and none can forget it).

/// Queries that read tasks.
#[aac_tools::queries]
pub trait ReadTasks {
    /// How many tasks there are.
    fn count_tasks(&self) -> Result<i64, ToolError>;
}

impl<L: Level> ReadTasks for Tx<'_, L> {
    fn count_tasks(&self) -> Result<i64, ToolError> {
        Ok(self
            .conn()
            .query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))?)
    }
}

/// Queries that create or change tasks.
#[aac_tools::queries]
pub trait UpdateTasks {
    /// Add a task.
    fn add_task(&self, title: &str) -> Result<(), ToolError>;
}

impl<L: Level> UpdateTasks for Tx<'_, L> {
    fn add_task(&self, title: &str) -> Result<(), ToolError> {
        self.conn()
            .execute("INSERT INTO tasks (title) VALUES (?1)", [title])?;
        Ok(())
    }
}

/// Queries that delete tasks: the author wrote no bound, the name gives it.
#[aac_tools::queries]
pub trait DeleteTasks {
    /// Delete every task; returns how many there were.
    fn delete_tasks(&self) -> Result<usize, ToolError>;
}

impl<L: Level> DeleteTasks for Tx<'_, L> {
    fn delete_tasks(&self) -> Result<usize, ToolError> {
        Ok(self.conn().execute("DELETE FROM tasks", [])?)
    }
}
