//! The one place an [`AuditRecord`] is made from what an [`Attempt`](super::Attempt)
//! learnt.

use std::time::Instant;

use serde_json::{Map, Value};

use crate::access::AccessLevel;
use crate::audit::{AuditRecord, CallKind, Check, Outcome, bound_record, redact_arguments};
use crate::context::Transport;
use crate::error::{Status, ToolError};
use crate::principal::Principal;
use crate::registry::ToolEntry;
use crate::tool::ToolOutput;

/// What an attempt knows when it ends.
pub(super) struct Facts<'a> {
    pub(super) kind: CallKind,
    pub(super) access_level: Option<AccessLevel>,
    pub(super) tool: &'a str,
    pub(super) result: &'a Result<ToolOutput, ToolError>,
    pub(super) check: Option<Check>,
    pub(super) principal: Option<&'a Principal>,
    pub(super) timestamp: String,
    pub(super) transport: Transport,
    pub(super) request_id: Option<String>,
    pub(super) arguments: Value,
    pub(super) started: Instant,
    pub(super) confirmed_by: Option<&'static str>,
}

pub(super) fn build(facts: Facts<'_>) -> AuditRecord {
    let (outcome, reason, status) = match facts.result {
        Ok(_) => (Outcome::Success, None, 200),
        Err(err) => {
            let refused = facts.check != Some(Check::Handler)
                || matches!(err.status(), Status::Unauthorized | Status::Forbidden);
            let outcome = if refused {
                Outcome::Denied
            } else {
                Outcome::Error
            };
            (outcome, Some(err.reason().to_owned()), err.status().code())
        }
    };
    let principal = facts.principal;
    let mut record = AuditRecord {
        tool: facts.tool.to_owned(),
        outcome,
        reason,
        check: facts.check,
        status,
        scopes_provided: principal
            .map(|p| p.scopes().map(str::to_owned).collect())
            .unwrap_or_default(),
        timestamp: facts.timestamp,
        principal: principal.map(|p| p.subject().to_owned()),
        workspace: principal.and_then(|p| p.workspace().map(str::to_owned)),
        transport: facts.transport.as_str().to_owned(),
        request_id: facts.request_id,
        duration_us: u64::try_from(facts.started.elapsed().as_micros()).unwrap_or(u64::MAX),
        access_level: facts.access_level,
        arguments: facts.arguments,
        confirmed_by: match (facts.result, facts.confirmed_by) {
            // Who confirmed a call that ran (a handler error ran too).
            (Ok(_), Some(by)) => Some(by.to_owned()),
            (Err(_), Some(by)) if facts.check == Some(Check::Handler) => Some(by.to_owned()),
            // A person said yes, and a check after their answer refused the call (its
            // token revoked meanwhile): the record says they confirmed it.
            (Err(_), Some(by @ "user")) => Some(by.to_owned()),
            _ => None,
        },
        kind: facts.kind,
    };
    bound_record(&mut record);
    record
}

/// The arguments as an audit record keeps them: redacted but for the tool's audit fields.
pub(super) fn redacted_arguments(entry: Option<&ToolEntry>, arguments: Option<&Value>) -> Value {
    let keep = entry.map_or(&[][..], |e| e.def().audit_fields());
    match arguments {
        Some(Value::Object(map)) => redact_arguments(Some(map), keep),
        Some(other) => redact_arguments(
            Some(&Map::from_iter([("$".to_owned(), other.clone())])),
            &[],
        ),
        None => redact_arguments(None, keep),
    }
}

/// Whether `record` is one of the counts below ([`suppressed`], [`suppressed_of`]): the
/// refusals it counts were answered 429 before it was written, so that no answer waits on
/// it.
pub(crate) fn is_count_of_refusals(record: &AuditRecord) -> bool {
    record.reason.as_deref() == Some("rate_limited")
        && record.request_id.is_none()
        && record.status == Status::TooManyRequests.code()
        && record.arguments.as_object().is_some_and(|arguments| {
            arguments.get("suppressed").is_some_and(Value::is_u64)
                && arguments
                    .keys()
                    .all(|key| key == "suppressed" || key == "peer")
        })
}

/// The record that counts the refusals of one kind (`kind`: tool calls, reads, prompts,
/// completions) of one peer that were answered 429 without a record of their own (the
/// rate limit before authentication).
pub(super) fn suppressed(
    peer: Option<std::net::IpAddr>,
    count: u64,
    kind: CallKind,
    transport: Transport,
) -> AuditRecord {
    // An IPv6 peer is counted by its /64 (one host's usual share); `None` stands for the
    // peers the limiter had no room to track.
    let peer = match peer {
        Some(std::net::IpAddr::V6(v6)) => format!("{v6}/64"),
        Some(v4) => v4.to_string(),
        None => "(untracked peers)".to_owned(),
    };
    suppressed_from(&peer, count, kind, transport)
}

/// [`suppressed`] of the refusals of a stdio connection without a verified principal.
pub(super) fn suppressed_on_stdio(count: u64, kind: CallKind) -> AuditRecord {
    suppressed_from("stdio", count, kind, Transport::Stdio)
}

fn suppressed_from(peer: &str, count: u64, kind: CallKind, transport: Transport) -> AuditRecord {
    AuditRecord {
        tool: "(rate limited)".to_owned(),
        outcome: Outcome::Denied,
        reason: Some("rate_limited".to_owned()),
        check: Some(Check::Authenticate),
        status: Status::TooManyRequests.code(),
        scopes_provided: Vec::new(),
        timestamp: crate::audit::now_timestamp(),
        principal: None,
        workspace: None,
        transport: transport.as_str().to_owned(),
        request_id: None,
        duration_us: 0,
        access_level: None,
        arguments: serde_json::json!({"peer": peer, "suppressed": count}),
        confirmed_by: None,
        kind,
    }
}

/// The record that counts the calls of one kind (`kind`: tool calls, reads, prompts,
/// completions) of one principal refused past its rate (its own, or one tool's: then
/// `tool`) that were answered 429 without a record of their own.
pub(super) fn suppressed_of(
    subject: &str,
    workspace: Option<&str>,
    tool: Option<&str>,
    count: u64,
    kind: CallKind,
    transport: Transport,
) -> AuditRecord {
    let mut record = AuditRecord {
        tool: tool.unwrap_or("(rate limited)").to_owned(),
        outcome: Outcome::Denied,
        reason: Some("rate_limited".to_owned()),
        check: Some(Check::RateLimit),
        status: Status::TooManyRequests.code(),
        scopes_provided: Vec::new(),
        timestamp: crate::audit::now_timestamp(),
        principal: Some(subject.to_owned()),
        workspace: workspace.map(str::to_owned),
        transport: transport.as_str().to_owned(),
        request_id: None,
        duration_us: 0,
        access_level: None,
        arguments: serde_json::json!({"suppressed": count}),
        confirmed_by: None,
        kind,
    };
    bound_record(&mut record);
    record
}
