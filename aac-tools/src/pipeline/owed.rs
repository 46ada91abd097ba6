//! Records owed to the trail: a call whose record the sink could not write is answered
//! 503 (one whose handler ran: what it did stands; a refusal: refused all the same), and
//! its record, handed back by the sink
//! ([`AuditError::with_record`](crate::audit::AuditError::with_record)), is kept here and
//! written once the sink writes again, ahead of the record of the call that finds them
//! (calls running at the same time may write theirs meanwhile). Past [`MAX_OWED`] they
//! are counted, and the count is written as one record after them.
//!
//! Only what a process keeps in memory: as the server goes away what is still owed is
//! handed to the sink one last time ([`Owed::hand_off_all`]), but a server that stops
//! before the sink recovers loses them (each is in the error log already, as every
//! record a built-in sink fails to write is).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::audit::{AuditRecord, AuditSink, Check};

/// The most records kept. Past this many (a flood of calls refused while the sink fails),
/// a refusal is counted instead (and in the error log), and the count recorded; the
/// record of a call that ran takes the place of a refusal kept (counted then), so that
/// a flood of refusals never pushes out what a tool did.
const MAX_OWED: usize = 1024;

#[derive(Default)]
pub(crate) struct Owed {
    /// Each with whether its call ran (its handler started).
    records: Mutex<VecDeque<(AuditRecord, bool)>>,
    len: AtomicUsize,
    /// Records past [`MAX_OWED`], counted (the last one's transport is the count's).
    counted: Mutex<Option<(u64, String)>>,
    /// A task is writing the records now; another finds nothing to do.
    paying: AtomicBool,
}

impl Owed {
    /// Keep the record of a call whose handler ran and whose record could not be written,
    /// as it was answered (503 `audit_unavailable`; its outcome says how the tool ended,
    /// or that it was refused). `false` when no room is left: then it is counted.
    /// `ran`: whether the call's handler started.
    pub(crate) fn keep(&self, record: AuditRecord, ran: bool) -> bool {
        self.keep_as_is(record.answered_unavailable(), ran)
    }

    /// Keep a record as it is (a call that got no answer: abandoned).
    pub(crate) fn keep_as_is(&self, record: AuditRecord, ran: bool) -> bool {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() >= MAX_OWED {
            // A call that ran takes the place of the latest refusal kept, which is counted;
            // never the first (the oldest, written next).
            let refusal = ran
                .then(|| {
                    records
                        .iter()
                        .enumerate()
                        .skip(1)
                        .rev()
                        .find(|(_, (_, ran))| !ran)
                        .map(|(at, _)| at)
                })
                .flatten();
            let counted_out = match refusal {
                Some(at) => records.remove(at).map(|(r, _)| r.transport),
                None if ran => {
                    // Only calls that ran are kept: this one is lost (in the error log).
                    return false;
                }
                None => Some(record.transport.clone()),
            };
            if let Some(out) = counted_out {
                let mut counted = self.counted.lock().unwrap_or_else(|e| e.into_inner());
                let (count, transport) = counted.get_or_insert_with(|| (0, String::new()));
                *count += 1;
                *transport = out;
            }
            if refusal.is_none() {
                // Counted: `is_empty` stays false until the count is written.
                self.store_len(records.len());
                return false;
            }
        }
        records.push_back((record, ran));
        self.store_len(records.len());
        true
    }

    /// How many are owed: `kept` records, and the count of the rest if there is one
    /// (taken with the records' lock held, as every change of them is).
    fn store_len(&self, kept: usize) {
        let counted = self
            .counted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        self.len
            .store(kept + usize::from(counted), Ordering::Release);
    }

    /// The record of the calls counted past [`MAX_OWED`], to write after the kept ones:
    /// the count is taken (and given back by [`Owed::recount`] if the write fails).
    fn count_record(&self) -> Option<(AuditRecord, u64)> {
        let (count, transport) = self
            .counted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        let mut record = AuditRecord {
            tool: "(unknown)".to_owned(),
            outcome: crate::audit::Outcome::Denied,
            reason: Some("audit_unavailable".to_owned()),
            check: Some(Check::Audit),
            status: 503,
            scopes_provided: Vec::new(),
            timestamp: crate::audit::now_timestamp(),
            principal: None,
            workspace: None,
            transport,
            request_id: None,
            duration_us: 0,
            access_level: None,
            arguments: serde_json::json!({"more_calls": count}),
            confirmed_by: None,
            kind: crate::audit::CallKind::Tool,
        };
        crate::audit::bound_record(&mut record);
        Some((record, count))
    }

