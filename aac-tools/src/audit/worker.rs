//! The group commit shared by the file-backed sinks, leader/follower style, as databases
//! do it: the caller that finds the log idle writes its own record and makes it durable
//! itself, on its own thread (no hand-off, no wake-up of another thread); callers that
//! arrive while it does queue their records; when it is done it hands whatever queued to
//! the sink's writer thread, which writes every record waiting (up to a batch size) in
//! one batch, makes them durable once, answers all of their callers, and gives the log
//! back once nothing is waiting.
//!
//! So a lone caller pays one write and one flush, and nothing else; concurrent callers
//! share one flush per batch. Whatever does not depend on the order of records (encoding
//! them, for instance) is done by the callers before they join the queue
//! ([`Backend::prepare`]).
//!
//! Under load a caller that finds the log idle does not lead: while the last write had
//! company (records queued behind a leader, or a batch of several), the log is
//! contended, and a leader's batch of one would pay a whole transaction for one record
//! while the next ones queue behind it; its record goes to the writer thread, which
//! waits briefly for the others. The first write that finds nobody behind it makes the
//! log uncontended again.
//!
//! A caller leads only on a thread that may block: a worker of a multi-threaded tokio
//! runtime (whose other workers steal its queued tasks while it writes; with a single
//! worker, [`tokio::task::block_in_place`] moves them to another thread) or a thread
//! outside any runtime. On a current-thread runtime every record goes through the
//! writer thread.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{AuditError, AuditRecord};
use crate::BoxFuture;

/// Writes a batch of records durably, all or nothing.
pub(crate) trait Backend: Send + 'static {
    /// A record as the writer takes it. Writing blocks the thread, and must not enter an
    /// async runtime: a leading caller writes on a worker of its own runtime.
    type Item: Send + 'static;

    /// Turn a record into an item, on the caller's thread.
    fn prepare(record: AuditRecord) -> Self::Item;

    /// The item as one line of the error log, when it could not be written.
    fn describe(item: &Self::Item) -> String;

    /// The record `item` was made from, handed back to its caller when it could not be
    /// written ([`AuditError::with_record`]); `None` if it cannot be told. Called only
    /// then, on a failed write.
    fn restore(_item: &Self::Item) -> Option<AuditRecord> {
        None
    }

    /// Write `batch`, all or nothing, and make it durable before returning `Ok` — unless
    /// [`deferred_sync`](Backend::deferred_sync) names a file to sync.
    fn write_batch(&mut self, batch: &[Self::Item]) -> Result<(), AuditError>;

    /// A file whose sync makes the batch just written durable (the backend's own commit
    /// does not sync it). It is synced after the batch is written and before any of its
    /// callers is answered.
    fn deferred_sync(&self) -> Option<Arc<File>> {
        None
    }
}

type Reply = oneshot::Sender<Result<(), AuditError>>;

fn sync(file: &File) -> Result<(), AuditError> {
    file.sync_data()
        .map_err(|e| AuditError::new(format!("cannot flush the audit log to disk: {e}")))
}

/// Whether the sink can write, as [`AuditSink::ready`](super::AuditSink::ready) answers it.
#[derive(Debug)]
pub(crate) struct Health {
    healthy: AtomicBool,
    problem: Mutex<Option<AuditError>>,
    alive: AtomicBool,
    records: AtomicU64,
    batches: AtomicU64,
    busy_ns: AtomicU64,
    lost: AtomicU64,
}

