//! The handlers: the `/mcp` gate (401/403 before MCP), `/tools`, `/tools/{name}` and the
//! protected-resource metadata.

use std::borrow::Cow;
use std::convert::Infallible;
use std::error::Error as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::HttpOptions;
use super::errors::json_error;
use super::guard::Guard;
use super::sessions::SessionOwners;
use crate::BoxFuture;
use crate::audit::Check;
use crate::context::Transport;
use crate::error::{Status, ToolError};
use crate::mcp::streamable::McpService;
use crate::mcp::{PendingAttempt, PendingItem, VerifiedPrincipal};
use crate::pipeline::probe::{self, UNKNOWN_TOOL};
use crate::pipeline::{Attempt, BatchRate};
use crate::principal::Principal;
use crate::server::{CallRequest, Credentials, Server};

/// The state of every route.
#[derive(Clone)]
pub(crate) struct App {
    inner: Arc<AppInner>,
    pub(crate) options: Arc<HttpOptions>,
}

struct AppInner {
    server: Server,
    /// The listing's manifest of every visible tool, as a response body.
    /// The manifest of every visible tool, as `GET /tools` sends it; built on first use.
    full_manifest: std::sync::OnceLock<Bytes>,
    /// Built from [`HttpOptions::resource_url`], when it is set.
    resource: Option<ResourceUrls>,
    /// Who opened each MCP session.
    sessions: SessionOwners,
    /// The JSON-RPC ids of each session's requests in flight.
    request_ids: Arc<RequestIds>,
    /// Every scope some tool requires.
    every_scope: Vec<&'static str>,
    /// The calls in flight (`/mcp` POSTs and REST calls), which a shutdown drains.
    in_flight: Arc<InFlight>,
}

/// The Streamable HTTP session header.
const SESSION_ID: &str = "mcp-session-id";

/// The `resource` identifier and the URL of its metadata document.
struct ResourceUrls {
    resource: String,
    metadata: String,
}

impl ResourceUrls {
    /// RFC 9728 §3.1: the metadata lives at the origin, under
    /// `/.well-known/oauth-protected-resource`, followed by the resource's path.
    fn for_resource(resource: &str) -> ResourceUrls {
        let resource = super::canonical_resource_url(resource).to_owned();
        let (origin, path) = match resource.split_once("://") {
            Some((scheme, rest)) => match rest.find('/') {
                Some(i) => (format!("{scheme}://{}", &rest[..i]), &rest[i..]),
                None => (resource.clone(), ""),
            },
            None => (resource.clone(), ""),
        };
        let metadata = format!("{origin}/.well-known/oauth-protected-resource{path}");
        ResourceUrls { resource, metadata }
    }
}

impl App {
    pub(crate) fn new(server: Server, options: HttpOptions) -> App {
        let resource = options
            .resource_url
            .as_deref()
            .map(ResourceUrls::for_resource);
        let every_scope = server.registry().scopes_supported();
        App {
            inner: Arc::new(AppInner {
                server,
                full_manifest: std::sync::OnceLock::new(),
                resource,
                sessions: SessionOwners::new(options.max_sessions_per_principal),
                request_ids: Arc::default(),
                every_scope,
                in_flight: Arc::default(),
            }),
            options: Arc::new(options),
        }
    }

    /// The calls in flight, which a shutdown drains.
    pub(crate) fn in_flight(&self) -> &Arc<InFlight> {
        &self.inner.in_flight
    }

    fn server(&self) -> &Server {
        &self.inner.server
    }

    /// The resource identifier and metadata URL: configured, or derived from `Host`.
    fn resource_urls(&self, headers: &HeaderMap) -> ResourceUrls {
        if let Some(urls) = &self.inner.resource {
            return ResourceUrls {
                resource: urls.resource.clone(),
                metadata: urls.metadata.clone(),
            };
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        ResourceUrls::for_resource(&format!("http://{host}/mcp"))
    }

    /// Verify the request's bearer token (or apply the server's unauthenticated opt-in).
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, ToolError> {
        let credentials = credentials(headers)?;
        self.server().authenticate(&credentials).await
    }

    /// The answer to a refusal: the error's status and JSON body, with the
    /// `WWW-Authenticate` challenge of a 401, or of a 403 for a missing scope.
    fn refusal(&self, headers: &HeaderMap, err: &ToolError, tool: Option<&str>) -> Response {
        let mut response = json_error(err);
        let challenge = match (err.status(), err.reason()) {
            (Status::Unauthorized, "missing_token") => Some(format!(
                r#"Bearer resource_metadata="{}""#,
                self.resource_urls(headers).metadata
            )),
            (Status::Unauthorized, _) => Some(format!(
                r#"Bearer error="invalid_token", error_description="{}", resource_metadata="{}""#,
                quoted(err.message()),
                self.resource_urls(headers).metadata
            )),
            (Status::Forbidden, "insufficient_scope") => {
                let scopes = tool
                    .and_then(|t| self.server().registry().get(t))
                    .map(|t| t.def().scopes().join(" "))
                    .unwrap_or_default();
                Some(format!(
                    r#"Bearer error="insufficient_scope", scope="{}", resource_metadata="{}""#,
                    quoted(&scopes),
                    self.resource_urls(headers).metadata
                ))
            }
            _ => None,
        };
        if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        if let Some(wait) = err.retry_after() {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The peer address of a request, when the server knows it (axum's `ConnectInfo`, which
/// [`serve`](super::serve) sets).
fn peer_addr(extensions: &axum::http::Extensions) -> Option<IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
}

/// A quoted-string value of an auth-param, in the characters RFC 6750 §3 allows in
/// `error_description` and `scope` (printable ASCII but `"` and `\`): a quote, a backslash
/// or a control character becomes `'`, any other character outside ASCII the
/// percent-encoding of its UTF-8 bytes (`é` is `%C3%A9`). The JSON body keeps the text.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' | '\\' => out.push('\''),
            ' '..='~' => out.push(c),
            c if c.is_control() => out.push('\''),
            c => {
                for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.push_str(&format!("%{byte:02X}"));
                }
            }
        }
    }
    out
}

/// The request's credentials: a bearer token, none, or a refusal of a malformed header.
fn credentials(headers: &HeaderMap) -> Result<Credentials, ToolError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(Credentials::None);
    };
    // Which one counts is not for us to guess (a proxy in front may read the other), as
    // with two `Host` headers.
    if values.next().is_some() {
        return Err(ToolError::invalid_token(
            "more than one Authorization header: send one",
        ));
    }
    let value = value
        .to_str()
        .map_err(|_| ToolError::invalid_token("the Authorization header is not valid text"))?;
    let (scheme, token) = value.trim().split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ToolError::invalid_token(
            "the Authorization header is not a bearer token",
        ));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(ToolError::invalid_token("the bearer token is empty"));
    }
    Ok(Credentials::Bearer(token.to_owned()))
}

/// Read a body up to the limit (413 beyond it) within the body timeout (408 past it). A
/// body in a content coding (`Content-Encoding: gzip`…) is refused unread, 415: read as
/// it is, a compressed call would be no call at all to every check, and to its record.
/// So is one in a transfer coding other than `chunked` (`Transfer-Encoding: gzip,
/// chunked`), 501 as RFC 9112 says: hyper takes off the chunks and hands on the rest
/// still coded.
async fn read_body(
    body: Body,
    headers: &HeaderMap,
    options: &HttpOptions,
) -> Result<Bytes, ToolError> {
    read_body_keeping_start(body, headers, options, None).await
}

/// How long the start of a body declared past the limit is waited for (see
/// [`read_body_keeping_start`]): the refusal is not delayed past it.
const START_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// [`read_body`]; a body refused for its size or its slowness leaves what was read of it in
/// `start` (at most the limit), so that its refusal is recorded as the call its start
/// names, as stdio records an over-long line by its start. Of a body whose declared
/// length is past the limit, what arrives within [`START_WAIT`] is read.
async fn read_body_keeping_start(
    body: Body,
    headers: &HeaderMap,
    options: &HttpOptions,
    start: Option<&mut Vec<u8>>,
) -> Result<Bytes, ToolError> {
    let transfer = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(|coding| coding.trim().to_ascii_lowercase())
        .find(|coding| !coding.is_empty() && coding != "chunked" && coding != "identity");
    if let Some(coding) = transfer {
        return Err(ToolError::new(
            Status::NotImplemented,
            "unsupported_transfer_encoding",
            format!(
                "the body's Transfer-Encoding `{}` is not supported: send it `chunked` or with \
                 a Content-Length",
                crate::audit::bounded(&coding, 64)
            ),
        ));
    }
    let codings = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .find(|coding| !coding.is_empty() && coding != "identity");
    if let Some(coding) = codings {
        return Err(ToolError::new(
            Status::UnsupportedMediaType,
            "unsupported_content_encoding",
            format!(
                "the body's Content-Encoding `{}` is not supported: send it uncompressed",
                crate::audit::bounded(&coding, 64)
            ),
        ));
    }
    let limit = options.max_body_bytes;
    let too_large = || {
        ToolError::new(
            Status::PayloadTooLarge,
            "body_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    };
    let body_timeout = || {
        ToolError::new(
            Status::RequestTimeout,
            "body_timeout",
            format!(
                "the request body did not arrive within {} s",
                options.body_read_timeout.as_secs_f64()
            ),
        )
    };
    // A declared length past the limit is refused at once, not after waiting for bytes
    // that would be refused anyway (or, sent one a minute, for the read's timeout): only
    // what of its start arrives within a moment is read, for the record.
    if axum::body::HttpBody::size_hint(&body).lower() > limit as u64 {
        if let Some(start) = start {
            let wait = START_WAIT.min(options.body_read_timeout);
            let _ = tokio::time::timeout(wait, read_into(body, limit, start)).await;
        }
        return Err(too_large());
    }
    if let Some(start) = start {
        return match tokio::time::timeout(options.body_read_timeout, read_into(body, limit, start))
            .await
        {
            Err(_) => Err(body_timeout()),
            Ok(Ok(true)) => Ok(Bytes::from(std::mem::take(start))),
            Ok(Ok(false)) => Err(too_large()),
            Ok(Err(err)) => Err(ToolError::bad_request(
                "invalid_body",
                format!("the request body could not be read: {err}"),
            )),
        };
    }
    let read = tokio::time::timeout(options.body_read_timeout, axum::body::to_bytes(body, limit));
    let Ok(read) = read.await else {
        return Err(body_timeout());
    };
    read.map_err(|err| {
        let mut source = err.source();
        let mut is_too_large = false;
        while let Some(e) = source {
            is_too_large |= e.is::<http_body_util::LengthLimitError>();
            source = e.source();
        }
        if is_too_large {
            too_large()
        } else {
            ToolError::bad_request(
                "invalid_body",
                format!("the request body could not be read: {err}"),
            )
        }
    })
}

/// Read `body` into `into`, at most `limit` bytes: `true` if it ended within them,
/// `false` past them (`into` then holds its first `limit` bytes). Cancellation safe: what
/// was read stays in `into`.
async fn read_into(mut body: Body, limit: usize, into: &mut Vec<u8>) -> Result<bool, axum::Error> {
    use http_body_util::BodyExt;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        let room = limit.saturating_sub(into.len());
        if data.len() > room {
            into.extend_from_slice(&data[..room]);
            return Ok(false);
        }
        into.extend_from_slice(&data);
    }
    Ok(true)
}

/// What the gate reads of a JSON-RPC message that is a `tools/call`, in one borrowed
/// parse of the body (the arguments are kept as raw text until a refusal needs them).
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<ProbeParams<'a>>,
    /// Present in a JSON-RPC response (the client's answer to a request of the server).
    #[serde(default)]
    result: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

impl Probe<'_> {
    /// A message without a method, with a result or an error: a JSON-RPC response.
    fn is_response(&self) -> bool {
        self.method.is_none() && (self.result.is_some() || self.error.is_some())
    }
}

