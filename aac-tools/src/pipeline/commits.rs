//! What a call's database transactions did, for the record of a call abandoned while its
//! tool ran (the server stopped under it: stdio's input ended and its drain passed, or
//! HTTP's shutdown drain did).
//!
//! A transaction's work may go on after the call's task is gone: SQLite's runs on a
//! blocking thread, which the runtime waits for as it stops. Left alone, it would commit
//! after the record said the call was abandoned. So the record decides: once a call is
//! abandoned, a transaction of it that has not begun its `COMMIT` rolls back, one whose
//! `COMMIT` runs on another thread is waited for, and the record says which of them
//! committed (what they wrote stands) or that one was in flight when its task went away
//! (PostgreSQL's, whose `COMMIT` is a round trip on the call's own task: in doubt).

#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long an abandoned call waits for a `COMMIT` running on another thread (SQLite's
/// holds the write lock already, so it waits only for its own sync).
pub(crate) const WAIT_FOR_COMMIT: Duration = Duration::from_secs(5);

/// The transactions of one call (and whom it runs for).
#[derive(Debug, Default)]
pub(crate) struct Commits {
    state: Mutex<State>,
    settled: Condvar,
    /// The call's principal: a call the tool makes in process is made as it.
    principal: Option<Arc<crate::Principal>>,
    /// The server's count of abandonments of the calls then running (a shutdown's drain
    /// ended), and its value when this call began: once it moved, this call is abandoned
    /// too (a call that begins later is not).
    stopped: Option<(Arc<std::sync::atomic::AtomicU64>, u64)>,
}

#[derive(Debug, Default)]
struct State {
    abandoned: bool,
    /// `COMMIT`s running on another thread.
    elsewhere: usize,
    /// `COMMIT`s awaited on the call's own task.
    here: usize,
    committed: usize,
    in_doubt: bool,
    /// The first refusal of an action above the call's level (or on the framework's own
    /// tables): the call ends with it, whatever its handler made of the error.
    violation: Option<crate::ToolError>,
}

impl State {
    /// What the transactions did so far.
    fn what_it_did(&self) -> Abandoned {
        Abandoned {
            committed: self.committed,
            in_doubt: self.in_doubt || self.elsewhere > 0 || self.here > 0,
        }
    }
}

/// What an abandoned call's transactions did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Abandoned {
    /// Transactions that committed: what they wrote stands.
    pub(crate) committed: usize,
    /// A `COMMIT` was in flight when the call was abandoned: whether it took is unknown.
    pub(crate) in_doubt: bool,
}

impl Commits {
    /// The transactions of a call made by `principal`, abandoned with the calls running
    /// when the count `stopped` next moves; with `ever`, once it has moved at all (then a
    /// call that begins after the abandonment is abandoned from the start: stdio's, whose
    /// process is about to exit).
    pub(crate) fn of(
        principal: Option<Arc<crate::Principal>>,
        stopped: Option<Arc<std::sync::atomic::AtomicU64>>,
        ever: bool,
    ) -> Commits {
        Commits {
            principal,
            stopped: stopped.map(|count| {
                let now = if ever {
                    0
                } else {
                    count.load(std::sync::atomic::Ordering::Acquire)
                };
                (count, now)
            }),
            ..Commits::default()
        }
    }

    /// Whether the server abandoned the calls running since this one began (one atomic
    /// load).
    pub(crate) fn server_stopped(&self) -> bool {
        self.stopped.as_ref().is_some_and(|(count, began)| {
            count.load(std::sync::atomic::Ordering::Acquire) != *began
        })
    }

    /// What the call's transactions did, now that it is over (its handler returned).
    pub(crate) fn done(&self) -> Abandoned {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .what_it_did()
    }

    /// The call was abandoned: no transaction of it commits from now on. Waits (at most
    /// `wait`) for a `COMMIT` already running on another thread.
    pub(crate) fn abandon(&self, wait: Duration) -> Abandoned {
        let deadline = Instant::now() + wait;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.abandoned = true;
        while state.elsewhere > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .settled
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        state.what_it_did()
    }

    /// The first refusal of an action above the call's level, if any: the call fails
    /// with it even when its handler swallowed the error (a refusal is the defence
    /// working, and its record must say so, not `success`).
    pub(crate) fn take_violation(&self) -> Option<crate::ToolError> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .violation
            .take()
    }

    /// Whether the call was abandoned (a transaction not yet begun need not begin).
    pub(crate) fn is_abandoned(&self) -> bool {
        self.server_stopped()
            || self
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .abandoned
    }

    /// A `COMMIT` is about to be sent, on another thread than the call's task
    /// (`elsewhere`) or on it: the error to roll back with instead if the call was
    /// abandoned, or was refused an action of its level before (nothing more of it
    /// commits).
    pub(crate) fn begin(self: &Arc<Self>, elsewhere: bool) -> Result<Committing, crate::ToolError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(violation) = &state.violation {
            return Err(violation.clone());
        }
        if state.abandoned || self.server_stopped() {
            state.abandoned = true;
            return Err(abandoned());
        }
        if elsewhere {
            state.elsewhere += 1;
        } else {
            state.here += 1;
        }
        Ok(Committing {
            commits: Arc::clone(self),
            elsewhere,
            done: false,
        })
    }
}

