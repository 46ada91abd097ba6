//! The SQLite sink on real database files: what it stores, append-only triggers, the
//! hash chain and `verify`, group commit, sharing the application's file, and reading.

#![cfg(feature = "sqlite")]

use std::sync::Arc;

use aac_tools::audit::{
    AUDIT_COLUMNS, AuditCommand, AuditQuery, AuditRecord, AuditSink, CommitMode, FanOut,
    GENESIS_HASH, JsonLinesSink, MemorySink, Outcome, SqliteSink, StoredRecord, format_json_lines,
    format_table, open_reader, parse_time, verify_chain,
};
use aac_tools::sqlite::{Database, ReadDb};
use aac_tools::{CallRequest, Principal, Registry, Server, StaticTokens, ToolError, mcp_tool};
use rusqlite::Connection;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::Digest;

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// Anything.
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Echoed {
    text: String,
}

/// Echo.
#[mcp_tool(read_only, scope = "echo:read")]
async fn echo(args: EchoArgs) -> Result<Echoed, ToolError> {
    Ok(Echoed { text: args.text })
}

/// Delete something.
#[mcp_tool(destructive, scope = "echo:write")]
async fn wipe() -> Result<Echoed, ToolError> {
    Ok(Echoed {
        text: "wiped".into(),
    })
}

#[derive(Serialize, JsonSchema)]
struct Usage {
    calls: i64,
    denied: i64,
}

/// Read the audit table from a tool, as the reference server's dashboard does.
#[mcp_tool(read_only, scope = "dashboard:read")]
async fn usage(db: ReadDb) -> Result<Usage, ToolError> {
    db.run(|tx| {
        Ok(tx.conn().query_row(
            "SELECT count(*), coalesce(sum(outcome = 'denied'), 0) FROM aac_audit",
            [],
            |r| {
                Ok(Usage {
                    calls: r.get(0)?,
                    denied: r.get(1)?,
                })
            },
        )?)
    })
    .await
}

fn tokens() -> StaticTokens {
    StaticTokens::new()
        .with(
            "alice",
            Principal::new("alice", ["echo:read", "echo:write", "dashboard:read"])
                .in_workspace("acme"),
        )
        .with(
            "bob",
            Principal::new("bob", ["echo:read"]).in_workspace("zeta"),
        )
}

fn record(tool: &str, outcome: Outcome, timestamp: &str) -> AuditRecord {
    AuditRecord {
        tool: tool.to_owned(),
        outcome,
        reason: match outcome {
            Outcome::Success => None,
            Outcome::Denied => Some("insufficient_scope".to_owned()),
            Outcome::Error => Some("not_found".to_owned()),
        },
        check: None,
        status: match outcome {
            Outcome::Success => 200,
            Outcome::Denied => 403,
            Outcome::Error => 404,
        },
        scopes_provided: vec!["echo:read".to_owned()],
        timestamp: timestamp.to_owned(),
        principal: Some("alice".to_owned()),
        workspace: Some("acme".to_owned()),
        transport: "in_process".to_owned(),
        request_id: None,
        duration_us: 42,
        access_level: None,
        arguments: json!({}),
        confirmed_by: None,
        kind: aac_tools::audit::CallKind::Tool,
    }
}

fn rows(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM aac_audit", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn records_are_stored_field_for_field_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let memory = MemorySink::new();
    let sqlite = SqliteSink::open(&path).unwrap();
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(tokens())
        .audit(FanOut::new().with(memory.clone()).with(sqlite.clone()))
        .build()
        .unwrap();
    let calls = [
        CallRequest::new("echo", Some(json!({"text": "hi"}))).bearer("alice"),
        CallRequest::new("echo", Some(json!({"text": "hi"}))).bearer("nobody"),
        CallRequest::new("wipe", Some(json!({}))).bearer("alice"),
        CallRequest::new("wipe", Some(json!({"confirm": true})))
            .bearer("alice")
            .request_id("7"),
        CallRequest::new("wipe", Some(json!({"confirm": true}))).bearer("bob"),
        CallRequest::new("nope", None).bearer("bob"),
    ];
    for call in calls {
        server.call(call).await;
    }
    // Durable before the answer: a new connection sees every record.
    let conn = open_reader(&path).unwrap();
    assert_eq!(rows(&conn), 6);
    let stored = AuditQuery::new().fetch(&conn).unwrap();
    let expected = memory.records();
    assert_eq!(stored.len(), expected.len());
    for (i, (s, e)) in stored.iter().zip(&expected).enumerate() {
        assert_eq!(s.seq, i as i64 + 1);
        assert_eq!(&s.record, e, "record {} round-trips", s.seq);
    }
    assert_eq!(stored[0].prev_hash, GENESIS_HASH);
    assert_eq!(stored[1].prev_hash, stored[0].hash);

    // Every field is a queryable column.
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('aac_audit') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(columns, AUDIT_COLUMNS);
    let (tool, reason, check, status, principal, access): (
        String,
        String,
        String,
        i64,
        String,
        String,
    ) = conn
        .query_row(
            r#"SELECT tool, reason, "check", status, principal, access_level FROM aac_audit
               WHERE outcome = 'denied' AND workspace = 'zeta' AND tool = 'wipe'"#,
            [],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        (tool.as_str(), reason.as_str(), check.as_str(), status),
        ("wipe", "insufficient_scope", "scope", 403)
    );
    assert_eq!((principal.as_str(), access.as_str()), ("bob", "delete"));
    let scopes: String = conn
        .query_row(
            "SELECT scopes_provided FROM aac_audit WHERE request_id = '7'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&scopes).unwrap(),
        json!(["dashboard:read", "echo:read", "echo:write"])
    );
    assert!(verify_chain(&conn).unwrap().is_intact());
    assert_eq!(sqlite.stats().records, 6);
}

#[tokio::test]
async fn update_and_delete_are_refused_by_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    sink.record(record("echo", Outcome::Denied, "2025-06-22T15:30:00Z"))
        .await
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    let err = conn
        .execute("UPDATE aac_audit SET outcome = 'success'", [])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("aac_audit is append-only: UPDATE of audit records is refused"),
        "{err}"
    );
    let err = conn.execute("DELETE FROM aac_audit", []).unwrap_err();
    assert!(
        err.to_string()
            .contains("aac_audit is append-only: DELETE of audit records is refused"),
        "{err}"
    );
    assert_eq!(rows(&conn), 1);
    let outcome: String = conn
        .query_row("SELECT outcome FROM aac_audit", [], |r| r.get(0))
        .unwrap();
    assert_eq!(outcome, "denied");
}

/// `INSERT OR REPLACE` of a record's `seq` deletes the old row without firing a `DELETE`
/// trigger: refused too, so that a writer of the file who rewrites a record (and re-hashes
/// the chain after it) must first drop a trigger, which `verify` names.
#[tokio::test]
async fn a_record_cannot_be_written_again_in_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    for _ in 0..2 {
        sink.record(record("echo", Outcome::Denied, "2025-06-22T15:30:00Z"))
            .await
            .unwrap();
    }
    let conn = Connection::open(&path).unwrap();
    let rewrite = "INSERT OR REPLACE INTO aac_audit SELECT seq, timestamp, tool, 'success', \
                   NULL, \"check\", 200, scopes_provided, principal, workspace, transport, \
                   request_id, duration_us, access_level, arguments, prev_hash, hash, \
                   confirmed_by, kind FROM aac_audit WHERE seq = 1";
    let err = conn.execute(rewrite, []).unwrap_err();
    assert!(
        err.to_string()
            .contains("aac_audit is append-only: a record is only appended"),
        "{err}"
    );
    let outcome: String = conn
        .query_row("SELECT outcome FROM aac_audit WHERE seq = 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(outcome, "denied");
    // The sink keeps appending.
    sink.record(record("echo", Outcome::Success, "2025-06-22T15:31:00Z"))
        .await
        .unwrap();
    assert_eq!(rows(&conn), 3);
    // Without the trigger the rewrite goes through, and `verify` says the trigger is gone.
    conn.execute_batch("DROP TRIGGER aac_audit_no_rewrite")
        .unwrap();
    conn.execute(rewrite, []).unwrap();
    let report = verify_chain(&conn).unwrap();
    assert_eq!(
        report.missing_triggers,
        ["aac_audit_no_rewrite"],
        "{report}"
    );
}

