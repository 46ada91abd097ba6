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
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, CustomRequest, CustomResult, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, InitializeRequestParams, InitializeResult, InputRequest,
    InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Reference, ResourceContents, ResourceUpdatedNotificationParam, ResultType,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool,
    UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::level::{from_rmcp_level, level_rank};
use super::peer::RmcpPeer;
use crate::confirm::{Asking, INPUT_KEY, InputRequired};
use crate::context::{ClientPeer, LogLevel, Transport};
use crate::error::{Status, ToolError};
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
    /// Served without sessions (stateless Streamable HTTP): nothing can be sent to the
    /// client but the answer, so the person cannot be asked by an elicitation.
    stateless: bool,
}

impl Shared {
    /// Convert the registry's tool objects to rmcp tools, once.
    pub(crate) fn new(server: Server) -> io::Result<Arc<Shared>> {
        Shared::with_subscriptions(server, true)
    }

    /// [`Shared::new`], advertising `resources.subscribe` only if `subscriptions` (a
    /// stateless server has no stream to send updates on).
    pub(crate) fn with_subscriptions(
        server: Server,
        subscriptions: bool,
    ) -> io::Result<Arc<Shared>> {
        let entries = server.registry().tools();
        let mut tools = Vec::with_capacity(entries.len());
        let mut index = HashMap::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            // The schemas are the registry's own, shared: one copy per server (an empty
            // one stands in while the rest of the tool object is read).
            let mut object = entry.json_without_schemas();
            object["inputSchema"] = json!({});
            let mut tool: Tool = serde_json::from_value(object).map_err(|err| {
                io::Error::other(format!(
                    "tool `{}` cannot be expressed as an MCP tool: {err}",
                    entry.name()
                ))
            })?;
            tool.input_schema = Arc::clone(entry.input_schema_shared());
            tool.output_schema = entry.output_schema_shared().cloned();
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
        let registry = server.registry();
        let mut capabilities = json!({
            "tools": {"listChanged": false},
            "logging": {},
        });
        // Resources, prompts and completion are advertised only by a server that has some.
        if !registry.resources().is_empty() {
            capabilities["resources"] = json!({"subscribe": subscriptions, "listChanged": false});
        }
        if !registry.prompts().is_empty() {
            capabilities["prompts"] = json!({"listChanged": false});
        }
        if registry.resources().iter().any(|r| r.has_completion())
            || registry.prompts().iter().any(|p| p.def().has_completion())
        {
            capabilities["completions"] = json!({});
        }
        let capabilities: ServerCapabilities = serde_json::from_value(capabilities)
            .map_err(|err| io::Error::other(format!("server capabilities: {err}")))?;
        let mut info = ServerConfig::new(capabilities);
        info.server_info = rmcp::model::Implementation::new(server.name(), server.version());
        Ok(Arc::new(Shared {
            server,
            tools,
            index,
            info,
            stateless: !subscriptions,
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
    /// Whether this session answered its `initialize` (one handler per session).
    initialized: Arc<std::sync::atomic::AtomicBool>,
    /// The resource URIs this session subscribed to, each with the credentials of the
    /// request that subscribed (checked again before every update).
    subscriptions: Arc<std::sync::Mutex<std::collections::HashMap<String, Credentials>>>,
    /// Whether this session forwards resource updates yet (from its first subscription).
    forwarding: Arc<std::sync::atomic::AtomicBool>,
    /// Cancelled when the last clone of this handler is dropped: the session is gone,
    /// and so is the task forwarding its updates, whether or not an update comes.
    life: Arc<Life>,
    /// Streamable HTTP with sessions: the end of each, which ends the calls it carries.
    #[cfg(feature = "http")]
    session_ends: Option<Arc<super::streamable::SessionEnds>>,
    /// Cancelled when the client's input ends (stdio) or the server shuts down
    /// (Streamable HTTP), which ends every wait for its answers.
    connection_closed: Option<CancellationToken>,
}

/// Cancels its token when dropped: the end of a session's handler (see
/// [`McpHandler::forward_updates`]).
#[derive(Default)]
struct Life(CancellationToken);

impl Drop for Life {
    fn drop(&mut self) {
        self.0.cancel();
    }
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
            initialized: Arc::default(),
            subscriptions: Arc::default(),
            forwarding: Arc::default(),
            life: Arc::default(),
            #[cfg(feature = "http")]
            session_ends: None,
            connection_closed: None,
        }
    }

    /// A handler whose connection's end is `closed` (stdio: its input ended; Streamable
    /// HTTP: the server shuts down): a call waiting for the client's answer stops waiting
    /// when it is cancelled.
    pub(crate) fn with_connection_closed(mut self, closed: CancellationToken) -> Self {
        self.connection_closed = Some(closed);
        self
    }

    /// A handler of Streamable HTTP sessions, whose ends are in `ends`.
    #[cfg(feature = "http")]
    pub(crate) fn with_session_ends(
        mut self,
        ends: Arc<super::streamable::SessionEnds>,
    ) -> McpHandler {
        self.session_ends = Some(ends);
        self
    }

    /// What cancels a request: the client's `notifications/cancelled` (rmcp's token),
    /// or the end of the Streamable HTTP session that carries it, at once (rmcp cancels
    /// its token only after it waited up to 5 s for the session's calls to answer).
    fn cancellation(&self, context: &RequestContext<RoleServer>) -> CancellationToken {
        #[cfg(feature = "http")]
        if let Some(ends) = &self.session_ends
            && let Some(id) = named_session(context)
            && let Ok(id) = id.to_str()
        {
            return ends.call(id, &context.ct);
        }
        context.ct.clone()
    }

    /// Whether the request names a Streamable HTTP session that is not open (never
    /// opened, ended, or another principal's, which the `/mcp` gate renamed as one that
    /// never existed). rmcp answers such a request 404 itself, unless it is a 2026-07-28
    /// request, which has no session and which rmcp serves whatever session it names.
    fn names_a_closed_session(&self, context: &RequestContext<RoleServer>) -> bool {
        #[cfg(feature = "http")]
        if let Some(ends) = &self.session_ends
            && let Some(id) = named_session(context)
        {
            return id.to_str().map_or(true, |id| !ends.is_open(id));
        }
        #[cfg(not(feature = "http"))]
        let _ = context;
        false
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

    /// The attempt the `/mcp` gate or the stdio framing began for this request, if any.
    fn pending_attempt(&self, context: &RequestContext<RoleServer>) -> Option<Attempt> {
        if let Some(pending) = context.extensions.get::<super::PendingAttempt>() {
            return pending.take_call();
        }
        #[cfg(feature = "http")]
        if let Some(pending) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::PendingAttempt>())
        {
            return pending.take_call();
        }
        #[cfg(not(feature = "http"))]
        let _ = context;
        None
    }

    /// Run a resource read, prompt or completion through the pipeline: one attempt, one
    /// audit record, whatever happens.
    async fn run_item(
        &self,
        request: CallRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<ToolOutput, ToolError> {
        // The transport's attempt for this request, if any, gives way to this one; a
        // prompt's arguments that repeat a key, which only the request as sent shows, are
        // refused, as a tool's are.
        let mut request = request;
        let mut take_up = |pending: &super::PendingItem| {
            pending.0.taken_up();
            if request.kind == crate::audit::CallKind::Prompt {
                request.repeated_key = pending.0.repeated_argument_key();
            }
        };
        if let Some(pending) = context.extensions.get::<super::PendingItem>() {
            take_up(pending);
        }
        #[cfg(feature = "http")]
        if let Some(pending) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::PendingItem>())
        {
            take_up(pending);
        }
        let request = request
            .credentials(self.credentials(context))
            .transport(self.transport)
            .request_id(context.id.to_string())
            .cancellation(self.cancellation(context));
        let attempt = self.shared.server.begin(request);
        // As a call: refused as the session's, not run to be cancelled at once.
        let modern = context
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        if modern && self.names_a_closed_session(context) {
            return Err(attempt
                .refuse(crate::audit::Check::Session, session_not_found())
                .await);
        }
        attempt.run().await.into_result()
    }

    /// The credentials to check again later (a subscription before each update, a call
    /// after a person's answer): over HTTP the token the request presented (the gate
    /// verified it once, for that request), over stdio the connection's token.
    fn presented_credentials(&self, context: &RequestContext<RoleServer>) -> Credentials {
        #[cfg(feature = "http")]
        if let Some(verified) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::VerifiedPrincipal>())
        {
            return verified.1.clone();
        }
        self.credentials(context)
    }

    /// From the session's first subscription on: every update of a resource it is
    /// subscribed to becomes a `notifications/resources/updated`. Ends when the session
    /// is gone (its handler dropped, or the client no longer takes notifications), at
    /// once: a session that ended (a `DELETE`, evicted, a stateless request answered)
    /// keeps nothing, even if the resources it subscribed to never change again.
    fn forward_updates(&self, peer: rmcp::Peer<RoleServer>) {
        let mut updates = self.shared.server.resource_updates();
        let server = self.shared.server.clone();
        let subscriptions = Arc::downgrade(&self.subscriptions);
        let gone = self.life.0.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let received = tokio::select! {
                    biased;
                    () = gone.cancelled() => break,
                    received = updates.recv() => received,
                };
                let uri = match received {
                    Ok(uri) => uri,
                    Err(RecvError::Lagged(skipped)) => {
                        tracing::warn!(skipped, "a session lagged behind resource updates");
                        continue;
                    }
                    Err(RecvError::Closed) => break,
                };
                let Some(subscriptions) = subscriptions.upgrade() else {
                    break;
                };
                let credentials = subscriptions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&uri)
                    .cloned();
                let Some(credentials) = credentials else {
                    continue;
                };
                // A token revoked or expired since, or that lost the scope, ends the
                // subscription: it was granted to that token, not to the session.
                if !server.may_still_read(&credentials, &uri).await {
                    tracing::info!(uri = %uri, "a subscription ended: its token no longer reads the resource");
                    subscriptions
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&uri);
                    continue;
                }
                if peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
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

