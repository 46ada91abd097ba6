//! Fail closed: with an audit database that cannot be written, the server still starts,
//! refuses every call with 503 `audit_unavailable`, and no handler runs.

#![cfg(feature = "sqlite")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use aac_tools::audit::{AuditSink, Check, Outcome, SqliteSink, open_reader};
use aac_tools::{
    CallRequest, Ctx, Principal, Registry, Server, StaticTokens, Status, ToolError, mcp_tool,
};
use rusqlite::Connection;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

/// Handler runs per principal: each test calls as a principal of its own, so tests
/// running in parallel do not see each other's runs.
static RUNS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn ran(ctx: &Ctx) -> Ran {
    let mut runs = RUNS.lock().unwrap();
    let n = runs
        .entry(ctx.principal().subject().to_owned())
        .or_default();
    *n += 1;
    Ran { runs: *n }
}

fn runs(who: &str) -> usize {
    RUNS.lock().unwrap().get(who).copied().unwrap_or(0)
}

#[derive(Serialize, JsonSchema)]
struct Ran {
    runs: usize,
}

/// Counts its runs.
#[mcp_tool(read_only, scope = "c:read")]
async fn count_runs(ctx: Ctx) -> Result<Ran, ToolError> {
    Ok(ran(&ctx))
}

/// Counts its runs too, and is destructive.
#[mcp_tool(destructive, scope = "c:write")]
async fn count_and_delete(ctx: Ctx) -> Result<Ran, ToolError> {
    Ok(ran(&ctx))
}

/// Runs, and fails: nothing it did stands.
#[mcp_tool(read_only, scope = "c:read")]
async fn count_and_fail(ctx: Ctx) -> Result<Ran, ToolError> {
    ran(&ctx);
    Err(ToolError::new(
        Status::Conflict,
        "database_busy",
        "the database is busy; try again",
    ))
}

/// A server whose token `who` authenticates principal `who`.
fn server(sink: SqliteSink, who: &str) -> Server {
    Server::builder(Registry::collect().unwrap())
        .verifier(StaticTokens::new().with(who, Principal::new(who, ["c:read", "c:write"])))
        .audit(sink)
        .build()
        .expect("the server starts even though its audit database is unusable")
}

/// Every kind of call is refused with 503 before any handler runs.
async fn assert_refuses_everything(server: &Server, who: &str, why: &str) {
    let before = runs(who);
    for request in [
        CallRequest::new("count_runs", None).bearer(who),
        CallRequest::new("count_and_delete", Some(json!({"confirm": true}))).bearer(who),
        CallRequest::new("count_runs", None),
        CallRequest::new("no_such_tool", None).bearer(who),
    ] {
        let response = server.call(request).await;
        let err = response.error().unwrap_or_else(|| panic!("{why}: refused"));
        assert_eq!(err.status(), Status::Unavailable, "{why}: {err}");
        assert_eq!(err.reason(), "audit_unavailable", "{why}");
        assert_eq!(response.check(), Some(Check::Audit), "{why}");
    }
    assert_eq!(runs(who), before, "{why}: no handler ran");
}

#[tokio::test]
async fn a_database_that_cannot_be_opened_refuses_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let cases: [(&str, PathBuf); 3] = [
        ("missing directory", dir.path().join("nope").join("app.db")),
        ("a directory", dir.path().to_path_buf()),
        ("not a database", garbage),
    ];
    for (why, path) in cases {
        let sink = SqliteSink::open_or_unavailable(&path);
        let problem = sink.ready().unwrap_err().to_string();
        assert!(
            problem.contains(&path.display().to_string()),
            "{why}: the reason names the file: {problem}"
        );
        assert!(SqliteSink::open(&path).is_err(), "{why}");
        assert_refuses_everything(&server(sink, "opener"), "opener", why).await;
    }
}

/// Makes a file unwritable even for root (`chattr +i`), or by permissions otherwise;
/// undoes it on drop so the temporary directory can be removed.
struct WriteProtected(PathBuf);

impl WriteProtected {
    fn new(path: &Path) -> WriteProtected {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let guard = WriteProtected(path.to_path_buf());
        if std::fs::OpenOptions::new().write(true).open(path).is_ok() {
            // Permissions do not bind root: make the file immutable.
            let status = std::process::Command::new("chattr")
                .arg("+i")
                .arg(path)
                .status();
            assert!(
                matches!(status, Ok(s) if s.success()),
                "cannot write-protect a file here (root without chattr +i)"
            );
        }
        assert!(
            std::fs::OpenOptions::new().write(true).open(path).is_err(),
            "the file is write-protected"
        );
        guard
    }
}

