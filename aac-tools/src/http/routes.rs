//! The handlers: the `/mcp` gate (401/403 before MCP), `/tools`, `/tools/{name}` and the
//! protected-resource metadata.

use std::borrow::Cow;
use std::convert::Infallible;
use std::error::Error as _;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use super::HttpOptions;
use super::guard::Guard;
use super::sessions::SessionOwners;
use crate::audit::Check;
use crate::context::Transport;
use crate::error::{Status, ToolError};
use crate::mcp::VerifiedPrincipal;
use crate::mcp::streamable::McpService;
use crate::principal::{BoxFuture, Principal};
use crate::server::{CallRequest, Credentials, Server};

/// The state of every route.
#[derive(Clone)]
pub(crate) struct App {
    inner: Arc<AppInner>,
    pub(crate) options: Arc<HttpOptions>,
}

struct AppInner {
    server: Server,
    /// The manifest's tool objects (with `scopes`), at their registry positions, each
    /// serialized as it appears in a manifest document.
    manifest_parts: Vec<String>,
    /// The manifest of every tool `tools/list` can show, serialized once.
    full_manifest: Bytes,
    /// How many tools that is.
    visible: usize,
    /// Built from [`HttpOptions::resource_url`], when it is set.
    resource: Option<ResourceUrls>,
    /// Who opened each MCP session.
    sessions: SessionOwners,
    /// Every scope some tool requires.
    every_scope: Vec<&'static str>,
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
        let resource = resource.trim_end_matches('/').to_owned();
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
        let manifest: Value =
            serde_json::from_str(server.registry().manifest()).unwrap_or(Value::Null);
        let manifest_parts: Vec<String> = manifest
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| tools.iter().map(manifest_part).collect())
            .unwrap_or_default();
        let visible: Vec<usize> = server
            .registry()
            .tools()
            .iter()
            .enumerate()
            .filter(|(_, t)| !server.is_read_only_mode() || t.def().is_read_only())
            .map(|(i, _)| i)
            .collect();
        let full_manifest = manifest_body(&manifest_parts, &visible);
        let resource = options
            .resource_url
            .as_deref()
            .map(ResourceUrls::for_resource);
        let every_scope = server.registry().scopes_supported();
        App {
            inner: Arc::new(AppInner {
                server,
                manifest_parts,
                full_manifest,
                visible: visible.len(),
                resource,
                sessions: SessionOwners::default(),
                every_scope,
            }),
            options: Arc::new(options),
        }
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
        response
    }
}

/// The start and end of a pretty-printed manifest document around its tool objects.
const MANIFEST_HEAD: &str = "{\n  \"tools\": [\n";
const MANIFEST_TAIL: &str = "\n  ]\n}\n";

/// One tool object, pretty-printed as it appears in a manifest document (indented for
/// its place in the `tools` array): parts join with `,\n` between the head and tail.
fn manifest_part(tool: &Value) -> String {
    let text = serde_json::to_string_pretty(&json!({ "tools": [tool] }))
        .expect("a JSON value always serializes");
    text.strip_prefix(MANIFEST_HEAD)
        .and_then(|t| t.strip_suffix(&MANIFEST_TAIL[..MANIFEST_TAIL.len() - 1]))
        .unwrap_or(&text)
        .to_owned()
}

/// The manifest document of these tools (as `serde_json::to_string_pretty` writes
/// `{"tools": [...]}`, and a newline), joined from the parts serialized at start-up.
fn manifest_body(parts: &[String], positions: &[usize]) -> Bytes {
    let chosen: Vec<&str> = positions
        .iter()
        .filter_map(|&i| parts.get(i).map(String::as_str))
        .collect();
    if chosen.is_empty() {
        return Bytes::from_static(b"{\n  \"tools\": []\n}\n");
    }
    let size = chosen.iter().map(|p| p.len() + 2).sum::<usize>() + 32;
    let mut text = String::with_capacity(size);
    text.push_str(MANIFEST_HEAD);
    for (n, part) in chosen.iter().enumerate() {
        if n > 0 {
            text.push_str(",\n");
        }
        text.push_str(part);
    }
    text.push_str(MANIFEST_TAIL);
    Bytes::from(text)
}

