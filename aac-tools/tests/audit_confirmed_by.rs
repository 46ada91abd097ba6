//! `confirmed_by`: a table written before the column existed gets it when the sink opens,
//! its old rows still verify, and new rows that set it chain on and read back.

use aac_tools::access::AccessLevel;
use aac_tools::audit::{
    AUDIT_COLUMNS, AuditQuery, AuditRecord, AuditSink, Check, GENESIS_HASH, Outcome, SqliteSink,
    open_reader, verify_chain,
};
use rusqlite::Connection;
use serde_json::json;

/// The table as aac-tools wrote it before `confirmed_by`.
const OLD_SCHEMA: &str = r#"
CREATE TABLE aac_audit (
    seq INTEGER PRIMARY KEY, timestamp TEXT NOT NULL, tool TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('success', 'denied', 'error')), reason TEXT,
    "check" TEXT, status INTEGER NOT NULL, scopes_provided TEXT NOT NULL, principal TEXT,
    workspace TEXT, transport TEXT NOT NULL, request_id TEXT, duration_us INTEGER NOT NULL,
    access_level TEXT, arguments TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL
);"#;

#[tokio::test]
async fn an_old_table_gains_the_column_and_its_chain_still_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(OLD_SCHEMA).unwrap();
        // The record of the pinned test vector (`row.rs`), with its hash.
        conn.execute(
            "INSERT INTO aac_audit VALUES (1, '2025-06-22T15:30:00.000000Z', 'delete_issue', \
             'denied', 'destructive_flag_missing', 'confirm', 400, '[\"issues:write\"]', \
             'alice', 'demo', 'http', 'req-1', 434, 'delete', \
             '{\"issue_id\":\"sha256:0123456789abcdef\"}', ?1, \
             '25372bf7d4465cf93296a7fa0d90deb857508ed345c1fc429751d64451013183')",
            [GENESIS_HASH],
        )
        .unwrap();
    }
    let sink = SqliteSink::open(&path).unwrap();
    sink.record(AuditRecord {
        tool: "delete_issue".to_owned(),
        outcome: Outcome::Success,
        reason: None,
        check: None::<Check>,
        status: 200,
        scopes_provided: vec!["issues:write".to_owned()],
        timestamp: "2025-06-22T15:31:00.000000Z".to_owned(),
        principal: Some("alice".to_owned()),
        workspace: Some("demo".to_owned()),
        transport: "stdio".to_owned(),
        request_id: None,
        duration_us: 1,
        access_level: Some(AccessLevel::Delete),
        arguments: json!({}),
        confirmed_by: Some("user".to_owned()),
        kind: aac_tools::audit::CallKind::Tool,
    })
    .await
    .unwrap();
    let conn = open_reader(&path).unwrap();
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('aac_audit') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(columns, AUDIT_COLUMNS);
    let report = verify_chain(&conn).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.checked, 2);
    let stored = AuditQuery::new().fetch(&conn).unwrap();
    let by: Vec<Option<&str>> = stored
        .iter()
        .map(|s| s.record.confirmed_by.as_deref())
        .collect();
    assert_eq!(by, [None, Some("user")]);
    // The value is part of the hash: changing it breaks the chain.
    drop(conn);
    let raw = Connection::open(&path).unwrap();
    raw.execute_batch("DROP TRIGGER aac_audit_no_update; UPDATE aac_audit SET confirmed_by = 'argument' WHERE seq = 2")
        .unwrap();
    assert!(!verify_chain(&raw).unwrap().is_intact());
}

/// Two processes opening the same trail of an older release at once (a server restarted
/// while an operator runs `init`) both open it: the look at the schema and its change
/// are one step. Before, one of them failed on the other's half-done change (`index
/// aac_audit_no_blob_writes already exists`) in most rounds.
#[tokio::test]
async fn two_sinks_opening_an_old_table_at_once_both_open_it() {
    for round in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        // A trail the sink of an older release wrote: in WAL mode, as every sink's is.
        let conn = Connection::open(&path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        conn.execute_batch(OLD_SCHEMA).unwrap();
        drop(conn);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let opens: Vec<_> = (0..2)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteSink::open(&path).map(drop)
                })
            })
            .collect();
        for open in opens {
            let opened = open.join().unwrap();
            assert!(opened.is_ok(), "round {round}: {opened:?}");
        }
        let conn = open_reader(&path).unwrap();
        let report = aac_tools::audit::verify_chain(&conn).unwrap();
        assert!(report.is_intact(), "round {round}: {report}");
    }
}