/// Before a transaction's `COMMIT`: the guard of that commit, counted in `commits` (the
/// call's, if it has any: [`current`]), or the error that rolls the transaction back
/// ([`Commits::begin`]).
pub(crate) fn before_commit(
    commits: Option<&Arc<Commits>>,
    elsewhere: bool,
) -> Result<Option<Committing>, crate::ToolError> {
    commits.map(|c| c.begin(elsewhere)).transpose()
}

/// The error of a transaction whose call was abandoned before it committed.
pub(crate) fn abandoned() -> crate::ToolError {
    crate::ToolError::new(
        crate::Status::Internal,
        "cancelled",
        "the call was abandoned (the server stopped): its transaction is rolled back",
    )
}

/// A `COMMIT` under way; [`Committing::done`] says how it ended, and one dropped before
/// (its task went away mid-round-trip) leaves the call in doubt.
#[derive(Debug)]
pub(crate) struct Committing {
    commits: Arc<Commits>,
    elsewhere: bool,
    done: bool,
}

impl Committing {
    /// The `COMMIT` ended: `committed` if it took.
    pub(crate) fn done(mut self, committed: bool) {
        self.done = true;
        self.end(committed, false);
    }

    fn end(&self, committed: bool, in_doubt: bool) {
        let mut state = self.commits.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.elsewhere {
            state.elsewhere -= 1;
        } else {
            state.here -= 1;
        }
        state.committed += usize::from(committed);
        state.in_doubt |= in_doubt;
        drop(state);
        self.commits.settled.notify_all();
    }
}

impl Drop for Committing {
    fn drop(&mut self) {
        if !self.done {
            self.end(false, true);
        }
    }
}

std::thread_local! {
    /// The transactions of the call whose handler is being polled on this thread.
    static CURRENT: RefCell<Option<Arc<Commits>>> = const { RefCell::new(None) };
}

/// While alive, the handler polled on this thread is that of the call `commits` belongs
/// to (a transaction it begins is counted there).
pub(crate) struct Polling(Option<Arc<Commits>>);

impl Polling {
    pub(crate) fn enter(commits: &Arc<Commits>) -> Polling {
        Polling(CURRENT.with(|c| c.replace(Some(Arc::clone(commits)))))
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// The transactions of the call whose handler is being polled on this thread, if any
/// (none outside tools, or in a task the handler spawned).
pub(crate) fn current() -> Option<Arc<Commits>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// A refusal of an action above the level of the call running on this thread (or on
/// the framework's tables): kept, the first one, so that the call fails with it however
/// its handler goes on. Outside a call (set-up code, a task the handler spawned), nothing.
pub(crate) fn violated(err: &crate::ToolError) {
    CURRENT.with(|c| {
        if let Some(commits) = c.borrow().as_ref() {
            let mut state = commits.state.lock().unwrap_or_else(|e| e.into_inner());
            state.violation.get_or_insert_with(|| err.clone());
        }
    });
}

/// The principal of the call whose handler is being polled on this thread (or runs its
/// transaction's closure), if any.
pub(crate) fn running_for() -> Option<Arc<crate::Principal>> {
    CURRENT.with(|c| c.borrow().as_ref().and_then(|c| c.principal.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abandoned_call_commits_nothing_more_and_says_what_committed() {
        let commits = Arc::new(Commits::default());
        commits.begin(true).unwrap().done(true);
        let abandoned = commits.abandon(Duration::ZERO);
        assert_eq!(
            abandoned,
            Abandoned {
                committed: 1,
                in_doubt: false
            }
        );
        assert!(commits.begin(true).is_err(), "no commit after abandonment");
        assert!(commits.is_abandoned());
    }

    #[test]
    fn a_commit_on_another_thread_is_waited_for() {
        let commits = Arc::new(Commits::default());
        let committing = commits.begin(true).unwrap();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            committing.done(true);
        });
        let abandoned = commits.abandon(Duration::from_secs(10));
        thread.join().unwrap();
        assert_eq!(abandoned.committed, 1);
        assert!(!abandoned.in_doubt);
    }

    #[test]
    fn a_commit_in_flight_on_the_call_s_task_is_in_doubt() {
        let commits = Arc::new(Commits::default());
        let committing = commits.begin(false).unwrap();
        // Not waited for: the task that would end it is the one going away.
        let abandoned = commits.abandon(Duration::from_secs(10));
        assert!(abandoned.in_doubt);
        drop(committing);
        assert!(commits.abandon(Duration::ZERO).in_doubt);
    }
}
