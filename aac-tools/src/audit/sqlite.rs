//! The SQLite sink: an append-only, hash-chained table `aac_audit`, written by one
//! thread that commits the records of concurrent callers together (group commit).

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, MAIN_DB, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::worker::{Backend, Batching, Health, SinkStats, Worker};
use super::{AuditError, AuditRecord, AuditSink, canonical_timestamp};
use crate::principal::BoxFuture;

/// The name of the audit table.
pub const AUDIT_TABLE: &str = "aac_audit";

/// The `prev_hash` of the first record: 64 zeros.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The table. Idempotent.
const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS aac_audit (
    seq             INTEGER PRIMARY KEY,
    timestamp       TEXT    NOT NULL,
    tool            TEXT    NOT NULL,
    outcome         TEXT    NOT NULL CHECK (outcome IN ('success', 'denied', 'error')),
    reason          TEXT,
    "check"         TEXT,
    status          INTEGER NOT NULL,
    scopes_provided TEXT    NOT NULL,
    principal       TEXT,
    workspace       TEXT,
    transport       TEXT    NOT NULL,
    request_id      TEXT,
    duration_us     INTEGER NOT NULL,
    access_level    TEXT,
    arguments       TEXT    NOT NULL,
    prev_hash       TEXT    NOT NULL,
    hash            TEXT    NOT NULL
);
"#;

/// The index and the append-only triggers, created once the table is known to be ours.
const SCHEMA_EXTRAS: &str = r#"
CREATE INDEX IF NOT EXISTS aac_audit_timestamp ON aac_audit (timestamp);
CREATE TRIGGER IF NOT EXISTS aac_audit_no_update BEFORE UPDATE ON aac_audit
BEGIN
    SELECT RAISE(ABORT, 'aac_audit is append-only: UPDATE of audit records is refused');
END;
CREATE TRIGGER IF NOT EXISTS aac_audit_no_delete BEFORE DELETE ON aac_audit
BEGIN
    SELECT RAISE(ABORT, 'aac_audit is append-only: DELETE of audit records is refused');
END;
"#;

/// The columns of `aac_audit`, in order: the stable contract readers rely on.
pub const AUDIT_COLUMNS: [&str; 17] = [
    "seq",
    "timestamp",
    "tool",
    "outcome",
    "reason",
    "check",
    "status",
    "scopes_provided",
    "principal",
    "workspace",
    "transport",
    "request_id",
    "duration_us",
    "access_level",
    "arguments",
    "prev_hash",
    "hash",
];

pub(crate) const SELECT_COLUMNS: &str = r#"seq, timestamp, tool, outcome, reason, "check", status, scopes_provided, principal, workspace, transport, request_id, duration_us, access_level, arguments, prev_hash, hash"#;

const INSERT: &str = r#"INSERT INTO aac_audit (seq, timestamp, tool, outcome, reason, "check", status, scopes_provided, principal, workspace, transport, request_id, duration_us, access_level, arguments, prev_hash, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"#;

/// Create `aac_audit` (with its index and append-only triggers) if it does not exist,
/// and check that an existing one has the expected columns.
///
/// [`SqliteSink`] does this when it opens; call it yourself when a reader may run
/// before the sink ever opened the file (a dashboard on a fresh database).
pub fn ensure_table(conn: &Connection) -> Result<(), AuditError> {
    conn.execute_batch(SCHEMA)
        .map_err(|e| AuditError::new(format!("cannot create the `aac_audit` table: {e}")))?;
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info('aac_audit') ORDER BY cid")
        .map_err(sql_error)?;
    let columns: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(Iterator::collect)
        .map_err(sql_error)?;
    if columns != AUDIT_COLUMNS {
        return Err(AuditError::new(format!(
            "the existing `aac_audit` table has columns ({}) but this version of aac-tools \
             expects ({}); move it aside or migrate it",
            columns.join(", "),
            AUDIT_COLUMNS.join(", ")
        )));
    }
    conn.execute_batch(SCHEMA_EXTRAS).map_err(|e| {
        AuditError::new(format!(
            "cannot create the `aac_audit` index and triggers: {e}"
        ))
    })
}

fn sql_error(err: rusqlite::Error) -> AuditError {
    AuditError::new(format!("audit database error: {err}"))
}