/// A trigger of someone else's that drops records as they are inserted
/// (`BEFORE INSERT … RAISE(IGNORE)`): the sink's write fails (the caller is refused, never
/// answered as recorded), and `verify` names the trigger, though the chain of what was
/// stored still links.
#[tokio::test]
async fn a_trigger_that_drops_records_fails_the_write_and_the_verification() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    sink.record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
        .await
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    assert!(verify_chain(&conn).unwrap().foreign_triggers.is_empty());
    // Named in another case: SQLite keeps the name as written, and fires the trigger on
    // `aac_audit` all the same.
    conn.execute_batch(
        "CREATE TRIGGER zz_hide BEFORE INSERT ON AAC_Audit WHEN NEW.tool = 'wipe' \
         BEGIN SELECT RAISE(IGNORE); END;",
    )
    .unwrap();
    let err = sink
        .record(record("wipe", Outcome::Success, "2025-06-22T15:31:00Z"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("did not take a record"), "{err}");
    // A record the trigger lets through is written and chained as ever.
    sink.record(record("echo", Outcome::Success, "2025-06-22T15:32:00Z"))
        .await
        .unwrap();
    assert_eq!(rows(&conn), 2);
    let report = verify_chain(&conn).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.foreign_triggers, ["zz_hide"]);
    assert!(report.to_string().contains("zz_hide"), "{report}");
    // `audit --verify` fails on it.
    let mut out = Vec::new();
    let err = AuditCommand {
        verify: true,
        ..AuditCommand::default()
    }
    .run(&conn, &mut out)
    .unwrap_err();
    assert!(err.to_string().contains("zz_hide"), "{err}");
}

/// An index edited in the file to disagree with the table: a record whose timestamp
/// entry in `aac_audit_timestamp` says 1999 is missed by every query through the index
/// (`--since`, a dashboard), while the chain, walked by `seq` through the table, links.
/// `verify` runs SQLite's integrity check, which compares the two, and fails naming what
/// it says. (The attack: the triggers dropped, the index dropped, the row edited, the
/// index made again, then hidden from the schema while the row is edited back, restored.)
#[tokio::test]
async fn an_index_that_disagrees_with_the_table_fails_the_verification() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    for minute in 30..33 {
        sink.record(record(
            "echo",
            Outcome::Success,
            &format!("2025-06-22T15:{minute}:00Z"),
        ))
        .await
        .unwrap();
    }
    drop(sink);
    let since = || AuditQuery::new().since("2025-06-22").unwrap();
    let conn = Connection::open(&path).unwrap();
    assert_eq!(since().summary(&conn).unwrap().total, 3);
    let report = verify_chain(&conn).unwrap();
    assert!(report.integrity.is_empty(), "{report}");
    let triggers: Vec<String> = conn
        .prepare("SELECT sql FROM sqlite_master WHERE type = 'trigger'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    conn.execute_batch(
        "DROP TRIGGER aac_audit_no_update; DROP TRIGGER aac_audit_no_delete; \
         DROP TRIGGER aac_audit_no_rewrite; DROP INDEX aac_audit_timestamp; \
         UPDATE aac_audit SET timestamp = '1999-01-01T00:00:00.000000Z' WHERE seq = 2; \
         CREATE INDEX aac_audit_timestamp ON aac_audit (timestamp); \
         CREATE TEMP TABLE saved AS SELECT * FROM sqlite_master \
             WHERE name = 'aac_audit_timestamp'; \
         PRAGMA writable_schema = ON; \
         DELETE FROM sqlite_master WHERE name = 'aac_audit_timestamp'; \
         PRAGMA writable_schema = OFF;",
    )
    .unwrap();
    let saved: (String, String, String, i64, String) = conn
        .query_row("SELECT * FROM temp.saved", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap();
    drop(conn);
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE aac_audit SET timestamp = '2025-06-22T15:31:00.000000Z' WHERE seq = 2",
        [],
    )
    .unwrap();
    conn.execute_batch("PRAGMA writable_schema = ON").unwrap();
    conn.execute(
        "INSERT INTO sqlite_master VALUES (?1, ?2, ?3, ?4, ?5)",
        rusqlite::params![saved.0, saved.1, saved.2, saved.3, saved.4],
    )
    .unwrap();
    conn.execute_batch("PRAGMA writable_schema = OFF").unwrap();
    drop(conn);
    let conn = Connection::open(&path).unwrap();
    for sql in &triggers {
        conn.execute_batch(sql).unwrap();
    }
    // The harm: the record is there, but a query through the index misses it.
    assert_eq!(rows(&conn), 3);
    assert_eq!(since().summary(&conn).unwrap().total, 2);
    let report = verify_chain(&conn).unwrap();
    assert!(report.is_intact(), "the chain itself links: {report}");
    assert!(report.missing_triggers.is_empty() && report.foreign_triggers.is_empty());
    assert!(
        report
            .integrity
            .iter()
            .any(|line| line.contains("missing from index aac_audit_timestamp")),
        "{report}"
    );
    assert!(report.to_string().contains("integrity check"), "{report}");
    let mut out = Vec::new();
    let err = AuditCommand {
        verify: true,
        ..AuditCommand::default()
    }
    .run(&open_reader(&path).unwrap(), &mut out)
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("missing from index aac_audit_timestamp"),
        "{err}"
    );
}

/// Names read from the file (a trigger's, a column's) are whoever wrote it's: `verify`,
/// the sink's refusal to open (what `serve` prints) and the message about a table of other
/// columns print them escaped, never as bytes a terminal obeys (`\r` and `ESC [2K` erase
/// the line that names the trigger, `ESC [8m` hides what follows).
#[tokio::test]
async fn names_read_from_the_file_are_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    sink.record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
        .await
        .unwrap();
    drop(sink);
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER \"zz\r\x1b[2K\x1b[8m\" BEFORE INSERT ON aac_audit \
         BEGIN SELECT RAISE(IGNORE); END; \
         CREATE TRIGGER \"yy\x1b]0;t\x07\" BEFORE INSERT ON aac_audit \
         BEGIN SELECT 1; END; \
         DROP TRIGGER aac_audit_no_delete; \
         CREATE TRIGGER aac_audit_no_delete BEFORE DELETE ON aac_audit BEGIN SELECT 1; END;",
    )
    .unwrap();
    let raw = |text: &str| text.chars().any(|c| c.is_control() && c != '\n');
    let report = verify_chain(&conn).unwrap();
    assert_eq!(report.foreign_triggers.len(), 2, "{report}");
    let shown = report.to_string();
    assert!(!raw(&shown), "{shown:?}");
    assert!(shown.contains(r"zz\r\u{1b}[2K\u{1b}[8m"), "{shown}");
    let err = AuditCommand {
        verify: true,
        ..AuditCommand::default()
    }
    .run(&conn, &mut Vec::new())
    .unwrap_err()
    .to_string();
    assert!(!raw(&err) && err.contains(r"zz\r\u{1b}[2K"), "{err:?}");
    // The sink refuses the file, naming the triggers escaped.
    let err = SqliteSink::open(&path).err().unwrap().to_string();
    assert!(!raw(&err) && err.contains(r"\u{1b}"), "{err:?}");
    // A table of other columns, one of them named with escapes.
    let other = dir.path().join("other.db");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE aac_audit (seq INTEGER, \"x\x1b[2J\" TEXT)")
        .unwrap();
    let err = AuditCommand::default()
        .run(&open_reader(&other).unwrap(), &mut Vec::new())
        .unwrap_err()
        .to_string();
    assert!(!raw(&err) && err.contains(r"x\u{1b}[2J"), "{err:?}");
}