/// A quoted-string value of an auth-param: no quotes, backslashes or control characters.
fn quoted(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                '\''
            } else {
                c
            }
        })
        .collect()
}

/// The request's credentials: a bearer token, none, or a refusal of a malformed header.
fn credentials(headers: &HeaderMap) -> Result<Credentials, ToolError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(Credentials::None);
    };
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

/// A refusal as JSON: the error's status and `{"error", "reason", "status"}`.
pub(crate) fn json_error(err: &ToolError) -> Response {
    let status =
        StatusCode::from_u16(err.status().code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(err.to_json())).into_response()
}

/// Read a body up to the limit: 413 beyond it.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, ToolError> {
    axum::body::to_bytes(body, limit).await.map_err(|err| {
        let mut source = err.source();
        let mut too_large = false;
        while let Some(e) = source {
            too_large |= e.is::<http_body_util::LengthLimitError>();
            source = e.source();
        }
        if too_large {
            ToolError::new(
                Status::BadRequest,
                "body_too_large",
                format!("the request body is larger than {limit} bytes"),
            )
        } else {
            ToolError::bad_request(
                "invalid_body",
                format!("the request body could not be read: {err}"),
            )
        }
    })
}

/// The answer to a body that could not be read: 413 (with `"status": 413` in the body,
/// which [`Status`] has no variant for) when it was too large.
fn body_error(err: &ToolError) -> Response {
    if err.reason() != "body_too_large" {
        return json_error(err);
    }
    let mut body = err.to_json();
    body["status"] = json!(413);
    (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(body)).into_response()
}

/// What the gate needs to know of a JSON-RPC message that is a `tools/call`.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<ProbeParams<'a>>,
}

#[derive(Deserialize)]
struct ProbeParams<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    #[allow(dead_code)]
    arguments: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ArgumentsOnly {
    #[serde(default)]
    params: Option<ArgumentsParams>,
}

#[derive(Deserialize)]
struct ArgumentsParams {
    #[serde(default)]
    arguments: Option<Value>,
}

/// A `tools/call` seen by the gate: the tool and the JSON-RPC id.
struct ToolsCall {
    tool: String,
    id: Option<String>,
}

impl ToolsCall {
    /// The tool named by a `tools/call` message: the `Mcp-Name` header when present,
    /// else the JSON-RPC body.
    fn probe(headers: &HeaderMap, body: &[u8]) -> Option<ToolsCall> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if header("mcp-method").is_some_and(|m| m != "tools/call") {
            return None;
        }
        let probe: Probe<'_> = serde_json::from_slice(body).ok()?;
        if probe.method.as_deref() != Some("tools/call") {
            return None;
        }
        let tool = match header("mcp-name") {
            Some(name) => name.to_owned(),
            None => probe.params?.name?.into_owned(),
        };
        let id = probe.id.map(|id| match id {
            Value::String(s) => s,
            other => other.to_string(),
        });
        Some(ToolsCall { tool, id })
    }

    /// Record this call's refusal by the gate (one audit record, as for every attempt)
    /// and hand the error back.
    async fn refused(
        &self,
        app: &App,
        body: &[u8],
        principal: Option<&Arc<Principal>>,
        check: Check,
        err: ToolError,
    ) -> ToolError {
        app.server()
            .record_refusal(
                &self.tool,
                ToolsCall::arguments(body).as_ref(),
                principal,
                Transport::StreamableHttp,
                self.id.clone(),
                check,
                err,
            )
            .await
    }

    /// The call's arguments, parsed only when a refusal is recorded.
    fn arguments(body: &[u8]) -> Option<Value> {
        serde_json::from_slice::<ArgumentsOnly>(body)
            .ok()?
            .params?
            .arguments
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
}

impl McpEndpoint {
    pub(crate) fn new(app: App, guard: Arc<Guard>, mcp: McpService) -> McpEndpoint {
        McpEndpoint(Arc::new(EndpointInner { app, guard, mcp }))
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
                return Ok(json_error(&err));
            }
            Ok(mcp_gate(&endpoint.app, request, &endpoint.mcp).await)
        })
    }
}