/// How records are grouped into transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitMode {
    /// Group commit: every record that arrives while a commit is being flushed is
    /// committed with the others in the next transaction, so one flush serves many
    /// calls. The default.
    #[default]
    Group,
    /// One transaction, and one flush, per record: the baseline of the benchmark.
    PerRecord,
}

/// SQLite's `synchronous` setting on the sink's connection (the database is in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `FULL`: every commit syncs the write-ahead log to disk before it returns, so a
    /// record survives a crash of the process and of the machine (power loss). The
    /// default.
    #[default]
    Full,
    /// `NORMAL`: commits reach the operating system but are synced only at checkpoints,
    /// so a record survives a crash of the process (SIGKILL) but perhaps not a power
    /// loss. Faster.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Configures a [`SqliteSink`]: `SqliteSink::builder(path)`.
#[derive(Debug, Clone)]
pub struct SqliteSinkBuilder {
    path: PathBuf,
    commit: CommitMode,
    synchronous: Synchronous,
    max_batch: usize,
    linger: Duration,
    busy_timeout: Duration,
    retry_interval: Duration,
}

impl SqliteSinkBuilder {
    /// Group commit (the default) or one transaction per record.
    pub fn commit(mut self, mode: CommitMode) -> SqliteSinkBuilder {
        self.commit = mode;
        self
    }

    /// `synchronous = FULL` (the default) or `NORMAL`.
    pub fn synchronous(mut self, synchronous: Synchronous) -> SqliteSinkBuilder {
        self.synchronous = synchronous;
        self
    }

    /// The most records one group commit writes (default 1024).
    pub fn max_batch(mut self, max: usize) -> SqliteSinkBuilder {
        self.max_batch = max.max(1);
        self
    }

    /// Group commit only: when the previous transaction held several records, the
    /// next one waits until as many records are there (its callers come back), as
    /// long as records arrive less than `gap` apart and for at most 1 ms in all, so
    /// that concurrent callers share one flush rather than alternate between two.
    /// Default 50 µs; zero never waits. A lone caller never waits.
    pub fn linger(mut self, gap: Duration) -> SqliteSinkBuilder {
        self.linger = gap;
        self
    }

    /// How long a commit waits for another connection's write lock (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> SqliteSinkBuilder {
        self.busy_timeout = timeout;
        self
    }

    /// How often an unavailable sink tries to open its database again (default 1 s).
    pub fn retry_interval(mut self, interval: Duration) -> SqliteSinkBuilder {
        self.retry_interval = interval;
        self
    }

    /// Open the database (creating the file and the table if needed) and start the
    /// writer thread, or say why the database cannot take records.
    pub fn open(self) -> Result<SqliteSink, AuditError> {
        let connected = connect(&self.path, &self)?;
        self.start(Some(connected), None)
    }

    /// Like [`open`](Self::open), but never fails: if the database cannot be opened,
    /// log why and return a sink that refuses every call with 503
    /// `audit_unavailable` (its [`ready`](AuditSink::ready) fails), and that tries to
    /// open the database again, at most once per retry interval, when records arrive.
    ///
    /// A server built with it starts, and serves nothing unaudited.
    pub fn open_or_unavailable(self) -> SqliteSink {
        match connect(&self.path, &self) {
            Ok(connected) => match self.clone().start(Some(connected), None) {
                Ok(sink) => sink,
                Err(err) => self.unavailable_forever(err),
            },
            Err(err) => {
                tracing::error!(
                    path = %self.path.display(),
                    error = %err,
                    "the audit database cannot be opened: every call will be refused with 503 audit_unavailable until it can"
                );
                let problem = err.clone();
                match self.clone().start(None, Some(problem)) {
                    Ok(sink) => sink,
                    Err(thread_err) => self.unavailable_forever(thread_err),
                }
            }
        }
    }

    fn unavailable_forever(self, err: AuditError) -> SqliteSink {
        tracing::error!(error = %err, "the audit sink cannot start: every call will be refused with 503 audit_unavailable");
        SqliteSink {
            inner: Arc::new(SinkInner {
                path: self.path,
                commit: self.commit,
                worker: Err(err),
            }),
        }
    }

    fn start(
        self,
        conn: Option<Connected>,
        problem: Option<AuditError>,
    ) -> Result<SqliteSink, AuditError> {
        let batching = match self.commit {
            CommitMode::Group => Batching {
                linger: self.linger,
                ..Batching::group(self.max_batch)
            },
            CommitMode::PerRecord => Batching {
                max_batch: 1,
                linger: Duration::ZERO,
                max_linger: Duration::ZERO,
            },
        };
        let health = Arc::new(Health::new(problem.clone()));
        let backend = SqliteBackend {
            path: self.path.clone(),
            conn,
            options: self.clone(),
            last_attempt: Instant::now(),
            problem,
        };
        let worker = Worker::spawn("aac-audit-sqlite", backend, batching, health)?;
        Ok(SqliteSink {
            inner: Arc::new(SinkInner {
                path: self.path,
                commit: self.commit,
                worker: Ok(worker),
            }),
        })
    }
}