/// A row this version cannot read back (a `kind` a newer version wrote, a cell of
/// another type) is listed all the same, as stored and escaped, with a warning that names
/// it: the table is append-only, and such a row used to end every listing, `--json`
/// included. `--verify` still checks its hash.
#[tokio::test]
async fn a_row_this_version_cannot_read_is_listed_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    for minute in 30..34 {
        sink.record(record(
            "echo",
            Outcome::Success,
            &format!("2025-06-22T15:{minute}:00Z"),
        ))
        .await
        .unwrap();
    }
    drop(sink);
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP TRIGGER aac_audit_no_update; \
         UPDATE aac_audit SET kind = 'elicitation' || char(27) || '[2J' WHERE seq = 2; \
         UPDATE aac_audit SET status = 'teapot' WHERE seq = 3;",
    )
    .unwrap();
    for json in [false, true] {
        let (mut out, mut warnings) = (Vec::new(), Vec::new());
        AuditCommand {
            json,
            ..AuditCommand::default()
        }
        .run_with_warnings(&conn, &mut out, &mut warnings)
        .unwrap_or_else(|e| panic!("json {json}: the listing goes on: {e}"));
        let (out, warnings) = (
            String::from_utf8(out).unwrap(),
            String::from_utf8(warnings).unwrap(),
        );
        assert_eq!(out.lines().count(), if json { 4 } else { 5 }, "{out}");
        assert!(
            !out.contains('\u{1b}') && !warnings.contains('\u{1b}'),
            "{out:?}"
        );
        assert!(
            warnings.contains("audit record 2: unreadable `kind`")
                && warnings.contains("audit record 3")
                && warnings.lines().count() == 2,
            "{warnings}"
        );
        if json {
            let rows: Vec<serde_json::Value> = out
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(rows[1]["kind"], "elicitation\u{1b}[2J", "{out}");
            assert!(rows[1]["unreadable"].as_str().unwrap().contains("kind"));
            assert_eq!(rows[2]["status"], "teapot");
            assert_eq!(rows[2]["arguments"], json!({}));
            assert!(rows[3].get("unreadable").is_none());
            assert_eq!(rows[3]["seq"], 4);
        } else {
            assert!(out.contains(r"elicitation\u{1b}[2J"), "{out}");
            assert!(out.contains("teapot"), "{out}");
        }
    }
    // The library's own reading still says it cannot read the record.
    assert!(AuditQuery::new().fetch(&conn).is_err());
    let report = verify_chain(&conn).unwrap();
    assert_eq!(report.broken.unwrap().seq, 2, "its hash is checked");
}

/// The summary's queries share one snapshot: a record appended while it reads (here,
/// between the steps of its first query) is in none of its totals or in all. They ran
/// one transaction each, and on a live trail the totals disagreed with themselves.
#[tokio::test]
async fn the_summary_reads_one_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    for _ in 0..3 {
        sink.record(record("echo", Outcome::Denied, "2025-06-22T15:30:00Z"))
            .await
            .unwrap();
    }
    drop(sink);
    let mut conn = open_reader(&path).unwrap();
    let writer = path.clone();
    let mut steps = 0;
    // Well into the first query, another connection appends a denial: SQLite steps
    // (virtual machine instructions) 80 to 320 of the summary are its scan here, once its
    // read began (the first 40 are before it, and appending then is no test: every query
    // would count the record; the first assertion below says it was not so).
    let _ = conn.progress_handler(
        1,
        Some(move || {
            steps += 1;
            if steps == 160 {
                Connection::open(&writer)
                    .unwrap()
                    .execute(
                        "INSERT INTO aac_audit (seq, timestamp, tool, outcome, status, \
                         scopes_provided, transport, duration_us, arguments, prev_hash, hash) \
                         VALUES (4, '2025-06-22T15:31:00.000000Z', 'echo', 'denied', 403, '[]', \
                         'stdio', 1, '{}', '', '')",
                        [],
                    )
                    .unwrap();
            }
            false
        }),
    );
    let summary = AuditQuery::new().summary(&conn).unwrap();
    let _ = conn.progress_handler(0, None::<fn() -> bool>);
    assert_eq!(rows(&conn), 4, "the record was appended meanwhile");
    assert_eq!(summary.total, 3, "appended after the first query began");
    let by_kind: u64 = summary.per_kind.iter().map(|k| k.total).sum();
    let by_hour: u64 = summary.denials_per_hour.iter().map(|h| h.denials).sum();
    let by_tool: u64 = summary.most_refused_tools.iter().map(|t| t.denials).sum();
    assert_eq!(
        (by_kind, by_hour, by_tool),
        (summary.total, summary.denied, summary.denied),
        "{summary:?}"
    );
}

/// Write `n` records, then open a connection with the triggers dropped.
async fn chain_of(n: usize) -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    for i in 0..n {
        let outcome = if i % 3 == 0 {
            Outcome::Denied
        } else {
            Outcome::Success
        };
        sink.record(record("echo", outcome, "2025-06-22T15:30:00Z"))
            .await
            .unwrap();
    }
    drop(sink);
    let conn = Connection::open(&path).unwrap();
    assert!(verify_chain(&conn).unwrap().is_intact());
    conn.execute_batch("DROP TRIGGER aac_audit_no_update; DROP TRIGGER aac_audit_no_delete;")
        .unwrap();
    (dir, conn)
}

