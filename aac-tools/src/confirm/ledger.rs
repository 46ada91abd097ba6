//! The single-use ledger of `requestState` nonces: a state is honoured once, whichever
//! replica it comes back to, when the ledger is shared (the audit database).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::BoxFuture;

/// Where the nonces of redeemed `requestState`s are kept, so that each is honoured once.
///
/// [`SqliteLedger`](super::SqliteLedger) keeps them in a table of the audit database (the
/// same store as the trail); [`MemoryLedger`] in the process (one replica only).
pub trait RequestStateLedger: Send + Sync + 'static {
    /// Mark `nonce` (valid until `expires`, seconds since the epoch) as used: `Ok(true)`
    /// the first time, `Ok(false)` if it was used before.
    fn redeem<'a>(&'a self, nonce: &'a str, expires: i64) -> BoxFuture<'a, Result<bool, String>>;
}

/// A ledger in memory: single use within one process.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    used: Mutex<HashMap<String, i64>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> MemoryLedger {
        MemoryLedger::default()
    }
}

impl RequestStateLedger for MemoryLedger {
    fn redeem<'a>(&'a self, nonce: &'a str, expires: i64) -> BoxFuture<'a, Result<bool, String>> {
        let now = super::unix_now();
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Expired nonces can no longer be presented (the state is refused as expired).
        used.retain(|_, e| *e > now);
        let first = used.insert(nonce.to_owned(), expires).is_none();
        Box::pin(std::future::ready(Ok(first)))
    }
}
