//! The rmcp `ServerHandler` over [`Server`].

// Logging is deprecated by SEP-2577 in rmcp, but it is part of every protocol version
// up to 2025-11-25, which is what clients speak today.
#![allow(deprecated)]

use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InputRequest,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ResourceContents, ResultType,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::level::{from_rmcp_level, level_rank};
use super::peer::RmcpPeer;
use crate::confirm::{Asking, INPUT_KEY, InputRequired};
use crate::context::{ClientPeer, LogLevel, Transport};
use crate::error::ToolError;
use crate::pipeline::Attempt;
use crate::principal::Principal;
use crate::server::{CallRequest, Credentials, Server};
use crate::tool::{Content, ToolOutput};

/// What every session of one server shares: the server, the rmcp tools converted once
/// from the registry, and the `initialize` answer.
pub(crate) struct Shared {
    pub(crate) server: Server,
    /// Same positions as `Registry::tools`.
    tools: Vec<Tool>,
    index: HashMap<&'static str, usize>,
    info: ServerConfig,
}

impl Shared {
    /// Convert the registry's tool objects to rmcp tools, once.
    pub(crate) fn new(server: Server) -> io::Result<Arc<Shared>> {
        let entries = server.registry().tools();
        let mut tools = Vec::with_capacity(entries.len());
        let mut index = HashMap::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let mut tool: Tool = serde_json::from_value(entry.json().clone()).map_err(|err| {
                io::Error::other(format!(
                    "tool `{}` cannot be expressed as an MCP tool: {err}",
                    entry.name()
                ))
            })?;
            // The same text, borrowed from the definition: every `tools/list` clones
            // these tools, and a borrowed name or description costs nothing to clone.
            if tool.name == entry.name() {
                tool.name = Cow::Borrowed(entry.name());
            }
            if tool.description.as_deref() == Some(entry.def().description()) {
                tool.description = Some(Cow::Borrowed(entry.def().description()));
            }
            tools.push(tool);
            index.insert(entry.name(), i);
        }
        let capabilities: ServerCapabilities = serde_json::from_value(json!({
            "tools": {"listChanged": false},
            "logging": {},
        }))
        .map_err(|err| io::Error::other(format!("server capabilities: {err}")))?;
        let mut info = ServerConfig::new(capabilities);
        info.server_info = rmcp::model::Implementation::new(server.name(), server.version());
        Ok(Arc::new(Shared {
            server,
            tools,
            index,
            info,
        }))
    }
}

/// One MCP connection (stdio) or session (Streamable HTTP) of a [`Server`].
#[derive(Clone)]
pub(crate) struct McpHandler {
    shared: Arc<Shared>,
    transport: Transport,
    /// The stdio token, verified on every call.
    token: Option<Arc<str>>,
    /// The minimum level of log notifications, set by `logging/setLevel`.
    log_level: Arc<AtomicU8>,
}

/// Log messages below `info` are dropped until the client asks for them.
const DEFAULT_LOG_LEVEL: LogLevel = LogLevel::Info;

/// A minimum level above every level: no log messages at all.
const NO_LOGS: u8 = u8::MAX;

impl McpHandler {
    pub(crate) fn new(shared: Arc<Shared>, transport: Transport, token: Option<String>) -> Self {
        McpHandler {
            shared,
            transport,
            token: token.map(Arc::from),
            log_level: Arc::new(AtomicU8::new(level_rank(DEFAULT_LOG_LEVEL))),
        }
    }

