//! The context of one call, and the channel back to the client.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::BoxFuture;
use crate::error::ToolError;
use crate::principal::Principal;

/// The transport a call arrived on; it is written into every audit record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// MCP over stdio.
    Stdio,
    /// MCP over Streamable HTTP (`/mcp`).
    StreamableHttp,
    /// Plain JSON over HTTP (`POST /tools/{name}`).
    PlainHttp,
    /// A direct call through [`Server::call`](crate::Server::call) (tests, benchmarks).
    InProcess,
}

impl Transport {
    /// `stdio`, `streamable_http`, `http` or `in_process`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::StreamableHttp => "streamable_http",
            Transport::PlainHttp => "http",
            Transport::InProcess => "in_process",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The severity of a log message sent to the client (the MCP / syslog levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    /// The MCP name of the level (`debug`, `info`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

/// What a transport offers a running tool: notifications to the client and requests to it.
///
/// Implemented by the MCP transports; transports without a client channel (plain HTTP,
/// in-process calls) have none, and [`Ctx`] then turns notifications into no-ops and
/// requests into errors.
pub trait ClientPeer: Send + Sync + 'static {
    /// Send `notifications/progress` for this call (only if the client asked for progress).
    fn progress<'a>(
        &'a self,
        progress: f64,
        total: Option<f64>,
        message: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), ToolError>>;

    /// Send `notifications/message` (the client's `logging/setLevel` filters it).
    fn log<'a>(
        &'a self,
        level: LogLevel,
        logger: Option<&'a str>,
        data: Value,
    ) -> BoxFuture<'a, Result<(), ToolError>>;

    /// Send `sampling/createMessage` with these params and return the client's result.
    fn create_message(&self, params: Value) -> BoxFuture<'_, Result<Value, ToolError>>;

    /// Send `elicitation/create` with these params and return the client's result
    /// (`{"action": …, "content": …}`).
    fn elicit(&self, params: Value) -> BoxFuture<'_, Result<Value, ToolError>>;

    /// How the person behind the client can be asked to confirm a destructive call
    /// (`docs/confirmation.md`). By default they cannot.
    fn asking(&self) -> crate::confirm::Asking {
        crate::confirm::Asking::Unavailable("this transport has no way to ask the user".to_owned())
    }
}

/// The context of one call: who calls, over what, and the way back to the client.
///
/// Take it as a parameter of a tool (`ctx: Ctx`) to report progress, log to the client,
/// ask it for a sampling or an elicitation, or notice cancellation.
#[derive(Clone)]
pub struct Ctx {
    inner: Arc<CtxInner>,
}

struct CtxInner {
    tool: &'static str,
    principal: Arc<Principal>,
    transport: Transport,
    request_id: Option<String>,
    peer: Option<Arc<dyn ClientPeer>>,
    cancel: CancellationToken,
    /// Where [`Ctx::notify_resource_updated`] announces a change (the server's).
    updates: Option<tokio::sync::broadcast::Sender<String>>,
}

impl Ctx {
    pub(crate) fn new(
        tool: &'static str,
        principal: Arc<Principal>,
        transport: Transport,
        request_id: Option<String>,
        peer: Option<Arc<dyn ClientPeer>>,
        cancel: CancellationToken,
    ) -> Ctx {
        Ctx {
            inner: Arc::new(CtxInner {
                tool,
                principal,
                transport,
                request_id,
                peer,
                cancel,
                updates: None,
            }),
        }
    }

    /// The same context, announcing resource changes to the subscribers of `updates`.
    pub(crate) fn announcing(mut self, updates: tokio::sync::broadcast::Sender<String>) -> Ctx {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.updates = Some(updates);
        }
        self
    }

    /// The name of the tool being called.
    pub fn tool(&self) -> &'static str {
        self.inner.tool
    }

    /// The authenticated caller.
    pub fn principal(&self) -> &Principal {
        &self.inner.principal
    }

    /// The transport of the call.
    pub fn transport(&self) -> Transport {
        self.inner.transport
    }

    /// The request id (JSON-RPC id or HTTP request id), if any.
    pub fn request_id(&self) -> Option<&str> {
        self.inner.request_id.as_deref()
    }

    /// Fires when the client cancels the call.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// Whether the client has cancelled the call.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Report progress; a no-op when the transport or the client does not track it.
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), ToolError> {
        match &self.inner.peer {
            Some(peer) => peer.progress(progress, total, message).await,
            None => Ok(()),
        }
    }

    /// Log a message to the client; a no-op on transports without a client channel.
    pub async fn log(&self, level: LogLevel, data: impl Into<Value>) -> Result<(), ToolError> {
        match &self.inner.peer {
            Some(peer) => peer.log(level, Some(self.inner.tool), data.into()).await,
            None => Ok(()),
        }
    }

    /// Ask the client's model for a completion (`sampling/createMessage`).
    pub async fn create_message(&self, params: Value) -> Result<Value, ToolError> {
        self.peer()?.create_message(params).await
    }

    /// Ask the user for input through the client (`elicitation/create`).
    pub async fn elicit(&self, params: Value) -> Result<Value, ToolError> {
        self.peer()?.elicit(params).await
    }

    /// Tell every MCP session subscribed to the resource `uri` (`resources/subscribe`)
    /// that it changed, as [`Server::notify_resource_updated`](crate::Server::notify_resource_updated)
    /// does: call it once the change is committed (a subscriber reads the resource again,
    /// through the pipeline). A resource reachable by several URIs (a key and an id, say)
    /// is announced under each. Sessions not subscribed to `uri` get nothing; without a
    /// server behind the call (a handler called directly) it does nothing.
    pub fn notify_resource_updated(&self, uri: impl Into<String>) {
        if let Some(updates) = &self.inner.updates {
            // No receiver (no session subscribed to anything) is not an error.
            let _ = updates.send(uri.into());
        }
    }

    fn peer(&self) -> Result<&Arc<dyn ClientPeer>, ToolError> {
        self.inner.peer.as_ref().ok_or_else(|| {
            ToolError::bad_request(
                "client_channel_unavailable",
                format!(
                    "the {} transport cannot send requests to the client",
                    self.inner.transport
                ),
            )
        })
    }
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("tool", &self.inner.tool)
            .field("principal", &self.inner.principal.to_string())
            .field("transport", &self.inner.transport)
            .field("request_id", &self.inner.request_id)
            .finish_non_exhaustive()
    }
}
