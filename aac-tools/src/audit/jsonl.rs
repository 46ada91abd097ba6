//! The JSON lines sink: one record per line, to a file or to stderr.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::worker::{Backend, Batching, Health, SinkStats, Worker};
use super::{AuditError, AuditRecord, AuditSink};
use crate::BoxFuture;

/// Writes each record as one line of JSON (the [`AuditRecord`] JSON form), to a file or
/// to stderr. Cheap to clone.
///
/// A lone caller writes its line and (for a file) syncs the file with `fdatasync` on its
/// own thread; lines that queue meanwhile are written together by the sink's writer
/// thread, in one `write` and one sync, before any of their calls is answered: records
/// are durable before the answer, and concurrent calls share a sync.
///
/// ```
/// use aac_tools::audit::JsonLinesSink;
/// # let dir = tempfile::tempdir().unwrap();
/// let sink = JsonLinesSink::file(dir.path().join("audit.jsonl")).unwrap();
/// // Server::builder(registry).audit(sink)…
/// # drop(sink);
/// ```
#[derive(Clone)]
pub struct JsonLinesSink {
    worker: Worker<LinesBackend>,
    target: Arc<str>,
}

impl fmt::Debug for JsonLinesSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonLinesSink")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl JsonLinesSink {
    /// Append to the file at `path` (created if missing), syncing it after each batch.
    pub fn file(path: impl AsRef<Path>) -> Result<JsonLinesSink, AuditError> {
        let path: PathBuf = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| {
                AuditError::new(format!(
                    "cannot open the audit file `{}`: {e}",
                    path.display()
                ))
            })?;
        JsonLinesSink::start(format!("file `{}`", path.display()), Target::File(file))
    }

    /// Records written and the batches (one `write` and one sync each) that wrote them.
    pub fn stats(&self) -> SinkStats {
        self.worker.stats()
    }

    /// Write to the process's stderr (flushed after each batch; nothing to sync).
    pub fn stderr() -> JsonLinesSink {
        JsonLinesSink::writer("stderr", std::io::stderr())
            .unwrap_or_else(|e| panic!("cannot start the audit writer thread: {e}"))
    }

    /// Write to any writer, flushed after each batch. `name` says where it goes, for
    /// error messages.
    pub fn writer(
        name: &str,
        writer: impl Write + Send + 'static,
    ) -> Result<JsonLinesSink, AuditError> {
        JsonLinesSink::start(name.to_owned(), Target::Stream(Box::new(writer)))
    }

    fn start(name: String, target: Target) -> Result<JsonLinesSink, AuditError> {
        let backend = LinesBackend {
            target,
            name: name.clone(),
            buf: Vec::with_capacity(4096),
        };
        let worker = Worker::spawn(
            "aac-audit-jsonl",
            backend,
            Batching::group(1024),
            Arc::new(Health::new(None)),
        )?;
        Ok(JsonLinesSink {
            worker,
            target: name.into(),
        })
    }
}

impl AuditSink for JsonLinesSink {
    fn ready(&self) -> Result<(), AuditError> {
        self.worker.ready()
    }

    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        self.worker.record(record)
    }
}

enum Target {
    File(File),
    Stream(Box<dyn Write + Send>),
}

struct LinesBackend {
    target: Target,
    name: String,
    buf: Vec<u8>,
}

impl Backend for LinesBackend {
    /// The record's line, newline included.
    type Item = Vec<u8>;

    fn prepare(record: AuditRecord) -> Vec<u8> {
        // An `AuditRecord` always serializes (string keys, no failing impls).
        let mut line = serde_json::to_vec(&record).unwrap_or_default();
        line.push(b'\n');
        line
    }

    fn restore(line: &Vec<u8>) -> Option<AuditRecord> {
        serde_json::from_slice(line).ok()
    }

    fn describe(line: &Vec<u8>) -> String {
        String::from_utf8_lossy(line).trim_end().to_owned()
    }

    fn write_batch(&mut self, batch: &[Vec<u8>]) -> Result<(), AuditError> {
        self.buf.clear();
        for line in batch {
            self.buf.extend_from_slice(line);
        }
        let failed =
            |e: std::io::Error| AuditError::new(format!("cannot write to {}: {e}", self.name));
        match &mut self.target {
            Target::File(file) => {
                file.write_all(&self.buf).map_err(failed)?;
                file.sync_data().map_err(failed)?;
            }
            Target::Stream(out) => {
                out.write_all(&self.buf).map_err(failed)?;
                out.flush().map_err(failed)?;
            }
        }
        Ok(())
    }
}
