//! The HTTP surface: Streamable HTTP at `/mcp`, `GET /tools`, `POST /tools/{name}` and
//! the OAuth protected-resource metadata, on axum.
//!
//! | route | what |
//! | --- | --- |
//! | `/mcp` | MCP over Streamable HTTP (sessions by default; [`HttpOptions::stateless`] for replicas) |
//! | `GET /tools` | the manifest of the tools this caller is shown: the `tools/list` objects plus `scopes` |
//! | `POST /tools/{name}` | a plain JSON call: the body is the arguments, the status comes from the error |
//! | `GET /.well-known/oauth-protected-resource[/mcp]` | RFC 9728 metadata: `resource`, `authorization_servers`, `scopes_supported` |
//!
//! Every route checks `Host` and `Origin` against DNS rebinding, and request bodies are
//! limited ([`HttpOptions::max_body_bytes`]). Every `/mcp` request and every tools route
//! needs a valid bearer token: without one the answer is 401 with
//! `WWW-Authenticate: Bearer resource_metadata="…"`. A `tools/call` whose token lacks a
//! scope the tool needs gets a real 403 with
//! `WWW-Authenticate: Bearer error="insufficient_scope", scope="…", resource_metadata="…"`,
//! so that clients can step up. Each `tools/call` attempt leaves exactly one audit record,
//! whichever layer refused it.
//!
//! ```no_run
//! use aac_tools::http::{HttpOptions, serve};
//! # async fn run(server: aac_tools::Server) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let options = HttpOptions::default()
//!     .resource_url("https://mcp.example.com/mcp".to_owned())
//!     .allowed_hosts(["mcp.example.com"])
//!     .authorization_servers(vec!["https://auth.example.com".to_owned()]);
//! serve(server, listener, options).await
//! # }
//! ```

mod errors;
mod guard;
mod routes;
mod sessions;

use std::fmt;
use std::io;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use crate::mcp::streamable::{McpService, StreamableOptions};
use crate::server::Server;

/// How the HTTP surface is served. Start from [`HttpOptions::default`].
#[derive(Clone)]
pub struct HttpOptions {
    stateless: bool,
    allowed_hosts: Vec<String>,
    allowed_origins: Option<Vec<String>>,
    max_body_bytes: usize,
    resource_url: Option<String>,
    authorization_servers: Vec<String>,
    shutdown: CancellationToken,
}

/// The default request body limit: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

impl Default for HttpOptions {
    /// Sessions on; loopback hosts only (`localhost`, `127.0.0.1`, `::1`, any port);
    /// origins must name an allowed host; 1 MiB bodies; the `resource` URL taken from
    /// the request's `Host`; no authorization servers.
    fn default() -> Self {
        HttpOptions {
            stateless: false,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            resource_url: None,
            authorization_servers: Vec::new(),
            shutdown: CancellationToken::new(),
        }
    }
}

impl fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpOptions")
            .field("stateless", &self.stateless)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("resource_url", &self.resource_url)
            .field("authorization_servers", &self.authorization_servers)
            .finish_non_exhaustive()
    }
}

impl HttpOptions {
    /// Stateless Streamable HTTP: no `Mcp-Session-Id`, every POST stands alone, so that
    /// several replicas can serve behind a load balancer. Off by default.
    ///
    /// A stateless server cannot receive the client's answer to a request of its own
    /// (sampling, elicitation): tools that ask the client fail in this mode.
    pub fn stateless(mut self, on: bool) -> Self {
        self.stateless = on;
        self
    }

    /// The `Host` values accepted (against DNS rebinding), with or without a port:
    /// `example.com` accepts any port, `example.com:8443` only that one. `*` accepts
    /// every host; use it only behind a proxy that checks `Host` itself.
    /// Default: `localhost`, `127.0.0.1`, `::1`.
    pub fn allowed_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// The browser origins accepted when a request carries `Origin`:
    /// `scheme://host[:port]`, where a missing port means the scheme's default and
    /// `:*` any port; `null` accepts `Origin: null`. By default an origin is accepted
    /// when its host is one of the allowed hosts. Requests without `Origin` (every
    /// non-browser client) are not affected.
    pub fn allowed_origins<I, S>(mut self, origins: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_origins = Some(origins.into_iter().map(Into::into).collect());
        self
    }

    /// Refuse request bodies larger than this with 413. Default
    /// [`DEFAULT_MAX_BODY_BYTES`].
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// This server's resource identifier (RFC 9728 `resource`, and the audience tokens
    /// must be issued for), usually the public URL of `/mcp`:
    /// `https://mcp.example.com/mcp`. Without it, the URL is derived from the request's
    /// `Host` over plain `http`, which suits local use only.
    pub fn resource_url(mut self, url: impl Into<String>) -> Self {
        self.resource_url = Some(url.into());
        self
    }

    /// The OAuth authorization servers that issue tokens for this resource (RFC 9728
    /// `authorization_servers`).
    pub fn authorization_servers(mut self, servers: Vec<String>) -> Self {
        self.authorization_servers = servers;
        self
    }

    /// End every MCP session and stream when `token` is cancelled (with [`serve`],
    /// the server itself then stops too).
    pub fn shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }
}

/// The HTTP routes of `server` (see the [module docs](self)), to serve or to merge into
/// an application of your own.
///
/// # Panics
///
/// If a tool of the registry cannot be expressed as an rmcp tool, which would be a bug
/// of this crate; [`serve`] reports it as an error instead.
pub fn router(server: Server, options: HttpOptions) -> Router {
    try_router(server, options).unwrap_or_else(|err| panic!("{err}"))
}

fn try_router(server: Server, options: HttpOptions) -> io::Result<Router> {
    let mcp = McpService::new(
        server.clone(),
        StreamableOptions {
            stateless: options.stateless,
            max_body_bytes: options.max_body_bytes,
            shutdown: options.shutdown.clone(),
        },
    )?;
    let app = routes::App::new(server, options);
    let guard = Arc::new(guard::Guard::new(&app.options));
    let mcp = routes::McpEndpoint::new(app.clone(), Arc::clone(&guard), mcp);
    Ok(Router::new()
        .route("/tools", get(routes::list_tools))
        .route("/tools/{name}", post(routes::call_tool))
        .route(
            "/.well-known/oauth-protected-resource",
            get(routes::resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(routes::resource_metadata),
        )
        .fallback(routes::not_found)
        .with_state(app)
        .layer(axum::middleware::from_fn_with_state(guard, guard::check))
        // Added after the guard layer, which it applies itself.
        .route_service("/mcp", mcp))
}

/// Serve [`router`] on `listener` until the listener fails or
/// [`HttpOptions::shutdown`] is cancelled.
pub async fn serve(
    server: Server,
    listener: tokio::net::TcpListener,
    options: HttpOptions,
) -> io::Result<()> {
    let shutdown = options.shutdown.clone();
    let router = try_router(server, options)?;
    // Without TCP_NODELAY, the second write of a response (the event after the SSE
    // headers) waits for the client's delayed ACK: 40 ms per call.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
