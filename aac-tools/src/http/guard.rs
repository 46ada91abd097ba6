//! `Host` and `Origin` checks against DNS rebinding, for every route.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Uri, header};
use axum::middleware::Next;
use axum::response::Response;

use super::HttpOptions;
use super::routes::{App, Refused, refused_by_guard};
use crate::error::{Status, ToolError};

/// A host and optional port, lowercased, without IPv6 brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(text: &str) -> Option<Authority> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        match axum::http::uri::Authority::try_from(text) {
            // A port that is no port (`:99999999`) makes no authority: compared with a
            // port-pinned allowed host, it would be compared with nothing.
            Ok(a) if a.as_str().contains('@') || (a.port_u16().is_none() && has_port(&a)) => None,
            // Exactly a host and a port (`[::1]x` is neither), and a bracketed host is an
            // IPv6 address (`[127.0.0.1]` is not): what another reader of the header, a
            // proxy in front, could take for something else is refused.
            Ok(a) if !well_formed(&a) => None,
            Ok(a) => Some(Authority {
                host: normalize_host(a.host()),
                port: a.port_u16(),
            }),
            // A bare IPv6 address (`::1`) is not an authority; take it as a host.
            Err(_) if text.parse::<std::net::Ipv6Addr>().is_ok() => Some(Authority {
                host: normalize_host(text),
                port: None,
            }),
            Err(_) => None,
        }
    }
}

/// Whether `authority` is a host (a bracketed one an IPv6 address) and nothing after it
/// but `:` and a port's digits.
fn well_formed(authority: &axum::http::uri::Authority) -> bool {
    let text = authority.as_str();
    let host = authority.host();
    let Some(rest) = text.strip_prefix(host) else {
        return false;
    };
    let bracketed_ok = match host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
        None => !host.contains(']'),
    };
    bracketed_ok
        && (rest.is_empty()
            || rest
                .strip_prefix(':')
                .is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit())))
}

/// Whether `authority` writes a port (digits after the host's last `:`), which
/// `port_u16` reads as none when it is out of range.
fn has_port(authority: &axum::http::uri::Authority) -> bool {
    authority
        .as_str()
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && !port.contains(']'))
}

fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Which ports an allowed origin matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Port {
    Any,
    Is(u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedOrigin {
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: Port,
    },
}

/// `scheme://host[:port]` with the scheme's default port filled in.
fn parse_origin(text: &str) -> Option<(String, String, Option<u16>)> {
    let (scheme, rest) = text.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') {
        return None;
    }
    let authority = Authority::parse(rest)?;
    let port = authority.port.or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    });
    Some((scheme, authority.host, port))
}

fn parse_allowed_origin(text: &str) -> Option<AllowedOrigin> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("null") {
        return Some(AllowedOrigin::Null);
    }
    if let Some(base) = text.strip_suffix(":*") {
        let (scheme, host, _) = parse_origin(base)?;
        return Some(AllowedOrigin::Tuple {
            scheme,
            host,
            port: Port::Any,
        });
    }
    let (scheme, host, port) = parse_origin(text)?;
    Some(AllowedOrigin::Tuple {
        scheme,
        host,
        port: port.map_or(Port::Any, Port::Is),
    })
}

/// An origin CORS may name: `http://host[:port]` or `https://…` (`:*` any port), one a
/// browser can send: not `null`, no `*` in the host (no wildcard subdomains: such a value
/// matched nothing), an IPv6 host in brackets (`http://::1:6274` was read as the host
/// `::1:6274` on port 80), no other scheme (`javascript:` and `file:` pages send `null`).
fn parse_cors_origin(text: &str) -> Option<AllowedOrigin> {
    match parse_allowed_origin(text)? {
        AllowedOrigin::Tuple { scheme, host, .. }
            if !matches!(scheme.as_str(), "http" | "https")
                || host.contains('*')
                || (host.contains(':') && !text.contains('[')) =>
        {
            None
        }
        AllowedOrigin::Null => None,
        tuple => Some(tuple),
    }
}

/// Whether [`HttpOptions::cors_origins`] takes `text` (else it is ignored, with a warning).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub(crate) fn is_cors_origin(text: &str) -> bool {
    parse_cors_origin(text).is_some()
}