impl Health {
    pub(crate) fn new(problem: Option<AuditError>) -> Health {
        Health {
            healthy: AtomicBool::new(problem.is_none()),
            problem: Mutex::new(problem),
            alive: AtomicBool::new(true),
            records: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// What was written so far.
    pub(crate) fn stats(&self) -> SinkStats {
        SinkStats {
            records: self.records.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            busy: Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed)),
            lost: self.lost.load(Ordering::Relaxed),
        }
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

/// What a file-backed sink wrote since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SinkStats {
    /// Records written durably.
    pub records: u64,
    /// Batches that wrote them: transactions for SQLite, `write` + sync for a file.
    /// With group commit under load, far fewer than records.
    pub batches: u64,
    /// Time spent writing batches and making them durable (the backend's own work:
    /// SQLite's transaction, a file's `write` and sync), failed attempts included.
    /// `busy / batches` is what one durable write costs where the server runs.
    pub busy: Duration,
    /// Records given to the sink that it could not write (a failed or panicking write,
    /// or a writer thread that stopped with records queued); each is in the error log
    /// (`audit record could not be written`, with the record) instead. A record given
    /// again after it failed (an owed record, retried) counts once, at its first failure.
    pub lost: u64,
}

/// How the writer groups records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batching {
    /// The most records in one batch (1: one durable write per record).
    pub(crate) max_batch: usize,
    /// When the previous batch held several records (callers are concurrent), the writer
    /// thread waits for as many records as it held, while they arrive less than this
    /// apart. Zero: never wait.
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

struct Job<I> {
    record: I,
    reply: Reply,
}

/// Who holds the log, and who waits for it.
struct Queue<I> {
    /// A caller or the writer thread is writing; newcomers queue.
    busy: bool,
    /// The writer thread owns the log (it drains the queue until it is empty).
    handed_over: bool,
    /// Records waiting for the next batch.
    jobs: Vec<Job<I>>,
    /// The last write had company: records queued behind it, or it was a batch of
    /// several. A caller that finds the log idle leads only when this is false.
    contended: bool,
    /// Every [`Worker`] is gone: the writer thread ends once the queue is empty.
    closed: bool,
}

struct Shared<B: Backend> {
    queue: Mutex<Queue<B::Item>>,
    /// Wakes the writer thread when the log is handed over or the sink closes.
    handover: Condvar,
    /// Held by whoever writes (a leading caller or the writer thread). Taken out and
    /// dropped by the writer thread when it ends: a backend may own a runtime, which must
    /// not be dropped on a caller's (async) thread.
    backend: Mutex<Option<B>>,
    health: Arc<Health>,
    batching: Batching,
    name: String,
    /// Set when the writer thread has ended (it wrote what it was given, or died).
    finished: Mutex<bool>,
    finished_cv: Condvar,
    /// The records last logged as lost, so that one given again is not logged again.
    logged_lost: Mutex<LoggedLost>,
}

/// The last [`LoggedLost::KEPT`] records logged as lost, by a digest of their text.
#[derive(Default)]
struct LoggedLost {
    order: std::collections::VecDeque<u64>,
    seen: std::collections::HashSet<u64>,
}

impl LoggedLost {
    const KEPT: usize = 4096;

