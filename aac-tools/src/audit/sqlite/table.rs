//! The table `aac_audit`: its schema, its columns (declared here once; the select and
//! insert statements are made from them), and its creation.

use std::sync::LazyLock;

use rusqlite::{Connection, OptionalExtension};

use crate::audit::AuditError;

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
    outcome         TEXT    NOT NULL CHECK (outcome = 'success' OR outcome = 'denied' OR outcome = 'error'),
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
    hash            TEXT    NOT NULL,
    confirmed_by    TEXT,
    kind            TEXT    NOT NULL DEFAULT 'tool'
);
"#;

/// The `CHECK` of the `outcome` column, for another database's declaration of the table
/// (a test holds it to the one in [`SCHEMA`]). Comparisons, not `outcome IN (…)`: SQLite
/// evaluates an `IN` list of more than two constants by building a temporary b-tree of
/// them, at every insert (a page allocated and zeroed, a cache made and freed: about a
/// sixth of a record's instructions).
#[cfg(any(feature = "postgres", test))]
pub(crate) const OUTCOME_CHECK: &str =
    "outcome = 'success' OR outcome = 'denied' OR outcome = 'error'";

/// The append-only triggers: each one's name and the statement that creates it, as
/// `sqlite_master` keeps it (SQLite drops the `IF NOT EXISTS` [`SCHEMA_EXTRAS`] adds).
const TRIGGERS: [(&str, &str); 3] = [
    (
        "aac_audit_no_update",
        "CREATE TRIGGER aac_audit_no_update BEFORE UPDATE ON aac_audit
BEGIN
    SELECT RAISE(ABORT, 'aac_audit is append-only: UPDATE of audit records is refused');
END",
    ),
    (
        "aac_audit_no_delete",
        "CREATE TRIGGER aac_audit_no_delete BEFORE DELETE ON aac_audit
BEGIN
    SELECT RAISE(ABORT, 'aac_audit is append-only: DELETE of audit records is refused');
END",
    ),
    // `INSERT OR REPLACE` of a record's `seq` deletes the old row without a `DELETE`
    // trigger (unless `recursive_triggers` is on): a record is only ever appended.
    (
        "aac_audit_no_rewrite",
        "CREATE TRIGGER aac_audit_no_rewrite BEFORE INSERT ON aac_audit
WHEN NEW.seq <= (SELECT max(seq) FROM aac_audit)
BEGIN
    SELECT RAISE(ABORT, 'aac_audit is append-only: a record is only appended, never written again');
END",
    ),
];

/// The index and the append-only triggers, created once the table is known to be ours.
static SCHEMA_EXTRAS: LazyLock<String> = LazyLock::new(|| {
    let mut sql =
        "CREATE INDEX IF NOT EXISTS aac_audit_timestamp ON aac_audit (timestamp);\n".to_owned();
    for (_, create) in TRIGGERS {
        sql.push_str(&create.replacen("CREATE TRIGGER", "CREATE TRIGGER IF NOT EXISTS", 1));
        sql.push_str(";\n");
    }
    sql
});

/// The columns of `aac_audit`, in order: the stable contract readers rely on.
pub const AUDIT_COLUMNS: [&str; 19] = [
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
    "confirmed_by",
    "kind",
];

/// Columns added after the first release, in order, with their declarations: a table
/// that lacks only some of them (at the end) gets them by `ALTER TABLE … ADD COLUMN`.
const ADDED_COLUMNS: &[(&str, &str)] = &[
    ("confirmed_by", "TEXT"),
    ("kind", "TEXT NOT NULL DEFAULT 'tool'"),
];

/// `"seq", "timestamp", …, "hash"`: every column, quoted, in table order.
pub(crate) static SELECT_COLUMNS: LazyLock<String> = LazyLock::new(|| {
    AUDIT_COLUMNS
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ")
});

/// The insert of one row: every column, in table order.
pub(super) static INSERT: LazyLock<String> = LazyLock::new(|| {
    let placeholders: Vec<String> = (1..=AUDIT_COLUMNS.len()).map(|i| format!("?{i}")).collect();
    format!(
        "INSERT INTO {AUDIT_TABLE} ({}) VALUES ({})",
        *SELECT_COLUMNS,
        placeholders.join(", ")
    )
});

/// Create `aac_audit` (with its index and append-only triggers) if it does not exist,
/// and check that an existing one has the expected columns.
///
/// [`SqliteSink`](super::SqliteSink) does this when it opens; call it yourself when a reader may run
/// before the sink ever opened the file (a dashboard on a fresh database).
pub fn ensure_table(conn: &Connection) -> Result<(), AuditError> {
    // One step: a second process opening an older trail at once waits for it.
    crate::sqlite::immediately(conn, sql_error, || ensure_table_now(conn))
}

