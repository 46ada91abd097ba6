//! The sink: its configuration, the writer thread's backend, and the transaction that
//! appends a batch of rows to the chain.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{Connection, MAIN_DB, OpenFlags, OptionalExtension, ToSql};
use sha2::{Digest, Sha256};

use super::reader::open_reader;
use super::row::{Values, hex_into, link_hash};
use super::table::{AUDIT_COLUMNS, AUDIT_TABLE, GENESIS_HASH, INSERT, ensure_table, sql_error};

const _: () = assert!(
    matches!(AUDIT_TABLE.as_bytes(), b"aac_audit"),
    "the head query below names the table"
);
use super::verify::{ChainReport, verify_chain};
use crate::BoxFuture;
use crate::audit::worker::{Backend, Batching, Health, SinkStats, Worker};
use crate::audit::{AuditError, AuditRecord, AuditSink};

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
                written: Arc::default(),
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
        let written = Arc::new(Mutex::new(Written::default()));
        let backend = SqliteBackend {
            path: self.path.clone(),
            conn,
            options: self.clone(),
            last_attempt: Instant::now(),
            problem,
            written: Arc::clone(&written),
        };
        let worker = Worker::spawn("aac-audit-sqlite", backend, batching, health)?;
        Ok(SqliteSink {
            inner: Arc::new(SinkInner {
                path: self.path,
                commit: self.commit,
                worker: Ok(worker),
                written,
            }),
        })
    }
}

/// The sink's connection, and the write-ahead log to sync when commits do not.
struct Connected {
    conn: Connection,
    wal: Option<Arc<File>>,
    /// The database file SQLite opened, opened again to ask whether it is still linked
    /// ([`Connected::unlinked`]).
    file: Option<File>,
    /// Its write-ahead log, opened to ask the same (the file `wal` syncs, when there is
    /// one).
    log: Option<Arc<File>>,
    /// When [`Connected::unlinked`] last asked the file system.
    links_checked: Instant,
    /// What it found unlinked: a file deleted stays so.
    gone: Option<&'static str>,
}

/// How often the sink asks whether its files are still linked: an `fstat` took 1.3 to
/// 1.6 µs here (two cores under load), more than a lone record's share of a batch should
/// pay, so at most once per second, before a batch.
const LINKS_CHECKED_EVERY: Duration = Duration::from_secs(1);

impl Connected {
    fn new(
        conn: Connection,
        wal: Option<Arc<File>>,
        file: Option<File>,
        log: Option<Arc<File>>,
    ) -> Connected {
        Connected {
            conn,
            wal,
            file,
            log,
            links_checked: Instant::now(),
            gone: None,
        }
    }

    /// What of the database was deleted (unlinked) since it was opened, if anything, as
    /// last seen (checked again at most every [`LINKS_CHECKED_EVERY`]): a connection
    /// writes on to a file no one can open any more, and its records go nowhere. A file
    /// renamed is still linked, and fine; one deleted stays so.
    ///
    /// The write-ahead log deleted alone holds the records written since the last
    /// checkpoint, answered already, which a crash would then lose: they are copied into
    /// the database file (still linked) at once, from the log this connection holds open.
    fn unlinked(&mut self) -> Option<&'static str> {
        if self.gone.is_some() || self.links_checked.elapsed() < LINKS_CHECKED_EVERY {
            return self.gone;
        }
        self.links_checked = Instant::now();
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let gone = |file: &File| file.metadata().is_ok_and(|m| m.nlink() == 0);
            if self.file.as_ref().is_some_and(gone) {
                self.gone = Some("database file");
            } else if self.log.as_deref().is_some_and(gone) {
                self.gone = Some("write-ahead log");
                self.save_the_deleted_log();
            }
        }
        self.gone
    }

    /// Copy what the deleted write-ahead log holds into the database file, and sync it.
    fn save_the_deleted_log(&self) {
        // (busy, frames in the log, frames copied)
        let saved = self
            .conn
            .query_row("PRAGMA wal_checkpoint(FULL)", [], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            });
        match saved {
            Ok((0, frames, copied)) if frames == copied => tracing::error!(
                frames,
                "the audit database's write-ahead log was deleted while the server ran: the \
                 records it held are copied into the database file; no more are written"
            ),
            Ok((_, frames, copied)) => tracing::error!(
                frames,
                copied,
                "the audit database's write-ahead log was deleted while the server ran, and \
                 not all of it could be copied into the database file (another connection \
                 reads it): keep this process running and stop it with SIGTERM, whose \
                 close copies the rest"
            ),
            Err(err) => tracing::error!(
                error = %err,
                "the audit database's write-ahead log was deleted while the server ran, and \
                 could not be copied into the database file: keep this process running and \
                 stop it with SIGTERM, whose close copies it"
            ),
        }
    }
}

