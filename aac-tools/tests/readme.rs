//! The README's complete tool, and the `tools/list` JSON it shows for it: the front page
//! states exactly what the code produces.

use aac_tools::sqlite::ReadDb;
use aac_tools::{Registry, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
struct GetNote {
    /// The note's id.
    id: i64,
}

#[derive(Serialize, JsonSchema)]
struct Note {
    id: i64,
    text: String,
}

/// Get one note by id.
#[mcp_tool(read_only, scope = "notes:read")]
async fn get_note(db: ReadDb, args: GetNote) -> Result<Note, ToolError> {
    db.run(move |tx| {
        let text = tx
            .conn()
            .query_row("SELECT text FROM notes WHERE id = ?1", [args.id], |r| {
                r.get(0)
            });
        text.map(|text| Note { id: args.id, text })
            .map_err(|_| ToolError::not_found(format!("no note {}", args.id)))
    })
    .await
}

/// The first ```json block after "`tools/list` then shows:" in the README.
fn readme_tool_json() -> serde_json::Value {
    let readme = include_str!("../../README.md");
    let after = readme
        .split("`tools/list` then shows:")
        .nth(1)
        .expect("the README shows the tools/list JSON of its example");
    let block = after
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a json block");
    serde_json::from_str(block).expect("the README's JSON parses")
}

#[test]
fn readme_shows_what_the_code_produces() {
    let registry = Registry::collect().unwrap();
    let tool = registry.get("get_note").expect("registered").json();
    assert_eq!(tool, &readme_tool_json());
}
