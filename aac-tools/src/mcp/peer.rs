//! [`ClientPeer`] over rmcp's peer: the way from a running tool back to the MCP client.

// Sampling and logging are deprecated by SEP-2577 in rmcp, but they are part of every
// protocol version up to 2025-11-25, which is what clients speak today.
#![allow(deprecated)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rmcp::model::{
    CancelledNotificationParam, ClientResult, CreateMessageRequest, ElicitRequest,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, RequestId,
    ServerRequest,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleServer, ServiceError};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::level::{level_rank, to_rmcp_level};
use crate::BoxFuture;
use crate::context::{ClientPeer, LogLevel};
use crate::error::{Status, ToolError};

/// The client of one `tools/call`.
pub(crate) struct RmcpPeer {
    peer: Peer<RoleServer>,
    /// The client's `_meta.progressToken`, echoed verbatim (a number stays a number).
    progress_token: Option<ProgressToken>,
    /// The minimum level of log notifications (the session's, or this request's).
    log_level: Arc<AtomicU8>,
    /// The client cancelled the call, or its session ended: stop waiting for its answers.
    cancel: CancellationToken,
    /// How the person behind the client can be asked (the protocol era and the client's
    /// capabilities).
    asking: crate::confirm::Asking,
    /// The connection's end (stdio: its input ended), which no answer can come after.
    closed: Option<CancellationToken>,
    /// Told when a question of the server's is no longer awaited, answered or not (the
    /// stdio framing, which reads on past its bounds while a question waits).
    question_ends: Option<QuestionEnds>,
}

/// Told the id of each question of the server's (a request to the client) once it is no
/// longer awaited: answered, timed out, or given up when the call was cancelled. Carried
/// in a client request's extensions by a transport that wants to know.
#[derive(Clone)]
pub(crate) struct QuestionEnds(pub(crate) Arc<dyn EndsQuestions>);

/// What [`QuestionEnds`] tells.
pub(crate) trait EndsQuestions: Send + Sync {
    /// The question `id` is no longer awaited, and no answer to it was read.
    fn question_ended(&self, id: &RequestId);
}

/// A question of the server's awaited: when it is no longer awaited and no answer came
/// (the call was cancelled or timed out, the server stops), the client is told
/// (`notifications/cancelled`, so that it stops asking its user), and so is
/// [`QuestionEnds`], if any.
struct Awaited<'a> {
    peer: &'a Peer<RoleServer>,
    ends: Option<&'a QuestionEnds>,
    /// `None` once its answer was read.
    id: Option<RequestId>,
}

impl Drop for Awaited<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        if let Some(ends) = self.ends {
            ends.0.question_ended(&id);
        }
        // Told even when rmcp says the transport closed: over stdio its requests end so
        // when the input ends (SIGTERM), while the output still carries the answers. A
        // client really gone is not told (the send fails).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let peer = self.peer.clone();
            runtime.spawn(async move {
                // A client already gone is not told.
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("the server no longer awaits the answer".to_owned()),
                    ))
                    .await;
            });
        }
    }
}

impl RmcpPeer {
    pub(crate) fn new(
        peer: Peer<RoleServer>,
        progress_token: Option<ProgressToken>,
        log_level: Arc<AtomicU8>,
        cancel: CancellationToken,
        asking: crate::confirm::Asking,
    ) -> RmcpPeer {
        RmcpPeer {
            peer,
            progress_token,
            log_level,
            cancel,
            asking,
            closed: None,
            question_ends: None,
        }
    }

    /// Tell `ends` of each question once it is no longer awaited.
    pub(crate) fn telling_question_ends(mut self, ends: Option<QuestionEnds>) -> RmcpPeer {
        self.question_ends = ends;
        self
    }

    /// Stop waiting for the client's answers when `closed` is cancelled, too.
    pub(crate) fn ending_with(mut self, closed: Option<CancellationToken>) -> RmcpPeer {
        self.closed = closed;
        self
    }

    /// Send `request` and wait for the client's answer. A client that goes away meanwhile
    /// (it cancels the call, its stdio connection or its HTTP session ends) has cancelled
    /// the call, however its going is seen first: the end both cancels the call (`cancel`,
    /// which over Streamable HTTP also watches the session) and fails the request, and
    /// which of the two is noticed first is a race. A closed HTTP stream alone is not an
    /// end: the client may resume it.
    async fn request(&self, request: ServerRequest, what: &str) -> Result<ClientResult, ToolError> {
        // Which of the ends it was cannot always be told (over stdio, SIGTERM ends the
        // input as the client's leaving does): the answer names them all.
        let cancelled = || {
            ToolError::new(
                Status::ClientClosedRequest,
                "cancelled",
                format!(
                    "the call was abandoned while the server waited for its {what}: the \
                     client cancelled it or went away, or the server is stopping"
                ),
            )
        };
        let closed = async {
            match &self.closed {
                Some(closed) => closed.cancelled().await,
                None => std::future::pending().await,
            }
        };
        // The answer first: one the client sent just before it went away (an answer and
        // the end of its input in one write) was read first, and decides; the end is
        // noticed only when no answer has come. (A yes read after the client cancelled
        // the call does not run it: the pipeline starts no cancelled call's tool.)
        tokio::select! {
            biased;
            result = self.ask(request) => result.map_err(|err| match err {
                ServiceError::TransportClosed
                | ServiceError::TransportSend(_)
                | ServiceError::Cancelled { .. } => cancelled(),
                _ if self.cancel.is_cancelled() => cancelled(),
                err => client_error(what, err),
            }),
            () = self.cancel.cancelled() => Err(cancelled()),
            () = closed => Err(cancelled()),
        }
    }
}

