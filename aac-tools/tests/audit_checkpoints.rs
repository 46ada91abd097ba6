//! Signed checkpoints catch what the hash chain alone cannot: a writer of the database
//! file who edits a record and re-hashes every record after it, or who cuts the newest
//! records, leaves a chain that verifies — but not checkpoints signed with a key kept
//! outside the file.
#![cfg(feature = "sqlite")]

use std::path::Path;

use aac_tools::audit::{
    AuditRecord, AuditSink, CheckpointKey, Outcome, SqliteSink, open_reader, read_checkpoints,
    verify_chain, verify_checkpoints, write_checkpoint, write_checkpoint_for,
};
use rusqlite::Connection;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn record(n: usize) -> AuditRecord {
    AuditRecord {
        tool: format!("tool_{n}"),
        outcome: Outcome::Success,
        reason: None,
        check: None,
        status: 200,
        scopes_provided: vec!["a:read".to_owned()],
        timestamp: "2026-12-01T05:00:00Z".to_owned(),
        principal: Some("alice".to_owned()),
        workspace: None,
        transport: "stdio".to_owned(),
        request_id: Some(n.to_string()),
        duration_us: 10,
        access_level: None,
        arguments: json!({}),
        confirmed_by: None,
        kind: aac_tools::audit::CallKind::Tool,
    }
}

/// A trail of `n` records at `path`.
async fn trail(path: &Path, n: usize) {
    let sink = SqliteSink::open(path).unwrap();
    for i in 1..=n {
        sink.record(record(i)).await.unwrap();
    }
}

/// What a forger with the database file does: drop the triggers, edit, and re-hash every
/// record from `from` on, with the documented hash (`docs/audit.md`).
fn edit_and_rehash(path: &Path, from: i64) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "DROP TRIGGER aac_audit_no_update; UPDATE aac_audit SET tool = 'innocent' WHERE seq = 3",
    )
    .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT seq, timestamp, tool, outcome, reason, \"check\", status, scopes_provided, \
             principal, workspace, transport, request_id, duration_us, access_level, arguments, \
             prev_hash FROM aac_audit ORDER BY seq",
        )
        .unwrap();
    let rows: Vec<Vec<Value>> = stmt
        .query_map([], |r| {
            (0..16)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Integer(n) => json!(n),
                        rusqlite::types::ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
                        _ => Value::Null,
                    })
                })
                .collect()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut prev: Option<String> = None;
    for row in rows {
        let seq = row[0].as_i64().unwrap();
        let prev_hash = prev
            .clone()
            .unwrap_or_else(|| row[15].as_str().unwrap().to_owned());
        if seq < from {
            prev = None;
            continue;
        }
        let canonical = serde_json::to_string(&row[..15]).unwrap();
        let hash: String = Sha256::digest(format!("{prev_hash}\n{canonical}").as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        conn.execute(
            "UPDATE aac_audit SET prev_hash = ?2, hash = ?3 WHERE seq = ?1",
            rusqlite::params![seq, prev_hash, hash],
        )
        .unwrap();
        prev = Some(hash);
    }
}

#[tokio::test]
async fn a_rehashed_edit_passes_the_chain_but_not_the_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let file = dir.path().join("checkpoints.jsonl");
    let key = CheckpointKey::generate().unwrap();
    trail(&db, 5).await;
    let conn = open_reader(&db).unwrap();
    let first = write_checkpoint(&conn, &key, &file).unwrap().unwrap();
    assert_eq!(first.seq, 5);
    // Nothing new: no second checkpoint.
    assert_eq!(write_checkpoint(&conn, &key, &file).unwrap(), None);
    let report = verify_checkpoints(&conn, &file, &key.public_hex()).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!((report.checked, report.last_seq), (1, Some(5)));
    drop(conn);

    edit_and_rehash(&db, 3);
    let conn = open_reader(&db).unwrap();
    // The re-hash works on the chain alone (this is the forgery it cannot see) …
    let chain = verify_chain(&conn).unwrap();
    assert!(chain.is_intact(), "{chain}");
    // … but not on the signed head.
    let report = verify_checkpoints(&conn, &file, &key.public_hex()).unwrap();
    assert!(!report.is_intact());
    assert!(report.to_string().contains("re-hashed"), "{report}");
}

