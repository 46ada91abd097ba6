//! PostgreSQL data handles at the tool's access level, through `tokio-postgres` and a
//! `deadpool-postgres` pool per level: the way past one machine, for several replicas of
//! a server on one database.
//!
//! A [`Database`] is a URL (the tables' owner, for set-up and migrations) and the
//! [`Roles`] of the three levels. Each level has its own pool of connections, logged in
//! as its own role, so that the database enforces the level whatever SQL a tool sends:
//!
//! - at [`Read`] the transaction is `READ ONLY`, as a role that may only `SELECT`: a
//!   write fails with 500 `read_only_violation`;
//! - at [`Write`] the role may `SELECT`, `INSERT` and `UPDATE`, not `DELETE`, `TRUNCATE`
//!   or change the schema: those fail with 500 `level_violation`;
//! - at [`Delete`] it is the full data role (still no schema changes: no level owns a
//!   table).
//!
//! [`Database::grant_levels`] creates the roles and grants them their levels.
//!
//! Tools receive a handle at their level, [`Db<L>`](Db), as a parameter. Its
//! [`Db::begin`] opens a transaction [`Tx<L>`](Tx) of the same level; [`Tx::commit`]
//! commits it and dropping it rolls it back. Query traits are written on `Tx<L>` with
//! `async fn`s, gated by [`#[queries]`](crate::queries) exactly as on SQLite:
//!
//! ```
//! use aac_tools::postgres::{ReadDb, Tx};
//! use aac_tools::{ToolError, mcp_tool, queries};
//! use schemars::JsonSchema;
//! use serde::Serialize;
//!
//! /// Queries that change notes.
//! #[queries]
//! pub trait UpdateNotes {
//!     fn add_note(&self, text: &str) -> impl Future<Output = Result<(), ToolError>> + Send;
//! }
//! impl<L: aac_tools::access::Level> UpdateNotes for Tx<L> {
//!     async fn add_note(&self, text: &str) -> Result<(), ToolError> {
//!         self.client().execute("INSERT INTO notes (text) VALUES ($1)", &[&text]).await?;
//!         Ok(())
//!     }
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Count {
//!     notes: i64,
//! }
//!
//! /// Count the notes.
//! #[mcp_tool(read_only, scope = "notes:read")]
//! async fn count_pg_notes(db: ReadDb) -> Result<Count, ToolError> {
//!     let tx = db.begin().await?;
//!     let notes = tx.client().query_one("SELECT count(*) FROM notes", &[]).await?.get(0);
//!     tx.commit().await?;
//!     Ok(Count { notes })
//! }
//! ```
//!
//! A `read_only` tool that reaches an `Update…` query does not compile, as on SQLite:
//!
//! ```compile_fail
//! # use aac_tools::postgres::{ReadDb, Tx};
//! # use aac_tools::{Text, ToolError, mcp_tool, queries};
//! # #[queries]
//! # pub trait UpdateNotes {
//! #     fn add_note(&self, text: &str) -> impl Future<Output = Result<(), ToolError>> + Send;
//! # }
//! # impl<L: aac_tools::access::Level> UpdateNotes for Tx<L> {
//! #     async fn add_note(&self, _: &str) -> Result<(), ToolError> { Ok(()) }
//! # }
//! /// Tries to write.
//! #[mcp_tool(read_only, scope = "notes:read")]
//! async fn sneaky(db: ReadDb) -> Result<Text, ToolError> {
//!     let tx = db.begin().await?;
//!     tx.add_note("x").await?; // error: read-only tool cannot use update queries
//!     Ok(Text("no".into()))
//! }
//! ```
//!
//! while the same tool without `read_only`, on a `WriteDb`, does:
//!
//! ```
//! # use aac_tools::postgres::{WriteDb, Tx};
//! # use aac_tools::{Text, ToolError, mcp_tool, queries};
//! # #[queries]
//! # pub trait UpdateNotes {
//! #     fn add_note(&self, text: &str) -> impl Future<Output = Result<(), ToolError>> + Send;
//! # }
//! # impl<L: aac_tools::access::Level> UpdateNotes for Tx<L> {
//! #     async fn add_note(&self, _: &str) -> Result<(), ToolError> { Ok(()) }
//! # }
//! /// Writes.
//! #[mcp_tool(scope = "notes:write")]
//! async fn honest_pg(db: WriteDb) -> Result<Text, ToolError> {
//!     let tx = db.begin().await?;
//!     tx.add_note("x").await?;
//!     tx.commit().await?;
//!     Ok(Text("yes".into()))
//! }
//! ```

mod audit;
mod ledger;
mod link;
mod roles;
mod tokens;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::access::{AccessLevel, Delete, Level, MayDelete, MayUpdate, Read, Write};
use crate::error::{Status, ToolError};
use crate::tool::{Call, ToolParam};

pub use audit::{PgSink, mirror};
/// The pool this module is built on ([`Tx::client`] is its `ClientWrapper`).
pub use deadpool_postgres;
pub use ledger::PgLedger;
use roles::FRAMEWORK_TABLES;
pub use roles::{BadPrefix, DEFAULT_ROLE_PREFIX, Roles};
pub use tokens::TokenStore;
/// The `tokio-postgres` this module is built on, so that query code names the same version.
pub use tokio_postgres;

/// Connections each level's pool keeps at most, unless [`Database::connect_with`] says.
pub const DEFAULT_POOL_SIZE: usize = 4;

/// How long opening a connection, or waiting for a free one, may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A database error outside a tool call (connecting, migrating, granting).
#[derive(Debug)]
pub struct DbError {
    message: String,
    source: Option<tokio_postgres::Error>,
}

/// The refusal of the owner's connection (`what`) asked for while a tool runs on this
/// thread: it has no level's rules.
pub(crate) fn refused_in_tools(what: &str) -> Result<(), DbError> {
    crate::__private0::set_up_refused(what).map_or(Ok(()), |why| Err(DbError::new(why, None)))
}

impl DbError {
    pub(crate) fn new(
        message: impl Into<String>,
        source: Option<tokio_postgres::Error>,
    ) -> DbError {
        DbError {
            message: message.into(),
            source,
        }
    }

    /// The PostgreSQL error behind this one, if any.
    pub fn postgres(&self) -> Option<&tokio_postgres::Error> {
        self.source.as_ref()
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{}: {}", self.message, describe(source)),
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

impl From<tokio_postgres::Error> for DbError {
    fn from(err: tokio_postgres::Error) -> DbError {
        DbError::new("database error", Some(err))
    }
}

/// An error with the server's message when there is one (tokio-postgres' `Display` says
/// only "db error").
/// A connection as `config` says, opened within its `connect_timeout`
/// ([`CONNECT_TIMEOUT`] when it names none) from the first byte to the last of the
/// start-up exchange: tokio-postgres bounds each TCP attempt only, so a server that
/// accepts and never answers (a stuck proxy, a half-dead host) held the caller for ever
/// (every command of `aacworkflow`, `audit --verify` included). Its connection runs on a
/// task of its own, returned to abort when done.
pub(crate) async fn connect(
    config: &tokio_postgres::Config,
) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), String> {
    let limit = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    match tokio::time::timeout(limit, config.connect(NoTls)).await {
        Ok(Ok((client, connection))) => {
            let task = tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::debug!("a database connection closed: {}", describe(&err));
                }
            });
            Ok((client, task))
        }
        Ok(Err(err)) => Err(describe(&err)),
        Err(_) => Err(format!(
            "the server accepted the connection but did not answer within {} s",
            limit.as_secs_f64()
        )),
    }
}

