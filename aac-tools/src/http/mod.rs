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

mod cors;
mod errors;
mod guard;
mod routes;
#[doc(hidden)]
pub use routes::__fuzz_probe;
mod sessions;
mod stall;
#[cfg(feature = "cli")]
pub(crate) use guard::is_cors_origin;

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use crate::mcp::streamable::{McpService, StreamableOptions};
use crate::server::Server;

/// `url` as this server advertises it, RFC 9728 `resource`: without a trailing `/`. The
/// command line's `--resource-url` is read so, as the JWT audience too: one value for both.
pub(crate) fn canonical_resource_url(url: &str) -> &str {
    url.trim_end_matches('/')
}

/// How the HTTP surface is served. Start from [`HttpOptions::default`].
#[derive(Clone)]
pub struct HttpOptions {
    stateless: bool,
    allowed_hosts: Vec<String>,
    allowed_origins: Option<Vec<String>>,
    cors_origins: Vec<String>,
    max_body_bytes: usize,
    max_body_values: usize,
    resource_url: Option<String>,
    authorization_servers: Vec<String>,
    shutdown: CancellationToken,
    header_read_timeout: Duration,
    body_read_timeout: Duration,
    max_connections: usize,
    max_connections_per_peer: usize,
    count_loopback_peers: bool,
    max_sessions_per_principal: usize,
}

/// The default request body limit: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// The default of [`HttpOptions::max_body_values`]: 65,536 JSON values.
pub const DEFAULT_MAX_BODY_VALUES: usize = 64 * 1024;
/// The default time a client has to send a request's headers: 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time a client has to send a request's body: 30 s.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The default cap on open connections: 8192.
pub const DEFAULT_MAX_CONNECTIONS: usize = 8192;
/// The default cap on the connections one peer address keeps open: 512.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 512;
/// The default cap on the MCP sessions one principal keeps open: 128.
pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: usize = 128;
/// How long [`serve`], shutting down, waits for the `/mcp` calls it took to be answered
/// before it ends the MCP sessions (and any call still running with them).
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(10);
/// How long [`serve`], once its calls are answered or abandoned, lets its connections
/// finish writing before it closes them: a client that does not read its answer does not
/// hold a stopping server.
pub const SHUTDOWN_CLOSE: Duration = Duration::from_secs(5);
pub use stall::WRITE_STALL_LIMIT;

impl Default for HttpOptions {
    /// Sessions on; loopback hosts only (`localhost`, `127.0.0.1`, `::1`, any port);
    /// origins must name an allowed host; 1 MiB bodies; the `resource` URL taken from
    /// the request's `Host`; no authorization servers.
    fn default() -> Self {
        HttpOptions {
            stateless: false,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: None,
            cors_origins: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_body_values: DEFAULT_MAX_BODY_VALUES,
            resource_url: None,
            authorization_servers: Vec::new(),
            shutdown: CancellationToken::new(),
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            count_loopback_peers: false,
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
        }
    }
}

