//! The single-use ledger of 2026-07-28 `requestState` nonces on PostgreSQL: the table
//! `aac_request_states`, beside the audit trail, so that a replayed state is refused by
//! every replica of the database.

use tokio::sync::Mutex;
use tokio_postgres::Client;

use super::{CONNECT_TIMEOUT, Database, describe};
use crate::BoxFuture;
use crate::confirm::RequestStateLedger;

/// The table, created by the framework's migrations ([`Database::migrate`]).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aac_request_states (
    nonce   TEXT   PRIMARY KEY,
    expires BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS aac_request_states_expires ON aac_request_states (expires);";

/// The nonces of redeemed `requestState`s in `aac_request_states`, written as the audit
/// role (which may `SELECT`, `INSERT` and `DELETE` that table only). A nonce redeemed
/// through one replica is refused by every other.
pub struct PgLedger {
    config: tokio_postgres::Config,
    client: Mutex<Option<Client>>,
}

impl std::fmt::Debug for PgLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgLedger")
    }
}

impl PgLedger {
    /// The ledger of `db`, logged in as its audit role. Connects on first use, and again
    /// after a failure; an unreachable database refuses the state (fail closed).
    pub fn open(db: &Database) -> PgLedger {
        let mut config = db.owner_config().clone();
        config.user(db.roles().audit());
        config.connect_timeout(CONNECT_TIMEOUT);
        PgLedger::with_config(config)
    }

    /// A ledger logged in as `config` says.
    pub fn with_config(config: tokio_postgres::Config) -> PgLedger {
        PgLedger {
            config: super::pinned(config, false),
            client: Mutex::new(None),
        }
    }

    async fn redeem_once(&self, nonce: &str, expires: i64) -> Result<bool, String> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(Client::is_closed) {
            let (client, _) = super::connect(&self.config)
                .await
                .map_err(|why| format!("the request-state ledger: {why}"))?;
            *slot = Some(client);
        }
        let client = slot.as_ref().expect("connected above");
        let result = async {
            let inserted = client
                .execute(
                    "INSERT INTO aac_request_states (nonce, expires) VALUES ($1, $2)
                     ON CONFLICT (nonce) DO NOTHING",
                    &[&nonce, &expires],
                )
                .await?;
            // Expired states are refused before the ledger is asked: forget them, once no
            // replica's check could still pass (a nonce forgotten the second it expires
            // lets a replay checked a moment before through).
            client
                .execute(
                    "DELETE FROM aac_request_states WHERE expires < $1",
                    &[&(crate::confirm::unix_now() - crate::confirm::KEEP_AFTER_EXPIRY)],
                )
                .await?;
            Ok::<u64, tokio_postgres::Error>(inserted)
        }
        .await;
        match result {
            Ok(inserted) => Ok(inserted == 1),
            Err(err) => {
                *slot = None;
                Err(format!("the request-state ledger: {}", describe(&err)))
            }
        }
    }
}

impl RequestStateLedger for PgLedger {
    fn redeem<'a>(&'a self, nonce: &'a str, expires: i64) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(self.redeem_once(nonce, expires))
    }
}