#[tokio::test]
async fn a_truncated_tail_and_a_forged_checkpoint_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let file = dir.path().join("checkpoints.jsonl");
    let key = CheckpointKey::from_hex(&CheckpointKey::generate().unwrap().secret_hex()).unwrap();
    trail(&db, 3).await;
    write_checkpoint(&open_reader(&db).unwrap(), &key, &file).unwrap();
    trail(&db, 2).await;
    write_checkpoint(&open_reader(&db).unwrap(), &key, &file).unwrap();
    assert_eq!(read_checkpoints(&file).unwrap().len(), 2);

    // Cut the two newest records: the chain is intact and shorter.
    let writer = Connection::open(&db).unwrap();
    writer
        .execute_batch("DROP TRIGGER aac_audit_no_delete; DELETE FROM aac_audit WHERE seq > 3")
        .unwrap();
    let conn = open_reader(&db).unwrap();
    assert!(verify_chain(&conn).unwrap().is_intact());
    let report = verify_checkpoints(&conn, &file, &key.public_hex()).unwrap();
    assert!(report.to_string().contains("truncated"), "{report}");
    assert_eq!(report.checked, 1, "the first checkpoint still holds");

    // Another key, or an altered checkpoint, does not verify.
    let other = CheckpointKey::generate().unwrap();
    let report = verify_checkpoints(&conn, &file, &other.public_hex()).unwrap();
    assert!(report.to_string().contains("signature"), "{report}");
    let text = std::fs::read_to_string(&file).unwrap();
    let first_line = text
        .lines()
        .next()
        .unwrap()
        .replace("\"seq\":3", "\"seq\":2");
    std::fs::write(&file, format!("{first_line}\n")).unwrap();
    let report = verify_checkpoints(&conn, &file, &key.public_hex()).unwrap();
    assert!(report.to_string().contains("signature"), "{report}");
    assert!(CheckpointKey::from_hex("not hex").is_err());
}

/// A checkpoint a full disk (or a crash) cut short is a last line without its newline:
/// reading skips it, and the next checkpoint cuts it rather than being glued to it (which
/// left a line that was no checkpoint in the middle, and every later `--verify
/// --checkpoints` failing on it, the trail untouched).
#[tokio::test]
async fn a_checkpoint_cut_short_is_skipped_then_cut_not_glued_to() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let file = dir.path().join("checkpoints.jsonl");
    let key = CheckpointKey::generate().unwrap();
    trail(&db, 3).await;
    write_checkpoint(&open_reader(&db).unwrap(), &key, &file).unwrap();
    let whole = std::fs::read_to_string(&file).unwrap();
    let mut torn = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    std::io::Write::write_all(&mut torn, &whole.as_bytes()[..40]).unwrap();
    drop(torn);
    assert_eq!(read_checkpoints(&file).unwrap().len(), 1);
    let conn = open_reader(&db).unwrap();
    assert!(
        verify_checkpoints(&conn, &file, &key.public_hex())
            .unwrap()
            .is_intact()
    );
    drop(conn);
    trail(&db, 2).await;
    let conn = open_reader(&db).unwrap();
    assert!(write_checkpoint(&conn, &key, &file).unwrap().is_some());
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.starts_with(&whole), "{text}");
    let report = verify_checkpoints(&conn, &file, &key.public_hex()).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.checked, 2);
}

/// A server writes a checkpoint every 10 s only when the head moved: it reads the file's
/// last line to know, never the whole file (which grows for as long as the server runs:
/// read whole each time, 79 MB of checkpoints took 180 MB of memory).
#[tokio::test]
async fn the_next_checkpoint_reads_only_the_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    trail(&db, 3).await;
    let conn = open_reader(&db).unwrap();
    let key = CheckpointKey::generate().unwrap();
    let file = dir.path().join("checkpoints.jsonl");
    // Lines of the past that no reading of the whole file gets past (after a first line
    // that is a checkpoint: a file that starts otherwise is not written to), then one
    // checkpoint.
    let scratch = dir.path().join("scratch.jsonl");
    write_checkpoint(&conn, &key, &scratch).unwrap();
    let first = std::fs::read_to_string(&scratch).unwrap();
    std::fs::write(&file, first + &"not a checkpoint\n".repeat(100_000)).unwrap();
    assert!(write_checkpoint(&conn, &key, &file).unwrap().is_some());
    // The head has not moved: nothing written, and the file not read whole (it would
    // fail on its first line).
    assert!(write_checkpoint(&conn, &key, &file).unwrap().is_none());
    assert!(
        read_checkpoints(&file).is_err(),
        "the old lines are still there"
    );
    drop(conn);
    trail(&db, 1).await;
    let conn = open_reader(&db).unwrap();
    let written = write_checkpoint(&conn, &key, &file)
        .unwrap()
        .expect("moved");
    assert_eq!(written.seq, 4);
}

