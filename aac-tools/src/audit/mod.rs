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
pub(crate) mod sqlite;
mod time_format;
pub(crate) mod worker;

#[cfg(feature = "sqlite")]
pub use command::AuditCommand;
#[cfg(feature = "sqlite")]
#[cfg(feature = "cli")]
pub(crate) use command::verdict;
pub use fanout::FanOut;
#[cfg(feature = "sqlite")]
pub(crate) use format::printable;
#[cfg(feature = "sqlite")]
pub use format::{format_json_lines, format_table};
#[cfg(feature = "sqlite")]
#[cfg(feature = "cli")]
pub(crate) use format::{json_text, table_cell};
pub use jsonl::JsonLinesSink;
#[cfg(feature = "sqlite")]
#[cfg(feature = "cli")]
pub(crate) use query::parse_time_at;
#[cfg(feature = "sqlite")]
pub use query::{
    AuditQuery, AuditSummary, CALLS_OF_A_RECORD_SQL, DayCount, HourlyDenials, KindCount, OTHERS,
    PER_HOUR, TOOL_AS_COUNTED_SQL, ToolRefusals, parse_time,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{
    AUDIT_COLUMNS, AUDIT_TABLE, BrokenLink, ChainReport, CommitMode, GENESIS_HASH, SqliteSink,
    SqliteSinkBuilder, StoredRecord, Synchronous, ensure_table, open_reader, verify_chain,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{
    Checkpoint, CheckpointKey, CheckpointReport, read_checkpoints, verify_checkpoints,
    write_checkpoint, write_checkpoint_for,
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
    /// The transport refused the request before the tool was called: over Streamable
    ///    HTTP and stdio, the MCP layer (malformed, headers that contradict the body, a
    ///    batch); over HTTP, also the `Host`/`Origin` guard (reason `host_not_allowed`,
    ///    `origin_not_allowed` or `invalid_host`: DNS rebinding, a foreign page).
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
    /// 1. Too many calls of this principal, or (before authentication) too many refusals
    ///    from this peer address.
    RateLimit,
    /// 4. A destructive call without `confirm: true`, or (policy `user`) without the
    ///    person's accept: declined, timed out, not askable, asked (2026-07-28), or an
    ///    invalid `requestState`.
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
            Check::RateLimit => "rate_limit",
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
    /// Who confirmed a destructive call that ran: `argument` (`confirm: true`), `user`
    /// (a person, through the client) or `argument_fallback` (the policy asks a person,
    /// the client could not); `null` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed_by: Option<String>,
    /// What was called: a tool (then `tool` is its name), a resource read (`tool` is the
    /// URI), a prompt (its name) or a completion (the prompt name or URI template).
    /// Left out of the JSON form for tools.
    #[serde(default, skip_serializing_if = "CallKind::is_tool")]
    pub kind: CallKind,
}

impl AuditRecord {
    /// This record as its call was answered when the record could not be written: 503,
    /// check `audit`, reason `audit_unavailable` (its `outcome` still says how the call
    /// ended), whatever it was refused for first (a token store that could not be read,
    /// 503 `token_store_unavailable`, is answered `audit_unavailable` too). Not a record
    /// whose answer did not wait on its write: one already answered 503
    /// `audit_unavailable`, a call nobody waits for (abandoned, 499), or a count of
    /// refusals answered 429 before (each kept as it is).
    pub(crate) fn answered_unavailable(mut self) -> AuditRecord {
        let answered_so = self.status == 503 && self.reason.as_deref() == Some("audit_unavailable");
        if self.status != 499 && !answered_so && !crate::pipeline::is_count_of_refusals(&self) {
            self.status = 503;
            self.check = Some(Check::Audit);
            self.reason = Some("audit_unavailable".to_owned());
        }
        self
    }
}

/// What an audited call was: `tool`, `resource`, `prompt` or `completion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// `tools/call` (and `POST /tools/{name}`).
    #[default]
    Tool,
    /// `resources/read`.
    Resource,
    /// `prompts/get`.
    Prompt,
    /// `completion/complete`.
    Completion,
}

impl CallKind {
    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            CallKind::Tool => "tool",
            CallKind::Resource => "resource",
            CallKind::Prompt => "prompt",
            CallKind::Completion => "completion",
        }
    }

    /// Whether it is [`CallKind::Tool`].
    pub fn is_tool(&self) -> bool {
        *self == CallKind::Tool
    }
}

