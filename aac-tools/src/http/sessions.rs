//! Streamable HTTP sessions bound to the principal that opened them.
//!
//! A session id is not a credential: every request carries its own token. But a
//! session's standalone stream carries its notifications (log messages of its calls),
//! so a request naming a session must come from the session's own principal (same
//! subject, same workspace); any other principal is told the session does not exist.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::principal::Principal;

/// How many sessions are opened between two sweeps of the owners of sessions that are
/// gone (closed by rmcp, which ends a session after 5 minutes without a message either
/// way, or by the client's leaving).
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

    fn key(&self) -> PrincipalKey {
        (self.subject.clone(), self.workspace.clone())
    }
}

/// A principal as sessions are bound to it: its subject and workspace.
type PrincipalKey = (String, Option<String>);

#[derive(Default)]
struct Table {
    owners: HashMap<String, Owner>,
    /// The sessions of each principal, in the order they were opened.
    by_principal: HashMap<PrincipalKey, Vec<String>>,
}

impl Table {
    fn remove(&mut self, id: &str) {
        let Some(owner) = self.owners.remove(id) else {
            return;
        };
        let key = owner.key();
        if let Some(ids) = self.by_principal.get_mut(&key) {
            ids.retain(|other| other != id);
            if ids.is_empty() {
                self.by_principal.remove(&key);
            }
        }
    }
}

/// The owner of every open session, and the cap on the sessions of one principal.
pub(crate) struct SessionOwners {
    table: Mutex<Table>,
    opened: AtomicUsize,
    max_per_principal: usize,
}

impl SessionOwners {
    /// At most `max_per_principal` sessions (at least one) per principal.
    pub(crate) fn new(max_per_principal: usize) -> SessionOwners {
        SessionOwners {
            table: Mutex::default(),
            opened: AtomicUsize::new(0),
            max_per_principal: max_per_principal.max(1),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `principal` may use session `id`. Unknown ids pass: the MCP layer
    /// answers them (404).
    pub(crate) fn allows(&self, id: &str, principal: &Principal) -> bool {
        match self.table().owners.get_mut(id) {
            Some(owner) if owner.is(principal) => {
                owner.last_seen = Instant::now();
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// `principal` opened session `id`. Past the cap, the principal's least recently
    /// used session is forgotten here and returned, for the caller to close. Now and then
    /// the owners of sessions that are no longer open (`is_open` says which are) are
    /// forgotten: never the owner of a session that is, however long its client has been
    /// silent (rmcp keeps a session alive while it sends the client updates, and an
    /// ownerless session would be anyone's).
    #[must_use = "a session past the cap must be closed"]
    pub(crate) fn opened(
        &self,
        id: &str,
        principal: &Principal,
        is_open: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let now = Instant::now();
        let mut table = self.table();
        let owner = Owner {
            subject: principal.subject().to_owned(),
            workspace: principal.workspace().map(str::to_owned),
            last_seen: now,
        };
        let key = owner.key();
        // The same id again (not expected of rmcp): its old entry goes.
        table.remove(id);
        table.owners.insert(id.to_owned(), owner);
        let ids = table.by_principal.entry(key).or_default();
        ids.push(id.to_owned());
        let evicted = if ids.len() > self.max_per_principal {
            let ids = ids.clone();
            ids.iter()
                .filter(|other| *other != id)
                .min_by_key(|other| table.owners.get(*other).map(|o| o.last_seen))
                .cloned()
        } else {
            None
        };
        if let Some(evicted) = &evicted {
            table.remove(evicted);
        }
        let opened = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        if opened.is_multiple_of(SWEEP_EVERY) {
            let Table {
                owners,
                by_principal,
            } = &mut *table;
            owners.retain(|id, _| is_open(id));
            by_principal.retain(|_, ids| {
                ids.retain(|id| owners.contains_key(id));
                !ids.is_empty()
            });
        }
        evicted
    }

    /// Session `id` is gone.
    pub(crate) fn closed(&self, id: &str) {
        self.table().remove(id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_session_belongs_to_its_principal() {
        let owners = SessionOwners::new(8);
        let alice = Principal::new("alice", ["a:read"]).in_workspace("w1");
        let alice_elsewhere = Principal::new("alice", ["a:read"]).in_workspace("w2");
        let bob = Principal::new("bob", ["a:read"]).in_workspace("w1");
        assert_eq!(owners.opened("s1", &alice, |_| true), None);
        assert!(owners.allows("s1", &alice));
        assert!(owners.allows("s1", &Principal::new("alice", ["x:y"]).in_workspace("w1")));
        assert!(!owners.allows("s1", &bob));
        assert!(!owners.allows("s1", &alice_elsewhere));
        assert!(owners.allows("unknown", &bob));
        owners.closed("s1");
        assert!(owners.allows("s1", &bob));
    }

    #[test]
    fn past_the_cap_a_principal_loses_its_least_recently_used_session() {
        let owners = SessionOwners::new(3);
        let alice = Principal::new("alice", ["a:read"]).in_workspace("w1");
        let alice_elsewhere = Principal::new("alice", ["a:read"]).in_workspace("w2");
        let bob = Principal::new("bob", ["a:read"]).in_workspace("w1");
        for id in ["a1", "a2", "a3"] {
            assert_eq!(owners.opened(id, &alice, |_| true), None);
            std::thread::sleep(Duration::from_millis(2));
        }
        // Others have caps of their own.
        assert_eq!(owners.opened("b1", &bob, |_| true), None);
        assert_eq!(owners.opened("w1", &alice_elsewhere, |_| true), None);
        // a1 was used last: a2 is the least recently used.
        assert!(owners.allows("a1", &alice));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(owners.opened("a4", &alice, |_| true).as_deref(), Some("a2"));
        assert_eq!(owners.opened("a5", &alice, |_| true).as_deref(), Some("a3"));
        assert_eq!(owners.opened("a6", &alice, |_| true).as_deref(), Some("a1"));
        // A forgotten session is unknown here (rmcp, which closed it, answers 404).
        assert!(owners.allows("a2", &bob));
        assert!(!owners.allows("a6", &bob));
        // A closed session frees its place.
        owners.closed("a4");
        assert_eq!(owners.opened("a7", &alice, |_| true), None);
        assert_eq!(owners.opened("a8", &alice, |_| true).as_deref(), Some("a5"));
        assert!(owners.allows("b1", &bob));
        assert!(owners.allows("w1", &alice_elsewhere));
    }

    /// The owner of a session that is still open is never forgotten, however long its
    /// client is silent and however many sessions others open; the owner of a session
    /// that is gone is, at the next sweep.
    #[test]
    fn an_open_session_keeps_its_owner() {
        let owners = SessionOwners::new(SWEEP_EVERY * 2);
        let alice = Principal::new("alice", ["a:read"]).in_workspace("w1");
        let bob = Principal::new("bob", ["a:read"]).in_workspace("w1");
        let open = |id: &str| id == "kept";
        assert_eq!(owners.opened("kept", &alice, open), None);
        assert_eq!(owners.opened("ended", &alice, open), None);
        for i in 0..SWEEP_EVERY {
            let _ = owners.opened(&format!("b{i}"), &bob, open);
        }
        assert!(!owners.allows("kept", &bob), "still alice's");
        assert!(owners.allows("kept", &alice));
        // Forgotten here: rmcp, which no longer has it, answers 404.
        assert!(owners.allows("ended", &bob));
    }
}