impl RmcpPeer {
    /// `request` sent, and its answer awaited; whoever waits for the answer of a
    /// question is told when it is no longer awaited (dropped mid-wait too).
    async fn ask(&self, request: ServerRequest) -> Result<ClientResult, ServiceError> {
        let handle = self
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await?;
        let mut awaited = Awaited {
            peer: &self.peer,
            ends: self.question_ends.as_ref(),
            id: Some(handle.id.clone()),
        };
        let answer = handle.await_response().await;
        // An answer (or the client's error) came through the transport, which has
        // already seen it end its question.
        if matches!(answer, Ok(_) | Err(ServiceError::McpError(_))) {
            awaited.id = None;
        }
        answer
    }
}

fn client_error(what: &str, err: ServiceError) -> ToolError {
    match err {
        // The transport replaced an answer that repeats a key (`probe::ambiguous_answer`).
        ServiceError::McpError(err)
            if err
                .data
                .as_ref()
                .and_then(|d| d.get("aac"))
                .and_then(Value::as_str)
                == Some(crate::pipeline::AMBIGUOUS_ANSWER) =>
        {
            ToolError::bad_request(
                crate::pipeline::AMBIGUOUS_ANSWER,
                format!("the client's answer to the {what}: {}", err.message),
            )
        }
        ServiceError::McpError(err) => ToolError::new(
            Status::BadRequest,
            "client_request_failed",
            format!("the {what} failed: {}", err.message),
        ),
        other => ToolError::new(
            Status::Unavailable,
            "client_unavailable",
            format!("the client did not answer the {what}: {other}"),
        ),
    }
}

fn invalid_params(what: &str, err: serde_json::Error) -> ToolError {
    ToolError::internal(format!("the {what} parameters are not valid MCP: {err}"))
}

fn result_json(what: &str, result: impl serde::Serialize) -> Result<Value, ToolError> {
    serde_json::to_value(result)
        .map_err(|err| ToolError::internal(format!("the client's {what} result: {err}")))
}

impl ClientPeer for RmcpPeer {
    fn progress<'a>(
        &'a self,
        progress: f64,
        total: Option<f64>,
        message: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(async move {
            let Some(token) = &self.progress_token else {
                return Ok(());
            };
            let mut params = ProgressNotificationParam::new(token.clone(), progress);
            params.total = total;
            params.message = message.map(str::to_owned);
            self.peer
                .notify_progress(params)
                .await
                .map_err(|err| client_error("progress notification", err))
        })
    }

    fn log<'a>(
        &'a self,
        level: LogLevel,
        logger: Option<&'a str>,
        data: Value,
    ) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(async move {
            if level_rank(level) < self.log_level.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut params = LoggingMessageNotificationParam::new(to_rmcp_level(level), data);
            params.logger = logger.map(str::to_owned);
            self.peer
                .notify_logging_message(params)
                .await
                .map_err(|err| client_error("log notification", err))
        })
    }

    fn create_message(&self, params: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            const WHAT: &str = "sampling request";
            let params = serde_json::from_value(params).map_err(|e| invalid_params(WHAT, e))?;
            let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
            match self.request(request, WHAT).await? {
                ClientResult::CreateMessageResult(result) => result_json(WHAT, result),
                _ => Err(unexpected(WHAT)),
            }
        })
    }

    fn elicit(&self, params: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            const WHAT: &str = "elicitation request";
            let params = serde_json::from_value(params).map_err(|e| invalid_params(WHAT, e))?;
            let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            match self.request(request, WHAT).await? {
                ClientResult::ElicitResult(result) => result_json(WHAT, result),
                // An answer, but not of the elicitation's shape (`{"action":"ACCEPT"}`,
                // `{}`): what it says is read as it is, and anything but a plain
                // `accept` is no (`user_declined`), not a client that cannot ask.
                other => Ok(serde_json::to_value(&other).unwrap_or(Value::Null)),
            }
        })
    }

    fn asking(&self) -> crate::confirm::Asking {
        self.asking.clone()
    }
}

fn unexpected(what: &str) -> ToolError {
    ToolError::new(
        Status::Unavailable,
        "client_request_failed",
        format!("the client answered the {what} with another kind of result"),
    )
}
