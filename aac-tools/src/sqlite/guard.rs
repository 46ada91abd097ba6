//! The run-time defence of the `Write` level: an SQLite authorizer on the writer
//! connection that refuses what only the `Delete` level may do.
//!
//! The authorizer runs when a statement is prepared. Installing or removing it expires
//! every prepared statement of the connection (`sqlite3_set_authorizer` does), so a
//! statement prepared (and cached) by a `Delete`-level transaction is prepared again,
//! and refused, when a `Write`-level transaction runs it. To keep the per-call cost to
//! nothing in the common case, the writer remembers which rules are installed and only
//! changes them when the level of the transaction changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};

/// Pragmas that take an argument only to name what they read.
const READING_PRAGMAS: &[&str] = &[
    "foreign_key_check",
    "foreign_key_list",
    "index_info",
    "index_list",
    "index_xinfo",
    "integrity_check",
    "quick_check",
    "table_info",
    "table_list",
    "table_xinfo",
];

/// SQLite's names of the schema table.
const SCHEMA_TABLES: &[&str] = &[
    "sqlite_master",
    "sqlite_schema",
    "sqlite_temp_master",
    "sqlite_temp_schema",
];

/// The prefix of the framework's own tables (`aac_tokens`, `aac_audit`…), which share
/// the file with the application's data: no tool writes them, at any level, nor reads
/// [`SECRET_TABLES`].
const FRAMEWORK_PREFIX: &str = "aac_";

/// The framework's tables no tool reads either: tokens (their subjects, scopes, hashes)
/// and the confirmation ledger.
const SECRET_TABLES: &[&str] = &["aac_tokens", "aac_request_states"];

/// Whether `table` is one of the framework's own (its name, in any case).
fn is_framework_table(table: &str) -> bool {
    table
        .get(..FRAMEWORK_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(FRAMEWORK_PREFIX))
}

/// What a tool's statement does to the framework's tables, described, if anything: at
/// every level, no write, no schema change, no reading of [`SECRET_TABLES`]. (Reading the
/// audit trail is allowed: an application may count its own records, as the reference
/// server's dashboard does.)
fn framework_refusal(action: &AuthAction<'_>) -> Option<String> {
    use AuthAction as A;
    let (what, table) = match *action {
        A::Read { table_name, .. } => {
            let secret = SECRET_TABLES
                .iter()
                .any(|t| t.eq_ignore_ascii_case(table_name));
            return secret.then(|| format!("reading {table_name}, the framework's table"));
        }
        A::Insert { table_name } => ("INSERT INTO", table_name),
        A::Update { table_name, .. } => ("UPDATE", table_name),
        A::Delete { table_name } => ("DELETE FROM", table_name),
        A::DropTable { table_name } | A::DropTempTable { table_name } => ("DROP TABLE", table_name),
        A::AlterTable { table_name, .. } => ("ALTER TABLE", table_name),
        // Nor a table or view of the framework's name (a temporary one shadows the real
        // one for the framework's own statements on the writer connection).
        A::CreateTable { table_name }
        | A::CreateTempTable { table_name }
        | A::CreateVtable { table_name, .. } => ("CREATE TABLE", table_name),
        A::CreateView { view_name } | A::CreateTempView { view_name } => ("CREATE VIEW", view_name),
        A::CreateIndex { table_name, .. }
        | A::CreateTempIndex { table_name, .. }
        | A::DropIndex { table_name, .. }
        | A::DropTempIndex { table_name, .. } => ("an index of", table_name),
        A::CreateTrigger { table_name, .. }
        | A::CreateTempTrigger { table_name, .. }
        | A::DropTrigger { table_name, .. }
        | A::DropTempTrigger { table_name, .. } => ("a trigger of", table_name),
        _ => return None,
    };
    is_framework_table(table).then(|| format!("{what} {table}, the framework's table"))
}