    /// One `initialize` per session, as the lifecycle has it. A second was answered with
    /// the version negotiated for it while rmcp took the version it asked for as the
    /// session's (a session told 2025-11-25 then followed 2026-07-28's rules: `ping`
    /// gone, questions to a person refused): it is refused, the session as it was.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if self.initialized.swap(true, Ordering::AcqRel) {
            return Err(ErrorData::invalid_request(
                "Invalid request: this session is already initialized (one `initialize` per \
                 session: open another to negotiate again)",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// What a 2026-07-28 client is told: that revision has no subscriptions (neither
    /// `resources/subscribe` nor a stream for updates without a session), so
    /// `resources.subscribe` is not offered to it, whatever a session of an earlier
    /// version is offered.
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, ErrorData> {
        let mut info = self.get_info();
        if let Some(resources) = info.capabilities.resources.as_mut() {
            resources.subscribe = None;
        }
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    /// `logging/setLevel` is gone from 2026-07-28 (a request carries its level in
    /// `_meta`): such a request is answered as for any method the revision does not have,
    /// rather than told a level was set that nothing reads.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if context
            .protocol_version()
            .is_some_and(|v| !v.has_initialize())
        {
            return Err(ErrorData::method_not_found::<
                rmcp::model::SetLevelRequestMethod,
            >());
        }
        self.log_level.store(
            level_rank(from_rmcp_level(request.level)),
            Ordering::Relaxed,
        );
        Ok(())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        first_page(request.as_ref())?;
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

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        first_page(request.as_ref())?;
        let principal = self.principal(&context).await;
        let items = crate::pipeline::listing::items_json(
            self.shared.server.registry(),
            principal.as_deref(),
        );
        from_json(json!({ "resources": items.resources }))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        first_page(request.as_ref())?;
        let principal = self.principal(&context).await;
        let items = crate::pipeline::listing::items_json(
            self.shared.server.registry(),
            principal.as_deref(),
        );
        from_json(json!({ "resourceTemplates": items.templates }))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let output = self
            .run_item(CallRequest::resource(request.uri), &context)
            .await
            .map_err(read_error)?;
        let (content, _) = output.into_parts();
        let contents: Vec<Value> = content
            .iter()
            .filter_map(|c| match c.to_json() {
                Value::Object(mut item) => item.remove("resource"),
                _ => None,
            })
            .collect();
        let result: ReadResourceResult = from_json(json!({ "contents": contents }))?;
        Ok(ReadResourceResponse::Complete(result))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if self.shared.stateless {
            return Err(not_offered("resources/subscribe", &context).await);
        }
        // Subscribing is reading: the read runs through the pipeline (checks, the handler,
        // one record saying `"$subscribe": true`), its contents dropped. A caller the
        // resource's own handler refuses (another workspace's URI) is not subscribed,
        // and learns nothing of its updates.
        self.run_item(
            CallRequest::resource(request.uri.clone()).subscription(),
            &context,
        )
        .await
        .map_err(read_error)?;
        let credentials = self.presented_credentials(&context);
        self.subscriptions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(request.uri, credentials);
        if !self.forwarding.swap(true, Ordering::AcqRel) {
            self.forward_updates(context.peer.clone());
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if self.shared.stateless {
            return Err(not_offered("resources/unsubscribe", &context).await);
        }
        // Checked as a subscription is, by the read it performs (the caller, the URI, its
        // scopes, its handler; one record saying `"$unsubscribe": true`), its contents
        // dropped, and answered as that read: a caller who may not subscribe to the URI
        // (no token, a revoked one, without the scope, another workspace's URI) is
        // refused and recorded as such. The URI is forgotten whatever the answer:
        // forgetting it grants nothing, and a resource deleted since (whose read is
        // `not_found`) is unsubscribed from too.
        let read = self
            .run_item(
                CallRequest::resource(request.uri.clone()).unsubscription(),
                &context,
            )
            .await;
        self.subscriptions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&request.uri);
        read.map_err(read_error)?;
        Ok(())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        first_page(request.as_ref())?;
        let principal = self.principal(&context).await;
        let items = crate::pipeline::listing::items_json(
            self.shared.server.registry(),
            principal.as_deref(),
        );
        from_json(json!({ "prompts": items.prompts }))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arguments = request.arguments.map(Value::Object);
        let output = self
            .run_item(CallRequest::prompt(request.name, arguments), &context)
            .await
            .map_err(rpc_error)?;
        let value = output.structured_value().cloned().unwrap_or(Value::Null);
        let result: GetPromptResult = from_json(value)?;
        Ok(GetPromptResponse::Complete(result))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let (target, resource) = match request.r#ref {
            Reference::Resource(r) => (r.uri, true),
            Reference::Prompt(p) => (p.name, false),
            _ => {
                return Err(ErrorData::invalid_params(
                    "completion of an unknown kind of reference",
                    None,
                ));
            }
        };
        let context_args = request
            .context
            .and_then(|c| c.arguments)
            .map(|args| {
                args.into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect()
            })
            .unwrap_or_default();
        let call = CallRequest::completion(
            target,
            resource,
            request.argument.name,
            request.argument.value,
            context_args,
        );
        let output = self.run_item(call, &context).await.map_err(rpc_error)?;
        let value = output.structured_value().cloned().unwrap_or(Value::Null);
        from_json(json!({ "completion": value }))
    }

    /// rmcp hands over as "custom" every request it could not read as one of its own:
    /// an unknown method (answered "Method not found"), but also a method of the protocol
    /// whose params do not have the protocol's shape (a `tools/call` whose `arguments` is
    /// an array), which is answered "Invalid params" with what is wrong. Such a request
    /// never reaches a tool; its record (not dispatched) is the transport's.
    ///
    /// A call, read, prompt or completion past its caller's rate is answered with the
    /// rate's error instead, as its record says (the rate is checked first).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        let Some(message) = invalid_params(&method, params.as_ref()) else {
            return Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, method, None));
        };
        // The stdio framing records a call it holds, through the rate: answered as its
        // record says. (Over HTTP the gate asked the rate before it was handed on.)
        if let Some(super::LineRate(verdict)) = context.extensions.get::<super::LineRate>()
            && let Ok(Some(err)) = tokio::time::timeout(RATE_VERDICT_WAIT, verdict.wait()).await
        {
            return Err(rpc_error_of(false, err.clone()));
        }
        Err(ErrorData::new(ErrorCode::INVALID_PARAMS, message, None))
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
        let cancel = self.cancellation(&context);
        let peer = RmcpPeer::new(
            context.peer.clone(),
            context.meta.get_progress_token(),
            level,
            cancel.clone(),
            asking(&context, modern, self.shared.stateless),
        )
        .ending_with(self.connection_closed.clone())
        .telling_question_ends(
            context
                .extensions
                .get::<super::stdio::InHand>()
                .map(super::stdio::InHand::question_ends),
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
        // The transport began the attempt (the `/mcp` gate, the stdio framing); take it
        // up, else begin it.
        let mut attempt = match self.pending_attempt(&context) {
            Some(mut attempt) => {
                attempt.dispatch(tool, arguments, Some(peer), cancel);
                attempt
            }
            None => self.shared.server.begin(
                CallRequest::new(tool, arguments)
                    .credentials(credentials)
                    .presented(self.presented_credentials(&context))
                    .transport(self.transport)
                    .request_id(context.id.to_string())
                    .peer(peer)
                    .cancellation(cancel),
            ),
        };
        // A 2026-07-28 call naming a session that is not open: refused as the session's
        // (404 `session_not_found`, as rmcp answers any other request naming one), not
        // run to be cancelled at once by the session's end, which its record would call
        // the client's doing.
        if modern && self.names_a_closed_session(&context) {
            let err = attempt
                .refuse(crate::audit::Check::Session, session_not_found())
                .await;
            return Ok(CallToolResponse::Complete(call_tool_result(Err(err))));
        }
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

/// The Streamable HTTP session a request names (its `Mcp-Session-Id`), if any.
#[cfg(feature = "http")]
fn named_session(context: &RequestContext<RoleServer>) -> Option<&http::HeaderValue> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
}

