//! An MCP client for hosts (rmcp's client), used by the host-side policy.
//!
//! [`Client`] connects to any MCP server — a child process over stdio, or a Streamable HTTP
//! endpoint with an optional bearer token — lists its tools as JSON values (the input of
//! [`crate::host::ToolPolicy`]) and calls a tool by name with JSON arguments. Its answer
//! tells the three outcomes a host must not confuse apart:
//!
//! - `Ok(result)` with [`ToolResult::is_error`] false: the tool ran;
//! - `Ok(result)` with [`ToolResult::is_error`] true: the server answered with a tool error
//!   (a refusal or a failure; it was delivered, so it is never retried);
//! - `Err(err)` with [`ClientError::is_transport_failure`]: the request may or may not have
//!   reached the server; only a tool that is safe to retry may be sent again.
//!
//! Any other `Err` is an answer too (a JSON-RPC error, or an HTTP refusal such as a 403
//! `insufficient_scope`: [`ClientError::refusal`]) or a connection that never was: never
//! retried.
//!
//! No rmcp type appears in this module's public API, nor its type names in its messages.
//!
//! ```no_run
//! use aac_tools::mcp::client::{Client, Endpoint};
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), aac_tools::mcp::client::ClientError> {
//! let endpoint = Endpoint::http("http://127.0.0.1:8080/mcp").bearer("aac_…");
//! let client = Client::connect(&endpoint).await?;
//! let tools = client.list_tools().await?;
//! let result = client.call_tool("get_issue", json!({"id": "AAC-42"})).await?;
//! println!("{} tools; get_issue said {}", tools.len(), result.text());
//! client.close().await;
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, CustomResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, FormElicitationCapability, Implementation,
    ListToolsRequest, PaginatedRequestParams, ProtocolVersion, ServerResult,
};
use rmcp::service::{
    ClientInitializeError, RequestContext, RoleClient, RunningService, ServiceError, ServiceExt,
};
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData};
use serde_json::{Map, Value};

/// Asks the person at the host a yes/no question (a server's confirmation of a
/// destructive call) and gives their answer.
pub type AskUser = Arc<dyn Fn(String) -> crate::BoxFuture<'static, UserAnswer> + Send + Sync>;

/// Told that the client declined a server's question without asking anyone: one it cannot
/// show as a yes/no question (a form with fields to fill in, a URL to open), or any
/// question when no [`AskUser`] is set. A host records it as it would a no.
pub type DeclinedUnshown = Arc<dyn Fn() + Send + Sync>;

/// A person's answer to a server's question, as the elicitation's `action` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserAnswer {
    /// They said yes (`accept`).
    Accept,
    /// They said no (`decline`).
    Decline,
    /// Nobody answered: no person could be asked (no terminal), or the question was
    /// dismissed (`cancel`). The server refuses the call as for a no, without saying a
    /// person declined it.
    Cancel,
}

/// Where an MCP server is: a command to run (stdio) or a Streamable HTTP URL.
#[derive(Clone)]
pub struct Endpoint {
    kind: Kind,
    ask_user: Option<AskUser>,
    declined_unshown: Option<DeclinedUnshown>,
}

#[derive(Clone)]
enum Kind {
    Stdio {
        program: OsString,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        stderr: ChildStderr,
    },
    Http {
        url: String,
        bearer: Option<String>,
    },
}

impl Endpoint {
    /// A server run as a child process that speaks MCP on its stdin and stdout.
    ///
    /// The child inherits this process's environment (add to it with [`Endpoint::env`])
    /// and its stderr (unless [`Endpoint::stderr`] says otherwise); it is killed when the
    /// client is closed or dropped.
    pub fn stdio(program: impl Into<OsString>) -> Endpoint {
        Endpoint {
            kind: Kind::Stdio {
                program: program.into(),
                args: Vec::new(),
                env: Vec::new(),
                stderr: ChildStderr::Inherit,
            },
            ask_user: None,
            declined_unshown: None,
        }
    }

    /// Where the stdio child's stderr (its logs) goes (default: [`ChildStderr::Inherit`]).
    /// A host that talks to a person on the terminal keeps the server's logs out of it
    /// with [`ChildStderr::Discard`] or [`ChildStderr::File`]. Ignored over HTTP.
    pub fn stderr(mut self, to: ChildStderr) -> Endpoint {
        if let Kind::Stdio { stderr, .. } = &mut self.kind {
            *stderr = to;
        }
        self
    }

    /// A server reached over Streamable HTTP at `url` (for example `http://127.0.0.1:8080/mcp`).
    pub fn http(url: impl Into<String>) -> Endpoint {
        Endpoint {
            kind: Kind::Http {
                url: url.into(),
                bearer: None,
            },
            ask_user: None,
            declined_unshown: None,
        }
    }

    /// Answer a server's confirmations (`elicitation/create` in form mode with nothing to
    /// fill in: accept or decline) by asking the person with `ask`; the client then
    /// declares the elicitation capability. Any other elicitation is declined.
    pub fn ask_user(mut self, ask: AskUser) -> Endpoint {
        self.ask_user = Some(ask);
        self
    }

    /// Call `told` whenever the client declines a server's question without asking anyone
    /// (see [`DeclinedUnshown`]), so that the host knows the server was told no.
    pub fn on_declined_unshown(mut self, told: DeclinedUnshown) -> Endpoint {
        self.declined_unshown = Some(told);
        self
    }

    /// One more argument of the stdio command (ignored over HTTP).
    pub fn arg(mut self, arg: impl Into<OsString>) -> Endpoint {
        if let Kind::Stdio { args, .. } = &mut self.kind {
            args.push(arg.into());
        }
        self
    }

    /// More arguments of the stdio command (ignored over HTTP).
    pub fn args<I, A>(mut self, more: I) -> Endpoint
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        if let Kind::Stdio { args, .. } = &mut self.kind {
            args.extend(more.into_iter().map(Into::into));
        }
        self
    }

    /// An environment variable of the stdio child, for example its token (ignored over HTTP).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Endpoint {
        if let Kind::Stdio { env, .. } = &mut self.kind {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// The bearer token sent as `Authorization: Bearer …` over HTTP (ignored over stdio,
    /// where a server takes its credentials from its environment: see [`Endpoint::env`]).
    pub fn bearer(mut self, token: impl Into<String>) -> Endpoint {
        if let Kind::Http { bearer, .. } = &mut self.kind {
            *bearer = Some(token.into());
        }
        self
    }

    /// True for a Streamable HTTP endpoint.
    pub fn is_http(&self) -> bool {
        matches!(self.kind, Kind::Http { .. })
    }
}

