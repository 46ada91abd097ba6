use aac_tools::sqlite::ReadDb;
use aac_tools::{Completion, Ctx, PromptMessage, ResourceContents, ToolError, mcp_prompt, mcp_resource};
use schemars::JsonSchema;
use serde::Deserialize;

/// Every note.
#[mcp_resource(uri = "notes://all", scope = "notes:read", mime_type = "text/plain")]
async fn notes(db: ReadDb, ctx: Ctx) -> Result<String, ToolError> {
    let _ = (db, ctx);
    Ok("notes".to_owned())
}

#[derive(Deserialize, JsonSchema)]
struct NoteId {
    id: String,
}

/// One note.
#[mcp_resource(uri = "notes://{id}", scope = "notes:read", name = "note", title = "Note", complete = complete_id)]
async fn note(id: NoteId) -> Result<Vec<ResourceContents>, ToolError> {
    Ok(vec![ResourceContents::blob("AAE=").mime_type("application/octet-stream").uri(format!("notes://{}", id.id))])
}

async fn complete_id(completion: Completion, db: ReadDb) -> Result<Vec<String>, ToolError> {
    let _ = db;
    Ok(vec![completion.value])
}

/// Summarise a note.
#[mcp_prompt(scope = "notes:read", complete = complete_id)]
async fn summarise(id: NoteId) -> Result<Vec<PromptMessage>, ToolError> {
    Ok(vec![PromptMessage::user(id.id), PromptMessage::assistant("ok")])
}

fn main() {}