/// Whether `origin` (scheme, host, port) is one of `allowed`.
fn listed(allowed: &[AllowedOrigin], (scheme, host, port): &(String, String, Option<u16>)) -> bool {
    allowed.iter().any(|a| match a {
        AllowedOrigin::Null => false,
        AllowedOrigin::Tuple {
            scheme: s,
            host: h,
            port: p,
        } => {
            s == scheme
                && h == host
                && match p {
                    Port::Any => true,
                    Port::Is(p) => Some(*p) == *port,
                }
        }
    })
}

/// The checks, parsed once from [`HttpOptions`].
#[derive(Debug)]
pub(crate) struct Guard {
    /// `None`: every host (`*`).
    hosts: Option<Vec<Authority>>,
    /// `None`: an origin must name an allowed host.
    origins: Option<Vec<AllowedOrigin>>,
    /// The origins whose pages may read the answers (CORS); each also passes the
    /// `Origin` check.
    cors: Vec<AllowedOrigin>,
}

impl Guard {
    pub(crate) fn new(options: &HttpOptions) -> Guard {
        let any_host = options.allowed_hosts.iter().any(|h| h.trim() == "*");
        let hosts = (!any_host).then(|| {
            options
                .allowed_hosts
                .iter()
                .filter_map(|h| {
                    let parsed = Authority::parse(h);
                    if parsed.is_none() {
                        tracing::warn!(host = %h, "ignoring an allowed host that does not parse");
                    }
                    parsed
                })
                .collect()
        });
        let origins = options.allowed_origins.as_ref().map(|list| {
            list.iter()
                .filter_map(|o| {
                    let parsed = parse_allowed_origin(o);
                    if parsed.is_none() {
                        tracing::warn!(origin = %o, "ignoring an allowed origin that does not parse");
                    }
                    parsed
                })
                .collect()
        });
        let cors = options
            .cors_origins
            .iter()
            .filter_map(|o| {
                let parsed = parse_cors_origin(o);
                if parsed.is_none() {
                    tracing::warn!(origin = %o, "ignoring a CORS origin that is not one a browser sends, http(s)://host[:port] (null, * and wildcards in the host are not accepted; an IPv6 host goes in brackets)");
                }
                parsed
            })
            .collect();
        Guard {
            hosts,
            origins,
            cors,
        }
    }

    /// Whether any origin may read answers (CORS).
    pub(crate) fn has_cors(&self) -> bool {
        !self.cors.is_empty()
    }

    /// Whether a page of `origin` may read the answers (CORS).
    pub(crate) fn cors_allows(&self, origin: &str) -> bool {
        let origin = origin.trim();
        !self.cors.is_empty()
            && !origin.eq_ignore_ascii_case("null")
            && parse_origin(origin).is_some_and(|o| listed(&self.cors, &o))
    }