impl fmt::Debug for Endpoint {
    // Tokens and environment values are secrets: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Stdio {
                program,
                args,
                env,
                stderr,
            } => f
                .debug_struct("Endpoint::Stdio")
                .field("program", program)
                .field("args", args)
                .field("env", &env.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .field("stderr", stderr)
                .finish(),
            Kind::Http { url, bearer } => f
                .debug_struct("Endpoint::Http")
                .field("url", url)
                .field("bearer", &bearer.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Stdio { program, args, .. } => {
                write!(f, "{}", program.to_string_lossy())?;
                for arg in args {
                    write!(f, " {}", arg.to_string_lossy())?;
                }
                Ok(())
            }
            Kind::Http { url, .. } => f.write_str(url),
        }
    }
}

/// Where the stderr of a server run as a child process goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ChildStderr {
    /// This process's stderr: the server's logs mix with the host's own output.
    #[default]
    Inherit,
    /// This process's stderr, each line of the server's after `server: ` and escaped as
    /// [`crate::host::escape_line`] escapes (control and invisible characters as
    /// `\u{1b}`, blanks that are no space, overlay and enclosing marks, runs of more
    /// than four spaces by their length), so that a server's logs cannot drive the
    /// terminal (clear it, retitle it, move the cursor over the host's question) nor
    /// pass for a line of the host's own. Lines are cut at 64 KiB.
    Escaped,
    /// Nowhere.
    Discard,
    /// Appended to this file, created if needed.
    File(PathBuf),
}

/// What went wrong, as a host must tell it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientErrorKind {
    /// The connection could not be set up (nothing listening, the command did not start,
    /// the handshake failed or was refused). No tool call was sent.
    Connect,
    /// The request may or may not have reached the server: the connection broke, the
    /// child exited, no answer came in time, or the server failed with an HTTP 5xx.
    /// Retry only what is safe to retry.
    Transport,
    /// The server refused the credentials: an HTTP 401 (or a 401 or 403 to the
    /// handshake). [`ClientError::refusal`] says why.
    Unauthorized,
    /// The server answered with a JSON-RPC error ([`ClientError::code`]: its answer), or
    /// with something that is not an answer to the request (no code: whether a
    /// `tools/call` ran is then unknown). The request was delivered; it is not retried.
    Protocol,
    /// The server answered a `tools/call` that it needs input before the call can
    /// complete (a 2026-07-28 `input_required` result). This client, which speaks the
    /// session protocols, does not answer it nor send the call again.
    InputRequired,
    /// The server refused the request with an HTTP 4xx status other than 401 (403
    /// `insufficient_scope`, 404, 429…): its answer, so the request did not run and is not
    /// retried. [`ClientError::refusal`] says why.
    Refused,
}

/// An HTTP refusal of a request: its status and why, as the server said it (the
/// `WWW-Authenticate` challenge, or an aac-tools error body) or in our words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    status: u16,
    reason: String,
    message: String,
}

impl Refusal {
    /// The HTTP status (401, 403, 404…).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// A machine reason: the challenge's `error` (`insufficient_scope`, `invalid_token`),
    /// the `reason` of an aac-tools error body, else one named after the status
    /// (`unauthorized`, `forbidden`, `not_found`, `too_many_requests`, `http_418`…).
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// What the server said (the challenge's `error_description`, the body's `error` or
    /// its text), or a sentence in our words (for `insufficient_scope`, naming the scope
    /// the challenge asks for).
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// An error of [`Client`]: a kind and a lowercase message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError {
    kind: ClientErrorKind,
    code: Option<i64>,
    /// The message of a JSON-RPC error, as the server sent it.
    server_message: Option<String>,
    refusal: Option<Refusal>,
    message: String,
}

impl ClientError {
    fn new(kind: ClientErrorKind, message: impl Into<String>) -> ClientError {
        ClientError {
            kind,
            code: None,
            server_message: None,
            refusal: None,
            message: message.into(),
        }
    }