    /// Whether `described` is not among the records last logged (and remember it).
    fn first_time(&mut self, described: &str) -> bool {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        described.hash(&mut hasher);
        let digest = hasher.finish();
        if !self.seen.insert(digest) {
            return false;
        }
        self.order.push_back(digest);
        if self.order.len() > Self::KEPT
            && let Some(oldest) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        true
    }
}

/// How long the last [`Worker`]'s drop waits for the writer thread to write what is
/// queued (the records of calls dropped as a server shuts down, say) before it gives up.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<B: Backend> Shared<B> {
    /// Write `batch` and make it durable: the one place records reach the backend.
    fn commit(&self, batch: &[B::Item]) -> Result<(), AuditError> {
        let mut guard = lock(&self.backend);
        let Some(backend) = guard.as_mut() else {
            return Err(AuditError::new("the audit writer thread has stopped"));
        };
        let started = Instant::now();
        // A backend that panics (a bug, never a refusal) fails its batch like any other
        // failed write: its callers get an error (503 `audit_unavailable`, for a tool
        // call), its records reach the error log, the sink is marked not ready until a
        // write succeeds again, and the writer thread lives on.
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            backend.write_batch(batch)?;
            self.health
                .records
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            self.health.batches.fetch_add(1, Ordering::Relaxed);
            if let Some(file) = backend.deferred_sync() {
                sync(&file)
                    .inspect_err(|err| {
                        tracing::error!(error = %err, "audit records were written but could not be made durable");
                    })
                    .map_err(AuditError::in_doubt)?;
            }
            Ok(())
        }));
        let result = written.unwrap_or_else(|_| Err(AuditError::new("the audit backend panicked")));
        let busy = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.health.busy_ns.fetch_add(busy, Ordering::Relaxed);
        drop(guard);
        match &result {
            Ok(()) => self.health.set_ok(),
            Err(err) => {
                self.health.set_failed(err);
                self.lost(err, batch.iter());
            }
        }
        result
    }

    /// Records lost to the sink: kept in the error log at least, one line each, so that
    /// an operator can reconstruct what happened. A record given again after it failed
    /// (the record a call is owed, retried until the sink writes it) is logged and
    /// counted once: on a full disk one such record was logged 33,069 times in 17 s.
    fn lost<'a>(&self, err: &AuditError, records: impl Iterator<Item = &'a B::Item>) {
        for record in records {
            let described = B::describe(record);
            if !lock(&self.logged_lost).first_time(&described) {
                continue;
            }
            self.health.lost.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                sink = %self.name,
                error = %err,
                record = %described,
                "audit record could not be written"
            );
        }
    }

    /// The leading caller is done: give the log back, or to the writer thread when
    /// records queued meanwhile.
    fn release(&self) {
        let mut queue = lock(&self.queue);
        queue.contended = !queue.jobs.is_empty();
        if queue.jobs.is_empty() {
            queue.busy = false;
            if queue.closed {
                drop(queue);
                self.handover.notify_one();
            }
        } else {
            queue.handed_over = true;
            drop(queue);
            self.handover.notify_one();
        }
    }

    /// The writer thread: waits until the log is handed over, then writes batches until
    /// nothing waits.
    fn run(&self) {
        let max_batch = self.batching.max_batch.max(1);
        let mut batch: Vec<B::Item> = Vec::new();
        let mut replies: Vec<Reply> = Vec::new();
        let mut last_batch = 0;
        loop {
            let mut queue = lock(&self.queue);
            while !queue.handed_over {
                if queue.closed && !queue.busy {
                    drop(queue);
                    drop(lock(&self.backend).take());
                    return;
                }
                queue = self.handover.wait(queue).unwrap_or_else(|e| e.into_inner());
            }
            // The callers answered by the last batch are about to send their next
            // records: waiting for them (as many as the last batch held) lets every
            // concurrent caller share this batch's flush, instead of splitting into
            // cohorts that alternate between two flushes. The wait ends early when no
            // record arrived for `linger`; it polls rather than sleeps, since a
            // sleeping thread wakes late on a busy machine.
            let target = last_batch.min(max_batch);
            if target > 1 && queue.jobs.len() < target && !self.batching.linger.is_zero() {
                let started = Instant::now();
                let mut last_arrival = started;
                let mut seen = queue.jobs.len();
                while queue.jobs.len() < target {
                    drop(queue);
                    std::thread::yield_now();
                    queue = lock(&self.queue);
                    let now = Instant::now();
                    if queue.jobs.len() > seen {
                        seen = queue.jobs.len();
                        last_arrival = now;
                    } else if now - last_arrival >= self.batching.linger
                        || now - started >= self.batching.max_linger
                    {
                        break;
                    }
                }
            }
            if queue.jobs.is_empty() {
                queue.handed_over = false;
                queue.busy = false;
                // After a batch of several, the next caller queues for this thread
                // (which then waits for the others) rather than write alone; after a
                // batch of one, it leads.
                queue.contended = last_batch > 1;
                last_batch = 0;
                continue;
            }
            let take = queue.jobs.len().min(max_batch);
            for job in queue.jobs.drain(..take) {
                batch.push(job.record);
                replies.push(job.reply);
            }
            drop(queue);
            last_batch = batch.len();
            let result = self.commit(&batch);
            for (reply, item) in replies.drain(..).zip(&batch) {
                let _ = reply.send(handed_back::<B>(&result, item));
            }
            batch.clear();
        }
    }
}