impl fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpOptions")
            .field("stateless", &self.stateless)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("cors_origins", &self.cors_origins)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_body_values", &self.max_body_values)
            .field("resource_url", &self.resource_url)
            .field("authorization_servers", &self.authorization_servers)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_peer", &self.max_connections_per_peer)
            .field("count_loopback_peers", &self.count_loopback_peers)
            .field(
                "max_sessions_per_principal",
                &self.max_sessions_per_principal,
            )
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

    /// The browser origins whose pages may call this server and read its answers (CORS),
    /// each `scheme://host[:port]` as for [`allowed_origins`](Self::allowed_origins)
    /// (`:*` for any port). Empty by default: no `Access-Control-*` header is sent and a
    /// preflight is refused, so a page on another origin cannot read an answer.
    ///
    /// A request from one of these origins passes the `Origin` check (the `Host` check
    /// still applies); its preflight (`OPTIONS` with `Access-Control-Request-Method`) is
    /// answered 204 for `GET`, `POST` and `DELETE` with the headers MCP uses
    /// (`Authorization`, `Content-Type`, `Mcp-Session-Id`, `Mcp-Protocol-Version`,
    /// `Last-Event-ID`, …), and every answer to it, refusals included, names the origin in
    /// `Access-Control-Allow-Origin` and exposes `Mcp-Session-Id`, `Mcp-Protocol-Version`,
    /// `WWW-Authenticate` and `Retry-After`. Credentials are bearer tokens, never cookies:
    /// `Access-Control-Allow-Credentials` is not sent. `null` and `*` are not accepted
    /// here (a page of any origin, or a sandboxed one, could then read the answers), nor
    /// what no browser sends (a wildcard in the host, a scheme but `http` or `https`, an
    /// IPv6 host without brackets): they are ignored with a warning. A preflight is no
    /// call: it is not recorded.
    pub fn cors_origins<I, S>(mut self, origins: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.cors_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    /// Refuse request bodies larger than this with 413. Default
    /// [`DEFAULT_MAX_BODY_BYTES`].
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Refuse request bodies of more JSON values than this (keys included) with 413
    /// `body_too_large`, unparsed, recorded as the call the body's start names. Default
    /// [`DEFAULT_MAX_BODY_VALUES`]. Parsed, small values cost about 200 bytes each: a
    /// body of 1 MiB of `{"":0}` objects took 100 MB before its token was even looked at,
    /// where a call's own arguments hold a few values, or a few thousand. Raise it with
    /// [`max_body_bytes`](Self::max_body_bytes) for tools that take large arrays.
    pub fn max_body_values(mut self, values: usize) -> Self {
        self.max_body_values = values;
        self
    }

    /// This server's resource identifier (RFC 9728 `resource`, and the audience tokens
    /// must be issued for), usually the public URL of `/mcp`:
    /// `https://mcp.example.com/mcp`. Without it, the URL is derived from the request's
    /// `Host` over plain `http`, which suits local use only. It is advertised without a
    /// trailing `/` (`https://mcp.example.com/mcp/` as `https://mcp.example.com/mcp`, the
    /// canonical form of MCP's authorization spec): give a JWT verifier's audience
    /// (`JwtVerifierBuilder::audience`) that form.
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

    /// How long a client has to send a request's headers, from the moment the server
    /// waits for them: on a new connection (one that sends nothing, or dribbles its
    /// headers, is closed after it) and between the requests of a kept-alive connection
    /// (the idle keep-alive timeout). Default [`DEFAULT_HEADER_READ_TIMEOUT`]. Applies to
    /// [`serve`]; a [`router`] served by your own server gets your server's limits.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a client has to send a request's body once its headers arrived; a slower
    /// body is refused with 408 `body_timeout` (recorded for a `POST /tools/{name}`).
    /// Default [`DEFAULT_BODY_READ_TIMEOUT`].
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// The most connections [`serve`] keeps open at once; past it, a new connection is
    /// closed as soon as it is accepted, and the open ones are served as before. Default
    /// [`DEFAULT_MAX_CONNECTIONS`]; keep it under the process's open-file limit.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// The most connections [`serve`] keeps open for one peer address (an IPv6 peer by its
    /// /64); past it, a new connection of that peer is closed as soon as it is accepted.
    /// Without it, one host opening connections that send nothing (each held until
    /// [`header_read_timeout`](Self::header_read_timeout)) could take every slot of
    /// [`max_connections`](Self::max_connections) and keep everyone else out. Loopback
    /// peers are not counted unless [`count_loopback_peers`](Self::count_loopback_peers):
    /// behind a proxy on the same host, every client is that one address. Behind a
    /// proxy elsewhere, raise it to the proxy's connection count. Default
    /// [`DEFAULT_MAX_CONNECTIONS_PER_PEER`].
    pub fn max_connections_per_peer(mut self, max: usize) -> Self {
        self.max_connections_per_peer = max.max(1);
        self
    }

    /// Whether [`max_connections_per_peer`](Self::max_connections_per_peer) applies to
    /// loopback peers (`127.0.0.0/8`, `::1`) too. Off by default.
    pub fn count_loopback_peers(mut self, on: bool) -> Self {
        self.count_loopback_peers = on;
        self
    }

    /// The most Streamable HTTP sessions one principal (a subject in a workspace) keeps
    /// open at once. A session it opens past this closes its least recently used one:
    /// that session's client is answered 404 at its next request and, as the protocol
    /// says, opens a new one. Each session holds about 55 KB, so a valid token cannot
    /// grow the server's memory without bound. Default
    /// [`DEFAULT_MAX_SESSIONS_PER_PRINCIPAL`]; raise it when many clients share one token
    /// (every caller of a server built with
    /// [`danger_allow_unauthenticated`](crate::ServerBuilder::danger_allow_unauthenticated)
    /// is the same principal), or serve [`stateless`](Self::stateless).
    pub fn max_sessions_per_principal(mut self, max: usize) -> Self {
        self.max_sessions_per_principal = max.max(1);
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
    let sessions_stop = options.shutdown.clone();
    try_router(server, options, sessions_stop)
        .map(|(router, _)| router)
        .unwrap_or_else(|err| panic!("{err}"))
}

/// The router, and what counts its `/mcp` POSTs in flight. The MCP sessions end when
/// `sessions_stop` is cancelled.
fn try_router(
    server: Server,
    options: HttpOptions,
    sessions_stop: CancellationToken,
) -> io::Result<(Router, Arc<routes::InFlight>)> {
    let mcp = McpService::new(
        server.clone(),
        StreamableOptions {
            stateless: options.stateless,
            max_body_bytes: options.max_body_bytes,
            shutdown: options.shutdown.clone(),
            sessions_stop,
        },
    )?;
    let app = routes::App::new(server, options);
    let guard = Arc::new(guard::Guard::new(&app.options));
    let in_flight = Arc::clone(app.in_flight());
    let mcp =
        routes::McpEndpoint::new(app.clone(), Arc::clone(&guard), mcp, Arc::clone(&in_flight));
    let router = Router::new()
        .route("/tools", get(routes::list_tools))
        .route("/resources", get(routes::list_resources))
        .route("/prompts", get(routes::list_prompts))
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
        .method_not_allowed_fallback(routes::method_not_allowed)
        .with_state(app.clone())
        .layer(axum::middleware::from_fn_with_state(
            (Arc::clone(&guard), app),
            guard::check,
        ))
        // Added after the guard layer, which it applies itself.
        .route_service("/mcp", mcp)
        .layer(Detach);
    // Outside every route (and the detached task): a preflight is answered here; the
    // answers of every route, refusals included, get their CORS headers here.
    let router = if guard.has_cors() {
        router.layer(axum::middleware::from_fn_with_state(guard, cors::cors))
    } else {
        router
    };
    Ok((router, in_flight))
}

/// Takes each request to its answer even if its client leaves. A client that closes its
/// connection mid-request makes the server drop the future serving it; without this, a
/// call whose body had arrived could be dropped before its attempt began, leaving no
/// record, or abandoned before its token was checked, leaving a record without its
/// principal. Here the request runs on its connection's task while the connection lives
/// (no task spawned, no hand-off between tasks); if the connection drops it unfinished,
/// what is left of it moves to a task of its own and is processed as if the client had
/// stayed (its answer goes nowhere), and its record says what happened. A panic is
/// answered 500.
#[derive(Clone, Copy, Debug)]
struct Detach;

impl<S> tower_layer::Layer<S> for Detach {
    type Service = Detached<S>;
    fn layer(&self, inner: S) -> Detached<S> {
        Detached(inner)
    }
}

/// A service whose every call finishes, its client there or not ([`Detach`]).
#[derive(Clone, Debug)]
struct Detached<S>(S);

impl<S> tower_service::Service<axum::extract::Request> for Detached<S>
where
    S: tower_service::Service<
            axum::extract::Request,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = DetachedCall;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: axum::extract::Request) -> DetachedCall {
        DetachedCall(Some(Box::pin(self.0.call(request))))
    }
}

