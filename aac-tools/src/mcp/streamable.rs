//! Streamable HTTP from rmcp: the service behind `/mcp`.
//!
//! Host/Origin checks, the body limit and authentication are done by [`crate::http`]
//! before a request reaches this service; the verified principal arrives in the
//! request's extensions.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use futures_core::Stream;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ProtocolVersion, ServerJsonRpcMessage, ServerResult};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::handler::{McpHandler, Shared};
use crate::context::Transport as CallTransport;
use crate::server::Server;

/// The header of a Streamable HTTP session's id.
const SESSION_ID: &str = "mcp-session-id";

/// How `/mcp` is served.
pub(crate) struct StreamableOptions {
    /// No sessions: every POST stands alone (for replicas behind a load balancer).
    pub(crate) stateless: bool,
    /// Bodies larger than this are refused with 413.
    pub(crate) max_body_bytes: usize,
    /// Cancelled when the server begins to shut down: calls stop waiting for their
    /// clients' answers (a person asked to confirm), and end as cancelled.
    pub(crate) shutdown: CancellationToken,
    /// Cancelled when the calls taken have been answered (or past the drain's limit):
    /// every session and stream ends.
    pub(crate) sessions_stop: CancellationToken,
}

/// The `/mcp` endpoint: rmcp's Streamable HTTP service over our handler.
#[derive(Clone)]
pub(crate) struct McpService {
    service: StreamableHttpService<McpHandler, Sessions>,
    sessions: Arc<Sessions>,
}

impl McpService {
    pub(crate) fn new(server: Server, options: StreamableOptions) -> io::Result<McpService> {
        // Stateless, no stream can carry an update: subscriptions are not offered.
        let shared = Shared::with_subscriptions(server, !options.stateless)?;
        let config = StreamableHttpServerConfig::default()
            // Our HTTP layer checks Host and Origin for every route, /mcp included.
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_legacy_session_mode(!options.stateless)
            .with_json_response(options.stateless)
            .with_max_request_body_bytes(options.max_body_bytes)
            .with_cancellation_token(options.sessions_stop);
        let ends = Arc::new(SessionEnds::default());
        let sessions = Arc::new(Sessions {
            inner: LocalSessionManager::default(),
            ends: Arc::clone(&ends),
        });
        // Stateless, a request has no session to end (a session id it sends names none).
        let stateful = !options.stateless;
        let shutdown = options.shutdown;
        let service = StreamableHttpService::new(
            move || {
                let handler =
                    McpHandler::new(Arc::clone(&shared), CallTransport::StreamableHttp, None)
                        .with_connection_closed(shutdown.clone());
                Ok(if stateful {
                    handler.with_session_ends(Arc::clone(&ends))
                } else {
                    handler
                })
            },
            Arc::clone(&sessions),
            config,
        );
        Ok(McpService { service, sessions })
    }

    /// Answer one request (called directly: no router or boxed service in between).
    ///
    /// Boxed: rmcp's future is several kilobytes, and inline it made the `/mcp` gate's
    /// future 11.8 KB, copied whole each time the request's future moved (into its box,
    /// into its task).
    pub(crate) fn handle(
        &self,
        request: axum::extract::Request,
    ) -> futures_core::future::BoxFuture<'_, axum::response::Response> {
        let session = request.headers().get(SESSION_ID).cloned();
        Box::pin(async move {
            let response = self
                .service
                .handle(request)
                .await
                .map(axum::body::Body::new);
            // The session named, or the one an `initialize` opened.
            let session = session.or_else(|| response.headers().get(SESSION_ID).cloned());
            match session {
                Some(id)
                    if id
                        .to_str()
                        .is_ok_and(|id| self.sessions.ends.is_unprimed(id)) =>
                {
                    without_priming_events(response)
                }
                _ => response,
            }
        })
    }

    /// Whether session `id` is open.
    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.sessions.ends.is_open(id)
    }

    /// Whether rmcp knows session `id`: what it answers a POST or a GET naming one it does
    /// not know with 404.
    pub(crate) async fn has_session(&self, id: &str) -> bool {
        self.sessions.has_session(&id.into()).await.unwrap_or(false)
    }

    /// End session `id` and its streams, as a `DELETE` of it would (an unknown id is
    /// ignored).
    pub(crate) async fn close_session(&self, id: &str) {
        if let Err(err) = self.sessions.close_session(&id.into()).await {
            tracing::debug!(session = id, error = %err, "closing an MCP session failed");
        }
    }
}