/// Open the database for the sink.
///
/// With group commit and `synchronous = FULL`, the connection itself runs with
/// `synchronous = NORMAL` (a commit writes the log but does not sync it) and the
/// write-ahead log file is opened to be synced once a batch is written, before any of
/// its callers is answered: the same durability as `FULL`, one sync per batch. If the
/// log file cannot be opened, the connection syncs at each commit itself (`FULL`).
fn connect(path: &Path, options: &SqliteSinkBuilder) -> Result<Connected, AuditError> {
    let defer = options.commit == CommitMode::Group && options.synchronous == Synchronous::Full;
    let synchronous = if defer {
        Synchronous::Normal
    } else {
        options.synchronous
    };
    let conn = open_connection(path, options, synchronous)?;
    // The file SQLite opened: the path as SQLite resolved it (symbolic links followed),
    // not as given, or a sync could go to another file's log (a stale `-wal` beside a
    // link to the database), or the check of its links ask about the link.
    let database = conn
        .path()
        .filter(|p| !p.is_empty())
        .map_or_else(|| path.to_path_buf(), std::path::PathBuf::from);
    let file = File::open(&database).ok();
    let mut wal_path = database.into_os_string();
    wal_path.push("-wal");
    let log = File::open(&wal_path).map(Arc::new);
    if !defer {
        return Ok(Connected::new(conn, None, file, log.ok()));
    }
    match log {
        Ok(wal) => Ok(Connected::new(
            conn,
            Some(Arc::clone(&wal)),
            file,
            Some(wal),
        )),
        Err(e) => {
            tracing::warn!(
                path = %path.display(),
                error = %e,
                "cannot open the audit database's write-ahead log to sync it; every commit syncs it instead"
            );
            conn.pragma_update(None, "synchronous", Synchronous::Full.pragma())
                .map_err(sql_error)?;
            Ok(Connected::new(conn, None, file, None))
        }
    }
}

/// The writer connection's page cache, in KiB (a negative `cache_size`).
const WRITER_CACHE_KIB: i64 = -256;

fn open_connection(
    path: &Path,
    options: &SqliteSinkBuilder,
    synchronous: Synchronous,
) -> Result<Connection, AuditError> {
    let shown = path.display();
    let cannot = |e: rusqlite::Error| {
        AuditError::new(format!("cannot open the audit database `{shown}`: {e}"))
    };
    crate::sqlite::create_private(path)
        .map_err(|why| AuditError::new(format!("cannot open the audit database: {why}")))?;
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
    conn.pragma_update(None, "journal_size_limit", crate::sqlite::WAL_SIZE_LIMIT)
        .map_err(cannot)?;
    // The writer appends: it reads the rightmost pages of the table and its index, and
    // nothing else. SQLite's default cache (2 MiB) would fill with pages written once.
    conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)
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
    written: Arc<Mutex<Written>>,
}

/// The records this sink appended (their `seq`s, as runs), once a checkpoint watches
/// ([`crate::audit::write_checkpoint_for`]): a checkpoint names the records since the
/// previous one that it did not write.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// Since a checkpoint signed this head (`None`: nobody watches, nothing is kept).
    pub(crate) watching_after: Option<i64>,
    /// Inclusive runs of `seq`, in order, after `watching_after`.
    pub(crate) runs: Vec<(i64, i64)>,
}

