//! The writer thread shared by the file-backed sinks: callers hand it records over a
//! channel and wait; it takes every record that is waiting (up to a batch size), writes
//! them together, makes them durable once, and answers every caller of the batch.
//!
//! This is group commit: while one batch is being flushed, the next one fills up, so
//! under load one flush serves many calls, and with a single caller the latency is one
//! write and one flush.
//!
//! The writer thread is the one serial part, so whatever does not depend on the order
//! of records (encoding them as JSON, for instance) is done by the callers, on their
//! own threads, before the record is handed over ([`Backend::prepare`]).

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{AuditError, AuditRecord};
use crate::BoxFuture;

/// Writes a batch of records durably, all or nothing.
pub(crate) trait Backend: Send + 'static {
    /// A record as the writer thread takes it.
    type Item: Send + 'static;

    /// Turn a record into an item, on the caller's thread.
    fn prepare(record: AuditRecord) -> Self::Item;

    /// The item as one line of the error log, when it could not be written.
    fn describe(item: &Self::Item) -> String;

    /// Write `batch`, all or nothing, and make it durable before returning `Ok` — unless
    /// [`deferred_sync`](Backend::deferred_sync) names a file to sync.
    fn write_batch(&mut self, batch: &[Self::Item]) -> Result<(), AuditError>;

    /// A file whose sync makes the batch just written durable. When there is one, the
    /// callers of the batch are answered by a second thread after it synced the file,
    /// while the writer thread goes on with the next batch: writing one batch overlaps
    /// with flushing the previous one.
    fn deferred_sync(&self) -> Option<Arc<File>> {
        None
    }
}

type Reply = oneshot::Sender<Result<(), AuditError>>;

/// A batch written but not yet durable, handed to the syncer thread (which also frees
/// its items, sparing the writer thread that work).
struct Unsynced<I> {
    file: Arc<File>,
    replies: Vec<Reply>,
    items: Vec<I>,
}

/// The syncer thread's inbox, and how many batches it has not answered yet.
struct Syncer<I> {
    inbox: mpsc::Sender<Unsynced<I>>,
    in_flight: Arc<AtomicUsize>,
}

/// The syncer thread: syncs once for every batch waiting, then answers their callers.
fn spawn_syncer<I: Send + 'static>(
    name: &str,
    health: Arc<Health>,
) -> Result<Syncer<I>, AuditError> {
    let (inbox, rx) = mpsc::channel::<Unsynced<I>>();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let answered = Arc::clone(&in_flight);
    std::thread::Builder::new()
        .name(format!("{name}-sync"))
        .spawn(move || {
            let mut waiting: Vec<Unsynced<I>> = Vec::new();
            while let Ok(first) = rx.recv() {
                waiting.push(first);
                while let Ok(more) = rx.try_recv() {
                    waiting.push(more);
                }
                // Every batch here was written before this sync starts, so it covers
                // them all. (Normally one file; a reconnection may give a second.)
                let mut result = Ok(());
                let mut synced: Vec<&Arc<File>> = Vec::new();
                for unsynced in &waiting {
                    if synced.iter().any(|f| Arc::ptr_eq(f, &unsynced.file)) {
                        continue;
                    }
                    if let Err(err) = sync(&unsynced.file) {
                        result = Err(err);
                    }
                    synced.push(&unsynced.file);
                }
                settle(&health, &result);
                let mut done = Vec::with_capacity(waiting.len());
                for unsynced in waiting.drain(..) {
                    for reply in unsynced.replies {
                        let _ = reply.send(result.clone());
                    }
                    done.push(unsynced.items);
                    answered.fetch_sub(1, Ordering::AcqRel);
                }
                // Freed after the callers were answered.
                drop(done);
            }
        })
        .map_err(|e| AuditError::new(format!("cannot start the audit sync thread: {e}")))?;
    Ok(Syncer { inbox, in_flight })
}

/// Move the jobs already queued into `batch` and `replies`, up to `max` records.
fn drain<I>(rx: &mpsc::Receiver<Job<I>>, batch: &mut Vec<I>, replies: &mut Vec<Reply>, max: usize) {
    while batch.len() < max {
        match rx.try_recv() {
            Ok(job) => {
                batch.push(job.record);
                replies.push(job.reply);
            }
            Err(_) => break,
        }
    }
}

fn sync(file: &File) -> Result<(), AuditError> {
    file.sync_data()
        .map_err(|e| AuditError::new(format!("cannot flush the audit log to disk: {e}")))
}

/// Record the outcome of a sync in the sink's health.
fn settle(health: &Health, result: &Result<(), AuditError>) {
    match result {
        Ok(()) => health.set_ok(),
        Err(err) => {
            health.set_failed(err);
            tracing::error!(error = %err, "audit records were written but could not be made durable");
        }
    }
}