    /// Whether the `Host` value is an allowed host written plainly (`name` or
    /// `name:port`, a name of letters, digits, dots and hyphens): the common case, decided
    /// without parsing or allocating. It accepts nothing that [`Authority::parse`] and
    /// [`Guard::host_allowed`] would refuse; anything else goes to them.
    fn plainly_allowed(&self, value: &str) -> bool {
        let Some(allowed) = &self.hosts else {
            return false;
        };
        let (name, port) = match value.split_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => {
                match port.parse::<u16>() {
                    Ok(port) => (name, Some(port)),
                    Err(_) => return false,
                }
            }
            Some(_) => return false,
            None => (value, None),
        };
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            && allowed
                .iter()
                .any(|a| a.host.eq_ignore_ascii_case(name) && (a.port.is_none() || a.port == port))
    }

    fn host_allowed(&self, host: &Authority) -> bool {
        match &self.hosts {
            None => true,
            Some(allowed) => allowed
                .iter()
                .any(|a| a.host == host.host && (a.port.is_none() || a.port == host.port)),
        }
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim();
        if self.cors_allows(origin) {
            return true;
        }
        match &self.origins {
            Some(allowed) => {
                if origin.eq_ignore_ascii_case("null") {
                    return allowed.contains(&AllowedOrigin::Null);
                }
                parse_origin(origin).is_some_and(|o| listed(allowed, &o))
            }
            None => {
                let Some((scheme, host, port)) = parse_origin(origin) else {
                    return false;
                };
                if scheme != "http" && scheme != "https" {
                    return false;
                }
                match &self.hosts {
                    None => true,
                    Some(allowed) => allowed
                        .iter()
                        .any(|a| a.host == host && (a.port.is_none() || a.port == port)),
                }
            }
        }
    }

    /// `Ok` if the request may proceed, else the refusal (logged).
    pub(crate) fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ToolError> {
        self.check_saying(uri, headers, true)
    }

    /// Whether the request may proceed, without a log line: for the CORS layer, which
    /// asks before the guard itself refuses the request (and logs it, once).
    pub(crate) fn passes(&self, uri: &Uri, headers: &HeaderMap) -> bool {
        self.check_saying(uri, headers, false).is_ok()
    }

    fn check_saying(&self, uri: &Uri, headers: &HeaderMap, log: bool) -> Result<(), ToolError> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let (host, second) = (hosts.next(), hosts.next());
        if second.is_some() {
            // Two readers (a proxy, this guard) could each take a different one (RFC 9112
            // answers it 400).
            if log {
                tracing::warn!("refused a request with more than one Host header");
            }
            return Err(ToolError::bad_request(
                "invalid_host",
                "the request has more than one Host header",
            ));
        }
        let plain = uri.authority().is_none()
            && host
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| self.plainly_allowed(v));
        if !plain {
            self.check_host(uri, headers, log)?;
        }
        for origin in headers.get_all(header::ORIGIN) {
            let allowed = origin.to_str().is_ok_and(|o| self.origin_allowed(o));
            if !allowed {
                if log {
                    tracing::warn!(origin = ?origin, "refused a request with an Origin that is not allowed");
                }
                return Err(ToolError::new(
                    Status::Forbidden,
                    "origin_not_allowed",
                    "the Origin of this request is not allowed",
                ));
            }
        }
        Ok(())
    }

    /// The `Host` header and, when the request names one (HTTP/2, or an absolute-form
    /// target, which RFC 9112 says wins over `Host`), the target's authority: each that is
    /// there must be allowed, so that no reader of the request finds another host in it.
    fn check_host(&self, uri: &Uri, headers: &HeaderMap, log: bool) -> Result<(), ToolError> {
        let header = headers
            .get(header::HOST)
            .map(|value| value.to_str().ok().and_then(Authority::parse));
        let target = uri.authority().map(|a| Authority::parse(a.as_str()));
        let invalid =
            || ToolError::bad_request("invalid_host", "the request has no valid Host header");
        if header.is_none() && target.is_none() {
            return Err(invalid());
        }
        for host in [header, target].into_iter().flatten() {
            let host = host.ok_or_else(invalid)?;
            if !self.host_allowed(&host) {
                if log {
                    tracing::warn!(host = %host.host, "refused a request with a Host that is not allowed (possible DNS rebinding)");
                }
                return Err(ToolError::new(
                    Status::Forbidden,
                    "host_not_allowed",
                    format!("the Host `{}` is not allowed", host.host),
                ));
            }
        }
        Ok(())
    }
}