impl Written {
    fn appended(&mut self, first: i64, last: i64) {
        if self.watching_after.is_none() || first > last {
            return;
        }
        match self.runs.last_mut() {
            Some((_, end)) if *end + 1 == first => *end = last,
            _ => self.runs.push((first, last)),
        }
    }

    /// A batch counted by [`Written::appended`] did not commit.
    fn taken_back(&mut self, first: i64, last: i64) {
        if let Some((start, end)) = self.runs.last_mut()
            && *end == last
        {
            if *start >= first {
                self.runs.pop();
            } else {
                *end = first - 1;
            }
        }
    }

    /// The runs of `seqs` (in order) this sink did not write.
    pub(crate) fn not_written(&self, seqs: &[i64]) -> Vec<(i64, i64)> {
        let mut foreign: Vec<(i64, i64)> = Vec::new();
        for &seq in seqs {
            let ours = self.runs.iter().any(|&(a, b)| (a..=b).contains(&seq));
            if ours {
                continue;
            }
            match foreign.last_mut() {
                Some((_, end)) if *end + 1 == seq => *end = seq,
                _ => foreign.push((seq, seq)),
            }
        }
        foreign
    }

    /// A checkpoint signed `head`: what came before it is settled.
    pub(crate) fn signed(&mut self, head: i64) {
        self.watching_after = Some(head);
        self.runs.retain(|&(_, end)| end > head);
        if let Some(first) = self.runs.first_mut() {
            first.0 = first.0.max(head + 1);
        }
    }
}

impl Backend for SqliteBackend {
    type Item = PreparedRow;

    fn prepare(record: AuditRecord) -> PreparedRow {
        PreparedRow::from_record(record)
    }

    fn describe(item: &PreparedRow) -> String {
        Values::describe(&item.tail)
    }

    fn restore(item: &PreparedRow) -> Option<AuditRecord> {
        item.values.clone().into_record(0).ok()
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
        // Fails as a write does (503 `audit_unavailable`, the sink not ready) for as long
        // as the server runs: the records would go to a file that is gone.
        if let Some(what) = connected.unlinked() {
            return Err(AuditError::new(format!(
                "the audit database `{}` was deleted while the server ran (its {what} is no \
                 longer linked): records written now would go nowhere; restore the file from \
                 a backup, or restart the server to start a new trail",
                self.path.display()
            )));
        }
        append(&mut connected.conn, batch, &self.written).map_err(|e| match e {
            rusqlite::Error::StatementChangedRows(rows) => AuditError::new(format!(
                "the audit database `{}` did not take a record ({rows} rows inserted for \
                 one): a trigger on `aac_audit` that is not the framework's? (`audit \
                 --verify` names it)",
                self.path.display()
            )),
            e => AuditError::new(format!(
                "cannot write to the audit database `{}`: {e}",
                self.path.display()
            )),
        })
    }
}

/// Append `batch` in one transaction, chained to the last record in the table.
///
/// Every statement is prepared once per connection (SQLite's statement cache): the
/// transaction's own `BEGIN` and `COMMIT` included, as a lone caller's record is one
/// transaction of its own and parsing SQL would be a fair share of its cost.
///
/// The batch's `seq`s are counted in `written` before its `COMMIT` makes them visible (a
/// checkpoint that reads them then finds them this sink's), and taken back if it fails.
fn append(
    conn: &mut Connection,
    batch: &[PreparedRow],
    written: &Mutex<Written>,
) -> Result<(), rusqlite::Error> {
    let written = || written.lock().unwrap_or_else(|e| e.into_inner());
    if !conn.is_autocommit() {
        // A transaction left open by a write that panicked halfway: it never committed,
        // so nothing of it was answered as written.
        conn.execute_batch("ROLLBACK")?;
    }
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    match append_rows(conn, batch) {
        Ok((first, last)) => {
            written().appended(first, last);
            let committed = conn
                .prepare_cached("COMMIT")
                .and_then(|mut c| c.execute([]));
            if committed.is_err() {
                written().taken_back(first, last);
            }
            committed.map(drop)
        }
        Err(err) => {
            // Nothing of the batch stays; the error is the one to report.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(err)
        }
    }
}

