//! The database file: opening it safely, its schema and its version; and the schema on
//! PostgreSQL, version by version ([`POSTGRES_MIGRATIONS`]).
//!
//! Every way a file can be wrong ends in an [`AppError`] whose one line says what to do:
//! a path that cannot be written, a file that is not SQLite or is corrupt, an SQLite
//! database of another application, a schema from a newer `aacworkflow`.

use std::fmt;
use std::path::{Path, PathBuf};

use aac_tools::sqlite::{Database, TokenStore};
use rusqlite::{Connection, ErrorCode, OpenFlags};

/// `PRAGMA application_id` of an aacworkflow database: `AACW` in ASCII.
pub const APPLICATION_ID: i32 = 0x4141_4357;

/// The schema version this build writes and reads (`PRAGMA user_version`). It moves
/// when the file's format does, the framework's tables in it included, so that an older
/// build refuses a file a newer one wrote ("newer than this aacworkflow understands")
/// rather than misreading it: 1, the application's tables; 2, the audit trail's
/// `confirmed_by` and `kind` columns, its append-only triggers and the blob seals (a
/// build of version 1 called a record of this format edited, and advised to move the
/// trail aside). A file of an older version is brought to this one when opened to write.
pub const SCHEMA_VERSION: i32 = 2;

/// The default database file, in the working directory.
pub const DEFAULT_DB: &str = "aacworkflow.db";