impl Drop for WriteProtected {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o644));
    }
}

#[tokio::test]
async fn a_write_protected_database_refuses_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        // A real audit database, with a record in it, then checkpointed and closed.
        let sink = SqliteSink::open(&path).unwrap();
        let server = server(sink, "protected");
        assert!(
            server
                .call(CallRequest::new("count_runs", None).bearer("protected"))
                .await
                .error()
                .is_none()
        );
    }
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
        .unwrap();
    let _protected = WriteProtected::new(&path);
    let sink = SqliteSink::open_or_unavailable(&path);
    let problem = sink.ready().unwrap_err().to_string();
    assert!(problem.contains("read-only"), "{problem}");
    assert_refuses_everything(&server(sink, "protected"), "protected", "write-protected").await;
    let conn = open_reader(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM aac_audit", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "nothing was added");
}

#[tokio::test]
async fn a_sink_recovers_once_its_database_can_be_opened() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("later");
    let path = parent.join("app.db");
    let sink = SqliteSink::builder(&path)
        .retry_interval(Duration::ZERO)
        .open_or_unavailable();
    let server = server(sink.clone(), "recover");
    assert_refuses_everything(&server, "recover", "before the directory exists").await;
    std::fs::create_dir(&parent).unwrap();
    // The next refusal's record is the probe that reopens the database…
    let response = server
        .call(CallRequest::new("count_runs", None).bearer("recover"))
        .await;
    assert_eq!(response.error().unwrap().reason(), "audit_unavailable");
    assert!(sink.ready().is_ok());
    // …and calls are served again.
    let response = server
        .call(CallRequest::new("count_runs", None).bearer("recover"))
        .await;
    assert!(response.error().is_none(), "{:?}", response.error());
    assert_eq!(runs("recover"), 1, "only the last call ran");
    let records = aac_tools::audit::AuditQuery::new()
        .fetch(&open_reader(&path).unwrap())
        .unwrap();
    let outcomes: Vec<_> = records
        .iter()
        .map(|s| {
            (
                s.record.tool.as_str(),
                s.record.outcome,
                s.record.reason.as_deref(),
            )
        })
        .collect();
    // The calls refused while it could not be opened are written late, first (each as it
    // was answered: 503 `audit_unavailable`), then the probe's refusal and the call.
    let refused = (Outcome::Denied, Some("audit_unavailable"));
    assert_eq!(
        outcomes,
        [
            ("count_runs", refused.0, refused.1),
            ("count_and_delete", refused.0, refused.1),
            ("count_runs", refused.0, refused.1),
            ("no_such_tool", refused.0, refused.1),
            ("count_runs", refused.0, refused.1),
            ("count_runs", Outcome::Success, None)
        ]
    );
}

#[tokio::test]
async fn writes_that_start_failing_close_the_server_after_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let sink = SqliteSink::open(&path).unwrap();
    let server = server(sink.clone(), "sabotage");
    let call = || server.call(CallRequest::new("count_runs", None).bearer("sabotage"));
    assert!(call().await.error().is_none());

    // The disk "fills up": every insert into the audit table now fails.
    let saboteur = Connection::open(&path).unwrap();
    saboteur
        .execute_batch(
            "CREATE TRIGGER sabotage BEFORE INSERT ON aac_audit \
             BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
        )
        .unwrap();
    // The first call cannot know in advance: its handler runs, its record fails, and
    // its answer becomes 503 (the record is kept in the error log).
    let before = runs("sabotage");
    let response = call().await;
    assert_eq!(response.error().unwrap().reason(), "audit_unavailable");
    let message = response.error().unwrap().message();
    // Why is the server's log's (the sink's words: a path, SQLite's message), not the
    // caller's.
    assert!(!message.contains("database or disk is full"), "{message}");
    assert!(message.contains("log"), "{message}");
    // It ran: the answer does not say the call was refused.
    assert!(message.starts_with("the tool ran"), "{message}");
    assert_eq!(runs("sabotage"), before + 1);
    assert!(sink.ready().is_err());
    // From then on, calls are refused before their handler.
    assert_refuses_everything(&server, "sabotage", "after a failed write").await;

    // Space is freed: the next refusal's record goes through, and calls are served.
    saboteur.execute_batch("DROP TRIGGER sabotage").unwrap();
    assert_eq!(
        call().await.error().unwrap().reason(),
        "audit_unavailable",
        "refused by the check made before the write succeeded"
    );
    assert!(sink.ready().is_ok());
    assert!(call().await.error().is_none());
    assert!(sink.verify().unwrap().is_intact());
}

