//! A notes server whose data, tokens and audit trail live in PostgreSQL, so that several
//! processes serve it behind a balancer: the replica of the scale-out test
//! (`scripts/scale-out`). Every command of `aac_tools::cli` takes `--db postgres://…`.
//!
//! ```text
//! export AAC_DB=postgres://postgres@127.0.0.1:5432/notes
//! cargo run -p aac-tools --features postgres --example pg_notes -- token create --subject me --scopes all
//! cargo run -p aac-tools --features postgres --example pg_notes -- serve --http 127.0.0.1:8080 --stateless
//! cargo run -p aac-tools --features postgres --example pg_notes -- audit --verify
//! ```

use aac_tools::postgres::{DeleteDb, ReadDb, WriteDb};
use aac_tools::{ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The schema, version by version.
const MIGRATIONS: [&str; 1] =
    ["CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, author TEXT NOT NULL, text TEXT NOT NULL)"];

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// The note.
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Added {
    /// The new note's id.
    id: i64,
}

/// Add a note.
#[mcp_tool(scope = "notes:write")]
async fn add_note(db: WriteDb, ctx: aac_tools::Ctx, args: AddArgs) -> Result<Added, ToolError> {
    if args.text.len() > 4096 {
        return Err(ToolError::invalid_arguments("/text", "at most 4096 bytes"));
    }
    let author = ctx.principal().subject().to_owned();
    let tx = db.begin().await?;
    let id: i64 = tx
        .client()
        .query_one(
            "INSERT INTO notes (author, text) VALUES ($1, $2) RETURNING id",
            &[&author, &args.text],
        )
        .await?
        .get(0);
    tx.commit().await?;
    Ok(Added { id })
}

#[derive(Serialize, JsonSchema)]
struct Count {
    /// How many notes there are.
    notes: i64,
}

/// Count the notes.
#[mcp_tool(read_only, scope = "notes:read")]
async fn count_notes(db: ReadDb) -> Result<Count, ToolError> {
    let tx = db.begin().await?;
    let notes: i64 = tx
        .client()
        .query_one("SELECT count(*) FROM notes", &[])
        .await?
        .get(0);
    tx.commit().await?;
    Ok(Count { notes })
}

#[derive(Deserialize, JsonSchema)]
struct DeleteArgs {
    /// The note's id.
    id: i64,
}

#[derive(Serialize, JsonSchema)]
struct Deleted {
    /// Whether a note was deleted.
    deleted: bool,
}

/// Delete a note permanently.
#[mcp_tool(destructive, idempotent, scope = "notes:write")]
async fn delete_note(db: DeleteDb, args: DeleteArgs) -> Result<Deleted, ToolError> {
    let tx = db.begin().await?;
    let n = tx
        .client()
        .execute("DELETE FROM notes WHERE id = $1", &[&args.id])
        .await?;
    tx.commit().await?;
    Ok(Deleted { deleted: n > 0 })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    aac_tools::cli::Cli::new("pg_notes", env!("CARGO_PKG_VERSION"))
        .about("Notes over MCP, on PostgreSQL: any number of replicas on one database")
        .postgres("pg_notes", MIGRATIONS)
        .run()
        .await
}