    /// A count whose record could not be written is counted again.
    fn recount(&self, count: u64, transport: &str) {
        let mut counted = self.counted.lock().unwrap_or_else(|e| e.into_inner());
        let (now, last) = counted.get_or_insert_with(|| (0, transport.to_owned()));
        *now += count;
        if last.is_empty() {
            *last = transport.to_owned();
        }
    }

    /// Nothing is owed (one atomic load: the check of every call).
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// How many records are owed.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Hand everything owed to the sink without waiting (the server is going away):
    /// oldest first, then the count of the rest. The sink takes each record as it is
    /// handed (the contract of `AuditSink::record`); one it refuses at once is logged.
    /// A task writing them now (which the runtime's end may drop mid-write) holds only
    /// the record it handed the sink already, taken out of the queue first: what is left
    /// in the queue is handed here, once.
    pub(crate) fn hand_off_all(&self, sink: &Arc<dyn AuditSink>) {
        if self.is_empty() {
            return;
        }
        let records: Vec<_> = {
            let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            let taken = records.drain(..).map(|(record, _)| record).collect();
            self.store_len(0);
            taken
        };
        let count = self.count_record().map(|(record, _)| record);
        self.store_len(0);
        tracing::info!(
            records = records.len() + usize::from(count.is_some()),
            "records owed to the audit trail are handed to the sink as the server stops"
        );
        for record in records.into_iter().chain(count) {
            super::hand_off(sink, None, record, "a record owed to the audit trail");
        }
    }

    /// Write what is owed, oldest first, on a task of its own (a caller that goes away
    /// mid-write can neither lose a record nor write one twice); returns once that task is
    /// done. Stops at the first record the sink cannot write, which stays owed.
    pub(crate) async fn pay(self: &Arc<Self>, sink: &Arc<dyn AuditSink>) {
        if self.is_empty() || self.paying.swap(true, Ordering::AcqRel) {
            return;
        }
        /// Gives the turn back however the task ends (a sink that panics included).
        struct Paying(Arc<Owed>);
        impl Drop for Paying {
            fn drop(&mut self) {
                self.0.paying.store(false, Ordering::Release);
            }
        }
        let paying = Paying(Arc::clone(self));
        let sink = Arc::clone(sink);
        let task = async move {
            let owed = &paying.0;
            let mut written = 0usize;
            loop {
                // Taken out of the queue before the sink has it: handed once, whether this
                // task is dropped mid-write (the sink took it) or the server hands off
                // the rest as it goes away. Put back first if the sink refuses it.
                let front = {
                    let mut records = owed.records.lock().unwrap_or_else(|e| e.into_inner());
                    records.pop_front()
                };
                // The kept records first, then the count of those past them.
                let (record, kept, count) = match front {
                    Some((record, ran)) => (record.clone(), Some((record, ran)), None),
                    None => match owed.count_record() {
                        Some((record, count)) => {
                            let transport = record.transport.clone();
                            (record, None, Some((count, transport)))
                        }
                        None => break,
                    },
                };
                match sink.record(record).await {
                    Ok(()) => {
                        let records = owed.records.lock().unwrap_or_else(|e| e.into_inner());
                        owed.store_len(records.len());
                        written += 1;
                    }
                    Err(err) => {
                        if let Some(front) = kept {
                            let mut records =
                                owed.records.lock().unwrap_or_else(|e| e.into_inner());
                            records.push_front(front);
                            owed.store_len(records.len());
                        }
                        if let Some((count, transport)) = count {
                            owed.recount(count, &transport);
                        }
                        tracing::debug!(error = %err, owed = owed.len(), "the records owed to the audit trail wait for the sink");
                        break;
                    }
                }
            }
            if written > 0 {
                tracing::info!(
                    written,
                    left = owed.len(),
                    "records of calls that ran while the audit sink failed are written"
                );
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let _ = runtime.spawn(task).await;
            }
            // Outside a runtime (a caller's own executor): here, as it is.
            Err(_) => task.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tool: &str) -> AuditRecord {
        super::super::record::suppressed_of(
            "alice",
            None,
            Some(tool),
            1,
            crate::audit::CallKind::Tool,
            crate::context::Transport::Stdio,
        )
    }

    /// A record refused 503 for another reason (a token store that could not be read) is
    /// answered `audit_unavailable` when its own record cannot be written, and kept as it
    /// was answered; one already answered `audit_unavailable`, or abandoned, as it is.
    #[test]
    fn a_record_owed_says_how_its_call_was_answered() {
        use crate::audit::{Check, Outcome};
        let refused = |status: u16, reason: &str| {
            let mut record = record("get_issue");
            record.status = status;
            record.reason = Some(reason.to_owned());
            record.check = Some(Check::Authenticate);
            record.outcome = Outcome::Denied;
            record
        };
        let owed = refused(503, "token_store_unavailable").answered_unavailable();
        assert_eq!(
            (
                owed.status,
                owed.reason.as_deref(),
                owed.check,
                owed.outcome
            ),
            (
                503,
                Some("audit_unavailable"),
                Some(Check::Audit),
                Outcome::Denied
            )
        );
        let owed = refused(403, "insufficient_scope").answered_unavailable();
        assert_eq!(
            (owed.status, owed.reason.as_deref()),
            (503, Some("audit_unavailable"))
        );
        let kept = refused(503, "audit_unavailable").answered_unavailable();
        assert_eq!(kept.check, Some(Check::Authenticate));
        let abandoned = refused(499, "cancelled").answered_unavailable();
        assert_eq!(
            (abandoned.status, abandoned.reason.as_deref()),
            (499, Some("cancelled"))
        );
    }

    #[test]
    fn a_call_that_ran_takes_a_refusals_place_but_never_the_first() {
        let owed = Owed::default();
        // The first is a refusal (which a task may be writing), the rest calls that ran.
        assert!(owed.keep_as_is(record("refused"), false));
        for _ in 1..MAX_OWED {
            assert!(owed.keep_as_is(record("ran"), true));
        }
        // Full, and no refusal but the first: a refusal is counted, a call that ran is
        // not kept in the first's place.
        assert!(!owed.keep_as_is(record("refused"), false));
        assert!(!owed.keep_as_is(record("ran"), true));
        let records = owed.records.lock().unwrap();
        assert_eq!(records.front().unwrap().0.tool, "refused");
        assert_eq!(records.len(), MAX_OWED);
        drop(records);
        assert_eq!(owed.counted.lock().unwrap().as_ref().unwrap().0, 1);
        assert_eq!(owed.len(), MAX_OWED + 1, "the count is owed too");
    }

    /// Takes each record as it is handed (as the built-in sinks do), and never answers:
    /// a write the runtime's end drops midway.
    #[derive(Default)]
    struct Stalled(Mutex<Vec<String>>);

    impl AuditSink for Stalled {
        fn ready(&self) -> Result<(), crate::audit::AuditError> {
            Ok(())
        }
        fn record(
            &self,
            record: AuditRecord,
        ) -> crate::BoxFuture<'_, Result<(), crate::audit::AuditError>> {
            self.0.lock().unwrap().push(record.tool);
            Box::pin(std::future::pending())
        }
    }