pub(crate) fn describe(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => {
            // "error connecting to server" says nothing of why: its causes do
            // ("Connection refused", a name that does not resolve, a timeout).
            let mut text = err.to_string();
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !text.contains(&cause_text) {
                    text.push_str(": ");
                    text.push_str(&cause_text);
                }
                source = cause.source();
            }
            text
        }
    }
}

/// PostgreSQL errors inside a tool become [`ToolError`]s: a write in a read-only
/// transaction is 500 `read_only_violation`, an action the level's role may not take
/// 500 `level_violation`, a serialization failure or deadlock 503 `database_busy`, a
/// constraint violation 409 `conflict`, a lost connection 503 `database_unavailable`,
/// anything else 500 `internal_error`.
impl From<tokio_postgres::Error> for ToolError {
    fn from(err: tokio_postgres::Error) -> ToolError {
        let text = describe(&err);
        let Some(code) = err.code() else {
            return unavailable(&text);
        };
        if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            ToolError::new(
                Status::Internal,
                "read_only_violation",
                format!("a read-only tool tried to write to the database, which refused: {text}"),
            )
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            ToolError::new(
                Status::Internal,
                "level_violation",
                format!(
                    "a tool tried an action above its access level, and the database refused it: {text}"
                ),
            )
        } else if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::LOCK_NOT_AVAILABLE
        {
            ToolError::new(
                Status::Unavailable,
                "database_busy",
                format!("the database is busy, try again: {text}"),
            )
        } else if code.code().starts_with("23") {
            ToolError::conflict(format!("the change conflicts with existing data: {text}"))
        } else if code.code().starts_with("08") || code.code().starts_with("57") {
            unavailable(&text)
        } else {
            ToolError::internal(format!("database error: {text}"))
        }
    }
}

fn unavailable(why: &str) -> ToolError {
    ToolError::new(
        Status::Unavailable,
        "database_unavailable",
        format!("the database cannot be reached, try again: {why}"),
    )
}

/// One PostgreSQL database, shared by every call and every replica. Cheap to clone.
#[derive(Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

struct Inner {
    owner: tokio_postgres::Config,
    database: String,
    roles: Roles,
    read: Pool,
    write: Pool,
    delete: Pool,
    pool_size: usize,
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database")
            .field("database", &self.inner.database)
            .field("roles", &self.inner.roles)
            .finish_non_exhaustive()
    }
}

/// How long a statement of the framework's connections (the levels' pools, the token
/// store, the request-state ledger) waits for a lock before it fails: `10s`. The audit
/// sink's appends wait at most 5 s (their own setting).
pub const LOCK_TIMEOUT: &str = "10s";

/// The `search_path` of every connection the framework opens (the owner's, the levels',
/// the token store's, the audit sink's and reader's, the ledger's): the schema of the
/// tables only, where they are created. PostgreSQL searches `pg_catalog` first when the
/// path does not name it (named first, it would also be where `CREATE TABLE` goes), and
/// no `"$user"` schema (which a role that may create schemas could make) comes in between.
///
/// That is not enough by itself: PostgreSQL picks, among the functions and operators of
/// one name in the path, the one whose argument types match best, whatever its schema. A
/// `public.pg_advisory_xact_lock(integer)` planted by any role that may create in
/// `public` would win over the built-in (`bigint`) for an integer literal, and run as the
/// caller (CVE-2018-1058). So the framework's own SQL names every built-in it calls with
/// `pg_catalog.`, and casts its operands to the operator's exact types.
pub(crate) const SEARCH_PATH: &str = "public";

/// `config` with [`SEARCH_PATH`] before the URL's own options (which may still set
/// another).
fn safe_path(mut config: tokio_postgres::Config) -> tokio_postgres::Config {
    let mut options = format!("-c search_path={SEARCH_PATH}");
    if let Some(own) = config.get_options() {
        options.push(' ');
        options.push_str(own);
    }
    config.options(options);
    config
}

/// `config` with the session settings the framework's connections depend on, sent in
/// the connection's start-up packet: PostgreSQL applies them over any default of the role
/// (`ALTER ROLE … SET`, which every role may run for itself), and `RESET ALL` goes back
/// to them. The application's tables are in `public`; appends and tools run in read
/// committed; a session is read-only exactly when `read_only`; a statement waits at most
/// [`LOCK_TIMEOUT`] for a lock (a session of a data role holding one, from `psql` or a
/// tool's transaction, cannot hold every call of every replica). The URL's own `options`
/// come after, so an operator's `-c` still wins.
pub(crate) fn pinned(
    mut config: tokio_postgres::Config,
    read_only: bool,
) -> tokio_postgres::Config {
    let read_only = if read_only { "on" } else { "off" };
    let mut options = format!(
        "-c search_path={SEARCH_PATH} -c default_transaction_read_only={read_only} \
         -c default_transaction_isolation=read\\ committed -c lock_timeout={LOCK_TIMEOUT}"
    );
    if let Some(own) = config.get_options() {
        options.push(' ');
        options.push_str(own);
    }
    config.options(options);
    config
}