fn ensure_table_now(conn: &Connection) -> Result<(), AuditError> {
    conn.execute_batch(SCHEMA)
        .map_err(|e| AuditError::new(format!("cannot create the `aac_audit` table: {e}")))?;
    let mut columns = table_columns(conn)?;
    // An older table: add the columns it lacks (all of them later additions, at the end).
    let missing = older_table_lacks(&columns);
    for name in missing {
        let (_, declaration) = ADDED_COLUMNS
            .iter()
            .find(|(n, _)| n == name)
            .expect("an added column");
        conn.execute_batch(&format!(
            "ALTER TABLE {AUDIT_TABLE} ADD COLUMN \"{name}\" {declaration}"
        ))
        .map_err(|e| AuditError::new(format!("cannot add the column `{name}`: {e}")))?;
        columns.push((*name).to_owned());
    }
    if columns != AUDIT_COLUMNS {
        return Err(other_columns(&columns));
    }
    conn.execute_batch(&SCHEMA_EXTRAS)
        .and_then(|()| remake_altered_triggers(conn))
        .and_then(|()| crate::sqlite::seal_against_blob_writes(conn, AUDIT_TABLE))
        .map_err(|e| {
            AuditError::new(format!(
                "cannot create the `aac_audit` indexes and triggers: {e}"
            ))
        })?;
    crate::sqlite::refuse_foreign_framework_triggers(conn).map_err(AuditError::new)
}

/// The names of the append-only triggers the sink makes.
pub(crate) fn trigger_names() -> impl Iterator<Item = &'static str> {
    TRIGGERS.iter().map(|(name, _)| *name)
}

/// An append-only trigger whose text is not the one the sink makes is made again: the
/// schema table's `sql` can be rewritten in place through incremental blob I/O (SQLite
/// lets nothing index it), and a trigger of the same name, loaded at the next open, could
/// then do anything on every insert of the sink's own (which runs with no authorizer).
fn remake_altered_triggers(conn: &Connection) -> Result<(), rusqlite::Error> {
    for (name, create) in TRIGGERS {
        let stored: Option<String> = conn
            .query_row(
                "SELECT sql FROM main.sqlite_master WHERE type = 'trigger' AND name = ?1",
                [name],
                |r| r.get(0),
            )
            .optional()?;
        // Compared word by word, as `--verify` does: a trail whose trigger differs only by
        // white space (made by an earlier version) is not remade.
        let words = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
        if stored.as_deref().map(words) != Some(words(create)) {
            tracing::warn!(
                trigger = name,
                "an append-only trigger of the audit trail was not the sink's own; made again"
            );
            conn.execute_batch(&format!("DROP TRIGGER IF EXISTS main.{name}; {create}"))?;
        }
    }
    Ok(())
}

/// The columns of `aac_audit`, in order; none when there is no such table.
fn table_columns(conn: &Connection) -> Result<Vec<String>, AuditError> {
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info('aac_audit') ORDER BY cid")
        .map_err(sql_error)?;
    stmt.query_map([], |r| r.get(0))
        .and_then(Iterator::collect)
        .map_err(sql_error)
}

/// The columns an older table lacks, if `columns` are those of an older release's table
/// (the current columns but some of the later additions at the end); none otherwise.
fn older_table_lacks(columns: &[String]) -> &'static [&'static str] {
    let missing = AUDIT_COLUMNS.get(columns.len()..).unwrap_or_default();
    let older = columns.len() < AUDIT_COLUMNS.len()
        && columns == &AUDIT_COLUMNS[..columns.len()]
        && missing
            .iter()
            .all(|m| ADDED_COLUMNS.iter().any(|(name, _)| name == m));
    if older { missing } else { &[] }
}

pub(crate) fn other_columns(columns: &[String]) -> AuditError {
    // The names are whoever made the table's (an edited file): escaped as a table cell is.
    let columns: Vec<_> = columns
        .iter()
        .map(|c| crate::audit::format::printable(c))
        .collect();
    AuditError::new(format!(
        "the existing `aac_audit` table has columns ({}) but this version of aac-tools \
         expects ({}); move it aside or migrate it",
        columns.join(", "),
        AUDIT_COLUMNS.join(", ")
    ))
}

/// Why a reader finds no `aac_audit` (on SQLite or PostgreSQL).
pub(crate) const MISSING_TABLE: &str = "no `aac_audit` table, so no audit trail to read: every \
     database the command line creates, and every one a server ran on, has it, so it was \
     dropped or renamed (ALTER TABLE … RENAME TO …)";