/// The end of every open session, by id: cancelled the moment the session ends, however
/// it ends (a `DELETE`, closed by the server past its principal's cap, idle, its worker
/// failing, the server shutting down).
///
/// rmcp tells a call of its session's end only late: when a session's transport closes,
/// its service stops reading, waits up to 5 s for the calls in flight to answer, and only
/// then cancels them and fails their pending requests to the client. A call waiting for
/// the client (a person asked to confirm) would wait out those 5 s, or its own timeout if
/// shorter, for an answer that can no longer arrive. The handler registers each call's
/// token with its session here instead ([`McpHandler`]'s cancellation of a call), and a
/// session's end cancels them all.
#[derive(Default)]
pub(crate) struct SessionEnds(Mutex<HashMap<SessionId, Calls>>);

/// The tokens of a session's calls, cancelled when it ends. Those of calls already
/// answered (rmcp cancels a request's token then) are dropped as the list grows. And
/// whether the session's protocol version predates SSE priming events.
#[derive(Default)]
struct Calls {
    tokens: Vec<CancellationToken>,
    unprimed: bool,
}

impl SessionEnds {
    fn ends(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Calls>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether session `id` is open (its worker runs).
    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.ends().contains_key(id)
    }

    /// Session `id` is open.
    fn begin(&self, id: &SessionId) {
        self.ends().insert(id.clone(), Calls::default());
    }

    /// Session `id` is gone: whatever its calls wait for, they stop waiting.
    fn end(&self, id: &SessionId) {
        if let Some(calls) = self.ends().remove(id) {
            calls.tokens.iter().for_each(CancellationToken::cancel);
        }
    }

    /// Session `id` negotiated a protocol version before 2025-11-25, which has no SSE
    /// priming events.
    fn set_unprimed(&self, id: &SessionId) {
        if let Some(calls) = self.ends().get_mut(id) {
            calls.unprimed = true;
        }
    }

    /// Whether session `id` is open and negotiated a protocol version that has no SSE
    /// priming events.
    fn is_unprimed(&self, id: &str) -> bool {
        self.ends().get(id).is_some_and(|calls| calls.unprimed)
    }

    /// The token of a call of session `id` whose request token is `request`: cancelled
    /// with it, and when the session ends (at once for a session that is not open: it
    /// ended before its call got here). No task per call: the session's end cancels the
    /// tokens registered with it.
    pub(crate) fn call(&self, id: &str, request: &CancellationToken) -> CancellationToken {
        let call = request.child_token();
        match self.ends().get_mut(id) {
            Some(calls) => {
                // Amortized: the answered calls are dropped when the list is full.
                if calls.tokens.len() == calls.tokens.capacity() {
                    calls.tokens.retain(|c| !c.is_cancelled());
                }
                calls.tokens.push(call.clone());
            }
            None => call.cancel(),
        }
        call
    }
}

/// Where a stream resumed after `last_event_id` starts, in rmcp's in-memory event ids
/// (`index` or `index/stream`): rmcp 3.11 replays *from* the index it is given, the
/// event the client names as the last it received included, and the SSE and MCP
/// specifications replay what came *after* it. A question (a person asked to confirm)
/// replayed so came back to the host every time its client resumed the stream, after
/// its call was cancelled too. The index is read as rmcp reads it (`+1` is 1); an id of
/// another form is left to rmcp to refuse.
fn after_in_memory(last_event_id: String) -> String {
    let (index, stream) = match last_event_id.split_once('/') {
        Some((index, stream)) => (index, Some(stream)),
        None => (last_event_id.as_str(), None),
    };
    let next = index
        .parse::<usize>()
        .ok()
        .and_then(|index| index.checked_add(1));
    match (next, stream) {
        (Some(next), Some(stream)) => format!("{next}/{stream}"),
        (Some(next), None) => next.to_string(),
        (None, _) => last_event_id,
    }
}

