//! The resources, prompts and completion of the test server: every note as a resource
//! (`notes://all`, `notes://notes/{id}`), a `notes:delete`-scoped resource the reader may
//! not read, a prompt per scope, and completion of note ids.

use aac_tools::sqlite::ReadDb;
use aac_tools::{Completion, PromptMessage, ResourceContents, ToolError, mcp_prompt, mcp_resource};
use schemars::JsonSchema;
use serde::Deserialize;

fn texts(
    db: &aac_tools::sqlite::Tx<'_, aac_tools::access::Read>,
) -> Result<Vec<(i64, String)>, ToolError> {
    let mut stmt = db
        .conn()
        .prepare("SELECT id, text FROM notes ORDER BY id")?;
    let rows = stmt
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Every note, one per line.
#[mcp_resource(uri = "notes://all", scope = "notes:read", mime_type = "text/plain")]
async fn all_notes(db: ReadDb) -> Result<String, ToolError> {
    let notes = db.run(texts).await?;
    Ok(notes
        .into_iter()
        .map(|(id, text)| format!("{id}: {text}\n"))
        .collect())
}

/// The variable of `notes://notes/{id}`.
#[derive(Deserialize, JsonSchema)]
struct NoteUri {
    id: String,
}

/// One note's text.
#[mcp_resource(uri = "notes://notes/{id}", name = "note", scope = "notes:read", complete = complete_note_id)]
async fn one_note(db: ReadDb, uri: NoteUri) -> Result<ResourceContents, ToolError> {
    let notes = db.run(texts).await?;
    notes
        .into_iter()
        .find(|(id, _)| id.to_string() == uri.id)
        .map(|(_, text)| ResourceContents::text(text).mime_type("text/plain"))
        .ok_or_else(|| ToolError::not_found(format!("no note {}", uri.id)))
}

/// How many notes there are: for those who may delete them.
#[mcp_resource(
    uri = "notes://admin/count",
    scope = "notes:delete",
    mime_type = "text/plain"
)]
async fn note_count(db: ReadDb) -> Result<String, ToolError> {
    Ok(db.run(texts).await?.len().to_string())
}

/// Note ids starting with what was typed.
async fn complete_note_id(completion: Completion, db: ReadDb) -> Result<Vec<String>, ToolError> {
    let notes = db.run(texts).await?;
    Ok(notes
        .into_iter()
        .map(|(id, _)| id.to_string())
        .filter(|id| id.starts_with(&completion.value))
        .collect())
}

/// The argument of `review_note`.
#[derive(Deserialize, JsonSchema)]
struct ReviewArgs {
    /// The note's id.
    id: String,
}

/// Review one note.
#[mcp_prompt(scope = "notes:read", complete = complete_note_id)]
async fn review_note(db: ReadDb, args: ReviewArgs) -> Result<Vec<PromptMessage>, ToolError> {
    let notes = db.run(texts).await?;
    let (_, text) = notes
        .into_iter()
        .find(|(id, _)| id.to_string() == args.id)
        .ok_or_else(|| ToolError::not_found(format!("no note {}", args.id)))?;
    Ok(vec![PromptMessage::user(format!(
        "Review this note: {text}"
    ))])
}

/// Plan which notes to delete: for those who may delete them.
#[mcp_prompt(scope = "notes:delete")]
async fn purge_plan() -> Result<String, ToolError> {
    Ok("Which notes are obsolete?".to_owned())
}