/// In front of `/mcp`: the body limit, authentication (401) and, for a `tools/call`,
/// the scope check (403), each refused attempt recorded once. The verified principal
/// goes down to the MCP handler in the request's extensions.
async fn mcp_gate(app: &App, request: Request, mcp: &McpService) -> Response {
    let (mut parts, body) = request.into_parts();
    let body = if parts.method == Method::POST {
        match read_body(body, app.options.max_body_bytes).await {
            Ok(bytes) => bytes,
            Err(err) => return body_error(&err),
        }
    } else {
        Bytes::new()
    };
    let is_post = parts.method == Method::POST;
    let probe = || {
        is_post
            .then(|| ToolsCall::probe(&parts.headers, &body))
            .flatten()
    };

    let principal = match app.authenticate(&parts.headers).await {
        Ok(principal) => principal,
        Err(err) => {
            let err = match &probe() {
                Some(call) => {
                    call.refused(app, &body, None, Check::Authenticate, err)
                        .await
                }
                None => err,
            };
            return app.refusal(&parts.headers, &err, None);
        }
    };

    // A session is used only by the principal that opened it; to anyone else it does
    // not exist (the same 404 as an unknown session).
    let session = parts
        .headers
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && !app.inner.sessions.allows(id, &principal)
    {
        tracing::warn!(subject = %principal, "refused a request naming another principal's MCP session");
        let err = ToolError::new(Status::NotFound, "session_not_found", "no such session");
        let err = match &probe() {
            // A refused `tools/call` attempt, recorded like every other.
            Some(call) => {
                call.refused(app, &body, Some(&principal), Check::Session, err)
                    .await
            }
            None => err,
        };
        return json_error(&err);
    }

    // A principal with every scope any tool requires passes every scope check: the body
    // need not be looked at (the pipeline checks again, as for every transport).
    if !principal.has_scopes(&app.inner.every_scope)
        && let Some(call) = &probe()
        && let Err((Check::Scope, err)) = app.server().authorize(&principal, &call.tool)
    {
        let err = call
            .refused(app, &body, Some(&principal), Check::Scope, err)
            .await;
        return app.refusal(&parts.headers, &err, Some(&call.tool));
    }
    // Unknown and hidden tools go on to the pipeline, which answers them as MCP tool
    // errors and records them; so does everything that passes.

    let is_delete = parts.method == Method::DELETE;
    parts
        .extensions
        .insert(VerifiedPrincipal(Arc::clone(&principal)));
    let mut response = mcp
        .handle(Request::from_parts(parts, Body::from(body)))
        .await;
    match &session {
        None => {
            if let Some(opened) = response
                .headers()
                .get(SESSION_ID)
                .and_then(|v| v.to_str().ok())
            {
                app.inner.sessions.opened(opened, &principal);
            }
        }
        Some(id) => {
            let status = response.status();
            if status == StatusCode::NOT_FOUND || (is_delete && status.is_success()) {
                app.inner.sessions.closed(id);
            }
        }
    }
    // rmcp answers a session's DELETE with 202; the Python SDK expects 200 or 204.
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
    if !app.server().filters_list_by_scope() {
        return (
            [(header::CONTENT_TYPE, "application/json")],
            app.inner.full_manifest.clone(),
        )
            .into_response();
    }
    let listed: Vec<usize> = app
        .server()
        .listed_tools(Some(&principal))
        .map(|(i, _)| i)
        .collect();
    let body = if listed.len() == app.inner.visible {
        app.inner.full_manifest.clone()
    } else {
        manifest_body(&app.inner.manifest_parts, &listed)
    };
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `POST /tools/{name}`: a plain JSON call. The body is the arguments (empty for none);
/// the answer is the structured output, or `{"content": [...]}` for content results;
/// a refusal has the error's status and `{"error", "reason", "status"}`.
pub(crate) async fn call_tool(
    State(app): State<App>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let request_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 200)
        .map(str::to_owned);
    let body = match read_body(body, app.options.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(err) => return body_error(&err),
    };
    let credentials = match credentials(&headers) {
        Ok(credentials) => credentials,
        Err(err) => {
            let err = app
                .server()
                .record_refusal(
                    &name,
                    serde_json::from_slice::<Value>(&body).ok().as_ref(),
                    None,
                    Transport::PlainHttp,
                    request_id,
                    Check::Authenticate,
                    err,
                )
                .await;
            return app.refusal(&headers, &err, Some(&name));
        }
    };
    let arguments = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(value) => Some(value),
            Err(parse) => {
                // Not JSON: refuse after authenticating, so that a caller without a
                // valid token still learns only that (401).
                let (principal, check, err) = match app.server().authenticate(&credentials).await {
                    Err(err) => (None, Check::Authenticate, err),
                    Ok(principal) => (
                        Some(principal),
                        Check::Validate,
                        ToolError::invalid_arguments("", format!("the body is not JSON: {parse}")),
                    ),
                };
                let err = app
                    .server()
                    .record_refusal(
                        &name,
                        None,
                        principal.as_ref(),
                        Transport::PlainHttp,
                        request_id,
                        check,
                        err,
                    )
                    .await;
                return app.refusal(&headers, &err, Some(&name));
            }
        }
    };
    let mut call = CallRequest::new(name.clone(), arguments)
        .credentials(credentials)
        .transport(Transport::PlainHttp);
    if let Some(id) = request_id {
        call = call.request_id(id);
    }
    let response = app.server().call(call).await;
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
        Err(err) => app.refusal(&headers, err, Some(&name)),
    }
}

