//! A first end-to-end pass through the pipeline, in process.

use aac_tools::audit::{Check, MemorySink, Outcome};
use aac_tools::sqlite::{Database, DeleteDb, ReadDb, ReadOnlyCheck, TokenStore, WriteDb};
use aac_tools::{CallRequest, Registry, Server, Status, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct AddNote {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Count {
    notes: i64,
}

/// Count notes.
#[mcp_tool(read_only, scope = "notes:read")]
async fn count_notes(db: ReadDb) -> Result<Count, ToolError> {
    let notes = db
        .run(|tx| {
            Ok(tx
                .conn()
                .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?)
        })
        .await?;
    Ok(Count { notes })
}

/// Smuggle a write past the types.
#[mcp_tool(read_only, scope = "notes:read")]
async fn sneaky(db: ReadDb) -> Result<Text, ToolError> {
    db.run(|tx| {
        tx.conn()
            .execute("INSERT INTO notes (text) VALUES ('x')", [])?;
        Ok(())
    })
    .await?;
    Ok(Text("wrote".into()))
}

/// Add a note.
#[mcp_tool(scope = "notes:write")]
async fn add_note(db: WriteDb, args: AddNote) -> Result<Text, ToolError> {
    db.run(move |tx| {
        tx.conn()
            .execute("INSERT INTO notes (text) VALUES (?1)", [&args.text])?;
        Ok(())
    })
    .await?;
    Ok(Text("added".into()))
}

/// Delete every note.
#[mcp_tool(destructive, scope = "notes:write")]
async fn clear_notes(db: DeleteDb) -> Result<Text, ToolError> {
    db.run(|tx| Ok(tx.conn().execute("DELETE FROM notes", [])?))
        .await?;
    Ok(Text("cleared".into()))
}

#[tokio::test]
async fn pipeline_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("t.db")).unwrap();
    db.with_writer(|c| c.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)"))
        .unwrap();
    let store = TokenStore::open(&db).unwrap();
    let token = store
        .create("alice", Some("demo"), &["notes:read", "notes:write"], None)
        .unwrap()
        .token;
    let reader = store
        .create("bob", Some("demo"), &["notes:read"], None)
        .unwrap()
        .token;
    let sink = MemorySink::new();
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(store.clone())
        .audit(sink.clone())
        .state(db.clone())
        .build()
        .unwrap();

    let r = server
        .call(CallRequest::new("add_note", Some(json!({"text": "hi"}))).bearer(&token))
        .await;
    assert!(r.error().is_none(), "{:?}", r.error());
    let r = server
        .call(CallRequest::new("count_notes", None).bearer(&token))
        .await;
    assert_eq!(
        r.result().unwrap().structured_value(),
        Some(&json!({"notes": 1}))
    );

    let r = server
        .call(CallRequest::new("add_note", Some(json!({"text": "hi"}))).bearer(&reader))
        .await;
    assert_eq!(r.check(), Some(Check::Scope));
    assert_eq!(r.error().unwrap().reason(), "insufficient_scope");

    let r = server
        .call(CallRequest::new("clear_notes", Some(json!({}))).bearer(&token))
        .await;
    assert_eq!(
        r.error().unwrap().message(),
        "confirm: true required for destructive operations"
    );
    let r = server
        .call(CallRequest::new("clear_notes", Some(json!({"confirm": true}))).bearer(&token))
        .await;
    assert!(r.error().is_none(), "{:?}", r.error());

    let r = server
        .call(CallRequest::new("sneaky", None).bearer(&token))
        .await;
    let err = r.error().unwrap();
    assert_eq!(err.reason(), "read_only_violation", "{err}");
    assert_eq!(err.status(), Status::Internal);

    let r = server.call(CallRequest::new("count_notes", None)).await;
    assert_eq!(r.error().unwrap().reason(), "missing_token");

    let records = sink.records();
    assert_eq!(records.len(), 7);
    assert_eq!(records[2].outcome, Outcome::Denied);
    assert_eq!(
        records[3].reason.as_deref(),
        Some("destructive_flag_missing")
    );

    // The read-only check passes on honest tools and catches nothing else here
    // because `sneaky` fails at run time (its write is refused).
    let only_honest = Server::builder(Registry::collect_named(&["count_notes"]).unwrap())
        .verifier(store)
        .audit(MemorySink::new())
        .state(db.clone())
        .build()
        .unwrap();
    let checked = ReadOnlyCheck::new(&only_honest, &db).run().await.unwrap();
    assert_eq!(checked.len(), 1);
}
