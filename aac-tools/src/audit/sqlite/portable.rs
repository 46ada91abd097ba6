//! The audit table's rows in a form another database can store: the columns with their
//! declared types (read from the one declaration in [`table`](super::table)), a record's
//! values as plain cells, the chain's hash ([`link_hash`]), and a copy of rows back into
//! an SQLite table, so that another backend's trail is verified and queried by exactly
//! the code that verifies and queries SQLite's.

use rusqlite::Connection;
use rusqlite::types::{ToSqlOutput, Value, ValueRef};

use super::row::{Values, link_hash};
use super::table::{AUDIT_COLUMNS, INSERT, MIRROR_MISSING, ensure_table, sql_error};
use crate::audit::{AuditError, AuditRecord};

/// One value of a row, as any SQL database stores it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    /// `NULL`.
    Null,
    /// An integer.
    Int(i64),
    /// Text.
    Text(String),
}

/// A column of the one declaration, as another database declares it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Declared {
    pub(crate) name: &'static str,
    /// An integer column (else text).
    pub(crate) integer: bool,
    /// `NOT NULL`.
    pub(crate) not_null: bool,
    /// Its `DEFAULT`, as SQL.
    pub(crate) default: Option<String>,
}

/// The columns of the one declaration, in table order.
pub(crate) fn declared_columns() -> Result<Vec<Declared>, AuditError> {
    let conn = Connection::open_in_memory().map_err(sql_error)?;
    ensure_table(&conn)?;
    let mut stmt = conn
        .prepare(
            "SELECT name, type, \"notnull\", dflt_value FROM pragma_table_info('aac_audit') \
             ORDER BY cid",
        )
        .map_err(sql_error)?;
    let declared: Vec<(String, String, bool, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .and_then(Iterator::collect)
        .map_err(sql_error)?;
    AUDIT_COLUMNS
        .iter()
        .map(|name| {
            let (_, ty, not_null, default) = declared
                .iter()
                .find(|(n, ..)| n == name)
                .ok_or_else(|| AuditError::new(format!("`aac_audit` declares no `{name}`")))?;
            Ok(Declared {
                name,
                integer: ty.eq_ignore_ascii_case("INTEGER"),
                not_null: *not_null,
                default: default.clone(),
            })
        })
        .collect()
}

/// The declared type of a column: `true` for an integer column, `false` for text.
pub(crate) fn integer_columns() -> Result<Vec<(&'static str, bool)>, AuditError> {
    Ok(declared_columns()?
        .into_iter()
        .map(|c| (c.name, c.integer))
        .collect())
}

/// A record made ready for a table: its cells (every column but `seq`, `prev_hash` and
/// `hash`, in table order), and the part of its hash that does not depend on its place.
#[derive(Debug, Clone)]
pub(crate) struct PortableRow {
    cells: Vec<Cell>,
    /// The cells stored after `prev_hash` and `hash` (`confirmed_by`), in table order.
    trailing: Vec<Cell>,
    tail: String,
}

/// A bound value as a cell.
fn to_cell(param: &dyn rusqlite::ToSql) -> Cell {
    match param.to_sql() {
        Ok(ToSqlOutput::Borrowed(v)) => cell(v),
        Ok(ToSqlOutput::Owned(v)) => cell((&v).into()),
        _ => Cell::Null,
    }
}

impl PortableRow {
    /// The record as it will be stored.
    pub(crate) fn from_record(record: AuditRecord) -> PortableRow {
        let values = Values::from_record(record);
        let tail = values.hash_tail();
        let cells = values.params().iter().map(|p| to_cell(*p)).collect();
        let trailing = values
            .trailing_params()
            .iter()
            .map(|p| to_cell(*p))
            .collect();
        PortableRow {
            cells,
            trailing,
            tail,
        }
    }

    /// The cells, `timestamp` to the last value column before `prev_hash`, in table order.
    pub(crate) fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// The cells stored after `prev_hash` and `hash`, in table order.
    pub(crate) fn trailing(&self) -> &[Cell] {
        &self.trailing
    }

    /// The row's hash at `seq` after `prev_hash`, as 64 lowercase hex digits.
    pub(crate) fn link(&self, prev_hash: &str, seq: i64) -> String {
        let hash = link_hash(prev_hash.as_bytes(), seq, &self.tail);
        String::from_utf8_lossy(&hash).into_owned()
    }

    /// The record this row was made from (a failed write hands it back).
    pub(crate) fn restore(&self) -> Option<AuditRecord> {
        Values::from_tail(&self.tail)?.into_record(0).ok()
    }

    /// How the record prints in a log line when it could not be written.
    pub(crate) fn describe(&self) -> String {
        Values::describe(&self.tail)
    }
}

fn cell(value: ValueRef<'_>) -> Cell {
    match value {
        ValueRef::Integer(i) => Cell::Int(i),
        ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Real(r) => Cell::Text(r.to_string()),
        ValueRef::Null | ValueRef::Blob(_) => Cell::Null,
    }
}

/// An in-memory SQLite `aac_audit` that rows of another backend are copied into, in
/// `seq` order, to verify and query them as SQLite's own.
pub(crate) struct Mirror {
    conn: Connection,
}

impl Mirror {
    /// An empty table.
    pub(crate) fn new() -> Result<Mirror, AuditError> {
        let conn = Connection::open_in_memory().map_err(sql_error)?;
        ensure_table(&conn)?;
        conn.execute_batch("BEGIN").map_err(sql_error)?;
        Ok(Mirror { conn })
    }

    /// Copy one row: every column of the table, in order.
    pub(crate) fn push(&mut self, row: Vec<Cell>) -> Result<(), AuditError> {
        let params: Vec<Value> = row
            .into_iter()
            .map(|c| match c {
                Cell::Null => Value::Null,
                Cell::Int(i) => Value::Integer(i),
                Cell::Text(t) => Value::Text(t),
            })
            .collect();
        self.conn
            .prepare_cached(&INSERT)
            .and_then(|mut stmt| stmt.execute(rusqlite::params_from_iter(params)))
            .map_err(sql_error)?;
        Ok(())
    }

    /// A trigger named `name` on the other backend's table, which the framework did not
    /// create: one of that name (doing nothing) on the copy, so that `verify_chain` names
    /// it among the foreign triggers.
    pub(crate) fn foreign_trigger(&self, name: &str) -> Result<(), AuditError> {
        // A name the copy's own triggers already have (`aac_audit_no_update` given to a
        // trigger of the other backend) is told apart.
        let taken: bool = self
            .conn
            .query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'trigger' AND name = ?1",
                [name],
                |r| r.get(0),
            )
            .map_err(sql_error)?;
        let name = if taken {
            format!("{name} (not the framework's)")
        } else {
            name.to_owned()
        };
        let quoted = name.replace('"', "\"\"");
        self.conn
            .execute_batch(&format!(
                "CREATE TRIGGER \"{quoted}\" AFTER INSERT ON aac_audit WHEN 0 BEGIN SELECT 1; END;"
            ))
            .map_err(sql_error)
    }

    /// The copied database lacks the append-only guard `name` (or it is not the
    /// framework's): `verify_chain` of the copy reports it missing.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn missing_trigger(&self, name: &str) -> Result<(), AuditError> {
        self.conn
            .execute_batch(&format!(
                "CREATE TEMP TABLE IF NOT EXISTS {MIRROR_MISSING} (name TEXT NOT NULL)"
            ))
            .map_err(sql_error)?;
        self.conn
            .execute(
                &format!("INSERT INTO temp.{MIRROR_MISSING} (name) VALUES (?1)"),
                [name],
            )
            .map(drop)
            .map_err(sql_error)
    }

    /// The copied table, for `verify_chain`, `AuditQuery` and the summaries.
    pub(crate) fn finish(self) -> Result<Connection, AuditError> {
        self.conn.execute_batch("COMMIT").map_err(sql_error)?;
        Ok(self.conn)
    }
}