/// Whether protocol version `version` has SSE priming events (an event with an id and no
/// data opening each stream, SEP-1699): from 2025-11-25 on. The official SDKs' servers send
/// them to those versions only: clients of earlier ones read each event's data as a
/// JSON-RPC message, and fail on an empty one (Python SDK 1.12 logs a parse error for
/// every answer; TypeScript SDK clients before 1.24 report "Unexpected end of JSON
/// input").
fn has_priming_events(version: &str) -> bool {
    // The versions are dates: compared as text, in order.
    version >= ProtocolVersion::V_2025_11_25.as_str()
}

/// `response`'s SSE body without its priming events (rmcp sends them whatever the
/// version): a frame of no data, written by hyper as nothing.
fn without_priming_events(response: axum::response::Response) -> axum::response::Response {
    let is_sse = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !is_sse {
        return response;
    }
    response.map(|body| {
        axum::body::Body::new(http_body_util::BodyExt::map_frame(
            body,
            |frame| match frame.into_data() {
                Ok(data) if is_priming_event(&data) => hyper::body::Frame::data(Bytes::new()),
                Ok(data) => hyper::body::Frame::data(data),
                Err(frame) => frame,
            },
        ))
    })
}

/// Whether `event` (one SSE event, as rmcp writes each) is a priming event or a bare
/// retry hint: empty data, or none.
fn is_priming_event(event: &[u8]) -> bool {
    event.starts_with(b"data: \n") || event.starts_with(b"retry:") || event.starts_with(b"id:")
}

/// rmcp's in-memory sessions, each with its end in [`SessionEnds`].
pub(crate) struct Sessions {
    inner: LocalSessionManager,
    ends: Arc<SessionEnds>,
}

impl Sessions {
    fn watched<T>(&self, id: &SessionId, transport: T) -> EndingTransport<T> {
        self.ends.begin(id);
        EndingTransport {
            inner: transport,
            id: id.clone(),
            ends: Arc::clone(&self.ends),
        }
    }
}

impl SessionManager for Sessions {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = EndingTransport<<LocalSessionManager as SessionManager>::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        let transport = self.watched(&id, transport);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let answer = self.inner.initialize_session(id, message).await?;
        if let ServerJsonRpcMessage::Response(response) = &answer
            && let ServerResult::InitializeResult(result) = &response.result
            && !has_priming_events(result.protocol_version.as_str())
        {
            self.ends.set_unprimed(id);
        }
        Ok(answer)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    /// A `DELETE` of the session, or the server closing it: its calls stop waiting now,
    /// before its worker has even seen the close.
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.ends.end(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let last_event_id = if self.inner.event_store().is_some() {
            last_event_id
        } else {
            after_in_memory(last_event_id)
        };
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.inner.restore_session(id.clone()).await? {
            RestoreOutcome::Restored(transport) => {
                RestoreOutcome::Restored(self.watched(&id, transport))
            }
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

/// A session's transport that ends the session in [`SessionEnds`] when its worker stops
/// (the stream of the client's messages ends) or the service lets it go.
pub(crate) struct EndingTransport<T> {
    inner: T,
    id: SessionId,
    ends: Arc<SessionEnds>,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for EndingTransport<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let message = self.inner.receive().await;
        if message.is_none() {
            self.ends.end(&self.id);
        }
        message
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}

impl<T> Drop for EndingTransport<T> {
    fn drop(&mut self) {
        self.ends.end(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::after_in_memory;

    /// A stream resumes after the event the client names, in rmcp's forms of an id
    /// (`index/stream`, or `index` for the standalone stream); other forms are rmcp's to
    /// refuse.
    #[test]
    fn a_resumed_stream_starts_after_the_last_event_read() {
        for (last, from) in [
            ("1/2", "2/2"),
            ("0/7", "1/7"),
            ("5", "6"),
            ("+1/2", "2/2"),
            ("-1/2", "-1/2"),
            (" 1/2", " 1/2"),
            ("x/2", "x/2"),
            ("", ""),
            ("18446744073709551615/1", "18446744073709551615/1"),
        ] {
            assert_eq!(after_in_memory(last.to_owned()), from, "{last}");
        }
    }
}
