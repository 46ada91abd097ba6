//! The one error type of every refusal and every handler failure.

use std::borrow::Cow;
use std::fmt;

use serde::ser::SerializeStruct;

/// The exact message of the confirm guard's refusal.
pub const CONFIRM_REQUIRED: &str = "confirm: true required for destructive operations";

/// The HTTP-style status of a [`ToolError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// 400: the request is wrong (arguments, missing confirmation).
    BadRequest,
    /// 401: no valid credentials.
    Unauthorized,
    /// 403: valid credentials that do not allow this.
    Forbidden,
    /// 404: no such tool or no such object (in the caller's workspace).
    NotFound,
    /// 405: the route does not take this HTTP method (as the MCP layer answers it).
    MethodNotAllowed,
    /// 406: the client does not accept what the route answers (as the MCP layer answers
    /// a request without `Accept: application/json, text/event-stream`).
    NotAcceptable,
    /// 408: the client did not send its request in time.
    RequestTimeout,
    /// 409: the request conflicts with the current state.
    Conflict,
    /// 413: the request body is larger than the server accepts.
    PayloadTooLarge,
    /// 414: the request line's URI is longer than the HTTP server reads (as it answers
    /// before any route).
    UriTooLong,
    /// 415: the body is not of a type the route reads (as the MCP layer answers a body
    /// that is not `application/json`).
    UnsupportedMediaType,
    /// 429: too many requests; retry later.
    TooManyRequests,
    /// 431: the request's head (its headers) is larger, or has more headers, than the
    /// HTTP server reads (as it answers before any route).
    RequestHeaderFieldsTooLarge,
    /// 500: a fault of the server.
    Internal,
    /// 501: the request uses what the server does not implement (a transfer coding
    /// other than `chunked`).
    NotImplemented,
    /// 503: a dependency is unavailable (for example the audit sink).
    Unavailable,
    /// 499 (nginx's "client closed request"): the call was abandoned before it ran (its
    /// client cancelled it or went away, or the server stopped while it waited).
    ClientClosedRequest,
}

impl Status {
    /// The numeric code: 400, 401, 403, 404, 405, 406, 408, 409, 413, 414, 415, 429, 431,
    /// 499, 500, 501 or 503.
    pub const fn code(self) -> u16 {
        match self {
            Status::BadRequest => 400,
            Status::Unauthorized => 401,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::NotAcceptable => 406,
            Status::RequestTimeout => 408,
            Status::Conflict => 409,
            Status::PayloadTooLarge => 413,
            Status::UriTooLong => 414,
            Status::UnsupportedMediaType => 415,
            Status::TooManyRequests => 429,
            Status::RequestHeaderFieldsTooLarge => 431,
            Status::Internal => 500,
            Status::NotImplemented => 501,
            Status::Unavailable => 503,
            Status::ClientClosedRequest => 499,
        }
    }

    /// The status for a numeric code, if it is one of ours.
    pub const fn from_code(code: u16) -> Option<Status> {
        Some(match code {
            400 => Status::BadRequest,
            401 => Status::Unauthorized,
            403 => Status::Forbidden,
            404 => Status::NotFound,
            405 => Status::MethodNotAllowed,
            406 => Status::NotAcceptable,
            408 => Status::RequestTimeout,
            409 => Status::Conflict,
            413 => Status::PayloadTooLarge,
            414 => Status::UriTooLong,
            415 => Status::UnsupportedMediaType,
            429 => Status::TooManyRequests,
            431 => Status::RequestHeaderFieldsTooLarge,
            500 => Status::Internal,
            501 => Status::NotImplemented,
            503 => Status::Unavailable,
            499 => Status::ClientClosedRequest,
            _ => return None,
        })
    }
}

/// A refusal or a failure: a status, a stable machine `reason` and a human message.
///
/// Every check of the pipeline and every handler speaks this type. On MCP it becomes a
/// tool result with `isError: true` whose text content is
/// `{"error": …, "reason": …, "status": …}` (and no `structuredContent`, which clients
/// may check against the tool's output schema); over plain HTTP it becomes the response
/// status and the same JSON body.
///
/// ```
/// use aac_tools::{Status, ToolError};
/// let err = ToolError::not_found("issue AAC-42 not found");
/// assert_eq!(err.status(), Status::NotFound);
/// assert_eq!(err.reason(), "not_found");
/// assert_eq!(
///     err.to_json(),
///     serde_json::json!({"error": "issue AAC-42 not found", "reason": "not_found", "status": 404})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    status: Status,
    reason: Cow<'static, str>,
    message: Cow<'static, str>,
    retry_after: Option<std::time::Duration>,
}