/// `GET /.well-known/oauth-protected-resource[/…]`: RFC 9728 metadata.
pub(crate) async fn resource_metadata(State(app): State<App>, headers: HeaderMap) -> Response {
    let urls = app.resource_urls(&headers);
    let mut metadata = json!({
        "resource": urls.resource,
        "scopes_supported": app.server().registry().scopes_supported(),
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

/// Any other route.
pub(crate) async fn not_found() -> Response {
    json_error(&ToolError::not_found("no such route"))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A manifest joined from its parts is byte for byte what serde_json writes.
    #[test]
    fn manifest_bodies_are_the_pretty_json_of_the_chosen_tools() {
        let tools = [
            json!({"name": "a", "inputSchema": {"type": "object", "properties": {}}, "scopes": ["x:y"]}),
            json!({"name": "b", "description": "with \"quotes\"\nand lines", "scopes": []}),
            json!({"name": "c", "annotations": {"readOnlyHint": true}, "scopes": ["p", "q"]}),
        ];
        let parts: Vec<String> = tools.iter().map(manifest_part).collect();
        for positions in [vec![], vec![0], vec![1], vec![0, 2], vec![0, 1, 2]] {
            let chosen: Vec<&Value> = positions.iter().map(|&i| &tools[i]).collect();
            let mut expected = serde_json::to_string_pretty(&json!({ "tools": chosen })).unwrap();
            expected.push('\n');
            assert_eq!(
                std::str::from_utf8(&manifest_body(&parts, &positions)).unwrap(),
                expected,
                "{positions:?}"
            );
        }
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
    }

    #[test]
    fn probe_reads_header_then_body() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a","arguments":{"x":1}}}"#;
        let h = HeaderMap::new();
        let call = ToolsCall::probe(&h, body).unwrap();
        assert_eq!((call.tool.as_str(), call.id.as_deref()), ("a", Some("7")));
        assert_eq!(ToolsCall::arguments(body), Some(json!({"x": 1})));
        let mut h = HeaderMap::new();
        h.insert("mcp-name", "b".parse().unwrap());
        assert_eq!(ToolsCall::probe(&h, body).unwrap().tool, "b");
        h.insert("mcp-method", "tools/list".parse().unwrap());
        assert!(ToolsCall::probe(&h, body).is_none());
        assert!(
            ToolsCall::probe(&HeaderMap::new(), br#"{"method":"tools/list","id":1}"#).is_none()
        );
        assert!(ToolsCall::probe(&HeaderMap::new(), b"not json").is_none());
    }
}