type Answering = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<axum::response::Response, std::convert::Infallible>>
            + Send,
    >,
>;

/// The answer of a [`Detached`] call, worked on where it is polled; `None` once
/// answered (or panicked).
struct DetachedCall(Option<Answering>);

/// A request whose future panicked: logged, answered 500 when someone still waits.
fn panicked_request() -> Result<axum::response::Response, std::convert::Infallible> {
    tracing::error!("a request panicked before its answer");
    Ok(errors::json_error(&crate::ToolError::internal(
        "the request failed",
    )))
}

/// Poll `answering` with its panic caught.
fn poll_caught(
    answering: &mut Answering,
    cx: &mut std::task::Context<'_>,
) -> std::thread::Result<std::task::Poll<Result<axum::response::Response, std::convert::Infallible>>>
{
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answering.as_mut().poll(cx)))
}

/// Drop a request's future where a panic of its drop must go no further (the
/// connection's task goes on).
fn drop_caught(answering: Answering) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(answering)));
}

impl std::future::Future for DetachedCall {
    type Output = Result<axum::response::Response, std::convert::Infallible>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let Some(answering) = self.0.as_mut() else {
            // Polled after its answer: hyper does not; nothing more will come.
            return Poll::Pending;
        };
        match poll_caught(answering, cx) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(answer)) => {
                if let Some(answered) = self.0.take() {
                    drop_caught(answered);
                }
                Poll::Ready(answer)
            }
            Err(_) => {
                if let Some(answering) = self.0.take() {
                    drop_caught(answering);
                }
                Poll::Ready(panicked_request())
            }
        }
    }
}