#[tokio::test]
async fn verify_names_an_edited_record() {
    let (_dir, conn) = chain_of(10).await;
    let report = verify_chain(&conn).unwrap();
    assert_eq!(report.checked, 10);
    let head_hash: String = conn
        .query_row("SELECT hash FROM aac_audit WHERE seq = 10", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(report.head, Some((10, head_hash)));
    // Hide a denial.
    conn.execute(
        "UPDATE aac_audit SET outcome = 'success', reason = NULL, status = 200 WHERE seq = 4",
        [],
    )
    .unwrap();
    let report = verify_chain(&conn).unwrap();
    let broken = report.broken.clone().expect("the edit is detected");
    assert_eq!(broken.seq, 4);
    assert!(broken.problem.contains("edited"), "{broken}");
    assert_eq!(report.checked, 4);
    assert!(report.to_string().starts_with("chain broken: record 4:"));
}

#[tokio::test]
async fn verify_names_any_edited_column_and_a_deleted_record() {
    // Any column counts: a different principal.
    let (_dir, conn) = chain_of(6).await;
    conn.execute(
        "UPDATE aac_audit SET principal = 'mallory' WHERE seq = 2",
        [],
    )
    .unwrap();
    let broken = verify_chain(&conn).unwrap().broken.unwrap();
    assert_eq!(broken.seq, 2);

    let (_dir, conn) = chain_of(6).await;
    conn.execute("DELETE FROM aac_audit WHERE seq = 3", [])
        .unwrap();
    let broken = verify_chain(&conn).unwrap().broken.unwrap();
    assert_eq!(broken.seq, 4);
    assert!(
        broken.problem.contains("records 3 to 3 are missing"),
        "{broken}"
    );

    // Removing the first record is caught too.
    let (_dir, conn) = chain_of(3).await;
    conn.execute("DELETE FROM aac_audit WHERE seq = 1", [])
        .unwrap();
    assert_eq!(verify_chain(&conn).unwrap().broken.unwrap().seq, 2);
}

#[tokio::test]
async fn verify_catches_a_forged_chain_link() {
    // Record 4 (a denial) edited, its hash recomputed honestly: record 5's prev_hash no
    // longer links.
    let (_dir, conn) = chain_of(5).await;
    let stored = AuditQuery::new().fetch(&conn).unwrap();
    let forged = {
        let mut s: StoredRecord = stored[3].clone();
        assert_eq!(s.record.outcome, Outcome::Denied);
        s.record.outcome = Outcome::Success;
        s
    };
    // Recompute the hash with the documented algorithm.
    let canonical = serde_json::to_string(&(
        forged.seq,
        &forged.record.timestamp,
        &forged.record.tool,
        "success",
        &forged.record.reason,
        forged.record.check.map(|c| c.as_str()),
        i64::from(forged.record.status),
        serde_json::to_string(&forged.record.scopes_provided).unwrap(),
        &forged.record.principal,
        &forged.record.workspace,
        &forged.record.transport,
        &forged.record.request_id,
        forged.record.duration_us as i64,
        forged.record.access_level.map(|a| a.as_str()),
        forged.record.arguments.to_string(),
    ))
    .unwrap();
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    hasher.update(forged.prev_hash.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical.as_bytes());
    let hash: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // The documented algorithm reproduces the stored hash of an untouched record.
    {
        let s = &stored[1];
        let canonical = serde_json::to_string(&(
            s.seq,
            &s.record.timestamp,
            &s.record.tool,
            s.record.outcome.as_str(),
            &s.record.reason,
            s.record.check.map(|c| c.as_str()),
            i64::from(s.record.status),
            serde_json::to_string(&s.record.scopes_provided).unwrap(),
            &s.record.principal,
            &s.record.workspace,
            &s.record.transport,
            &s.record.request_id,
            s.record.duration_us as i64,
            s.record.access_level.map(|a| a.as_str()),
            s.record.arguments.to_string(),
        ))
        .unwrap();
        let mut hasher = sha2::Sha256::new();
        hasher.update(s.prev_hash.as_bytes());
        hasher.update(b"\n");
        hasher.update(canonical.as_bytes());
        let again: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(again, s.hash);
    }
    conn.execute(
        "UPDATE aac_audit SET outcome = 'success', hash = ?1 WHERE seq = 4",
        [&hash],
    )
    .unwrap();
    let broken = verify_chain(&conn).unwrap().broken.unwrap();
    assert_eq!(broken.seq, 5);
    assert!(broken.problem.contains("record 4"), "{broken}");
}

#[tokio::test]
async fn group_commit_puts_waiting_records_in_one_transaction() {
    // Group: the writer may have taken the first record alone before the others
    // arrived, so one or two transactions; per record: fifty.
    for (mode, expected_batches) in [(CommitMode::Group, 1..=2), (CommitMode::PerRecord, 50..=50)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        let sink = SqliteSink::builder(&path).commit(mode).open().unwrap();
        sink.record(record("warm", Outcome::Success, "2025-06-22T15:30:00Z"))
            .await
            .unwrap();
        // Another connection holds the write lock, so the writer waits on its first
        // batch while every other record queues up behind it.
        let blocker = Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let pending: Vec<_> = (0..50)
            .map(|_| sink.record(record("echo", Outcome::Success, "2025-06-22T15:30:01Z")))
            .collect();
        blocker.execute_batch("COMMIT").unwrap();
        for written in pending {
            written.await.unwrap();
        }
        let stats = sink.stats();
        assert_eq!(stats.records, 51);
        let batches = stats.batches - 1;
        assert!(
            expected_batches.contains(&batches),
            "{mode:?}: {batches} transactions for 50 records"
        );
        assert!(sink.verify().unwrap().is_intact());
    }
}

#[tokio::test]
async fn concurrent_writers_keep_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    // Two sinks on one file, as two server processes would have.
    let a = SqliteSink::open(&path).unwrap();
    let b = SqliteSink::open(&path).unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let sink = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            sink.record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    drop((a, b));
    // Reopened later, the chain continues.
    let c = SqliteSink::open(&path).unwrap();
    c.record(record("later", Outcome::Error, "2025-06-23T00:00:00Z"))
        .await
        .unwrap();
    let report = c.verify().unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.checked, 201);
    assert_eq!(report.head.unwrap().0, 201);
}

#[tokio::test]
async fn alternating_writers_each_chain_to_the_others_last_record() {
    // A sink keeps the chain's head its own commit left, and must read it again when
    // another connection wrote in between: each write here follows one by the other
    // sink (or by a plain connection), so a kept head would always be stale.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let a = SqliteSink::builder(&path)
        .commit(CommitMode::PerRecord)
        .open()
        .unwrap();
    let b = SqliteSink::builder(&path)
        .commit(CommitMode::PerRecord)
        .open()
        .unwrap();
    for i in 0..20 {
        let sink = if i % 2 == 0 { &a } else { &b };
        sink.record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
            .await
            .unwrap();
        // Twice in a row on the same sink: the second may use the kept head.
        if i % 5 == 0 {
            sink.record(record("again", Outcome::Success, "2025-06-22T15:30:01Z"))
                .await
                .unwrap();
        }
    }
    let report = a.verify().unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.checked, 24);
    // A record appended by another program, chained by hand to nothing we wrote: the
    // next write must chain to it (verify then names its bad link, not ours).
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO aac_audit (seq, timestamp, tool, outcome, status, scopes_provided, \
         transport, duration_us, arguments, prev_hash, hash) VALUES (25, \
         '2025-06-22T15:31:00Z', 'foreign', 'success', 200, '', 'stdio', 0, '{}', 'bad', \
         'bad')",
        [],
    )
    .unwrap();
    a.record(record("after", Outcome::Success, "2025-06-22T15:32:00Z"))
        .await
        .unwrap();
    let last: (i64, String) = conn
        .query_row(
            "SELECT seq, prev_hash FROM aac_audit ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(last.0, 26, "the next record follows the foreign one");
    // Chained to the foreign record's hash, hashed again as it is not one of ours.
    let rehashed: String = sha2::Sha256::digest(b"bad")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(last.1, rehashed);
    let report = b.verify().unwrap();
    assert_eq!(
        report.broken.map(|l| l.seq),
        Some(25),
        "only the foreign link"
    );
    drop((a, b));
}

#[tokio::test]
async fn the_table_can_live_in_the_applications_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let db = Database::open(&path).unwrap();
    db.with_writer(|c| c.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY)"))
        .unwrap();
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(tokens())
        .audit(SqliteSink::open(&path).unwrap())
        .state(db.clone())
        .build()
        .unwrap();
    server
        .call(CallRequest::new("echo", Some(json!({"text": "x"}))).bearer("alice"))
        .await;
    server
        .call(CallRequest::new("wipe", Some(json!({}))).bearer("alice"))
        .await;
    let r = server
        .call(CallRequest::new("usage", None).bearer("alice"))
        .await;
    // The usage call itself is recorded after it ran: it sees the two before it.
    assert_eq!(
        r.result().unwrap().structured_value(),
        Some(&json!({"calls": 2, "denied": 1}))
    );
    let n: i64 = db
        .with_reader(|c| c.query_row("SELECT count(*) FROM aac_audit", [], |r| r.get(0)))
        .unwrap();
    assert_eq!(n, 3);
}

#[tokio::test]
async fn an_incompatible_table_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE aac_audit (id INTEGER PRIMARY KEY, what TEXT)")
        .unwrap();
    let err = SqliteSink::open(&path).unwrap_err();
    assert!(
        err.to_string()
            .contains("the existing `aac_audit` table has columns (id, what)"),
        "{err}"
    );
}

async fn sample(path: &std::path::Path) {
    let sink = SqliteSink::open(path).unwrap();
    let write = |tool: &str, outcome, at: &str, principal: Option<&str>, ws: &str| {
        let mut r = record(tool, outcome, at);
        r.principal = principal.map(str::to_owned);
        r.workspace = Some(ws.to_owned());
        sink.record(r)
    };
    let futures = vec![
        write(
            "echo",
            Outcome::Success,
            "2025-06-21T10:00:00Z",
            Some("alice"),
            "acme",
        ),
        write(
            "wipe",
            Outcome::Denied,
            "2025-06-21T10:15:00Z",
            Some("bob"),
            "acme",
        ),
        write(
            "wipe",
            Outcome::Denied,
            "2025-06-21T10:45:00Z",
            Some("bob"),
            "acme",
        ),
        write(
            "wipe",
            Outcome::Denied,
            "2025-06-21T11:05:00Z",
            Some("bob"),
            "acme",
        ),
        // An offset is stored in UTC: this is 2025-06-22T08:00:00Z.
        write(
            "echo",
            Outcome::Denied,
            "2025-06-22T10:00:00+02:00",
            None,
            "zeta",
        ),
        write(
            "echo",
            Outcome::Error,
            "2025-06-22T09:00:00Z",
            Some("carol"),
            "zeta",
        ),
        write(
            "echo",
            Outcome::Success,
            "2025-06-22T09:30:00Z",
            Some("carol"),
            "zeta",
        ),
    ];
    for f in futures {
        f.await.unwrap();
    }
}

