//! The audit trail: one durable record for every `tools/call` attempt, allowed or refused.
//!
//! The pipeline builds an [`AuditRecord`] for each attempt and hands it to an
//! [`AuditSink`]. A sink that cannot write makes the call fail closed with 503
//! `audit_unavailable`: [`AuditSink::ready`] is asked before the handler runs, and the
//! answer leaves the server only after [`AuditSink::record`] returned.
//!
//! Sinks:
//!
//! - [`SqliteSink`] (feature `sqlite`): the append-only, hash-chained table `aac_audit`,
//!   with group commit; read it with [`AuditQuery`], [`AuditQuery::summary`],
//!   [`format_table`], [`format_json_lines`] or the `audit` command ([`AuditCommand`]), and
//!   check it with [`verify_chain`];
//! - [`JsonLinesSink`]: one JSON object per line, to a file (synced) or to stderr;
//! - [`FanOut`]: several sinks at once;
//! - [`MemorySink`]: in memory, for tests.
//!
//! ```
//! use aac_tools::audit::SqliteSink;
//! use aac_tools::{Registry, Server};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("app.db");
//! let server = Server::builder(Registry::collect().unwrap())
//!     // Never fails: a database that cannot be opened refuses every call with 503.
//!     .audit(SqliteSink::open_or_unavailable(&path))
//!     .build()
//!     .unwrap();
//! # drop(server);
//! ```

#[cfg(feature = "sqlite")]
mod command;
mod fanout;
#[cfg(feature = "sqlite")]
mod format;
mod jsonl;
#[cfg(feature = "sqlite")]
mod query;
#[cfg(feature = "sqlite")]
mod sqlite;
mod time_format;
mod worker;

#[cfg(feature = "sqlite")]
pub use command::AuditCommand;
pub use fanout::FanOut;
#[cfg(feature = "sqlite")]
pub(crate) use format::printable;
#[cfg(feature = "sqlite")]
pub use format::{format_json_lines, format_table};
pub use jsonl::JsonLinesSink;
#[cfg(feature = "sqlite")]
pub use query::{AuditQuery, AuditSummary, DayCount, HourlyDenials, ToolRefusals, parse_time};
#[cfg(feature = "sqlite")]
pub use sqlite::{
    AUDIT_COLUMNS, AUDIT_TABLE, BrokenLink, ChainReport, CommitMode, GENESIS_HASH, SqliteSink,
    SqliteSinkBuilder, StoredRecord, Synchronous, ensure_table, open_reader, verify_chain,
};
pub use worker::SinkStats;

use std::fmt;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::BoxFuture;
use crate::access::AccessLevel;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The handler ran and succeeded.
    Success,
    /// A check refused the call (or the handler refused it with 401/403).
    Denied,
    /// The handler ran and failed.
    Error,
}

impl Outcome {
    /// `success`, `denied` or `error`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The check of the pipeline that refused a call, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// 1. No valid principal.
    Authenticate,
    /// Streamable HTTP: the MCP layer refused the request the `/mcp` gate saw as a
    ///    `tools/call` (malformed, or headers that contradict the body) before the tool
    ///    was called.
    Protocol,
    /// 1. Streamable HTTP: the request names an MCP session that another principal
    ///    opened (answered 404 `session_not_found`, as an unknown session).
    Session,
    /// 2. No such tool.
    FindTool,
    /// 2. The tool is hidden by read-only mode.
    ReadOnlyMode,
    /// 3. The principal lacks a scope.
    Scope,
    /// 4. A destructive call without `confirm: true`.
    Confirm,
    /// 5. The arguments do not match the input schema.
    Validate,
    /// 7. The audit sink cannot write.
    Audit,
    /// 6. The handler itself returned an error.
    Handler,
}