/// What the schema table says of the framework's tables (their indexes and triggers
/// too), as read on `conn` now: the framework's own read, made while no tool's rules
/// refuse it (the schema table is no framework table).
pub(super) fn framework_schema(
    conn: &Connection,
) -> Result<Vec<[Option<String>; 4]>, rusqlite::Error> {
    // A trigger or view of an application's table that names one of them (a trigger that
    // writes `aac_tokens` fires on the framework's own set-up code too) counts as well.
    let mut stmt = conn.prepare_cached(
        "SELECT type, name, tbl_name, sql FROM main.sqlite_master
         WHERE lower(substr(name, 1, 4)) = 'aac_' OR lower(substr(tbl_name, 1, 4)) = 'aac_'
            OR instr(lower(sql), 'aac_') > 0
         ORDER BY type, name",
    )?;
    let rows = stmt.query_map([], |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]))?;
    rows.collect()
}

/// The rules installed on the writer connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rules {
    /// No authorizer: set-up code outside tools.
    Open,
    /// The `Delete` level: anything but the framework's tables and what would outlive
    /// the call on the connection (settings, attachments, temporary objects).
    NoFramework,
    /// The `Write` level: no `DELETE`, no `DROP`, no schema change, no `ATTACH`, no
    /// pragma that changes a setting, nothing of the framework's tables.
    NoDelete,
}

/// What a level's rules refused.
#[derive(Debug)]
pub(super) enum Refused {
    /// An action the level does not allow.
    Action(String),
    /// An action on the framework's own tables, which no level allows.
    Framework(String),
}

/// What an authorizer refused, and (the `Write` level) a change of the schema table that
/// may yet be the first step of a `DROP` or `CREATE` (refused under its own name) or may
/// be a direct edit (with `writable_schema` turned on through the C API): refused at the
/// end of the transaction unless a `DROP` or `CREATE` followed it.
#[derive(Default)]
struct Verdict {
    refused: Option<Refused>,
    schema_edit: Option<String>,
}

type Slot = Arc<Mutex<Verdict>>;

fn take(slot: &Slot) -> Option<Refused> {
    let mut verdict = slot.lock().unwrap_or_else(|e| e.into_inner());
    let schema_edit = verdict.schema_edit.take().map(Refused::Action);
    verdict.refused.take().or(schema_edit)
}

/// Keep `refused` (the first refusal of the transaction wins) and deny the action.
fn deny(slot: &Slot, refused: Refused) -> Authorization {
    let mut verdict = slot.lock().unwrap_or_else(|e| e.into_inner());
    // A `DROP` or `CREATE` is refused under its own name.
    verdict.schema_edit = None;
    verdict.refused.get_or_insert(refused);
    Authorization::Deny
}

/// The verdict of a tool's statement on the framework's tables, if it is refused.
fn refuse_framework(slot: &Slot, action: &AuthAction<'_>) -> Option<Authorization> {
    Some(deny(slot, Refused::Framework(framework_refusal(action)?)))
}

/// A reader connection of the pool, with its authorizer's verdicts.
pub(super) struct Reader {
    pub(super) conn: Connection,
    refused: Slot,
    /// Set while a tool's closure runs: the framework's secret tables are not read then
    /// (the framework reads tokens on the same connections).
    in_tool: Arc<AtomicBool>,
}

impl Reader {
    /// `conn`, configured, with the `Read` level's authorizer: reads, and nothing else.
    /// (The connection is opened read-only, with `query_only`, but both stop only writes
    /// to the file: a tool could still turn `query_only` off and create a temporary view
    /// that later calls on the same pooled connection would read, or change a setting
    /// that changes what they read.)
    pub(super) fn new(mut conn: Connection) -> Result<Reader, rusqlite::Error> {
        let refused: Slot = Arc::default();
        let in_tool = Arc::new(AtomicBool::new(false));
        let (slot, running) = (Arc::clone(&refused), Arc::clone(&in_tool));
        conn.authorizer(Some(move |ctx: AuthContext<'_>| {
            if running.load(Ordering::Acquire)
                && let Some(denied) = refuse_framework(&slot, &ctx.action)
            {
                return denied;
            }
            match read_refusal(&ctx.action) {
                None => Authorization::Allow,
                Some(what) => deny(&slot, Refused::Action(what)),
            }
        }))?;
        Ok(Reader {
            conn,
            refused,
            in_tool,
        })
    }

    /// While the guard lives, a tool's closure runs: the framework's secret tables are
    /// refused to it.
    pub(super) fn tool_runs(&self) -> ToolRuns {
        self.in_tool.store(true, Ordering::Release);
        ToolRuns(Arc::clone(&self.in_tool))
    }

    /// What the rules refused since the last call, if anything.
    pub(super) fn take_refused(&self) -> Option<Refused> {
        take(&self.refused)
    }
}