/// Whether every message of `body` (one object, or a batch of objects) has a method,
/// read strictly (escapes decoded, a repeated key refused), and none is `tools/call`.
fn strictly_no_call(body: &[u8], batch: bool) -> bool {
    #[derive(Deserialize)]
    struct MethodOf<'a> {
        #[serde(default, borrow)]
        method: Option<Cow<'a, str>>,
    }
    let object = |raw: &RawValue| raw.get().trim_ascii_start().starts_with('{');
    let other = |raw: &&RawValue| {
        object(raw)
            && serde_json::from_str::<MethodOf<'_>>(raw.get())
                .is_ok_and(|m| m.method.is_some_and(|m| m != "tools/call"))
    };
    if batch {
        serde_json::from_slice::<Vec<&RawValue>>(body)
            .is_ok_and(|messages| !messages.is_empty() && messages.iter().all(other))
    } else {
        serde_json::from_slice::<&RawValue>(body).is_ok_and(|raw| other(&raw))
    }
}

#[derive(Deserialize)]
struct ProbeParams<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

/// A session id no session has: a fresh random one, in the form rmcp gives its own.
fn unknown_session_id() -> HeaderValue {
    let mut bytes = [0u8; 16];
    // (Were the system without randomness, all zeros: no random id of rmcp's.)
    let _ = getrandom::fill(&mut bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = crate::hex::encode(&bytes);
    let id = format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    );
    HeaderValue::from_str(&id).unwrap_or(HeaderValue::from_static("unknown-session"))
}

/// Whether a JSON-RPC message, or any message of a batch (nested ones included), has the
/// method `tools/call`.
fn mentions_call(message: &Value) -> bool {
    probe::messages(message)
        .into_iter()
        .any(|m| m.get("method").and_then(Value::as_str) == Some("tools/call"))
}

/// The gate's reading of a POST body, for the fuzz targets (`fuzz/`): whether the body
/// (with these `Mcp-Name` and `Mcp-Method` headers) is taken as a `tools/call`, and if so
/// its tool and JSON-RPC id. Not public API.
#[doc(hidden)]
pub fn __fuzz_probe(
    mcp_name: Option<&str>,
    mcp_method: Option<&str>,
    body: &[u8],
) -> Option<(String, Option<String>)> {
    let mut headers = HeaderMap::new();
    for (name, value) in [("mcp-name", mcp_name), ("mcp-method", mcp_method)] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(name, value);
        }
    }
    let call = ToolsCall::probe(&headers, body)?;
    // The arguments a refusal's record would keep must be readable too.
    let _ = ToolsCall::arguments_of(body);
    Some((call.tool, call.id))
}

/// A `tools/call` seen by the gate: the tool, the JSON-RPC id and the raw arguments.
struct ToolsCall<'a> {
    tool: String,
    id: Option<String>,
    arguments: Option<&'a RawValue>,
    /// The whole body, for the arguments of a call the strict reading could not parse.
    body: &'a [u8],
    /// The body is this one request, read strictly: its id as [`request_id`] reads it
    /// (`Some(None)`: it has none), without a second reading of the body.
    request_key: Option<Option<String>>,
}

impl<'a> ToolsCall<'a> {
    /// The `tools/call` a request may carry, found by one borrowed parse of the body:
    ///
    /// - a JSON-RPC request whose method is `tools/call` (the first such one of a batch):
    ///   the tool its body names, which is the one that runs (rmcp refuses an `Mcp-Name`
    ///   header that contradicts it, where the protocol defines the header, and ignores it
    ///   elsewhere); the header's only when the body names none;
    /// - a body that does not parse as JSON-RPC (malformed, a repeated key…) but says
    ///   `tools/call`, in the body or in the `Mcp-Method` header: a call of an unknown
    ///   tool ([`UNKNOWN_TOOL`]), so that its refusal is recorded all the same.
    ///
    /// A well-formed request of another method is not a call, whatever its headers say.
    fn probe(headers: &HeaderMap, body: &'a [u8]) -> Option<ToolsCall<'a>> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let is_call = |p: &Probe<'_>| p.method.as_deref() == Some("tools/call");
        // Whether the body has a message without a method (a response, or a request
        // with its method left out), and whether it is only responses.
        let mut methodless = false;
        let mut responses = false;
        let batch = body.trim_ascii_start().starts_with(b"[");
        let parsed = if batch {
            // A batch nested in a batch is not JSON-RPC: read leniently, below.
            let nested = serde_json::from_slice::<Vec<&RawValue>>(body).map_or(true, |batch| {
                batch
                    .iter()
                    .any(|m| m.get().trim_ascii_start().starts_with('['))
            });
            (!nested)
                .then(|| serde_json::from_slice::<Vec<Probe<'a>>>(body).ok())
                .flatten()
                .map(|batch| {
                    methodless = batch.is_empty() || batch.iter().any(|p| p.method.is_none());
                    responses = !batch.is_empty() && batch.iter().all(Probe::is_response);
                    batch.into_iter().find(is_call)
                })
        } else {
            serde_json::from_slice::<Probe<'a>>(body).ok().map(|probe| {
                methodless = probe.method.is_none();
                responses = probe.is_response();
                is_call(&probe).then_some(probe)
            })
        };
        // Responses (the client's answers to the server, an elicitation's say) are taken
        // by rmcp as answers, never as calls, whatever the headers say; but only a body
        // that is JSON throughout (the probe skips what it does not read, a string that is
        // not UTF-8 among it) is one rmcp can read at all.
        let methodless =
            methodless && !(responses && serde_json::from_slice::<Value>(body).is_ok());
        let probe = match parsed {
            Some(Some(probe)) => probe,
            // A message without a method that the `Mcp-Method` header calls a
            // `tools/call`: refused by the MCP layer, recorded as a call all the same.
            Some(None) if methodless && header("mcp-method") == Some("tools/call") => {
                return Some(ToolsCall {
                    tool: header("mcp-name").unwrap_or(UNKNOWN_TOOL).to_owned(),
                    id: None,
                    arguments: None,
                    body,
                    request_key: None,
                });
            }
            Some(None) => return None,
            // Messages whose methods a strict reading finds, none of them a call (a read
            // whose params hold a `name` of another shape, say): the MCP layer dispatches
            // them as what they say, whatever the header or the bytes mention; they are
            // items of their own kind, recorded as such.
            None if strictly_no_call(body, batch) => return None,
            None => {
                // What a lenient reader sees (the last of repeated keys wins, any shape
                // of params, batches nested), the header, or the bytes: an ambiguous body
                // that any of them reads as a `tools/call` is one. Its tool and id are
                // what the lenient reading says (as the stdio framing records them),
                // else unknown.
                let lenient = probe::tool_call_request(body);
                let says_call = lenient.is_some()
                    || header("mcp-method") == Some("tools/call")
                    || probe::says_tools_call(body)
                    || serde_json::from_slice::<Value>(body).is_ok_and(|v| mentions_call(&v));
                return says_call.then(|| ToolsCall {
                    tool: lenient
                        .as_ref()
                        .map(|r| r.tool.clone())
                        .filter(|tool| tool != UNKNOWN_TOOL)
                        .or_else(|| header("mcp-name").map(str::to_owned))
                        .unwrap_or_else(|| UNKNOWN_TOOL.to_owned()),
                    id: lenient.and_then(|r| r.request_id),
                    arguments: None,
                    body,
                    request_key: None,
                });
            }
        };
        let params = probe.params;
        let tool = match (
            params.as_ref().and_then(|p| p.name.as_deref()),
            header("mcp-name"),
        ) {
            (Some(name), _) | (None, Some(name)) => name.to_owned(),
            (None, None) => UNKNOWN_TOOL.to_owned(),
        };
        let id = probe.id.as_ref().map(probe::id_text);
        // A strict reading has no repeated key: its id is the first the bytes hold.
        let request_key = (!batch).then(|| probe.id.as_ref().and_then(request_key));
        Some(ToolsCall {
            tool,
            id,
            arguments: params.and_then(|p| p.arguments),
            body,
            request_key,
        })
    }

    /// Begin the attempt of this call: from here on it leaves one audit record.
    fn begin(&self, server: &Server, peer: Option<IpAddr>) -> Attempt {
        server.begin(self.request(peer))
    }

    /// The request of this call, as its attempt begins.
    fn request(&self, peer: Option<IpAddr>) -> CallRequest {
        let mut request =
            CallRequest::new(self.tool.clone(), None).transport(Transport::StreamableHttp);
        if let Some(id) = &self.id {
            request = request.request_id(id.clone());
        }
        if let Some(peer) = peer {
            request = request.peer_addr(peer);
        }
        request
    }

    /// End `attempt` with the gate's refusal; the arguments are read for its record.
    async fn refuse(&self, mut attempt: Attempt, check: Check, err: ToolError) -> ToolError {
        attempt.set_arguments(match self.arguments {
            Some(raw) => serde_json::from_str::<Value>(raw.get()).ok(),
            None => probe::tool_call_arguments(self.body),
        });
        attempt.refuse(check, err).await
    }

    /// The arguments of the `tools/call` in `body`, for the record of an attempt the
    /// MCP layer never dispatched: read strictly (borrowed), else leniently.
    fn arguments_of(body: &[u8]) -> Option<Value> {
        let strict = serde_json::from_slice::<Probe<'_>>(body)
            .ok()
            .and_then(|probe| probe.params?.arguments)
            .and_then(|raw| serde_json::from_str(raw.get()).ok());
        strict.or_else(|| probe::tool_call_arguments(body))
    }
}

