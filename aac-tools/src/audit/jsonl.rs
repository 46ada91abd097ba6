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
            // To see whether it ends with a line a crash cut short.
            .read(true)
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
    ///
    /// Not the process's stdout when the server speaks MCP over stdio: the records would
    /// be written between the protocol's messages, breaking the stream and handing the
    /// trail to the client. A writer that drops what it is given (`std::io::sink()`)
    /// keeps nothing, and nothing here can tell: the records are as durable as the
    /// writer makes them.
    pub fn writer(
        name: &str,
        writer: impl Write + Send + 'static,
    ) -> Result<JsonLinesSink, AuditError> {
        JsonLinesSink::start(name.to_owned(), Target::Stream(Box::new(writer)))
    }

    fn start(name: String, target: Target) -> Result<JsonLinesSink, AuditError> {
        // A line a crash cut short (written, never synced, so never answered) stays as
        // it is, on a line of its own: the next record starts on the next line rather
        // than being glued to it.
        let torn = match &target {
            Target::File(file) => super::ends_with_a_cut_line(file).map_err(|e| {
                AuditError::new(format!("cannot read the end of the audit {name}: {e}"))
            })?,
            Target::Stream(_) => false,
        };
        let backend = LinesBackend {
            target,
            name: name.clone(),
            buf: Vec::with_capacity(4096),
            torn,
            cut_back_to: None,
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
    /// The file ends with a line a crash cut short: the next batch starts with a newline.
    torn: bool,
    /// A failed batch left part of itself in the file (a full disk takes what fits): the
    /// file is cut back to this length before anything more is written, so that the
    /// records written again later are not in it twice, nor a torn line.
    cut_back_to: Option<u64>,
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
                if let Some(len) = self.cut_back_to {
                    file.set_len(len).map_err(failed)?;
                    file.sync_data().map_err(failed)?;
                    self.cut_back_to = None;
                }
                let start = file.metadata().map_err(failed)?.len();
                if self.torn {
                    self.buf.insert(0, b'\n');
                }
                let written = file.write_all(&self.buf).and_then(|()| file.sync_data());
                if let Err(err) = written {
                    // Whatever part of the batch went in comes out again (now, or before
                    // the next write if this fails too): the batch fails whole.
                    self.cut_back_to = Some(start);
                    if file.set_len(start).and_then(|()| file.sync_data()).is_ok() {
                        self.cut_back_to = None;
                    }
                    return Err(failed(err));
                }
                self.torn = false;
            }
            Target::Stream(out) => {
                out.write_all(&self.buf).map_err(failed)?;
                out.flush().map_err(failed)?;
            }
        }
        Ok(())
    }
}