/// [`Writer::tool_runs`]: until dropped (however the closure ends, a panic included).
pub(super) struct ToolRuns(Arc<AtomicBool>);

impl Drop for ToolRuns {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// What the `Read` level refuses, described, or `None` if it only reads.
fn read_refusal(action: &AuthAction<'_>) -> Option<String> {
    use AuthAction as A;
    match *action {
        A::Read { .. }
        | A::Select
        | A::Function { .. }
        | A::Transaction { .. }
        | A::Savepoint { .. }
        | A::Recursive
        | A::Pragma {
            pragma_value: None, ..
        } => None,
        A::Pragma {
            pragma_name,
            pragma_value: Some(_),
        } if READING_PRAGMAS.contains(&pragma_name.to_ascii_lowercase().as_str()) => None,
        A::Insert { table_name } => Some(format!("INSERT INTO {table_name}")),
        A::Update { table_name, .. } => Some(format!("UPDATE {table_name}")),
        A::Delete { table_name } => Some(format!("DELETE FROM {table_name}")),
        ref other => Some(refusal(other).unwrap_or_else(|| format!("{other:?}"))),
    }
}

/// The writer connection, with the rules installed on it and what they last refused.
pub(super) struct Writer {
    pub(super) conn: Connection,
    /// `None` when unknown (set-up code had the connection and may have changed it).
    installed: Option<Rules>,
    refused: Slot,
    /// Set while a tool's closure runs inside the framework's transaction: a commit then
    /// is the tool's own (`COMMIT`, or a statement run in autocommit after its own
    /// `ROLLBACK`), and is turned into a rollback.
    in_tool: Arc<AtomicBool>,
    /// The virtual tables of the database, for the `Write` level.
    virtual_tables: Arc<Mutex<VirtualTables>>,
}

/// The virtual tables (FTS5, FTS4, R-tree…), as of a version of the schema. Their modules
/// keep their rows in shadow tables and delete some of them on an insert, an update or a
/// merge the module starts on its own (FTS5's automerge, after enough inserts): at the
/// `Write` level a change of one is refused every time, not only once a merge deletes
/// (a tool that passed its tests with a few rows would fail for good later), and the
/// module's own deletes could not be told from a tool's.
#[derive(Default)]
struct VirtualTables {
    version: Option<i64>,
    names: Vec<String>,
}

impl VirtualTables {
    fn contains(tables: &Mutex<VirtualTables>, table: &str) -> bool {
        let tables = tables.lock().unwrap_or_else(|e| e.into_inner());
        tables.names.iter().any(|t| t.eq_ignore_ascii_case(table))
    }
}

impl Writer {
    pub(super) fn new(mut conn: Connection) -> Result<Writer, rusqlite::Error> {
        let refused: Slot = Arc::default();
        let in_tool = Arc::new(AtomicBool::new(false));
        let (slot, running) = (Arc::clone(&refused), Arc::clone(&in_tool));
        // At every level: the transaction is the framework's, which commits it once the
        // tool is done and its checks passed (no refusal, the call not abandoned), and
        // rolls it back when the tool fails. A tool that commits it itself would keep
        // its writes whatever the call's end; the commit is rolled back instead, and the
        // call fails.
        conn.commit_hook(Some(move || {
            if !running.load(Ordering::Acquire) {
                return false;
            }
            let mut verdict = slot.lock().unwrap_or_else(|e| e.into_inner());
            verdict.refused.get_or_insert_with(|| {
                Refused::Action("COMMIT (the transaction is the framework's)".to_owned())
            });
            true
        }))?;
        Ok(Writer {
            conn,
            installed: None,
            refused,
            in_tool,
            virtual_tables: Arc::default(),
        })
    }