    fn refused(kind: ClientErrorKind, refusal: Refusal, message: String) -> ClientError {
        ClientError {
            kind,
            code: None,
            server_message: None,
            refusal: Some(refusal),
            message,
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> ClientErrorKind {
        self.kind
    }

    /// True when delivery is unknown ([`ClientErrorKind::Transport`]).
    pub fn is_transport_failure(&self) -> bool {
        self.kind == ClientErrorKind::Transport
    }

    /// The JSON-RPC error code, for a [`ClientErrorKind::Protocol`] error the server sent.
    pub fn code(&self) -> Option<i64> {
        self.code
    }

    /// The message of a JSON-RPC error the server sent (with [`ClientError::code`]), as
    /// it wrote it.
    pub fn server_message(&self) -> Option<&str> {
        self.server_message.as_deref()
    }

    /// The HTTP refusal, when the server answered with a 4xx status: always for
    /// [`ClientErrorKind::Refused`], for [`ClientErrorKind::Unauthorized`] over HTTP, and
    /// for a [`ClientErrorKind::Connect`] whose handshake got a 4xx.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A failed request of an established connection; `what` names it (`tools/list`).
    fn from_service(err: ServiceError, what: &str, http: Option<HttpReader>) -> ClientError {
        match err {
            ServiceError::McpError(data) => ClientError {
                kind: ClientErrorKind::Protocol,
                code: Some(i64::from(data.code.0)),
                message: format!(
                    "the server answered {what} with error {}: {}",
                    data.code.0, data.message
                ),
                server_message: Some(data.message.into_owned()),
                refusal: None,
            },
            ServiceError::TransportSend(inner) => match http.and_then(|read| read(&*inner.error)) {
                Some(HttpFailure::Refused(refusal)) => {
                    let kind = if refusal.status == 401 {
                        ClientErrorKind::Unauthorized
                    } else {
                        ClientErrorKind::Refused
                    };
                    let message = format!(
                        "the server refused {what} (HTTP {}): {}: {}",
                        refusal.status, refusal.reason, refusal.message
                    );
                    ClientError::refused(kind, refusal, message)
                }
                Some(HttpFailure::ServerError(status)) => ClientError::new(
                    ClientErrorKind::Transport,
                    format!("the server failed {what} with HTTP {status}"),
                ),
                Some(HttpFailure::Broken { cause, .. }) => ClientError::new(
                    ClientErrorKind::Transport,
                    format!("the connection failed during {what}: {cause}"),
                ),
                // An answer came, and cannot be read: no transport failure (it is never
                // resent), and no JSON-RPC error (no code).
                Some(HttpFailure::Unreadable(what_came)) => ClientError::new(
                    ClientErrorKind::Protocol,
                    format!("the server answered {what} with {what_came}"),
                ),
                None => ClientError::new(
                    ClientErrorKind::Transport,
                    format!(
                        "the connection failed during {what}: {}",
                        innermost(&*inner.error)
                    ),
                ),
            },
            ServiceError::TransportClosed => ClientError::new(
                ClientErrorKind::Transport,
                format!("the connection closed during {what}"),
            ),
            ServiceError::Timeout { timeout } => ClientError::new(
                ClientErrorKind::Transport,
                format!("no answer to {what} within {} ms", timeout.as_millis()),
            ),
            ServiceError::Cancelled { reason } => ClientError::new(
                ClientErrorKind::Transport,
                format!(
                    "{what} was cancelled: {}",
                    reason.as_deref().unwrap_or("no reason given")
                ),
            ),
            _ => ClientError::new(
                ClientErrorKind::Protocol,
                format!("the server's answer to {what} is not an answer to it"),
            ),
        }
    }

    /// A failed handshake with `endpoint`.
    fn from_initialize(
        err: ClientInitializeError,
        endpoint: &Endpoint,
        http: Option<HttpReader>,
    ) -> ClientError {
        let connect = |message: String| ClientError::new(ClientErrorKind::Connect, message);
        match err {
            ClientInitializeError::TransportError { error, .. } => {
                ClientError::from_connect_transport(&error, endpoint, http)
            }
            ClientInitializeError::LegacyFallbackFailed { fallback, .. } => {
                ClientError::from_initialize(*fallback, endpoint, http)
            }
            ClientInitializeError::ConnectionClosed(_) => connect(format!(
                "`{endpoint}` closed the connection before the MCP handshake finished"
            )),
            ClientInitializeError::JsonRpcError(data) => connect(format!(
                "`{endpoint}` refused the MCP handshake with error {}: {}",
                data.code.0, data.message
            )),
            ClientInitializeError::NoCompatibleProtocolVersion {
                server_supported, ..
            } => connect(format!(
                "`{endpoint}` speaks no MCP protocol version this client does (it offers {})",
                server_supported
                    .iter()
                    .map(|v| v.as_str().to_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            ClientInitializeError::Cancelled => {
                connect(format!("the MCP handshake with `{endpoint}` was cancelled"))
            }
            _ => connect(format!(
                "`{endpoint}` did not answer the MCP handshake as an MCP server does"
            )),
        }
    }

    /// The transport failed during the handshake: nothing listening, the credentials
    /// refused, another HTTP refusal, or the connection broke.
    fn from_connect_transport(
        error: &DynamicTransportError,
        endpoint: &Endpoint,
        http: Option<HttpReader>,
    ) -> ClientError {
        let has_token = matches!(
            &endpoint.kind,
            Kind::Http {
                bearer: Some(_),
                ..
            }
        );
        match http.and_then(|read| read(&*error.error)) {
            Some(HttpFailure::Refused(refusal)) if matches!(refusal.status, 401 | 403) => {
                let message = if has_token {
                    format!(
                        "the server at `{endpoint}` refused the token (HTTP {}): {}: {}",
                        refusal.status, refusal.reason, refusal.message
                    )
                } else {
                    format!(
                        "the server at `{endpoint}` requires a token and none was given (HTTP {})",
                        refusal.status
                    )
                };
                ClientError::refused(ClientErrorKind::Unauthorized, refusal, message)
            }
            Some(HttpFailure::Refused(refusal)) => {
                let hint = if refusal.status == 404 {
                    " (is this URL its MCP endpoint?)"
                } else {
                    ""
                };
                let message = format!(
                    "the server at `{endpoint}` refused the MCP handshake (HTTP {}): {}: {}{hint}",
                    refusal.status, refusal.reason, refusal.message
                );
                ClientError::refused(ClientErrorKind::Connect, refusal, message)
            }
            Some(HttpFailure::ServerError(status)) => ClientError::new(
                ClientErrorKind::Connect,
                format!("the server at `{endpoint}` failed the MCP handshake with HTTP {status}"),
            ),
            Some(HttpFailure::Broken {
                io: Some(std::io::ErrorKind::ConnectionRefused),
                ..
            }) => ClientError::new(
                ClientErrorKind::Connect,
                format!("nothing is listening at `{endpoint}` (connection refused)"),
            ),
            Some(HttpFailure::Broken { cause, .. }) => ClientError::new(
                ClientErrorKind::Connect,
                format!("cannot reach `{endpoint}`: {cause}"),
            ),
            Some(HttpFailure::Unreadable(what_came)) => ClientError::new(
                ClientErrorKind::Connect,
                format!("`{endpoint}` answered the MCP handshake with {what_came}"),
            ),
            // Over stdio: the child closed its end (it exited) or wrote something else.
            None => ClientError::new(
                ClientErrorKind::Connect,
                format!(
                    "`{endpoint}` stopped talking before the MCP handshake finished: {}",
                    innermost(&*error.error)
                ),
            ),
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ClientError {}

/// What the Streamable HTTP transport's error says the server answered.
enum HttpFailure {
    /// A 4xx: the server's refusal.
    Refused(Refusal),
    /// A 5xx: the server failed; whether the request ran is unknown.
    ServerError(u16),
    /// No HTTP answer: the connection failed (its innermost cause, and its I/O error kind
    /// when there is one).
    Broken {
        cause: String,
        io: Option<std::io::ErrorKind>,
    },
    /// An HTTP success whose body is no JSON-RPC message (empty, HTML, an error without
    /// `message`…): the server answered, and the answer cannot be read (what it was).
    Unreadable(String),
}

/// Reads [`HttpFailure`] out of a transport error of rmcp's Streamable HTTP client (found
/// by type, down the error's sources), or `None` when it holds none.
type HttpReader = fn(&(dyn std::error::Error + 'static)) -> Option<HttpFailure>;

/// The [`HttpReader`] for the error type of this transport (so that its HTTP client type
/// is never named here).
fn http_reader<C: StreamableHttpClient>(_: &StreamableHttpClientTransport<C>) -> HttpReader {
    read_http_failure::<C::Error>
}

fn read_http_failure<E>(err: &(dyn std::error::Error + 'static)) -> Option<HttpFailure>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let mut current = Some(err);
    while let Some(err) = current {
        if let Some(http) = err.downcast_ref::<StreamableHttpError<E>>() {
            return http_failure(http);
        }
        current = err.source();
    }
    None
}

fn http_failure<E>(err: &StreamableHttpError<E>) -> Option<HttpFailure>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let refusal = match err {
        StreamableHttpError::AuthRequired(challenge) => {
            Refusal::from_challenge(401, &challenge.www_authenticate_header)
        }
        StreamableHttpError::InsufficientScope(challenge) => {
            Refusal::from_challenge(403, &challenge.www_authenticate_header)
        }
        StreamableHttpError::SessionExpired => Refusal {
            status: 404,
            reason: "session_expired".to_owned(),
            message: "the server does not know this session (it may have restarted)".to_owned(),
        },
        StreamableHttpError::HttpStatus(status) if (400..500).contains(&status.status) => {
            let mut refusal = Refusal::from_body(status.status, "");
            if let Some(after) = &status.retry_after {
                refusal.message = format!("{}; retry after {after}", refusal.message);
            }
            refusal
        }
        StreamableHttpError::HttpStatus(status) => {
            return Some(HttpFailure::ServerError(status.status));
        }
        // rmcp keeps an HTTP error status it has no variant for as `HTTP <status>: <body>`.
        StreamableHttpError::UnexpectedContentType(content_type) => {
            return Some(HttpFailure::Unreadable(format!(
                "a body of content type `{}`, no JSON-RPC answer",
                content_type.as_deref().unwrap_or("(none)")
            )));
        }
        StreamableHttpError::UnexpectedServerResponse(text) => match http_status_of(text) {
            Some((status @ 400..=499, body)) => Refusal::from_body(status, body),
            Some((status, _)) => return Some(HttpFailure::ServerError(status)),
            // rmcp's words for a body it could not read as JSON-RPC; its type stays out.
            None if text.starts_with(UNPARSABLE) => {
                let detail = text[UNPARSABLE.len()..].trim_start_matches(':').trim();
                return Some(HttpFailure::Unreadable(format!(
                    "a body that is no JSON-RPC message ({})",
                    detail.replace("ServerJsonRpcMessage", "JSON-RPC message")
                )));
            }
            None => {
                return Some(HttpFailure::Broken {
                    cause: err.to_string(),
                    io: None,
                });
            }
        },
        // The HTTP client's own error (connection refused, DNS, TLS…) is not a `source`
        // of rmcp's error: read it here.
        StreamableHttpError::Client(inner) => {
            return Some(HttpFailure::Broken {
                cause: innermost(inner),
                io: io_kind(inner),
            });
        }
        other => {
            return Some(HttpFailure::Broken {
                cause: innermost(other),
                io: io_kind(other),
            });
        }
    };
    Some(HttpFailure::Refused(refusal))
}

/// How rmcp's message for an HTTP body it could not read as JSON-RPC begins.
const UNPARSABLE: &str = "could not parse JSON response as ServerJsonRpcMessage";

/// The status and body of rmcp's `HTTP <status> <text>: <body>` for an HTTP error status
/// it has no variant for: 400 to 599.
fn http_status_of(text: &str) -> Option<(u16, &str)> {
    let rest = text.strip_prefix("HTTP ")?;
    let status: u16 = rest.get(..3)?.parse().ok()?;
    let body = rest.split_once(": ").map_or("", |(_, body)| body);
    (400..600).contains(&status).then_some((status, body))
}

impl Refusal {
    /// From a `WWW-Authenticate` challenge (`Bearer error="…", error_description="…",
    /// scope="…"`).
    fn from_challenge(status: u16, challenge: &str) -> Refusal {
        let params = auth_params(challenge);
        let param = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.is_empty())
        };
        let reason = param("error").map_or_else(|| status_reason(status), str::to_owned);
        let scope = param("scope");
        let message = match (param("error_description"), reason.as_str(), scope) {
            (Some(description), _, Some(scope)) if !description.contains(scope) => {
                format!("{description} (scope: {scope})")
            }
            (Some(description), _, _) => description.to_owned(),
            (None, "insufficient_scope", Some(scope)) => {
                format!("the token lacks the scope this needs: {scope}")
            }
            (None, "insufficient_scope", None) => "the token lacks a scope this needs".to_owned(),
            (None, "invalid_token", _) => "the token is not valid".to_owned(),
            _ if status == 401 => "a valid token is required".to_owned(),
            _ => format!("HTTP {status}"),
        };
        Refusal {
            status,
            reason,
            message,
        }
    }

    /// From a response body: an aac-tools error object (`{"error", "reason", "status"}`),
    /// else its text.
    fn from_body(status: u16, body: &str) -> Refusal {
        let json = serde_json::from_str::<Value>(body).ok();
        let field = |key: &str| {
            json.as_ref()
                .and_then(|v| v.get(key)?.as_str())
                .filter(|v| !v.is_empty())
        };
        let reason = field("reason").map_or_else(|| status_reason(status), str::to_owned);
        let text = body.trim();
        let message = match field("error") {
            Some(error) => error.to_owned(),
            None if text.is_empty() => format!("HTTP {status}"),
            None => {
                const MAX: usize = 300;
                match text.char_indices().nth(MAX) {
                    Some((cut, _)) => format!("{}…", &text[..cut]),
                    None => text.to_owned(),
                }
            }
        };
        Refusal {
            status,
            reason,
            message,
        }
    }
}

/// A reason named after an HTTP status.
fn status_reason(status: u16) -> String {
    let name = match status {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        406 => "not_acceptable",
        408 => "request_timeout",
        409 => "conflict",
        410 => "gone",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        422 => "unprocessable_entity",
        429 => "too_many_requests",
        _ => return format!("http_{status}"),
    };
    name.to_owned()
}

/// The auth-params of a challenge, `Bearer k1="v1", k2=v2`: quoted strings unescaped.
fn auth_params(challenge: &str) -> Vec<(String, String)> {
    let rest = challenge.trim_start();
    // The scheme, unless the header starts with a parameter.
    let rest = match rest.split_once(char::is_whitespace) {
        Some((scheme, params)) if !scheme.contains('=') => params,
        _ => rest,
    };
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ','))
            .collect::<String>()
            .trim()
            .to_owned();
        if key.is_empty() && chars.peek().is_none() {
            return params;
        }
        if chars.next_if_eq(&'=').is_none() {
            if chars.peek().is_none() {
                return params;
            }
            continue;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        } else {
            value.extend(std::iter::from_fn(|| chars.next_if(|c| *c != ',')));
            value = value.trim().to_owned();
        }
        params.push((key, value));
    }
}

/// The innermost cause of an error, in the words of whatever failed last (the operating
/// system, the HTTP client): never the name of a transport type, which only rmcp's outer
/// errors print.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

/// The kind of the I/O error under a transport error, if there is one.
fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut current = Some(error);
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        current = err.source();
    }
    None
}

/// The result of `tools/call`, delivered by the server: a success or a tool error.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    json: Value,
}

impl ToolResult {
    /// Wrap a `CallToolResult` JSON object.
    pub fn from_json(json: Value) -> ToolResult {
        ToolResult { json }
    }

    /// `isError: true`: the server refused the call or the tool failed.
    pub fn is_error(&self) -> bool {
        self.json.get("isError").and_then(Value::as_bool) == Some(true)
    }

    /// `structuredContent`, if any: `null` counts as absent (the text content is then
    /// the result).
    pub fn structured_content(&self) -> Option<&Value> {
        self.json
            .get("structuredContent")
            .filter(|value| !value.is_null())
    }

    /// The content blocks.
    pub fn content(&self) -> &[Value] {
        self.json
            .get("content")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The text of every text content block, one per line.
    pub fn text(&self) -> String {
        self.content()
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// For a tool error in the aac-tools form (the text content is `{"error", "reason",
    /// "status"}`), the machine reason, such as `destructive_flag_missing`. A server that
    /// puts the object in `structuredContent` instead is read too.
    pub fn error_reason(&self) -> Option<String> {
        let body = self.error_body()?;
        body.get("reason")?.as_str().map(str::to_owned)
    }

    /// For a tool error, the human message: the `error` of the aac-tools error object if
    /// the server gives one, else the text content.
    pub fn error_message(&self) -> Option<String> {
        if !self.is_error() {
            return None;
        }
        let message = self
            .error_body()
            .and_then(|body| body.get("error")?.as_str().map(str::to_owned));
        Some(message.unwrap_or_else(|| self.text()))
    }

    /// The `{"error", "reason", "status"}` object of a tool error: the first text content
    /// parsed as JSON, else `structuredContent`.
    fn error_body(&self) -> Option<Value> {
        if !self.is_error() {
            return None;
        }
        let from_text = self
            .content()
            .iter()
            .find(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .and_then(|block| block.get("text")?.as_str())
            .and_then(|text| serde_json::from_str::<Value>(text).ok());
        let is_error_object = |v: &Value| v.get("error").is_some_and(Value::is_string);
        from_text.filter(is_error_object).or_else(|| {
            self.structured_content()
                .filter(|v| is_error_object(v))
                .cloned()
        })
    }

    /// The whole `CallToolResult` object.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The whole `CallToolResult` object, by value.
    pub fn into_json(self) -> Value {
        self.json
    }
}

/// The client side of a connection: its capabilities, and the person's answers to a
/// server's confirmations.
struct HostHandler {
    config: ClientConfig,
    ask_user: Option<AskUser>,
    declined_unshown: Option<DeclinedUnshown>,
    asking: Arc<Asking>,
}

/// Whether the person is being asked a server's question, and how long they have spent
/// on such questions: a request's clock stops while they read and decide, and goes on
/// from where it stopped (it does not start again: a server that asks question after
/// question, answered at once, does not hold a request past its timeout).
#[derive(Default)]
struct Asking(std::sync::Mutex<AskingState>);

#[derive(Default)]
struct AskingState {
    /// Questions open now.
    now: usize,
    /// Since when a question has been open, while one is.
    since: Option<tokio::time::Instant>,
    /// The time spent with a question open, in all, before `since`.
    spent: Duration,
}

impl Asking {
    /// Until the returned guard is dropped, a person is being asked.
    fn begin(self: &Arc<Self>) -> AskingGuard {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        state.now += 1;
        if state.now == 1 {
            state.since = Some(tokio::time::Instant::now());
        }
        AskingGuard(Arc::clone(self))
    }

    /// The time spent asking so far (a request's clock subtracts what it saw of it).
    fn spent(&self) -> Duration {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).spent
    }

    /// When a request that began at `start` (when the time spent asking was `spent_then`)
    /// times out after `limit`: never while a person is asked (or past what an instant
    /// can hold), else `limit` of its own time after `start`.
    fn deadline(
        &self,
        start: tokio::time::Instant,
        spent_then: Duration,
        limit: Duration,
    ) -> Option<tokio::time::Instant> {
        let state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if state.now > 0 {
            return None;
        }
        start.checked_add(limit.checked_add(state.spent.saturating_sub(spent_then))?)
    }
}

struct AskingGuard(Arc<Asking>);

impl Drop for AskingGuard {
    fn drop(&mut self) {
        let mut state = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        state.now -= 1;
        if state.now == 0
            && let Some(since) = state.since.take()
        {
            state.spent += since.elapsed();
        }
    }
}

/// The length of `value` as compact JSON, counted without writing it anywhere.
fn serialized_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Tells the server that the request `id` is abandoned (`notifications/cancelled`) if
/// dropped armed: when the caller stops waiting for the answer, as rmcp's own calls do.
struct Abandoned(Option<(rmcp::Peer<RoleClient>, rmcp::model::RequestId)>);

impl Abandoned {
    fn notice(id: rmcp::model::RequestId) -> CancelledNotificationParam {
        CancelledNotificationParam::new(
            Some(id),
            Some("request abandoned by the caller".to_owned()),
        )
    }

    /// Tell the server now (within a second: the connection may be what failed), and
    /// disarm.
    async fn cancel(&mut self) {
        if let Some((peer, id)) = self.0.take() {
            let notice = peer.notify_cancelled(Abandoned::notice(id));
            let _ = tokio::time::timeout(Duration::from_secs(1), notice).await;
        }
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        // Dropped while waiting (the caller gave up): told as soon as the runtime can.
        if let (Some((peer, id)), Ok(runtime)) =
            (self.0.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move {
                let _ = peer.notify_cancelled(Abandoned::notice(id)).await;
            });
        }
    }
}

/// What starts each line of a stdio server's log shown by [`ChildStderr::Escaped`].
const LOG_PREFIX: &str = "server: ";

/// A child's stderr, line by line, escaped, onto this process's stderr.
async fn copy_escaped(from: tokio::process::ChildStderr) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    const MAX_LINE: usize = 64 * 1024;
    let mut reader = tokio::io::BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        // At most a bounded line at a time: the rest of a longer one comes as the next.
        let read = (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.strip_suffix('\n').unwrap_or(&text);
                let text = text.strip_suffix('\r').unwrap_or(text);
                // Marked as the server's, so that a log line cannot pass for the host's
                // own (a question of its own making), and escaped as the host escapes
                // the server's other text; one write, so it is not cut by another line.
                eprintln!("{LOG_PREFIX}{}", crate::host::escape_line(text));
            }
        }
    }
}

