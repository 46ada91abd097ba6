//! Streamable HTTP from rmcp: the service behind `/mcp`.
//!
//! Host/Origin checks, the body limit and authentication are done by [`crate::http`]
//! before a request reaches this service; the verified principal arrives in the
//! request's extensions.

use std::io;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::handler::{McpHandler, Shared};
use crate::context::Transport;
use crate::server::Server;

/// How `/mcp` is served.
pub(crate) struct StreamableOptions {
    /// No sessions: every POST stands alone (for replicas behind a load balancer).
    pub(crate) stateless: bool,
    /// Bodies larger than this are refused with 413.
    pub(crate) max_body_bytes: usize,
    /// Cancelled when the server shuts down: every session and stream ends.
    pub(crate) shutdown: CancellationToken,
}

/// The `/mcp` endpoint: rmcp's Streamable HTTP service over our handler.
#[derive(Clone)]
pub(crate) struct McpService {
    service: StreamableHttpService<McpHandler, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
}

impl McpService {
    pub(crate) fn new(server: Server, options: StreamableOptions) -> io::Result<McpService> {
        let shared = Shared::new(server)?;
        let config = StreamableHttpServerConfig::default()
            // Our HTTP layer checks Host and Origin for every route, /mcp included.
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_legacy_session_mode(!options.stateless)
            .with_json_response(options.stateless)
            .with_max_request_body_bytes(options.max_body_bytes)
            .with_cancellation_token(options.shutdown);
        let sessions = Arc::new(LocalSessionManager::default());
        let service = StreamableHttpService::new(
            move || {
                Ok(McpHandler::new(
                    Arc::clone(&shared),
                    Transport::StreamableHttp,
                    None,
                ))
            },
            Arc::clone(&sessions),
            config,
        );
        Ok(McpService { service, sessions })
    }

    /// Answer one request (called directly: no router or boxed service in between).
    pub(crate) async fn handle(&self, request: axum::extract::Request) -> axum::response::Response {
        self.service
            .handle(request)
            .await
            .map(axum::body::Body::new)
    }

    /// End session `id` and its streams, as a `DELETE` of it would (an unknown id is
    /// ignored).
    pub(crate) async fn close_session(&self, id: &str) {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        if let Err(err) = self.sessions.close_session(&id.into()).await {
            tracing::debug!(session = id, error = %err, "closing an MCP session failed");
        }
    }
}