/// A pool of connections logged in as `user`, otherwise as `config` says, with the
/// framework's session settings ([`pinned`]).
pub(crate) fn pool(
    config: &tokio_postgres::Config,
    user: Option<&str>,
    read_only: bool,
    size: usize,
) -> Result<Pool, DbError> {
    let mut config = pinned(config.clone(), read_only);
    if let Some(user) = user {
        config.user(user);
    }
    config.connect_timeout(CONNECT_TIMEOUT);
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            // Only committed transactions give their connection back (`Tx`'s drop takes
            // it out of the pool otherwise); `Verified` also notices one the server closed.
            recycling_method: RecyclingMethod::Verified,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(CONNECT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|e| DbError::new(format!("cannot build the connection pool: {e}"), None))
}

/// A connection from `pool`, or why not.
pub(crate) async fn get(pool: &Pool) -> Result<Object, String> {
    pool.get().await.map_err(|e| match e {
        deadpool_postgres::PoolError::Backend(err) => describe(&err),
        other => other.to_string(),
    })
}

impl Database {
    /// The database at `url` (`postgres://owner@host:port/name`: the tables' owner, for
    /// [`Database::owner`]), whose levels log in as `roles`. Connects lazily: nothing is
    /// opened until the first transaction.
    pub fn connect(url: &str, roles: Roles) -> Result<Database, DbError> {
        Database::connect_with(url, roles, DEFAULT_POOL_SIZE)
    }