/// The sink's connection, and the write-ahead log to sync when commits do not.
struct Connected {
    conn: Connection,
    wal: Option<Arc<File>>,
}

/// Open the database for the sink.
///
/// With group commit and `synchronous = FULL`, the connection itself runs with
/// `synchronous = NORMAL` (a commit writes the log but does not sync it) and the
/// write-ahead log file is opened to be synced by the syncer thread before any caller
/// of the batch is answered: the same durability as `FULL`, with the next batch written
/// while this one is flushed. If the log file cannot be opened, the connection syncs
/// at each commit itself (`FULL`).
fn connect(path: &Path, options: &SqliteSinkBuilder) -> Result<Connected, AuditError> {
    let defer = options.commit == CommitMode::Group && options.synchronous == Synchronous::Full;
    let synchronous = if defer {
        Synchronous::Normal
    } else {
        options.synchronous
    };
    let conn = open_connection(path, options, synchronous)?;
    if !defer {
        return Ok(Connected { conn, wal: None });
    }
    let mut wal_path = path.as_os_str().to_owned();
    wal_path.push("-wal");
    match File::open(&wal_path) {
        Ok(wal) => Ok(Connected {
            conn,
            wal: Some(Arc::new(wal)),
        }),
        Err(e) => {
            tracing::warn!(
                path = %path.display(),
                error = %e,
                "cannot open the audit database's write-ahead log to sync it; every commit syncs it instead"
            );
            conn.pragma_update(None, "synchronous", Synchronous::Full.pragma())
                .map_err(sql_error)?;
            Ok(Connected { conn, wal: None })
        }
    }
}

fn open_connection(
    path: &Path,
    options: &SqliteSinkBuilder,
    synchronous: Synchronous,
) -> Result<Connection, AuditError> {
    let shown = path.display();
    let cannot = |e: rusqlite::Error| {
        AuditError::new(format!("cannot open the audit database `{shown}`: {e}"))
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )
    .map_err(cannot)?;
    conn.busy_timeout(options.busy_timeout).map_err(cannot)?;
    // SQLite silently opens a write-protected file read-only; we need to write.
    if conn.is_readonly(MAIN_DB).map_err(cannot)? {
        return Err(AuditError::new(format!(
            "the audit database `{shown}` is read-only (write-protected file or file system)"
        )));
    }
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(cannot)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(AuditError::new(format!(
            "cannot put the audit database `{shown}` in WAL mode (journal mode is `{mode}`)"
        )));
    }
    conn.pragma_update(None, "synchronous", synchronous.pragma())
        .map_err(cannot)?;
    ensure_table(&conn).map_err(|e| AuditError::new(format!("audit database `{shown}`: {e}")))?;
    Ok(conn)
}

struct SqliteBackend {
    path: PathBuf,
    conn: Option<Connected>,
    options: SqliteSinkBuilder,
    last_attempt: Instant,
    problem: Option<AuditError>,
}

impl Backend for SqliteBackend {
    type Item = PreparedRow;

    fn prepare(record: AuditRecord) -> PreparedRow {
        PreparedRow::from_record(record)
    }

    fn describe(item: &PreparedRow) -> String {
        format!("[{}", item.tail)
    }

    fn deferred_sync(&self) -> Option<Arc<File>> {
        self.conn.as_ref().and_then(|c| c.wal.clone())
    }

