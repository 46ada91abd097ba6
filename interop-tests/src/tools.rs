//! The tools of the test server.

#[path = "items.rs"]
pub mod items;

use std::time::Duration;

use aac_tools::sqlite::{DeleteDb, ReadDb, WriteDb};
use aac_tools::{Ctx, LogLevel, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// One note.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Note {
    /// Its id.
    pub id: i64,
    /// Its text.
    pub text: String,
}

/// Every note.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Notes {
    /// The notes, oldest first.
    pub notes: Vec<Note>,
}

/// List every note.
#[mcp_tool(read_only, scope = "notes:read")]
async fn list_notes(db: ReadDb) -> Result<Notes, ToolError> {
    let notes = db
        .run(|tx| {
            let mut stmt = tx
                .conn()
                .prepare("SELECT id, text FROM notes ORDER BY id")?;
            let notes = stmt
                .query_map([], |row| {
                    Ok(Note {
                        id: row.get(0)?,
                        text: row.get(1)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(notes)
        })
        .await?;
    Ok(Notes { notes })
}

/// The arguments of `add_note`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddNote {
    /// The text of the note.
    #[schemars(length(min = 1, max = 200))]
    pub text: String,
}

/// The id of a note.
#[derive(Debug, Serialize, JsonSchema)]
pub struct NoteId {
    /// The id.
    pub id: i64,
}

/// Add a note.
#[mcp_tool(scope = "notes:write")]
async fn add_note(db: WriteDb, args: AddNote) -> Result<NoteId, ToolError> {
    let id = db
        .run(move |tx| {
            tx.conn()
                .execute("INSERT INTO notes (text) VALUES (?1)", [&args.text])?;
            Ok(tx.conn().last_insert_rowid())
        })
        .await?;
    Ok(NoteId { id })
}

/// The arguments of `delete_note`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeleteNote {
    /// The id of the note.
    pub id: i64,
}

/// Whether a note was deleted.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Deleted {
    /// `false` if there was no such note.
    pub deleted: bool,
}

/// Delete a note permanently.
#[mcp_tool(
    destructive,
    idempotent,
    scope = "notes:delete",
    confirm_message = "Delete note {id}? It cannot be undone."
)]
async fn delete_note(db: DeleteDb, args: DeleteNote) -> Result<Deleted, ToolError> {
    let n = db
        .run(move |tx| {
            Ok(tx
                .conn()
                .execute("DELETE FROM notes WHERE id = ?1", [args.id])?)
        })
        .await?;
    Ok(Deleted { deleted: n > 0 })
}

/// The arguments of `count_slowly`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CountArgs {
    /// Count from 1 to this.
    #[schemars(range(min = 1, max = 500))]
    pub to: u32,
}

/// Count slowly, reporting progress and logging each step.
#[mcp_tool(read_only, scope = "notes:read")]
async fn count_slowly(ctx: Ctx, args: CountArgs) -> Result<Text, ToolError> {
    for i in 1..=args.to {
        ctx.progress(
            f64::from(i),
            Some(f64::from(args.to)),
            Some(&format!("step {i}")),
        )
        .await?;
        ctx.log(LogLevel::Info, json!({"step": i})).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Text(format!("counted to {}", args.to)))
}

/// Ask the client's model to summarize the notes.
#[mcp_tool(read_only, scope = "notes:read")]
async fn summarize_notes(ctx: Ctx, db: ReadDb) -> Result<Text, ToolError> {
    let count: i64 = db
        .run(|tx| {
            Ok(tx
                .conn()
                .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?)
        })
        .await?;
    let answer = ctx
        .create_message(json!({
            "messages": [{
                "role": "user",
                "content": {"type": "text", "text": format!("Summarize {count} notes.")},
            }],
            "maxTokens": 50,
        }))
        .await?;
    let text = answer["content"]["text"].as_str().unwrap_or_default();
    Ok(Text(format!("summary: {text}")))
}

/// Wait until the client cancels the call (at most a minute), then refuse with
/// `cancelled`: the audit record shows that the cancellation reached the tool.
#[mcp_tool(read_only, scope = "notes:read")]
async fn wait_for_cancellation(ctx: Ctx) -> Result<Text, ToolError> {
    tokio::select! {
        () = ctx.cancellation().cancelled() => Err(ToolError::bad_request(
            "cancelled",
            "the client cancelled the call",
        )),
        () = tokio::time::sleep(Duration::from_secs(60)) => Ok(Text("not cancelled".into())),
    }
}