/// The longest message an error carries to the client, and from there into a model's
/// context (bytes of UTF-8). A longer one can only be echoing what the caller sent (a
/// 15 MB tool name, a value that failed validation): it is cut, marked with the hash and
/// length of the whole, as audit records cut what they keep.
pub(crate) const MAX_MESSAGE_BYTES: usize = 2048;

/// The longest reason an error carries (a handler's own reason could be anything).
const MAX_REASON_BYTES: usize = 128;

/// `text`, cut to about `max` bytes if longer ([`crate::audit::bounded`]).
fn capped(text: Cow<'static, str>, max: usize) -> Cow<'static, str> {
    if text.len() <= max {
        return text;
    }
    Cow::Owned(crate::audit::bounded(&text, max).into_owned())
}

impl ToolError {
    /// An error with any status, reason and message. A message over 2 048 bytes (or a
    /// reason over 128) can only be echoing what a caller sent: it is cut, and marked
    /// with the hash and length of the whole.
    pub fn new(
        status: Status,
        reason: impl Into<Cow<'static, str>>,
        message: impl Into<Cow<'static, str>>,
    ) -> ToolError {
        ToolError {
            status,
            reason: capped(reason.into(), MAX_REASON_BYTES),
            message: capped(message.into(), MAX_MESSAGE_BYTES),
            retry_after: None,
        }
    }

    /// 401 `missing_token`: the call carried no credentials.
    pub fn missing_token() -> ToolError {
        ToolError::new(
            Status::Unauthorized,
            "missing_token",
            "a bearer token is required",
        )
    }

    /// 401 `invalid_token`: unknown, malformed, expired or revoked credentials.
    pub fn invalid_token(why: impl Into<Cow<'static, str>>) -> ToolError {
        ToolError::new(Status::Unauthorized, "invalid_token", why)
    }

    /// 404 `unknown_tool`.
    pub fn unknown_tool(name: &str) -> ToolError {
        ToolError::new(
            Status::NotFound,
            "unknown_tool",
            format!("unknown tool `{name}`"),
        )
    }

    /// 403 `insufficient_scope`, naming every scope the tool needs.
    pub fn insufficient_scope(required: &[&str]) -> ToolError {
        ToolError::insufficient_scope_of("tool", required)
    }

    /// 403 `insufficient_scope` for a `tool`, `resource`, `prompt` or `completion`.
    pub(crate) fn insufficient_scope_of(what: &str, required: &[&str]) -> ToolError {
        ToolError::new(
            Status::Forbidden,
            "insufficient_scope",
            format!("this {what} requires the scopes: {}", required.join(" ")),
        )
    }

    /// 400 `destructive_flag_missing` with the exact message
    /// `confirm: true required for destructive operations`.
    pub fn confirm_required() -> ToolError {
        ToolError::new(
            Status::BadRequest,
            "destructive_flag_missing",
            CONFIRM_REQUIRED,
        )
    }

    /// 400 `invalid_arguments` at a JSON pointer into the arguments.
    pub fn invalid_arguments(pointer: &str, why: impl fmt::Display) -> ToolError {
        let at = if pointer.is_empty() { "/" } else { pointer };
        ToolError::new(
            Status::BadRequest,
            "invalid_arguments",
            format!("invalid arguments at `{at}`: {why}"),
        )
    }

    /// 400 with a reason of your own.
    pub fn bad_request(
        reason: impl Into<Cow<'static, str>>,
        message: impl Into<Cow<'static, str>>,
    ) -> ToolError {
        ToolError::new(Status::BadRequest, reason, message)
    }

    /// 429 `rate_limited`: too many calls (or refusals) of this caller; retry after
    /// `retry_after` (over HTTP, the `Retry-After` header).
    pub fn rate_limited(retry_after: std::time::Duration) -> ToolError {
        let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        ToolError {
            retry_after: Some(retry_after),
            ..ToolError::new(
                Status::TooManyRequests,
                "rate_limited",
                format!("too many requests; retry in {seconds} s"),
            )
        }
    }

    /// For a 429, how long to wait before retrying.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.retry_after
    }

    /// 403 `forbidden`: the principal may not do this (for example a `viewer` deleting).
    pub fn forbidden(message: impl Into<Cow<'static, str>>) -> ToolError {
        ToolError::new(Status::Forbidden, "forbidden", message)
    }

    /// 404 `not_found`. Use it too for objects of another workspace, so that
    /// workspace boundaries leak nothing.
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> ToolError {
        ToolError::new(Status::NotFound, "not_found", message)
    }

    /// 409 `conflict`.
    pub fn conflict(message: impl Into<Cow<'static, str>>) -> ToolError {
        ToolError::new(Status::Conflict, "conflict", message)
    }

    /// 500 `internal_error`.
    pub fn internal(message: impl Into<Cow<'static, str>>) -> ToolError {
        ToolError::new(Status::Internal, "internal_error", message)
    }

    /// 503 `audit_unavailable`: the audit sink cannot write, so the call is refused. `why`
    /// (the sink's own words: a file's path, a database's name and message) goes to the
    /// server's log, not to the caller, who may not even be authenticated.
    pub fn audit_unavailable(why: impl fmt::Display) -> ToolError {
        // At most one line a second, with how many were not logged: one a refused call
        // put 117,000 lines in the log in 17 s of a full disk.
        if let Some(unlogged) = once_a_second(&UNAVAILABLE_LOGGED) {
            tracing::warn!(
                error = %why,
                refusals_not_logged = unlogged,
                "the audit trail is unavailable: answering 503"
            );
        }
        ToolError::new(
            Status::Unavailable,
            "audit_unavailable",
            "the audit trail is unavailable, so the call was refused; the server's log says why",
        )
    }

    /// The status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The stable machine reason, such as `insufficient_scope`.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The human message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// `{"error": message, "reason": reason, "status": code}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": self.message,
            "reason": self.reason,
            "status": self.status.code(),
        })
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.code(),
            self.reason,
            self.message
        )
    }
}