    fn write_batch(&mut self, batch: &[PreparedRow]) -> Result<(), AuditError> {
        if self.conn.is_none() {
            if self.last_attempt.elapsed() < self.options.retry_interval {
                return Err(self
                    .problem
                    .clone()
                    .unwrap_or_else(|| AuditError::new("the audit database is not open")));
            }
            self.last_attempt = Instant::now();
            match connect(&self.path, &self.options) {
                Ok(conn) => {
                    tracing::info!(path = %self.path.display(), "the audit database is open");
                    self.conn = Some(conn);
                    self.problem = None;
                }
                Err(err) => {
                    self.problem = Some(err.clone());
                    return Err(err);
                }
            }
        }
        let Some(connected) = self.conn.as_mut() else {
            return Err(AuditError::new("the audit database is not open"));
        };
        append(&mut connected.conn, batch).map_err(|e| {
            AuditError::new(format!(
                "cannot write to the audit database `{}`: {e}",
                self.path.display()
            ))
        })
    }
}

/// Append `batch` in one transaction, chained to the last record in the table.
fn append(conn: &mut Connection, batch: &[PreparedRow]) -> Result<(), rusqlite::Error> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (mut seq, last_hash) = tx
        .query_row(
            "SELECT seq, hash FROM aac_audit ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
        )
        .optional()?
        .unwrap_or_else(|| (0, GENESIS_HASH.to_owned()));
    let mut prev_hash = [0u8; 64];
    let mut hash = [0u8; 64];
    if last_hash.len() == 64 {
        prev_hash.copy_from_slice(last_hash.as_bytes());
    } else {
        // Not one of our hashes: chain to it anyway (verify will report the bad link).
        prev_hash.copy_from_slice(hex(&Sha256::digest(last_hash.as_bytes())).as_bytes());
    }
    {
        let mut insert = tx.prepare_cached(INSERT)?;
        for row in batch {
            seq += 1;
            row.hash_into(seq, &prev_hash, &mut hash);
            let prev = std::str::from_utf8(&prev_hash).unwrap_or_default();
            let this = std::str::from_utf8(&hash).unwrap_or_default();
            insert.execute(rusqlite::params![
                seq,
                row.timestamp,
                row.tool,
                row.outcome,
                row.reason,
                row.check,
                row.status,
                row.scopes_provided,
                row.principal,
                row.workspace,
                row.transport,
                row.request_id,
                row.duration_us,
                row.access_level,
                row.arguments,
                prev,
                this,
            ])?;
            prev_hash = hash;
        }
    }
    tx.commit()
}

/// A record made ready for the table on the caller's thread: every column but `seq`,
/// `prev_hash` and `hash`, and the end of the hash input, which does not depend on the
/// record's place in the chain.
pub(crate) struct PreparedRow {
    timestamp: String,
    tool: String,
    outcome: &'static str,
    reason: Option<String>,
    check: Option<&'static str>,
    status: i64,
    scopes_provided: String,
    principal: Option<String>,
    workspace: Option<String>,
    transport: String,
    request_id: Option<String>,
    duration_us: i64,
    access_level: Option<&'static str>,
    arguments: String,
    /// The canonical JSON array of [`Row::compute_hash`] without its `[` and `seq`:
    /// the hash input is `prev_hash ‖ "\n[" ‖ seq ‖ "," ‖ tail`.
    tail: String,
}

impl PreparedRow {
    fn from_record(record: AuditRecord) -> PreparedRow {
        let timestamp = if is_canonical_timestamp(&record.timestamp) {
            record.timestamp
        } else {
            canonical_timestamp(&record.timestamp).unwrap_or(record.timestamp)
        };
        let mut row = PreparedRow {
            timestamp,
            tool: record.tool,
            outcome: record.outcome.as_str(),
            reason: record.reason,
            check: record.check.map(|c| c.as_str()),
            status: i64::from(record.status),
            scopes_provided: serde_json::to_string(&record.scopes_provided)
                .unwrap_or_else(|_| "[]".to_owned()),
            principal: record.principal,
            workspace: record.workspace,
            transport: record.transport,
            request_id: record.request_id,
            duration_us: i64::try_from(record.duration_us).unwrap_or(i64::MAX),
            access_level: record.access_level.map(|a| a.as_str()),
            arguments: record.arguments.to_string(),
            tail: String::new(),
        };
        let inner = serde_json::to_string(&(
            &row.timestamp,
            &row.tool,
            row.outcome,
            &row.reason,
            row.check,
            row.status,
            &row.scopes_provided,
            &row.principal,
            &row.workspace,
            &row.transport,
            &row.request_id,
            row.duration_us,
            row.access_level,
            &row.arguments,
        ))
        .unwrap_or_default();
        row.tail = inner.get(1..).unwrap_or_default().to_owned();
        row
    }