    /// [`Database::connect`] with at most `pool_size` connections per level.
    pub fn connect_with(url: &str, roles: Roles, pool_size: usize) -> Result<Database, DbError> {
        // A URL's scheme is read in any case (RFC 3986), around any space.
        let url = url.trim();
        let url = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("postgres") => {
                format!("postgres://{rest}")
            }
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("postgresql") => {
                format!("postgresql://{rest}")
            }
            _ => url.to_owned(),
        };
        let owner: tokio_postgres::Config = url
            .parse()
            .map_err(|e| DbError::new("not a PostgreSQL connection string", Some(e)))?;
        let owner = safe_path(owner);
        let database = owner
            .get_dbname()
            .or(owner.get_user())
            .ok_or_else(|| DbError::new("the connection string names no database", None))?
            .to_owned();
        Ok(Database {
            inner: Arc::new(Inner {
                read: pool(&owner, Some(&roles.read()), true, pool_size)?,
                write: pool(&owner, Some(&roles.write()), false, pool_size)?,
                delete: pool(&owner, Some(&roles.delete()), false, pool_size)?,
                owner,
                database,
                roles,
                pool_size,
            }),
        })
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.inner.database
    }

    /// The roles of the levels.
    pub fn roles(&self) -> &Roles {
        &self.inner.roles
    }

    /// The connection settings of the owner (as parsed from the URL).
    pub fn owner_config(&self) -> &tokio_postgres::Config {
        &self.inner.owner
    }

    /// Connections each level's pool keeps at most.
    pub fn pool_size(&self) -> usize {
        self.inner.pool_size
    }

    /// A new connection as the tables' owner, for set-up, migrations and seeding. Not for
    /// tools: a tool cannot take the `Database` as [`State`](crate::State), and one that
    /// reaches it another way (inside a state of its own, a global) is refused here while
    /// it runs (`level_violation`).
    pub async fn owner(&self) -> Result<tokio_postgres::Client, DbError> {
        refused_in_tools("Database::owner")?;
        // The URL's `connect_timeout`, else the framework's.
        let (client, _) = connect(&self.inner.owner).await.map_err(|why| {
            DbError::new(
                format!(
                    "cannot connect to database `{}`: {why}",
                    self.inner.database
                ),
                None,
            )
        })?;
        Ok(client)
    }

    /// Create the roles of the levels (if missing) and grant each exactly its level on
    /// every table of the `public` schema that the connecting user owns, as it is now, and
    /// `SELECT` (only) on every such view (see [`Roles`]). Run it as the tables' owner
    /// after every migration.
    ///
    /// Tables of other owners (another application's, in a shared database) are left as
    /// they are, and a table named `aac_…` that is not one of the framework's (a copy of
    /// `aac_tokens`, say) is taken from every role of the levels: the prefix is the
    /// framework's.
    ///
    /// A view reads its tables with its owner's rights: an application's view over a
    /// framework table (`aac_audit`, say) shows the data roles the columns it names, and
    /// nothing else of that table.
    pub async fn grant_levels(&self) -> Result<(), DbError> {
        let client = self.owner().await?;
        check_level_roles(&client, &self.inner.roles).await?;
        check_framework_tables(&client).await?;
        let tables: Vec<String> = client
            .query(
                "SELECT tablename::text FROM pg_catalog.pg_tables \
                 WHERE schemaname = 'public'::name AND tableowner = current_user ORDER BY 1",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let views: Vec<String> = client
            .query(
                "SELECT viewname::text FROM pg_catalog.pg_views \
                 WHERE schemaname = 'public'::name AND viewowner = current_user ORDER BY 1",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        // The owner's sequences, and the others' it may revoke on (as a superuser or a
        // member of their owner; a `REVOKE` of a sequence it has no right on would fail).
        let mut sequences = Vec::new();
        let mut foreign_sequences = Vec::new();
        for row in client
            .query(
                "SELECT sequencename::text, sequenceowner = current_user, \
                        pg_catalog.pg_has_role(sequenceowner, 'USAGE'::text) \
                 FROM pg_catalog.pg_sequences WHERE schemaname = 'public'::name ORDER BY 1",
                &[],
            )
            .await?
        {
            match (row.get::<_, bool>(1), row.get::<_, bool>(2)) {
                (true, _) => sequences.push(row.get::<_, String>(0)),
                (false, true) => foreign_sequences.push(row.get::<_, String>(0)),
                (false, false) => {}
            }
        }
        let sql = self.inner.roles.grant_sql(
            &self.inner.database,
            &tables,
            &views,
            &sequences,
            &foreign_sequences,
        );
        // Roles are shared by the whole cluster: two replicas granting at once must not
        // race on `CREATE ROLE`. The lock is the database's: two databases whose roles
        // share a prefix, granting at once, can still meet on a role (a duplicate name,
        // a tuple updated concurrently), and the loser tries again.
        // Large objects, revoked in the same transaction as the grants (replicas granting
        // at once take turns on its lock; two bare `REVOKE`s would collide).
        let large_objects = large_objects_sql(&client).await?;
        let public_schema = public_schema_sql(&client).await?;
        let batch = format!(
            "BEGIN; SELECT pg_catalog.pg_advisory_xact_lock(7461626::bigint); {sql} \
             {large_objects} {public_schema} COMMIT;"
        );
        let mut tries = 0u64;
        loop {
            match client.batch_execute(&batch).await {
                Ok(()) => {
                    self.warn_of_large_objects(&client).await?;
                    return warn_of_public_schema(&client).await;
                }
                Err(err) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    tries += 1;
                    if tries < 10 && met_on_a_role(&err) {
                        tokio::time::sleep(std::time::Duration::from_millis(10 * tries)).await;
                        continue;
                    }
                    return Err(DbError::new("cannot grant the levels' roles", Some(err)));
                }
            }
        }
    }

    /// Warns when the levels' roles may still create large objects (the owner is no
    /// superuser, see [`large_objects_sql`]).
    async fn warn_of_large_objects(&self, client: &tokio_postgres::Client) -> Result<(), DbError> {
        let open: bool = client
            .query_one(
                "SELECT pg_catalog.has_function_privilege($1, 'lo_from_bytea(oid, bytea)', 'EXECUTE')",
                &[&self.inner.roles.read()],
            )
            .await
            .map_err(|e| DbError::new("cannot read the levels' privileges", Some(e)))?
            .get(0);
        if open {
            tracing::warn!(
                "the levels' roles may create large objects, outside every table (a read-only tool too): a superuser should run, in this database, `REVOKE EXECUTE ON FUNCTION {LARGE_OBJECT_CREATORS} FROM PUBLIC`"
            );
        }
        Ok(())
    }

    /// Bring the schema of `component` to the last of `migrations` (the SQL of version
    /// 1, 2, …, each applied once, in order, in one transaction with its version), as
    /// the owner, then grant the levels again ([`Database::grant_levels`]). Replicas
    /// that migrate at once take turns. A database whose `component` is at a version
    /// this code does not know (a newer release migrated it) is refused.
    ///
    /// The framework's own tables (`aac_tokens`, `aac_audit`) are the component `aac`,
    /// migrated first; `component` names the application's.
    pub async fn migrate(&self, component: &str, migrations: &[&str]) -> Result<u32, DbError> {
        let mut client = self.owner().await?;
        if component == "aac" {
            return Err(DbError::new(
                "`aac` is the framework's own component: name the application's schema otherwise",
                None,
            ));
        }
        check_framework_tables(&client).await?;
        // Every component's version first: a database a newer release migrated is
        // refused before anything is written (the framework's triggers and functions were
        // rewritten to this release's before the application's version refused it).
        if let Some(versions) = schema_versions(&client).await? {
            for (name, known) in [
                ("aac", FRAMEWORK_MIGRATIONS.len()),
                (component, migrations.len()),
            ] {
                let known = i32::try_from(known).unwrap_or(i32::MAX);
                if let Some(err) = unusable_version(name, version_of(&versions, name), known) {
                    return Err(err);
                }
            }
        }
        migrate_one(&mut client, "aac", FRAMEWORK_MIGRATIONS).await?;
        audit::ensure_table(&client)
            .await
            .map_err(|e| DbError::new(e.to_string(), None))?;
        let applied = migrate_one(&mut client, component, migrations).await?;
        drop(client);
        self.grant_levels().await?;
        Ok(applied)
    }

    /// Check, writing nothing, that this database was migrated, and by no newer release
    /// than this code (the framework's schema and `component`'s, whose versions this code
    /// knows up to `known`): for commands that only read, which must not migrate.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub(crate) async fn check_schema(&self, component: &str, known: usize) -> Result<(), DbError> {
        let client = self.owner().await?;
        check_framework_tables(&client).await?;
        let Some(versions) = schema_versions(&client).await? else {
            return Err(DbError::new(
                format!(
                    "database `{}` has no aac-tools schema yet (no `aac_schema` table); \
                     a command that writes, such as `serve`, migrates it",
                    self.inner.database
                ),
                None,
            ));
        };
        for (name, known) in [("aac", FRAMEWORK_MIGRATIONS.len()), (component, known)] {
            let current = version_of(&versions, name);
            let known = i32::try_from(known).unwrap_or(i32::MAX);
            if let Some(err) = unusable_version(name, current, known) {
                return Err(err);
            }
            if current == 0 {
                return Err(DbError::new(
                    format!(
                        "database `{}` has no `{name}` schema yet; a command that writes, \
                         such as `serve`, migrates it",
                        self.inner.database
                    ),
                    None,
                ));
            }
        }
        Ok(())
    }

    /// The version of `component`'s schema in this database, `0` if never migrated.
    pub async fn schema_version(&self, component: &str) -> Result<u32, DbError> {
        let client = self.owner().await?;
        client.batch_execute(&migrating(SCHEMA_TABLE)).await?;
        let row = client
            .query_opt(
                "SELECT version FROM aac_schema WHERE component = $1",
                &[&component],
            )
            .await?;
        match row.map_or(0, |r| r.get::<_, i32>(0)) {
            version if version < 0 => Err(negative_schema(component, version)),
            version => Ok(version.unsigned_abs()),
        }
    }

    /// A handle at level `L`, for code outside tools (tests, command-line tools). A tool
    /// gets its handle as a parameter instead, at its own level.
    pub fn handle<L: Level>(&self) -> Db<L> {
        Db {
            db: self.clone(),
            level: PhantomData,
        }
    }

    fn pool_of(&self, level: AccessLevel) -> &Pool {
        match level {
            AccessLevel::Read => &self.inner.read,
            AccessLevel::Write => &self.inner.write,
            AccessLevel::Delete => &self.inner.delete,
        }
    }
}

