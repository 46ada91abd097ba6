//! One suite, both backends: the same assertions on the token store, the audit trail and
//! the run-time level defence, run once on SQLite (a real file) and once on PostgreSQL (a
//! fresh database), through the seams (`TokenIssuer`, `TokenVerifier`, `AuditSink`) and a
//! real `Server`.

mod postgres_support;

use std::sync::Arc;

use aac_tools::audit::{AuditQuery, AuditSink, Outcome, SqliteSink, verify_chain};
use aac_tools::tokens::TokenIssuer;
use aac_tools::{
    CallRequest, Credentials, Principal, Registry, Server, Status, Text, ToolError, mcp_tool,
};
use postgres_support::TestDb;
use serde_json::json;

/// Tries to delete every note from a write transaction, on SQLite.
#[mcp_tool(scope = "notes:write")]
async fn both_sqlite_wipe(db: aac_tools::sqlite::WriteDb) -> Result<Text, ToolError> {
    db.run(|tx| Ok(tx.conn().execute_batch("DELETE FROM notes")?))
        .await?;
    Ok(Text("wiped".into()))
}

/// Adds a note from a write transaction, on SQLite.
#[mcp_tool(scope = "notes:write")]
async fn both_sqlite_add(db: aac_tools::sqlite::WriteDb) -> Result<Text, ToolError> {
    db.run(|tx| {
        Ok(tx
            .conn()
            .execute_batch("INSERT INTO notes (text) VALUES ('x')")?)
    })
    .await?;
    Ok(Text("added".into()))
}

/// Tries to delete every note from a write transaction, on PostgreSQL.
#[mcp_tool(scope = "notes:write")]
async fn both_pg_wipe(db: aac_tools::postgres::WriteDb) -> Result<Text, ToolError> {
    let tx = db.begin().await?;
    tx.client().batch_execute("DELETE FROM notes").await?;
    tx.commit().await?;
    Ok(Text("wiped".into()))
}

/// Adds a note from a write transaction, on PostgreSQL.
#[mcp_tool(scope = "notes:write")]
async fn both_pg_add(db: aac_tools::postgres::WriteDb) -> Result<Text, ToolError> {
    let tx = db.begin().await?;
    tx.client()
        .batch_execute("INSERT INTO notes (text) VALUES ('x')")
        .await?;
    tx.commit().await?;
    Ok(Text("added".into()))
}

/// What a backend gives the suite.
struct Backend {
    name: &'static str,
    tokens: Arc<dyn TokenIssuer>,
    server: Server,
    /// The tools that add a note and that try to delete them all.
    add: &'static str,
    wipe: &'static str,
    /// The trail, as an SQLite connection (the SQLite file, or PostgreSQL's mirror).
    trail: Box<dyn Fn() -> aac_tools::BoxFuture<'static, rusqlite::Connection> + Send + Sync>,
    /// How many notes there are.
    notes: Box<dyn Fn() -> aac_tools::BoxFuture<'static, i64> + Send + Sync>,
}

fn server(
    tools: &[&str],
    tokens: impl aac_tools::TokenVerifier,
    sink: impl AuditSink,
    state: impl Send + Sync + 'static,
) -> Server {
    Server::builder(Registry::collect_named(tools).unwrap())
        .verifier(tokens)
        .audit(sink)
        .state(state)
        .build()
        .unwrap()
}

fn sqlite_backend(dir: &tempfile::TempDir) -> Backend {
    let path = dir.path().join("app.db");
    let db = aac_tools::sqlite::Database::open(&path).unwrap();
    db.with_writer(|c| {
        c.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    })
    .unwrap();
    let tokens = aac_tools::sqlite::TokenStore::open(&db).unwrap();
    let sink = SqliteSink::open(&path).unwrap();
    let (trail_path, notes_db) = (path.clone(), db.clone());
    Backend {
        name: "sqlite",
        tokens: Arc::new(tokens.clone()),
        server: server(&["both_sqlite_add", "both_sqlite_wipe"], tokens, sink, db),
        add: "both_sqlite_add",
        wipe: "both_sqlite_wipe",
        trail: Box::new(move || {
            let path = trail_path.clone();
            Box::pin(async move { aac_tools::audit::open_reader(&path).unwrap() })
        }),
        notes: Box::new(move || {
            let db = notes_db.clone();
            Box::pin(async move {
                db.with_reader(|c| c.query_row("SELECT count(*) FROM notes", [], |r| r.get(0)))
                    .unwrap()
            })
        }),
    }
}

async fn postgres_backend(test: &TestDb) -> Backend {
    use aac_tools::postgres::{Database, PgSink, TokenStore};
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    db.migrate(
        "notes",
        &["CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL)"],
    )
    .await
    .unwrap();
    let tokens = TokenStore::open(&db).unwrap();
    let sink = PgSink::open(&db).unwrap();
    let trail_sink = sink.clone();
    let url = test.url.clone();
    Backend {
        name: "postgres",
        tokens: Arc::new(tokens.clone()),
        server: server(&["both_pg_add", "both_pg_wipe"], tokens, sink, db),
        add: "both_pg_add",
        wipe: "both_pg_wipe",
        trail: Box::new(move || {
            let sink = trail_sink.clone();
            Box::pin(async move { sink.mirror().await.unwrap() })
        }),
        notes: Box::new(move || {
            let url = url.clone();
            Box::pin(async move {
                let (client, connection) = aac_tools::postgres::tokio_postgres::connect(
                    &url,
                    aac_tools::postgres::tokio_postgres::NoTls,
                )
                .await
                .unwrap();
                tokio::spawn(connection);
                client
                    .query_one("SELECT count(*) FROM notes", &[])
                    .await
                    .unwrap()
                    .get(0)
            })
        }),
    }
}