impl std::str::FromStr for CallKind {
    type Err = String;
    fn from_str(s: &str) -> Result<CallKind, String> {
        match s {
            "tool" => Ok(CallKind::Tool),
            "resource" => Ok(CallKind::Resource),
            "prompt" => Ok(CallKind::Prompt),
            "completion" => Ok(CallKind::Completion),
            other => Err(format!(
                "unknown kind `{}`; expected one of `tool`, `resource`, `prompt`, `completion`",
                other.escape_debug()
            )),
        }
    }
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

/// The most argument keys a record keeps; the others are folded into one entry, [`CUT_KEY`].
pub const MAX_ARGUMENT_KEYS: usize = 64;
/// The longest argument key a record keeps whole, in bytes.
pub const MAX_KEY_BYTES: usize = 64;
/// The longest verbatim value (an `audit_fields` value, `confirm`) a record keeps, in bytes
/// of its JSON; a longer one is replaced by its hash.
pub const MAX_KEPT_VALUE_BYTES: usize = 1024;
/// The longest tool name, request id, principal, workspace, scope or reason a record keeps
/// whole, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// The largest record, in bytes of its JSON: past it, the arguments are replaced by their
/// hash. With the caps above, a record is bounded whatever a caller sends.
pub const MAX_RECORD_BYTES: usize = 16 * 1024;
/// The key under which the argument keys past [`MAX_ARGUMENT_KEYS`] are folded.
pub const CUT_KEY: &str = "…";

/// `sha256:` and the first 16 hex digits of the SHA-256 of `bytes`.
fn short_hash(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut text = String::with_capacity(7 + 16);
    text.push_str("sha256:");
    for b in &digest[..8] {
        text.push(char::from(HEX[usize::from(b >> 4)]));
        text.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    text
}

/// `text` if it fits in `max` bytes; else its start (cut on a character boundary), and a
/// marker with the hash and length of the whole, `start…[sha256:…, N bytes]`, in `max`
/// bytes in all (the marker alone when `max` is shorter than it, about 40 bytes). Nothing
/// is dropped silently.
pub fn bounded(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let marker = format!("…[{}, {} bytes]", short_hash(text.as_bytes()), text.len());
    let mut end = max.saturating_sub(marker.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}{marker}", &text[..end]))
}

/// The most scopes a record lists; the others are folded into one last entry holding
/// their hash and count.
pub const MAX_SCOPES: usize = 64;

/// Redact call arguments: each key maps to `sha256:` and the first 16 hex digits of the
/// hash of its value's JSON, except `keep` fields and `confirm`, which are kept verbatim.
///
/// Bounded whatever the caller sent: at most [`MAX_ARGUMENT_KEYS`] keys (the rest folded
/// into one [`CUT_KEY`] entry holding their hash and count), keys cut at [`MAX_KEY_BYTES`]
/// and verbatim values at [`MAX_KEPT_VALUE_BYTES`], each cut marked with a hash.
pub fn redact_arguments(arguments: Option<&Map<String, Value>>, keep: &[&str]) -> Value {
    let Some(arguments) = arguments else {
        return Value::Object(Map::new());
    };
    let mut redacted = Map::new();
    for (key, value) in arguments.iter().take(MAX_ARGUMENT_KEYS) {
        // One buffer: this runs for every argument of every call.
        let json = serde_json::to_vec(value).unwrap_or_default();
        let kept = key == "confirm" || keep.contains(&key.as_str());
        let value = if kept && json.len() <= MAX_KEPT_VALUE_BYTES {
            value.clone()
        } else if kept {
            Value::String(format!("{}, {} bytes, cut", short_hash(&json), json.len()))
        } else {
            Value::String(short_hash(&json))
        };
        redacted.insert(bounded(key, MAX_KEY_BYTES).into_owned(), value);
    }
    if arguments.len() > MAX_ARGUMENT_KEYS {
        let rest: Map<String, Value> = arguments
            .iter()
            .skip(MAX_ARGUMENT_KEYS)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let json = serde_json::to_vec(&rest).unwrap_or_default();
        redacted.insert(
            CUT_KEY.to_owned(),
            Value::String(format!(
                "{}, {} more keys",
                short_hash(&json),
                arguments.len() - MAX_ARGUMENT_KEYS
            )),
        );
    }
    Value::Object(redacted)
}

/// Whether `file` ends with a line cut short (not empty, and no newline at its end): a
/// write of lines that a full disk or a crash interrupted.
pub(crate) fn ends_with_a_cut_line(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    Ok(last[0] != b'\n')
}

/// Bound a record as a whole: its tool name and request id (see [`bounded`]), and, if its
/// JSON is still over [`MAX_RECORD_BYTES`], its arguments, replaced by their hash.
///
/// Its text holds no U+0000: each is written `\u{2400}` (␀), the symbol for it. A caller
/// chooses the tool name, the request id and the resource URI; PostgreSQL refuses the
/// character in text, and one such record would fail the batch of records written with it.
pub(crate) fn bound_record(record: &mut AuditRecord) {
    let visible = |text: &mut String| {
        if text.contains('\0') {
            *text = text.replace('\0', "\u{2400}");
        }
    };
    // Made visible, then cut (a U+2400 is three bytes): the tool name and request id are
    // the caller's; the principal, workspace and scopes a token's claims (a JWT's `sub`
    // or scope list may be of any length); the reason a handler's.
    let name = |text: &mut String| {
        visible(text);
        if let std::borrow::Cow::Owned(cut) = bounded(text, MAX_NAME_BYTES) {
            *text = cut;
        }
    };
    visible(&mut record.transport);
    visible(&mut record.timestamp);
    record.confirmed_by.iter_mut().for_each(visible);
    name(&mut record.tool);
    for text in [
        &mut record.request_id,
        &mut record.principal,
        &mut record.workspace,
        &mut record.reason,
    ]
    .into_iter()
    .flatten()
    {
        name(text);
    }
    record.scopes_provided.iter_mut().for_each(name);
    if record.scopes_provided.len() > MAX_SCOPES {
        let rest = record.scopes_provided.split_off(MAX_SCOPES - 1);
        let json = serde_json::to_vec(&rest).unwrap_or_default();
        record.scopes_provided.push(format!(
            "{CUT_KEY}[{}, {} more scopes]",
            short_hash(&json),
            rest.len()
        ));
    }
    // Exact size only when a cheap upper bound (JSON escapes at most six bytes a byte; a
    // kept value is at most its cap) says the record might be over: not on the hot path.
    if size_bound(record) > MAX_RECORD_BYTES
        && serde_json::to_vec(record).map_or(usize::MAX, |json| json.len()) > MAX_RECORD_BYTES
    {
        let json = serde_json::to_vec(&record.arguments).unwrap_or_default();
        record.arguments = serde_json::json!({
            CUT_KEY: format!("{}, {} bytes, cut: the record was over {MAX_RECORD_BYTES} bytes", short_hash(&json), json.len())
        });
        // Still over: the scopes, whose 64 of 128 bytes each may escape to six times
        // that (control characters in a JWT's scope claim), folded into one entry.
        if serde_json::to_vec(record).map_or(usize::MAX, |json| json.len()) > MAX_RECORD_BYTES {
            let json = serde_json::to_vec(&record.scopes_provided).unwrap_or_default();
            record.scopes_provided = vec![format!(
                "{CUT_KEY}[{}, {} scopes, cut: the record was over {MAX_RECORD_BYTES} bytes]",
                short_hash(&json),
                record.scopes_provided.len()
            )];
        }
    }
}

/// An upper bound of the size of a record's JSON.
fn size_bound(record: &AuditRecord) -> usize {
    let text = |s: &str| 6 * s.len() + 3;
    let opt = |s: &Option<String>| s.as_deref().map_or(5, text);
    let arguments = match &record.arguments {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                text(k)
                    + match v {
                        Value::String(s) if s.starts_with("sha256:") => s.len() + 3,
                        // Any other text (a kept value, a key the framework adds) as
                        // long as it is, not as long as a kept value may be.
                        Value::String(s) => text(s),
                        Value::Bool(_) | Value::Null | Value::Number(_) => 32,
                        // A kept value of JSON: measured.
                        _ => MAX_RECORD_BYTES + 1,
                    }
            })
            .sum(),
        _ => MAX_RECORD_BYTES + 1,
    };
    512 + text(&record.tool)
        + text(&record.transport)
        + text(&record.timestamp)
        + opt(&record.reason)
        + opt(&record.principal)
        + opt(&record.workspace)
        + opt(&record.request_id)
        + record
            .scopes_provided
            .iter()
            .map(|s| text(s))
            .sum::<usize>()
        + arguments
}