/// The middleware of every route but `/mcp` (which applies the guard itself): a refusal
/// that may carry a call is recorded ([`refused_by_guard`]).
pub(crate) async fn check(
    State((guard, app)): State<(Arc<Guard>, App)>,
    request: Request,
    next: Next,
) -> Response {
    match guard.check(request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(err) => refused_by_guard(&app, request, Refused::Rest, err).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(options: HttpOptions) -> Guard {
        Guard::new(&options)
    }

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, o.parse().unwrap());
        }
        h
    }

    fn ok(g: &Guard, host: &str, origin: Option<&str>) -> bool {
        g.check(&Uri::from_static("/mcp"), &headers(host, origin))
            .is_ok()
    }

    #[test]
    fn cors_origins_pass_the_origin_check_but_not_the_host_check() {
        assert!(!guard(HttpOptions::default()).has_cors());
        let g = guard(HttpOptions::default().cors_origins([
            "https://app.example.com",
            "http://tools.example.com:*",
            "null",
            "*",
            "https://*",
            "app.example.org",
        ]));
        assert!(g.has_cors());
        assert!(g.cors_allows("https://app.example.com"));
        assert!(g.cors_allows("https://APP.example.com:443"));
        assert!(!g.cors_allows("https://app.example.com:8443"));
        assert!(!g.cors_allows("http://app.example.com"));
        assert!(g.cors_allows("http://tools.example.com:3000"));
        // What was ignored allows nothing.
        assert!(!g.cors_allows("null"));
        assert!(!g.cors_allows("https://evil.example"));
        assert!(!g.cors_allows("https://app.example.org"));
        assert!(ok(&g, "127.0.0.1:8080", Some("https://app.example.com")));
        assert!(!ok(&g, "127.0.0.1:8080", Some("https://evil.example")));
        assert!(!ok(&g, "127.0.0.1:8080", Some("null")));
        // Against DNS rebinding, the Host is checked whatever the origin.
        assert!(!ok(&g, "evil.example", Some("https://app.example.com")));
        for bad in [
            "null",
            "*",
            "https://*",
            "app.example.org",
            "https://a.example/x",
            // Values no browser's Origin can match.
            "https://*.example.com",
            "http://::1:6274",
            "://localhost:6274",
            "javascript://x",
            "file://x",
            "ftp://localhost",
        ] {
            assert!(!is_cors_origin(bad), "{bad}");
        }
        for good in [
            "https://a.example:8443",
            "http://[::1]:6274",
            "http://localhost:*",
            "HTTP://LOCALHOST:6274",
            "http://xn--bcher-kva.example:8080",
        ] {
            assert!(is_cors_origin(good), "{good}");
        }
    }

    #[test]
    fn loopback_by_default() {
        let g = guard(HttpOptions::default());
        assert!(ok(&g, "127.0.0.1:8080", None));
        assert!(ok(&g, "localhost", None));
        assert!(ok(&g, "LOCALHOST:1", None));
        assert!(ok(&g, "[::1]:9000", None));
        assert!(!ok(&g, "evil.example.com", None));
        assert!(!ok(&g, "evil.example.com:8080", None));
        assert!(!ok(&g, "127.0.0.1.evil.example.com", None));
        assert!(!ok(&g, "user@127.0.0.1", None));
        // Malformed, read otherwise by another reader: refused.
        for host in ["[::1", "[::1]x", "[127.0.0.1]", "[::1]]", "::1]"] {
            assert!(!ok(&g, host, None), "{host}");
            assert!(
                !ok(&g, "localhost", Some(&format!("http://{host}"))),
                "origin {host}"
            );
        }
        assert!(ok(&g, "[::1]", None));
        assert!(ok(&g, "::1", None));
    }

    /// A request that names two hosts, or a port that is none, is refused: whichever a
    /// proxy in front reads, it is a host this guard checked.
    #[test]
    fn a_request_naming_two_hosts_or_a_port_that_is_none_is_refused() {
        let g = guard(HttpOptions::default());
        let mut two = headers("localhost", None);
        two.append(header::HOST, "evil.example.com".parse().unwrap());
        let err = g.check(&Uri::from_static("/mcp"), &two).unwrap_err();
        assert_eq!(err.reason(), "invalid_host", "{err}");
        let mut same = headers("localhost", None);
        same.append(header::HOST, "localhost".parse().unwrap());
        assert!(g.check(&Uri::from_static("/mcp"), &same).is_err());
        // An absolute-form target names the host the server must use (RFC 9112).
        let absolute = Uri::from_static("http://evil.example.com/tools/list_issues");
        let err = g.check(&absolute, &headers("localhost", None)).unwrap_err();
        assert_eq!(err.reason(), "host_not_allowed", "{err}");
        let fine = Uri::from_static("http://localhost:8080/mcp");
        assert!(g.check(&fine, &headers("localhost:8080", None)).is_ok());
        assert!(g.check(&fine, &HeaderMap::new()).is_ok());
        let pinned = guard(HttpOptions::default().allowed_hosts(["example.com:8080"]));
        for host in [
            "localhost:99999999",
            "example.com:99999999",
            "example.com:65536",
        ] {
            let err = pinned
                .check(&Uri::from_static("/mcp"), &headers(host, None))
                .unwrap_err();
            assert_eq!(err.reason(), "invalid_host", "{host}: {err}");
        }
        assert!(ok(&pinned, "example.com:8080", None));
    }

    #[test]
    fn origins_must_name_an_allowed_host_by_default() {
        let g = guard(HttpOptions::default());
        assert!(ok(&g, "127.0.0.1:8080", Some("http://127.0.0.1:8080")));
        assert!(ok(&g, "127.0.0.1:8080", Some("http://localhost:3000")));
        assert!(!ok(&g, "127.0.0.1:8080", Some("http://evil.example.com")));
        assert!(!ok(&g, "127.0.0.1:8080", Some("null")));
        assert!(!ok(&g, "127.0.0.1:8080", Some("file://x")));
    }

    #[test]
    fn configured_hosts_and_origins() {
        let g = guard(
            HttpOptions::default()
                .allowed_hosts(["mcp.example.com:8443"])
                .allowed_origins(["https://app.example.com", "http://localhost:*"]),
        );
        assert!(ok(&g, "mcp.example.com:8443", None));
        assert!(!ok(&g, "mcp.example.com:8080", None));
        assert!(!ok(&g, "127.0.0.1", None));
        assert!(ok(
            &g,
            "mcp.example.com:8443",
            Some("https://app.example.com")
        ));
        assert!(ok(
            &g,
            "mcp.example.com:8443",
            Some("https://app.example.com:443")
        ));
        assert!(!ok(
            &g,
            "mcp.example.com:8443",
            Some("https://app.example.com:444")
        ));
        assert!(!ok(
            &g,
            "mcp.example.com:8443",
            Some("http://app.example.com")
        ));
        assert!(ok(
            &g,
            "mcp.example.com:8443",
            Some("http://localhost:5173")
        ));
        assert!(!ok(
            &g,
            "mcp.example.com:8443",
            Some("https://mcp.example.com:8443")
        ));
    }

    /// The fast path accepts only what the full parse accepts, and nothing it refuses.
    #[test]
    fn the_plain_fast_path_agrees_with_the_parse() {
        let guards = [
            guard(HttpOptions::default()),
            guard(HttpOptions::default().allowed_hosts(["mcp.example.com:8443", "a-b.example"])),
        ];
        let hosts = [
            "localhost",
            "LocalHost:8080",
            "127.0.0.1",
            "127.0.0.1:0",
            "127.0.0.1:65535",
            "127.0.0.1:65536",
            "127.0.0.1:",
            "127.0.0.1:+1",
            "127.0.0.1:08080",
            "127.0.0.1.evil.example.com",
            "user@127.0.0.1",
            "localhost:80:80",
            "[::1]:9000",
            "::1",
            "mcp.example.com:8443",
            "MCP.example.com:8443",
            "mcp.example.com:8444",
            "mcp.example.com",
            "a-b.example:1",
            "a_b.example",
            "",
            "[::1",
            "[::1]x",
            "[127.0.0.1]",
            "[::1]:",
        ];
        for g in &guards {
            for host in hosts {
                let parsed = Authority::parse(host).is_some_and(|a| g.host_allowed(&a));
                if g.plainly_allowed(host) {
                    assert!(
                        parsed,
                        "the fast path accepted {host:?}, the parse refuses it"
                    );
                }
                let mut h = HeaderMap::new();
                if let Ok(value) = host.parse() {
                    h.insert(header::HOST, value);
                    assert_eq!(
                        g.check(&Uri::from_static("/mcp"), &h).is_ok(),
                        parsed,
                        "{host:?}"
                    );
                }
            }
        }
        assert!(guards[0].plainly_allowed("127.0.0.1:8080"));
        assert!(guards[1].plainly_allowed("mcp.example.com:8443"));
    }

    #[test]
    fn any_host() {
        let g = guard(HttpOptions::default().allowed_hosts(["*"]));
        assert!(ok(&g, "whatever.example", None));
        assert!(ok(&g, "whatever.example", Some("https://other.example")));
    }
}