async fn call(backend: &Backend, tool: &str, credentials: Credentials) -> Result<(), ToolError> {
    let response = backend
        .server
        .call(CallRequest::new(tool, Some(json!({}))).credentials(credentials))
        .await;
    match response.error() {
        Some(err) => Err(err.clone()),
        None => Ok(()),
    }
}

/// The suite.
async fn suite(b: Backend) {
    let name = b.name;
    // Tokens: issued, verified, listed, revoked, expired.
    let writer = b
        .tokens
        .create("writer", Some("demo"), &["notes:write"], None)
        .await
        .unwrap();
    let principal = b.tokens.verify(&writer.token).await.unwrap();
    assert_eq!(principal.subject(), "writer", "{name}");
    assert_eq!(principal.workspace(), Some("demo"), "{name}");
    let expired = b
        .tokens
        .create("old", None, &["notes:write"], Some(-1))
        .await
        .unwrap();
    let err = b.tokens.verify(&expired.token).await.unwrap_err();
    assert!(err.message().contains("expired"), "{name}: {err:?}");
    assert_eq!(b.tokens.list().await.unwrap().len(), 2, "{name}");
    let bearer = |t: &str| Credentials::Bearer(t.to_owned());

    // Calls: allowed, refused by the level, refused by the token.
    call(&b, b.add, bearer(&writer.token)).await.unwrap();
    call(&b, b.add, bearer(&writer.token)).await.unwrap();
    let err = call(&b, b.wipe, bearer(&writer.token)).await.unwrap_err();
    assert_eq!(
        (err.status(), err.reason()),
        (Status::Internal, "level_violation"),
        "{name}: {err:?}"
    );
    assert_eq!((b.notes)().await, 2, "{name}: the delete changed nothing");
    // The whole token revokes only with its own secret: another one (the right id) is an
    // error and revokes nothing; the id alone still does.
    let forged = format!("aac_{}_{}", writer.id, "0".repeat(64));
    let err = b.tokens.revoke(&forged).await.unwrap_err();
    assert!(err.to_string().contains("secret"), "{name}: {err}");
    b.tokens.verify(&writer.token).await.unwrap();
    assert!(b.tokens.revoke(&writer.id).await.unwrap(), "{name}");
    let err = b.tokens.revoke(&forged).await.unwrap_err();
    assert!(err.to_string().contains("secret"), "{name}: {err}");
    assert!(!b.tokens.revoke(&writer.token).await.unwrap(), "{name}");
    let err = call(&b, b.add, bearer(&writer.token)).await.unwrap_err();
    assert_eq!(err.reason(), "invalid_token", "{name}");
    let err = call(&b, b.add, bearer(&expired.token)).await.unwrap_err();
    assert_eq!(err.reason(), "invalid_token", "{name}");
    let err = call(
        &b,
        b.add,
        Credentials::Verified(Arc::new(Principal::new("reader", ["notes:read"]))),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), "insufficient_scope", "{name}");

    // The trail: one record per call, in order, chained.
    let trail = (b.trail)().await;
    let report = verify_chain(&trail).unwrap();
    assert!(report.is_intact(), "{name}: {report}");
    assert_eq!(report.checked, 6, "{name}");
    let records = AuditQuery::new().fetch(&trail).unwrap();
    let mut seen: Vec<(String, Outcome, Option<String>, u16)> = records
        .into_iter()
        .map(|r| {
            (
                r.record.tool,
                r.record.outcome,
                r.record.reason,
                r.record.status,
            )
        })
        .collect();
    seen.sort_by_key(|s| (s.3, s.2.clone()));
    let add = b.add.to_owned();
    let wipe = b.wipe.to_owned();
    let mut expected = vec![
        (add.clone(), Outcome::Success, None, 200),
        (add.clone(), Outcome::Success, None, 200),
        (
            wipe,
            Outcome::Error,
            Some("level_violation".to_owned()),
            500,
        ),
        (
            add.clone(),
            Outcome::Denied,
            Some("invalid_token".to_owned()),
            401,
        ),
        (
            add.clone(),
            Outcome::Denied,
            Some("invalid_token".to_owned()),
            401,
        ),
        (
            add,
            Outcome::Denied,
            Some("insufficient_scope".to_owned()),
            403,
        ),
    ];
    expected.sort_by_key(|s| (s.3, s.2.clone()));
    assert_eq!(seen, expected, "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    suite(sqlite_backend(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_on_postgres() {
    let test = TestDb::new().await;
    suite(postgres_backend(&test).await).await;
}