/// The database file deleted (unlinked) while the server runs: the sink's connection
/// would write on to a file no one can open, every call answered 200 with its record
/// going nowhere. The sink notices that the file is no longer linked (it looks at most
/// once a second) and fails its writes as a failed write does (503 `audit_unavailable`, then refused before the handler). A
/// file renamed (and its log with it) is still the trail, and is written on.
#[cfg(unix)]
#[tokio::test]
async fn a_database_file_deleted_while_serving_fails_the_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let sink = SqliteSink::open(&path).unwrap();
    let server = server(sink.clone(), "unlinker");
    let call = || server.call(CallRequest::new("count_runs", None).bearer("unlinker"));
    assert!(call().await.error().is_none());
    // Renamed: fine.
    let moved = dir.path().join("moved.db");
    for suffix in ["", "-wal", "-shm"] {
        std::fs::rename(
            format!("{}{suffix}", path.display()),
            format!("{}{suffix}", moved.display()),
        )
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(call().await.error().is_none());
    assert!(sink.ready().is_ok());
    // Deleted: noticed at the sink's next look, at most a second later.
    for suffix in ["", "-wal", "-shm"] {
        std::fs::remove_file(format!("{}{suffix}", moved.display())).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let response = call().await;
    let err = response
        .error()
        .expect("refused: its record would go nowhere");
    assert_eq!(err.reason(), "audit_unavailable");
    assert!(!err.message().contains("was deleted"), "{}", err.message());
    assert!(sink.ready().is_err());
    assert_refuses_everything(&server, "unlinker", "after the file was deleted").await;
}

/// The write-ahead log deleted alone while the server runs holds the records written
/// since the last checkpoint, answered already: a crash would lose them. When the sink
/// notices (at most a second later) it copies them into the database file, still linked,
/// before it fails its writes as for a deleted database: a copy of the database file alone
/// (what a crash leaves) holds every answered call's record, and its chain verifies.
#[cfg(unix)]
#[tokio::test]
async fn a_write_ahead_log_deleted_while_serving_is_saved_into_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let sink = SqliteSink::open(&path).unwrap();
    let server = server(sink.clone(), "unlinker");
    let call = || server.call(CallRequest::new("count_runs", None).bearer("unlinker"));
    for _ in 0..5 {
        assert!(call().await.error().is_none());
    }
    std::fs::remove_file(format!("{}-wal", path.display())).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let response = call().await;
    let err = response
        .error()
        .expect("refused: its record would go nowhere");
    assert_eq!(err.reason(), "audit_unavailable");
    // What a crash now would leave: the database file, without its log.
    let copy = dir.path().join("copy.db");
    std::fs::copy(&path, &copy).unwrap();
    let saved = Connection::open(&copy).unwrap();
    let answered: i64 = saved
        .query_row(
            "SELECT count(*) FROM aac_audit WHERE tool = 'count_runs' AND outcome = 'success'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(
        answered, 5,
        "every answered call's record is in the database file"
    );
    drop(saved);
    let report =
        aac_tools::audit::verify_chain(&aac_tools::audit::open_reader(&copy).unwrap()).unwrap();
    assert!(report.is_intact(), "{report:?}");
}

/// A tool that ran and failed, whose record then cannot be written: the answer says it
/// failed, with its own error, not that what it did stands.
#[tokio::test]
async fn a_failed_call_whose_record_fails_is_not_said_to_have_done_anything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let sink = SqliteSink::open(&path).unwrap();
    let server = server(sink.clone(), "failing");
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER sabotage BEFORE INSERT ON aac_audit \
             BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
        )
        .unwrap();
    let response = server
        .call(CallRequest::new("count_and_fail", None).bearer("failing"))
        .await;
    let err = response.error().unwrap();
    assert_eq!(
        (err.status(), err.reason()),
        (Status::Unavailable, "audit_unavailable")
    );
    let message = err.message();
    assert!(
        message.starts_with("the tool ran and failed (409 database_busy: the database is busy"),
        "{message}"
    );
    assert!(!message.contains("stands"), "{message}");
    assert!(!message.contains("database or disk is full"), "{message}");
}
