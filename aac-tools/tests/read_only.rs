//! Read-only tools at run time: raw SQL smuggled past the types fails with a clear
//! error, and `ReadOnlyCheck` proves honest tools change nothing while catching one that
//! writes through a side channel.

use aac_tools::audit::MemorySink;
use aac_tools::sqlite::{
    Database, ReadDb, ReadOnlyCheck, ReadOnlyViolation, WriteDb, content_hash, rusqlite,
};
use aac_tools::{
    CallRequest, Credentials, Principal, Registry, Server, State, Status, Text, ToolError, mcp_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;

#[derive(Deserialize, JsonSchema)]
struct Sql {
    sql: String,
}

/// Runs whatever SQL it is given, on its read-only transaction.
#[mcp_tool(read_only, scope = "notes:read")]
async fn smuggle(db: ReadDb, args: Sql) -> Result<Text, ToolError> {
    db.run(move |tx| Ok(tx.conn().execute_batch(&args.sql)?))
        .await?;
    Ok(Text("ran".into()))
}

#[derive(Serialize, JsonSchema)]
struct Count {
    notes: i64,
}

/// Counts notes (honest).
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

#[derive(Deserialize, JsonSchema)]
struct NoteId {
    id: i64,
}

/// Gets one note (honest, needs arguments).
#[mcp_tool(read_only, scope = "notes:read")]
async fn get_note(db: ReadDb, args: NoteId) -> Result<Text, ToolError> {
    let text = db
        .run(move |tx| {
            tx.conn()
                .query_row("SELECT text FROM notes WHERE id = ?1", [args.id], |r| {
                    r.get(0)
                })
                .map_err(|_| ToolError::not_found(format!("no note {}", args.id)))
        })
        .await?;
    Ok(Text(text))
}

/// Adds a note (not read-only: the check leaves it alone).
#[mcp_tool(scope = "notes:write")]
async fn add_note(db: WriteDb) -> Result<Text, ToolError> {
    db.run(|tx| {
        Ok(tx
            .conn()
            .execute("INSERT INTO notes (text) VALUES ('new')", [])?)
    })
    .await?;
    Ok(Text("added".into()))
}

/// The database file's path, as state of the application's own. (The framework's
/// `Database` cannot be taken as state by a tool: that is a compile error.)
struct NotesFile(std::path::PathBuf);

/// Writes through a connection of its own: what neither the compiler nor the database
/// sees.
fn own_connection(file: &NotesFile, sql: &str) -> Result<(), ToolError> {
    let conn =
        rusqlite::Connection::open(&file.0).map_err(|e| ToolError::internal(e.to_string()))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| ToolError::internal(e.to_string()))?;
    conn.execute(sql, [])
        .map_err(|e| ToolError::internal(e.to_string()))?;
    Ok(())
}

/// Annotated read-only, but writes through a connection it opened itself.
#[mcp_tool(read_only, scope = "notes:read")]
async fn side_channel(file: State<NotesFile>) -> Result<Text, ToolError> {
    own_connection(&file, "UPDATE notes SET text = upper(text)")?;
    Ok(Text("looked".into()))
}

/// Writes into a table the check was told to leave out.
#[mcp_tool(read_only, scope = "notes:read")]
async fn touches_cache(file: State<NotesFile>) -> Result<Text, ToolError> {
    own_connection(&file, "INSERT INTO cache_entries (k) VALUES ('x')")?;
    Ok(Text("cached".into()))
}

struct Fixture {
    _dir: tempfile::TempDir,
    db: Database,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("notes.db")).unwrap();
    db.with_writer(|c| {
        c.execute_batch(
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
             INSERT INTO notes (text) VALUES ('first'), ('second');
             CREATE TABLE cache_entries (k TEXT);",
        )
    })
    .unwrap();
    Fixture { _dir: dir, db }
}

fn server(db: &Database, tools: &[&str]) -> Server {
    Server::builder(Registry::collect_named(tools).unwrap())
        .audit(MemorySink::new())
        .state(db.clone())
        .state(NotesFile(db.path().to_path_buf()))
        .build()
        .unwrap()
}

fn reader() -> Credentials {
    Credentials::Verified(Arc::new(Principal::new("reader", ["notes:read"])))
}

