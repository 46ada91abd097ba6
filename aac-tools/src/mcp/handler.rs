//! The rmcp `ServerHandler` over [`Server`].

// Logging is deprecated by SEP-2577 in rmcp, but it is part of every protocol version
// up to 2025-11-25, which is what clients speak today.
#![allow(deprecated)]

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::peer::RmcpPeer;
use crate::context::{LogLevel, Transport};
use crate::principal::Principal;
use crate::server::{CallRequest, Credentials, Server};

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
            let tool: Tool = serde_json::from_value(entry.json().clone()).map_err(|err| {
                io::Error::other(format!(
                    "tool `{}` cannot be expressed as an MCP tool: {err}",
                    entry.name()
                ))
            })?;
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
        let principal = self.principal(&context).await;
        let tools = self
            .shared
            .server
            .listed_tools(principal.as_deref())
            .map(|(i, _)| self.shared.tools[i].clone())
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let i = *self.shared.index.get(name)?;
        let listed = !self.shared.server.is_read_only_mode()
            || self.shared.server.registry().tools()[i]
                .def()
                .is_read_only();
        listed.then(|| self.shared.tools[i].clone())
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
        );
        let call = CallRequest::new(
            request.name.into_owned(),
            request.arguments.map(Value::Object),
        )
        .credentials(credentials)
        .transport(self.transport)
        .request_id(context.id.to_string())
        .peer(Arc::new(peer))
        .cancellation(context.ct.clone());
        let response = self.shared.server.call(call).await;
        let mut result: CallToolResult =
            serde_json::from_value(response.to_mcp_json()).map_err(|err| {
                ErrorData::internal_error(format!("the tool result is not valid MCP: {err}"), None)
            })?;
        // 2026-07-28 requires `resultType`; rmcp strips it again for older peers.
        result.result_type = Some(ResultType::COMPLETE);
        Ok(CallToolResponse::Complete(result))
    }
}

pub(crate) fn level_rank(level: LogLevel) -> u8 {
    level as u8
}

fn from_rmcp_level(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}

pub(crate) fn to_rmcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}
