//! Streamable HTTP sessions bound to the principal that opened them.
//!
//! A session id is not a credential: every request carries its own token. But a
//! session's standalone stream carries its notifications (log messages of its calls),
//! so a request naming a session must come from the session's own principal (same
//! subject, same workspace); any other principal is told the session does not exist.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::principal::Principal;

/// rmcp closes a session after 5 minutes without a request; an owner idle for longer
/// than this belongs to a session that is gone.
const IDLE: Duration = Duration::from_secs(15 * 60);

/// How many sessions are opened between two sweeps of idle owners.
const SWEEP_EVERY: usize = 256;

struct Owner {
    subject: String,
    workspace: Option<String>,
    last_seen: Instant,
}

impl Owner {
    fn is(&self, principal: &Principal) -> bool {
        self.subject == principal.subject() && self.workspace.as_deref() == principal.workspace()
    }
}

/// The owner of every open session.
#[derive(Default)]
pub(crate) struct SessionOwners {
    owners: Mutex<HashMap<String, Owner>>,
    opened: AtomicUsize,
}

impl SessionOwners {
    /// Whether `principal` may use session `id`. Unknown ids pass: the MCP layer
    /// answers them (404).
    pub(crate) fn allows(&self, id: &str, principal: &Principal) -> bool {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        match owners.get_mut(id) {
            Some(owner) if owner.is(principal) => {
                owner.last_seen = Instant::now();
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// `principal` opened session `id`.
    pub(crate) fn opened(&self, id: &str, principal: &Principal) {
        let now = Instant::now();
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.insert(
            id.to_owned(),
            Owner {
                subject: principal.subject().to_owned(),
                workspace: principal.workspace().map(str::to_owned),
                last_seen: now,
            },
        );
        let opened = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        if opened.is_multiple_of(SWEEP_EVERY) {
            owners.retain(|_, owner| now.duration_since(owner.last_seen) < IDLE);
        }
    }

    /// Session `id` is gone.
    pub(crate) fn closed(&self, id: &str) {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_belongs_to_its_principal() {
        let owners = SessionOwners::default();
        let alice = Principal::new("alice", ["a:read"]).in_workspace("w1");
        let alice_elsewhere = Principal::new("alice", ["a:read"]).in_workspace("w2");
        let bob = Principal::new("bob", ["a:read"]).in_workspace("w1");
        owners.opened("s1", &alice);
        assert!(owners.allows("s1", &alice));
        assert!(owners.allows("s1", &Principal::new("alice", ["x:y"]).in_workspace("w1")));
        assert!(!owners.allows("s1", &bob));
        assert!(!owners.allows("s1", &alice_elsewhere));
        assert!(owners.allows("unknown", &bob));
        owners.closed("s1");
        assert!(owners.allows("s1", &bob));
    }
}