/// The refusal of a 2026-07-28 request naming a Streamable HTTP session that is not open
/// ([`McpHandler::names_a_closed_session`]): what rmcp answers any other request naming
/// one, 404.
fn session_not_found() -> ToolError {
    ToolError::new(Status::NotFound, "session_not_found", "no such session")
}

/// The answer to a `resources/subscribe` or `resources/unsubscribe` on a server without
/// sessions (the capability says `subscribe: false`): no stream could ever carry an
/// update, and a success would say otherwise. Nothing is read; the request is recorded as
/// refused so (404 `not_offered`, before the answer leaves), and answered as a method this
/// server does not have.
async fn not_offered(method: &str, context: &RequestContext<RoleServer>) -> ErrorData {
    let message = format!(
        "{method} is not offered: this server is stateless, with no stream to send updates on"
    );
    #[cfg(feature = "http")]
    if let Some(attempt) = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<super::PendingItem>())
        .and_then(|pending| pending.0.refused())
    {
        let err = ToolError::new(Status::NotFound, "not_offered", message.clone());
        let err = attempt.refuse(crate::audit::Check::Protocol, err).await;
        if err.reason() == "audit_unavailable" {
            return read_error(err);
        }
    }
    #[cfg(not(feature = "http"))]
    let _ = context;
    ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None)
}

