//! CORS for the origins [`HttpOptions::cors_origins`](super::HttpOptions::cors_origins)
//! names: their preflights are answered, and every answer to them says which origin may
//! read it. Only in the router when some origin is named.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::guard::Guard;

/// The methods a page may use: `/mcp`'s (`GET` for its stream, `DELETE` to end a
/// session) and the tools routes'.
const ALLOW_METHODS: &str = "GET, POST, DELETE";
/// The request headers a page may send: what an MCP client sends over Streamable HTTP,
/// and the REST routes' request id.
const ALLOW_HEADERS: &str = "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name, X-Request-Id";
/// The answer headers a page may read: the session, the protocol version, the bearer
/// challenges (for an OAuth client's discovery and step-up), and a rate's wait.
const EXPOSE_HEADERS: &str = "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate, Retry-After";
/// How long a browser may keep a preflight's answer: 10 minutes.
const MAX_AGE: &str = "600";

/// The request's one `Origin`, if CORS lets its pages read the answers.
fn cors_origin(guard: &Guard, headers: &HeaderMap) -> Option<HeaderValue> {
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let (origin, second) = (origins.next()?, origins.next());
    (second.is_none() && origin.to_str().is_ok_and(|o| guard.cors_allows(o)))
        .then(|| origin.clone())
}

/// The middleware: a preflight from a listed origin whose `Host` passes the guard is
/// answered 204 here (it is no call: nothing is recorded); any other request goes on, and
/// its answer names a listed origin whose `Host` passed in `Access-Control-Allow-Origin`.
pub(crate) async fn cors(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    // A listed origin, on a request the guard lets through: a refusal of its `Host`
    // (DNS rebinding) is no answer for a page to read.
    let origin = cors_origin(&guard, request.headers())
        .filter(|_| guard.passes(request.uri(), request.headers()));
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if let Some(origin) = &origin
        && preflight
    {
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE),
        );
        vary(headers);
        headers.append(
            header::VARY,
            HeaderValue::from_static(
                "Access-Control-Request-Method, Access-Control-Request-Headers",
            ),
        );
        return response;
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    // Whether a page may read it depends on its origin: a cache must not give one
    // origin's answer to another.
    vary(headers);
    if let Some(origin) = origin {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
    }
    response
}

fn vary(headers: &mut HeaderMap) {
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}