impl Drop for DetachedCall {
    /// Dropped unfinished (its connection gone): the rest of the request runs on a task
    /// of its own. Outside a runtime (it is shutting down) it is dropped with the
    /// runtime's other tasks.
    fn drop(&mut self) {
        let Some(mut answering) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(std::future::poll_fn(move |cx| {
            match poll_caught(&mut answering, cx) {
                Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
                Ok(std::task::Poll::Ready(_)) => std::task::Poll::Ready(()),
                Err(_) => {
                    let _ = panicked_request();
                    std::task::Poll::Ready(())
                }
            }
        }));
    }
}

/// Serve [`router`] on `listener` until the listener fails or
/// [`HttpOptions::shutdown`] is cancelled, over HTTP/1.1 (put a proxy in front for TLS
/// and HTTP/2).
///
/// A hostile client cannot hold the server: a connection that sends nothing, dribbles
/// its headers or idles between requests is closed after
/// [`HttpOptions::header_read_timeout`], a body that does not arrive within
/// [`HttpOptions::body_read_timeout`] is refused, a connection buffers at most
/// [`MAX_HEAD_BYTES`] of a request's head (431 past it), and past
/// [`HttpOptions::max_connections`] new connections are closed at once while the open
/// ones are served. On shutdown, connections finish the request in hand and close.
pub async fn serve(
    server: Server,
    listener: tokio::net::TcpListener,
    options: HttpOptions,
) -> io::Result<()> {
    let shutdown = options.shutdown.clone();
    let header_timeout = options.header_read_timeout;
    let slots = Arc::new(tokio::sync::Semaphore::new(options.max_connections));
    let peers = Arc::new(PeerConnections {
        max: options.max_connections_per_peer,
        count_loopback: options.count_loopback_peers,
        open: std::sync::Mutex::new(std::collections::HashMap::new()),
    });
    // The MCP sessions outlast the shutdown's start: the calls taken are answered first.
    let sessions_stop = CancellationToken::new();
    let _sessions_stop_on_return = sessions_stop.clone().drop_guard();
    let (router, in_flight) = try_router(server.clone(), options, sessions_stop.clone())?;
    // What the limit of refusals before authentication counted is recorded every few
    // seconds and when the server stops, not only with the peer's next refusal.
    let flusher = {
        let server = server.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(RATE_LIMITED_FLUSH_INTERVAL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    _ = every.tick() => server.flush_rate_limited().await,
                }
            }
            server
        })
    };
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut connections = tokio::task::JoinSet::new();
    let mut refused: u64 = 0;
    let mut refused_per_peer: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) if is_per_connection(&err) => {
                    tracing::debug!(error = %err, "a connection failed before it was accepted");
                    continue;
                }
                Err(err) => {
                    // Out of file descriptors or the like: wait a moment, keep serving.
                    tracing::warn!(error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(%peer, refused, "too many open connections: new ones are closed at once");
            }
            drop(stream);
            continue;
        };
        let Some(peer_slot) = PeerConnections::admit(&peers, peer.ip()) else {
            refused_per_peer += 1;
            if refused_per_peer.is_power_of_two() {
                tracing::warn!(%peer, refused = refused_per_peer, "too many open connections from one peer: its new ones are closed at once");
            }
            drop(stream);
            continue;
        };
        // Without TCP_NODELAY, the second write of a response (the event after the SSE
        // headers) waits for the client's delayed ACK: 40 ms per call.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        // Each request knows its peer (axum's `ConnectInfo`), for the rate limit of
        // refusals before authentication.
        let service = service.clone();
        let service = hyper::service::service_fn(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                hyper::service::Service::call(&service, request)
            },
        );
        let shutdown = shutdown.clone();
        let server = server.clone();
        connections.spawn(async move {
            let _slot = (slot, peer_slot);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Some(header_timeout))
                // The head's bound, and so the memory a connection holds while its headers
                // arrive (a body is read a chunk at a time, whatever this is).
                .max_buf_size(MAX_HEAD_BYTES)
                // A client that shuts its side down after sending a request (or closes it)
                // still has that request processed to the end and recorded, rather than
                // dropped when the read side sees the end of the stream.
                .half_close(true)
                .keep_alive(true);
            let connection = builder
                .serve_connection(
                    hyper_util::rt::TokioIo::new(stall::StallGuard::new(stream, WRITE_STALL_LIMIT)),
                    service,
                )
                .with_upgrades();
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(err) = result {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
                // A request hyper refused before any route is recorded as any refusal.
                if let Some(refusal) = routes::unparsed_request_error(&err) {
                    routes::refused_by_hyper(&server, peer.ip(), refusal).await;
                }
            }
        });
    }
    // No more connections: a client that tries now is refused at once, not queued.
    drop(listener);
    // Every call taken is answered before the sessions end (a call waiting for a person
    // stopped waiting when the shutdown began, and is answered as cancelled); a call
    // still running past the drain's limit is cut off with its session.
    if !in_flight.idle(SHUTDOWN_DRAIN).await {
        tracing::warn!(
            limit_s = SHUTDOWN_DRAIN.as_secs(),
            "calls still running when the shutdown's drain ended: abandoned, their sessions end now"
        );
    }
    // A call still running now (over `/mcp`, or a REST call of a connection drained
    // since) is abandoned: none of its transactions commits from now on (one waiting for
    // the database's lock rolls back), and it is recorded as abandoned (499, with what
    // committed before), not as answered; a client still connected gets `cancelled`.
    server.stop_running_calls();
    sessions_stop.cancel();
    // The answers in hand are written, then the connections close; one whose client does
    // not read is closed when the time is up, whatever it holds.
    let closed = tokio::time::timeout(SHUTDOWN_CLOSE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if closed.is_err() {
        tracing::warn!(
            open = connections.len(),
            limit_s = SHUTDOWN_CLOSE.as_secs(),
            "connections still writing when the shutdown ended (clients not reading their answers): closed"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
    if let Ok(server) = flusher.await {
        server.flush_rate_limited().await;
    }
    Ok(())
}

/// The connections [`serve`] holds open by peer ([`HttpOptions::max_connections_per_peer`]):
/// an entry only while the peer has one, so at most `max_connections` entries.
struct PeerConnections {
    max: usize,
    count_loopback: bool,
    open: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

/// One connection's place in its peer's count, given back when the connection ends.
struct PeerSlot {
    peers: Arc<PeerConnections>,
    key: std::net::IpAddr,
}

impl PeerConnections {
    /// A place for one more connection of `peer`, `None` past its cap; `Some(None)` for a
    /// peer that is not counted.
    fn admit(peers: &Arc<PeerConnections>, peer: std::net::IpAddr) -> Option<Option<PeerSlot>> {
        if peer.to_canonical().is_loopback() && !peers.count_loopback {
            return Some(None);
        }
        let key = crate::pipeline::limits::peer_key(peer);
        let mut open = peers.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(key).or_insert(0);
        if *count >= peers.max {
            return None;
        }
        *count += 1;
        Some(Some(PeerSlot {
            peers: Arc::clone(peers),
            key,
        }))
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The most of a request's head (request line and headers) [`serve`] buffers on a
/// connection: 128 KiB, hyper's ~64 KiB URI limit and 64 KiB of headers, so that a URI
/// over that limit is still answered 414, and a head past this bound 431. hyper's default,
/// ~400 KB, let each connection dribbling its headers (for up to the header timeout) hold
/// that much: 1000 such connections took 380 MB.
pub const MAX_HEAD_BYTES: usize = 128 * 1024;

/// How often [`serve`] records the counts of refusals the rate limit did not record.
pub const RATE_LIMITED_FLUSH_INTERVAL: Duration = Duration::from_secs(10);

/// An accept error that concerns one connection only (the client gave up).
fn is_per_connection(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tower_layer::Layer;
    use tower_service::Service;

    /// A service whose every answer is the future `make` gives.
    #[derive(Clone)]
    struct Answers<F>(F);

    impl<F, Fut> Service<axum::extract::Request> for Answers<F>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<axum::response::Response, Infallible>> + Send + 'static,
    {
        type Response = axum::response::Response;
        type Error = Infallible;
        type Future = Fut;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: axum::extract::Request) -> Fut {
            (self.0)()
        }
    }

    fn request() -> axum::extract::Request {
        axum::extract::Request::new(axum::body::Body::empty())
    }

    /// A request dropped before its answer (its connection gone) goes on by itself to its
    /// end, on a task of its own; one answered where it is polled is answered there.
    #[tokio::test]
    async fn a_request_dropped_unfinished_goes_on_to_its_end() {
        let (go_on, wait) = tokio::sync::oneshot::channel::<()>();
        let (finished, has_finished) = tokio::sync::oneshot::channel::<()>();
        let mut waiting = Some((wait, finished));
        let mut detached = Detach.layer(Answers(move || {
            let (wait, finished) = waiting.take().expect("one call");
            async move {
                let _ = wait.await;
                let _ = finished.send(());
                Ok(axum::response::Response::new(axum::body::Body::empty()))
            }
        }));
        let mut call = detached.call(request());
        let polled = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut call).poll(cx))).await;
        assert!(polled.is_pending());
        drop(call);
        go_on.send(()).expect("the request still waits");
        tokio::time::timeout(std::time::Duration::from_secs(10), has_finished)
            .await
            .expect("the request went on")
            .expect("and ended");

        let mut answered = Detach.layer(Answers(|| async {
            let mut response = axum::response::Response::new(axum::body::Body::empty());
            *response.status_mut() = axum::http::StatusCode::ACCEPTED;
            Ok(response)
        }));
        let response = answered.call(request()).await.unwrap();
        assert_eq!(response.status(), axum::http::StatusCode::ACCEPTED);
    }

    /// A request whose future panics is answered 500, and the panic goes no further.
    #[tokio::test]
    async fn a_request_that_panics_is_answered_500() {
        let mut detached = Detach.layer(Answers(|| async {
            if std::hint::black_box(true) {
                panic!("a request's bug");
            }
            Ok(axum::response::Response::new(axum::body::Body::empty()))
        }));
        let response = detached.call(request()).await.unwrap();
        assert_eq!(
            response.status(),
            axum::http::StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