/// Every component's schema version in `aac_schema`, read without writing; `None` where
/// the table does not exist yet (a database never migrated).
async fn schema_versions(
    client: &tokio_postgres::Client,
) -> Result<Option<Vec<(String, i32)>>, DbError> {
    match client
        .query("SELECT component, version FROM aac_schema", &[])
        .await
    {
        Ok(rows) => Ok(Some(
            rows.iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, i32>(1)))
                .collect(),
        )),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(e) => Err(DbError::from(e)),
    }
}

/// The version of `name` among `versions`, `0` if it has none.
fn version_of(versions: &[(String, i32)], name: &str) -> i32 {
    versions
        .iter()
        .find(|(component, _)| component == name)
        .map_or(0, |(_, version)| *version)
}

/// The key of the advisory lock every change of the schema takes: replicas that start
/// at once on a new database take turns (two concurrent `CREATE TABLE IF NOT EXISTS` of
/// one table can both try to create it, and one fails).
pub(crate) const MIGRATION_LOCK: i64 = 7461627;

/// `sql` in a transaction of its own that holds [`MIGRATION_LOCK`].
pub(crate) fn migrating(sql: &str) -> String {
    format!(
        "BEGIN; SELECT pg_catalog.pg_advisory_xact_lock({MIGRATION_LOCK}::bigint); {sql} COMMIT;"
    )
}

/// Whether `err` is two sessions meeting on a role, cluster-wide (another database's
/// grants creating or altering the same role at once): worth another try.
fn met_on_a_role(err: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    err.as_db_error().is_some_and(|db| {
        // `role "…" already exists`: another database's grant created it between this
        // one's look and its `CREATE ROLE`.
        *db.code() == SqlState::UNIQUE_VIOLATION
            || *db.code() == SqlState::DUPLICATE_OBJECT
            || db.message().contains("concurrently")
    })
}

const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS aac_schema (
    component TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
);";

/// The framework's own tables, version by version.
const FRAMEWORK_MIGRATIONS: &[&str] = &[tokens::SCHEMA, ledger::SCHEMA, audit::LOCK_SCHEMA];

/// A version below zero in `aac_schema`: no migration writes one (someone edited the
/// table), and it would skip every migration and pass for current.
fn negative_schema(component: &str, current: i32) -> DbError {
    DbError::new(
        format!(
            "the schema of `{component}` in this database is at version {current}, which no \
             migration writes (`aac_schema` was edited): set it to the version the schema \
             is really at, or 0 to migrate from the start"
        ),
        None,
    )
}

/// Why this build may not use `component`'s schema at version `current`, knowing versions
/// up to `known`: a newer release migrated it, or the version is one no migration writes.
fn unusable_version(component: &str, current: i32, known: i32) -> Option<DbError> {
    if current > known {
        Some(newer_schema(component, current, known))
    } else if current < 0 {
        Some(negative_schema(component, current))
    } else {
        None
    }
}

/// A schema that a newer release migrated.
fn newer_schema(component: &str, current: i32, known: i32) -> DbError {
    DbError::new(
        format!(
            "the schema of `{component}` in this database is at version {current}, but this \
             build knows versions up to {known}: run a newer release"
        ),
        None,
    )
}

async fn migrate_one(
    client: &mut tokio_postgres::Client,
    component: &str,
    migrations: &[&str],
) -> Result<u32, DbError> {
    let tx = client.transaction().await?;
    // One migrator at a time across every replica.
    tx.batch_execute(&format!(
        "SELECT pg_catalog.pg_advisory_xact_lock({MIGRATION_LOCK}::bigint)"
    ))
    .await?;
    tx.batch_execute(SCHEMA_TABLE).await?;
    let current = tx
        .query_opt(
            "SELECT version FROM aac_schema WHERE component = $1",
            &[&component],
        )
        .await?
        .map_or(0, |r| r.get::<_, i32>(0));
    let known = i32::try_from(migrations.len()).unwrap_or(i32::MAX);
    if let Some(err) = unusable_version(component, current, known) {
        return Err(err);
    }
    let Ok(current) = usize::try_from(current) else {
        return Err(negative_schema(component, current));
    };
    for (i, sql) in migrations.iter().enumerate().skip(current) {
        tx.batch_execute(sql).await.map_err(|e| {
            DbError::new(
                format!("migration {} of `{component}` failed", i + 1),
                Some(e),
            )
        })?;
    }
    tx.execute(
        "INSERT INTO aac_schema (component, version) VALUES ($1, $2)
         ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
        &[&component, &known],
    )
    .await?;
    tx.commit().await?;
    Ok(known as u32)
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
            .field("database", &self.db.inner.database)
            .finish()
    }
}

impl<L: Level> Db<L> {
    /// Open a transaction at this handle's level: `READ ONLY` at [`Read`], on a
    /// connection logged in as the level's role. Commit it with [`Tx::commit`]; dropped
    /// uncommitted, it rolls back and its connection is closed (never reused inside a
    /// transaction).
    pub async fn begin(&self) -> Result<Tx<L>, ToolError> {
        if let Some(err) = crate::__private0::above_running_tool(L::LEVEL) {
            return Err(err);
        }
        let conn = get(self.db.pool_of(L::LEVEL))
            .await
            .map_err(|why| unavailable(&why))?;
        let begin = match L::LEVEL {
            AccessLevel::Read => "BEGIN READ ONLY",
            _ => "BEGIN",
        };
        let tx = Tx {
            conn: Some(conn),
            level: PhantomData,
        };
        tx.client().batch_execute(begin).await?;
        Ok(tx)
    }

    /// Run `f` in one transaction at this handle's level: committed when it returns
    /// `Ok`, rolled back when it returns `Err`.
    ///
    /// ```no_run
    /// # async fn f(db: aac_tools::postgres::WriteDb) -> Result<(), aac_tools::ToolError> {
    /// db.run(|tx| Box::pin(async move {
    ///     tx.client().execute("UPDATE notes SET text = upper(text)", &[]).await?;
    ///     Ok(())
    /// }))
    /// .await
    /// # }
    /// ```
    pub async fn run<T, F>(&self, f: F) -> Result<T, ToolError>
    where
        F: for<'t> FnOnce(&'t Tx<L>) -> crate::BoxFuture<'t, Result<T, ToolError>>,
    {
        let tx = self.begin().await?;
        let value = f(&tx).await?;
        tx.commit().await?;
        Ok(value)
    }
}

