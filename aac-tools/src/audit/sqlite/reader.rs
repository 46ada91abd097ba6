//! Reading the table back: read-only connections, and rows as records.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde::{Deserialize, Serialize};

use super::table::sql_error;
use crate::audit::{AuditError, AuditRecord};

/// Open the audit database at `path` read-only, for queries and verification.
pub fn open_reader(path: impl AsRef<Path>) -> Result<Connection, AuditError> {
    let path = path.as_ref();
    crate::sqlite::refuse_special_path(path)
        .map_err(|why| AuditError::new(format!("cannot open the audit database: {why}")))?;
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
    /// The hash of the previous record ([`GENESIS_HASH`](super::GENESIS_HASH) for the first).
    pub prev_hash: String,
    /// This record's hash, chained to `prev_hash`.
    pub hash: String,
}