    /// This row's hash at `seq` after `prev_hash`, as lowercase hex into `out`.
    fn hash_into(&self, seq: i64, prev_hash: &[u8; 64], out: &mut [u8; 64]) {
        let mut hasher = Sha256::new();
        hasher.update(prev_hash);
        hasher.update(b"\n[");
        hasher.update(seq.to_string().as_bytes());
        hasher.update(b",");
        hasher.update(self.tail.as_bytes());
        hex_into(&hasher.finalize(), out);
    }
}

/// Whether `text` already has the canonical form `YYYY-MM-DDTHH:MM:SS.ffffffZ` (as the
/// pipeline writes it), which spares parsing it again.
fn is_canonical_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 27
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            26 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Writes audit records to the SQLite table `aac_audit`, append-only and hash-chained,
/// durable before [`record`](AuditSink::record) returns. Cheap to clone.
///
/// One writer thread owns the connection. With [`CommitMode::Group`] (the default) it
/// commits every record waiting for it in one transaction, so concurrent calls share
/// one flush to disk; with `synchronous = FULL` (the default) a commit returns only
/// after the write-ahead log is synced.
///
/// The table may live in the application's own database file: open the sink on the
/// same path. Its columns are a stable contract (see `docs/audit.md`).
///
/// ```
/// use aac_tools::audit::{SqliteSink, verify_chain};
/// # let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("app.db");
/// let sink = SqliteSink::open(&path).unwrap();
/// // Server::builder(registry).audit(sink.clone())…
/// let conn = rusqlite::Connection::open(&path).unwrap();
/// assert!(verify_chain(&conn).unwrap().is_intact());
/// # drop(sink);
/// ```
#[derive(Clone)]
pub struct SqliteSink {
    inner: Arc<SinkInner>,
}

struct SinkInner {
    path: PathBuf,
    commit: CommitMode,
    worker: Result<Worker<SqliteBackend>, AuditError>,
}

impl fmt::Debug for SqliteSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteSink")
            .field("path", &self.inner.path)
            .field("commit", &self.inner.commit)
            .field("ready", &self.ready().is_ok())
            .finish()
    }
}

impl SqliteSink {
    /// Configure a sink on the database at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteSinkBuilder {
        SqliteSinkBuilder {
            path: path.as_ref().to_path_buf(),
            commit: CommitMode::Group,
            synchronous: Synchronous::Full,
            max_batch: 1024,
            linger: Batching::group(1).linger,
            busy_timeout: crate::sqlite::BUSY_TIMEOUT,
            retry_interval: Duration::from_secs(1),
        }
    }

    /// A group-commit sink with `synchronous = FULL` on the database at `path`,
    /// or why it cannot take records.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteSink, AuditError> {
        SqliteSink::builder(path).open()
    }

    /// Like [`open`](Self::open), but a database that cannot be opened gives a sink
    /// that refuses every call with 503 (and logs why) instead of an error; see
    /// [`SqliteSinkBuilder::open_or_unavailable`].
    pub fn open_or_unavailable(path: impl AsRef<Path>) -> SqliteSink {
        SqliteSink::builder(path).open_or_unavailable()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How records are grouped into transactions.
    pub fn commit_mode(&self) -> CommitMode {
        self.inner.commit
    }

    /// Records written and the transactions that wrote them, since the sink opened.
    pub fn stats(&self) -> SinkStats {
        match &self.inner.worker {
            Ok(worker) => worker.stats(),
            Err(_) => SinkStats::default(),
        }
    }

    /// Walk the hash chain of the sink's database (on a connection of its own).
    pub fn verify(&self) -> Result<ChainReport, AuditError> {
        let conn = open_reader(&self.inner.path)?;
        verify_chain(&conn)
    }
}

impl AuditSink for SqliteSink {
    fn ready(&self) -> Result<(), AuditError> {
        match &self.inner.worker {
            Ok(worker) => worker.ready(),
            Err(err) => Err(err.clone()),
        }
    }

    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        match &self.inner.worker {
            Ok(worker) => worker.record(record),
            Err(err) => {
                let err = err.clone();
                Box::pin(async move { Err(err) })
            }
        }
    }
}

