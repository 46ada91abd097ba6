//! The checks that run a server's tools against a seeded database: read-only tools
//! change nothing ([`ReadOnlyCheck`]), non-destructive tools lose no row
//! ([`NonDestructiveCheck`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use rusqlite::types::ValueRef;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Database, DbError};
use crate::principal::Principal;
use crate::server::{CallRequest, Credentials, Server};

/// A hash over the content of every table of `db`, except those whose name starts with
/// one of `exclude` (and SQLite's own). Rows are hashed in an order-independent way.
pub fn content_hash(db: &Database, exclude: &[&str]) -> Result<String, DbError> {
    db.with_reader(|conn| {
        let tables = tables(conn, exclude)?;
        let mut total = Sha256::new();
        for table in tables {
            let mut stmt =
                conn.prepare(&format!("SELECT * FROM \"{}\"", table.replace('"', "\"\"")))?;
            let columns = stmt.column_count();
            let mut row_hashes: Vec<[u8; 32]> = Vec::new();
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let mut h = Sha256::new();
                for i in 0..columns {
                    hash_value(&mut h, row.get_ref(i)?);
                }
                row_hashes.push(h.finalize().into());
            }
            row_hashes.sort_unstable();
            total.update(table.as_bytes());
            total.update((row_hashes.len() as u64).to_le_bytes());
            for h in row_hashes {
                total.update(h);
            }
        }
        Ok(total
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    })
}

/// Feed one SQL value, tagged with its type, to `h`.
fn hash_value(h: &mut Sha256, value: ValueRef<'_>) {
    match value {
        ValueRef::Null => h.update([0u8]),
        ValueRef::Integer(v) => {
            h.update([1u8]);
            h.update(v.to_le_bytes());
        }
        ValueRef::Real(v) => {
            h.update([2u8]);
            h.update(v.to_le_bytes());
        }
        ValueRef::Text(v) => {
            h.update([3u8]);
            h.update((v.len() as u64).to_le_bytes());
            h.update(v);
        }
        ValueRef::Blob(v) => {
            h.update([4u8]);
            h.update((v.len() as u64).to_le_bytes());
            h.update(v);
        }
    }
}

/// The tables of `conn` to look at: not SQLite's own, not those starting with a prefix
/// of `exclude`.
fn tables(conn: &rusqlite::Connection, exclude: &[&str]) -> Result<Vec<String>, rusqlite::Error> {
    let mut tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT GLOB 'sqlite_*' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    tables.retain(|t| !exclude.iter().any(|prefix| t.starts_with(prefix)));
    Ok(tables)
}

/// The identity of every row of every table: its `rowid`, or for a `WITHOUT ROWID` table
/// a hash of its primary key.
fn row_keys(
    db: &Database,
    exclude: &[&str],
) -> Result<BTreeMap<String, BTreeSet<Vec<u8>>>, DbError> {
    db.with_reader(|conn| {
        let mut keys = BTreeMap::new();
        for table in tables(conn, exclude)? {
            let quoted = format!("\"{}\"", table.replace('"', "\"\""));
            // A `WITHOUT ROWID` table has no `rowid` to select.
            let with_rowid = conn
                .prepare(&format!("SELECT rowid FROM {quoted} LIMIT 0"))
                .is_ok();
            let select = if with_rowid {
                format!("SELECT rowid FROM {quoted}")
            } else {
                let pk: Vec<String> = conn
                    .prepare("SELECT name FROM pragma_table_info(?1) WHERE pk > 0 ORDER BY pk")?
                    .query_map([&table], |r| r.get::<_, String>(0))?
                    .collect::<Result<_, _>>()?;
                let columns: Vec<String> = pk
                    .iter()
                    .map(|c| format!("\"{}\"", c.replace('"', "\"\"")))
                    .collect();
                format!("SELECT {} FROM {quoted}", columns.join(", "))
            };
            let mut stmt = conn.prepare(&select)?;
            let columns = stmt.column_count();
            let mut rows = stmt.query([])?;
            let mut set = BTreeSet::new();
            while let Some(row) = rows.next()? {
                let mut h = Sha256::new();
                for i in 0..columns {
                    hash_value(&mut h, row.get_ref(i)?);
                }
                set.insert(h.finalize().to_vec());
            }
            keys.insert(table, set);
        }
        Ok(keys)
    })
}

/// Runs every read-only tool of a server with valid arguments and asserts the database
/// content unchanged, tool by tool.
///
/// ```no_run
/// # async fn demo(server: aac_tools::Server, db: aac_tools::sqlite::Database) {
/// use aac_tools::sqlite::ReadOnlyCheck;
/// use serde_json::json;
///
/// let report = ReadOnlyCheck::new(&server, &db)
///     .arguments("get_issue", json!({"issue_id": "AAC-1"}))
///     .run()
///     .await
///     .expect("read-only tools changed nothing");
/// assert_eq!(report.len(), 4);
/// # }
/// ```
#[derive(Debug)]
pub struct ReadOnlyCheck<'a> {
    setup: Setup<'a>,
}

