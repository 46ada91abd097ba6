//! A sink that writes every record to several sinks.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use super::{AuditError, AuditRecord, AuditSink};
use crate::BoxFuture;

/// Writes every record to each of its sinks, concurrently, and succeeds only when all
/// of them did: a call is answered once its record is durable everywhere, and refused
/// (503) if any sink cannot write.
///
/// ```
/// use aac_tools::audit::{FanOut, JsonLinesSink, SqliteSink};
/// # let dir = tempfile::tempdir().unwrap();
/// let sink = FanOut::new()
///     .with(SqliteSink::open(dir.path().join("app.db")).unwrap())
///     .with(JsonLinesSink::stderr());
/// assert_eq!(sink.len(), 2);
/// ```
#[derive(Clone, Default)]
pub struct FanOut {
    sinks: Vec<Arc<dyn AuditSink>>,
}

impl fmt::Debug for FanOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FanOut")
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl FanOut {
    /// A fan-out to no sink yet.
    pub fn new() -> FanOut {
        FanOut::default()
    }

    /// Also write to `sink`.
    pub fn with(mut self, sink: impl AuditSink) -> FanOut {
        self.sinks.push(Arc::new(sink));
        self
    }

    /// How many sinks.
    pub fn len(&self) -> usize {
        self.sinks.len()
    }

    /// Whether there is no sink (then every record is refused: a record must go somewhere).
    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }
}

impl AuditSink for FanOut {
    fn ready(&self) -> Result<(), AuditError> {
        if self.sinks.is_empty() {
            return Err(AuditError::new("the audit fan-out has no sink"));
        }
        self.sinks.iter().try_for_each(|sink| sink.ready())
    }

    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        if self.sinks.is_empty() {
            return Box::pin(async { Err(AuditError::new("the audit fan-out has no sink")) });
        }
        let mut pending: Vec<Option<BoxFuture<'_, Result<(), AuditError>>>> = Vec::new();
        let last = self.sinks.len() - 1;
        let mut record = Some(record);
        for (i, sink) in self.sinks.iter().enumerate() {
            let r = if i == last {
                record.take()
            } else {
                record.clone()
            };
            if let Some(r) = r {
                pending.push(Some(sink.record(r)));
            }
        }
        let mut errors: Vec<AuditError> = Vec::new();
        Box::pin(async move {
            poll_fn(|cx| {
                let mut waiting = false;
                for slot in pending.iter_mut() {
                    if let Some(fut) = slot {
                        match Pin::new(fut).poll(cx) {
                            Poll::Ready(result) => {
                                if let Err(err) = result {
                                    errors.push(err);
                                }
                                *slot = None;
                            }
                            Poll::Pending => waiting = true,
                        }
                    }
                }
                if waiting {
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
            // A record handed back is written again later, to every sink: only when every
            // sink handed it back (none took it, none may have), or one would hold it twice.
            let records: Vec<Option<AuditRecord>> =
                errors.iter_mut().map(AuditError::take_record).collect();
            let handed_back =
                if errors.len() == pending.len() && records.iter().all(Option::is_some) {
                    records.into_iter().flatten().next()
                } else {
                    None
                };
            let err = match errors.len() {
                0 => return Ok(()),
                1 => errors.remove(0),
                _ => AuditError::new(
                    errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
            };
            Err(match handed_back {
                Some(record) => err.with_record(record),
                None => err,
            })
        })
    }
}
