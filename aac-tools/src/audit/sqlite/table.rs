//! The table `aac_audit`: its schema, its columns (declared here once; the select and
//! insert statements are made from them), and its creation.

use std::sync::LazyLock;

use rusqlite::Connection;

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
    hash            TEXT    NOT NULL,
    confirmed_by    TEXT,
    kind            TEXT    NOT NULL DEFAULT 'tool'
);
"#;

/// The `CHECK` of the `outcome` column, for another database's declaration of the table
/// (a test holds it to the one in [`SCHEMA`]).
#[cfg(any(feature = "postgres", test))]
pub(crate) const OUTCOME_CHECK: &str = "outcome IN ('success', 'denied', 'error')";

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
    conn.execute_batch(SCHEMA)
        .map_err(|e| AuditError::new(format!("cannot create the `aac_audit` table: {e}")))?;
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info('aac_audit') ORDER BY cid")
        .map_err(sql_error)?;
    let mut columns: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(Iterator::collect)
        .map_err(sql_error)?;
    drop(stmt);
    // An older table: add the columns it lacks (all of them later additions, at the end).
    let missing = AUDIT_COLUMNS.get(columns.len()..).unwrap_or_default();
    if columns.len() < AUDIT_COLUMNS.len()
        && columns == AUDIT_COLUMNS[..columns.len()]
        && missing
            .iter()
            .all(|m| ADDED_COLUMNS.iter().any(|(name, _)| name == m))
    {
        for name in missing {
            let (_, declaration) = ADDED_COLUMNS
                .iter()
                .find(|(n, _)| n == name)
                .expect("checked above");
            conn.execute_batch(&format!(
                "ALTER TABLE {AUDIT_TABLE} ADD COLUMN \"{name}\" {declaration}"
            ))
            .map_err(|e| AuditError::new(format!("cannot add the column `{name}`: {e}")))?;
            columns.push((*name).to_owned());
        }
    }
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

pub(crate) fn sql_error(err: rusqlite::Error) -> AuditError {
    AuditError::new(format!("audit database error: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outcome_check_is_the_one_the_table_declares() {
        assert!(SCHEMA.contains(&format!(
            "outcome         TEXT    NOT NULL CHECK ({OUTCOME_CHECK}),"
        )));
    }
}