/// The rows of [`append`], inside its transaction: the first and last `seq` given.
fn append_rows(conn: &Connection, batch: &[PreparedRow]) -> Result<(i64, i64), rusqlite::Error> {
    let (mut seq, last_hash) = conn
        .prepare_cached("SELECT seq, hash FROM aac_audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .optional()?
        .unwrap_or_else(|| (0, GENESIS_HASH.to_owned()));
    let first = seq + 1;
    let mut prev_hash = [0u8; 64];
    if last_hash.len() == 64 {
        prev_hash.copy_from_slice(last_hash.as_bytes());
    } else {
        // Not one of our hashes: chain to it anyway (verify will report the bad link).
        hex_into(&Sha256::digest(last_hash.as_bytes()), &mut prev_hash);
    }
    let mut insert = conn.prepare_cached(&INSERT)?;
    for row in batch {
        seq += 1;
        let hash = link_hash(&prev_hash, seq, &row.tail);
        let prev = std::str::from_utf8(&prev_hash).unwrap_or_default();
        let this = std::str::from_utf8(&hash).unwrap_or_default();
        let mut params: Vec<&dyn ToSql> = Vec::with_capacity(AUDIT_COLUMNS.len());
        params.push(&seq);
        params.extend(row.values.params());
        params.push(&prev);
        params.push(&this);
        params.extend(row.values.trailing_params());
        // One row, or the record is not in the table: a trigger that is not ours can
        // drop it (`RAISE(IGNORE)`), and the call must not be answered as recorded.
        let inserted = insert.execute(params.as_slice())?;
        if inserted != 1 {
            return Err(rusqlite::Error::StatementChangedRows(inserted));
        }
        prev_hash = hash;
    }
    Ok((first, seq))
}

/// A record made ready for the table on the caller's thread: its values, and the part
/// of its hash input that does not depend on its place in the chain.
pub(crate) struct PreparedRow {
    values: Values,
    tail: String,
}

impl PreparedRow {
    fn from_record(record: AuditRecord) -> PreparedRow {
        let values = Values::from_record(record);
        let tail = values.hash_tail();
        PreparedRow { values, tail }
    }
}

/// Writes audit records to the SQLite table `aac_audit`, append-only and hash-chained,
/// durable before [`record`](AuditSink::record) returns. Cheap to clone.
///
/// With [`CommitMode::Group`] (the default) a lone caller commits its own record on its
/// own thread, and records that queue behind it are committed together by the sink's
/// writer thread, so concurrent calls share one flush to disk; with `synchronous = FULL`
/// (the default) no caller is answered before the write-ahead log is synced.
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
    written: Arc<Mutex<Written>>,
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

    /// What this sink appended, for the checkpoints that watch it.
    pub(crate) fn written(&self) -> &Mutex<Written> {
        &self.inner.written
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A database reached through a symbolic link, with a stale `-wal` beside the link:
    /// the log synced is the one beside the file SQLite writes, not the stale one.
    #[cfg(unix)]
    #[test]
    fn the_log_synced_is_the_one_of_the_file_sqlite_opened() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        let link = dir.path().join("link");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::create_dir_all(&link).unwrap();
        drop(SqliteSink::open(real.join("app.db")).unwrap());
        std::os::unix::fs::symlink(real.join("app.db"), link.join("app.db")).unwrap();
        std::fs::write(link.join("app.db-wal"), b"").unwrap();
        let builder = SqliteSink::builder(link.join("app.db"));
        let connected = connect(&link.join("app.db"), &builder).unwrap();
        let synced = connected
            .wal
            .expect("the log is synced by the sink")
            .metadata()
            .unwrap();
        let written = std::fs::metadata(real.join("app.db-wal")).unwrap();
        assert_eq!(
            (synced.dev(), synced.ino()),
            (written.dev(), written.ino()),
            "the sink syncs the log SQLite writes"
        );
    }
}