#[tokio::test]
async fn writes_smuggled_into_a_read_only_tool_fail_at_run_time() {
    let f = fixture();
    let server = server(&f.db, &["smuggle"]);
    let before = content_hash(&f.db, &[]).unwrap();
    let other = f._dir.path().join("elsewhere.db");
    let elsewhere = rusqlite::Connection::open(&other).unwrap();
    elsewhere.execute_batch("CREATE TABLE t (x)").unwrap();
    let attempts = [
        "INSERT INTO notes (text) VALUES ('smuggled')".to_owned(),
        "UPDATE notes SET text = 'changed'".to_owned(),
        "DELETE FROM notes".to_owned(),
        "DROP TABLE notes".to_owned(),
        "CREATE TABLE extra (x)".to_owned(),
        "CREATE INDEX notes_text ON notes (text)".to_owned(),
        "PRAGMA query_only = 0; INSERT INTO notes (text) VALUES ('after the pragma')".to_owned(),
        "PRAGMA query_only = OFF; DELETE FROM notes".to_owned(),
        format!(
            "ATTACH '{}' AS other; INSERT INTO other.t VALUES (1)",
            other.display()
        ),
    ];
    for sql in attempts {
        let response = server
            .call(CallRequest::new("smuggle", Some(json!({"sql": sql}))).credentials(reader()))
            .await;
        let err = response
            .error()
            .unwrap_or_else(|| panic!("`{sql}` was refused"));
        assert_eq!(err.status(), Status::Internal, "{sql}: {err}");
        assert_eq!(err.reason(), "read_only_violation", "{sql}: {err}");
        assert!(
            err.message()
                .starts_with("a read-only tool tried to write to the database, which refused: "),
            "{sql}: {err}"
        );
        assert_eq!(
            content_hash(&f.db, &[]).unwrap(),
            before,
            "{sql} changed nothing"
        );
    }
    // A URI asking for more than the read-only connection has is refused too.
    let sql = format!(
        "ATTACH 'file:{}?mode=rw' AS other; INSERT INTO other.t VALUES (1)",
        other.display()
    );
    let response = server
        .call(CallRequest::new("smuggle", Some(json!({"sql": sql}))).credentials(reader()))
        .await;
    assert!(response.error().is_some(), "{sql} was refused");
    let rows: i64 = elsewhere
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0, "nothing was written elsewhere either");
    // Reads are fine on the same transaction.
    let response = server
        .call(
            CallRequest::new(
                "smuggle",
                Some(json!({"sql": "SELECT count(*) FROM notes"})),
            )
            .credentials(reader()),
        )
        .await;
    assert!(response.error().is_none(), "{:?}", response.error());
}

#[tokio::test]
async fn the_check_passes_for_honest_tools() {
    let f = fixture();
    let server = server(&f.db, &["count_notes", "get_note", "add_note"]);
    let before = content_hash(&f.db, &[]).unwrap();
    let checked = ReadOnlyCheck::new(&server, &f.db)
        .arguments("get_note", json!({"id": 1}))
        .run()
        .await
        .unwrap();
    // Only the read-only tools, each with the hash it left: the one it found.
    assert_eq!(
        checked.keys().collect::<Vec<_>>(),
        ["count_notes", "get_note"]
    );
    assert!(checked.values().all(|hash| *hash == before));
    assert_eq!(content_hash(&f.db, &[]).unwrap(), before);
}

#[tokio::test]
async fn the_check_catches_a_read_only_tool_that_writes_through_a_side_channel() {
    let f = fixture();
    let server = server(&f.db, &["count_notes", "side_channel"]);
    let violation = ReadOnlyCheck::new(&server, &f.db).run().await.unwrap_err();
    assert_eq!(
        violation,
        ReadOnlyViolation::DataChanged {
            tool: "side_channel".into()
        }
    );
    assert_eq!(
        violation.to_string(),
        "read-only tool `side_channel` changed the database"
    );
}

#[tokio::test]
async fn the_check_reports_a_tool_it_could_not_run() {
    let f = fixture();
    let server = server(&f.db, &["get_note"]);
    // No arguments given for `get_note`: it is called with `{}` and refused.
    let violation = ReadOnlyCheck::new(&server, &f.db).run().await.unwrap_err();
    let ReadOnlyViolation::CallFailed { tool, error } = &violation else {
        panic!("{violation}");
    };
    assert_eq!(tool, "get_note");
    assert!(error.contains("invalid_arguments"), "{error}");
    assert!(
        violation
            .to_string()
            .starts_with("read-only tool `get_note` failed, so nothing was proven: ")
    );
    // A principal without the scope proves nothing either.
    let violation = ReadOnlyCheck::new(&server, &f.db)
        .arguments("get_note", json!({"id": 1}))
        .principal(Principal::new("nobody", ["other:read"]))
        .run()
        .await
        .unwrap_err();
    assert!(
        violation.to_string().contains("insufficient_scope"),
        "{violation}"
    );
}

#[tokio::test]
async fn tables_can_be_left_out_of_the_check() {
    let f = fixture();
    let server = server(&f.db, &["touches_cache"]);
    let caught = ReadOnlyCheck::new(&server, &f.db).run().await.unwrap_err();
    assert_eq!(
        caught,
        ReadOnlyViolation::DataChanged {
            tool: "touches_cache".into()
        }
    );
    ReadOnlyCheck::new(&server, &f.db)
        .exclude_tables("cache_")
        .run()
        .await
        .unwrap();
}

#[test]
fn the_content_hash_sees_content_not_order() {
    let a = fixture();
    let b = fixture();
    b.db.with_writer(|c| {
        c.execute_batch(
            "DELETE FROM notes; INSERT INTO notes (id, text) VALUES (2, 'second'), (1, 'first');",
        )
    })
    .unwrap();
    assert_eq!(
        content_hash(&a.db, &[]).unwrap(),
        content_hash(&b.db, &[]).unwrap()
    );
    // One value of another type (the integer 1 against the text '1') is another content.
    let before = content_hash(&a.db, &[]).unwrap();
    a.db.with_writer(|c| c.execute_batch("CREATE TABLE t (v); INSERT INTO t VALUES (1);"))
        .unwrap();
    b.db.with_writer(|c| c.execute_batch("CREATE TABLE t (v); INSERT INTO t VALUES ('1');"))
        .unwrap();
    let (ha, hb) = (
        content_hash(&a.db, &[]).unwrap(),
        content_hash(&b.db, &[]).unwrap(),
    );
    assert_ne!(ha, hb);
    assert_ne!(ha, before);
    // Excluded tables do not count.
    assert_eq!(content_hash(&a.db, &["t"]).unwrap(), before);
    assert_eq!(ha.len(), 64);
}