#[diagnostic::do_not_recommend]
impl<L: Level> ToolParam for Db<L> {
    const NEEDS: AccessLevel = L::LEVEL;
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
            ToolError::internal(
                "no database: register the `postgres::Database` with `ServerBuilder::state`",
            )
        })?;
        Ok(Db {
            db: Database::clone(&db),
            level: PhantomData,
        })
    }
}

// A tool cannot take the framework's storage as `State<T>` (see `sqlite/mod.rs`).
impl crate::State<Database> {
    #[doc(hidden)]
    #[allow(missing_docs)]
    pub const __AAC_STORAGE: bool = true;
}
impl<L> crate::State<Db<L>> {
    #[doc(hidden)]
    #[allow(missing_docs)]
    pub const __AAC_STORAGE: bool = true;
}

/// A transaction at access level `L`, on a connection logged in as the level's role.
/// Query traits are implemented on it; see [`crate::access`] for the pattern.
pub struct Tx<L> {
    /// `None` once committed.
    conn: Option<Object>,
    level: PhantomData<fn() -> L>,
}

impl<L: Level> fmt::Debug for Tx<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx").field("level", &L::LEVEL).finish()
    }
}

impl<L: Level> Tx<L> {
    /// The connection, for query implementations (`prepare_cached` keeps statements per
    /// connection). At [`Read`] the transaction is read-only and the role may only
    /// `SELECT`: writes fail with 500 `read_only_violation`. At [`Write`] the role may
    /// not `DELETE`, `TRUNCATE` or change the schema: 500 `level_violation`. At
    /// [`Delete`] it may change any row of the application's tables.
    pub fn client(&self) -> &deadpool_postgres::ClientWrapper {
        self.conn
            .as_ref()
            .expect("a transaction is used only until it is committed")
    }

    /// The access level of this transaction.
    pub fn level(&self) -> AccessLevel {
        L::LEVEL
    }

    /// Commit. A transaction that an error aborted (even one the tool swallowed) does
    /// not commit: 500 `transaction_aborted`, and nothing of it is kept; the call then
    /// fails with that error whatever the tool returns, so that a refusal of the level's
    /// role is never recorded as a success.
    ///
    /// The connection then goes back to its pool as it came: what the transaction set
    /// for its session (`SET`, not `SET LOCAL`) is reset, and any session-level advisory
    /// lock it took released, in the same round trip as the `COMMIT`.
    ///
    /// A transaction is committed by the tool that began it: one kept past its call (in a
    /// static, say) and committed while a tool below its level runs is refused
    /// (`level_violation`) and rolled back.
    pub async fn commit(mut self) -> Result<(), ToolError> {
        if let Some(err) = crate::__private0::above_running_tool(L::LEVEL) {
            return Err(err);
        }
        // Counted in the call's transactions: a commit in flight when the call is
        // abandoned (the server stopped under it) is recorded as in doubt.
        let commits = crate::pipeline::commits::current().filter(|_| L::LEVEL != AccessLevel::Read);
        let committing = crate::pipeline::commits::before_commit(commits.as_ref(), false)?;
        let committed = self.client().batch_execute(COMMIT_AND_RESET).await;
        if let Some(committing) = committing {
            committing.done(committed.is_ok());
        }
        match committed {
            Ok(()) => {
                self.conn = None;
                Ok(())
            }
            // Kept by the call (which fails with it even when the tool swallows it): the
            // failed statement may be one the level's role was refused, whose error the
            // framework never sees, and a call whose writes were all rolled back did not
            // succeed.
            Err(err) if err.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION) => {
                Err(crate::__private0::violation(ToolError::new(
                    Status::Internal,
                    "transaction_aborted",
                    format!(
                        "a statement of this `{}` transaction failed (a refusal of the level's \
                         database role, or any other error), so the database rolled it back: \
                         nothing of it was kept",
                        L::LEVEL
                    ),
                )))
            }
            Err(err) => Err(err.into()),
        }
    }
}

/// How a transaction commits, and how its connection is made as it came, in one simple
/// query (one round trip). `SELECT 1` fails in an aborted transaction, where `COMMIT`
/// alone would answer `ROLLBACK` without an error; past an error nothing more runs, and
/// the connection, still the transaction's, is closed when the `Tx` drops. Before the
/// `COMMIT`, which keeps what they do: `RESET ALL` puts every setting back to the
/// session's start (the framework's own settings are in its start-up packet, [`pinned`],
/// so a role's defaults cannot come back this way), and `pg_advisory_unlock_all()`
/// releases the session-level advisory locks (the transaction's own go with it). About
/// 6 µs of the server's time a call (8 µs for `SELECT 1; COMMIT` alone, 14 with them,
/// medians of the server's statement log); after the `COMMIT`, in a transaction of their
/// own, they cost 2 µs more.
const COMMIT_AND_RESET: &str =
    "SELECT 1; RESET ALL; SELECT pg_catalog.pg_advisory_unlock_all(); COMMIT";

impl<L> Drop for Tx<L> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        // Never back to the pool inside a transaction: the connection leaves the pool
        // here, is rolled back explicitly when a runtime is there (so that its locks go at
        // once), and is closed, which rolls back in any case.
        let client = Object::take(conn);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = client.batch_execute("ROLLBACK").await;
            });
        }
    }
}

impl crate::access::Granted for Tx<Write> {}
impl crate::access::Granted for Tx<Delete> {}
#[diagnostic::do_not_recommend]
impl MayUpdate for Tx<Write> {}
#[diagnostic::do_not_recommend]
impl MayUpdate for Tx<Delete> {}
#[diagnostic::do_not_recommend]
impl MayDelete for Tx<Delete> {}

/// The functions that create large objects.
const LARGE_OBJECT_CREATORS: &str = "lo_creat(integer), lo_create(oid), lo_from_bytea(oid, bytea)";

