//! Records owed to the trail: a call whose handler ran (what it did stands) but whose
//! record the sink could not write is answered 503, and its record, handed back by the
//! sink ([`AuditError::with_record`](crate::audit::AuditError::with_record)), is kept here
//! and written before any later record once the sink writes again.
//!
//! Only what a process keeps in memory: a server that stops before the sink recovers
//! loses them (each is in the error log already, as every record a built-in sink fails to
//! write is).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::audit::{AuditRecord, AuditSink, Check};

/// The most records kept. A failing sink makes the server refuse calls before their
/// handlers, so only the calls in flight when it failed can be owed; past this many the
/// rest are lost (and logged).
const MAX_OWED: usize = 1024;

#[derive(Default)]
pub(crate) struct Owed {
    records: Mutex<VecDeque<AuditRecord>>,
    len: AtomicUsize,
    /// A task is writing the records now; another finds nothing to do.
    paying: AtomicBool,
}

impl Owed {
    /// Keep the record of a call whose handler ran and whose record could not be written,
    /// as it was answered (503 `audit_unavailable`; its outcome says how the tool ended).
    /// `false` when no room is left.
    pub(crate) fn keep(&self, mut record: AuditRecord) -> bool {
        record.status = 503;
        record.check = Some(Check::Audit);
        record.reason = Some("audit_unavailable".to_owned());
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() >= MAX_OWED {
            return false;
        }
        records.push_back(record);
        self.len.store(records.len(), Ordering::Release);
        true
    }

    /// Nothing is owed (one atomic load: the check of every call).
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// How many records are owed.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
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
                let front = {
                    let records = owed.records.lock().unwrap_or_else(|e| e.into_inner());
                    records.front().cloned()
                };
                let Some(record) = front else { break };
                match sink.record(record).await {
                    Ok(()) => {
                        let mut records = owed.records.lock().unwrap_or_else(|e| e.into_inner());
                        records.pop_front();
                        owed.len.store(records.len(), Ordering::Release);
                        written += 1;
                    }
                    Err(err) => {
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