impl std::error::Error for ToolError {}

impl serde::Serialize for ToolError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("ToolError", 3)?;
        s.serialize_field("error", &self.message)?;
        s.serialize_field("reason", &self.reason)?;
        s.serialize_field("status", &self.status.code())?;
        s.end()
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(err: serde_json::Error) -> ToolError {
        ToolError::internal(format!("JSON error: {err}"))
    }
}

/// When [`ToolError::audit_unavailable`] last logged (seconds since the first use) and
/// how many refusals it has not logged since.
static UNAVAILABLE_LOGGED: OnceLine = OnceLine::new();

/// A log line written at most once a second: the second it was last written, and the
/// count of those skipped since.
pub(crate) struct OnceLine {
    second: std::sync::atomic::AtomicU64,
    skipped: std::sync::atomic::AtomicU64,
}

impl OnceLine {
    pub(crate) const fn new() -> OnceLine {
        OnceLine {
            second: std::sync::atomic::AtomicU64::new(u64::MAX),
            skipped: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

/// `Some(skipped)` if `line` may be written now (not yet this second), with how many
/// were skipped since it last was; `None` (and one more skipped) otherwise.
pub(crate) fn once_a_second(line: &OnceLine) -> Option<u64> {
    use std::sync::atomic::Ordering;
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let now = START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs();
    let last = line.second.load(Ordering::Relaxed);
    if last != now
        && line
            .second
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        return Some(line.skipped.swap(0, Ordering::AcqRel));
    }
    line.skipped.fetch_add(1, Ordering::AcqRel);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line written at most once a second says, when it is written again, how many
    /// were not.
    #[test]
    fn a_line_once_a_second_counts_the_ones_it_skipped() {
        let line = OnceLine::new();
        assert_eq!(once_a_second(&line), Some(0));
        for _ in 0..5 {
            assert_eq!(once_a_second(&line), None);
        }
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert_eq!(once_a_second(&line), Some(5));
    }

    #[test]
    fn a_message_echoing_a_huge_input_is_cut_and_marked() {
        let name = "x".repeat(15 * 1024 * 1024);
        let err = ToolError::unknown_tool(&name);
        assert!(
            err.message().len() <= MAX_MESSAGE_BYTES,
            "{}",
            err.message().len()
        );
        assert!(err.message().starts_with("unknown tool `xxx"));
        assert!(
            err.message()
                .ends_with(&format!("{} bytes]", name.len() + 15)),
            "{}",
            &err.message()[err.message().len() - 40..]
        );
        let err = ToolError::invalid_arguments(&format!("/{}", "k".repeat(1 << 20)), "unexpected");
        assert!(err.message().len() <= MAX_MESSAGE_BYTES);
        let err = ToolError::bad_request("r".repeat(1000), "short");
        assert!(
            err.reason().len() <= MAX_REASON_BYTES + 40,
            "{}",
            err.reason()
        );
        // What is short stays as it is.
        assert_eq!(
            ToolError::unknown_tool("get_issue").message(),
            "unknown tool `get_issue`"
        );
        assert_eq!(ToolError::confirm_required().message(), CONFIRM_REQUIRED);
    }
}