/// Large objects are governed by no table privilege: any role may create them
/// (`lo_from_bytea`, in a `READ ONLY` transaction too), so a data role (a read-only tool's
/// raw SQL) could keep data outside every table and fill the disk the trail needs. Only a
/// superuser may revoke the creating functions from `PUBLIC`, in this database: the
/// statement when the owner is one (the framework uses no large objects), else nothing
/// (and `grant_levels` warns).
async fn large_objects_sql(client: &tokio_postgres::Client) -> Result<String, DbError> {
    let superuser: bool = client
        .query_one(
            "SELECT pg_catalog.current_setting('is_superuser'::text) = 'on'::text",
            &[],
        )
        .await
        .map_err(|e| DbError::new("cannot read the owner's attributes", Some(e)))?
        .get(0);
    Ok(if superuser {
        format!("REVOKE EXECUTE ON FUNCTION {LARGE_OBJECT_CREATORS} FROM PUBLIC;")
    } else {
        String::new()
    })
}

/// `CREATE` on the schema `public` is granted to `PUBLIC` by PostgreSQL 14 and earlier,
/// and clusters upgraded since keep it: every role, the levels' too, may then create
/// functions and operators there, which unqualified calls of anyone whose `search_path`
/// names `public` could run (CVE-2018-1058). The statement that revokes it when the
/// owner may (it owns the schema, is a member of its owner, or is a superuser); else
/// nothing, and [`warn_of_public_schema`] warns.
async fn public_schema_sql(client: &tokio_postgres::Client) -> Result<String, DbError> {
    let row = client
        .query_opt(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.aclexplode(COALESCE(n.nspacl, \
                    pg_catalog.acldefault('n'::\"char\", n.nspowner))) a \
                    WHERE a.grantee = 0::oid AND a.privilege_type = 'CREATE'::text), \
                    pg_catalog.pg_has_role(n.nspowner, 'USAGE'::text) \
                    OR pg_catalog.current_setting('is_superuser'::text) = 'on'::text \
             FROM pg_catalog.pg_namespace n WHERE n.nspname = 'public'::name",
            &[],
        )
        .await
        .map_err(|e| DbError::new("cannot read the privileges of schema `public`", Some(e)))?;
    Ok(match row {
        Some(row) if row.get::<_, bool>(0) && row.get::<_, bool>(1) => {
            "REVOKE CREATE ON SCHEMA public FROM PUBLIC;".to_owned()
        }
        _ => String::new(),
    })
}

/// Warns when roles other than the owner (and superusers) may still create in `public`:
/// their functions and operators there could be picked by SQL that names a built-in
/// without `pg_catalog.` (the framework's own SQL does not; an application's may).
async fn warn_of_public_schema(client: &tokio_postgres::Client) -> Result<(), DbError> {
    // The owners of `public` (`pg_database_owner` stands for the database's) and of the
    // database, when another role than the tables' owner: no grant can stop them.
    let owners: Vec<String> = client
        .query(
            "SELECT DISTINCT pg_catalog.pg_get_userbyid(o.owner)::text FROM ( \
                 SELECT CASE WHEN n.nspowner OPERATOR(pg_catalog.=) \
                                  'pg_database_owner'::regrole::oid \
                             THEN d.datdba ELSE n.nspowner END AS owner \
                 FROM pg_catalog.pg_namespace n, pg_catalog.pg_database d \
                 WHERE n.nspname = 'public'::name AND d.datname = pg_catalog.current_database() \
                 UNION ALL SELECT d.datdba FROM pg_catalog.pg_database d \
                 WHERE d.datname = pg_catalog.current_database()) o \
             WHERE o.owner OPERATOR(pg_catalog.<>) \
                   (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user) \
             ORDER BY 1",
            &[],
        )
        .await
        .map_err(|e| DbError::new("cannot read the owners of schema `public`", Some(e)))?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    if !owners.is_empty() {
        tracing::warn!(
            "the database or its schema `public` is owned by another role than the tables' \
             owner ({}): whatever this owner grants or revokes, that role may drop or replace \
             the framework's tables (`aac_tokens`, `aac_audit`) and the application's, and \
             `init` and `serve` only refuse such a table when they start. Serve from a \
             database whose owner, and `public`'s, you trust",
            owners.join(", ")
        );
    }
    let creators: Vec<String> = client
        .query(
            "SELECT r.rolname::text FROM pg_catalog.pg_roles r, pg_catalog.pg_namespace n \
             WHERE n.nspname = 'public'::name AND r.rolname <> current_user AND NOT r.rolsuper \
               AND pg_catalog.has_schema_privilege(r.oid, n.oid, 'CREATE'::text) \
             ORDER BY 1",
            &[],
        )
        .await
        .map_err(|e| DbError::new("cannot read the privileges of schema `public`", Some(e)))?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|name| !name.starts_with("pg_"))
        .collect();
    if !creators.is_empty() {
        let named = match creators.len() {
            n if n > 8 => format!("{}, and {} more", creators[..8].join(", "), n - 8),
            _ => creators.join(", "),
        };
        tracing::warn!(
            "roles other than the tables' owner may create functions and operators in schema \
             `public` ({}): SQL that calls a built-in without `pg_catalog.`, with operands of \
             other types than its own, could run one of theirs with the caller's rights. The \
             framework's own SQL names `pg_catalog`; write the application's so too, or take \
             `CREATE` on `public` from them (on PostgreSQL 15 and later the database's owner \
             owns `public`: serve from a database whose owner you trust)",
            named
        );
    }
    Ok(())
}

/// Refuses level roles that already exist with more than a level's rights: the grants
/// create a missing role with none of them, but reuse an existing one as it is, and a
/// `<prefix>_read` that is a superuser, may create roles or databases, bypasses row-level
/// security or replicates, or is a member of another role (`pg_write_all_data`, say),
/// would carry those rights into every call at its level.
async fn check_level_roles(client: &tokio_postgres::Client, roles: &Roles) -> Result<(), DbError> {
    let names: Vec<String> = roles.all().to_vec();
    let rows = client
        .query(
            "SELECT r.rolname::text, r.rolsuper, r.rolcreaterole, r.rolcreatedb, \
                    r.rolbypassrls, r.rolreplication, \
                    ARRAY(SELECT g.rolname::text FROM pg_catalog.pg_auth_members m \
                          JOIN pg_catalog.pg_roles g ON g.oid = m.roleid \
                          WHERE m.member = r.oid ORDER BY 1), \
                    ARRAY(SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) \
                          FROM pg_catalog.pg_shdepend d \
                          WHERE d.refclassid = 'pg_catalog.pg_authid'::regclass::oid \
                            AND d.refobjid = r.oid AND d.deptype = 'o' \
                            AND (d.dbid = (SELECT oid FROM pg_catalog.pg_database \
                                           WHERE datname = pg_catalog.current_database()) \
                                 OR (d.classid = 'pg_catalog.pg_database'::regclass::oid \
                                     AND d.objid = (SELECT oid FROM pg_catalog.pg_database \
                                                    WHERE datname = pg_catalog.current_database()))) \
                          ORDER BY 1), \
                    ARRAY(SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) \
                          FROM pg_catalog.pg_shdepend d \
                          WHERE d.refclassid = 'pg_catalog.pg_authid'::regclass::oid \
                            AND d.refobjid = r.oid AND d.deptype = 'a' \
                            AND d.classid = pg_catalog.to_regclass('pg_catalog.pg_parameter_acl'::text)::oid \
                          ORDER BY 1) \
             FROM pg_catalog.pg_roles r WHERE r.rolname::text = ANY ($1::text[]) ORDER BY 1",
            &[&names],
        )
        .await
        .map_err(|e| DbError::new("cannot read the attributes of the levels' roles", Some(e)))?;
    for row in rows {
        let role: String = row.get(0);
        let mut wrong: Vec<String> = [
            (1, "is a superuser"),
            (2, "has CREATEROLE"),
            (3, "has CREATEDB"),
            (4, "has BYPASSRLS"),
            (5, "has REPLICATION"),
        ]
        .into_iter()
        .filter(|(i, _)| row.get::<_, bool>(*i))
        .map(|(_, what)| what.to_owned())
        .collect();
        let groups: Vec<String> = row.get(6);
        if !groups.is_empty() {
            wrong.push(format!("is a member of {}", groups.join(", ")));
        }
        let owned: Vec<String> = row.get(7);
        if !owned.is_empty() {
            wrong.push(format!("owns {}", listed(&owned)));
        }
        let parameters: Vec<String> = row.get(8);
        if !parameters.is_empty() {
            wrong.push(format!(
                "holds a privilege (SET or ALTER SYSTEM) on {}",
                listed(&parameters)
            ));
        }
        if !wrong.is_empty() {
            return Err(DbError::new(
                format!(
                    "the level role `{role}` exists already and {}: a level's role has no \
                     attribute, is a member of no role, owns nothing in this database (an \
                     owner has every right on what it owns; the database's owner may `SET \
                     ROLE pg_database_owner`) and holds no privilege on a parameter (`SET` of \
                     `session_replication_role` skips triggers and foreign keys, the audit \
                     trail's too); fix or drop it (or choose another prefix) and run again",
                    wrong.join(", ")
                ),
                None,
            ));
        }
    }
    Ok(())
}

/// At most eight of `names`, and how many more.
fn listed(names: &[String]) -> String {
    match names.len() {
        n if n > 8 => format!("{}, and {} more", names[..8].join(", "), n - 8),
        _ => names.join(", "),
    }
}

/// Refuses a framework table (`aac_tokens`, `aac_audit`, …) in `public` that the
/// connecting user (the tables' owner, as `migrate` runs) does not own: another role that
/// may create in `public` (its owner, the database's owner) could have made it before the
/// first `init`, which `CREATE TABLE IF NOT EXISTS` would keep, with its forged rows and
/// its own triggers, or dropped and made it again since.
async fn check_framework_tables(client: &tokio_postgres::Client) -> Result<(), DbError> {
    let names: Vec<String> = FRAMEWORK_TABLES.iter().map(|t| (*t).to_owned()).collect();
    let foreign = client
        .query(
            "SELECT c.relname::text, pg_catalog.pg_get_userbyid(c.relowner)::text \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'public'::name AND c.relname::text = ANY ($1::text[]) \
               AND c.relowner OPERATOR(pg_catalog.<>) \
                   (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user) \
             ORDER BY 1",
            &[&names],
        )
        .await
        .map_err(|e| DbError::new("cannot read the owners of the framework's tables", Some(e)))?;
    if let Some(row) = foreign.first() {
        let (table, owner): (String, String) = (row.get(0), row.get(1));
        let connected: String = client
            .query_one("SELECT current_user::text", &[])
            .await
            .map(|row| row.get(0))
            .unwrap_or_default();
        // Most often the URL names another user than the one that ran `init`: said
        // first, since dropping the table would lose the trail.
        return Err(DbError::new(
            format!(
                "the framework's table `{table}` is owned by `{owner}`, not by `{connected}`, \
                 the user this connection logged in as, which must be the tables' owner (the \
                 role that migrates). If `{owner}` made these tables (ran `init`), name it \
                 in the URL (`postgres://{owner}@…`), and do not drop anything. Otherwise \
                 its rows (tokens, the audit trail) and its triggers are that role's to \
                 forge: a database or schema `public` owned by a role you do not trust \
                 defeats the level model, as that role may create, drop or replace the \
                 framework's tables. Serve from a database whose owner, and `public`'s, you \
                 trust; drop this table (after checking its rows) and run again"
            ),
            None,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unusable_version;

    #[test]
    fn a_schema_version_is_usable_from_zero_to_the_last_known() {
        for current in 0..=4 {
            assert!(unusable_version("app", current, 4).is_none(), "{current}");
        }
        let newer = unusable_version("app", 5, 4).unwrap().to_string();
        assert!(newer.contains("at version 5, but this build knows versions up to 4"));
        // Read by `check_schema` (the commands that only read) as by the migrations.
        for current in [-1, i32::MIN] {
            let negative = unusable_version("app", current, 4).unwrap().to_string();
            assert!(
                negative.contains(&format!("`app` in this database is at version {current}")),
                "{negative}"
            );
        }
    }
}