impl Check {
    /// The snake_case name of the check.
    pub const fn as_str(self) -> &'static str {
        match self {
            Check::Authenticate => "authenticate",
            Check::Protocol => "protocol",
            Check::Session => "session",
            Check::FindTool => "find_tool",
            Check::ReadOnlyMode => "read_only_mode",
            Check::Scope => "scope",
            Check::Confirm => "confirm",
            Check::Validate => "validate",
            Check::Audit => "audit",
            Check::Handler => "handler",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One audit record. Its JSON form is a superset of
/// `{"tool", "outcome", "reason", "scopes_provided", "timestamp"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The tool named by the call (even if no such tool exists).
    pub tool: String,
    /// How the attempt ended.
    pub outcome: Outcome,
    /// The error's machine reason (`insufficient_scope`, `destructive_flag_missing`…);
    /// `null` on success.
    pub reason: Option<String>,
    /// The check that refused the call, or `handler` for a handler error.
    pub check: Option<Check>,
    /// The status answered: 200 on success, else the error's status.
    pub status: u16,
    /// The scopes of the caller's principal (empty when there was none).
    pub scopes_provided: Vec<String>,
    /// When the call arrived, RFC 3339 in UTC.
    pub timestamp: String,
    /// The principal's subject, if authenticated.
    pub principal: Option<String>,
    /// The principal's workspace, if any.
    pub workspace: Option<String>,
    /// `stdio`, `streamable_http`, `http` or `in_process`.
    pub transport: String,
    /// The request id (JSON-RPC id or HTTP request id), if any.
    pub request_id: Option<String>,
    /// From arrival to answer, in microseconds.
    pub duration_us: u64,
    /// The tool's access level (`read`, `write`, `delete`), if the tool exists.
    pub access_level: Option<AccessLevel>,
    /// The arguments, redacted: every key with a hash of its value, except the fields
    /// the tool opted in to storing verbatim and the framework's own `confirm`.
    pub arguments: Value,
}

impl Serialize for AccessLevel {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for AccessLevel {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        match s.as_str() {
            "read" => Ok(AccessLevel::Read),
            "write" => Ok(AccessLevel::Write),
            "delete" => Ok(AccessLevel::Delete),
            other => Err(serde::de::Error::unknown_variant(
                other,
                &["read", "write", "delete"],
            )),
        }
    }
}

/// Redact call arguments: each key maps to `sha256:` and the first 16 hex digits of the
/// hash of its value's JSON, except `keep` fields and `confirm`, which are kept verbatim.
pub fn redact_arguments(arguments: Option<&Map<String, Value>>, keep: &[&str]) -> Value {
    let Some(arguments) = arguments else {
        return Value::Object(Map::new());
    };
    let redacted = arguments
        .iter()
        .map(|(key, value)| {
            let kept = key == "confirm" || keep.contains(&key.as_str());
            let value = if kept {
                value.clone()
            } else {
                // One buffer and a hex table: this runs for every argument of every call.
                let json = serde_json::to_vec(value).unwrap_or_default();
                let digest = Sha256::digest(&json);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut text = String::with_capacity(7 + 16);
                text.push_str("sha256:");
                for b in &digest[..8] {
                    text.push(char::from(HEX[usize::from(b >> 4)]));
                    text.push(char::from(HEX[usize::from(b & 0x0f)]));
                }
                Value::String(text)
            };
            (key.clone(), value)
        })
        .collect();
    Value::Object(redacted)
}

/// Why a sink could not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditError {
    message: String,
}

impl AuditError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> AuditError {
        AuditError {
            message: message.into(),
        }
    }
}

impl fmt::Display for AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AuditError {}

/// Where audit records go.
pub trait AuditSink: Send + Sync + 'static {
    /// A cheap check, before the handler runs, that a record could be written now.
    /// An error refuses the call with 503 `audit_unavailable`.
    fn ready(&self) -> Result<(), AuditError>;

    /// Write one record durably. The answer to the call waits for this.
    ///
    /// Hand the record off (to a queue, a writer thread…) before returning the future, as
    /// the built-in sinks do: the future may be dropped unfinished if the caller goes away.
    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>>;
}

impl<S: AuditSink + ?Sized> AuditSink for Arc<S> {
    fn ready(&self) -> Result<(), AuditError> {
        (**self).ready()
    }
    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        (**self).record(record)
    }
}

/// Keeps records in memory; for tests.
#[derive(Debug, Default, Clone)]
pub struct MemorySink {
    records: Arc<Mutex<Vec<AuditRecord>>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> MemorySink {
        MemorySink::default()
    }

    /// Every record so far, oldest first.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forget every record.
    pub fn clear(&self) {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl AuditSink for MemorySink {
    fn ready(&self) -> Result<(), AuditError> {
        Ok(())
    }
    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(record);
        Box::pin(async { Ok(()) })
    }
}

pub(crate) use time_format::now_timestamp;
#[cfg(feature = "sqlite")]
pub(crate) use time_format::{canonical_timestamp, format_timestamp};