/// A read-only tool that failed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOnlyViolation {
    /// The call failed, so nothing was proven.
    CallFailed {
        /// The tool.
        tool: String,
        /// The error.
        error: String,
    },
    /// The content hash changed across the call.
    DataChanged {
        /// The tool.
        tool: String,
    },
    /// Reading the database failed.
    Database(String),
}

impl fmt::Display for ReadOnlyViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadOnlyViolation::CallFailed { tool, error } => {
                write!(
                    f,
                    "read-only tool `{tool}` failed, so nothing was proven: {error}"
                )
            }
            ReadOnlyViolation::DataChanged { tool } => {
                write!(f, "read-only tool `{tool}` changed the database")
            }
            ReadOnlyViolation::Database(e) => write!(f, "cannot hash the database: {e}"),
        }
    }
}

impl std::error::Error for ReadOnlyViolation {}

impl<'a> ReadOnlyCheck<'a> {
    /// A check of `server`'s read-only tools against `db`. Tables whose names start with
    /// `aac_audit` are left out of the hash (the calls themselves are audited).
    pub fn new(server: &'a Server, db: &'a Database) -> ReadOnlyCheck<'a> {
        ReadOnlyCheck {
            setup: Setup::new(server, db),
        }
    }

    /// Call `tool` with these arguments (tools without an entry are called with `{}`).
    pub fn arguments(mut self, tool: &str, arguments: Value) -> ReadOnlyCheck<'a> {
        self.setup.arguments.insert(tool.to_owned(), arguments);
        self
    }

    /// Also leave tables starting with `prefix` out of the hash.
    pub fn exclude_tables(mut self, prefix: &str) -> ReadOnlyCheck<'a> {
        self.setup.exclude.push(prefix.to_owned());
        self
    }

    /// Call as `principal` (default: a `read-only-check` principal holding every scope
    /// of the registry, in no workspace).
    pub fn principal(mut self, principal: Principal) -> ReadOnlyCheck<'a> {
        self.setup.principal = Some(principal);
        self
    }

    /// Run the check. Returns each read-only tool checked with the content hash it left,
    /// or the first violation.
    pub async fn run(self) -> Result<BTreeMap<String, String>, ReadOnlyViolation> {
        let setup = self.setup;
        let principal = setup.principal("read-only-check");
        let mut checked = BTreeMap::new();
        for entry in setup.server.registry().tools() {
            if !entry.def().is_read_only() {
                continue;
            }
            let name = entry.name();
            let before = hash_off_runtime(setup.db, &setup.exclude).await?;
            if let Err(error) = setup.call(name, &principal).await {
                return Err(ReadOnlyViolation::CallFailed {
                    tool: name.to_owned(),
                    error,
                });
            }
            let after = hash_off_runtime(setup.db, &setup.exclude).await?;
            if before != after {
                return Err(ReadOnlyViolation::DataChanged {
                    tool: name.to_owned(),
                });
            }
            checked.insert(name.to_owned(), after);
        }
        Ok(checked)
    }
}

/// What both checks are configured with, and how they call a tool.
#[derive(Debug)]
struct Setup<'a> {
    server: &'a Server,
    db: &'a Database,
    arguments: HashMap<String, Value>,
    exclude: Vec<String>,
    principal: Option<Principal>,
}

impl<'a> Setup<'a> {
    /// Tables whose names start with `aac_audit` are always left out: the calls
    /// themselves are audited.
    fn new(server: &'a Server, db: &'a Database) -> Setup<'a> {
        Setup {
            server,
            db,
            arguments: HashMap::new(),
            exclude: vec!["aac_audit".to_owned()],
            principal: None,
        }
    }

    /// The configured principal, or `subject` holding every scope of the registry.
    fn principal(&self, subject: &str) -> Arc<Principal> {
        Arc::new(
            self.principal.clone().unwrap_or_else(|| {
                Principal::new(subject, self.server.registry().scopes_supported())
            }),
        )
    }

    /// Call `tool` with its configured arguments (`{}` without an entry); the error's
    /// text if it failed.
    async fn call(&self, tool: &str, principal: &Arc<Principal>) -> Result<(), String> {
        let arguments = self
            .arguments
            .get(tool)
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        let request = CallRequest::new(tool, Some(arguments))
            .credentials(Credentials::Verified(Arc::clone(principal)));
        match self.server.call(request).await.error() {
            Some(err) => Err(err.to_string()),
            None => Ok(()),
        }
    }
}

/// [`content_hash`] on a blocking thread, like every other piece of database work.
async fn hash_off_runtime(db: &Database, exclude: &[String]) -> Result<String, ReadOnlyViolation> {
    let db = db.clone();
    let exclude = exclude.to_vec();
    tokio::task::spawn_blocking(move || {
        let exclude: Vec<&str> = exclude.iter().map(String::as_str).collect();
        content_hash(&db, &exclude)
    })
    .await
    .map_err(|e| ReadOnlyViolation::Database(format!("the hashing task failed: {e}")))?
    .map_err(|e| ReadOnlyViolation::Database(e.to_string()))
}