    /// The credentials of a request: the principal the HTTP layer verified, or the
    /// stdio token.
    fn credentials(&self, context: &RequestContext<RoleServer>) -> Credentials {
        #[cfg(feature = "http")]
        if let Some(principal) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::VerifiedPrincipal>())
        {
            return Credentials::Verified(Arc::clone(&principal.0));
        }
        #[cfg(not(feature = "http"))]
        let _ = context;
        match &self.token {
            Some(token) => Credentials::Bearer(token.to_string()),
            None => Credentials::None,
        }
    }

    /// The attempt the `/mcp` gate began for this request, if any.
    fn pending_attempt(&self, context: &RequestContext<RoleServer>) -> Option<Attempt> {
        #[cfg(feature = "http")]
        if let Some(pending) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::PendingAttempt>())
        {
            return pending.take();
        }
        #[cfg(not(feature = "http"))]
        let _ = context;
        None
    }

    async fn principal(&self, context: &RequestContext<RoleServer>) -> Option<Arc<Principal>> {
        self.shared
            .server
            .authenticate(&self.credentials(context))
            .await
            .ok()
    }
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        self.shared.info.clone()
    }

    async fn ping(&self, _context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.store(
            level_rank(from_rmcp_level(request.level)),
            Ordering::Relaxed,
        );
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let listing = self.shared.server.listing();
        // Without the scope filter the list is the same for everyone: no need to verify
        // the token for it.
        let subset = if listing.filters_by_scope() {
            listing.subset(self.principal(&context).await.as_deref())
        } else {
            None
        };
        let positions = subset.as_deref().unwrap_or(listing.positions());
        let tools = positions
            .iter()
            .map(|&i| self.shared.tools[i].clone())
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let i = *self.shared.index.get(name)?;
        self.shared
            .server
            .listing()
            .is_visible(i)
            .then(|| self.shared.tools[i].clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let credentials = self.credentials(&context);
        // The request's own level (2026-07-28 `_meta`), else the session's. From
        // 2026-07-28 on, a request without one has not opted in to log messages.
        let modern = context
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        let level = match context.meta.log_level() {
            Some(level) => Arc::new(AtomicU8::new(level_rank(from_rmcp_level(level)))),
            None if modern => Arc::new(AtomicU8::new(NO_LOGS)),
            None => Arc::clone(&self.log_level),
        };
        let peer = RmcpPeer::new(
            context.peer.clone(),
            context.meta.get_progress_token(),
            level,
            context.ct.clone(),
            asking(&context, modern),
        );
        let tool = request.name.into_owned();
        let arguments = request.arguments.map(Value::Object);
        let resume = request.request_state.map(|state| {
            let responses = request
                .input_responses
                .map(|r| Value::Object(r.into_iter().collect()))
                .unwrap_or(Value::Null);
            (state, responses)
        });
        let peer: Arc<dyn ClientPeer> = Arc::new(peer);
        // Over Streamable HTTP the gate began the attempt; take it up, else begin it.
        let mut attempt = match self.pending_attempt(&context) {
            Some(mut attempt) => {
                attempt.dispatch(tool, arguments, Some(peer), context.ct.clone());
                attempt
            }
            None => self.shared.server.begin(
                CallRequest::new(tool, arguments)
                    .credentials(credentials)
                    .transport(self.transport)
                    .request_id(context.id.to_string())
                    .peer(peer)
                    .cancellation(context.ct.clone()),
            ),
        };
        if let Some((state, responses)) = resume {
            attempt.resume(state, responses);
        }
        let response = attempt.run().await;
        if let Some(input) = response.input_required() {
            return Ok(CallToolResponse::InputRequired(input_required_result(
                input,
            )?));
        }
        Ok(CallToolResponse::Complete(call_tool_result(
            response.into_result(),
        )))
    }
}

/// How the person behind this request's client can be asked: by an elicitation on a
/// session whose client declared the capability (form mode), by `InputRequiredResult` on
/// 2026-07-28 when the request's client capabilities include elicitation.
fn asking(context: &RequestContext<RoleServer>, modern: bool) -> Asking {
    let form = |caps: &rmcp::model::ClientCapabilities| {
        caps.elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none())
    };
    if modern {
        return match context.meta.client_capabilities() {
            Some(caps) if form(&caps) => Asking::InputRequired,
            Some(_) => Asking::Unavailable(
                "the client's capabilities (in the request's `_meta`) do not include form `elicitation`"
                    .to_owned(),
            ),
            None => Asking::Unavailable(
                "the request declares no client capabilities, so no `elicitation`".to_owned(),
            ),
        };
    }
    match context.peer.peer_info() {
        Some(info) if form(&info.capabilities) => Asking::Elicit,
        Some(_) => Asking::Unavailable(
            "the client declared no form `elicitation` capability at initialize \
             (a stateless request declares none)"
                .to_owned(),
        ),
        None => Asking::Unavailable("the client has not initialized".to_owned()),
    }
}