/// What the caller of `item` is answered: `result`, with the record handed back if the
/// write failed ([`Backend::restore`]).
fn handed_back<B: Backend>(
    result: &Result<(), AuditError>,
    item: &B::Item,
) -> Result<(), AuditError> {
    match result {
        Ok(()) => Ok(()),
        // Perhaps written: handing it back could put it in the trail twice.
        Err(err) if err.is_in_doubt() => Err(err.clone()),
        Err(err) => Err(match B::restore(item) {
            Some(record) => err.clone().with_record(record),
            None => err.clone(),
        }),
    }
}

/// Whether this thread may write a record itself (see the module's documentation).
fn may_lead_here() -> bool {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => matches!(
            handle.runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        ),
        Err(_) => true,
    }
}

/// Run `f`, which blocks (one commit, one flush), on this thread.
///
/// On a runtime with several workers it simply runs: the other workers steal this one's
/// queued tasks meanwhile, and handing the worker's core to another thread
/// (`block_in_place`) would cost a lone caller more than the commit itself (it moves the
/// runtime to another thread at every call: measured 30–40 µs more per call here). On a
/// runtime with a single worker, whose tasks nobody could steal, `block_in_place` moves
/// them to another thread while this one writes.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.metrics().num_workers() < 2 => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Ends the writer thread when the last [`Worker`] is dropped.
struct Closer<B: Backend>(Arc<Shared<B>>);

