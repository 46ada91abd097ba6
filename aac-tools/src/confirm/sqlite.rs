//! The single-use ledger in SQLite: the table `aac_request_states` of the audit
//! database, so that a replayed `requestState` is refused by any replica that shares it.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::RequestStateLedger;
use crate::BoxFuture;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aac_request_states (
    nonce   TEXT    PRIMARY KEY,
    expires INTEGER NOT NULL
);";

/// The nonces of redeemed `requestState`s in a table of the audit database.
#[derive(Clone)]
pub struct SqliteLedger {
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteLedger")
    }
}

impl SqliteLedger {
    /// Open (and create if needed) the ledger's table in the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteLedger, String> {
        let path = path.as_ref();
        crate::sqlite::create_private(path)
            .map_err(|why| format!("cannot open the request-state ledger: {why}"))?;
        let conn = Connection::open(path).map_err(|e| {
            format!(
                "cannot open {} for the request-state ledger: {e}",
                path.display()
            )
        })?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .and_then(|()| conn.execute_batch(SCHEMA))
            .and_then(|()| crate::sqlite::seal_against_blob_writes(&conn, "aac_request_states"))
            .map_err(|e| format!("cannot create the request-state ledger: {e}"))?;
        crate::sqlite::refuse_foreign_framework_triggers(&conn)?;
        Ok(SqliteLedger {
            conn: Arc::new(Mutex::new(conn)),
        })
    }
}

impl RequestStateLedger for SqliteLedger {
    fn redeem<'a>(&'a self, nonce: &'a str, expires: i64) -> BoxFuture<'a, Result<bool, String>> {
        let conn = Arc::clone(&self.conn);
        let nonce = nonce.to_owned();
        Box::pin(async move {
            let work = move || {
                let conn = conn
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let now = super::unix_now();
                let inserted = conn.execute(
                    "INSERT OR IGNORE INTO aac_request_states (nonce, expires) VALUES (?1, ?2)",
                    rusqlite::params![nonce, expires],
                )?;
                // Expired states are refused before the ledger is asked: forget them,
                // once no replica's check could still pass (`KEEP_AFTER_EXPIRY`).
                conn.execute(
                    "DELETE FROM aac_request_states WHERE expires < ?1",
                    [now - super::ledger::KEEP_AFTER_EXPIRY],
                )?;
                Ok::<bool, rusqlite::Error>(inserted == 1)
            };
            let result = match tokio::runtime::Handle::try_current() {
                Ok(rt) => rt
                    .spawn_blocking(work)
                    .await
                    .map_err(|e| format!("the request-state ledger failed: {e}"))?,
                Err(_) => work(),
            };
            result.map_err(|e| format!("the request-state ledger failed: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A nonce is redeemed once, also through a second connection to the same file (a
    /// second replica).
    #[tokio::test]
    async fn a_nonce_is_redeemed_once_across_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        let a = SqliteLedger::open(&path).unwrap();
        let b = SqliteLedger::open(&path).unwrap();
        let later = super::super::unix_now() + 300;
        assert_eq!(a.redeem("n1", later).await, Ok(true));
        assert_eq!(b.redeem("n1", later).await, Ok(false));
        assert_eq!(a.redeem("n1", later).await, Ok(false));
        assert_eq!(b.redeem("n2", later).await, Ok(true));
    }
}