/// `/mcp`: the `Host`/`Origin` guard, then [`mcp_gate`], then rmcp's service, called
/// directly (no middleware layers, one boxed future per request).
#[derive(Clone)]
pub(crate) struct McpEndpoint(Arc<EndpointInner>);

struct EndpointInner {
    app: App,
    guard: Arc<Guard>,
    mcp: McpService,
    in_flight: Arc<InFlight>,
}

impl McpEndpoint {
    pub(crate) fn new(
        app: App,
        guard: Arc<Guard>,
        mcp: McpService,
        in_flight: Arc<InFlight>,
    ) -> McpEndpoint {
        McpEndpoint(Arc::new(EndpointInner {
            app,
            guard,
            mcp,
            in_flight,
        }))
    }
}

/// The JSON-RPC ids of the requests in flight in each MCP session (until their answers'
/// bodies are done with). rmcp matches an answer to its request by id within a session:
/// two requests in flight under one id had their answers lost or swapped (a
/// `list_comments` answered with a `get_issue`'s result) while both were recorded as
/// answered, and each unanswered stream held its connection for minutes.
#[derive(Default)]
pub(crate) struct RequestIds(std::sync::Mutex<std::collections::HashSet<(String, String)>>);

impl RequestIds {
    /// Take `id` in `session`: `None` if a request in flight holds it.
    fn enter(self: &Arc<Self>, session: &str, id: String) -> Option<RequestIdGuard> {
        let key = (session.to_owned(), id);
        let mut ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        ids.insert(key.clone()).then(|| RequestIdGuard {
            ids: Arc::clone(self),
            key,
        })
    }
}

/// The error that replaces `body` when it is one JSON-RPC answer of the client's (an `id`,
/// no `method`) that repeats a key: see [`probe::ambiguous_answer`].
fn ambiguous_answer(body: &[u8]) -> Option<Vec<u8>> {
    if !probe::may_repeat_a_key(body) {
        return None;
    }
    let head = Head::of(body)?;
    if head.method.is_some() {
        return None;
    }
    let HeadId::Present(id) = head.id else {
        return None;
    };
    let pointer = probe::repeated_key(body)?;
    serde_json::to_vec(&probe::ambiguous_answer(&id, &pointer)).ok()
}

/// The status of the record of a request the MCP layer answered without handing it to the
/// handler: the status the client gets, rmcp's own (406, 415, 404…, or 500 when the
/// session ended under the request), or 400 for a JSON-RPC error in a 200 answer.
fn refused_status(code: u16) -> Status {
    Status::from_code(code)
        .filter(|status| (400..600).contains(&status.code()))
        .unwrap_or(Status::BadRequest)
}

/// A session's request id in flight, until its answer's body is done with and the MCP
/// layer is done with the request (see [`HeldId`]).
struct RequestIdGuard {
    ids: Arc<RequestIds>,
    key: (String, String),
}

impl Drop for RequestIdGuard {
    fn drop(&mut self) {
        self.ids
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// A request's id, held in the request's extensions, which rmcp keeps in the handler's
/// context until the handler has answered: a client that drops the answer's stream (its
/// body) does not free the id while the request still runs, and a second request under
/// it cannot be answered with the first one's result (or take it away).
#[derive(Clone)]
struct HeldId(#[allow(dead_code)] Arc<RequestIdGuard>);

/// The id of the JSON-RPC request `body` holds (a single request: a batch is refused
/// whole by rmcp), as rmcp reads it: a number written `1e2` is the id `100`.
fn request_id(body: &[u8]) -> Option<String> {
    match Head::of(body) {
        Some(head) => {
            head.method?;
            match head.id {
                HeadId::Present(id) => request_key(&id),
                HeadId::Absent => None,
            }
        }
        None => {
            let top = probe::top_level(body);
            top.method.as_ref()?;
            request_key(&serde_json::from_slice(top.id?).ok()?)
        }
    }
}

/// The id and method of the one JSON-RPC message a body holds, read as rmcp reads them:
/// strictly, escapes decoded (`"\u0069d"` is the key `id`, which a scan of the raw bytes
/// would miss, letting a second request under an id in flight through).
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    id: HeadId,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
}

impl Head {
    /// `None` when the body is not one JSON object without a repeated `id` or `method`
    /// (rmcp refuses it too): then only the raw top level can say anything.
    fn of(body: &[u8]) -> Option<Head> {
        serde_json::from_slice(body).ok()
    }
}

/// A message's `id`: absent, or present (`null` included).
#[derive(Default)]
enum HeadId {
    #[default]
    Absent,
    Present(Value),
}

impl<'de> Deserialize<'de> for HeadId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(HeadId::Present)
    }
}

/// A JSON-RPC id as [`RequestIds`] keys it: a number and a string never collide.
fn request_key(id: &Value) -> Option<String> {
    Some(match id {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => format!("n:{i}"),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => format!("n:{}", f as i64),
            _ => format!("n:{n}"),
        },
        Value::String(s) => format!("s:{s}"),
        _ => return None,
    })
}

/// The `/mcp` POSTs being answered, their answers' bodies included: a server shutting
/// down waits for them before it ends the MCP sessions, so that a call that ran is
/// answered rather than cut off (its record says it ran).
#[derive(Default)]
pub(crate) struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl InFlight {
    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        InFlightGuard(Arc::clone(self))
    }

    /// Waits, at most `limit`, until none is in flight; whether none is.
    pub(crate) async fn idle(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let idle = self.idle.notified();
            if self.count.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.count.load(std::sync::atomic::Ordering::Acquire) == 0;
            }
        }
    }
}

/// One POST in flight, until its answer's body is done with.
struct InFlightGuard(Arc<InFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self
            .0
            .count
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl tower_service::Service<Request> for McpEndpoint {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let endpoint = Arc::clone(&self.0);
        Box::pin(async move {
            if let Err(err) = endpoint.guard.check(request.uri(), request.headers()) {
                // Boxed: a rare path, kept out of the size of every request's future.
                return Ok(
                    Box::pin(refused_by_guard(&endpoint.app, request, Refused::Mcp, err)).await,
                );
            }
            // Stateless, `/mcp` takes POST only (no session to stream or end): GET and
            // DELETE are refused here too, not by rmcp, whose 405 is plain text.
            let (allowed, allow): (&[Method], _) = if endpoint.app.options.stateless {
                (&[Method::POST], "POST")
            } else {
                (
                    &[Method::GET, Method::POST, Method::DELETE],
                    "GET,POST,DELETE",
                )
            };
            if !allowed.contains(request.method()) {
                // rmcp's answer is plain text: the JSON of every other route's 405, and
                // what the request may carry recorded.
                let err = method_not_allowed_error(request.method());
                let mut response = Box::pin(refused_unrouted(&endpoint.app, request, err)).await;
                response.headers_mut().insert(
                    axum::http::header::ALLOW,
                    axum::http::HeaderValue::from_static(allow),
                );
                return Ok(response);
            }
            // A GET or a DELETE of `/mcp` takes no body: one that sends one (rmcp would
            // ignore it, and any call in it with it) is refused, and what it carries
            // recorded, as a request refused where no route takes it is.
            if request.method() != Method::POST && declares_body(request.headers()) {
                let err = ToolError::bad_request(
                    "body_not_allowed",
                    format!(
                        "a {} of the MCP endpoint takes no body: a call is a POST",
                        request.method()
                    ),
                );
                return Ok(Box::pin(refused_unrouted(&endpoint.app, request, err)).await);
            }
            let in_flight = (request.method() == Method::POST).then(|| endpoint.in_flight.enter());
            let response = mcp_gate(&endpoint.app, request, &endpoint.mcp).await;
            Ok(held_by_body(response, in_flight))
        })
    }
}

/// The refusal of a body of more JSON values than [`HttpOptions::max_body_values`], which
/// no reading of ours parses: counted without allocating, for bodies longer than the limit
/// only.
fn too_many_values(body: &[u8], options: &HttpOptions) -> Option<ToolError> {
    let max = options.max_body_values;
    (body.len() > max && crate::mcp::more_values_than(body, max)).then(|| {
        ToolError::new(
            Status::PayloadTooLarge,
            "body_too_large",
            format!("a request body holds at most {max} JSON values"),
        )
    })
}

/// A POST to `/mcp` whose body could not be read (over the size limit, too slow, broken)
/// or is not parsed (of more JSON values than the limit):
/// it may have carried a `tools/call`, so it is recorded as one (the tool its `Mcp-Name`
/// header names, else [`UNKNOWN_TOOL`]), with the caller's principal when the token is
/// valid; a caller without one counts against its peer's rate of recorded refusals.
async fn unread_body(
    app: &App,
    parts: &axum::http::request::Parts,
    err: ToolError,
    start: &[u8],
    arrived: std::time::Instant,
) -> Response {
    let mut request = named_by_headers(&parts.headers, start).transport(Transport::StreamableHttp);
    if let Some(peer) = peer_addr(&parts.extensions) {
        request = request.peer_addr(peer);
    }
    if let Ok(credentials) = credentials(&parts.headers) {
        request = request.credentials(credentials);
    }
    let mut attempt = app.server().begin_arrived(request, arrived);
    // For the record only: the refusal is the body's, whoever sent it.
    let _ = attempt.authenticate().await;
    json_error(&attempt.refuse(Check::Protocol, err).await)
}

/// The record of an `/mcp` body refused unread: of the kind and the name its
/// `Mcp-Method` and `Mcp-Name` headers say, when it sends them, else those its `start`
/// (what was read of it) says, read as stdio reads the start of an over-long line, under
/// the id the start gives.
fn named_by_headers(headers: &HeaderMap, start: &[u8]) -> CallRequest {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    probe::Unread::of_start(start).request_named(header("mcp-method"), header("mcp-name"))
}

/// A REST call's request id: its `X-Request-Id`, any value, as text (bytes that are not
/// UTF-8 replaced), a long one cut as its record would cut it (marked with its hash and
/// length).
fn with_rest_request_id(request: CallRequest, headers: &HeaderMap) -> CallRequest {
    match headers
        .get("x-request-id")
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v.as_bytes()))
    {
        Some(id) => request.request_id(crate::audit::bounded(&id, crate::audit::MAX_NAME_BYTES)),
        None => request,
    }
}

