//! CORS, for a web page that calls the server from another origin (an MCP client in a
//! browser): off by default; for the origins `HttpOptions::cors_origins` names, preflights
//! are answered and every answer (refusals included) names the origin, while the `Host`
//! guard still holds and nothing but calls is recorded. A real server on loopback.

mod common;

use aac_tools::http::HttpOptions;
use common::{RawMcp, TestServer};
use interop_tests::Options;
use reqwest::Method;
use reqwest::header::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const APP: &str = "https://app.example.com";

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .map(|v| v.to_str().expect("ascii"))
        .unwrap_or("")
}

fn lists(value: &str, item: &str) -> bool {
    value
        .split(',')
        .any(|part| part.trim().eq_ignore_ascii_case(item))
}

async fn preflight(server: &TestServer, path: &str, origin: &str) -> reqwest::Response {
    reqwest::Client::new()
        .request(Method::OPTIONS, format!("{}{path}", server.base))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type, mcp-protocol-version",
        )
        .send()
        .await
        .expect("an answer")
}

/// `POST /tools/list_notes` with every scope, from a page of `origin`.
async fn rest_from(server: &TestServer, origin: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/tools/list_notes", server.base))
        .header("origin", origin)
        .bearer_auth(&server.fixture.full)
        .body("{}")
        .send()
        .await
        .expect("an answer")
}

#[tokio::test]
async fn a_listed_origin_gets_its_preflight_and_reads_every_answer() {
    let server = TestServer::start(
        HttpOptions::default().cors_origins([APP]),
        Options::default(),
    )
    .await;

    // The preflight of `/mcp` and of a tool's route: answered, not recorded.
    for path in ["/mcp", "/tools/list_notes", "/tools"] {
        let response = preflight(&server, path, APP).await;
        assert_eq!(response.status(), 204, "{path}");
        let headers = response.headers();
        assert_eq!(header(headers, "access-control-allow-origin"), APP);
        assert!(lists(
            header(headers, "access-control-allow-methods"),
            "POST"
        ));
        assert!(lists(
            header(headers, "access-control-allow-methods"),
            "DELETE"
        ));
        for name in [
            "Authorization",
            "Content-Type",
            "Mcp-Session-Id",
            "Mcp-Protocol-Version",
            "Last-Event-ID",
        ] {
            assert!(
                lists(header(headers, "access-control-allow-headers"), name),
                "{name}"
            );
        }
        assert!(
            header(headers, "access-control-max-age")
                .parse::<u32>()
                .is_ok()
        );
        assert!(header(headers, "access-control-allow-credentials").is_empty());
        assert!(
            headers
                .get_all("vary")
                .iter()
                .any(|v| lists(v.to_str().unwrap(), "Origin"))
        );
    }
    assert!(server.sink.records().is_empty(), "a preflight is no call");

    // A whole MCP session from the page: every answer names the origin and lets it read
    // the session id.
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.http = reqwest::Client::builder()
        .default_headers(HeaderMap::from_iter([(
            reqwest::header::ORIGIN,
            APP.parse().unwrap(),
        )]))
        .build()
        .unwrap();
    let answer = raw
        .post()
        .body(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"page","version":"1"}}}"#,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(header(answer.headers(), "access-control-allow-origin"), APP);
    assert!(lists(
        header(answer.headers(), "access-control-expose-headers"),
        "Mcp-Session-Id"
    ));
    raw.session = Some(header(answer.headers(), "mcp-session-id").to_owned());
    assert!(!raw.session.as_deref().unwrap().is_empty());
    let (status, _) = raw
        .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    assert_eq!(status, 202);
    let (status, answer) = raw.call(1, "list_notes", serde_json::json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(answer.unwrap()["result"]["isError"], false);

    // A refusal too: the page reads the challenge that starts its OAuth flow.
    let refused = raw
        .http
        .post(server.mcp())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(
        header(refused.headers(), "access-control-allow-origin"),
        APP
    );
    assert!(lists(
        header(refused.headers(), "access-control-expose-headers"),
        "WWW-Authenticate"
    ));

    // REST from the page.
    let rest = rest_from(&server, APP).await;
    assert_eq!(rest.status(), 200);
    assert_eq!(header(rest.headers(), "access-control-allow-origin"), APP);

    // The calls, and only they, were recorded: one each.
    let records = server.sink.records();
    let statuses: Vec<u16> = records.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 401, 200], "{records:?}");
    server.stop().await;
}

#[tokio::test]
async fn another_origin_and_another_host_get_no_cors() {
    let server = TestServer::start(
        HttpOptions::default().cors_origins([APP]),
        Options::default(),
    )
    .await;

    // Another origin: its preflight is refused, its call refused and recorded, and
    // neither names an origin.
    let response = preflight(&server, "/mcp", "https://evil.example").await;
    assert_eq!(response.status(), 403);
    assert!(header(response.headers(), "access-control-allow-origin").is_empty());
    let response = rest_from(&server, "https://evil.example").await;
    assert_eq!(response.status(), 403);
    assert!(header(response.headers(), "access-control-allow-origin").is_empty());
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].reason.as_deref(), Some("origin_not_allowed"));

    // A listed origin whose request names a Host that is not allowed (DNS rebinding):
    // the preflight is not answered for it.
    let addr = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!(
                "OPTIONS /mcp HTTP/1.1\r\nHost: rebound.example\r\nOrigin: {APP}\r\n\
                 Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        stream.read_to_string(&mut answer),
    )
    .await
    .expect("an answer in time")
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        !answer
            .to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{answer}"
    );
    server.stop().await;
}

#[tokio::test]
async fn without_cors_origins_no_page_reads_an_answer() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let response = preflight(&server, "/mcp", APP).await;
    assert_ne!(response.status(), 204);
    assert!(header(response.headers(), "access-control-allow-origin").is_empty());
    // A page of a loopback origin passes the DNS-rebinding guard, and still reads nothing.
    let response = rest_from(&server, "http://localhost:5173").await;
    assert_eq!(response.status(), 200);
    assert!(header(response.headers(), "access-control-allow-origin").is_empty());
    assert!(response.headers().get("vary").is_none());
    server.stop().await;
}