/// How the person behind this request's client can be asked: by an elicitation on a
/// session whose client declared the capability (form mode), by `InputRequiredResult` on
/// 2026-07-28 when the request's client capabilities include elicitation.
fn asking(context: &RequestContext<RoleServer>, modern: bool, stateless: bool) -> Asking {
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
    if stateless {
        return Asking::Unavailable(
            "this server is stateless: a request has no session through which to ask the \
             user (on protocol 2026-07-28 it is asked with `InputRequiredResult`)"
                .to_owned(),
        );
    }
    match context.peer.peer_info() {
        Some(info) if form(&info.capabilities) => Asking::Elicit,
        Some(_) => Asking::Unavailable(
            "the client declared no form `elicitation` capability at initialize".to_owned(),
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

/// An rmcp result type from the JSON the pipeline built, with `resultType` (which
/// 2026-07-28 requires; rmcp strips it again for older peers).
fn from_json<T: serde::de::DeserializeOwned>(mut value: Value) -> Result<T, ErrorData> {
    if let Value::Object(map) = &mut value {
        map.entry("resultType").or_insert_with(|| json!("complete"));
    }
    serde_json::from_value(value)
        .map_err(|err| ErrorData::internal_error(format!("an invalid result: {err}"), None))
}

/// A refused or failed resource read, prompt or completion, as a JSON-RPC error (these
/// methods have no `isError` result): `-32002` for an unknown resource (the spec's
/// "resource not found"), `-32602` for invalid params or an unknown prompt, `-32001`
/// for a refusal of the caller (401, 403, 429), `-32603` else; `data` is
/// `{"error", "reason", "status"}`.
/// Every list fits one page: this server never sends a `nextCursor`, so a cursor is one it
/// did not issue, which the specification's pagination answers with -32602 (rather than
/// the first page again, which a client paging on would read twice).
fn first_page(request: Option<&PaginatedRequestParams>) -> Result<(), ErrorData> {
    match request.and_then(|r| r.cursor.as_deref()) {
        None => Ok(()),
        Some(_) => Err(ErrorData::invalid_params(
            "invalid cursor: this server lists everything on one page and issues no cursor",
            None,
        )),
    }
}

fn rpc_error(err: ToolError) -> ErrorData {
    rpc_error_of(false, err)
}

/// The JSON-RPC error of a refused `resources/read` (or the read a subscription makes):
/// a resource the handler does not find (`not_found`: missing, or another workspace's)
/// is "resource not found" as much as a URI that names no resource.
fn read_error(err: ToolError) -> ErrorData {
    rpc_error_of(true, err)
}

/// How long the handler waits for the stdio framing's record of a request it refuses
/// (written at the framing's next read, at once): past it, the request is answered as if
/// within its rate.
const RATE_VERDICT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The JSON-RPC error of a request past its caller's rate, as [`rpc_error_of`] gives
/// it: for the stdio framing, which answers some refusals itself.
pub(crate) fn rate_limited_error(err: &ToolError) -> Value {
    serde_json::to_value(rpc_error_of(false, err.clone())).unwrap_or_default()
}

fn rpc_error_of(read: bool, err: ToolError) -> ErrorData {
    let code = match (err.status(), err.reason()) {
        (Status::NotFound, "unknown_resource") => -32002,
        (Status::NotFound, _) if read => -32002,
        (Status::NotFound | Status::BadRequest, _) => -32602,
        (Status::Unauthorized | Status::Forbidden | Status::TooManyRequests, _) => -32001,
        _ => -32603,
    };
    ErrorData::new(
        ErrorCode(code),
        err.message().to_owned(),
        Some(err.to_json()),
    )
}

/// The rmcp result of a call, built directly from the pipeline's (no JSON in between):
/// the same `CallToolResult` JSON as [`CallResponse::to_mcp_json`](crate::CallResponse::to_mcp_json),
/// with `resultType` (which 2026-07-28 requires; rmcp strips it again for older peers).
/// The methods a client may send that rmcp reads itself: one of them that reaches the
/// handler as a custom request had params of the wrong shape.
const PROTOCOL_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/call",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
];

/// What is wrong with the params of `method`, a method of the protocol that rmcp could
/// not read; `None` for a method that is not the protocol's.
fn invalid_params(method: &str, params: Option<&Value>) -> Option<String> {
    if !PROTOCOL_METHODS.contains(&method) {
        return None;
    }
    let shape =
        |field: &str, what: &str| format!("invalid params of `{method}`: `{field}` must be {what}");
    let message = match (method, params) {
        (_, Some(params)) if !params.is_object() => {
            format!("invalid params of `{method}`: `params` must be a JSON object")
        }
        ("tools/call" | "prompts/get", Some(params)) => {
            if !params.get("name").is_some_and(Value::is_string) {
                shape("params.name", "a string")
            } else if params
                .get("arguments")
                .is_some_and(|a| !a.is_object() && !a.is_null())
            {
                shape("params.arguments", "a JSON object of named arguments")
            } else {
                format!("invalid params of `{method}`: they do not have the protocol's shape")
            }
        }
        ("resources/read" | "resources/subscribe" | "resources/unsubscribe", Some(params))
            if !params.get("uri").is_some_and(Value::is_string) =>
        {
            shape("params.uri", "a string")
        }
        _ => format!("invalid params of `{method}`: they do not have the protocol's shape"),
    };
    Some(message)
}

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