/// The refusal of a request hyper could not read as HTTP/1.1, which it answers itself
/// before any route: 414 for a URI over its limit, 431 for a head over its size or with
/// more than 100 headers, 400 for anything else it cannot parse (a control byte in a
/// header, a repeated or bad `Content-Length`, a bad method or version), and a
/// connection that opens with HTTP/2's preface, which it closes unanswered. `None` for
/// any other end of a connection (the client left, a timeout): not a refusal of a request.
pub(crate) fn unparsed_request_error(err: &hyper::Error) -> Option<ToolError> {
    if !err.is_parse() {
        return None;
    }
    // hyper says which parse error only in its message (its kinds are private).
    let what = err.to_string();
    let what = crate::audit::bounded(&what, 200);
    Some(if err.is_parse_too_large() && what.starts_with("URI") {
        ToolError::new(
            Status::UriTooLong,
            "uri_too_long",
            "the request's URI is longer than the server reads",
        )
    } else if err.is_parse_too_large() {
        ToolError::new(
            Status::RequestHeaderFieldsTooLarge,
            "headers_too_large",
            "the request's head is larger, or has more headers, than the server reads",
        )
    } else if what.contains("HTTP2 preface") {
        ToolError::new(
            Status::BadRequest,
            "http2_not_served",
            "the connection opened with HTTP/2's preface; this server speaks HTTP/1.1 \
             (the connection was closed unanswered)",
        )
    } else {
        ToolError::new(
            Status::BadRequest,
            "unreadable_request",
            format!("the request is not HTTP/1.1 the server can read: {what}"),
        )
    })
}

/// The record of a request hyper refused before any route ([`unparsed_request_error`]):
/// nothing of it can be read, so it is a call of `(unknown)` from its peer, refused by
/// the protocol, and counts against the peer's rate of refusals before authentication.
pub(crate) async fn refused_by_hyper(server: &Server, peer: IpAddr, err: ToolError) {
    let request = CallRequest::new(UNKNOWN_TOOL, None)
        .transport(Transport::PlainHttp)
        .peer_addr(peer);
    let mut attempt = server.begin(request);
    // Nothing was presented: the record is of a caller nobody knows.
    let _ = attempt.authenticate().await;
    // hyper has answered (or closed) already: what the record's write says is logged by
    // the pipeline, and the peer past its rate is only counted.
    let _ = attempt.refuse(Check::Protocol, err).await;
}

/// Where a request the `Host`/`Origin` guard refused was going.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `/mcp`.
    Mcp,
    /// Any other route (`POST /tools/{name}` is the one that calls).
    Rest,
}

/// A request the `Host`/`Origin` guard refused (DNS rebinding, a foreign `Origin`): it
/// is answered with the guard's refusal, and one that may carry a call leaves its record
/// first (check `protocol`, the guard's reason), as a refusal by any other layer does: a
/// `POST /mcp` read as the gate reads it (its body within the same limits; a call, a
/// read, a prompt or a completion in it, every call of a batch), a `POST /tools/{name}`
/// by its path. The caller's principal is in the record when its token is valid; a
/// caller without one counts against its peer's rate of recorded refusals.
pub(crate) async fn refused_by_guard(
    app: &App,
    request: Request,
    route: Refused,
    err: ToolError,
) -> Response {
    let (parts, body) = request.into_parts();
    let post = parts.method == Method::POST;
    // Under a router of the application's, the matched path has its prefix.
    let calls = post
        && route == Refused::Rest
        && parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .is_some_and(|path| path.as_str().ends_with("/tools/{name}"));
    if calls {
        let name = path_tool(parts.uri.path());
        return refuse_named(app, &parts, name, err).await;
    }
    if post && route == Refused::Mcp {
        return refuse_what_the_body_carries(app, &parts, body, err, Carries::Calls).await;
    }
    // Another method, or a path no route takes: what it may carry, as a 404 or a 405
    // would record it, refused by the guard.
    refused_unrouted(app, Request::from_parts(parts, body), err).await
}

/// Refuse with `err` a call of `tool`, named by the request's path: recorded with the
/// caller's principal when its token is valid (the refusal is not its token's).
async fn refuse_named(
    app: &App,
    parts: &axum::http::request::Parts,
    tool: String,
    err: ToolError,
) -> Response {
    let mut request = CallRequest::new(tool, None).transport(Transport::PlainHttp);
    if let Some(peer) = peer_addr(&parts.extensions) {
        request = request.peer_addr(peer);
    }
    if let Ok(credentials) = credentials(&parts.headers) {
        request = request.credentials(credentials);
    }
    let mut attempt = app
        .server()
        .begin(with_rest_request_id(request, &parts.headers));
    // For the record only.
    let _ = attempt.authenticate().await;
    json_error(&attempt.refuse(Check::Protocol, err).await)
}

/// Which bodies [`refuse_what_the_body_carries`] records.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Carries {
    /// Only a body that carries a call (or a read, a prompt, a completion).
    Calls,
    /// Any body: one that carries no call is recorded as a call of a tool nobody can
    /// know (or of the one `Mcp-Method` and `Mcp-Name` name), as `/mcp` records a body it
    /// cannot read.
    Any,
}

/// Refuse with `err` what `body`, read as the `/mcp` gate reads it (within the same
/// limits), carries: its call, else its read, prompt or completion, each recorded, and
/// every other call of a batch; a body that carries none as `carries` says. The caller's
/// principal is in a record when its token is valid; a caller without one counts against
/// its peer's rate of recorded refusals.
async fn refuse_what_the_body_carries(
    app: &App,
    parts: &axum::http::request::Parts,
    body: Body,
    err: ToolError,
    carries: Carries,
) -> Response {
    // When the request arrived: a body refused for its size or its pace (after up to
    // 30 s) is recorded as arriving then, with its real duration.
    let arrived = std::time::Instant::now();
    let peer = peer_addr(&parts.extensions);
    let credentials = credentials(&parts.headers).ok();
    let begin = |mut request: CallRequest| {
        if let Some(credentials) = &credentials {
            request = request.credentials(credentials.clone());
        }
        app.server().begin(request)
    };
    // A body over the limit is recorded by what its start names, as on `/mcp`.
    let mut start = Vec::new();
    let body =
        match read_body_keeping_start(body, &parts.headers, &app.options, Some(&mut start)).await {
            Ok(bytes) => bytes,
            Err(_) => return unread_body(app, parts, err, &start, arrived).await,
        };
    let mut principal = None;
    let mut batch = Batch::read(&body);
    let answer = if let Some(call) = ToolsCall::probe(&parts.headers, &body) {
        let mut attempt = first_of(&mut batch, begin(call.request(peer)));
        principal = attempt.authenticate().await.ok();
        call.refuse(attempt, Check::Protocol, err.clone()).await
    } else if let Some(item) = item_request(&body, peer) {
        let mut attempt = first_of(&mut batch, begin(item));
        principal = attempt.authenticate().await.ok();
        attempt.refuse(Check::Protocol, err.clone()).await
    } else if carries == Carries::Any {
        // No call in it, so no batch either: recorded as a body nobody could read.
        return unread_body(app, parts, err, &[], arrived).await;
    } else {
        err.clone()
    };
    refuse_rest_of_batch(
        app,
        batch,
        peer,
        principal.as_ref(),
        Some((Check::Protocol, &err)),
        &answer,
    )
    .await;
    match replaces_the_answer(&answer) {
        // (With its `Retry-After`.)
        true => app.refusal(&parts.headers, &answer, None),
        false => json_error(&answer),
    }
}

/// What a path no route took looks like, read as a proxy in front might normalize it
/// (percent-escapes decoded, repeated slashes merged, dot segments resolved, `tools` and
/// `mcp` in any case).
#[derive(Debug, PartialEq, Eq)]
enum Unrouted {
    /// `/tools/{name}` so read: a call of `name`.
    Tool(String),
    /// `/mcp`, `/tools` or below them otherwise: one of ours.
    Ours,
    /// Anything else.
    Other,
}

impl Unrouted {
    fn of(path: &str) -> Unrouted {
        // Decoded first, so that an escaped slash or dot separates and resolves as the
        // plain one does; `\` taken for `/`, and `;…` parameters dropped, as some servers
        // behind a proxy read them.
        let path = percent_encoding::percent_decode_str(path)
            .decode_utf8_lossy()
            .replace('\\', "/");
        let mut segments: Vec<&str> = Vec::new();
        for segment in path.split('/') {
            let segment = segment.split(';').next().unwrap_or_default();
            match segment {
                "" | "." => {}
                ".." => {
                    segments.pop();
                }
                segment => segments.push(segment),
            }
        }
        match segments.as_slice() {
            [first, name] if first.eq_ignore_ascii_case("tools") => {
                Unrouted::Tool((*name).to_owned())
            }
            [first, ..]
                if first.eq_ignore_ascii_case("tools") || first.eq_ignore_ascii_case("mcp") =>
            {
                Unrouted::Ours
            }
            _ => Unrouted::Other,
        }
    }
}

/// A request refused for its path (404, no route) or its method (405) that may carry a
/// call (one that declares a body, whatever its method), so that no variant of a call a
/// proxy in front could take for one (`//tools/delete_issue`, `/Tools/…`,
/// `/tools%2Fdelete_issue`, `/%6dcp`, `PUT /tools/delete_issue`, `PATCH /mcp`) is refused
/// unrecorded (by the Host/Origin guard too, which hands such requests here):
/// a path that reads as `/tools/{name}` is a call of that tool; a body that carries a call
/// (or a read, a prompt, a completion) is that call; any other body sent to `/mcp` or
/// `/tools` is a call of a tool nobody can know. A request elsewhere carrying no call,
/// and one without a body, are answered unrecorded.
pub(crate) async fn refused_unrouted(app: &App, request: Request, err: ToolError) -> Response {
    let (parts, body) = request.into_parts();
    if !declares_body(&parts.headers) {
        return json_error(&err);
    }
    match Unrouted::of(parts.uri.path()) {
        Unrouted::Tool(name) => refuse_named(app, &parts, name, err).await,
        Unrouted::Ours => refuse_what_the_body_carries(app, &parts, body, err, Carries::Any).await,
        Unrouted::Other => {
            refuse_what_the_body_carries(app, &parts, body, err, Carries::Calls).await
        }
    }
}

/// Whether a request declares a body (chunked, or a length other than 0).
fn declares_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0")
}

/// A batch refused whole (or messages one after the other): the calls after the one
/// recorded first, how many more it holds of each kind (`probe::rest_of_batch_read`), and,
/// once its first call went through the rate ([`first_of`]), what the rate said of it.
struct Batch {
    rest: Vec<CallRequest>,
    more: probe::Counts,
    unread: bool,
    rate: Option<BatchRate>,
}

impl Batch {
    /// `None` when `body` is one message.
    fn read(body: &[u8]) -> Option<Batch> {
        // A batch, or messages one after the other (which no single JSON value reads).
        if !body.trim_ascii_start().starts_with(b"[")
            && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
        {
            return None;
        }
        let (rest, more, unread) = probe::rest_of_batch_read(body);
        Some(Batch {
            rest,
            more,
            unread,
            rate: None,
        })
    }
}