#[tokio::test]
async fn queries_filter_by_every_field_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    sample(&path).await;
    let conn = open_reader(&path).unwrap();
    let seqs =
        |q: AuditQuery| -> Vec<i64> { q.fetch(&conn).unwrap().iter().map(|s| s.seq).collect() };
    assert_eq!(seqs(AuditQuery::new()), [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(seqs(AuditQuery::new().tool("wipe")), [2, 3, 4]);
    assert_eq!(
        seqs(AuditQuery::new().outcome(Outcome::Denied)),
        [2, 3, 4, 5]
    );
    assert_eq!(seqs(AuditQuery::new().reason("not_found")), [6]);
    assert_eq!(seqs(AuditQuery::new().principal("carol")), [6, 7]);
    assert_eq!(seqs(AuditQuery::new().workspace("zeta")), [5, 6, 7]);
    assert_eq!(
        seqs(
            AuditQuery::new()
                .since("2025-06-21T10:30:00Z")
                .unwrap()
                .until("2025-06-22")
                .unwrap()
        ),
        [3, 4]
    );
    assert_eq!(
        seqs(AuditQuery::new().since("2025-06-22T08:00:00Z").unwrap()),
        [5, 6, 7],
        "the +02:00 timestamp was stored in UTC"
    );
    assert_eq!(
        seqs(AuditQuery::new().tool("echo").outcome(Outcome::Denied)),
        [5]
    );
    assert_eq!(seqs(AuditQuery::new().limit(2)), [6, 7]);
    assert!(seqs(AuditQuery::new().since("1h").unwrap()).is_empty());
    assert_eq!(seqs(AuditQuery::new().since("36500d").unwrap()).len(), 7);
    // An age before the calendar's start is an error, not a panic.
    for age in ["1000000w", "5000000d", "200000000h"] {
        let err = AuditQuery::new().since(age).unwrap_err().to_string();
        assert!(err.contains("calendar"), "{age}: {err}");
        assert!(AuditQuery::new().until(age).is_err(), "{age}");
    }
    let stored = AuditQuery::new().fetch(&conn).unwrap();
    assert_eq!(stored[4].record.timestamp, "2025-06-22T08:00:00.000000Z");
}

/// A summary is bounded by the hours it covers, not by how many names callers sent: a
/// caller who names a new tool at every refused call gets at most `PER_HOUR` rows an hour
/// and one row of the rest, and the most refused tools are chosen before their reasons
/// are read (a million such refusals took 869 MB to summarise).
#[tokio::test]
async fn the_summary_is_bounded_whatever_names_callers_send() {
    use aac_tools::audit::{OTHERS, PER_HOUR};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    // One hour: `wipe` refused 30 times, then 25 names refused once each, then 2 names
    // twice; another hour: one refusal.
    let mut writes = Vec::new();
    for i in 0..30 {
        writes.push(record(
            "wipe",
            Outcome::Denied,
            &format!("2025-06-21T10:{:02}:00Z", i),
        ));
    }
    for i in 0..25 {
        writes.push(record(
            &format!("made_up_{i:02}"),
            Outcome::Denied,
            "2025-06-21T10:40:00Z",
        ));
    }
    for i in 0..2 {
        for _ in 0..2 {
            writes.push(record(
                &format!("twice_{i}"),
                Outcome::Denied,
                "2025-06-21T10:50:00Z",
            ));
        }
    }
    writes.push(record("wipe", Outcome::Denied, "2025-06-21T11:00:00Z"));
    for r in writes {
        sink.record(r).await.unwrap();
    }
    let conn = open_reader(&path).unwrap();
    let summary = AuditQuery::new().summary(&conn).unwrap();
    assert_eq!(summary.denied, 30 + 25 + 4 + 1);
    let ten: Vec<_> = summary
        .denials_per_hour
        .iter()
        .filter(|h| h.hour == "2025-06-21T10:00:00Z")
        .map(|h| (h.tool.as_str(), h.denials))
        .collect();
    assert_eq!(ten.len(), PER_HOUR + 1, "{ten:?}");
    assert_eq!(&ten[..3], [("wipe", 30), ("twice_0", 2), ("twice_1", 2)]);
    // The 25 names once each: 7 listed, the other 18 in one row.
    assert_eq!(ten[PER_HOUR], (format!("{OTHERS} (18)").as_str(), 18));
    let total: u64 = ten.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 59, "every denial of the hour is counted once");
    let eleven: Vec<_> = summary
        .denials_per_hour
        .iter()
        .filter(|h| h.hour == "2025-06-21T11:00:00Z")
        .map(|h| (h.tool.as_str(), h.denials))
        .collect();
    assert_eq!(eleven, [("wipe", 1)]);
    let tools: Vec<_> = summary
        .most_refused_tools
        .iter()
        .map(|t| (t.tool.as_str(), t.denials))
        .collect();
    assert_eq!(tools.len(), 10);
    assert_eq!(&tools[..3], [("wipe", 31), ("twice_0", 2), ("twice_1", 2)]);
    assert_eq!(
        summary.most_refused_tools[0].reasons["insufficient_scope"],
        31
    );
}

#[tokio::test]
async fn the_summary_counts_days_hours_and_refused_tools() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    sample(&path).await;
    let conn = open_reader(&path).unwrap();
    let summary = AuditQuery::new().summary(&conn).unwrap();
    assert_eq!(
        (
            summary.total,
            summary.success,
            summary.denied,
            summary.error
        ),
        (7, 2, 4, 1)
    );
    let days: Vec<_> = summary
        .calls_per_day
        .iter()
        .map(|d| (d.day.as_str(), d.total, d.success, d.denied, d.error))
        .collect();
    assert_eq!(
        days,
        [("2025-06-21", 4, 1, 3, 0), ("2025-06-22", 3, 1, 1, 1)]
    );
    let hours: Vec<_> = summary
        .denials_per_hour
        .iter()
        .map(|h| {
            (
                h.hour.as_str(),
                h.principal.as_deref(),
                h.tool.as_str(),
                h.denials,
            )
        })
        .collect();
    assert_eq!(
        hours,
        [
            ("2025-06-21T10:00:00Z", Some("bob"), "wipe", 2),
            ("2025-06-21T11:00:00Z", Some("bob"), "wipe", 1),
            ("2025-06-22T08:00:00Z", None, "echo", 1),
        ]
    );
    let tools: Vec<_> = summary
        .most_refused_tools
        .iter()
        .map(|t| (t.tool.as_str(), t.denials))
        .collect();
    assert_eq!(tools, [("wipe", 3), ("echo", 1)]);
    assert_eq!(
        summary.most_refused_tools[0].reasons["insufficient_scope"],
        3
    );

    // Filters apply to the summary too.
    let bob = AuditQuery::new().principal("bob").summary(&conn).unwrap();
    assert_eq!((bob.total, bob.denied), (3, 3));

    let text = summary.to_string();
    assert!(
        text.starts_with("7 calls: 2 success, 4 denied, 1 error\n"),
        "{text}"
    );
    assert!(
        text.contains("2025-06-21T10:00:00Z  bob        wipe  2"),
        "{text}"
    );
    assert!(
        text.contains("wipe  3       insufficient_scope 3"),
        "{text}"
    );
}

