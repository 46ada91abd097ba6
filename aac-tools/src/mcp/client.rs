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
//! No rmcp type appears in this module's public API.
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
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, FormElicitationCapability, Implementation,
};
use rmcp::service::{RequestContext, RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData};
use serde_json::{Map, Value};

/// Asks the person at the host a yes/no question (a server's confirmation of a
/// destructive call) and answers whether they said yes.
pub type AskUser = Arc<dyn Fn(String) -> crate::BoxFuture<'static, bool> + Send + Sync>;

/// Where an MCP server is: a command to run (stdio) or a Streamable HTTP URL.
#[derive(Clone)]
pub struct Endpoint {
    kind: Kind,
    ask_user: Option<AskUser>,
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
        }
    }

    /// Answer a server's confirmations (`elicitation/create` in form mode with nothing to
    /// fill in: accept or decline) by asking the person with `ask`; the client then
    /// declares the elicitation capability. Any other elicitation is declined.
    pub fn ask_user(mut self, ask: AskUser) -> Endpoint {
        self.ask_user = Some(ask);
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
    /// Nowhere.
    Discard,
    /// Appended to this file, created if needed.
    File(PathBuf),
}

/// What went wrong, as a host must tell it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientErrorKind {
    /// The connection could not be set up (the command did not start, the handshake
    /// failed). No tool call was sent.
    Connect,
    /// The request may or may not have reached the server: the connection broke, the
    /// child exited, or no answer came in time. Retry only what is safe to retry.
    Transport,
    /// The server refused the credentials (HTTP 401 or 403 on the transport).
    Unauthorized,
    /// The server answered with a JSON-RPC error, or with something that is not an answer
    /// to the request. The request was delivered; it is not retried.
    Protocol,
}

/// An error of [`Client`]: a kind and a lowercase message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError {
    kind: ClientErrorKind,
    code: Option<i64>,
    message: String,
}

impl ClientError {
    fn new(kind: ClientErrorKind, message: impl Into<String>) -> ClientError {
        ClientError {
            kind,
            code: None,
            message: message.into(),
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

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn from_service(err: ServiceError, doing: &str) -> ClientError {
        match err {
            ServiceError::McpError(data) => ClientError {
                kind: ClientErrorKind::Protocol,
                code: Some(i64::from(data.code.0)),
                message: format!(
                    "the server answered {doing} with error {}: {}",
                    data.code.0, data.message
                ),
            },
            ServiceError::TransportSend(ref inner) if err.is_authorization_required() => {
                ClientError::new(
                    ClientErrorKind::Unauthorized,
                    format!("the server refused the credentials {doing}: {inner}"),
                )
            }
            ServiceError::TransportSend(inner) => ClientError::new(
                ClientErrorKind::Transport,
                format!("transport failure {doing}: {inner}"),
            ),
            ServiceError::TransportClosed => ClientError::new(
                ClientErrorKind::Transport,
                format!("the connection closed {doing}"),
            ),
            ServiceError::Timeout { timeout } => ClientError::new(
                ClientErrorKind::Transport,
                format!("no answer {doing} within {} ms", timeout.as_millis()),
            ),
            ServiceError::Cancelled { reason } => ClientError::new(
                ClientErrorKind::Transport,
                format!(
                    "the request was cancelled {doing}: {}",
                    reason.as_deref().unwrap_or("no reason given")
                ),
            ),
            other => ClientError::new(
                ClientErrorKind::Protocol,
                format!("unexpected answer {doing}: {other}"),
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

    /// `structuredContent`, if any.
    pub fn structured_content(&self) -> Option<&Value> {
        self.json.get("structuredContent")
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
                if ask(message).await {
                    ElicitationAction::Accept
                } else {
                    ElicitationAction::Decline
                }
            }
            _ => ElicitationAction::Decline,
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
            config: ClientConfig::new(
                capabilities,
                Implementation::new("aac-tools-host", env!("CARGO_PKG_VERSION")),
            ),
            ask_user: endpoint.ask_user.clone(),
        };
        let service = match &endpoint.kind {
            Kind::Stdio {
                program,
                args,
                env,
                stderr,
            } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).envs(env.iter().map(|(k, v)| (k, v)));
                let stderr = match stderr {
                    ChildStderr::Inherit => std::process::Stdio::inherit(),
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
                let (transport, _) = TokioChildProcess::builder(command)
                    .stderr(stderr)
                    .spawn()
                    .map_err(|err| {
                        ClientError::new(
                            ClientErrorKind::Connect,
                            format!("cannot start `{endpoint}`: {err}"),
                        )
                    })?;
                config.serve(transport).await
            }
            Kind::Http { url, bearer } => {
                let mut http = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = bearer {
                    http = http.auth_header(token.as_str());
                }
                config
                    .serve(StreamableHttpClientTransport::from_config(http))
                    .await
            }
        };
        let service = service.map_err(|err| {
            if err.is_authorization_required() {
                ClientError::new(
                    ClientErrorKind::Unauthorized,
                    format!("the server at `{endpoint}` refused the credentials: {err}"),
                )
            } else {
                ClientError::new(
                    ClientErrorKind::Connect,
                    format!("cannot connect to `{endpoint}`: {err}"),
                )
            }
        })?;
        let server_name = service
            .peer_info()
            .and_then(|info| info.server_info.as_ref().map(|i| i.name.clone()));
        Ok(Client {
            service,
            server_name,
            timeout: None,
        })
    }

    /// Give up on a request after `timeout` (a transport failure: the server may still
    /// run it). No timeout by default.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = Some(timeout);
        self
    }

    /// The server's name, as it gave it in the handshake.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Every tool the server lists (all pages), each as its MCP `Tool` JSON object.
    pub async fn list_tools(&self) -> Result<Vec<Value>, ClientError> {
        const DOING: &str = "to tools/list";
        let tools = self
            .bounded(self.service.peer().list_all_tools(), DOING)
            .await?;
        tools
            .iter()
            .map(|tool| {
                serde_json::to_value(tool).map_err(|err| {
                    ClientError::new(
                        ClientErrorKind::Protocol,
                        format!("cannot read a tool definition: {err}"),
                    )
                })
            })
            .collect()
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
        let doing = format!("to tools/call `{name}`");
        // The service's call (not the peer's) answers a 2026-07-28 `InputRequiredResult`
        // through the handler and retries.
        let result = self.bounded(self.service.call_tool(params), &doing).await?;
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
        doing: &str,
    ) -> Result<T, ClientError> {
        let answer = match self.timeout {
            None => request.await,
            Some(limit) => match tokio::time::timeout(limit, request).await {
                Ok(answer) => answer,
                Err(_) => Err(ServiceError::Timeout { timeout: limit }),
            },
        };
        answer.map_err(|err| ClientError::from_service(err, doing))
    }
}
