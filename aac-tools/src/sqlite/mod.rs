//! SQLite data handles at the tool's access level, through `rusqlite` (bundled).
//!
//! A [`Database`] is one SQLite file in WAL mode with a busy timeout: one writer
//! connection, and a pool of read-only connections so that concurrent readers never
//! wait on each other. Every query runs on a blocking thread, never on the async
//! runtime.
//!
//! Tools receive a handle at their level, [`Db<L>`](Db), as a parameter. Its
//! [`Db::run`] gives a closure a transaction [`Tx<L>`](Tx) of the same level:
//!
//! - at [`Read`] the transaction runs on a connection opened read-only, so a write
//!   smuggled past the types (raw SQL through [`Tx::conn`]) fails at run time with
//!   500 `read_only_violation`;
//! - at [`Write`] and [`Delete`] it is an `IMMEDIATE` transaction on the writer,
//!   committed when the closure returns `Ok` and rolled back on `Err`; at [`Write`]
//!   an SQLite authorizer refuses `DELETE`, `DROP` and schema changes, so that raw SQL
//!   through [`Tx::conn`] fails at run time with 500 `level_violation`.
//!
//! ```
//! use aac_tools::sqlite::{Db, ReadDb};
//! use aac_tools::{mcp_tool, ToolError};
//! use schemars::JsonSchema;
//! use serde::Serialize;
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Count {
//!     notes: i64,
//! }
//!
//! /// Count the notes.
//! #[mcp_tool(read_only, scope = "notes:read")]
//! async fn count_notes(db: ReadDb) -> Result<Count, ToolError> {
//!     let notes = db
//!         .run(|tx| Ok(tx.conn().query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?))
//!         .await?;
//!     Ok(Count { notes })
//! }
//! ```

mod check;
mod guard;
mod tokens;

use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::access::{Delete, Level, MayDelete, MayUpdate, Read, Write};
use crate::error::{Status, ToolError};
use crate::tool::{Call, ToolParam};
use guard::{Reader, Refused, Rules, Writer};

pub use check::{
    NonDestructiveCheck, NonDestructiveViolation, ReadOnlyCheck, ReadOnlyViolation, content_hash,
};
/// The `rusqlite` this module is built on, so that query code names the same version.
pub use rusqlite;
pub use tokens::{NewToken, TokenInfo, TokenStore};

/// The size a write-ahead log is cut back to after a checkpoint (`journal_size_limit`,
/// on every connection of the framework's that writes). A reader that holds its snapshot
/// long (`audit` piped into a pager, a `--verify` of millions of records) keeps the log
/// from starting over, and it grows with every write meanwhile (312 MB in 20 s under
/// load); without a limit SQLite keeps the file at its largest until the server stops.
pub(crate) const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// How long a connection waits for a lock held by another connection or process.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle read-only connections kept for reuse.
const MAX_IDLE_READERS: usize = 16;

/// A database error outside a tool call (opening, migrating).
#[derive(Debug)]
pub struct DbError {
    message: String,
    source: Option<rusqlite::Error>,
}

/// The refusal of a set-up connection (`what`) asked for while a tool runs on this thread
/// (its parameters extracted, or its handler polled).
pub(crate) fn refused_in_tools(what: &str) -> Result<(), DbError> {
    crate::__private0::set_up_refused(what).map_or(Ok(()), |why| Err(DbError::new(why, None)))
}

impl DbError {
    pub(crate) fn new(message: impl Into<String>, source: Option<rusqlite::Error>) -> DbError {
        DbError {
            message: message.into(),
            source,
        }
    }

    /// The SQLite error behind this one, if any.
    pub fn sqlite(&self) -> Option<&rusqlite::Error> {
        self.source.as_ref()
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{}: {source}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for DbError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<rusqlite::Error> for DbError {
    fn from(err: rusqlite::Error) -> DbError {
        DbError::new("database error", Some(err))
    }
}

/// SQLite errors inside a tool become [`ToolError`]s: a write on a read-only
/// connection is 500 `read_only_violation`, an action the level's authorizer refused
/// 500 `level_violation`, a busy database 503 `database_busy`, a constraint violation
/// 409 `conflict`, anything else 500 `internal_error`.
impl From<rusqlite::Error> for ToolError {
    fn from(err: rusqlite::Error) -> ToolError {
        use rusqlite::ErrorCode;
        match err.sqlite_error_code() {
            Some(ErrorCode::ReadOnly) => ToolError::new(
                Status::Internal,
                "read_only_violation",
                format!("a read-only tool tried to write to the database, which refused: {err}"),
            ),
            Some(ErrorCode::AuthorizationForStatementDenied) => ToolError::new(
                Status::Internal,
                "level_violation",
                format!(
                    "a tool tried an action above its access level, and the database refused it: {err}"
                ),
            ),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => ToolError::new(
                Status::Unavailable,
                "database_busy",
                format!("the database is busy, try again: {err}"),
            ),
            Some(ErrorCode::ConstraintViolation) => {
                ToolError::conflict(format!("the change conflicts with existing data: {err}"))
            }
            _ => ToolError::internal(format!("database error: {err}")),
        }
    }
}

/// One SQLite database file, shared by every call. Cheap to clone.
#[derive(Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    read_only: bool,
    writer: Mutex<Writer>,
    readers: Mutex<Vec<Reader>>,
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Make every column of the framework's `table` refuse to be opened for writing by SQLite's
/// incremental blob I/O (rusqlite's `blob_open`, with its `blob` feature, which any crate
/// of a build may turn on): a blob written in place needs no statement, so no authorizer,
/// trigger or `CHECK` sees it, and a tool could otherwise rewrite a token's hash or
/// scopes, or a record and its hash. SQLite refuses to open for writing any column of a
/// table that has an index on an expression; this one is partial and its condition never
/// true, so it holds no row and costs no write.
///
/// The index is checked by its text, not only by its name: the schema table's own `sql`
/// can be rewritten through a blob too (SQLite lets nothing index it), and an index of the
/// same name on a plain column, loaded at the next open, would seal nothing. One that is
/// not exactly this is dropped and made again, before any tool runs.
pub(crate) fn seal_against_blob_writes(
    conn: &Connection,
    table: &str,
) -> Result<(), rusqlite::Error> {
    let name = format!("{table}_no_blob_writes");
    let sealed = format!("CREATE INDEX {name} ON {table} ((0)) WHERE 0");
    immediately(
        conn,
        |e| e,
        || {
            let stored: Option<String> = conn
                .query_row(
                    "SELECT sql FROM main.sqlite_master WHERE type = 'index' AND name = ?1",
                    [&name],
                    |r| r.get(0),
                )
                .optional()?;
            if stored.as_deref() != Some(sealed.as_str()) {
                conn.execute_batch(&format!("DROP INDEX IF EXISTS main.{name}; {sealed}"))?;
            }
            Ok(())
        },
    )
}

/// `step` (a look at the schema, then its change) in one `BEGIN IMMEDIATE` transaction,
/// unless `conn` is in one already: two processes opening a file of an older release at
/// once take turns (the busy timeout) where one failed on the other's half-done change
/// (`index … already exists`), and no reader sees a seal dropped and not yet made again.
/// `sql` makes the transaction's own errors `step`'s.
pub(crate) fn immediately<T, E>(
    conn: &Connection,
    sql: impl Fn(rusqlite::Error) -> E,
    step: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    if !conn.is_autocommit() {
        return step();
    }
    conn.execute_batch("BEGIN IMMEDIATE").map_err(&sql)?;
    match step() {
        Ok(value) => {
            conn.execute_batch("COMMIT").map_err(&sql)?;
            Ok(value)
        }
        Err(err) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(err)
        }
    }
}

/// Refuse a database holding a trigger the framework did not make whose statement names
/// one of the framework's tables (`aac_…`): it would fire on the framework's own writes
/// (the audit sink's inserts, a token created), which no authorizer checks. The schema
/// table's `tbl_name` is not trusted (SQLite attaches a trigger to the table its
/// statement names); its statement is.
pub(crate) fn refuse_foreign_framework_triggers(conn: &Connection) -> Result<(), String> {
    let found = (|| {
        let mut stmt = conn.prepare(
            "SELECT name FROM main.sqlite_master WHERE type = 'trigger' \
             AND instr(lower(sql), 'aac_') > 0 ORDER BY name",
        )?;
        let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
        names.collect::<Result<Vec<_>, _>>()
    })()
    .map_err(|e| format!("cannot read the schema: {e}"))?;
    let foreign: Vec<String> = found
        .into_iter()
        .filter(|name| !crate::audit::sqlite::trigger_names().any(|ours| ours == name))
        .collect();
    // Every name is whoever wrote the file's: escaped as a table cell is, so that none
    // drives the terminal `serve` prints the refusal on.
    let shown = |name: &str| crate::audit::printable(name).into_owned();
    match foreign.first() {
        None => Ok(()),
        Some(name) => Err(format!(
            "the trigger `{}` is not the framework's, and its statement names the framework's \
             tables (`aac_…`), on whose writes it would run unchecked: drop it (`DROP \
             TRIGGER \"{}\"`) if it is not yours{}",
            shown(name),
            shown(&name.replace('"', "\"\"")),
            match foreign.len() {
                1 => String::new(),
                n => format!(
                    " ({} more: {})",
                    n - 1,
                    foreign[1..]
                        .iter()
                        .map(|name| shown(name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        )),
    }
}

/// Create the file at `path`, empty and readable by its owner only (`0600`), if nothing is
/// there yet: a database of the framework's holds the audit trail, token hashes and the
/// application's data, which other local users have no business reading. SQLite gives its
/// `-wal` and `-shm` files the database's permissions. Anything that is not a plain path
/// (`:memory:`, a `file:` URI) is left to SQLite, which reports what is wrong; a file
/// that exists keeps its permissions, unless it cannot be trusted with tokens and the
/// trail, which is refused ([`refuse_untrusted_file`]).
pub(crate) fn create_private(path: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        if !is_a_plain_path(path) {
            return Ok(());
        }
        refuse_untrusted_file(path)?;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Whether `path` names a file (not `:memory:`, an empty name or a `file:` URI).
fn is_a_plain_path(path: &Path) -> bool {
    let text = path.to_string_lossy();
    !(text.is_empty() || text == ":memory:" || text.starts_with("file:"))
}

/// Refuse what is at `path` when a database to be written there could not be trusted or
/// would not be private (each refusal says what to do):
/// - a file other users may write (mode `g+w` or `o+w`): whoever may write it can mint a
///   token and rewrite the audit trail (the check `ssh` makes of its keys);
/// - an empty file owned by another user: a placeholder planted in a shared directory,
///   which its owner may rewrite or read once the database is in it;
/// - a symbolic link to nothing: SQLite would create its target with the default mode
///   (`0644` under the usual umask), readable by every local user;
/// - anything but a regular file or a directory (a FIFO, a device): SQLite's open of a
///   FIFO waits for ever.
///
/// A file owned by another user that holds data is not refused (an administrator's
/// `token create` on a service account's database).
#[cfg(unix)]
pub(crate) fn refuse_untrusted_file(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !is_a_plain_path(path) {
        return Ok(());
    }
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(_) => {
            return match std::fs::symlink_metadata(path) {
                Ok(link) if link.file_type().is_symlink() => Err(format!(
                    "`{shown}` is a symbolic link to a file that does not exist; the database \
                     would be created there with the default permissions, readable by other \
                     users: create the file it names (`install -m 600 /dev/null TARGET`), or \
                     name a path that is not a link"
                )),
                _ => Ok(()),
            };
        }
    };
    refuse_special_file(path, &meta)?;
    if !meta.is_file() {
        return Ok(());
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "`{shown}` may be written by other users (mode {mode:04o}): whoever may write \
             it can mint tokens and rewrite the audit trail; `chmod go-w` it (`chmod 600` \
             keeps it private too), or name another file"
        ));
    }
    if meta.len() == 0 && meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(format!(
            "`{shown}` is an empty file owned by another user (uid {}), who could read or \
             rewrite the database put in it: remove it, or create the file as the user that \
             runs this command",
            meta.uid()
        ));
    }
    Ok(())
}

/// Refuse what is at `path` (its metadata `meta`) if it is neither a regular file nor a
/// directory: a FIFO, a socket or a device, where SQLite's open waits for ever or reads
/// no end. (A directory is refused by SQLite, which says so.)
#[cfg(unix)]
pub(crate) fn refuse_special_file(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    if meta.is_file() || meta.is_dir() {
        return Ok(());
    }
    Err(format!(
        "`{}` is not a regular file (a FIFO, a socket or a device): name a database file",
        path.display()
    ))
}

/// [`refuse_special_file`] for a path about to be opened to read (nothing at it: left
/// to the open, which says so).
pub(crate) fn refuse_special_path(path: &Path) -> Result<(), String> {
    #[cfg(unix)]
    if is_a_plain_path(path)
        && let Ok(meta) = std::fs::metadata(path)
    {
        refuse_special_file(path, &meta)?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

impl Database {
    /// Open (creating it if needed, readable by its owner only) the database at `path`, in
    /// WAL mode with a busy timeout and foreign keys on.
    pub fn open(path: impl AsRef<Path>) -> Result<Database, DbError> {
        let path = path.as_ref().to_path_buf();
        create_private(&path).map_err(|why| DbError::new(why, None))?;
        let writer = Connection::open(&path).map_err(|e| {
            DbError::new(
                format!("cannot open database `{}`", path.display()),
                Some(e),
            )
        })?;
        configure(&writer).map_err(|e| {
            DbError::new(
                format!("`{}` is not a usable SQLite database", path.display()),
                Some(e),
            )
        })?;
        let mode: String = writer.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(DbError::new(
                format!(
                    "cannot put `{}` in WAL mode (journal mode is `{mode}`)",
                    path.display()
                ),
                None,
            ));
        }
        writer.pragma_update(None, "synchronous", "NORMAL")?;
        writer.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
        Ok(Database {
            inner: Arc::new(Inner {
                path,
                read_only: false,
                writer: Mutex::new(Writer::new(writer)?),
                readers: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Open the existing database at `path` to read it only: nothing is created and
    /// nothing written (not even the journal mode), and every connection is read-only,
    /// so [`Database::with_writer`] and the handles above [`Read`] fail with SQLite's
    /// read-only error. For commands that only read, such as a command line's `audit`
    /// and `token list` (`cli::OpenMode::Read`).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Database, DbError> {
        let path = path.as_ref().to_path_buf();
        refuse_special_path(&path).map_err(|why| DbError::new(why, None))?;
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(|e| {
            DbError::new(
                format!("cannot open database `{}`", path.display()),
                Some(e),
            )
        })?;
        configure(&conn)
            .and_then(|()| conn.pragma_update(None, "query_only", true))
            .map_err(|e| {
                DbError::new(
                    format!("`{}` is not a usable SQLite database", path.display()),
                    Some(e),
                )
            })?;
        Ok(Database {
            inner: Arc::new(Inner {
                path,
                read_only: true,
                writer: Mutex::new(Writer::new(conn)?),
                readers: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Whether the database was opened with [`Database::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Run `f` on the writer connection, synchronously (set-up, migrations, seeding,
    /// command-line tools), with no level's rules on it. Not for use on the async
    /// runtime, and not for tools: a tool cannot take the `Database` (or any handle of
    /// it) as [`State`](crate::State), and one that reaches it another way (inside a
    /// state of its own, a global) is refused here while it runs (`level_violation`).
    pub fn with_writer<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, DbError> {
        refused_in_tools("with_writer")?;
        let mut writer = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        writer.open_for_setup()?;
        Ok(f(&mut writer.conn)?)
    }

    /// Run `f` on a read-only connection, synchronously, with no level's rules on it (the
    /// framework's tables are readable). Not for use on the async runtime, and refused to
    /// a running tool, as [`Database::with_writer`] is.
    pub fn with_reader<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, DbError> {
        refused_in_tools("with_reader")?;
        self.with_reader_unchecked(f)
    }

    /// [`Database::with_reader`] for the framework's own reads that a tool may cause (a
    /// token checked for a call it makes).
    pub(crate) fn with_reader_unchecked<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, DbError> {
        let reader = self.take_reader()?;
        let result = f(&reader.conn);
        reader.take_refused();
        // The statements prepared here were authorized outside any tool: a tool that
        // asked the cache for the same SQL would get them, unchecked (a token's row).
        reader.conn.flush_prepared_statement_cache();
        self.put_reader(reader);
        Ok(result?)
    }

    /// A handle at level `L`, for code outside tools (tests, command-line tools). A tool
    /// gets its handle as a parameter instead, at its own level.
    pub fn handle<L: Level>(&self) -> Db<L> {
        Db {
            db: self.clone(),
            level: PhantomData,
        }
    }

    fn take_reader(&self) -> Result<Reader, rusqlite::Error> {
        let idle = self
            .inner
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        match idle {
            Some(conn) => Ok(conn),
            None => {
                let conn = Connection::open_with_flags(
                    &self.inner.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY
                        | OpenFlags::SQLITE_OPEN_NO_MUTEX
                        | OpenFlags::SQLITE_OPEN_URI,
                )?;
                configure(&conn)?;
                // Belt and braces: a read-only connection, `query_only` on it, and an
                // authorizer that lets it read and nothing else.
                conn.pragma_update(None, "query_only", true)?;
                Reader::new(conn)
            }
        }
    }

    fn put_reader(&self, conn: Reader) {
        let mut readers = self.inner.readers.lock().unwrap_or_else(|e| e.into_inner());
        if readers.len() < MAX_IDLE_READERS {
            readers.push(conn);
        }
    }

    /// Run `f` in a transaction at `level` on a blocking thread.
    async fn transact<L: Level, T, F>(&self, f: F) -> Result<T, ToolError>
    where
        F: FnOnce(&Tx<'_, L>) -> Result<T, ToolError> + Send + 'static,
        T: Send + 'static,
    {
        if let Some(err) = crate::__private0::above_running_tool(L::LEVEL) {
            return Err(err);
        }
        let db = self.clone();
        // The call whose handler opens it: abandoned (the server stopped under it), the
        // transaction no longer commits.
        let commits = crate::pipeline::commits::current();
        // The level of the tool that opens it, on the blocking thread too: inside the
        // transaction's closure, a handle above it (reached through state), a set-up
        // method or a call of the server is refused as in the handler itself.
        let running = crate::__private0::extracting_for();
        let task = tokio::task::spawn_blocking(move || {
            let _running = running.map(crate::__private0::ExtractScope::enter);
            // And the call it runs for (a call of the server from inside is made for it).
            let _call = commits
                .as_ref()
                .map(crate::pipeline::commits::Polling::enter);
            match L::LEVEL {
                _ if commits.as_ref().is_some_and(|c| c.is_abandoned()) => {
                    Err(crate::pipeline::commits::abandoned())
                }
                crate::access::AccessLevel::Read => {
                    let reader = db.take_reader()?;
                    reader.take_refused();
                    let result = run_in_transaction::<L, T, _>(
                        &reader.conn,
                        "BEGIN DEFERRED",
                        // A read commits nothing: not counted.
                        None,
                        |tx: &Tx<'_, L>| {
                            let result = {
                                let _runs = reader.tool_runs();
                                f(tx)
                            };
                            // As at the `Write` level: a refusal fails the call even when the
                            // tool swallowed the error.
                            match reader.take_refused() {
                                Some(Refused::Action(what)) => Err(read_violation(&what)),
                                Some(Refused::Framework(what)) => Err(framework_violation(&what)),
                                None => result,
                            }
                        },
                    );
                    db.put_reader(reader);
                    result
                }
                level => {
                    let mut writer = db.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
                    writer.ensure(if level == crate::access::AccessLevel::Write {
                        Rules::NoDelete
                    } else {
                        Rules::NoFramework
                    })?;
                    if level == crate::access::AccessLevel::Write {
                        writer.know_virtual_tables()?;
                    }
                    // Nothing refused before this transaction counts against it.
                    writer.take_refused();
                    let writer = &*writer;
                    run_in_transaction::<L, T, _>(
                        &writer.conn,
                        "BEGIN IMMEDIATE",
                        commits.as_ref(),
                        |tx: &Tx<'_, L>| {
                            // The `Delete` level may change the schema, and the schema table
                            // itself with `writable_schema` (through the C API, switched back
                            // before it returns): what it says of the framework's tables must
                            // be the same at the end (a renamed `aac_tokens` is writable).
                            let framework = (level == crate::access::AccessLevel::Delete)
                                .then(|| guard::framework_schema(&writer.conn))
                                .transpose()?;
                            let result = {
                                // The tool's own commit is refused while it runs.
                                let _runs = writer.tool_runs();
                                f(tx)
                            };
                            let edited = match framework {
                                Some(before) => guard::framework_schema(&writer.conn)? != before,
                                None => false,
                            };
                            // A refusal fails the transaction even when the tool swallowed the
                            // error: the call is recorded as the violation it is.
                            match writer.take_refused() {
                                Some(Refused::Action(what)) => Err(level_violation(level, &what)),
                                Some(Refused::Framework(what)) => Err(framework_violation(&what)),
                                None if edited => Err(framework_violation(
                                    "the schema table's rows of the framework's tables",
                                )),
                                None => result,
                            }
                        },
                    )
                }
            }
        });
        match task.await {
            Ok(result) => result,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => Err(ToolError::internal("the database task was cancelled")),
        }
    }
}

/// The error of an action on the framework's own tables (tokens, the audit trail…),
/// which no tool may take, at any level.
fn framework_violation(what: &str) -> ToolError {
    crate::__private0::violation(ToolError::new(
        Status::Internal,
        "level_violation",
        format!(
            "a tool reached the framework's own tables, which no level allows (their writes \
             are the framework's, and tokens are not for tools to read): `{what}`; its \
             transaction is rolled back"
        ),
    ))
}

/// The error of an action the `Read` level's authorizer refused, naming the action.
fn read_violation(what: &str) -> ToolError {
    crate::__private0::violation(ToolError::new(
        Status::Internal,
        "read_only_violation",
        format!("a read-only tool tried to write to the database, which refused: `{what}`"),
    ))
}

/// The error of an action the level's authorizer refused, naming the action.
fn level_violation(level: crate::access::AccessLevel, what: &str) -> ToolError {
    let rule = if level == crate::access::AccessLevel::Delete {
        "no level may change a setting of the shared connection"
    } else {
        "only `destructive` tools may delete rows or change the schema"
    };
    crate::__private0::violation(ToolError::new(
        Status::Internal,
        "level_violation",
        format!(
            "a tool at the `{level}` access level tried `{what}`, and the database refused it; \
             {rule}"
        ),
    ))
}

fn configure(conn: &Connection) -> Result<(), rusqlite::Error> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    // No SQL may corrupt the file: no `writable_schema` edit of the schema table (which
    // can alias a framework table under another name), no `schema_version = N`, no
    // `journal_mode = OFF`.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
    // Fails on a file that is not a database (or is corrupt): better at open than later.
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })?;
    Ok(())
}

/// `commits`: the call's, which decides whether the transaction may still commit.
fn run_in_transaction<L: Level, T, F>(
    conn: &Connection,
    begin: &str,
    commits: Option<&std::sync::Arc<crate::pipeline::commits::Commits>>,
    f: F,
) -> Result<T, ToolError>
where
    F: FnOnce(&Tx<'_, L>) -> Result<T, ToolError>,
{
    conn.execute_batch(begin)?;
    // Rolls back whatever is left open, however `f` ends: an `Err`, a failed `COMMIT`,
    // or a panic (the writer connection outlives the panic and must not stay inside a
    // transaction).
    let open = OpenTransaction(conn);
    // Declared after `open`: dropped first, so settings are restored before the rollback.
    let mut settings = Settings::read(conn);
    let tx = Tx {
        conn,
        level: PhantomData,
    };
    let value = f(&tx);
    let changed = settings.changed();
    // The tool's own refusal says more (the settings are restored either way).
    let value = value?;
    if !changed.is_empty() {
        return Err(crate::__private0::violation(ToolError::new(
            crate::Status::Internal,
            "level_violation",
            format!(
                "the tool changed its connection's settings through the C API ({}), which \
                 no level allows: its transaction is rolled back and the settings restored",
                changed.join(", ")
            ),
        )));
    }
    let committing = crate::pipeline::commits::before_commit(commits, true)?;
    let committed = conn.execute_batch("COMMIT");
    if let Some(committing) = committing {
        committing.done(committed.is_ok());
    }
    committed?;
    drop(open);
    Ok(value)
}

/// The connection settings a tool could change through `tx.conn()` without SQL
/// (`set_db_config`), which the authorizer never sees and which would outlive the call on
/// a pooled connection: foreign keys or triggers off for every later call, views off, the
/// schema writable or trusted, the database reset by the next `VACUUM`, tables scanned
/// in reverse (another call's `LIMIT 1` finding another row)… every one rusqlite names.
const SETTINGS: [(rusqlite::config::DbConfig, &str); 17] = {
    use rusqlite::config::DbConfig as C;
    [
        (C::SQLITE_DBCONFIG_ENABLE_FKEY, "foreign keys"),
        (C::SQLITE_DBCONFIG_ENABLE_TRIGGER, "triggers"),
        (C::SQLITE_DBCONFIG_ENABLE_VIEW, "views"),
        (C::SQLITE_DBCONFIG_DEFENSIVE, "defensive"),
        (C::SQLITE_DBCONFIG_WRITABLE_SCHEMA, "writable schema"),
        (C::SQLITE_DBCONFIG_TRUSTED_SCHEMA, "trusted schema"),
        (C::SQLITE_DBCONFIG_RESET_DATABASE, "reset database"),
        (C::SQLITE_DBCONFIG_LEGACY_ALTER_TABLE, "legacy alter table"),
        (C::SQLITE_DBCONFIG_DQS_DML, "double-quoted strings (DML)"),
        (C::SQLITE_DBCONFIG_DQS_DDL, "double-quoted strings (DDL)"),
        (C::SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, "FTS3 tokenizer"),
        (
            C::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            "no checkpoint on close",
        ),
        (C::SQLITE_DBCONFIG_ENABLE_QPSG, "query planner stability"),
        (C::SQLITE_DBCONFIG_TRIGGER_EQP, "trigger EXPLAIN QUERY PLAN"),
        (C::SQLITE_DBCONFIG_LEGACY_FILE_FORMAT, "legacy file format"),
        (C::SQLITE_DBCONFIG_STMT_SCANSTATUS, "statement scan status"),
        (C::SQLITE_DBCONFIG_REVERSE_SCANORDER, "reverse scan order"),
    ]
};

/// [`SETTINGS`] as a transaction began; restored when dropped unchecked (a panic in
/// the tool).
struct Settings<'c> {
    conn: &'c Connection,
    before: [Option<bool>; SETTINGS.len()],
    checked: bool,
}

impl<'c> Settings<'c> {
    fn read(conn: &'c Connection) -> Settings<'c> {
        Settings {
            conn,
            before: SETTINGS.map(|(config, _)| conn.db_config(config).ok()),
            checked: false,
        }
    }

    /// The settings that differ from what they were, restored. (The busy timeout, which
    /// SQLite does not read back, is set again as it was configured.)
    fn changed(&mut self) -> Vec<&'static str> {
        self.checked = true;
        let _ = self.conn.busy_timeout(BUSY_TIMEOUT);
        let mut changed = Vec::new();
        for ((config, name), before) in SETTINGS.iter().zip(self.before) {
            let Some(before) = before else { continue };
            if self.conn.db_config(*config).ok() != Some(before) {
                let _ = self.conn.set_db_config(*config, before);
                changed.push(*name);
            }
        }
        changed
    }
}

impl Drop for Settings<'_> {
    fn drop(&mut self) {
        if !self.checked {
            let _ = self.changed();
        }
    }
}

/// Rolls back the transaction of its connection when dropped, if one is still open.
struct OpenTransaction<'c>(&'c Connection);

impl Drop for OpenTransaction<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

/// A data handle at access level `L`, as a tool receives it.
///
/// Take it as a parameter: `db: Db<Read>` (or [`ReadDb`]) in a `read_only` tool,
/// `Db<Write>` in a tool that is neither `read_only` nor `destructive`, `Db<Delete>`
/// in a `destructive` tool. A handle above the tool's level does not compile.
pub struct Db<L> {
    db: Database,
    level: PhantomData<fn() -> L>,
}

/// The handle of `read_only` tools.
pub type ReadDb = Db<Read>;
/// The handle of tools that are neither `read_only` nor `destructive`.
pub type WriteDb = Db<Write>;
/// The handle of `destructive` tools.
pub type DeleteDb = Db<Delete>;

impl<L> Clone for Db<L> {
    fn clone(&self) -> Self {
        Db {
            db: self.db.clone(),
            level: PhantomData,
        }
    }
}

impl<L: Level> fmt::Debug for Db<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("level", &L::LEVEL)
            .field("path", &self.db.inner.path)
            .finish()
    }
}

impl<L: Level> Db<L> {
    /// Run `f` in one transaction at this handle's level, on a blocking thread.
    ///
    /// Committed when `f` returns `Ok`, rolled back when it returns `Err`.
    pub async fn run<T, F>(&self, f: F) -> Result<T, ToolError>
    where
        F: FnOnce(&Tx<'_, L>) -> Result<T, ToolError> + Send + 'static,
        T: Send + 'static,
    {
        self.db.transact::<L, T, F>(f).await
    }
}

#[diagnostic::do_not_recommend]
impl<L: Level> ToolParam for Db<L> {
    const NEEDS: crate::access::AccessLevel = L::LEVEL;
    const STATE_NEED: Option<crate::state::StateNeed> =
        Some(crate::state::StateNeed::data_handle::<Database, L>());
    fn from_call(call: &mut Call) -> Result<Self, ToolError> {
        // The macro checks the handles a tool names; this refuses one built above the
        // tool's level by an extractor of the user's own.
        if let Some(tool) = call.extracting_for()
            && L::LEVEL > tool
        {
            return Err(ToolError::new(
                Status::Internal,
                "level_violation",
                format!(
                    "a tool at the `{tool}` access level asked for a `{}` data handle through \
                     a parameter of its own; a tool's handles are at or below its level",
                    L::LEVEL
                ),
            ));
        }
        let db = call.state().framework::<Database>().ok_or_else(|| {
            ToolError::internal("no database: register the `Database` with `ServerBuilder::state`")
        })?;
        Ok(Db {
            db: Database::clone(&db),
            level: PhantomData,
        })
    }
}

// A tool cannot take the framework's storage as `State<T>`: through these constants
// (preferred over `__private0::IsStorage`'s), `#[mcp_tool]` sees `State<Database>` and
// the others and refuses them in the words of `access::ToolState`.
impl crate::State<Database> {
    #[doc(hidden)]
    #[allow(missing_docs)]
    pub const __AAC_STORAGE: bool = true;
}
impl crate::State<TokenStore> {
    #[doc(hidden)]
    #[allow(missing_docs)]
    pub const __AAC_STORAGE: bool = true;
}
impl<L> crate::State<Db<L>> {
    #[doc(hidden)]
    #[allow(missing_docs)]
    pub const __AAC_STORAGE: bool = true;
}

/// A transaction at access level `L`. Query traits are implemented on it; see
/// [`crate::access`] for the pattern.
pub struct Tx<'c, L> {
    conn: &'c Connection,
    level: PhantomData<fn() -> L>,
}

impl<L: Level> fmt::Debug for Tx<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx").field("level", &L::LEVEL).finish()
    }
}

impl<L: Level> Tx<'_, L> {
    /// The raw connection, for query implementations. At [`Read`] it is a read-only
    /// connection: writes through it fail with 500 `read_only_violation`. At [`Write`]
    /// the database refuses `DELETE`, `DROP`, schema changes, `ATTACH` and pragmas that
    /// change a setting, with 500 `level_violation`; at [`Delete`] it refuses nothing.
    pub fn conn(&self) -> &Connection {
        self.conn
    }

    /// The access level of this transaction.
    pub fn level(&self) -> crate::access::AccessLevel {
        L::LEVEL
    }
}

impl crate::access::Granted for Tx<'_, Write> {}
impl crate::access::Granted for Tx<'_, Delete> {}
#[diagnostic::do_not_recommend]
impl MayUpdate for Tx<'_, Write> {}
#[diagnostic::do_not_recommend]
impl MayUpdate for Tx<'_, Delete> {}
#[diagnostic::do_not_recommend]
impl MayDelete for Tx<'_, Delete> {}