/// The summary counts calls, not records: a count of refusals past a rate limit, or of
/// the calls of a refused batch past those recorded one by one, stands for each call it
/// counts; a refused call whose own arguments say `suppressed` counts once.
#[tokio::test]
async fn the_summary_counts_each_call_a_count_of_refusals_stands_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    let at = "2025-06-21T10:00:00Z";
    let mut flood = record("wipe", Outcome::Denied, at);
    flood.reason = Some("rate_limited".to_owned());
    flood.status = 429;
    flood.principal = Some("mallory".to_owned());
    flood.arguments = json!({"suppressed": 299});
    let mut peers = flood.clone();
    peers.tool = "(rate limited)".to_owned();
    peers.principal = None;
    peers.arguments = json!({"peer": "192.0.2.7", "suppressed": 200});
    let mut batch = record("(unknown)", Outcome::Denied, at);
    batch.reason = Some("not_dispatched".to_owned());
    batch.status = 400;
    batch.arguments = json!({"more_calls": 50});
    // Not counts: a caller's own `suppressed` (kept hashed), one beside other keys, one
    // with a request id.
    let mut forged = flood.clone();
    forged.arguments = json!({"suppressed": "sha256:00"});
    let mut beside = flood.clone();
    beside.arguments = json!({"suppressed": 1000, "issue_id": "AAC-1"});
    let mut with_id = flood.clone();
    with_id.request_id = Some("7".to_owned());
    // A tool a caller named like the framework's count.
    let mut named = record("(rate limited)", Outcome::Denied, at);
    named.reason = Some("unknown_tool".to_owned());
    named.status = 404;
    // Counts of reads and prompts, as the framework writes them: of their kind.
    let mut reads = peers.clone();
    reads.kind = aac_tools::audit::CallKind::Resource;
    reads.arguments = json!({"peer": "192.0.2.7", "suppressed": 9});
    let mut prompts = batch.clone();
    prompts.kind = aac_tools::audit::CallKind::Prompt;
    prompts.arguments = json!({"more_calls": 3});
    // A read whose own name and arguments look like a count: counted once.
    let mut resource = reads.clone();
    resource.tool = "notes://(rate limited)".to_owned();
    for r in [
        flood, peers, batch, forged, beside, with_id, named, reads, prompts, resource,
    ] {
        sink.record(r).await.unwrap();
    }
    let conn = open_reader(&path).unwrap();
    let summary = AuditQuery::new().summary(&conn).unwrap();
    let kinds: Vec<(&str, u64)> = summary
        .per_kind
        .iter()
        .map(|k| (k.kind.as_str(), k.total))
        .collect();
    assert!(kinds.contains(&("tool", 553)), "{kinds:?}");
    assert!(kinds.contains(&("resource", 9 + 1)), "{kinds:?}");
    assert!(kinds.contains(&("prompt", 3)), "{kinds:?}");
    assert_eq!((summary.total, summary.denied), (553 + 13, 553 + 13));
    let tools: Vec<_> = summary
        .most_refused_tools
        .iter()
        .map(|t| (t.tool.as_str(), t.denials))
        .collect();
    assert_eq!(
        tools,
        [
            ("wipe", 302),
            ("(rate limited)", 200 + 9),
            ("(unknown)", 51 + 3),
            ("notes://(rate limited)", 1)
        ]
    );
    let mallory: u64 = summary
        .denials_per_hour
        .iter()
        .filter(|h| h.principal.as_deref() == Some("mallory"))
        .map(|h| h.denials)
        .sum();
    assert_eq!(mallory, 302);
}

#[tokio::test]
async fn records_format_as_a_table_and_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    sample(&path).await;
    let conn = open_reader(&path).unwrap();
    let stored = AuditQuery::new().tool("wipe").fetch(&conn).unwrap();
    let table = format_table(&stored);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("seq  timestamp"), "{table}");
    assert!(lines[0].ends_with("  ms     kind"), "{table}");
    assert!(
        lines[1].starts_with(
            "2    2025-06-21T10:15:00.000000Z  wipe  denied   insufficient_scope  403"
        ),
        "{table}"
    );
    assert!(lines[1].ends_with("  0.042  tool"), "{table}");
    let jsonl = format_json_lines(&stored);
    let back: Vec<StoredRecord> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(back, stored);
    let first: serde_json::Value = serde_json::from_str(jsonl.lines().next().unwrap()).unwrap();
    for key in [
        "seq",
        "tool",
        "outcome",
        "reason",
        "scopes_provided",
        "timestamp",
        "hash",
    ] {
        assert!(first.get(key).is_some(), "{key}");
    }
}