/// Runs every tool of a server that is not `destructive` (read-only and write tools) with
/// valid arguments and asserts that no row disappeared, tool by tool: every row present
/// before a call (by `rowid`, or primary key for a `WITHOUT ROWID` table) is present
/// after it. Rows may change and new rows may appear; a write tool that deletes fails.
///
/// This is the net for what neither the compiler nor the database sees: a tool that
/// deletes through a connection of its own, or through shared state of its own that holds
/// one. Tools run in the registry's order, so a tool that needs a row another creates
/// can rely on it.
///
/// ```no_run
/// # async fn demo(server: aac_tools::Server, db: aac_tools::sqlite::Database) {
/// use aac_tools::sqlite::NonDestructiveCheck;
/// use serde_json::json;
///
/// NonDestructiveCheck::new(&server, &db)
///     .arguments("get_issue", json!({"issue_id": "AAC-1"}))
///     .arguments("update_issue", json!({"issue_id": "AAC-1", "status": "done"}))
///     .run()
///     .await
///     .unwrap_or_else(|violation| panic!("{violation}"));
/// # }
/// ```
#[derive(Debug)]
pub struct NonDestructiveCheck<'a> {
    setup: Setup<'a>,
}

/// A non-destructive tool that failed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NonDestructiveViolation {
    /// The call failed, so nothing was proven.
    CallFailed {
        /// The tool.
        tool: String,
        /// The error.
        error: String,
    },
    /// Rows present before the call were gone after it.
    RowsLost {
        /// The tool.
        tool: String,
        /// The table.
        table: String,
        /// How many rows disappeared.
        rows: usize,
    },
    /// Reading the database failed.
    Database(String),
}

impl fmt::Display for NonDestructiveViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NonDestructiveViolation::CallFailed { tool, error } => write!(
                f,
                "non-destructive tool `{tool}` failed, so nothing was proven: {error}"
            ),
            NonDestructiveViolation::RowsLost { tool, table, rows } => write!(
                f,
                "non-destructive tool `{tool}` deleted {rows} row(s) of `{table}`"
            ),
            NonDestructiveViolation::Database(e) => write!(f, "cannot read the database: {e}"),
        }
    }
}

impl std::error::Error for NonDestructiveViolation {}

impl<'a> NonDestructiveCheck<'a> {
    /// A check of `server`'s non-destructive tools against `db`. Tables whose names start
    /// with `aac_audit` are left out.
    pub fn new(server: &'a Server, db: &'a Database) -> NonDestructiveCheck<'a> {
        NonDestructiveCheck {
            setup: Setup::new(server, db),
        }
    }

    /// Call `tool` with these arguments (tools without an entry are called with `{}`).
    pub fn arguments(mut self, tool: &str, arguments: Value) -> NonDestructiveCheck<'a> {
        self.setup.arguments.insert(tool.to_owned(), arguments);
        self
    }

    /// Also leave tables starting with `prefix` out.
    pub fn exclude_tables(mut self, prefix: &str) -> NonDestructiveCheck<'a> {
        self.setup.exclude.push(prefix.to_owned());
        self
    }

    /// Call as `principal` (default: a `non-destructive-check` principal holding every
    /// scope of the registry, in no workspace).
    pub fn principal(mut self, principal: Principal) -> NonDestructiveCheck<'a> {
        self.setup.principal = Some(principal);
        self
    }

    /// Run the check. Returns each tool checked with the number of rows it left, or the
    /// first violation.
    pub async fn run(self) -> Result<BTreeMap<String, usize>, NonDestructiveViolation> {
        let setup = self.setup;
        let principal = setup.principal("non-destructive-check");
        let mut checked = BTreeMap::new();
        for entry in setup.server.registry().tools() {
            if entry.def().is_destructive() {
                continue;
            }
            let name = entry.name();
            let before = keys_off_runtime(setup.db, &setup.exclude).await?;
            if let Err(error) = setup.call(name, &principal).await {
                return Err(NonDestructiveViolation::CallFailed {
                    tool: name.to_owned(),
                    error,
                });
            }
            let after = keys_off_runtime(setup.db, &setup.exclude).await?;
            for (table, rows) in &before {
                let lost = match after.get(table) {
                    Some(kept) => rows.difference(kept).count(),
                    None => rows.len(),
                };
                if lost > 0 {
                    return Err(NonDestructiveViolation::RowsLost {
                        tool: name.to_owned(),
                        table: table.clone(),
                        rows: lost,
                    });
                }
            }
            checked.insert(name.to_owned(), after.values().map(BTreeSet::len).sum());
        }
        Ok(checked)
    }
}

/// [`row_keys`] on a blocking thread.
async fn keys_off_runtime(
    db: &Database,
    exclude: &[String],
) -> Result<BTreeMap<String, BTreeSet<Vec<u8>>>, NonDestructiveViolation> {
    let db = db.clone();
    let exclude = exclude.to_vec();
    tokio::task::spawn_blocking(move || {
        let exclude: Vec<&str> = exclude.iter().map(String::as_str).collect();
        row_keys(&db, &exclude)
    })
    .await
    .map_err(|e| NonDestructiveViolation::Database(format!("the reading task failed: {e}")))?
    .map_err(|e| NonDestructiveViolation::Database(e.to_string()))
}