/// The schema of the application's own tables. The token store (`aac_tokens`) and the
/// audit trail (`aac_audit`) create theirs.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS workspaces (
    id          TEXT PRIMARY KEY,
    key_prefix  TEXT NOT NULL UNIQUE,
    next_number INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS users (
    workspace TEXT NOT NULL REFERENCES workspaces(id),
    name      TEXT NOT NULL,
    role      TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    PRIMARY KEY (workspace, name)
);
CREATE TABLE IF NOT EXISTS agents (
    workspace   TEXT NOT NULL REFERENCES workspaces(id),
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (workspace, name)
);
CREATE TABLE IF NOT EXISTS issues (
    id            TEXT PRIMARY KEY,
    workspace     TEXT NOT NULL REFERENCES workspaces(id),
    number        INTEGER NOT NULL,
    title         TEXT NOT NULL,
    body          TEXT NOT NULL DEFAULT '',
    status        TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
    assignee      TEXT,
    assignee_kind TEXT CHECK (assignee_kind IN ('user', 'agent')),
    created_by    TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    UNIQUE (workspace, number)
);
CREATE INDEX IF NOT EXISTS issues_by_workspace ON issues (workspace, number);
CREATE TABLE IF NOT EXISTS comments (
    id         TEXT PRIMARY KEY,
    issue_id   TEXT NOT NULL REFERENCES issues(id) ON DELETE CASCADE,
    author     TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS comments_by_issue ON comments (issue_id, created_at);
CREATE TABLE IF NOT EXISTS autopilot_runs (
    id           TEXT PRIMARY KEY,
    issue_id     TEXT NOT NULL REFERENCES issues(id) ON DELETE CASCADE,
    agent        TEXT NOT NULL,
    status       TEXT NOT NULL,
    triggered_by TEXT NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_issue ON autopilot_runs (issue_id);
";

/// The component name of the application's schema on PostgreSQL (`aac_schema`).
pub const POSTGRES_COMPONENT: &str = "aacworkflow";

/// The schema on PostgreSQL, version by version: `Database::migrate` applies each once,
/// in order, and refuses a database at a version this build does not know. The same
/// tables and columns as the SQLite schema, plus `comments.seq` (the order comments
/// were written in, SQLite's `rowid`) and the view `aacworkflow_usage`, through which the
/// data roles read the columns of the audit trail that `dashboard_usage_daily` counts
/// (they may not read `aac_audit` itself); version 2 keeps tool calls only in that view,
/// version 3 says how many calls each record stands for (a count of rate-limited ones),
/// version 4 counts only the framework's counts, and version 5 fails on no stored text.
pub const POSTGRES_MIGRATIONS: [&str; 5] = [
    "
CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    key_prefix  TEXT NOT NULL UNIQUE,
    next_number BIGINT NOT NULL DEFAULT 1
);
CREATE TABLE users (
    workspace TEXT NOT NULL REFERENCES workspaces(id),
    name      TEXT NOT NULL,
    role      TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    PRIMARY KEY (workspace, name)
);
CREATE TABLE agents (
    workspace   TEXT NOT NULL REFERENCES workspaces(id),
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (workspace, name)
);
CREATE TABLE issues (
    id            TEXT PRIMARY KEY,
    workspace     TEXT NOT NULL REFERENCES workspaces(id),
    number        BIGINT NOT NULL,
    title         TEXT NOT NULL,
    body          TEXT NOT NULL DEFAULT '',
    status        TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
    assignee      TEXT,
    assignee_kind TEXT CHECK (assignee_kind IN ('user', 'agent')),
    created_by    TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    UNIQUE (workspace, number)
);
CREATE TABLE comments (
    seq        BIGSERIAL NOT NULL UNIQUE,
    id         TEXT PRIMARY KEY,
    issue_id   TEXT NOT NULL REFERENCES issues(id) ON DELETE CASCADE,
    author     TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX comments_by_issue ON comments (issue_id, created_at);
CREATE TABLE autopilot_runs (
    id           TEXT PRIMARY KEY,
    issue_id     TEXT NOT NULL REFERENCES issues(id) ON DELETE CASCADE,
    agent        TEXT NOT NULL,
    status       TEXT NOT NULL,
    triggered_by TEXT NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX runs_by_issue ON autopilot_runs (issue_id);
CREATE VIEW aacworkflow_usage AS
    SELECT workspace, substr(timestamp, 1, 10) AS day, timestamp, tool, outcome FROM aac_audit;
",
    "
-- Version 2: the dashboard counts tool calls, not resource reads, prompts or completions,
-- which the trail records beside them (column `kind`). Same columns, so the grants stay.
CREATE OR REPLACE VIEW aacworkflow_usage AS
    SELECT workspace, substr(timestamp, 1, 10) AS day, timestamp, tool, outcome FROM aac_audit
    WHERE kind = 'tool';
",
    "
-- Version 3: how many calls each record stands for: one, but a count of calls refused
-- past a rate limit (reason `rate_limited`, no request id, `{\"suppressed\": n}`) stands
-- for n. A column added at the end, so the grants stay.
CREATE OR REPLACE VIEW aacworkflow_usage AS
    SELECT workspace, substr(timestamp, 1, 10) AS day, timestamp, tool, outcome,
           CASE WHEN reason = 'rate_limited' AND request_id IS NULL
                THEN COALESCE((arguments::jsonb ->> 'suppressed')::bigint, 1)
                ELSE 1 END AS calls
    FROM aac_audit
    WHERE kind = 'tool';
",
    "
-- Version 4: a count is only a record the framework writes as one: `{\"suppressed\": n}` (and
-- a peer) past a rate limit, or `{\"more_calls\": n}` of tool `(unknown)` for the rest of a
-- refused batch, n a whole number (at most 10^12, so that no sum overflows), nothing else
-- (no tool may keep an argument of these names in the clear). A name `(rate limited)` a
-- caller sent for a tool is `(unknown)`. No text a caller sends makes the view fail.
CREATE OR REPLACE VIEW aacworkflow_usage AS
    SELECT workspace, substr(timestamp, 1, 10) AS day, timestamp,
           CASE WHEN tool = '(rate limited)' AND reason IS DISTINCT FROM 'rate_limited'
                THEN '(unknown)' ELSE tool END AS tool,
           outcome,
           CASE WHEN request_id IS NOT NULL OR jsonb_typeof(arguments::jsonb) <> 'object' THEN 1
                WHEN reason = 'rate_limited' AND status = 429
                     AND jsonb_typeof(arguments::jsonb -> 'suppressed') = 'number'
                     AND (arguments::jsonb ->> 'suppressed') ~ '^[1-9][0-9]*$'
                     AND (arguments::jsonb - 'suppressed' - 'peer') = '{}'::jsonb
                THEN CASE WHEN length(arguments::jsonb ->> 'suppressed') > 12 THEN 1000000000000
                          ELSE LEAST((arguments::jsonb ->> 'suppressed')::bigint, 1000000000000) END
                WHEN tool = '(unknown)'
                     AND jsonb_typeof(arguments::jsonb -> 'more_calls') = 'number'
                     AND (arguments::jsonb ->> 'more_calls') ~ '^[1-9][0-9]*$'
                     AND (arguments::jsonb - 'more_calls') = '{}'::jsonb
                THEN CASE WHEN length(arguments::jsonb ->> 'more_calls') > 12 THEN 1000000000000
                          ELSE LEAST((arguments::jsonb ->> 'more_calls')::bigint, 1000000000000) END
                ELSE 1 END AS calls
    FROM aac_audit
    WHERE kind = 'tool';
",
    r#"
-- Version 5: no stored text makes the view fail. `arguments::jsonb` fails on text that is
-- JSON but not jsonb (a caller's "\u0000", recorded as sent when the call is refused),
-- which made every dashboard of its workspace fail: the text is read as jsonb only when it
-- is a flat object of plain keys, each a number or a string without escapes, as the
-- framework writes its counts; anything else is one call. Every built-in is named with
-- `pg_catalog.`, and every operand has the operator's type, so that no function or
-- operator another role made in `public` is bound here (CVE-2018-1058).
CREATE OR REPLACE VIEW aacworkflow_usage AS
    SELECT workspace, pg_catalog.substr(timestamp, 1, 10) AS day, timestamp,
           CASE WHEN tool = '(rate limited)'::text AND reason IS DISTINCT FROM 'rate_limited'::text
                THEN '(unknown)'::text ELSE tool END AS tool,
           outcome,
           CASE WHEN request_id IS NOT NULL
                     OR arguments IS NULL
                     OR NOT (arguments ~ '^\{"[a-z_]+":([0-9]+|"[^"\\]*")(,"[a-z_]+":([0-9]+|"[^"\\]*"))*\}$'::text)
                THEN 1::bigint
                WHEN reason = 'rate_limited'::text AND status = 429::bigint
                     AND pg_catalog.jsonb_typeof(arguments::jsonb -> 'suppressed'::text) = 'number'::text
                     AND (arguments::jsonb ->> 'suppressed'::text) ~ '^[1-9][0-9]*$'::text
                     AND ((arguments::jsonb - 'suppressed'::text) - 'peer'::text) = '{}'::jsonb
                THEN CASE WHEN pg_catalog.length(arguments::jsonb ->> 'suppressed'::text) > 12
                          THEN 1000000000000::bigint
                          ELSE LEAST((arguments::jsonb ->> 'suppressed'::text)::bigint, 1000000000000::bigint) END
                WHEN tool = '(unknown)'::text
                     AND pg_catalog.jsonb_typeof(arguments::jsonb -> 'more_calls'::text) = 'number'::text
                     AND (arguments::jsonb ->> 'more_calls'::text) ~ '^[1-9][0-9]*$'::text
                     AND (arguments::jsonb - 'more_calls'::text) = '{}'::jsonb
                THEN CASE WHEN pg_catalog.length(arguments::jsonb ->> 'more_calls'::text) > 12
                          THEN 1000000000000::bigint
                          ELSE LEAST((arguments::jsonb ->> 'more_calls'::text)::bigint, 1000000000000::bigint) END
                ELSE 1::bigint END AS calls
    FROM aac_audit
    WHERE kind = 'tool'::text;
"#,
];

/// A failure of the command line, as one line that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppError(String);

impl AppError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> AppError {
        AppError(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AppError {}

/// Whether opening may create the file, or write to it at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// The file must exist and be ours, at a schema this build reads; nothing is created,
    /// migrated or written (`audit`, `token list`).
    Read,
    /// The file must exist already (`token create`, `token revoke`).
    Existing,
    /// Create the file and the schema if needed (`init`, `serve`).
    Create,
}

impl From<aac_tools::cli::OpenMode> for OpenMode {
    fn from(mode: aac_tools::cli::OpenMode) -> OpenMode {
        match mode {
            aac_tools::cli::OpenMode::Read => OpenMode::Read,
            aac_tools::cli::OpenMode::Existing => OpenMode::Existing,
            aac_tools::cli::OpenMode::Create => OpenMode::Create,
        }
    }
}

/// The database path: `--db`, else `AAC_DB`, else `aacworkflow.db` (clap resolves the
/// first two; this is the fallback).
pub fn resolve_path(flag: Option<PathBuf>) -> PathBuf {
    flag.unwrap_or_else(|| PathBuf::from(DEFAULT_DB))
}

/// What a quick read-only look at an existing file found.
struct Inspection {
    application_id: i32,
    user_version: i32,
    foreign_tables: Vec<String>,
}

fn not_a_database(path: &Path) -> AppError {
    AppError::new(format!(
        "`{}` is not an aacworkflow database (not SQLite, or corrupt); \
         pass --db with another path, or move the file away and run `aacworkflow init`",
        path.display()
    ))
}

/// `path` could not be read (`err`, SQLite's `code`): what SQLite said, and what to do
/// about it.
fn cannot_read(path: &Path, err: &dyn fmt::Display, code: Option<ErrorCode>) -> AppError {
    let what = match code {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "another process holds it locked (a program in a long or exclusive transaction); \
             try again once it lets go"
        }
        // A read-only connection to a database in WAL mode still creates its `-shm` (and
        // `-wal`) beside it: refused, it says the database is read-only.
        Some(ErrorCode::ReadOnly) => {
            "SQLite could not create the database's `-wal` and `-shm` files beside it, which \
             a database in WAL mode needs even to be read: make its directory writable by \
             this user, or copy the database into one that is"
        }
        Some(ErrorCode::CannotOpen) => {
            "check the permissions of the file and of its `-wal` and `-shm` files beside it \
             (a database in WAL mode needs them even to be read)"
        }
        _ => "check the file's permissions",
    };
    AppError::new(format!(
        "cannot read `{}`: {err}; {what}, or pass --db with another path",
        path.display()
    ))
}

fn inspect(path: &Path) -> Result<Inspection, AppError> {
    let classify = |err: rusqlite::Error| match err.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => not_a_database(path),
        code => cannot_read(path, &err, code),
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(classify)?;
    let pragma = |name: &str| -> Result<i32, rusqlite::Error> {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
    };
    let application_id = pragma("application_id").map_err(classify)?;
    let user_version = pragma("user_version").map_err(classify)?;
    let tables = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT GLOB 'sqlite_*' \
             ORDER BY name",
        )
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(classify)?;
    let foreign_tables: Vec<String> = tables
        .iter()
        .filter(|name| !name.starts_with("aac_"))
        .cloned()
        .collect();
    // Corruption past the first page shows only when the pages are read: check every
    // table once, before serving, but the audit trail's, which grows for as long as the
    // server runs (a whole-file check took 20 s at every start and every `audit` of a
    // 1.4 GB trail, cold): `audit --verify` checks its pages, and a write to a damaged
    // trail fails closed. Linear in the application's data, not the trail.
    for table in tables.iter().filter(|name| *name != "aac_audit") {
        let check: String = conn
            .query_row(
                "SELECT quick_check FROM pragma_quick_check(?1)",
                [table],
                |r| r.get(0),
            )
            .map_err(classify)?;
        if check != "ok" {
            return Err(not_a_database(path));
        }
    }
    Ok(Inspection {
        application_id,
        user_version,
        foreign_tables,
    })
}

/// Open the database at `path`, checking that it is ours and not from a newer version,
/// and bring its schema up to date (creating it with [`OpenMode::Create`]); with
/// [`OpenMode::Read`], only the checks, and the file opened read-only.
pub fn open(path: &Path, mode: OpenMode) -> Result<Database, AppError> {
    let shown = path.display();
    if path.is_dir() {
        return Err(AppError::new(format!(
            "`{shown}` is a directory; pass --db with the path of a database file"
        )));
    }
    // A FIFO, a socket or a device is not inspected: `inspect`'s open of a FIFO waited
    // for a writer for ever (every command hung, `audit` included), and a device read as
    // an empty file ("no aacworkflow schema yet"). `Database::open` and `open_read_only`
    // refuse it in one line, asking of the path before they open it.
    let special = std::fs::metadata(path).is_ok_and(|meta| !meta.is_file());
    if special {
        // Refused below, whatever the mode.
    } else if path.exists() {
        let found = inspect(path)?;
        if found.application_id != APPLICATION_ID
            && (found.application_id != 0 || !found.foreign_tables.is_empty())
        {
            return Err(AppError::new(format!(
                "`{shown}` is an SQLite database of another application (tables: {}); \
                 pass --db with another path",
                if found.foreign_tables.is_empty() {
                    "none".to_owned()
                } else {
                    found.foreign_tables.join(", ")
                }
            )));
        }
        if found.user_version < 0 {
            return Err(AppError::new(format!(
                "`{shown}` has schema version {}, which no aacworkflow writes (the file was \
                 edited); set `PRAGMA user_version` to the version it is at, or pass --db \
                 with another path",
                found.user_version
            )));
        }
        if found.user_version > SCHEMA_VERSION {
            return Err(AppError::new(format!(
                "`{shown}` has schema version {}, newer than this aacworkflow understands ({SCHEMA_VERSION}); \
                 upgrade aacworkflow, or pass --db with another path",
                found.user_version
            )));
        }
        if mode != OpenMode::Create && found.application_id != APPLICATION_ID {
            return Err(AppError::new(format!(
                "`{shown}` has no aacworkflow schema yet; run `aacworkflow init` first"
            )));
        }
    } else {
        if mode != OpenMode::Create {
            return Err(AppError::new(format!(
                "no database at `{shown}`; create it with `aacworkflow init`, \
                 or point --db (or AAC_DB) at an existing one"
            )));
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(AppError::new(format!(
                "cannot create `{shown}`: the directory `{}` does not exist; \
                 create it, or pass --db with another path",
                parent.display()
            )));
        }
    }
    if mode == OpenMode::Read {
        return Database::open_read_only(path).map_err(|e| {
            let code = e.sqlite().and_then(rusqlite::Error::sqlite_error_code);
            cannot_read(path, &e, code)
        });
    }
    let unwritable = |err: &dyn fmt::Display| {
        AppError::new(format!(
            "cannot write to `{shown}`: {err}; check that the file and its directory are writable, \
             or pass --db with another path"
        ))
    };
    let db = Database::open(path).map_err(|e| match e.sqlite() {
        Some(s)
            if matches!(
                s.sqlite_error_code(),
                Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
            ) =>
        {
            not_a_database(path)
        }
        // SQLite's own words, without the path repeated.
        Some(rusqlite::Error::SqliteFailure(code, _)) => {
            let text = code.to_string();
            let words = text.split_once(": ").map_or(text.as_str(), |(_, w)| w);
            unwritable(&words)
        }
        _ => unwritable(&e),
    })?;
    migrate(&db).map_err(|e| unwritable(&e))?;
    TokenStore::open(&db).map_err(|e| unwritable(&e))?;
    Ok(db)
}

/// Create the schema if needed and stamp the file as ours, at [`SCHEMA_VERSION`].
fn migrate(db: &Database) -> Result<(), aac_tools::sqlite::DbError> {
    db.with_writer(|conn| {
        // Immediate: two processes migrating one file at once take turns (a deferred
        // transaction's read, then write, failed `database is locked` at once).
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let version: i32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version < SCHEMA_VERSION {
            tx.execute_batch(SCHEMA)?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        tx.commit()
    })
}