/// A record someone else chains to the head between two checkpoints (here another sink on
/// the same file: what a writer of the file can do with the documented hash) verifies
/// with the chain, but the server's next checkpoint names it (signed), and verifying the
/// checkpoints fails on it. Before, the checkpoint signed it as the server's own. The
/// server's own records, before and after, are never named.
#[tokio::test]
async fn a_record_another_writer_appended_is_named_by_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let file = dir.path().join("checkpoints.jsonl");
    let key = CheckpointKey::generate().unwrap();
    let server = SqliteSink::open(&path).unwrap();
    // What came before the server's first checkpoint is not its own to tell.
    trail(&path, 2).await;
    let conn = open_reader(&path).unwrap();
    let first = write_checkpoint_for(&server, &conn, &key, &file)
        .unwrap()
        .unwrap();
    assert_eq!((first.seq, first.foreign.clone()), (2, vec![]));
    server.record(record(3)).await.unwrap();
    let forger = SqliteSink::open(&path).unwrap();
    forger.record(record(4)).await.unwrap();
    forger.record(record(5)).await.unwrap();
    drop(forger);
    server.record(record(6)).await.unwrap();
    let second = write_checkpoint_for(&server, &conn, &key, &file)
        .unwrap()
        .unwrap();
    assert_eq!((second.seq, second.foreign.clone()), (6, vec![(4, 5)]));
    assert!(verify_chain(&conn).unwrap().is_intact());
    let report = verify_checkpoints(&conn, &file, &key.public_hex()).unwrap();
    assert!(!report.is_intact(), "{report}");
    assert!(
        report
            .to_string()
            .contains("the records at seq 4–5 were appended by another writer"),
        "{report}"
    );
    // Taking the names out of the checkpoint breaks its signature.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace(r#","foreign":[[4,5]]"#, "")).unwrap();
    let report = verify_checkpoints(&conn, &file, &key.public_hex()).unwrap();
    assert!(report.to_string().contains("signature"), "{report}");
    std::fs::write(&file, &text).unwrap();
    // The server's own records after it are its own.
    for n in 7..=9 {
        server.record(record(n)).await.unwrap();
    }
    let third = write_checkpoint_for(&server, &conn, &key, &file)
        .unwrap()
        .unwrap();
    assert_eq!((third.seq, third.foreign), (9, vec![]));
}

/// `--checkpoints` naming a file that is not one (a mistyped path, a link a local user
/// planted to a file of the operator's) writes nothing to it: its last line used to be
/// cut and a checkpoint appended. A FIFO or a device is refused at once, written or read
/// (`/dev/zero` as the file took 1.7 GB in 3 s to read).
#[cfg(unix)]
#[tokio::test]
async fn a_file_that_is_not_a_checkpoint_file_is_never_written_or_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let key = CheckpointKey::generate().unwrap();
    trail(&db, 2).await;
    let conn = open_reader(&db).unwrap();
    let other = dir.path().join("notes.txt");
    let text = "# the operator's file\nimportant last line without newline";
    std::fs::write(&other, text).unwrap();
    let link = dir.path().join("checkpoints.jsonl");
    std::os::unix::fs::symlink(&other, &link).unwrap();
    for path in [&other, &link] {
        let err = write_checkpoint(&conn, &key, path).unwrap_err().to_string();
        assert!(err.contains("is not a checkpoint file"), "{err}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), text);
    }
    let fifo = dir.path().join("fifo.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for path in [fifo.as_path(), Path::new("/dev/zero")] {
        let err = write_checkpoint(&conn, &key, path).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{path:?}: {err}");
        let err = read_checkpoints(path).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{path:?}: {err}");
    }
    // A line longer than any checkpoint is not read whole.
    let long = dir.path().join("long.jsonl");
    std::fs::write(&long, vec![b'x'; 3 << 20]).unwrap();
    let err = read_checkpoints(&long).unwrap_err().to_string();
    assert!(err.contains("line 1: longer than"), "{err}");
}