#[tokio::test]
async fn the_audit_command_prints_records_summaries_and_verification() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    sample(&path).await;
    let conn = open_reader(&path).unwrap();
    let run = |command: AuditCommand| -> String {
        let mut out = Vec::new();
        command.run(&conn, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let out = run(AuditCommand {
        query: AuditQuery::new().tool("wipe").outcome(Outcome::Denied),
        json: true,
        ..AuditCommand::default()
    });
    assert_eq!(out.lines().count(), 3);
    assert!(out.lines().all(|l| l.contains(r#""tool":"wipe""#)));
    let out = run(AuditCommand {
        query: AuditQuery::new()
            .since("2025-06-22")
            .unwrap()
            .outcome(Outcome::Error),
        ..AuditCommand::default()
    });
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("carol"));
    let out = run(AuditCommand {
        stats: true,
        json: true,
        ..AuditCommand::default()
    });
    let stats: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(stats["denied"], 4);
    assert_eq!(stats["most_refused_tools"][0]["tool"], "wipe");
    // The listing, written one record at a time, is the table and the JSON lines of the
    // records fetched at once.
    let records = AuditQuery::new().fetch(&conn).unwrap();
    assert_eq!(run(AuditCommand::default()), format_table(&records));
    let json = run(AuditCommand {
        json: true,
        ..AuditCommand::default()
    });
    assert_eq!(json, format_json_lines(&records));
    let last_two = AuditQuery::new().limit(2);
    assert_eq!(
        run(AuditCommand {
            query: last_two.clone(),
            ..AuditCommand::default()
        }),
        format_table(&last_two.fetch(&conn).unwrap())
    );
    let out = run(AuditCommand {
        verify: true,
        ..AuditCommand::default()
    });
    assert!(
        out.starts_with("chain intact: 7 records, head seq 7 hash "),
        "{out}"
    );
    assert!(
        AuditQuery::new()
            .since("yesterday")
            .unwrap_err()
            .to_string()
            .contains("cannot read `yesterday` as a time")
    );
}

#[test]
fn times_read_as_canonical_utc() {
    assert_eq!(
        parse_time("2025-06-22T17:30:00+02:00").unwrap(),
        "2025-06-22T15:30:00.000000Z"
    );
    assert_eq!(
        parse_time("2025-06-22").unwrap(),
        "2025-06-22T00:00:00.000000Z"
    );
    let hour_ago = parse_time("1h").unwrap();
    let now = parse_time("0s").unwrap();
    assert!(hour_ago < now);
    assert!(parse_time("5x").is_err());
    assert!(parse_time("").is_err());
}

#[tokio::test]
async fn json_lines_go_to_a_synced_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let sink = JsonLinesSink::file(&path).unwrap();
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(tokens())
        .audit(sink.clone())
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let server = server.clone();
        tasks.push(tokio::spawn(async move {
            let token = if i % 2 == 0 { "alice" } else { "bob" };
            server
                .call(CallRequest::new("wipe", Some(json!({"confirm": true}))).bearer(token))
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let records: Vec<AuditRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 40);
    assert_eq!(
        records
            .iter()
            .filter(|r| r.outcome == Outcome::Denied)
            .count(),
        20
    );
    assert_eq!(sink.stats().records, 40);
    // Appends, never truncates.
    drop(server);
    drop(sink);
    let again = JsonLinesSink::file(&path).unwrap();
    again
        .record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 41);
}

/// A full disk takes what fits of a batch and fails the rest: the part that went in is
/// taken out again, so that the file holds exactly the records whose writes succeeded
/// (a failed record is written again later by whoever retries it, and was in the file
/// twice, the second time glued to a torn line). A line a crash cut short stays on a line
/// of its own. The disk is a file size limit (`ulimit -f`, which fails a write past it
/// as a full disk does, after a short write) on a child process running this test.
#[tokio::test]
async fn json_lines_keep_no_part_of_a_write_the_disk_refused() {
    const CHILD: &str = "AAC_TEST_JSONL_LIMITED_FILE";
    let line = |i: usize| {
        let mut r = record(
            &format!("tool_{i}"),
            Outcome::Success,
            "2025-06-22T15:30:00Z",
        );
        r.arguments = json!({"padding": "x".repeat(300 + i)});
        r
    };
    if let Ok(path) = std::env::var(CHILD) {
        let sink = JsonLinesSink::file(&path).unwrap();
        let mut outcomes = String::new();
        for i in 0..30 {
            let written = sink.record(line(i)).await;
            outcomes.push(if written.is_ok() { '1' } else { '0' });
        }
        println!("OUTCOMES={outcomes}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let child = std::process::Command::new("bash")
        .arg("-c")
        // 4 KiB (bash counts `-f` in KiB); past it a write fails (EFBIG) rather than the
        // process being killed.
        .arg(r#"trap '' XFSZ; ulimit -f 4 && exec "$0" "$1" --exact --nocapture --test-threads=1"#)
        .arg(std::env::current_exe().unwrap())
        .arg("json_lines_keep_no_part_of_a_write_the_disk_refused")
        .env(CHILD, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let outcomes = stdout
        .lines()
        .find_map(|l| l.split("OUTCOMES=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the child ran: {stdout}"));
    let written: Vec<String> = outcomes
        .char_indices()
        .filter(|(_, c)| *c == '1')
        .map(|(i, _)| format!("tool_{i}"))
        .collect();
    assert!(!written.is_empty() && written.len() < 30, "{outcomes}");
    let read = |path: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<AuditRecord>(l)
                    .unwrap_or_else(|e| panic!("{e}: {l}"))
                    .tool
            })
            .collect()
    };
    assert_eq!(read(&path), written, "{outcomes}");

    // Room again: the records go on after the last whole line.
    let sink = JsonLinesSink::file(&path).unwrap();
    sink.record(line(100)).await.unwrap();
    drop(sink);
    let mut expected = written.clone();
    expected.push("tool_100".to_owned());
    assert_eq!(read(&path), expected);

    // A line a crash cut short (never synced, so never answered) stays on its own line.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, br#"{"tool":"cut_sh"#).unwrap();
    drop(file);
    let sink = JsonLinesSink::file(&path).unwrap();
    sink.record(line(101)).await.unwrap();
    drop(sink);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[lines.len() - 2], r#"{"tool":"cut_sh"#);
    let last: AuditRecord = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(last.tool, "tool_101");
}

#[tokio::test]
async fn a_fan_out_fails_when_any_sink_fails() {
    let dir = tempfile::tempdir().unwrap();
    let memory = MemorySink::new();
    // A directory cannot take records.
    let broken = SqliteSink::open_or_unavailable(dir.path());
    let fan = FanOut::new().with(memory.clone()).with(broken);
    assert!(fan.ready().is_err());
    let mut err = fan
        .record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
        .await
        .unwrap_err();
    assert_eq!(memory.records().len(), 1, "the healthy sink still wrote");
    // Written to one sink: not handed back, or the server's later write of it would put
    // it in that sink twice. Written to none: handed back.
    assert!(err.take_record().is_none());
    let alone = FanOut::new().with(SqliteSink::open_or_unavailable(dir.path()));
    let mut err = alone
        .record(record("wipe", Outcome::Success, "2025-06-22T15:30:01Z"))
        .await
        .unwrap_err();
    assert_eq!(err.take_record().map(|r| r.tool).as_deref(), Some("wipe"));
    assert!(FanOut::new().ready().is_err());
    let ok = FanOut::new()
        .with(memory.clone())
        .with(Arc::new(MemorySink::new()));
    assert!(ok.ready().is_ok());
    ok.record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
        .await
        .unwrap();
    assert_eq!(memory.records().len(), 2);
}

/// A table written before the `kind` column (18 columns, its chain hashed without
/// `kind`) gets the column when it is opened: its chain stays intact, old rows read back
/// as `tool`, and new records of every kind chain on and verify.
#[tokio::test]
async fn an_old_table_gets_the_kind_column_and_its_chain_stays_valid() {
    use aac_tools::audit::CallKind;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    {
        let sink = SqliteSink::open(&path).unwrap();
        for _ in 0..3 {
            sink.record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
                .await
                .unwrap();
        }
    }
    // Make it the old table: the same rows and hashes, without `kind`.
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TRIGGER aac_audit_no_update; DROP TRIGGER aac_audit_no_delete;
             ALTER TABLE aac_audit DROP COLUMN kind;",
        )
        .unwrap();
        let columns: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('aac_audit')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(columns, 18);
    }
    let sink = SqliteSink::open(&path).unwrap();
    for kind in [CallKind::Resource, CallKind::Prompt, CallKind::Completion] {
        let mut r = record("test://x", Outcome::Denied, "2025-06-22T15:31:00Z");
        r.kind = kind;
        sink.record(r).await.unwrap();
    }
    drop(sink);
    let conn = Connection::open(&path).unwrap();
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('aac_audit') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(columns, AUDIT_COLUMNS);
    let report = verify_chain(&conn).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.checked, 6);
    let kinds: Vec<CallKind> = AuditQuery::new()
        .fetch(&conn)
        .unwrap()
        .into_iter()
        .map(|r| r.record.kind)
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == CallKind::Tool).count(), 3);
    let prompts = AuditQuery::new()
        .kind(CallKind::Prompt)
        .fetch(&conn)
        .unwrap();
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].record.kind, CallKind::Prompt);
    // The kind is hashed: turning a resource read into a tool call breaks the chain.
    conn.execute_batch("DROP TRIGGER aac_audit_no_update;")
        .unwrap();
    conn.execute("UPDATE aac_audit SET kind = 'tool' WHERE seq = 4", [])
        .unwrap();
    let broken = verify_chain(&conn)
        .unwrap()
        .broken
        .expect("the edit is detected");
    assert_eq!(broken.seq, 4);
}

/// A write of the tool's that stands, whose record met the audit database locked by
/// another process: answered 503, and recorded once the lock is gone (the sink hands the
/// record back; the server writes it before any later one).
#[tokio::test]
async fn a_record_that_met_a_locked_database_is_written_once_it_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::builder(&path)
        .busy_timeout(std::time::Duration::from_millis(100))
        .retry_interval(std::time::Duration::from_millis(10))
        .open()
        .unwrap();
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(tokens())
        .audit(sink)
        .build()
        .unwrap();
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let request = CallRequest::new("wipe", Some(json!({"confirm": true}))).bearer("alice");
    let err = server.call(request).await.into_result().unwrap_err();
    assert_eq!(err.reason(), "audit_unavailable");
    assert!(err.message().contains("its record is kept"), "{err}");
    other.execute_batch("COMMIT").unwrap();
    assert_eq!(rows(&other), 0);

    // The sink failed: a call is refused before its handler, and its record is what
    // makes the sink write again; the owed record goes first.
    let echo = || CallRequest::new("echo", Some(json!({"text": "hi"}))).bearer("alice");
    let _ = server.call(echo()).await;
    let answer = server.call(echo()).await;
    assert!(answer.error().is_none(), "{:?}", answer.error());
    let stored: Vec<(String, u16, String)> = other
        .prepare("SELECT tool, status, outcome FROM aac_audit ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        stored.first(),
        Some(&("wipe".to_owned(), 503, "success".to_owned())),
        "{stored:?}"
    );
    assert_eq!(
        stored.iter().filter(|(tool, ..)| tool == "wipe").count(),
        1,
        "{stored:?}"
    );
    assert_eq!(stored.last().map(|r| r.1), Some(200), "{stored:?}");
    assert!(verify_chain(&other).unwrap().is_intact());
}