    /// Learn the virtual tables again if the schema changed since they were last read (one
    /// cached `PRAGMA schema_version` otherwise). Before a `Write` transaction.
    pub(super) fn know_virtual_tables(&self) -> Result<(), rusqlite::Error> {
        let version: i64 = self
            .conn
            .prepare_cached("PRAGMA main.schema_version")?
            .query_row([], |r| r.get(0))?;
        let known = self
            .virtual_tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .version;
        if known == Some(version) {
            return Ok(());
        }
        // Read without the lock: the authorizer takes it while this is prepared.
        let names = self
            .conn
            .prepare_cached("SELECT name FROM pragma_table_list WHERE type = 'virtual'")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        *self
            .virtual_tables
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = VirtualTables {
            version: Some(version),
            names,
        };
        Ok(())
    }

    /// While the guard lives, a tool's closure runs: a commit is refused (rolled back).
    pub(super) fn tool_runs(&self) -> ToolRuns {
        self.in_tool.store(true, Ordering::Release);
        ToolRuns(Arc::clone(&self.in_tool))
    }

    /// Install `rules`, unless they are installed already.
    pub(super) fn ensure(&mut self, rules: Rules) -> Result<(), rusqlite::Error> {
        if self.installed == Some(rules) {
            return Ok(());
        }
        match rules {
            Rules::Open => self
                .conn
                .authorizer(None::<fn(AuthContext<'_>) -> Authorization>)?,
            Rules::NoFramework => {
                let refused = Arc::clone(&self.refused);
                self.conn.authorizer(Some(move |ctx: AuthContext<'_>| {
                    if let Some(denied) = refuse_framework(&refused, &ctx.action) {
                        return denied;
                    }
                    match connection_refusal(&ctx.action) {
                        None => Authorization::Allow,
                        Some(what) => deny(&refused, Refused::Action(what)),
                    }
                }))?
            }
            Rules::NoDelete => {
                let refused = Arc::clone(&self.refused);
                let virtual_tables = Arc::clone(&self.virtual_tables);
                self.conn.authorizer(Some(move |ctx: AuthContext<'_>| {
                    if let Some(denied) = refuse_framework(&refused, &ctx.action) {
                        return denied;
                    }
                    if let Some(edit) = schema_edit(&ctx.action) {
                        // A `DROP` or `CREATE` asks this first; a direct edit, only this.
                        let mut verdict = refused.lock().unwrap_or_else(|e| e.into_inner());
                        verdict.schema_edit.get_or_insert(edit);
                        return Authorization::Allow;
                    }
                    let changed_virtual = match ctx.action {
                        AuthAction::Insert { table_name }
                        | AuthAction::Update { table_name, .. }
                            if VirtualTables::contains(&virtual_tables, table_name) =>
                        {
                            Some(format!(
                                "a change of the virtual table {table_name} (its module deletes \
                                 rows of its own tables)"
                            ))
                        }
                        _ => None,
                    };
                    match (
                        changed_virtual.or_else(|| refusal(&ctx.action)),
                        ctx.accessor,
                    ) {
                        (None, _) => Authorization::Allow,
                        // Name the trigger: the tool's statement did not say it.
                        (Some(what), Some(trigger)) => deny(
                            &refused,
                            Refused::Action(format!(
                                "{what}, by the trigger or view `{trigger}` its statement \
                                 fires"
                            )),
                        ),
                        (Some(what), None) => deny(&refused, Refused::Action(what)),
                    }
                }))?
            }
        }
        self.installed = Some(rules);
        Ok(())
    }

    /// Set-up code is about to have the connection: no rules, and after it, unknown.
    pub(super) fn open_for_setup(&mut self) -> Result<(), rusqlite::Error> {
        self.ensure(Rules::Open)?;
        self.installed = None;
        Ok(())
    }