/// `attempt`, the first call's of the body `batch` was read from, made to pay its rate
/// for every record the body's refusal writes when it is a batch.
fn first_of(batch: &mut Option<Batch>, mut attempt: Attempt) -> Attempt {
    if let Some(batch) = batch {
        let records = 1 + batch.rest.len() + batch.more.by_kind().count();
        batch.rate = Some(attempt.first_of_batch(records as u64));
    }
    attempt
}

/// The records of the calls of a batch after its first (whose attempt the gate began),
/// refused with the request as a whole: by `check` and `err` (the gate's refusal), or as
/// not dispatched (`None`: the MCP layer refused the batch), under the status `answered`
/// (the first's answer). At most [`probe::MAX_BATCH_RECORDS`] in all, and one more that
/// counts the rest; with the first call through its rate, recorded with it, or counted
/// with it. Nothing when `batch` is `None` (one message).
async fn refuse_rest_of_batch(
    app: &App,
    batch: Option<Batch>,
    peer: Option<IpAddr>,
    principal: Option<&Arc<Principal>>,
    refusal: Option<(Check, &ToolError)>,
    answered: &ToolError,
) {
    let Some(Batch {
        rest,
        more,
        unread,
        rate,
    }) = batch
    else {
        return;
    };
    let not_dispatched = |more: u64| {
        let counted = if more > 0 {
            format!("; the batch held {more} more calls, not recorded one by one")
        } else {
            String::new()
        };
        ToolError::new(
            answered.status(),
            "not_dispatched",
            format!("the request was refused before the tool was called{counted}"),
        )
    };
    let each = rest.into_iter().map(|request| {
        let (check, err) = match refusal {
            Some((check, err)) => (check, err.clone()),
            None => (Check::Protocol, not_dispatched(0)),
        };
        (request, Some(check), err, None)
    });
    // One record per kind counted (the reads of the rest as reads), the count in its
    // arguments too, for whoever reads the trail.
    let counted = more.by_kind().map(|(kind, more)| {
        let account = probe::count_of_the_rest(more, unread);
        (
            probe::count_request(kind),
            Some(Check::Protocol),
            not_dispatched(more),
            Some(account),
        )
    });
    for (request, check, err, account) in each.chain(counted) {
        let mut request = request.transport(Transport::StreamableHttp);
        if let Some(peer) = peer {
            request = request.peer_addr(peer);
        }
        let mut attempt = app.server().begin(request);
        if let Some(principal) = principal {
            attempt.authenticated(Arc::clone(principal));
        }
        if let Some(account) = account {
            attempt.account(account);
        }
        // Through the rate with the batch's first call: recorded, or counted, with it.
        if let Some(rate) = &rate {
            attempt.rest_of_batch(rate);
        }
        attempt.refuse(check.unwrap_or(Check::Protocol), err).await;
    }
}

/// A `/mcp` body of a verified principal, refused whole by the gate.
struct Whole<'a> {
    body: &'a [u8],
    peer: Option<IpAddr>,
    principal: &'a Arc<Principal>,
}

impl Whole<'_> {
    /// Refuse the body with `err` at `check`: its call (`call`, begun as `attempt`), else
    /// its read, prompt or completion (`item`), recorded with `err`, and every other one it
    /// carries recorded as not dispatched, under the same status. Returns the answer's
    /// error.
    async fn refuse(
        &self,
        app: &App,
        call: Option<&ToolsCall<'_>>,
        attempt: Option<Attempt>,
        item: Option<CallRequest>,
        check: Check,
        err: ToolError,
    ) -> ToolError {
        let mut batch = Batch::read(self.body);
        let err = match (call, attempt, item) {
            (Some(call), Some(attempt), _) => {
                call.refuse(first_of(&mut batch, attempt), check, err).await
            }
            (_, _, Some(item)) => {
                let mut attempt = first_of(&mut batch, app.server().begin(item));
                attempt.authenticated(Arc::clone(self.principal));
                attempt.refuse(check, err).await
            }
            _ => err,
        };
        let (peer, principal) = (self.peer, Some(self.principal));
        refuse_rest_of_batch(app, batch, peer, principal, None, &err).await;
        err
    }
}