impl<B: Backend> Drop for Closer<B> {
    /// Close the queue, then wait (at most [`CLOSE_WAIT`]) for the writer thread to write
    /// what it holds and end: a process that exits once its server is dropped (the
    /// runtime's tasks, their attempts' records with them) would otherwise end the thread
    /// with those records still queued.
    fn drop(&mut self) {
        let shared = &self.0;
        lock(&shared.queue).closed = true;
        shared.handover.notify_one();
        let deadline = Instant::now() + CLOSE_WAIT;
        let mut finished = lock(&shared.finished);
        while !*finished {
            let now = Instant::now();
            if now >= deadline {
                let queued = lock(&shared.queue).jobs.len();
                tracing::error!(
                    sink = %shared.name,
                    queued,
                    "the audit writer did not finish within {} s; the records it still holds may be lost",
                    CLOSE_WAIT.as_secs()
                );
                return;
            }
            finished = shared
                .finished_cv
                .wait_timeout(finished, deadline - now)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

/// The caller's side of a sink's group commit. Cheap to clone; the writer thread ends
/// when the last clone is dropped, after answering every record it was given.
pub(crate) struct Worker<B: Backend> {
    shared: Arc<Shared<B>>,
    _closer: Arc<Closer<B>>,
}

impl<B: Backend> Clone for Worker<B> {
    fn clone(&self) -> Self {
        Worker {
            shared: Arc::clone(&self.shared),
            _closer: Arc::clone(&self._closer),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Worker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("health", &self.shared.health)
            .finish()
    }
}

impl<B: Backend> Worker<B> {
    /// Start the writer thread named `name` over `backend`, grouping records as
    /// `batching` says.
    pub(crate) fn spawn(
        name: &str,
        backend: B,
        batching: Batching,
        health: Arc<Health>,
    ) -> Result<Worker<B>, AuditError> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                busy: false,
                handed_over: false,
                jobs: Vec::new(),
                contended: false,
                closed: false,
            }),
            handover: Condvar::new(),
            backend: Mutex::new(Some(backend)),
            health,
            batching,
            name: name.to_owned(),
            finished: Mutex::new(false),
            finished_cv: Condvar::new(),
            logged_lost: Mutex::default(),
        });
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                // Marks the writer as stopped however the thread ends, panics included,
                // and answers whoever still waits in the queue (with an error).
                struct Alive<'a, B: Backend>(&'a Shared<B>);
                impl<B: Backend> Drop for Alive<'_, B> {
                    fn drop(&mut self) {
                        self.0.health.alive.store(false, Ordering::Release);
                        let stranded = std::mem::take(&mut lock(&self.0.queue).jobs);
                        let err = AuditError::new("the audit writer thread has stopped");
                        self.0.lost(&err, stranded.iter().map(|job| &job.record));
                        for job in stranded {
                            let _ = job.reply.send(Err(err.clone()));
                        }
                        *lock(&self.0.finished) = true;
                        self.0.finished_cv.notify_all();
                    }
                }
                let _alive = Alive(&*thread_shared);
                thread_shared.run();
            })
            .map_err(|e| AuditError::new(format!("cannot start the audit writer thread: {e}")))?;
        Ok(Worker {
            _closer: Arc::new(Closer(Arc::clone(&shared))),
            shared,
        })
    }

    pub(crate) fn ready(&self) -> Result<(), AuditError> {
        self.shared.health.ready()
    }

    pub(crate) fn stats(&self) -> SinkStats {
        self.shared.health.stats()
    }

    /// Write `record`; the future resolves once it is durable.
    ///
    /// The record is written, or queued to be, before this returns: dropping the future
    /// unfinished loses the answer, not the record.
    pub(crate) fn record(&self, record: AuditRecord) -> BoxFuture<'static, Result<(), AuditError>> {
        let item = B::prepare(record);
        let shared = &self.shared;
        let mut queue = lock(&shared.queue);
        // Read under the queue's lock: a dying writer thread marks itself stopped, then
        // empties the queue under this lock, so nothing queued now could be stranded.
        if !shared.health.alive.load(Ordering::Acquire) {
            return Box::pin(async { Err(AuditError::new("the audit writer thread has stopped")) });
        }
        if queue.busy || queue.contended || !may_lead_here() {
            let (reply, answer) = oneshot::channel();
            queue.jobs.push(Job {
                record: item,
                reply,
            });
            if !queue.busy {
                queue.busy = true;
                queue.handed_over = true;
                drop(queue);
                shared.handover.notify_one();
            }
            return Box::pin(async move {
                answer
                    .await
                    .unwrap_or_else(|_| Err(AuditError::new("the audit writer thread has stopped")))
            });
        }
        // The log is idle: this caller leads.
        queue.busy = true;
        drop(queue);
        /// Gives the log back even if the backend panics.
        struct Release<'a, B: Backend>(&'a Shared<B>);
        impl<B: Backend> Drop for Release<'_, B> {
            fn drop(&mut self) {
                self.0.release();
            }
        }
        let result = {
            let _release = Release(shared);
            blocking(|| shared.commit(std::slice::from_ref(&item)))
        };
        let result = handed_back::<B>(&result, &item);
        drop(item);
        Box::pin(std::future::ready(result))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::thread::ThreadId;

    use serde_json::json;

    use super::*;
    use crate::audit::{CallKind, Outcome};

    fn record(tool: &str) -> AuditRecord {
        AuditRecord {
            tool: tool.to_owned(),
            outcome: Outcome::Success,
            reason: None,
            check: None,
            status: 200,
            scopes_provided: Vec::new(),
            timestamp: "2026-12-01T00:00:00.000000Z".to_owned(),
            principal: None,
            workspace: None,
            transport: "test".to_owned(),
            request_id: None,
            duration_us: 0,
            access_level: None,
            arguments: json!({}),
            confirmed_by: None,
            kind: CallKind::Tool,
        }
    }

    /// What the backend saw: each batch's records and the thread that wrote it.
    #[derive(Default)]
    struct Seen {
        batches: Mutex<Vec<(ThreadId, Vec<String>)>>,
        /// Makes each write take this long, so that callers pile up behind it.
        delay: Duration,
        /// Panics on a batch holding this record.
        panic_on: Option<&'static str>,
        writes: AtomicUsize,
    }

    struct Probe(Arc<Seen>);

    /// A record as the probe takes it: its tool's name.
    struct Item(String);

    /// The name of a record whose drop on the writer thread panics there: the one way
    /// left to stop that thread (a backend's own panics are caught), standing for a bug
    /// in this module.
    const KILLS_THE_WRITER: &str = "kills-the-writer";

    impl Drop for Item {
        fn drop(&mut self) {
            if self.0 == KILLS_THE_WRITER
                && !std::thread::panicking()
                && std::thread::current().name() == Some("aac-audit-test")
            {
                panic!("the writer thread fails after writing {}", self.0);
            }
        }
    }

    impl Backend for Probe {
        type Item = Item;
        fn prepare(record: AuditRecord) -> Item {
            Item(record.tool)
        }
        fn describe(item: &Item) -> String {
            item.0.clone()
        }
        fn restore(item: &Item) -> Option<AuditRecord> {
            Some(record(&item.0))
        }
        fn write_batch(&mut self, batch: &[Item]) -> Result<(), AuditError> {
            self.0.writes.fetch_add(1, Ordering::SeqCst);
            if batch.iter().any(|r| r.0 == "refused") {
                return Err(AuditError::new("refused"));
            }
            if batch.iter().any(|r| r.0 == "in-doubt") {
                return Err(AuditError::new("the answer was lost").in_doubt());
            }
            std::thread::sleep(self.0.delay);
            if let Some(bad) = self.0.panic_on
                && batch.iter().any(|r| r.0 == bad)
            {
                panic!("the backend fails on {bad}");
            }
            let names = batch.iter().map(|r| r.0.clone()).collect();
            lock(&self.0.batches).push((std::thread::current().id(), names));
            Ok(())
        }
    }

    /// A record a write refused is handed back with the error, for the server to write
    /// later; one the write may have taken (in doubt) is not, or it could be there twice.
    #[test]
    fn a_refused_record_is_handed_back_and_one_in_doubt_is_not() {
        let seen = Arc::new(Seen::default());
        let worker = worker(&seen);
        let run = |tool: &str| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(worker.record(record(tool)))
        };
        let mut refused = run("refused").unwrap_err();
        assert_eq!(
            refused.take_record().map(|r| r.tool).as_deref(),
            Some("refused")
        );
        let mut doubtful = run("in-doubt").unwrap_err();
        assert!(doubtful.is_in_doubt());
        assert!(doubtful.take_record().is_none());
        assert!(run("fine").is_ok());
    }

    fn worker(seen: &Arc<Seen>) -> Worker<Probe> {
        Worker::spawn(
            "aac-audit-test",
            Probe(Arc::clone(seen)),
            Batching::group(1024),
            Arc::new(Health::new(None)),
        )
        .unwrap()
    }

    fn written(seen: &Seen) -> Vec<String> {
        lock(&seen.batches)
            .iter()
            .flat_map(|(_, b)| b.clone())
            .collect()
    }

    /// Records queued when the last handle of the sink goes (a server dropped as its
    /// process ends, the attempts of its runtime's tasks with it) are written before the
    /// drop returns: a process that exits right after loses none.
    #[test]
    fn dropping_the_last_handle_waits_for_what_is_queued() {
        let seen = Arc::new(Seen {
            delay: Duration::from_millis(150),
            ..Seen::default()
        });
        let sink = worker(&seen);
        // One record is being written (150 ms); meanwhile two more are queued for the
        // writer thread, their futures dropped (an abandoned call's record).
        let leader = queue_behind_a_leader(&sink, &seen, "first", &["second", "third"]);
        drop(sink);
        leader.join().unwrap();
        assert_eq!(written(&seen), ["first", "second", "third"]);
    }

    /// A thread outside any runtime leads with `first`; once its write is under way,
    /// `queued` are queued behind it, their futures dropped. The leader's thread, which
    /// ends with its id once `first` is written.
    fn queue_behind_a_leader(
        sink: &Worker<Probe>,
        seen: &Seen,
        first: &'static str,
        queued: &[&str],
    ) -> std::thread::JoinHandle<ThreadId> {
        let leader = {
            let sink = sink.clone();
            std::thread::spawn(move || {
                futures_ready(sink.record(record(first))).unwrap();
                std::thread::current().id()
            })
        };
        while seen.writes.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        for name in queued {
            drop(sink.record(record(name)));
        }
        leader
    }

    /// A lone caller on a runtime worker writes its own record on its own thread: no
    /// hand-off to the writer thread and back.
    #[test]
    fn a_lone_caller_writes_on_its_own_thread() {
        // One worker (its tasks moved away by `block_in_place`) and two.
        for workers in [1, 2] {
            lone_caller_on(workers);
        }
    }

    fn lone_caller_on(workers: usize) {
        let seen = Arc::new(Seen::default());
        let sink = worker(&seen);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .build()
            .unwrap();
        let callers = runtime.block_on(async {
            let mut threads = Vec::new();
            for n in 0..20 {
                let sink = sink.clone();
                let thread = tokio::spawn(async move {
                    let here = std::thread::current().id();
                    sink.record(record(&format!("call-{n}"))).await.unwrap();
                    here
                })
                .await
                .unwrap();
                threads.push(thread);
            }
            threads
        });
        let batches = lock(&seen.batches).clone();
        assert_eq!(batches.len(), 20, "one batch per sequential call");
        for ((writer, records), caller) in batches.iter().zip(&callers) {
            assert_eq!(records.len(), 1);
            assert_eq!(writer, caller, "{records:?} was written by another thread");
        }
        let stats = sink.stats();
        assert_eq!((stats.records, stats.batches), (20, 20));
        assert!(stats.busy > Duration::ZERO);
    }

    /// Callers that arrive while one writes wait for the writer thread, which writes
    /// them together, in order of arrival; every caller is answered once its record is
    /// written.
    #[test]
    fn concurrent_callers_share_batches_and_lose_nothing() {
        let seen = Arc::new(Seen {
            delay: Duration::from_millis(2),
            ..Seen::default()
        });
        let sink = worker(&seen);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for n in 0..200 {
                let sink = sink.clone();
                tasks.push(tokio::spawn(async move {
                    sink.record(record(&format!("call-{n}"))).await
                }));
            }
            for task in tasks {
                task.await.unwrap().unwrap();
            }
        });
        let mut all = written(&seen);
        assert_eq!(all.len(), 200);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 200, "a record was written twice");
        let stats = sink.stats();
        assert_eq!(stats.records, 200);
        assert!(
            stats.batches < 100,
            "{} batches for 200 concurrent records: no group commit",
            stats.batches
        );
    }

    /// Under load a caller that finds the log idle does not write alone: after a write
    /// with records queued behind it, the next record goes to the writer thread; after a
    /// write that had no company, callers lead again.
    #[test]
    fn after_contention_an_idle_log_is_left_to_the_writer_thread_until_a_write_goes_alone() {
        // Long enough for the two records below to queue while `first` is written, on a
        // busy machine too.
        let seen = Arc::new(Seen {
            delay: Duration::from_millis(100),
            ..Seen::default()
        });
        let sink = worker(&seen);
        let idle = |sink: &Worker<Probe>| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while lock(&sink.shared.queue).busy {
                assert!(Instant::now() < deadline, "the log never went idle");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // A leader outside any runtime writes `first` (100 ms); two records queue behind it
        // and are written together by the writer thread.
        let leader = queue_behind_a_leader(&sink, &seen, "first", &["second", "third"])
            .join()
            .unwrap();
        idle(&sink);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let on_a_worker = |name: &'static str| {
            let sink = sink.clone();
            runtime.block_on(async move {
                tokio::spawn(async move {
                    let here = std::thread::current().id();
                    sink.record(record(name)).await.unwrap();
                    here
                })
                .await
                .unwrap()
            })
        };
        // The log is idle, but its last write was a batch of two: `fourth` goes to the
        // writer thread, alone.
        let fourth = on_a_worker("fourth");
        idle(&sink);
        // That write had no company: `fifth` leads, on its own thread.
        let fifth = on_a_worker("fifth");
        let batches = lock(&seen.batches).clone();
        let names: Vec<Vec<String>> = batches.iter().map(|(_, b)| b.clone()).collect();
        assert_eq!(
            names,
            [
                vec!["first"],
                vec!["second", "third"],
                vec!["fourth"],
                vec!["fifth"]
            ]
        );
        let writer = batches[1].0;
        assert_eq!(
            batches[0].0, leader,
            "the first record was written by its caller"
        );
        assert_ne!(writer, leader);
        assert_eq!(batches[2].0, writer, "`fourth` went to the writer thread");
        assert_ne!(fourth, writer);
        assert_eq!(batches[3].0, fifth, "`fifth` was written by its caller");
    }

    /// On a current-thread runtime the caller cannot block: the writer thread writes.
    #[test]
    fn a_current_thread_runtime_hands_records_to_the_writer_thread() {
        let seen = Arc::new(Seen::default());
        let sink = worker(&seen);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            sink.record(record("one")).await.unwrap();
            sink.record(record("two")).await.unwrap();
        });
        let here = std::thread::current().id();
        let batches = lock(&seen.batches).clone();
        assert_eq!(batches.len(), 2);
        assert!(batches.iter().all(|(writer, _)| *writer != here));
    }

    /// A caller that goes away before its answer loses the answer, not the record.
    #[test]
    fn a_dropped_waiting_caller_still_has_its_record_written() {
        let seen = Arc::new(Seen {
            delay: Duration::from_millis(20),
            ..Seen::default()
        });
        let sink = worker(&seen);
        let leader = {
            let sink = sink.clone();
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap()
                    .block_on(sink.record(record("first")))
            })
        };
        // Wait until the first write is under way, then queue one and drop its future.
        while seen.writes.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        drop(sink.record(record("abandoned")));
        leader.join().unwrap().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while written(&seen).len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(written(&seen), ["first", "abandoned"]);
    }

    /// A backend that panics fails its batch like a failed write: the caller (leading,
    /// or waiting for the writer thread) gets an error, not the panic; the record is
    /// lost but counted (and logged); the sink is not ready until a write succeeds, and
    /// the log is usable again at once.
    #[test]
    fn a_panicking_write_fails_its_batch_and_the_log_goes_on() {
        let seen = Arc::new(Seen {
            panic_on: Some("boom"),
            ..Seen::default()
        });
        let sink = worker(&seen);
        // Leading, outside any runtime.
        let answer = futures_ready(sink.record(record("boom")));
        assert!(answer.is_err(), "{answer:?}");
        assert_eq!(sink.stats().lost, 1);
        assert_eq!(sink.stats().records, 0);
        assert!(
            sink.ready().is_err(),
            "a sink whose last write failed is not ready"
        );
        let runtime = tokio::runtime::Builder::new_multi_thread().build().unwrap();
        runtime.block_on(sink.record(record("after"))).unwrap();
        assert!(sink.ready().is_ok());
        // Through the writer thread (a current-thread runtime cannot lead): it survives.
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        current.block_on(async {
            assert!(sink.record(record("boom")).await.is_err());
            sink.record(record("again")).await.unwrap();
        });
        assert_eq!(written(&seen), ["after", "again"]);
        // The same record given again after it failed (an owed record retried) is
        // logged and counted once.
        assert_eq!(sink.stats().lost, 1);
    }

    /// The answer of a record written by a leading caller, which is ready at once.
    fn futures_ready<T>(future: BoxFuture<'static, T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    /// If the writer thread dies, whoever waits for it is answered with an error rather
    /// than left waiting, each lost record is counted (and logged), and later records are
    /// refused.
    #[test]
    fn a_dead_writer_thread_answers_its_queue_and_refuses_the_rest() {
        let seen = Arc::new(Seen {
            delay: Duration::from_millis(50),
            ..Seen::default()
        });
        let sink = worker(&seen);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            // The writer thread takes the first record (and dies once it has written it,
            // 50 ms later); `waiting` queues behind it meanwhile.
            let first = sink.record(record(KILLS_THE_WRITER));
            while seen.writes.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            let waiting = sink.record(record("waiting"));
            let timeout = Duration::from_secs(10);
            let first = tokio::time::timeout(timeout, first).await;
            assert!(
                first.expect("a caller was left waiting").is_ok(),
                "it was written"
            );
            let waiting = tokio::time::timeout(timeout, waiting).await;
            assert!(waiting.expect("a caller was left waiting").is_err());
            let deadline = Instant::now() + Duration::from_secs(10);
            while sink.ready().is_ok() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(sink.ready().is_err());
            assert!(sink.record(record("after")).await.is_err());
        });
        // The record stranded in its queue; `after` was refused, never taken.
        assert_eq!(written(&seen), [KILLS_THE_WRITER]);
        assert_eq!(sink.stats().lost, 1);
    }
}