/// Check, without changing anything, that `aac_audit` is there with the columns this
/// version reads: for readers, which must neither create the table nor migrate it. A
/// missing table is an error that says what it may mean.
pub(crate) fn check_table(conn: &Connection) -> Result<(), AuditError> {
    let columns = table_columns(conn)?;
    if columns.is_empty() {
        return Err(AuditError::new(MISSING_TABLE));
    }
    if columns == AUDIT_COLUMNS {
        return Ok(());
    }
    let missing = older_table_lacks(&columns);
    if !missing.is_empty() {
        return Err(AuditError::new(format!(
            "the `aac_audit` table is from an older aac-tools (it lacks the columns {}, \
             which the audit sink adds when the server next starts)",
            missing.join(", ")
        )));
    }
    Err(other_columns(&columns))
}

/// The temporary table of an in-memory copy of another database's trail that names the
/// append-only guards that database lacks (see `Mirror::missing_trigger`).
pub(crate) const MIRROR_MISSING: &str = "aac_mirror_missing_triggers";

/// The append-only triggers that are missing, or that are not the statements this
/// version creates (a trigger of the same name that refuses nothing), in [`TRIGGERS`]
/// order.
pub(crate) fn missing_triggers(conn: &Connection) -> Result<Vec<String>, AuditError> {
    let words = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut missing = Vec::new();
    for (name, create) in TRIGGERS {
        let found: Option<String> = conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?1 \
                 AND tbl_name = ?2 COLLATE NOCASE",
                [name, AUDIT_TABLE],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql_error)?;
        if found.as_deref().map(words) != Some(words(create)) {
            missing.push(name.to_owned());
        }
    }
    // A copy of another database's trail says which of that database's guards it lacks.
    let mirrored: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_temp_master WHERE type = 'table' AND name = ?1",
            [MIRROR_MISSING],
            |r| r.get(0),
        )
        .map_err(sql_error)?;
    if mirrored {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT name FROM temp.{MIRROR_MISSING} ORDER BY name"
            ))
            .map_err(sql_error)?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(sql_error)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql_error)?;
        missing.extend(names);
    }
    Ok(missing)
}

/// The triggers on `aac_audit` the sink did not create: one could drop records as they
/// are inserted (`BEFORE INSERT … RAISE(IGNORE)`), so that a call runs unrecorded while
/// the chain, linking each record to the last one stored, still verifies.
pub(crate) fn foreign_triggers(conn: &Connection) -> Result<Vec<String>, AuditError> {
    let mut stmt = conn
        .prepare(
            // A table's name is matched without regard to ASCII case, as SQLite does: a
            // trigger created `ON AAC_AUDIT` fires on `aac_audit`.
            "SELECT name FROM sqlite_master WHERE type = 'trigger' \
             AND tbl_name = ?1 COLLATE NOCASE ORDER BY name",
        )
        .map_err(sql_error)?;
    let names = stmt
        .query_map([AUDIT_TABLE], |r| r.get::<_, String>(0))
        .map_err(sql_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_error)?;
    Ok(names
        .into_iter()
        .filter(|name| !TRIGGERS.iter().any(|(ours, _)| ours == name))
        .collect())
}

pub(crate) fn sql_error(err: rusqlite::Error) -> AuditError {
    AuditError::new(format!("audit database error: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record's insert builds no temporary table: SQLite evaluates an `IN` list of
    /// more than two constants (in a `CHECK`, say) by building one at every insert.
    #[test]
    fn an_insert_builds_no_temporary_table() {
        let conn = Connection::open_in_memory().unwrap();
        ensure_table(&conn).unwrap();
        let mut explain = conn.prepare(&format!("EXPLAIN {}", *INSERT)).unwrap();
        let opcodes: Vec<String> = explain
            .query_map(
                rusqlite::params_from_iter(std::iter::repeat_n(
                    rusqlite::types::Null,
                    AUDIT_COLUMNS.len(),
                )),
                |r| r.get::<_, String>(1),
            )
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(opcodes.iter().any(|op| op == "Insert"), "{opcodes:?}");
        assert!(
            !opcodes.iter().any(|op| op == "OpenEphemeral"),
            "{opcodes:?}"
        );
    }

    #[test]
    fn the_outcome_check_is_the_one_the_table_declares() {
        assert!(SCHEMA.contains(&format!(
            "outcome         TEXT    NOT NULL CHECK ({OUTCOME_CHECK}),"
        )));
    }
}
