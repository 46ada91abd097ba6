//! The durable audit sinks of variants (a) and (a-normal), and what one flush to disk
//! costs on the file system they write to.

use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use aac_tools::audit::{SqliteSink, Synchronous};

/// The SQLite audit sink on `path` with its defaults (group commit, WAL) and this
/// `synchronous`: `Full` (the default: each commit is synced to disk before the answer
/// leaves) or `Normal` (commits reach the operating system; synced at checkpoints).
pub fn sink(path: &Path, synchronous: Synchronous) -> io::Result<SqliteSink> {
    SqliteSink::builder(path)
        .synchronous(synchronous)
        .open()
        .map_err(io::Error::other)
}

/// `fdatasync` latencies, in nanoseconds, of `count` small writes to a file in `dir`:
/// the first half appended (the file grows, as the write-ahead log does between
/// checkpoints), the second half overwriting its start (as the log is rewritten after
/// one). A write-ahead log commit of one audit record is about this size.
pub fn fdatasync_latencies(dir: &Path, count: usize) -> io::Result<Vec<u64>> {
    let path = dir.join("fdatasync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let frame = [0x5au8; 4096 + 24];
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        if i == count / 2 {
            file.seek(SeekFrom::Start(0))?;
        }
        file.write_all(&frame)?;
        let started = Instant::now();
        file.sync_data()?;
        latencies.push(started.elapsed().as_nanos() as u64);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(latencies)
}

/// SQLite's own cost of audit records, with none of aac-tools' code: `count`
/// transactions, each what the sink's append does for a batch of `rows` records
/// (`BEGIN IMMEDIATE`, read the chain's head, insert `rows` rows, `COMMIT`; one row is a
/// lone caller's record, several a batch under load), on a fresh `aac_audit` table in
/// `dir` (write-ahead log, `synchronous = NORMAL`, prepared statements), each inserting
/// copies of the last row of the trail `source` (a real record of the run). Latencies of
/// whole transactions, in nanoseconds.
///
/// With `evict`, 16 MiB are touched between transactions (outside the timing), so that
/// each one starts with SQLite's code and data out of the CPU caches, as it does in a
/// server where the rest of a call (the transport, JSON, the runtime, the kernel's pipe
/// and socket code) runs between two transactions; without, the loop keeps them warm.
pub fn sqlite_commit_latencies(
    source: &Path,
    dir: &Path,
    count: usize,
    rows: usize,
    evict: bool,
) -> io::Result<Vec<u64>> {
    use rusqlite::types::Value;
    let failed = |e: rusqlite::Error| io::Error::other(format!("SQLite probe: {e}"));
    let path = dir.join("sqlite-commit-probe.db");
    let _ = std::fs::remove_file(&path);
    // The table exactly as the sink makes it (index and triggers included).
    drop(sink(&path, Synchronous::Normal)?);
    let row: Vec<Value> = {
        let source = rusqlite::Connection::open(source).map_err(failed)?;
        let mut statement = source
            .prepare("SELECT * FROM aac_audit ORDER BY seq DESC LIMIT 1")
            .map_err(failed)?;
        let columns = statement.column_count();
        statement
            .query_row([], |r| (0..columns).map(|i| r.get::<_, Value>(i)).collect())
            .map_err(failed)?
    };
    let conn = rusqlite::Connection::open(&path).map_err(failed)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(failed)?;
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .map_err(failed)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(failed)?;
    let insert = format!(
        "INSERT INTO aac_audit VALUES ({})",
        vec!["?"; row.len()].join(", ")
    );
    let mut latencies = Vec::with_capacity(count);
    let mut values = row;
    let mut scratch = if evict {
        vec![0u8; 16 << 20]
    } else {
        Vec::new()
    };
    for n in 0..count {
        // One write per cache line.
        for line in scratch.iter_mut().step_by(64) {
            *line = line.wrapping_add(n as u8 | 1);
        }
        std::hint::black_box(&scratch);
        let started = Instant::now();
        conn.prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut s| s.execute([]))
            .map_err(failed)?;
        let seq: i64 = conn
            .prepare_cached("SELECT seq, hash FROM aac_audit ORDER BY seq DESC LIMIT 1")
            .and_then(|mut s| {
                s.query_row([], |r| {
                    let _: String = r.get(1)?;
                    r.get(0)
                })
            })
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(0),
                e => Err(e),
            })
            .map_err(failed)?;
        for k in 0..rows.max(1) {
            values[0] = Value::Integer(seq + 1 + k as i64);
            conn.prepare_cached(&insert)
                .and_then(|mut s| s.execute(rusqlite::params_from_iter(values.iter())))
                .map_err(failed)?;
        }
        conn.prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]))
            .map_err(failed)?;
        latencies.push(started.elapsed().as_nanos() as u64);
    }
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    Ok(latencies)
}
