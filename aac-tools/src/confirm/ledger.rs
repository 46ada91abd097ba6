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

/// How long after its expiry a redeemed nonce is kept, in seconds. A state is checked
/// against its expiry before the ledger is asked, with that replica's clock, at that
/// moment: a nonce forgotten as soon as it expires could be forgotten between the check
/// and the redemption of a replay (the second ticking over), or by a replica whose clock
/// runs ahead of the one that checks. Kept this long, a replay is refused as used unless
/// the replicas' clocks differ by more.
pub const KEEP_AFTER_EXPIRY: i64 = 600;

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
        // Nonces long expired can no longer be presented (the state is refused as
        // expired); one just expired may still be, by a check made a moment ago.
        used.retain(|_, e| *e > now - KEEP_AFTER_EXPIRY);
        let first = used.insert(nonce.to_owned(), expires).is_none();
        Box::pin(std::future::ready(Ok(first)))
    }
}