/// Whether the sink can write, as [`AuditSink::ready`](super::AuditSink::ready) answers it.
#[derive(Debug)]
pub(crate) struct Health {
    healthy: AtomicBool,
    problem: Mutex<Option<AuditError>>,
    alive: AtomicBool,
    records: AtomicU64,
    batches: AtomicU64,
}

impl Health {
    pub(crate) fn new(problem: Option<AuditError>) -> Health {
        Health {
            healthy: AtomicBool::new(problem.is_none()),
            problem: Mutex::new(problem),
            alive: AtomicBool::new(true),
            records: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        }
    }

    /// Records written and batches (transactions, flushes) that wrote them, so far.
    pub(crate) fn written(&self) -> (u64, u64) {
        (
            self.records.load(Ordering::Relaxed),
            self.batches.load(Ordering::Relaxed),
        )
    }

    /// `Ok` when the last write succeeded (or nothing failed yet) and the writer runs.
    pub(crate) fn ready(&self) -> Result<(), AuditError> {
        if !self.alive.load(Ordering::Acquire) {
            return Err(AuditError::new("the audit writer thread has stopped"));
        }
        if self.healthy.load(Ordering::Acquire) {
            return Ok(());
        }
        let problem = self.problem.lock().unwrap_or_else(|e| e.into_inner());
        Err(problem
            .clone()
            .unwrap_or_else(|| AuditError::new("the audit sink cannot write")))
    }

    pub(crate) fn set_ok(&self) {
        if !self.healthy.load(Ordering::Acquire) {
            *self.problem.lock().unwrap_or_else(|e| e.into_inner()) = None;
            self.healthy.store(true, Ordering::Release);
            tracing::info!("the audit sink writes again; calls are accepted");
        }
    }

    pub(crate) fn set_failed(&self, problem: &AuditError) {
        *self.problem.lock().unwrap_or_else(|e| e.into_inner()) = Some(problem.clone());
        self.healthy.store(false, Ordering::Release);
    }
}

struct Job<I> {
    record: I,
    reply: Reply,
}

/// What a file-backed sink wrote since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SinkStats {
    /// Records written durably.
    pub records: u64,
    /// Batches that wrote them: transactions for SQLite, `write` + sync for a file.
    /// With group commit under load, far fewer than records.
    pub batches: u64,
}

/// How the writer thread groups records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batching {
    /// The most records in one batch (1: one durable write per record).
    pub(crate) max_batch: usize,
    /// When the previous batch held several records (callers are concurrent), wait for
    /// as many records as it held, while they arrive less than this apart. Zero: never
    /// wait.
    pub(crate) linger: Duration,
    /// The longest a batch waits for more records in all.
    pub(crate) max_linger: Duration,
}

impl Batching {
    /// Group commit with the default waits.
    pub(crate) const fn group(max_batch: usize) -> Batching {
        Batching {
            max_batch,
            linger: Duration::from_micros(50),
            max_linger: Duration::from_millis(1),
        }
    }
}

/// The caller's side of a writer thread. Cheap to clone; the thread ends when the last
/// clone is dropped, after answering every record it was given.
pub(crate) struct Worker<B: Backend> {
    jobs: mpsc::Sender<Job<B::Item>>,
    health: Arc<Health>,
}