impl ClientHandler for HostHandler {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let action = match (&self.ask_user, request) {
            (
                Some(ask),
                ElicitRequestParams::FormElicitationParams {
                    message,
                    requested_schema,
                    ..
                },
            ) if requested_schema.properties.is_empty() => {
                let _asking = self.asking.begin();
                match ask(message).await {
                    UserAnswer::Accept => ElicitationAction::Accept,
                    UserAnswer::Decline => ElicitationAction::Decline,
                    UserAnswer::Cancel => ElicitationAction::Cancel,
                }
            }
            // Nothing this client can show: declined, and the host told so.
            _ => {
                if let Some(told) = &self.declined_unshown {
                    told();
                }
                ElicitationAction::Decline
            }
        };
        Ok(ElicitResult::new(action))
    }
}

/// A connection to one MCP server, as a client.
///
/// Dropping it closes the connection (and kills a stdio child).
pub struct Client {
    service: RunningService<RoleClient, HostHandler>,
    server_name: Option<String>,
    timeout: Option<Duration>,
    /// Whether a person is answering a server's question (the timeout waits for them).
    asking: Arc<Asking>,
    /// Over Streamable HTTP: tells the server's HTTP refusals from transport failures.
    http: Option<HttpReader>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("server_name", &self.server_name)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connect and complete the MCP handshake.
    pub async fn connect(endpoint: &Endpoint) -> Result<Client, ClientError> {
        let mut capabilities = ClientCapabilities::default();
        if endpoint.ask_user.is_some() {
            capabilities.elicitation =
                Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        }
        let config = HostHandler {
            // The session protocols only (2025-11-25 and before): a server's question is
            // an `elicitation/create` answered within the one `tools/call`, never a
            // 2026-07-28 `input_required` round that sends the call again.
            config: ClientConfig::new(
                capabilities,
                Implementation::new("aac-tools-host", env!("CARGO_PKG_VERSION")),
            )
            .with_protocol_version(ProtocolVersion::V_2025_11_25),
            ask_user: endpoint.ask_user.clone(),
            declined_unshown: endpoint.declined_unshown.clone(),
            asking: Arc::default(),
        };
        let asking = Arc::clone(&config.asking);
        let mut http = None;
        let service = match &endpoint.kind {
            Kind::Stdio {
                program,
                args,
                env,
                stderr,
            } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).envs(env.iter().map(|(k, v)| (k, v)));
                let escaped = *stderr == ChildStderr::Escaped;
                let stderr = match stderr {
                    ChildStderr::Inherit => std::process::Stdio::inherit(),
                    ChildStderr::Escaped => std::process::Stdio::piped(),
                    ChildStderr::Discard => std::process::Stdio::null(),
                    ChildStderr::File(path) => std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .map_err(|err| {
                            ClientError::new(
                                ClientErrorKind::Connect,
                                format!("cannot open the server log `{}`: {err}", path.display()),
                            )
                        })?
                        .into(),
                };
                // In a session of its own (setsid), the child has no controlling terminal:
                // it cannot open `/dev/tty` to draw over (or read the answer to) the
                // question asked there. Killing it kills its process group.
                #[cfg(unix)]
                let command = {
                    let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
                    wrapped.wrap(process_wrap::tokio::ProcessSession);
                    wrapped
                };
                let (transport, child_stderr) = TokioChildProcess::builder(command)
                    .stderr(stderr)
                    .spawn()
                    .map_err(|err| {
                        ClientError::new(
                            ClientErrorKind::Connect,
                            format!("cannot start `{endpoint}`: {err}"),
                        )
                    })?;
                if let (true, Some(child_stderr)) = (escaped, child_stderr) {
                    tokio::spawn(copy_escaped(child_stderr));
                }
                config.serve(transport).await
            }
            Kind::Http { url, bearer } => {
                // A 404 to a request of the session is the server's answer: the request is
                // not sent again on a new session, which rmcp would do by default.
                let mut config_http = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .reinit_on_expired_session(false);
                if let Some(token) = bearer {
                    config_http = config_http.auth_header(token.as_str());
                }
                let transport = StreamableHttpClientTransport::from_config(config_http);
                http = Some(http_reader(&transport));
                config.serve(transport).await
            }
        };
        let service = service.map_err(|err| ClientError::from_initialize(err, endpoint, http))?;
        let server_name = service
            .peer_info()
            .and_then(|info| info.server_info.as_ref().map(|i| i.name.clone()));
        Ok(Client {
            service,
            server_name,
            timeout: None,
            asking,
            http,
        })
    }

    /// Give up on a request after `timeout` (a transport failure: the server may still
    /// run it), not counting the time a person spends answering the server's questions
    /// asked meanwhile (a confirmation): the clock stops while they are asked and goes
    /// on after their answer. `tools/list` has one timeout for all its pages. No timeout
    /// by default; one too long for the clock is none.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = Some(timeout);
        self
    }

    /// The server's name, as it gave it in the handshake.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Every tool the server lists (all pages), each as its MCP `Tool` JSON object.
    ///
    /// The list is read leniently, one tool at a time: an entry rmcp's types would refuse
    /// (a hint that is not a boolean, an unknown field) does not spoil the others. Each
    /// entry is returned as the server sent it; [`crate::host::ToolPolicy::new`] refuses
    /// one without a string `name` and counts a hint that is not a boolean as absent.
    pub async fn list_tools(&self) -> Result<Vec<Value>, ClientError> {
        const WHAT: &str = "tools/list";
        /// A server that pages forever is not listed forever.
        const MAX_PAGES: usize = 1000;
        /// Nor kept in memory without end: a server listing more tools than this is
        /// refused (each tool is a JSON value of its own, many times its bytes).
        const MAX_TOOLS: usize = 10_000;
        /// Nor many tools of huge descriptions, nor huge cursors: the tools and the
        /// cursors of one list, as serialized, fill at most this many bytes.
        const MAX_BYTES: usize = 32 * 1024 * 1024;
        let too_big = || {
            ClientError::new(
                ClientErrorKind::Protocol,
                format!(
                    "the server's tools/list is larger than {} MiB",
                    MAX_BYTES / (1024 * 1024)
                ),
            )
        };
        let mut tools = Vec::new();
        let mut bytes = 0usize;
        // The cursors seen, each kept as a hash (keyed at random, so no server can make
        // two collide), not as the string: a cursor may be as long as the bound allows.
        let seen = std::collections::hash_map::RandomState::new();
        let mut cursors = std::collections::HashSet::new();
        let mut cursor: Option<String> = None;
        // One timeout for the whole list, not one per page.
        let started = (tokio::time::Instant::now(), self.asking.spent());
        for _ in 0..MAX_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
            let answer = self
                .bounded_since(started, self.service.peer().send_request(request), WHAT)
                .await?;
            // A page rmcp could read as a `ListToolsResult`, or else the raw JSON it kept.
            let page = match answer {
                ServerResult::ListToolsResult(page) => serde_json::to_value(page).ok(),
                ServerResult::CustomResult(CustomResult(page)) => Some(page),
                _ => None,
            };
            let Some(Value::Object(mut page)) = page else {
                return Err(ClientError::new(
                    ClientErrorKind::Protocol,
                    "the server's answer to tools/list is not a list of tools",
                ));
            };
            match page.remove("tools") {
                Some(Value::Array(more)) if tools.len() + more.len() > MAX_TOOLS => {
                    return Err(ClientError::new(
                        ClientErrorKind::Protocol,
                        format!("the server lists more than {MAX_TOOLS} tools"),
                    ));
                }
                Some(Value::Array(more)) => {
                    bytes = bytes.saturating_add(more.iter().map(serialized_len).sum::<usize>());
                    if bytes > MAX_BYTES {
                        return Err(too_big());
                    }
                    tools.extend(more);
                }
                _ => {
                    return Err(ClientError::new(
                        ClientErrorKind::Protocol,
                        "the server's answer to tools/list has no `tools` array",
                    ));
                }
            }
            cursor = match page.remove("nextCursor") {
                Some(Value::String(next)) => Some(next),
                _ => return Ok(tools),
            };
            // An empty page with a huge new cursor, page after page, counts too.
            let next = cursor.as_deref().unwrap_or_default();
            bytes = bytes.saturating_add(next.len());
            if bytes > MAX_BYTES {
                return Err(too_big());
            }
            if !cursors.insert(std::hash::BuildHasher::hash_one(&seen, next)) {
                return Err(ClientError::new(
                    ClientErrorKind::Protocol,
                    "the server's tools/list pages loop (a cursor came twice)",
                ));
            }
        }
        Err(ClientError::new(
            ClientErrorKind::Protocol,
            format!("the server's tools/list has more than {MAX_PAGES} pages"),
        ))
    }

    /// Call a tool by name with JSON arguments: one `tools/call` request, never repeated.
    ///
    /// `arguments` must be a JSON object or `null` (no arguments).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<ToolResult, ClientError> {
        let arguments = match arguments {
            Value::Null => None,
            Value::Object(map) => Some(map),
            other => {
                return Err(ClientError::new(
                    ClientErrorKind::Protocol,
                    format!("tool arguments must be a JSON object, not `{other}`"),
                ));
            }
        };
        self.call_tool_object(name, arguments).await
    }

    /// [`Client::call_tool`] with the arguments as a JSON object.
    pub async fn call_tool_object(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
    ) -> Result<ToolResult, ClientError> {
        let mut params = CallToolRequestParams::new(Cow::Owned(name.to_owned()));
        params.arguments = arguments;
        let what = format!("tools/call `{name}`");
        // One `tools/call`, whatever it is answered: rmcp's service call would answer a
        // 2026-07-28 `input_required` result and send the call again (up to ten times
        // for one yes), and this client speaks the session protocols. Read here rather
        // than by rmcp's `call_tool_once`, which takes an answer without `content` (`{}`)
        // for an empty result: a host would print nothing and report success.
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let peer = self.service.peer();
        let handle = peer
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await
            .map_err(|err| ClientError::from_service(err, &what, self.http))?;
        let mut abandoned = Abandoned(Some((peer.clone(), handle.id.clone())));
        let response = match self.bounded(handle.await_response(), &what).await {
            Ok(response) => response,
            Err(err) => {
                // No answer (in time): the server is told, before the connection closes.
                if err.is_transport_failure() {
                    abandoned.cancel().await;
                }
                abandoned.0 = None;
                return Err(err);
            }
        };
        abandoned.0 = None;
        let result = match response {
            ServerResult::CallToolResult(result) => result,
            ServerResult::InputRequiredResult(_) => {
                return Err(ClientError::new(
                    ClientErrorKind::InputRequired,
                    format!(
                        "the server answered {what} that it needs input first (a 2026-07-28 \
                         `input_required` result, which this client does not answer): the \
                         call did not complete, and was not sent again"
                    ),
                ));
            }
            ServerResult::EmptyResult(_) | ServerResult::CustomResult(_) => {
                return Err(ClientError::new(
                    ClientErrorKind::Protocol,
                    format!(
                        "the server's answer to {what} has no `content` (nor `structuredContent`, \
                         nor `isError`): it says nothing of what ran"
                    ),
                ));
            }
            // A task (which this client did not ask for) may be running the tool.
            _ => {
                return Err(ClientError::new(
                    ClientErrorKind::Protocol,
                    format!("the server's answer to {what} is not a result of it"),
                ));
            }
        };
        let json = serde_json::to_value(&result).map_err(|err| {
            ClientError::new(
                ClientErrorKind::Protocol,
                format!("cannot read the result of `{name}`: {err}"),
            )
        })?;
        Ok(ToolResult::from_json(json))
    }

    /// Close the connection (and stop a stdio child).
    pub async fn close(mut self) {
        let _ = self.service.close().await;
    }

    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, ServiceError>>,
        what: &str,
    ) -> Result<T, ClientError> {
        let started = (tokio::time::Instant::now(), self.asking.spent());
        self.bounded_since(started, request, what).await
    }

    /// [`Client::bounded`] for a request that is part of one begun at `started` (its
    /// instant, and the time spent asking then).
    async fn bounded_since<T>(
        &self,
        (start, spent_then): (tokio::time::Instant, Duration),
        request: impl Future<Output = Result<T, ServiceError>>,
        what: &str,
    ) -> Result<T, ClientError> {
        let answer = match self.timeout {
            None => request.await,
            Some(limit) => {
                // The time a person spends on a server's question (a confirmation the
                // server asks for while the call waits) is not the server's: the clock
                // stops while they are asked and goes on after their answer.
                tokio::pin!(request);
                // While a person is asked, look again at this pace.
                let poll = limit.min(Duration::from_secs(1));
                loop {
                    let deadline = self.asking.deadline(start, spent_then, limit);
                    let wake = deadline.unwrap_or_else(|| tokio::time::Instant::now() + poll);
                    tokio::select! {
                        answer = &mut request => break answer,
                        () = tokio::time::sleep_until(wake) => {
                            if self
                                .asking
                                .deadline(start, spent_then, limit)
                                .is_some_and(|due| due <= tokio::time::Instant::now())
                            {
                                break Err(ServiceError::Timeout { timeout: limit });
                            }
                        }
                    }
                }
            }
        };
        answer.map_err(|err| ClientError::from_service(err, what, self.http))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(challenge: &str) -> Vec<(String, String)> {
        auth_params(challenge)
    }

    #[test]
    fn challenges_are_read_as_auth_params() {
        assert_eq!(
            pairs(
                r#"Bearer error="insufficient_scope", scope="a:b c:d", resource_metadata="http://x/y""#
            ),
            [
                ("error".to_owned(), "insufficient_scope".to_owned()),
                ("scope".to_owned(), "a:b c:d".to_owned()),
                ("resource_metadata".to_owned(), "http://x/y".to_owned()),
            ]
        );
        assert_eq!(
            pairs(r#"Bearer error=invalid_token , error_description="say \"no\", twice""#),
            [
                ("error".to_owned(), "invalid_token".to_owned()),
                (
                    "error_description".to_owned(),
                    r#"say "no", twice"#.to_owned()
                ),
            ]
        );
        assert!(pairs("Bearer").is_empty());
        assert!(pairs("").is_empty());
        assert_eq!(
            pairs("Bearer realm, x=1").len(),
            1,
            "a bare word is skipped"
        );
        assert_eq!(pairs(r#"Bearer a="unterminated"#).len(), 1);
    }

    #[test]
    fn a_challenge_gives_the_reason_and_names_the_scope() {
        let refusal = Refusal::from_challenge(
            403,
            r#"Bearer error="insufficient_scope", scope="dashboard:read""#,
        );
        assert_eq!(refusal.reason(), "insufficient_scope");
        assert_eq!(
            refusal.message(),
            "the token lacks the scope this needs: dashboard:read"
        );
        let refusal = Refusal::from_challenge(401, r#"Bearer resource_metadata="http://x""#);
        assert_eq!(refusal.reason(), "unauthorized");
        let refusal = Refusal::from_challenge(
            401,
            r#"Bearer error="invalid_token", error_description="expired""#,
        );
        assert_eq!(
            (refusal.reason(), refusal.message()),
            ("invalid_token", "expired")
        );
    }

    #[test]
    fn a_body_gives_the_reason_and_message() {
        let refusal = Refusal::from_body(404, r#"{"error":"no issue","reason":"not_found"}"#);
        assert_eq!(
            (refusal.reason(), refusal.message()),
            ("not_found", "no issue")
        );
        let refusal = Refusal::from_body(418, " teapot \n");
        assert_eq!(
            (refusal.reason(), refusal.message()),
            ("http_418", "teapot")
        );
        let refusal = Refusal::from_body(400, "");
        assert_eq!(
            (refusal.reason(), refusal.message()),
            ("bad_request", "HTTP 400")
        );
        let long = "x".repeat(1000);
        assert_eq!(
            Refusal::from_body(400, &long).message().chars().count(),
            301
        );
        assert_eq!(http_status_of("HTTP 403 Forbidden: {}"), Some((403, "{}")));
        assert_eq!(http_status_of("HTTP 200 OK: x"), None);
        assert_eq!(http_status_of("something else"), None);
    }
}