/// Open the audit database at `path` read-only, for queries and verification.
pub fn open_reader(path: impl AsRef<Path>) -> Result<Connection, AuditError> {
    let path = path.as_ref();
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )
    .map_err(|e| {
        AuditError::new(format!(
            "cannot open the audit database `{}`: {e}",
            path.display()
        ))
    })?;
    conn.busy_timeout(crate::sqlite::BUSY_TIMEOUT)
        .map_err(sql_error)?;
    Ok(conn)
}

/// One row of `aac_audit`, as stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) seq: i64,
    pub(crate) timestamp: String,
    pub(crate) tool: String,
    pub(crate) outcome: String,
    pub(crate) reason: Option<String>,
    pub(crate) check: Option<String>,
    pub(crate) status: i64,
    pub(crate) scopes_provided: String,
    pub(crate) principal: Option<String>,
    pub(crate) workspace: Option<String>,
    pub(crate) transport: String,
    pub(crate) request_id: Option<String>,
    pub(crate) duration_us: i64,
    pub(crate) access_level: Option<String>,
    pub(crate) arguments: String,
    pub(crate) prev_hash: String,
    pub(crate) hash: String,
}

impl Row {
    /// Read a row selected with [`SELECT_COLUMNS`].
    pub(crate) fn from_sql(r: &rusqlite::Row<'_>) -> Result<Row, rusqlite::Error> {
        Ok(Row {
            seq: r.get(0)?,
            timestamp: r.get(1)?,
            tool: r.get(2)?,
            outcome: r.get(3)?,
            reason: r.get(4)?,
            check: r.get(5)?,
            status: r.get(6)?,
            scopes_provided: r.get(7)?,
            principal: r.get(8)?,
            workspace: r.get(9)?,
            transport: r.get(10)?,
            request_id: r.get(11)?,
            duration_us: r.get(12)?,
            access_level: r.get(13)?,
            arguments: r.get(14)?,
            prev_hash: r.get(15)?,
            hash: r.get(16)?,
        })
    }

    /// `hex(sha256(prev_hash ‖ "\n" ‖ canonical))`, where `canonical` is the compact
    /// JSON array of the stored values of every column from `seq` to `arguments`, in
    /// table order (`scopes_provided` and `arguments` as the JSON text they are stored
    /// as, i.e. JSON strings).
    pub(crate) fn compute_hash(&self) -> String {
        let canonical = serde_json::to_string(&(
            self.seq,
            &self.timestamp,
            &self.tool,
            &self.outcome,
            &self.reason,
            &self.check,
            self.status,
            &self.scopes_provided,
            &self.principal,
            &self.workspace,
            &self.transport,
            &self.request_id,
            self.duration_us,
            &self.access_level,
            &self.arguments,
        ))
        .unwrap_or_default();
        let mut hasher = Sha256::new();
        hasher.update(self.prev_hash.as_bytes());
        hasher.update(b"\n");
        hasher.update(canonical.as_bytes());
        hex(&hasher.finalize())
    }

    /// The record this row stores, or why the row cannot be read back.
    pub(crate) fn into_stored(self) -> Result<StoredRecord, AuditError> {
        let seq = self.seq;
        let bad = |what: &str, e: &dyn fmt::Display| {
            AuditError::new(format!("audit record {seq}: unreadable `{what}`: {e}"))
        };
        let record = AuditRecord {
            outcome: parse_word(&self.outcome).map_err(|e| bad("outcome", &e))?,
            check: self
                .check
                .as_deref()
                .map(parse_word)
                .transpose()
                .map_err(|e| bad("check", &e))?,
            status: u16::try_from(self.status).map_err(|e| bad("status", &e))?,
            scopes_provided: serde_json::from_str(&self.scopes_provided)
                .map_err(|e| bad("scopes_provided", &e))?,
            duration_us: u64::try_from(self.duration_us).map_err(|e| bad("duration_us", &e))?,
            access_level: self
                .access_level
                .as_deref()
                .map(parse_word)
                .transpose()
                .map_err(|e| bad("access_level", &e))?,
            arguments: serde_json::from_str(&self.arguments).map_err(|e| bad("arguments", &e))?,
            tool: self.tool,
            reason: self.reason,
            timestamp: self.timestamp,
            principal: self.principal,
            workspace: self.workspace,
            transport: self.transport,
            request_id: self.request_id,
        };
        Ok(StoredRecord {
            seq,
            record,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

fn parse_word<T: DeserializeOwned>(word: &str) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::Value::String(word.to_owned()))
}

fn hex(bytes: &[u8]) -> String {
    let mut out = [0u8; 64];
    hex_into(bytes, &mut out);
    String::from_utf8_lossy(&out[..(bytes.len() * 2).min(64)]).into_owned()
}

/// Lowercase hex of (at most 32) `bytes` into `out`.
fn hex_into(bytes: &[u8], out: &mut [u8; 64]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().take(32).enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0x0f)];
    }
}

