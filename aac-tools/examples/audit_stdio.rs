//! A small MCP server over stdio whose audit trail is the `aac_audit` table of a SQLite
//! file, next to the one table its tool writes to. The audit crash test drives it and
//! kills it with SIGKILL mid-stream.
//!
//! ```text
//! AAC_TOKEN=writer-token cargo run -p aac-tools --example audit_stdio -- /tmp/app.db
//! ```
//!
//! Tokens: `writer-token` (scopes `notes:read`, `notes:write`), `reader-token`
//! (`notes:read`).

use aac_tools::audit::SqliteSink;
use aac_tools::sqlite::{Database, DeleteDb, WriteDb};
use aac_tools::{Principal, Registry, Server, StaticTokens, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// A number, stored verbatim in the audit record.
    n: i64,
    /// Free text, redacted in the audit record.
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Added {
    n: i64,
}

/// Add a note.
#[mcp_tool(scope = "notes:write", audit_fields = ["n"])]
async fn add_note(db: WriteDb, args: AddArgs) -> Result<Added, ToolError> {
    let n = args.n;
    db.run(move |tx| {
        tx.conn().execute(
            "INSERT INTO notes (n, text) VALUES (?1, ?2)",
            rusqlite::params![args.n, args.text],
        )?;
        Ok(())
    })
    .await?;
    Ok(Added { n })
}

#[derive(Deserialize, JsonSchema)]
struct ClearArgs {
    /// A number, stored verbatim in the audit record.
    n: i64,
}

/// Delete every note.
#[mcp_tool(destructive, scope = "notes:write", audit_fields = ["n"])]
async fn clear_notes(db: DeleteDb, args: ClearArgs) -> Result<Added, ToolError> {
    db.run(|tx| Ok(tx.conn().execute("DELETE FROM notes", [])?))
        .await?;
    Ok(Added { n: args.n })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: audit_stdio <database file>")?;
    let db = Database::open(&path)?;
    db.with_writer(|c| {
        c.execute_batch("CREATE TABLE IF NOT EXISTS notes (n INTEGER NOT NULL, text TEXT NOT NULL)")
    })?;
    let tokens = StaticTokens::new()
        .with(
            "writer-token",
            Principal::new("writer", ["notes:read", "notes:write"]).in_workspace("crash"),
        )
        .with("reader-token", Principal::new("reader", ["notes:read"]));
    let server = Server::builder(Registry::collect()?)
        .name("audit-stdio", env!("CARGO_PKG_VERSION"))
        .verifier(tokens)
        .audit(SqliteSink::open_or_unavailable(&path))
        .state(db)
        .build()?;
    aac_tools::mcp::serve_stdio(server, std::env::var("AAC_TOKEN").ok()).await?;
    Ok(())
}