    /// The server goes away while a task pays what is owed (its write dropped midway by
    /// the runtime's end): every owed record reaches the sink once. (The record being
    /// written was handed again as the server went away, a duplicate in the trail; or,
    /// with the turn still taken, the rest were never handed.)
    #[test]
    fn records_owed_as_the_server_goes_away_are_handed_once() {
        let owed = Arc::new(Owed::default());
        for tool in ["one", "two", "three"] {
            owed.keep_as_is(record(tool), true);
        }
        let stalled = Arc::new(Stalled::default());
        let sink: Arc<dyn AuditSink> = stalled.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let paying = Arc::clone(&owed);
        let paying_sink = Arc::clone(&sink);
        let seen = Arc::clone(&stalled);
        runtime.block_on(async move {
            let task = tokio::spawn(async move { paying.pay(&paying_sink).await });
            while seen.0.lock().unwrap().is_empty() {
                tokio::task::yield_now().await;
            }
            drop(task);
        });
        // Midway, as the runtime ends; then the server hands off the rest.
        owed.hand_off_all(&sink);
        drop(runtime);
        owed.hand_off_all(&sink);
        assert_eq!(*stalled.0.lock().unwrap(), ["one", "two", "three"]);
        assert!(owed.is_empty());
    }

    #[test]
    fn refusals_are_counted_and_give_way_to_calls_that_ran() {
        let owed = Owed::default();
        for _ in 0..MAX_OWED + 3 {
            owed.keep_as_is(record("refused"), false);
        }
        assert!(owed.keep_as_is(record("ran"), true));
        let records = owed.records.lock().unwrap();
        assert_eq!(records.back().unwrap().0.tool, "ran");
        assert_eq!(records.len(), MAX_OWED);
        drop(records);
        assert_eq!(owed.counted.lock().unwrap().as_ref().unwrap().0, 4);
    }
}