/// In front of `/mcp`: the body limit, authentication (401) and, for a `tools/call`,
/// the scope check (403). A `tools/call` begins its [`Attempt`] here: a refusal ends it
/// here, else it travels in the request's extensions to the MCP handler, with the
/// verified principal and the scope verdict.
///
/// Every refusal's future is boxed where it is awaited: a future holds room for the
/// largest it awaits, and each request's is moved into its box whole, so the refusals
/// (3–5 KB each) are kept out of the size of every request's future.
async fn mcp_gate(app: &App, request: Request, mcp: &McpService) -> Response {
    // When the request arrived: a body refused for its size or its pace (after up to
    // 30 s) is recorded as arriving then, with its real duration.
    let arrived = std::time::Instant::now();
    let (mut parts, body) = request.into_parts();
    let is_post = parts.method == Method::POST;
    let body = if is_post {
        // What was read of a body refused for its size or slowness names what it was.
        let mut start = Vec::new();
        match read_body_keeping_start(body, &parts.headers, &app.options, Some(&mut start)).await {
            // Not parsed: what its start says names it, as for a body over the limit.
            Ok(bytes) if let Some(err) = too_many_values(&bytes, &app.options) => {
                return Box::pin(unread_body(app, &parts, err, &bytes, arrived)).await;
            }
            Ok(bytes) => bytes,
            Err(err) => return Box::pin(unread_body(app, &parts, err, &start, arrived)).await,
        }
    } else {
        Bytes::new()
    };
    let call = is_post
        .then(|| ToolsCall::probe(&parts.headers, &body))
        .flatten();
    let peer = peer_addr(&parts.extensions);
    let mut attempt = call.as_ref().map(|call| call.begin(app.server(), peer));

    let item = || {
        (is_post && call.is_none())
            .then(|| item_request(&body, peer))
            .flatten()
    };
    // Read once: verified here, carried to the attempt and the MCP layer, which verify
    // them again later (after a person's answer, before a subscription's update).
    let presented = credentials(&parts.headers);
    let verified = match &presented {
        Ok(presented) => app.server().authenticate(presented).await,
        Err(err) => Err(err.clone()),
    };
    let presented = presented.unwrap_or_default();
    let principal = match verified {
        Ok(principal) => principal,
        Err(err) => {
            let refusal = err.clone();
            let mut batch = Batch::read(&body);
            let err = match (&call, attempt, item()) {
                (Some(call), Some(attempt), _) => {
                    let attempt = first_of(&mut batch, attempt);
                    Box::pin(call.refuse(attempt, Check::Authenticate, err)).await
                }
                (_, _, Some(item)) => {
                    let attempt = first_of(&mut batch, app.server().begin(item));
                    Box::pin(attempt.refuse(Check::Authenticate, err)).await
                }
                _ => err,
            };
            Box::pin(refuse_rest_of_batch(
                app,
                batch,
                peer,
                None,
                Some((Check::Authenticate, &refusal)),
                &err,
            ))
            .await;
            return app.refusal(&parts.headers, &err, None);
        }
    };

    // A session is used only by the principal that opened it; to anyone else it does
    // not exist: the request goes on as one naming a session that never existed (a
    // random id rmcp never opened), through the same checks to the same answer and the
    // same record, so that nothing tells the two apart, and the real session is never
    // touched.
    let mut session = parts
        .headers
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(attempt) = &mut attempt {
        attempt.authenticated(Arc::clone(&principal));
        // Verified from them a moment ago; again if a person is asked.
        attempt.presented(presented.clone());
    }
    let foreign = session
        .as_deref()
        .is_some_and(|id| !app.inner.sessions.allows(id, &principal));
    if foreign {
        tracing::warn!(subject = %principal, "refused a request naming another principal's MCP session: answered as a session that never existed");
        let unknown = unknown_session_id();
        session = unknown.to_str().ok().map(str::to_owned);
        parts.headers.insert(SESSION_ID, unknown);
    }

    // What refuses the body whole, past this point, for a reason of its own.
    let whole = Whole {
        body: &body,
        peer,
        principal: &principal,
    };

    // The principal's rate first: past it, a body that carries a call (read, prompt,
    // completion) is answered 429 and its calls counted, whatever else is wrong with it,
    // rather than answered by the MCP layer's protocol error while counted as a 429.
    if let Some(err) = app.server().past_the_rate(Some(&principal), 1)
        && let item = item()
        && (attempt.is_some() || item.is_some())
    {
        let pending = attempt.take();
        let err =
            Box::pin(whole.refuse(app, call.as_ref(), pending, item, Check::RateLimit, err)).await;
        return app.refusal(&parts.headers, &err, None);
    }

    // An `initialize` is kept for the session's life: bounded (see the constant). The
    // body is refused whole, and every call, read, prompt or completion it carries beside
    // the `initialize` is recorded as refused with it.
    if is_post
        && (body.len() > crate::mcp::MAX_INITIALIZE_BYTES
            // Small values, each kept parsed at a cost of its own: counted only for a
            // body that is no call and names the method (a call's is not kept).
            || (call.is_none()
                && body.len() > crate::mcp::MAX_INITIALIZE_VALUES
                && crate::mcp::more_values_than(&body, crate::mcp::MAX_INITIALIZE_VALUES)))
        && probe::may_be_method(&body, "initialize")
    {
        let err = ToolError::new(
            Status::PayloadTooLarge,
            "body_too_large",
            crate::mcp::initialize_too_large(),
        );
        let err = Box::pin(whole.refuse(
            app,
            call.as_ref(),
            attempt.take(),
            item(),
            Check::Protocol,
            err,
        ))
        .await;
        return json_error(&err);
    }

    // One request in flight per id in a session: a second under the same id is refused,
    // and recorded when it is a call.
    let id_held = match (&session, is_post) {
        (Some(id), true) => match call
            .as_ref()
            .and_then(|call| call.request_key.clone())
            .unwrap_or_else(|| request_id(&body))
        {
            Some(request) => match app.inner.request_ids.enter(id, request) {
                Some(held) => Some(held),
                None => {
                    let err = ToolError::new(
                        Status::Conflict,
                        "duplicate_request_id",
                        "a request of this session with the same JSON-RPC id is still in \
                         flight: ids must be unique among a session's requests in flight",
                    );
                    let err = Box::pin(whole.refuse(
                        app,
                        call.as_ref(),
                        attempt.take(),
                        item(),
                        Check::Protocol,
                        err,
                    ))
                    .await;
                    return app.refusal(&parts.headers, &err, None);
                }
            },
            None => None,
        },
        _ => None,
    };

    // The scope check, to answer a real 403 that makes clients step up. A principal
    // with every scope any tool requires passes it without looking. Unknown and hidden
    // tools go on to the MCP handler, which answers them as tool errors.
    if let (Some(call), Some(mut pending)) = (&call, attempt.take()) {
        if !principal.has_scopes(&app.inner.every_scope)
            && let Err((Check::Scope, err)) = pending.authorize()
        {
            let err =
                Box::pin(whole.refuse(app, Some(call), Some(pending), None, Check::Scope, err))
                    .await;
            return app.refusal(&parts.headers, &err, Some(&call.tool));
        }
        attempt = Some(pending);
    }

    // The read, prompt or completion the body holds, if it is not a call (read once).
    let item_request = item();
    // A request without an id is a notification: JSON-RPC never answers one and rmcp
    // drops it, so a call (or a read, prompt, completion) would be accepted (202) and never
    // run. Streamable HTTP lets a server refuse a notification it does not accept: 400, as
    // its record says, and every call behind it in the body is recorded too.
    let idless = match &call {
        Some(call) => call.id.is_none(),
        None => item_request.is_some(),
    };
    if idless
        && !body.trim_ascii_start().starts_with(b"[")
        // A body that cannot be UTF-8 JSON (UTF-16, say, whose id no reading here finds)
        // is no notification: the MCP layer answers it with a parse error, recorded.
        && may_be_json_text(&body)
        && let top = probe::top_level(&body)
        && match Head::of(&body) {
            Some(head) => matches!(head.id, HeadId::Absent),
            None => top.id.is_none(),
        }
        && (call.is_none() || probe::may_be_method(&body, "tools/call"))
    {
        let err = ToolError::bad_request(
            "not_dispatched",
            "a request without an `id` is a notification, which is never answered: a call, \
             read, prompt or completion needs an id",
        );
        // A call is refused as its tool's (its `WWW-Authenticate`, say), anything else
        // as the request's.
        let tool = call
            .as_ref()
            .filter(|_| attempt.is_some())
            .map(|call| call.tool.as_str());
        let err = Box::pin(whole.refuse(
            app,
            call.as_ref(),
            attempt.take(),
            item_request,
            Check::Protocol,
            err,
        ))
        .await;
        return app.refusal(&parts.headers, &err, tool);
    }

    let is_delete = parts.method == Method::DELETE;
    parts
        .extensions
        .insert(VerifiedPrincipal(Arc::clone(&principal), presented));
    let pending = attempt.map(|mut a| {
        // The probe kept the arguments' text: no second read of the body.
        let repeated = match call.as_ref().and_then(|c| c.arguments) {
            Some(raw) => probe::repeated_key(raw.get().as_bytes()),
            None => {
                probe::repeated_argument_key(&body).or_else(|| probe::repeated_params_key(&body))
            }
        };
        a.arguments_repeat(repeated);
        a.answer_repeats(probe::repeated_input_responses_key(&body));
        PendingAttempt::new(a, body.clone(), ToolsCall::arguments_of)
    });
    if let Some(pending) = &pending {
        parts.extensions.insert(pending.clone());
    }
    // A resource read, prompt or completion the MCP layer might refuse before the handler
    // begins its attempt (malformed params, a batch): recorded then, as a call would be.
    let pending_item = item_request.map(|item| {
        let mut attempt = app.server().begin(item);
        attempt.authenticated(Arc::clone(&principal));
        PendingAttempt::new(attempt, body.clone(), item_arguments)
    });
    if let Some(pending) = &pending_item {
        parts.extensions.insert(PendingItem(pending.clone()));
    }
    let id_held = id_held.map(Arc::new);
    if let Some(held) = &id_held {
        parts.extensions.insert(HeldId(Arc::clone(held)));
    }
    // (`Bytes` clones share the buffer: the probe's borrowed arguments stay readable.)
    let json_body = is_json_content(&parts.headers);
    // A client's answer to the server's request (a person's answer to a confirmation) that
    // repeats a key goes on as an error: which of its values is meant cannot be known.
    let answer = pending.is_none() && pending_item.is_none();
    let handed = match answer.then(|| ambiguous_answer(&body)).flatten() {
        Some(error) => Bytes::from(error),
        None => body.clone(),
    };
    // rmcp ends a session it does not know as if it were there (202): a `DELETE` of an
    // unknown, ended or (read above as unknown) foreign session gets the 404 the
    // protocol gives any request naming a session that is no more.
    if is_delete
        && let Some(id) = &session
        && !mcp.has_session(id).await
    {
        // (An owner left by a session that ended without its DELETE goes with it.)
        if !mcp.is_open(id) {
            app.inner.sessions.closed(id);
        }
        return json_error(&ToolError::new(
            Status::NotFound,
            "session_not_found",
            "no such session",
        ));
    }
    let response = mcp
        .handle(Request::from_parts(parts, Body::from(handed)))
        .await;
    let response = unreadable_body(json_body, &body, response);
    // The MCP layer answered without handing the call to the handler (a malformed
    // request, headers that contradict the body): the attempt ends here, recorded
    // before the answer leaves.
    let refused_with = refused_status(response.status().as_u16());
    // Another principal's session, refused as one that never existed (404): the record
    // says whose it was not.
    let not_theirs = (foreign && refused_with == Status::NotFound)
        .then(|| ToolError::new(Status::NotFound, "session_not_found", "no such session"));
    let not_theirs = not_theirs.as_ref().map(|err| (Check::Session, err));
    // The refusal recorded: the session's, else the MCP layer's (`before`: what it did
    // not do).
    let refusal = |before: &str| match not_theirs {
        Some((check, err)) => (check, err.clone()),
        None => (
            Check::Protocol,
            ToolError::new(
                refused_with,
                "not_dispatched",
                format!("the MCP layer refused the request before {before}"),
            ),
        ),
    };
    // Its call, else its read, prompt or completion, which the MCP layer never took up.
    let abandoned = match (&call, pending.as_ref().and_then(PendingAttempt::abandoned)) {
        (Some(call), Some(attempt)) => Some((attempt, Some(call), "the tool was called")),
        _ => pending_item
            .as_ref()
            .and_then(PendingAttempt::abandoned)
            .map(|attempt| (attempt, None, "it was read")),
    };
    if let Some((attempt, call, before)) = abandoned {
        let (check, err) = refusal(before);
        let refused = err.clone();
        let mut batch = Batch::read(&body);
        let attempt = first_of(&mut batch, attempt);
        let err = match call {
            Some(call) => Box::pin(call.refuse(attempt, check, err)).await,
            None => Box::pin(attempt.refuse(check, err)).await,
        };
        let answered = replaces_the_answer(&err).then_some(&err);
        Box::pin(refuse_rest_of_batch(
            app,
            batch,
            peer,
            Some(&principal),
            not_theirs,
            answered.unwrap_or(&refused),
        ))
        .await;
        if let Some(err) = answered {
            return app.refusal(&HeaderMap::new(), err, None);
        }
    }
    match &session {
        None => {
            if let Some(opened) = response
                .headers()
                .get(SESSION_ID)
                .and_then(|v| v.to_str().ok())
                && let Some(evicted) = app
                    .inner
                    .sessions
                    .opened(opened, &principal, |id| mcp.is_open(id))
            {
                tracing::warn!(
                    subject = %principal,
                    cap = app.options.max_sessions_per_principal,
                    "closed a principal's least recently used MCP session: it opened one past its cap"
                );
                Box::pin(mcp.close_session(&evicted)).await;
            }
        }
        Some(id) => {
            // The owner goes with the session, never before: rmcp also answers 404 for a
            // method it does not know on a session that is open (a 2026-07-28 request),
            // and an ownerless session would be anyone's.
            let status = response.status();
            let ended = status == StatusCode::NOT_FOUND || (is_delete && status.is_success());
            if ended && !mcp.is_open(id) {
                app.inner.sessions.closed(id);
            }
        }
    }
    held_by_body(as_answered(is_delete, response), id_held)
}

/// Whether the record of a request the MCP layer refused says what to answer in place of
/// the MCP layer's answer: the trail could not take it (503), or it was past its
/// principal's rate and only counted (429, as every such call is answered).
fn replaces_the_answer(recorded: &ToolError) -> bool {
    matches!(
        (recorded.status(), recorded.reason()),
        (_, "audit_unavailable") | (Status::TooManyRequests, "rate_limited")
    )
}

/// `response`, whose body keeps `held` (a guard) until it is done with: an SSE answer is
/// sent after its head, so the request is not over when the handler returns.
fn held_by_body<T: Send + 'static>(response: Response, held: Option<T>) -> Response {
    match held {
        Some(held) => response.map(|body| {
            Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
                let _held = &held;
                frame
            }))
        }),
        None => response,
    }
}

/// Whether `body` may be JSON text: UTF-8, without a NUL byte (which JSON allows nowhere
/// unescaped, and which UTF-16 or UTF-32 text of ASCII characters is full of).
fn may_be_json_text(body: &[u8]) -> bool {
    !body.contains(&0) && std::str::from_utf8(body).is_ok()
}

/// Whether the request says its body is JSON (`Content-Type: application/json`, with any
/// parameters), as rmcp checks it.
fn is_json_content(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case("application/json")
        })
}

/// rmcp answers a JSON body it cannot read as one JSON-RPC message with 415 and a message
/// of its own ("fail to deserialize request body …"), though the media type was right.
/// The protocol's answer is 400 with a JSON-RPC error without an id: a parse error for a
/// body that is not JSON, an invalid request for JSON that is not one message (a batch,
/// which the protocol dropped in 2025-06-18, or anything else).
fn unreadable_body(json_body: bool, body: &[u8], response: Response) -> Response {
    if !json_body || response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let (code, message) = match serde_json::from_slice::<serde_json::Value>(body) {
        // Nested deeper than a reader follows (serde_json's 128 levels, which rmcp's
        // reading of the message keeps): said so only when that is why.
        Err(err) if err.to_string().starts_with("recursion limit exceeded") => (
            -32700,
            "Parse error: the body nests arrays and objects more than 128 levels deep".to_owned(),
        ),
        // Else what serde_json says, as stdio says it (a lone surrogate escape, bytes that
        // are not UTF-8, a number out of range, a body in UTF-16…).
        Err(err) => (
            -32700,
            format!(
                "Parse error: the body is not JSON this server can read: {}",
                crate::audit::bounded(&err.to_string(), 300)
            ),
        ),
        Ok(_) if body.trim_ascii_start().starts_with(b"[") => (
            -32600,
            "Invalid Request: send one JSON-RPC message per request (batches are not supported)"
                .to_owned(),
        ),
        Ok(_) => (
            -32600,
            "Invalid Request: the body is not a JSON-RPC request, notification or response"
                .to_owned(),
        ),
    };
    let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (StatusCode::BAD_REQUEST, axum::Json(error)).into_response()
}