/// The rmcp form of a confirmation's question: one elicitation request and the state.
fn input_required_result(input: &InputRequired) -> Result<InputRequiredResult, ErrorData> {
    let request: InputRequest = serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": input.elicitation_params(),
    }))
    .map_err(|err| ErrorData::internal_error(format!("the confirmation request: {err}"), None))?;
    let requests = [(INPUT_KEY.to_owned(), request)].into_iter().collect();
    Ok(InputRequiredResult::new(
        Some(requests),
        Some(input.request_state().to_owned()),
    ))
}

/// The rmcp result of a call, built directly from the pipeline's (no JSON in between):
/// the same `CallToolResult` JSON as [`CallResponse::to_mcp_json`](crate::CallResponse::to_mcp_json),
/// with `resultType` (which 2026-07-28 requires; rmcp strips it again for older peers).
pub(crate) fn call_tool_result(result: Result<ToolOutput, ToolError>) -> CallToolResult {
    let mut result = match result {
        Ok(output) => {
            let (content, structured) = output.into_parts();
            let mut result =
                CallToolResult::success(content.into_iter().map(content_block).collect());
            result.structured_content = structured;
            result
        }
        // No `structuredContent` on an error: see `crate::tool::error_result_json`.
        Err(err) => CallToolResult::error(vec![ContentBlock::text(err.to_json().to_string())]),
    };
    result.result_type = Some(ResultType::COMPLETE);
    result
}

fn content_block(item: Content) -> ContentBlock {
    match item {
        Content::Text { text } => ContentBlock::text(text),
        Content::Image { data, mime_type } => ContentBlock::image(data, mime_type),
        Content::Audio { data, mime_type } => ContentBlock::audio(data, mime_type),
        Content::ResourceText {
            uri,
            mime_type,
            text,
        } => ContentBlock::resource(ResourceContents::text(text, uri).with_mime_type(mime_type)),
        Content::ResourceBlob {
            uri,
            mime_type,
            blob,
        } => ContentBlock::resource(ResourceContents::blob(blob, uri).with_mime_type(mime_type)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::Status;
    use crate::tool::error_result_json;

    /// The direct conversion writes exactly the JSON of `to_mcp_json`, plus `resultType`.
    #[test]
    fn direct_results_match_the_json_form() {
        let outputs = [
            ToolOutput::structured(json!({"id": 7, "tags": ["a", "b"], "note": "x\"y"}))
                .finish(false),
            ToolOutput::structured(json!([1, 2])).finish(true),
            ToolOutput::text("plain"),
            ToolOutput::content(vec![
                Content::Image {
                    data: "aGk=".into(),
                    mime_type: "image/png".into(),
                },
                Content::Audio {
                    data: "aGk=".into(),
                    mime_type: "audio/wav".into(),
                },
                Content::ResourceText {
                    uri: "file:///a.txt".into(),
                    mime_type: "text/markdown".into(),
                    text: "# a".into(),
                },
                Content::ResourceBlob {
                    uri: "file:///b.bin".into(),
                    mime_type: "application/octet-stream".into(),
                    blob: "AAE=".into(),
                },
            ]),
            ToolOutput::default(),
        ];
        for output in outputs {
            let mut expected = output.to_json();
            expected["resultType"] = json!("complete");
            let direct = serde_json::to_value(call_tool_result(Ok(output))).unwrap();
            assert_eq!(direct, expected);
        }
        for err in [
            ToolError::confirm_required(),
            ToolError::new(Status::Forbidden, "insufficient_scope", "needs \"a:b\""),
        ] {
            let mut expected = error_result_json(&err);
            expected["resultType"] = json!("complete");
            let direct = serde_json::to_value(call_tool_result(Err(err))).unwrap();
            assert_eq!(direct, expected);
        }
    }
}