impl<B: Backend> Clone for Worker<B> {
    fn clone(&self) -> Self {
        Worker {
            jobs: self.jobs.clone(),
            health: Arc::clone(&self.health),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Worker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("health", &self.health)
            .finish()
    }
}

impl<B: Backend> Worker<B> {
    /// Start a writer thread named `name` over `backend`, grouping records as
    /// `batching` says.
    pub(crate) fn spawn(
        name: &str,
        mut backend: B,
        batching: Batching,
        health: Arc<Health>,
    ) -> Result<Worker<B>, AuditError> {
        let (jobs, rx) = mpsc::channel::<Job<B::Item>>();
        let max_batch = batching.max_batch.max(1);
        let thread_health = Arc::clone(&health);
        let sink_name = name.to_owned();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                // Marks the writer as stopped however the thread ends, panics included.
                struct Alive(Arc<Health>);
                impl Drop for Alive {
                    fn drop(&mut self) {
                        self.0.alive.store(false, Ordering::Release);
                    }
                }
                let _alive = Alive(Arc::clone(&thread_health));
                let mut batch: Vec<B::Item> = Vec::with_capacity(max_batch.min(1024));
                let mut replies = Vec::with_capacity(max_batch.min(1024));
                let mut last_batch = 0;
                // Started the first time a batch defers its sync.
                let mut syncer: Option<Syncer<B::Item>> = None;
                while let Ok(first) = rx.recv() {
                    batch.push(first.record);
                    replies.push(first.reply);
                    drain(&rx, &mut batch, &mut replies, max_batch);
                    // The callers answered by the last commit are about to send their
                    // next records: waiting for them (as many as the last batch held)
                    // lets every concurrent caller share this commit's flush, instead of
                    // splitting into cohorts that alternate between two flushes. The
                    // wait ends early when no record arrived for `linger`; it polls
                    // rather than sleeps, since a sleeping thread wakes late on a busy
                    // machine. A lone caller never waits (its last batch held one).
                    let target = last_batch.min(max_batch);
                    if target > 1 && batch.len() < target && !batching.linger.is_zero() {
                        let started = Instant::now();
                        let mut last_arrival = started;
                        while batch.len() < target {
                            match rx.try_recv() {
                                Ok(job) => {
                                    batch.push(job.record);
                                    replies.push(job.reply);
                                    last_arrival = Instant::now();
                                }
                                Err(mpsc::TryRecvError::Empty) => {
                                    let now = Instant::now();
                                    if now - last_arrival >= batching.linger
                                        || now - started >= batching.max_linger
                                    {
                                        break;
                                    }
                                    std::thread::yield_now();
                                }
                                Err(mpsc::TryRecvError::Disconnected) => break,
                            }
                        }
                        drain(&rx, &mut batch, &mut replies, max_batch);
                    }
                    last_batch = batch.len();
                    let result = backend.write_batch(&batch);
                    let deferred = backend.deferred_sync();
                    match &result {
                        Ok(()) => {
                            thread_health
                                .records
                                .fetch_add(batch.len() as u64, Ordering::Relaxed);
                            thread_health.batches.fetch_add(1, Ordering::Relaxed);
                            if deferred.is_none() {
                                thread_health.set_ok();
                            }
                        }
                        Err(err) => {
                            thread_health.set_failed(err);
                            // The records are lost to the sink: keep them in the log at
                            // least, so that an operator can reconstruct what happened.
                            for record in &batch {
                                tracing::error!(
                                    sink = %sink_name,
                                    error = %err,
                                    record = %B::describe(record),
                                    "audit record could not be written"
                                );
                            }
                        }
                    }
                    match (&result, deferred) {
                        // A lone record while nothing else is being synced: sync it
                        // here, sparing its caller the hand-over to the syncer.
                        (Ok(()), Some(file))
                            if batch.len() == 1
                                && syncer
                                    .as_ref()
                                    .is_none_or(|s| s.in_flight.load(Ordering::Acquire) == 0) =>
                        {
                            let result = sync(&file);
                            settle(&thread_health, &result);
                            for reply in replies.drain(..) {
                                let _ = reply.send(result.clone());
                            }
                        }
                        (Ok(()), Some(file)) => {
                            if syncer.is_none() {
                                match spawn_syncer(&sink_name, Arc::clone(&thread_health)) {
                                    Ok(started) => syncer = Some(started),
                                    Err(err) => thread_health.set_failed(&err),
                                }
                            }
                            let unsynced = Unsynced {
                                file,
                                replies: std::mem::take(&mut replies),
                                items: std::mem::replace(
                                    &mut batch,
                                    Vec::with_capacity(last_batch.max(1)),
                                ),
                            };
                            let unsent = match &syncer {
                                Some(s) => {
                                    s.in_flight.fetch_add(1, Ordering::AcqRel);
                                    s.inbox.send(unsynced).err().map(|e| {
                                        s.in_flight.fetch_sub(1, Ordering::AcqRel);
                                        e.0
                                    })
                                }
                                None => Some(unsynced),
                            };
                            if let Some(unsynced) = unsent {
                                let stopped = AuditError::new("the audit sync thread has stopped");
                                thread_health.set_failed(&stopped);
                                for reply in unsynced.replies {
                                    let _ = reply.send(Err(stopped.clone()));
                                }
                            }
                        }
                        _ => {
                            for reply in replies.drain(..) {
                                let _ = reply.send(result.clone());
                            }
                        }
                    }
                    batch.clear();
                }
            })
            .map_err(|e| AuditError::new(format!("cannot start the audit writer thread: {e}")))?;
        Ok(Worker { jobs, health })
    }

    pub(crate) fn ready(&self) -> Result<(), AuditError> {
        self.health.ready()
    }

    pub(crate) fn stats(&self) -> SinkStats {
        let (records, batches) = self.health.written();
        SinkStats { records, batches }
    }

    /// Hand `record` to the writer thread; the future resolves once it is durable.
    pub(crate) fn record(&self, record: AuditRecord) -> BoxFuture<'static, Result<(), AuditError>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.jobs.send(Job {
            record: B::prepare(record),
            reply,
        });
        Box::pin(async move {
            if sent.is_err() {
                return Err(AuditError::new("the audit writer thread has stopped"));
            }
            answer
                .await
                .unwrap_or_else(|_| Err(AuditError::new("the audit writer thread has stopped")))
        })
    }
}