/// rmcp's answer as the gate gives it: rmcp answers a session's DELETE with 202, where
/// the Python SDK expects 200 or 204.
fn as_answered(is_delete: bool, mut response: Response) -> Response {
    if is_delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// `GET /tools`: the manifest of the tools `tools/list` shows this caller.
pub(crate) async fn list_tools(State(app): State<App>, headers: HeaderMap) -> Response {
    let principal = match app.authenticate(&headers).await {
        Ok(principal) => principal,
        Err(err) => return app.refusal(&headers, &err, None),
    };
    let body = match app.server().listing().subset(Some(&principal)) {
        None => app
            .inner
            .full_manifest
            .get_or_init(|| {
                let server = app.server();
                Bytes::from(server.listing().manifest(server.registry()).to_owned())
            })
            .clone(),
        Some(subset) => {
            let server = app.server();
            Bytes::from(server.listing().manifest_of(server.registry(), &subset))
        }
    };
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `GET /resources`: `{"resources": [...], "resourceTemplates": [...]}`, those this
/// caller's scopes allow (the same objects as `resources/list` and
/// `resources/templates/list`).
pub(crate) async fn list_resources(State(app): State<App>, headers: HeaderMap) -> Response {
    let principal = match app.authenticate(&headers).await {
        Ok(principal) => principal,
        Err(err) => return app.refusal(&headers, &err, None),
    };
    let items = crate::pipeline::listing::items_json(app.server().registry(), Some(&principal));
    axum::Json(serde_json::json!({
        "resources": items.resources,
        "resourceTemplates": items.templates,
    }))
    .into_response()
}

/// `GET /prompts`: `{"prompts": [...]}`, those this caller's scopes allow (the same
/// objects as `prompts/list`).
pub(crate) async fn list_prompts(State(app): State<App>, headers: HeaderMap) -> Response {
    let principal = match app.authenticate(&headers).await {
        Ok(principal) => principal,
        Err(err) => return app.refusal(&headers, &err, None),
    };
    let items = crate::pipeline::listing::items_json(app.server().registry(), Some(&principal));
    axum::Json(serde_json::json!({ "prompts": items.prompts })).into_response()
}

/// A `resources/read`, `prompts/get` or `completion/complete` the gate refuses before
/// the MCP layer sees it (no valid token, another principal's session): begun and
/// refused here, so that it leaves its one record like any other refused read. One it
/// lets through is begun by the MCP handler.
fn item_request(body: &[u8], peer: Option<IpAddr>) -> Option<CallRequest> {
    let mut request = probe::item_request(body)?.transport(Transport::StreamableHttp);
    if let Some(peer) = peer {
        request = request.peer_addr(peer);
    }
    Some(request)
}

/// The arguments of the prompt `body` gets, for the record of an attempt nobody took up.
fn item_arguments(body: &[u8]) -> Option<Value> {
    item_request(body, None)?.arguments
}

/// `POST /tools/{name}`: a plain JSON call. The body is the arguments (empty for none);
/// the answer is the structured output, or `{"content": [...]}` for content results;
/// a refusal has the error's status and `{"error", "reason", "status"}`. The path names
/// the tool, so the attempt begins before anything else is read.
pub(crate) async fn call_tool(
    State(app): State<App>,
    uri: axum::http::Uri,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Body,
) -> Response {
    call_named(app, path_tool(uri.path()), extensions, headers, body).await
}

async fn call_named(
    app: App,
    tool: String,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // In flight until answered: a shutdown's drain waits for it as for `/mcp` calls.
    let _in_flight = app.inner.in_flight.enter();
    let mut request = CallRequest::new(tool, None).transport(Transport::PlainHttp);
    if let Some(peer) = peer_addr(&extensions) {
        request = request.peer_addr(peer);
    }
    let mut request = with_rest_request_id(request, &headers);
    let credentials = credentials(&headers);
    if let Ok(credentials) = &credentials {
        request = request.credentials(credentials.clone());
    }
    let mut attempt = app.server().begin(request);
    let tool = attempt.tool().to_owned();
    let refused = |err: ToolError| app.refusal(&headers, &err, Some(&tool));

    let body = match read_body(body, &headers, &app.options)
        .await
        .and_then(|bytes| match too_many_values(&bytes, &app.options) {
            Some(err) => Err(err),
            None => Ok(bytes),
        }) {
        Ok(bytes) => bytes,
        Err(err) => {
            // For the record only (a caller without a valid token counts against its
            // peer's rate of recorded refusals): the refusal is the body's.
            let _ = attempt.authenticate().await;
            return refused(attempt.refuse(Check::Validate, err).await);
        }
    };
    let arguments = serde_json::from_slice::<Value>(&body);
    if let Err(err) = credentials {
        attempt.set_arguments(arguments.ok());
        return refused(attempt.refuse(Check::Authenticate, err).await);
    }
    let arguments = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match arguments {
            Ok(value) => Some(value),
            Err(parse) => {
                // Not JSON: refused after the checks that come before the arguments, as
                // a body that is JSON would be: a caller without a valid token still
                // learns only that (401), an unknown or hidden tool is 404, a scope the
                // caller lacks 403.
                let err = match attempt.authenticate().await {
                    Err(err) => attempt.refuse(Check::Authenticate, err).await,
                    Ok(_) => match attempt.authorize() {
                        Err((check, err)) => attempt.refuse(check, err).await,
                        Ok(()) => {
                            let err = ToolError::invalid_arguments(
                                "",
                                format!("the body is not JSON: {parse}"),
                            );
                            attempt.refuse(Check::Validate, err).await
                        }
                    },
                };
                return refused(err);
            }
        }
    };
    attempt.arguments_repeat(probe::repeated_key(&body));
    attempt.set_arguments(arguments);
    let response = attempt.run().await;
    match response.result() {
        Ok(output) => {
            let body = match output.structured_value() {
                Some(value) => value.clone(),
                None => {
                    let mut result = output.to_json();
                    if let Value::Object(map) = &mut result {
                        map.remove("isError");
                    }
                    result
                }
            };
            (StatusCode::OK, axum::Json(body)).into_response()
        }
        Err(err) => refused(err.clone()),
    }
}

/// The tool a `/tools/{name}` path names (its last segment), percent-decoded; a name
/// that is not UTF-8 once decoded keeps U+FFFD for each bad byte: no such tool, but a
/// call all the same, answered and recorded as one.
fn path_tool(path: &str) -> String {
    decoded(path.rsplit('/').next().unwrap_or_default())
}

/// A tool's name as a path gives it: percent-decoded, bytes that are not UTF-8 replaced.
fn decoded(part: &str) -> String {
    percent_encoding::percent_decode_str(part)
        .decode_utf8_lossy()
        .into_owned()
}

/// `GET /.well-known/oauth-protected-resource[/…]`: RFC 9728 metadata.
pub(crate) async fn resource_metadata(State(app): State<App>, headers: HeaderMap) -> Response {
    let urls = app.resource_urls(&headers);
    // The scopes of what this server serves: in read-only mode, none only its hidden
    // tools use (a client would ask for a scope nothing here accepts).
    let listing = app.server().listing();
    let scopes = app
        .server()
        .registry()
        .scopes_served(|i| listing.is_visible(i));
    let mut metadata = json!({
        "resource": urls.resource,
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": app.server().name(),
    });
    // RFC 9728 makes the list optional; an empty one is rejected by clients (the Python
    // SDK among them), so a server without an authorization server leaves it out.
    if !app.options.authorization_servers.is_empty() {
        metadata["authorization_servers"] = json!(app.options.authorization_servers);
    }
    axum::Json(metadata).into_response()
}

/// The 404 of a path no route takes, which names the routes there are (a client that
/// asked `/mcp/` or `/sse` learns where MCP is).
const NO_SUCH_ROUTE: &str = "no such route: this server answers `/mcp` (MCP over Streamable \
                             HTTP), `GET /tools`, `POST /tools/{name}`, `GET /resources`, \
                             `GET /prompts` and `GET /.well-known/oauth-protected-resource`";

/// Any other route: 404. A `POST` under `/tools/` that is not `/tools/{name}` (a
/// trailing slash, an empty or a dot segment: `/tools/delete_issue/`,
/// `/tools//delete_issue`, `/tools/./delete_issue`) is a call of a tool named by all that
/// follows `/tools/`, as sent (percent-decoded, never resolved to another tool's name):
/// refused as any unknown tool is, and recorded. Any other request that may carry a call
/// is recorded as [`refused_unrouted`] says.
pub(crate) async fn not_found(State(app): State<App>, request: Request) -> Response {
    match request.uri().path().strip_prefix("/tools/") {
        Some(rest) if request.method() == Method::POST => {
            let name = decoded(rest);
            let (parts, body) = request.into_parts();
            call_named(app, name, parts.extensions, parts.headers, body).await
        }
        _ => refused_unrouted(&app, request, ToolError::not_found(NO_SUCH_ROUTE)).await,
    }
}

/// The refusal of a route that exists, asked with a method it does not take: 405.
pub(crate) fn method_not_allowed_error(method: &Method) -> ToolError {
    ToolError::new(
        Status::MethodNotAllowed,
        "method_not_allowed",
        format!("this route does not take {method}"),
    )
}

/// A route that exists, with a method it does not take: 405 in the JSON of every other
/// error (axum adds `Allow`), recorded as [`refused_unrouted`] says.
pub(crate) async fn method_not_allowed(State(app): State<App>, request: Request) -> Response {
    let err = method_not_allowed_error(request.method());
    refused_unrouted(&app, request, err).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_no_route_takes_is_read_as_a_proxy_might_normalize_it() {
        for (path, read) in [
            (
                "//tools/delete_issue",
                Unrouted::Tool("delete_issue".into()),
            ),
            (
                "/TOOLS/delete%5Fissue",
                Unrouted::Tool("delete_issue".into()),
            ),
            ("/%74ools//x/", Unrouted::Tool("x".into())),
            ("/tools/a/b", Unrouted::Ours),
            ("/tools", Unrouted::Ours),
            ("/%6dcp", Unrouted::Ours),
            (
                "/Mcp/../tools/delete_issue",
                Unrouted::Tool("delete_issue".into()),
            ),
            (
                "/tools%2Fdelete_issue",
                Unrouted::Tool("delete_issue".into()),
            ),
            (
                "/x/%2e%2e/tools/delete_issue",
                Unrouted::Tool("delete_issue".into()),
            ),
            (
                "/./tools;a/delete_issue",
                Unrouted::Tool("delete_issue".into()),
            ),
            (
                "/tools\\delete_issue",
                Unrouted::Tool("delete_issue".into()),
            ),
            ("/mcp%2F", Unrouted::Ours),
            ("/tools/delete%2Fissue", Unrouted::Ours),
            ("/", Unrouted::Other),
            ("/wp-login.php", Unrouted::Other),
            ("/.well-known/oauth-protected-resource/mcp", Unrouted::Other),
        ] {
            assert_eq!(Unrouted::of(path), read, "{path}");
        }
    }

    #[test]
    fn a_request_the_mcp_layer_refused_is_recorded_with_the_status_the_client_got() {
        assert_eq!(refused_status(406), Status::NotAcceptable);
        assert_eq!(refused_status(404), Status::NotFound);
        // rmcp's "Session service terminated": recorded 400 before.
        assert_eq!(refused_status(500), Status::Internal);
        assert_eq!(refused_status(503), Status::Unavailable);
        // A JSON-RPC error in a 200 answer, and a status the records do not know.
        assert_eq!(refused_status(200), Status::BadRequest);
        assert_eq!(refused_status(418), Status::BadRequest);
    }

    #[test]
    fn a_strictly_read_call_keys_its_id_as_a_second_reading_would() {
        let headers = HeaderMap::new();
        let call = |id: &str| {
            format!(
                r#"{{"jsonrpc":"2.0",{id}"method":"tools/call","params":{{"name":"t","arguments":{{"id":9}}}}}}"#
            )
        };
        let mut keyed = 0;
        for id in [
            r#""id":1,"#,
            r#""id":"1","#,
            r#""id" : "a\"b","#,
            r#""id":1e2,"#,
            r#""id":-0,"#,
            r#""id":1.5,"#,
            r#""id":18446744073709551615,"#,
            r#""id":null,"#,
            r#""id":true,"#,
            r#""id":{"n":1},"#,
            "",
        ] {
            let body = call(id);
            let probed = ToolsCall::probe(&headers, body.as_bytes()).expect("a tools/call");
            let key = probed.request_key.expect("read strictly");
            assert_eq!(key, request_id(body.as_bytes()), "{body}");
            keyed += usize::from(key.is_some());
        }
        assert_eq!(keyed, 7);
        // Any request's id as rmcp reads it, escapes decoded.
        for body in [
            r#"{"jsonrpc":"2.0","\u0069d":7,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":7,"m\u0065thod":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"ping","id":7}"#,
        ] {
            assert_eq!(
                request_id(body.as_bytes()).as_deref(),
                Some("n:7"),
                "{body}"
            );
        }
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","id":7}"#), None);
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            None
        );
        // The id after `params`, and read again when the body is not one strict request.
        let after = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"},"id":7}"#;
        let probed = ToolsCall::probe(&headers, after.as_bytes()).expect("a tools/call");
        assert_eq!(probed.request_key, Some(Some("n:7".to_owned())));
        for body in [
            r#"{"id":1,"id":2,"method":"tools/call","params":{"name":"t"}}"#,
            r#"[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t"}}]"#,
        ] {
            let probed = ToolsCall::probe(&headers, body.as_bytes()).expect("a tools/call");
            assert_eq!(probed.request_key, None, "{body}");
        }
    }

    #[test]
    fn metadata_url_inserts_the_well_known_path() {
        let urls = ResourceUrls::for_resource("https://mcp.example.com/mcp");
        assert_eq!(urls.resource, "https://mcp.example.com/mcp");
        assert_eq!(
            urls.metadata,
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        let urls = ResourceUrls::for_resource("https://mcp.example.com/");
        assert_eq!(urls.resource, "https://mcp.example.com");
        assert_eq!(
            urls.metadata,
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
    }

    /// RFC 6750 §3 allows printable ASCII only in `error_description` (%x20-21 /
    /// %x23-5B / %x5D-7E): a message naming the claim `espace_équipe` went out as raw
    /// UTF-8.
    #[test]
    fn a_challenge_parameter_is_printable_ascii() {
        let description = quoted("the token's `espace_équipe` claim is \"x\\y\"\n\u{7f}\u{85}");
        assert_eq!(
            description,
            "the token's `espace_%C3%A9quipe` claim is 'x'y''''"
        );
        assert!(
            description
                .bytes()
                .all(|b| matches!(b, 0x20..=0x21 | 0x23..=0x5b | 0x5d..=0x7e)),
            "{description}"
        );
        assert_eq!(quoted("a:read b:write"), "a:read b:write");
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert!(matches!(credentials(&h), Ok(Credentials::None)));
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert!(matches!(credentials(&h), Ok(Credentials::Bearer(t)) if t == "abc"));
        h.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert!(matches!(credentials(&h), Ok(Credentials::Bearer(t)) if t == "abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(credentials(&h).err().unwrap().reason(), "invalid_token");
        h.insert(header::AUTHORIZATION, "Bearer".parse().unwrap());
        assert_eq!(credentials(&h).err().unwrap().reason(), "invalid_token");
        // Two: which one counts is not guessed.
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        h.append(header::AUTHORIZATION, "Bearer def".parse().unwrap());
        let err = credentials(&h).err().unwrap();
        assert_eq!(err.reason(), "invalid_token");
        assert!(err.message().contains("more than one"), "{err}");
    }

    #[test]
    fn probe_reads_the_body_then_the_header() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a","arguments":{"x":1}}}"#;
        let h = HeaderMap::new();
        let call = ToolsCall::probe(&h, body).unwrap();
        assert_eq!((call.tool.as_str(), call.id.as_deref()), ("a", Some("7")));
        assert_eq!(call.arguments.map(RawValue::get), Some(r#"{"x":1}"#));
        // The body names the tool that runs: a header that names another does not hide it
        // (rmcp refuses the mismatch where the protocol defines the header).
        let mut h = HeaderMap::new();
        h.insert("mcp-name", "b".parse().unwrap());
        assert_eq!(ToolsCall::probe(&h, body).unwrap().tool, "a");
        // Nor a method header that says otherwise.
        h.insert("mcp-method", "tools/list".parse().unwrap());
        assert_eq!(ToolsCall::probe(&h, body).unwrap().tool, "a");
        // The header names the tool of a call whose body names none.
        let nameless = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#;
        assert_eq!(ToolsCall::probe(&h, nameless).unwrap().tool, "b");
        let none = HeaderMap::new();
        assert!(ToolsCall::probe(&none, br#"{"method":"tools/list","id":1}"#).is_none());
        assert!(ToolsCall::probe(&none, b"not json").is_none());
        // The first call of a batch; a batch without one is not a call.
        let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"c"}}]"#;
        let call = ToolsCall::probe(&none, batch).unwrap();
        assert_eq!((call.tool.as_str(), call.id.as_deref()), ("c", Some("2")));
        assert!(ToolsCall::probe(&none, br#"[{"method":"tools/list","id":1}]"#).is_none());
        // A repeated key: the call a lenient reader sees (the last key wins), named as
        // the stdio framing names it; a body that is not JSON-RPC but says tools/call:
        // unknown tool.
        let repeated = br#"{"jsonrpc":"2.0","id":3,"method":"tools/list","method":"tools/call","params":{"name":"d"}}"#;
        let call = ToolsCall::probe(&none, repeated).unwrap();
        assert_eq!((call.tool.as_str(), call.id.as_deref()), ("d", Some("3")));
        // A batch nested in a batch (not JSON-RPC): its first call, however deep.
        let nested = br#"[[{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"f","arguments":{"y":2}}}]]"#;
        let call = ToolsCall::probe(&none, nested).unwrap();
        assert_eq!((call.tool.as_str(), call.id.as_deref()), ("f", Some("8")));
        assert_eq!(ToolsCall::arguments_of(nested), Some(json!({"y": 2})));
        assert!(
            ToolsCall::probe(&none, br#"[[{"jsonrpc":"2.0","id":8,"method":"ping"}]]"#).is_none()
        );
        assert_eq!(
            ToolsCall::probe(&none, b"{tools/call").unwrap().tool,
            UNKNOWN_TOOL
        );
        let mut h = HeaderMap::new();
        h.insert("mcp-method", "tools/call".parse().unwrap());
        assert_eq!(ToolsCall::probe(&h, b"garbage").unwrap().tool, UNKNOWN_TOOL);
        // The method escaped (no `tools/call` in the bytes) behind a repeated key, or with
        // params of the wrong shape: a lenient reader still sees a call.
        // Found by `fuzz/` (gate_probe): a message without a method, which the header
        // calls a `tools/call`, is one; without the header, a response is not.
        let methodless = br#"{"jsonrpc":"2.0","id":4,"werams":{"name":"add_note"}}"#;
        let mut h = HeaderMap::new();
        h.insert("mcp-method", "tools/call".parse().unwrap());
        h.insert("mcp-name", "list_notes".parse().unwrap());
        assert_eq!(ToolsCall::probe(&h, methodless).unwrap().tool, "list_notes");
        assert_eq!(ToolsCall::probe(&h, b"[]").unwrap().tool, "list_notes");
        assert!(ToolsCall::probe(&none, b"[]").is_none());
        let response = br#"{"jsonrpc":"2.0","id":4,"result":{"text":"tools/call"}}"#;
        assert!(ToolsCall::probe(&none, response).is_none());
        // Nor with the header: rmcp takes a response (an elicitation's answer, say) as
        // the answer it is, whatever the headers say, and never as a call.
        assert!(ToolsCall::probe(&h, response).is_none());
        let failed = br#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}"#;
        assert!(ToolsCall::probe(&h, failed).is_none());
        assert!(ToolsCall::probe(&h, &[b"[".as_slice(), response, b"]"].concat()).is_none());
        // Found by `fuzz/` (gate_probe): a "response" that is not UTF-8 throughout (in
        // its result, or in a key the probe skips) is no response rmcp can read.
        for unreadable in [
            b"{\"js\":\"_no\",\"result\":\"res\xff\xff\"}".as_slice(),
            b"{\"js\":\"\xff\xff_no\",\"result\":\"res\"}",
        ] {
            assert!(ToolsCall::probe(&h, unreadable).is_some());
        }
        for (body, tool) in [
            (br#"{"jsonrpc":"2.0","id":4,"method":"tools/list","method":"tools\u002fcall","params":{"name":"e"}}"#.as_slice(), "e"),
            (br#"{"jsonrpc":"2.0","id":5,"method":"tools\/call","params":"e"}"#, UNKNOWN_TOOL),
            (br#"[{"jsonrpc":"2.0","id":6,"method":"tools\/call","params":7}]"#, UNKNOWN_TOOL),
        ] {
            let call = ToolsCall::probe(&none, body);
            assert_eq!(
                call.map(|c| c.tool).as_deref(),
                Some(tool),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // A call without a name.
        let nameless = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}"#;
        assert_eq!(
            ToolsCall::probe(&none, nameless).unwrap().tool,
            UNKNOWN_TOOL
        );
    }
}