/// Why a sink could not write.
#[derive(Debug, Clone)]
pub struct AuditError {
    message: String,
    /// The record that could not be written, handed back ([`AuditError::with_record`]).
    record: Option<Box<AuditRecord>>,
    /// The write may have taken the records (an answer lost after the commit was sent, a
    /// sync that failed after the write): none is handed back, or it could be there twice.
    in_doubt: bool,
    /// The sink keeps the records of a write in doubt and settles them itself (finds them
    /// in the trail, or appends them once) when it can write again: not lost, though not
    /// handed back.
    kept: bool,
}

impl PartialEq for AuditError {
    /// Two errors are equal when they say the same: the record handed back is not compared.
    fn eq(&self, other: &AuditError) -> bool {
        self.message == other.message
    }
}

impl Eq for AuditError {}

impl AuditError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> AuditError {
        AuditError {
            message: message.into(),
            record: None,
            in_doubt: false,
            kept: false,
        }
    }

    /// This error, saying the write may have taken its records after all.
    pub(crate) fn in_doubt(mut self) -> AuditError {
        self.in_doubt = true;
        self
    }

    /// Whether the write may have taken its records ([`AuditError::in_doubt`]).
    pub(crate) fn is_in_doubt(&self) -> bool {
        self.in_doubt
    }

    /// This error of a write in doubt, saying the sink keeps its records and settles them
    /// once it can write again.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn kept_by_sink(mut self) -> AuditError {
        self.kept = true;
        self
    }

    /// Whether the sink keeps the records to settle them ([`AuditError::kept_by_sink`]).
    pub(crate) fn is_kept_by_sink(&self) -> bool {
        self.kept
    }

    /// The error of a sink that could not write `record`, handing it back. The pipeline
    /// keeps the record of a call whose handler ran (what it did stands) and writes it
    /// before any later record once the sink writes again; the built-in sinks do this.
    /// A record not handed back is lost to the trail (the built-in sinks log each).
    pub fn with_record(mut self, record: AuditRecord) -> AuditError {
        self.record = Some(Box::new(record));
        self
    }

    /// The record handed back with [`AuditError::with_record`], taken out of the error.
    pub fn take_record(&mut self) -> Option<AuditRecord> {
        self.record.take().map(|record| *record)
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

#[cfg(feature = "sqlite")]
pub(crate) use time_format::canonical_timestamp;
pub(crate) use time_format::{format_timestamp, now_timestamp};