    /// What the rules refused since the last call, if anything.
    pub(super) fn take_refused(&self) -> Option<Refused> {
        take(&self.refused)
    }
}

/// An insert into, delete from or update of the schema table, described.
fn schema_edit(action: &AuthAction<'_>) -> Option<String> {
    use AuthAction as A;
    match *action {
        A::Insert { table_name } if SCHEMA_TABLES.contains(&table_name) => {
            Some(format!("INSERT INTO {table_name}"))
        }
        A::Delete { table_name } if SCHEMA_TABLES.contains(&table_name) => {
            Some(format!("DELETE FROM {table_name}"))
        }
        A::Update { table_name, .. } if SCHEMA_TABLES.contains(&table_name) => {
            Some(format!("UPDATE {table_name}"))
        }
        _ => None,
    }
}

/// What would stay on the shared writer connection for every later call, refused at the
/// `Delete` level too: a pragma that sets a value (`ignore_check_constraints`,
/// `query_only`, `case_sensitive_like`, `writable_schema`…; all but `defer_foreign_keys`,
/// which ends with the transaction, and the pragmas that only name what they read), an
/// attached database (the file itself attached again locks every later write out), and
/// any temporary table, view, index or trigger (a temporary table renamed `aac_tokens`
/// shadows the real one for the token store; a temporary trigger fires on set-up code).
fn connection_refusal(action: &AuthAction<'_>) -> Option<String> {
    use AuthAction as A;
    match *action {
        A::Pragma {
            pragma_name,
            pragma_value: Some(value),
        } => {
            let name = pragma_name.to_ascii_lowercase();
            (name != "defer_foreign_keys" && !READING_PRAGMAS.contains(&name.as_str()))
                .then(|| format!("PRAGMA {pragma_name} = {value}"))
        }
        A::Attach { .. } => Some("ATTACH".to_owned()),
        A::Detach { database_name } => Some(format!("DETACH {database_name}")),
        A::CreateTempTable { table_name } => Some(format!("CREATE TEMP TABLE {table_name}")),
        A::CreateTempView { view_name } => Some(format!("CREATE TEMP VIEW {view_name}")),
        A::CreateTempIndex { index_name, .. } => Some(format!("CREATE TEMP INDEX {index_name}")),
        A::CreateTempTrigger { trigger_name, .. } => {
            Some(format!("CREATE TEMP TRIGGER {trigger_name}"))
        }
        _ => None,
    }
}

/// What the `Write` level refuses, described for the error, or `None` if allowed.
fn refusal(action: &AuthAction<'_>) -> Option<String> {
    use AuthAction as A;
    let what = match *action {
        // `DROP …` asks to delete from the schema table first, then to drop: let the
        // second question refuse it, under its own name. A `DELETE` from the schema table
        // itself fails anyway without `writable_schema`, a pragma refused below.
        A::Delete { table_name } if SCHEMA_TABLES.contains(&table_name) => return None,
        A::Delete { table_name } => format!("DELETE FROM {table_name}"),
        A::DropTable { table_name } | A::DropTempTable { table_name } => {
            format!("DROP TABLE {table_name}")
        }
        A::DropIndex { index_name, .. } | A::DropTempIndex { index_name, .. } => {
            format!("DROP INDEX {index_name}")
        }
        A::DropTrigger { trigger_name, .. } | A::DropTempTrigger { trigger_name, .. } => {
            format!("DROP TRIGGER {trigger_name}")
        }
        A::DropView { view_name } | A::DropTempView { view_name } => {
            format!("DROP VIEW {view_name}")
        }
        A::DropVtable { table_name, .. } => format!("DROP TABLE {table_name}"),
        A::CreateTable { table_name } | A::CreateTempTable { table_name } => {
            format!("CREATE TABLE {table_name}")
        }
        A::CreateIndex { index_name, .. } | A::CreateTempIndex { index_name, .. } => {
            format!("CREATE INDEX {index_name}")
        }
        A::CreateTrigger { trigger_name, .. } | A::CreateTempTrigger { trigger_name, .. } => {
            format!("CREATE TRIGGER {trigger_name}")
        }
        A::CreateView { view_name } | A::CreateTempView { view_name } => {
            format!("CREATE VIEW {view_name}")
        }
        A::CreateVtable { table_name, .. } => format!("CREATE VIRTUAL TABLE {table_name}"),
        A::AlterTable { table_name, .. } => format!("ALTER TABLE {table_name}"),
        A::Attach { .. } => "ATTACH".to_owned(),
        A::Detach { database_name } => format!("DETACH {database_name}"),
        A::Pragma {
            pragma_name,
            pragma_value: Some(value),
        } if !READING_PRAGMAS.contains(&pragma_name.to_ascii_lowercase().as_str()) => {
            format!("PRAGMA {pragma_name} = {value}")
        }
        A::Unknown { code, .. } => format!("an action SQLite numbers {code}"),
        _ => return None,
    };
    Some(what)
}