/// A cell edited to hold terminal escapes (an unknown `access_level`, `check` or `kind`)
/// makes the record unreadable; the warning that says so, and the row listed as stored,
/// print the value escaped, as every printed value is, never the raw bytes a terminal
/// would obey.
#[tokio::test]
async fn an_unreadable_cell_is_named_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    sink.record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
        .await
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("DROP TRIGGER aac_audit_no_update;")
        .unwrap();
    for (column, valid) in [
        ("access_level", "NULL"),
        ("\"check\"", "NULL"),
        ("kind", "'tool'"),
    ] {
        conn.execute(
            &format!(
                "UPDATE aac_audit SET {column} = char(27) || ']0;pwned' || char(7) || char(10) || 'x'"
            ),
            [],
        )
        .unwrap();
        for json in [false, true] {
            let (mut out, mut warnings) = (Vec::new(), Vec::new());
            AuditCommand {
                json,
                ..AuditCommand::default()
            }
            .run_with_warnings(&conn, &mut out, &mut warnings)
            .unwrap();
            let err = String::from_utf8(warnings).unwrap();
            let out = String::from_utf8(out).unwrap();
            assert!(err.contains("unreadable"), "{column}: {err}");
            assert_eq!(err.lines().count(), 1, "{column}: {err:?}");
            assert!(
                !err.contains('\u{1b}') && !err.contains('\u{7}'),
                "{column}: {err:?}"
            );
            assert!(
                !out.contains('\u{1b}') && !out.contains('\u{7}'),
                "{column}: {out:?}"
            );
            assert_eq!(out.lines().count(), if json { 1 } else { 2 }, "{out:?}");
        }
        conn.execute(&format!("UPDATE aac_audit SET {column} = {valid}"), [])
            .unwrap();
    }
}

/// The files the framework creates (the application's database, the audit database with
/// its write-ahead log, the checkpoint file) are readable by their owner only: they hold
/// the trail, token hashes and the application's data. A file that exists keeps its
/// permissions.
#[cfg(unix)]
#[tokio::test]
async fn new_database_and_checkpoint_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.db");
    let db = Database::open(&data).unwrap();
    db.with_writer(|c| c.execute_batch("CREATE TABLE t (x)"))
        .unwrap();
    assert_eq!(mode(&data), 0o600);
    let audit = dir.path().join("audit.db");
    let sink = SqliteSink::open(&audit).unwrap();
    sink.record(record("echo", Outcome::Success, "2025-06-22T15:30:00Z"))
        .await
        .unwrap();
    assert_eq!(mode(&audit), 0o600);
    let wal = dir.path().join("audit.db-wal");
    assert!(wal.exists());
    assert_eq!(
        mode(&wal),
        0o600,
        "SQLite gives its log the database's permissions"
    );
    let key = aac_tools::audit::CheckpointKey::generate().unwrap();
    let checkpoints = dir.path().join("checkpoints.jsonl");
    aac_tools::audit::write_checkpoint(&open_reader(&audit).unwrap(), &key, &checkpoints).unwrap();
    assert_eq!(mode(&checkpoints), 0o600);
    // An existing file keeps what its owner chose.
    let shared = dir.path().join("shared.db");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
    drop(Database::open(&shared).unwrap());
    assert_eq!(mode(&shared), 0o640);
}

/// A file at a database's path that could not be trusted with tokens and the trail is
/// refused, by the application's database and the audit sink alike, with what to do: one
/// other users may write (they could mint a token or rewrite the trail), an empty one
/// another user owns (a placeholder planted in a shared directory), a symbolic link to
/// nothing (SQLite created its target `0644`), and a FIFO (whose open waited for ever),
/// read-only opens included. Before, each was opened as it was.
#[cfg(unix)]
#[tokio::test]
async fn a_database_file_that_cannot_be_trusted_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let writable = dir.path().join("writable.db");
    std::fs::write(&writable, b"").unwrap();
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = Database::open(&writable).unwrap_err().to_string();
    assert!(
        err.contains("may be written by other users (mode 0666)"),
        "{err}"
    );
    let err = SqliteSink::open(&writable).unwrap_err().to_string();
    assert!(err.contains("may be written by other users"), "{err}");
    // Group-writable alike; readable by others is the owner's choice.
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o620)).unwrap();
    assert!(Database::open(&writable).is_err());
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(Database::open(&writable).unwrap());

    let link = dir.path().join("link.db");
    let target = dir.path().join("missing").join("real.db");
    std::fs::create_dir(dir.path().join("missing")).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = Database::open(&link).unwrap_err().to_string();
    assert!(
        err.contains("symbolic link to a file that does not exist"),
        "{err}"
    );
    assert!(SqliteSink::open(&link).is_err());
    assert!(!target.exists(), "nothing created through the link");
    // A link to a file that exists is followed, as before.
    std::fs::write(&target, b"").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    drop(Database::open(&link).unwrap());

    let fifo = dir.path().join("fifo.db");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let err = Database::open(&fifo).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
    let err = Database::open_read_only(&fifo).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
    assert!(SqliteSink::open(&fifo).is_err());
    assert!(open_reader(&fifo).is_err());

    // An empty file of another user's (only root can make one here).
    let planted = dir.path().join("planted.db");
    std::fs::write(&planted, b"").unwrap();
    if std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).is_ok() {
        let err = Database::open(&planted).unwrap_err().to_string();
        assert!(
            err.contains("empty file owned by another user (uid 65534)"),
            "{err}"
        );
        assert!(SqliteSink::open(&planted).is_err());
    }
}

/// The writer's write-ahead log is cut back to 64 MiB after a checkpoint
/// (`journal_size_limit`): grown by writes while a long reader held its snapshot (312 MB
/// in 20 s under load), it used to stay at its largest until the server stopped.
#[test]
fn the_write_ahead_log_is_cut_back_after_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("data.db")).unwrap();
    let limit: i64 = db
        .with_writer(|c| c.query_row("PRAGMA journal_size_limit", [], |r| r.get(0)))
        .unwrap();
    assert_eq!(limit, 64 * 1024 * 1024);
}

/// A listing reads the trail a page at a time, each page in a transaction of its own, so
/// that no snapshot is held while its records are handed on (to a pager left open): the
/// write-ahead log can start over meanwhile (a checkpoint completes between pages).
/// Before, the listing held one snapshot to its end, and the log grew with every write
/// until it ended.
#[tokio::test]
async fn a_listing_holds_no_snapshot_between_its_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = SqliteSink::open(&path).unwrap();
    let at = |i: usize| format!("2025-06-21T10:{:02}:{:02}Z", (i / 60) % 60, i % 60);
    let writes: Vec<_> = (0..2500)
        .map(|i| sink.record(record("echo", Outcome::Success, &at(i))))
        .collect();
    for write in writes {
        write.await.unwrap();
    }
    let reader = open_reader(&path).unwrap();
    let writer = Connection::open(&path).unwrap();
    let mut seen = Vec::new();
    let mut checkpoint_while_listing = None;
    AuditQuery::new()
        .for_each(&reader, |stored| {
            seen.push(stored.seq);
            if stored.seq == 1500 {
                // A checkpoint that must wait for no reader: (busy, log pages, pages
                // checkpointed).
                let done: (i64, i64, i64) = writer
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .unwrap();
                checkpoint_while_listing = Some(done.0);
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, (1..=2500).collect::<Vec<i64>>());
    assert_eq!(
        checkpoint_while_listing,
        Some(0),
        "the checkpoint was not held up"
    );
    // `--limit` counts from the end, across pages too.
    let last: Vec<i64> = AuditQuery::new()
        .limit(1200)
        .fetch(&reader)
        .unwrap()
        .iter()
        .map(|s| s.seq)
        .collect();
    assert_eq!(last, (1301..=2500).collect::<Vec<i64>>());
    assert!(
        AuditQuery::new()
            .limit(0)
            .fetch(&reader)
            .unwrap()
            .is_empty()
    );
    // A window of the trail, across pages, from its first match to its last: records
    // 1201 to 2400 arrived in [10:20:00, 10:40:00).
    let window: Vec<i64> = AuditQuery::new()
        .since("2025-06-21T10:20:00Z")
        .unwrap()
        .until("2025-06-21T10:40:00Z")
        .unwrap()
        .fetch(&reader)
        .unwrap()
        .iter()
        .map(|s| s.seq)
        .collect();
    assert_eq!(window, (1201..=2400).collect::<Vec<i64>>());
    let none = AuditQuery::new().tool("nothing").fetch(&reader).unwrap();
    assert!(none.is_empty());
}