/// A record as the SQLite sink stored it: its place in the chain and the record.
///
/// Its JSON form is the record's fields with `seq` first and `prev_hash`, `hash` last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredRecord {
    /// The position in the table, from 1, without gaps.
    pub seq: i64,
    /// The record.
    #[serde(flatten)]
    pub record: AuditRecord,
    /// The hash of the previous record ([`GENESIS_HASH`] for the first).
    pub prev_hash: String,
    /// This record's hash, chained to `prev_hash`.
    pub hash: String,
}

/// What [`verify_chain`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainReport {
    /// Records checked (up to and including the first broken one).
    pub checked: u64,
    /// The last record's `seq` and `hash` when the chain is intact: note them somewhere
    /// else to detect a later truncation of the table.
    pub head: Option<(i64, String)>,
    /// The first broken link, if any.
    pub broken: Option<BrokenLink>,
}

impl ChainReport {
    /// Whether every record links to the previous one and matches its hash.
    pub fn is_intact(&self) -> bool {
        self.broken.is_none()
    }
}

impl fmt::Display for ChainReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.broken, &self.head) {
            (Some(broken), _) => write!(f, "chain broken: {broken}"),
            (None, Some((seq, hash))) => write!(
                f,
                "chain intact: {} records, head seq {seq} hash {hash}",
                self.checked
            ),
            (None, None) => f.write_str("chain intact: no records"),
        }
    }
}

/// The first place where the chain does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenLink {
    /// The `seq` of the first record that does not verify.
    pub seq: i64,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for BrokenLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "record {}: {}", self.seq, self.problem)
    }
}

/// Walk the whole chain in `seq` order and report the first broken link: a gap in
/// `seq` (a deleted record), a `prev_hash` that is not the previous record's hash (a
/// deleted, inserted or re-hashed record), or a hash that does not match the record's
/// contents (an edited record).
///
/// Truncation of the newest records leaves an intact, shorter chain: compare
/// [`ChainReport::head`] with a head noted earlier to catch it.
pub fn verify_chain(conn: &Connection) -> Result<ChainReport, AuditError> {
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {SELECT_COLUMNS} FROM aac_audit ORDER BY seq"
        ))
        .map_err(sql_error)?;
    let mut rows = stmt.query([]).map_err(sql_error)?;
    let mut checked = 0u64;
    let mut prev: Option<(i64, String)> = None;
    while let Some(r) = rows.next().map_err(sql_error)? {
        let row = Row::from_sql(r).map_err(sql_error)?;
        checked += 1;
        let (expected_seq, expected_prev) = match &prev {
            Some((seq, hash)) => (seq + 1, hash.as_str()),
            None => (1, GENESIS_HASH),
        };
        let problem = if row.seq > expected_seq {
            Some(format!(
                "records {expected_seq} to {} are missing (deleted)",
                row.seq - 1
            ))
        } else if row.seq < expected_seq {
            Some(format!(
                "a record numbered {} precedes the chain's first record, 1",
                row.seq
            ))
        } else if row.prev_hash != expected_prev {
            Some(match &prev {
                Some((seq, _)) => format!(
                    "prev_hash does not match the hash of record {seq} (a record was removed, \
                     inserted or re-hashed)"
                ),
                None => "the first record's prev_hash is not the genesis hash".to_owned(),
            })
        } else if row.compute_hash() != row.hash {
            Some("contents do not match the record's hash (the record was edited)".to_owned())
        } else {
            None
        };
        if let Some(problem) = problem {
            return Ok(ChainReport {
                checked,
                head: None,
                broken: Some(BrokenLink {
                    seq: row.seq,
                    problem,
                }),
            });
        }
        prev = Some((row.seq, row.hash));
    }
    Ok(ChainReport {
        checked,
        head: prev,
        broken: None,
    })
}
