//! The HTTP server outlasts hostile clients: silent and dribbling connections are closed,
//! a slow body is refused (and recorded), connections past the cap are closed at once
//! while the open ones are served, and thousands of idle connections do not keep a valid
//! client from its answer. Real sockets on loopback; every wait is bounded.

mod common;

use std::time::{Duration, Instant};

use aac_tools::audit::Outcome;
use aac_tools::http::HttpOptions;
use common::TestServer;
use interop_tests::Options;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A hang guard, not a timing assertion.
const GUARD: Duration = Duration::from_secs(20);

fn addr(server: &TestServer) -> String {
    server.base.trim_start_matches("http://").to_owned()
}

/// Read until the server closes the connection; what it sent.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut out))
        .await
        .expect("the server closed the connection")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

async fn valid_call(server: &TestServer) -> reqwest::StatusCode {
    let response = tokio::time::timeout(
        GUARD,
        reqwest::Client::new()
            .post(format!("{}/tools/list_notes", server.base))
            .bearer_auth(&server.fixture.full)
            .body("{}")
            .send(),
    )
    .await
    .expect("the valid client got its answer")
    .expect("a response");
    response.status()
}

#[tokio::test]
async fn silent_and_dribbling_connections_are_closed() {
    let options = HttpOptions::default().header_read_timeout(Duration::from_millis(300));
    let server = TestServer::start(options, Options::default()).await;
    // nothing at all
    let mut silent = TcpStream::connect(addr(&server)).await.unwrap();
    // partial headers, then nothing
    let mut dribbling = TcpStream::connect(addr(&server)).await.unwrap();
    dribbling
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    until_closed(&mut silent).await;
    until_closed(&mut dribbling).await;
    // idle between two requests of a kept-alive connection
    let mut idle = TcpStream::connect(addr(&server)).await.unwrap();
    idle.write_all(
        b"GET /.well-known/oauth-protected-resource HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    )
    .await
    .unwrap();
    let answer = until_closed(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(started.elapsed() < GUARD);
    assert_eq!(valid_call(&server).await, 200);
}

#[tokio::test]
async fn a_slow_body_is_refused_with_408_and_recorded() {
    let options = HttpOptions::default().body_read_timeout(Duration::from_millis(300));
    let server = TestServer::start(options, Options::default()).await;
    for (path, extra, start) in [
        ("/tools/add_note", "", r#"{"text""#),
        (
            "/mcp",
            "Accept: application/json, text/event-stream\r\nMcp-Name: add_note\r\n",
            r#"{"jsonrpc""#,
        ),
    ] {
        server.sink.clear();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
             {extra}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{start}",
            server.fixture.full
        );
        let answer = first_answer(&server, &head).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(answer.contains("body_timeout"), "{path}: {answer}");
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{path}: {records:?}");
        assert_eq!(
            (records[0].tool.as_str(), records[0].status),
            ("add_note", 408),
            "{path}"
        );
        assert_eq!(records[0].outcome, Outcome::Denied, "{path}");
        // Refused for its body, but the token is valid: the record names the caller.
        assert_eq!(records[0].principal.as_deref(), Some("alice"), "{path}");
        // It arrived when its head did, and took the read's timeout, on both routes
        // (`/mcp` recorded the time of its refusal, after a read of up to 30 s, as its
        // arrival).
        assert!(records[0].duration_us >= 300_000, "{path}: {records:?}");
    }
}

/// A body whose declared length is past the limit is refused 413 at once (not after the
/// read's timeout, here a minute, for bytes that would be refused anyway), and recorded,
/// over REST and `/mcp`.
#[tokio::test]
async fn a_declared_length_past_the_limit_is_refused_at_once_and_recorded() {
    let options = HttpOptions::default()
        .max_body_bytes(1024)
        .body_read_timeout(Duration::from_secs(60));
    let server = TestServer::start(options, Options::default()).await;
    for (path, extra) in [
        ("/tools/add_note", ""),
        (
            "/mcp",
            "Accept: application/json, text/event-stream\r\nMcp-Name: add_note\r\n",
        ),
    ] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\n{extra}Content-Length: 5000000\r\n\r\n{{",
            server.fixture.full
        );
        let answer = first_answer(&server, &head).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{path}: {answer}");
        assert!(answer.contains("body_too_large"), "{path}: {answer}");
    }
    let records = server.sink.records();
    assert_eq!(records.len(), 2, "{records:?}");
    for record in &records {
        assert_eq!((record.tool.as_str(), record.status), ("add_note", 413));
        assert_eq!(record.reason.as_deref(), Some("body_too_large"));
        assert_eq!(record.principal.as_deref(), Some("alice"));
    }
}

/// A batch over the body limit is recorded by its first call (tool and id), as a single
/// message over the limit is by what its start says: the large call behind it does not
/// hide it. Over stdio a line over its limit is read the same way.
#[tokio::test]
async fn a_batch_over_the_limit_is_recorded_by_its_first_call() {
    let server = TestServer::start(
        HttpOptions::default().max_body_bytes(1024),
        Options::default(),
    )
    .await;
    let body = serde_json::json!([
        {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
         "params": {"name": "add_note", "arguments": {"text": "first"}}},
        {"jsonrpc": "2.0", "id": 10, "method": "tools/call",
         "params": {"name": "list_notes", "arguments": {"pad": "x".repeat(4000)}}},
    ])
    .to_string();
    let response = common::RawMcp::new(&server.mcp(), Some(&server.fixture.full))
        .post()
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let records = server.sink.records();
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.request_id.as_deref(), r.status))
        .collect();
    assert_eq!(seen, [("add_note", Some("9"), 413)], "{records:?}");
}

#[tokio::test]
async fn past_the_cap_new_connections_are_closed_and_the_open_ones_served() {
    let options = HttpOptions::default()
        .max_connections(8)
        .header_read_timeout(Duration::from_secs(60));
    let server = TestServer::start(options, Options::default()).await;
    // One kept-alive client holds a slot, and seven idle connections the rest.
    let client = reqwest::Client::new();
    let call = |client: &reqwest::Client| {
        client
            .post(format!("{}/tools/list_notes", server.base))
            .bearer_auth(&server.fixture.full)
            .body("{}")
            .send()
    };
    assert_eq!(call(&client).await.unwrap().status(), 200);
    let mut idle = Vec::new();
    for _ in 0..7 {
        idle.push(TcpStream::connect(addr(&server)).await.unwrap());
    }
    // Let the server accept them all.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The ninth is closed as soon as it is accepted.
    let mut extra = TcpStream::connect(addr(&server)).await.unwrap();
    extra
        .write_all(b"GET /tools HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .ok();
    assert_eq!(
        until_closed(&mut extra).await,
        "",
        "closed without an answer"
    );
    // The kept-alive client is still served on its connection.
    assert_eq!(call(&client).await.unwrap().status(), 200);
    drop(idle);
}

/// One peer cannot take every connection: past its own cap, its new connections are
/// closed at once, while another peer (here 127.0.0.2) is still served, and a slot comes
/// back when one of its connections closes. Loopback peers are counted here by option;
/// by default they are not (the test below holds 3,000 from one).
#[tokio::test]
async fn one_peer_past_its_connection_cap_is_closed_while_others_are_served() {
    let options = HttpOptions::default()
        .max_connections_per_peer(4)
        .count_loopback_peers(true)
        .header_read_timeout(Duration::from_secs(60));
    let server = TestServer::start(options, Options::default()).await;
    let target: std::net::SocketAddr = addr(&server).parse().unwrap();
    let connect_from = |ip: &str| {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(format!("{ip}:0").parse().unwrap())
            .expect("binds a loopback address");
        socket.connect(target)
    };
    let call = format!(
        "POST /tools/list_notes HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        server.fixture.full
    );
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(connect_from("127.0.0.1").await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The fifth of that peer is closed without an answer.
    let mut fifth = connect_from("127.0.0.1").await.unwrap();
    fifth.write_all(call.as_bytes()).await.ok();
    assert_eq!(
        until_closed(&mut fifth).await,
        "",
        "closed without an answer"
    );
    // Another peer is served.
    let mut other = connect_from("127.0.0.2").await.unwrap();
    other.write_all(call.as_bytes()).await.unwrap();
    let answer = until_closed(&mut other).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // One of the first peer's connections closes: its next one is served.
    drop(idle.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = connect_from("127.0.0.1").await.unwrap();
    again.write_all(call.as_bytes()).await.unwrap();
    let answer = until_closed(&mut again).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(idle);
}

#[tokio::test]
async fn thousands_of_idle_connections_do_not_block_a_valid_client() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut idle = Vec::new();
    for _ in 0..3000 {
        match TcpStream::connect(addr(&server)).await {
            Ok(stream) => idle.push(stream),
            Err(err) => panic!("connection {} failed: {err}", idle.len()),
        }
    }
    assert_eq!(valid_call(&server).await, 200);
    drop(idle);
}

/// A flood of token-less calls costs a bounded audit trail: past the rate of the peer
/// (60 a minute by default), refusals are answered 429 with `Retry-After` and only
/// counted; the count is recorded, in one record, before the peer's next recorded refusal.
#[tokio::test]
async fn token_less_refusals_are_rate_limited_per_peer_and_counted() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    let call = || {
        client
            .post(format!("{}/tools/list_notes", server.base))
            .body("{}")
            .send()
    };
    for _ in 0..70 {
        let response = call().await.unwrap();
        if response.status() == 429 {
            let retry: u64 = response.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=60).contains(&retry), "{retry}");
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(body["reason"], "rate_limited");
        }
    }
    let records = server.sink.records();
    assert_eq!(records.len(), 60, "one record per refusal within the rate");
    assert!(
        records
            .iter()
            .all(|r| r.reason.as_deref() == Some("missing_token"))
    );
    // A token comes back after a second: the next refusal is recorded, after the count.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(call().await.unwrap().status(), 401);
    let records = server.sink.records();
    assert_eq!(records.len(), 62, "{:?}", &records[60..]);
    assert_eq!(records[60].tool, "(rate limited)");
    assert_eq!(records[60].status, 429);
    assert_eq!(records[60].arguments["suppressed"], 10);
    assert_eq!(records[60].arguments["peer"], "127.0.0.1");
    assert_eq!(records[61].reason.as_deref(), Some("missing_token"));
    // An authenticated caller from the same address is not limited by that.
    assert_eq!(valid_call(&server).await, 200);
}

/// Calls of one principal past its rate are refused with 429 and `Retry-After`, recorded.
#[tokio::test]
async fn a_principal_past_its_rate_gets_429_recorded() {
    let options = Options {
        principal_rate: Some(aac_tools::Rate::new(3, Duration::from_secs(3600))),
        ..Options::default()
    };
    let server = TestServer::start(HttpOptions::default(), options).await;
    for _ in 0..3 {
        assert_eq!(valid_call(&server).await, 200);
    }
    let response = reqwest::Client::new()
        .post(format!("{}/tools/list_notes", server.base))
        .bearer_auth(&server.fixture.full)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    let records = server.sink.records();
    assert_eq!(records.len(), 4);
    let last = &records[3];
    assert_eq!(last.check, Some(aac_tools::audit::Check::RateLimit));
    assert_eq!(last.reason.as_deref(), Some("rate_limited"));
    assert_eq!(last.principal.as_deref(), Some("alice"));
    assert_eq!(last.status, 429);

    // Past the first refusal, a principal's flood is answered 429 and counted, not
    // recorded call by call: it cannot grow the trail faster than its rate.
    for _ in 0..50 {
        assert_eq!(valid_call(&server).await, 429);
    }
    assert_eq!(server.sink.records().len(), 4);
    // The count is recorded (every 10 s by `http::serve`, and when it stops).
    server.server.flush_rate_limited().await;
    let records = server.sink.records();
    assert_eq!(records.len(), 5, "{records:?}");
    let counted = &records[4];
    assert_eq!(
        (
            counted.tool.as_str(),
            counted.principal.as_deref(),
            counted.status,
            counted.check
        ),
        (
            "(rate limited)",
            Some("alice"),
            429,
            Some(aac_tools::audit::Check::RateLimit)
        )
    );
    assert_eq!(counted.arguments["suppressed"], 50);

    // Refusals a transport makes (a body that is not JSON, a batch refused whole) go
    // through the same rate: past it, they are counted too, not recorded one by one.
    server.sink.clear();
    for _ in 0..20 {
        let response = reqwest::Client::new()
            .post(format!("{}/tools/list_notes", server.base))
            .bearer_auth(&server.fixture.full)
            .body("not json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 429);
    }
    assert_eq!(
        server.sink.records().len(),
        0,
        "{:?}",
        server.sink.records()
    );
    server.server.flush_rate_limited().await;
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].arguments["suppressed"], 20);
}

/// A batch (refused whole, 400) goes through its principal's rate once, with its first
/// call, for every record it writes: within the rate each call is recorded as answered
/// (400); past it the batch is answered 429 with `Retry-After`, its first call recorded as
/// that 429 (the first refusal past the rate) and the rest counted. So no call of a batch
/// answered 400 is counted as answered 429, and a batch grows the trail no faster than the
/// rate allows (one token a record).
#[tokio::test]
async fn a_batch_goes_through_the_principal_s_rate_whole_and_is_answered_as_recorded() {
    let options = Options {
        principal_rate: Some(aac_tools::Rate::new(3, Duration::from_secs(3600))),
        ..Options::default()
    };
    let server = TestServer::start(HttpOptions::default(), options).await;
    let mut raw = common::RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let batch = |first: u64, calls: u64| {
        let calls: Vec<_> = (first..first + calls)
            .map(|id| {
                serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "list_notes", "arguments": {}}})
            })
            .collect();
        serde_json::Value::Array(calls).to_string()
    };
    let send = |body: String| {
        let request = raw.post().body(body);
        async move {
            let response = request.send().await.unwrap();
            let retry = response.headers().get("retry-after").cloned();
            (response.status().as_u16(), retry)
        }
    };
    // Two records of three tokens: within the rate, each call recorded as answered.
    assert_eq!(send(batch(1, 2)).await, (400, None));
    let records = server.sink.records();
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.request_id.as_deref(), r.status, r.reason.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("1"), 400, Some("not_dispatched")),
            (Some("2"), 400, Some("not_dispatched")),
        ],
        "{records:#?}"
    );
    // Two more records of the one token left: past the rate, the batch is answered 429,
    // and its first call is recorded as that 429.
    let (status, retry) = send(batch(3, 2)).await;
    assert_eq!(status, 429);
    assert!(retry.is_some(), "a 429 says when to come back");
    let records = server.sink.records();
    assert_eq!(records.len(), 3, "{records:#?}");
    let past = &records[2];
    assert_eq!(
        (
            past.request_id.as_deref(),
            past.status,
            past.reason.as_deref(),
            past.check,
            past.principal.as_deref(),
        ),
        (
            Some("3"),
            429,
            Some("rate_limited"),
            Some(aac_tools::audit::Check::RateLimit),
            Some("alice")
        )
    );
    // A batch of more records than the rate's burst never goes through.
    assert_eq!(send(batch(5, 5)).await.0, 429);
    assert_eq!(
        server.sink.records().len(),
        3,
        "{:#?}",
        server.sink.records()
    );
    // Counted: the rest of the second batch and the whole third, as answered (429).
    server.server.flush_rate_limited().await;
    let records = server.sink.records();
    assert_eq!(records.len(), 4, "{records:#?}");
    assert_eq!(
        (records[3].status, &records[3].arguments),
        (429, &serde_json::json!({"suppressed": 6}))
    );
    // The token left is still there: one call goes ahead.
    let (status, answer) = raw.call(10, "list_notes", serde_json::json!({})).await;
    assert_eq!(status, 200);
    assert!(answer.unwrap()["result"].is_object());
}

/// Requests the MCP layer refuses after the gate let them through (a read whose params
/// have the wrong shape, in a session) are recorded when the gate's attempt is dropped:
/// that record goes through the principal's rate too, so a token cannot grow the trail
/// past it with them.
#[tokio::test]
async fn requests_the_mcp_layer_refuses_are_recorded_at_the_principals_rate() {
    let options = Options {
        principal_rate: Some(aac_tools::Rate::new(3, Duration::from_secs(3600))),
        ..Options::default()
    };
    let server = TestServer::start(HttpOptions::default(), options).await;
    let mut raw = common::RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let mut statuses = Vec::new();
    for (id, body) in [
        r#"{"jsonrpc":"2.0","id":ID,"method":"resources/read","params":{"uri":5}}"#,
        r#"{"jsonrpc":"2.0","id":ID,"method":"prompts/get","params":{"name":"x","arguments":[1]}}"#,
        r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"list_notes","arguments":[1]}}"#,
    ]
    .iter()
    .cycle()
    .take(30)
    .enumerate()
    {
        let (status, _) = raw.send(body.replace("ID", &(id + 1).to_string())).await;
        statuses.push(status);
    }
    let records = server.sink.records();
    // Three within the rate, the first past it, the rest counted.
    assert_eq!(records.len(), 4, "{records:#?}");
    assert_eq!(records[2].reason.as_deref(), Some("not_dispatched"));
    // Past the rate, the rate is checked first: each is answered 429 (the first recorded
    // as that 429, the rest counted), not with the MCP layer's protocol error (an
    // invalid-params error in a 200 stream) while its record says 429.
    assert_eq!(
        (records[3].status, records[3].reason.as_deref()),
        (429, Some("rate_limited"))
    );
    assert!(statuses[..3].iter().all(|&s| s != 429), "{statuses:?}");
    assert!(statuses[3..].iter().all(|&s| s == 429), "{statuses:?}");
    server.server.flush_rate_limited().await;
    let records = server.sink.records();
    // One count per kind of request counted: 9 calls, 8 reads, 9 prompts.
    use aac_tools::audit::CallKind;
    assert_eq!(records.len(), 7, "{records:#?}");
    let counts: Vec<_> = records[4..]
        .iter()
        .map(|r| {
            (
                r.kind,
                r.arguments["suppressed"].as_u64(),
                r.principal.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [
            (CallKind::Tool, Some(9), Some("alice")),
            (CallKind::Resource, Some(8), Some("alice")),
            (CallKind::Prompt, Some(9), Some("alice")),
        ],
        "{records:#?}"
    );
}

/// The reference server's `trigger_autopilot` (`rate = "30/min"`) over REST: past 30 calls
/// of one user in a minute, HTTP 429 with `Retry-After`, and one record of it.
#[tokio::test]
async fn a_tools_own_rate_answers_429_with_retry_after_over_rest() {
    let app = common::AacWorkflow::new();
    let (_server, url) = app.spawn_http();
    let base = url.trim_end_matches("/mcp");
    let client = reqwest::Client::new();
    let post = |tool: &str, body: serde_json::Value| {
        client
            .post(format!("{base}/tools/{tool}"))
            .bearer_auth(&app.token)
            .json(&body)
            .send()
    };
    let assigned = post(
        "assign_issue_to_agent",
        serde_json::json!({"issue_id": "AAC-1", "agent": "autopilot"}),
    )
    .await
    .unwrap();
    assert_eq!(assigned.status(), 200);
    for _ in 0..30 {
        let run = post(
            "trigger_autopilot",
            serde_json::json!({"issue_id": "AAC-1"}),
        )
        .await
        .unwrap();
        assert_eq!(run.status(), 200);
    }
    let limited = post(
        "trigger_autopilot",
        serde_json::json!({"issue_id": "AAC-1"}),
    )
    .await
    .unwrap();
    assert_eq!(limited.status(), 429);
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let body: serde_json::Value = limited.json().await.unwrap();
    assert_eq!(body["reason"], "rate_limited");
    // Other tools of the same user are not limited by it.
    let read = post("get_issue", serde_json::json!({"issue_id": "AAC-1"}))
        .await
        .unwrap();
    assert_eq!(read.status(), 200);

    let records = app.audit();
    let limited: Vec<_> = records
        .iter()
        .filter(|r| r["reason"] == "rate_limited")
        .collect();
    assert_eq!(limited.len(), 1, "{limited:?}");
    assert_eq!(limited[0]["tool"], "trigger_autopilot");
    assert_eq!(limited[0]["principal"], "alice");
    assert_eq!(limited[0]["transport"], "http");
    assert_eq!(limited[0]["status"], 429);
}

/// A token-less flood of bodies over the limit, to `/mcp` and to REST: each is answered
/// (413, then 429), and the records stay within the peer's rate (60 a minute) plus one
/// count, however many requests came.
#[tokio::test]
async fn a_flood_of_oversized_token_less_bodies_costs_a_bounded_trail() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    let body = vec![b'x'; aac_tools::http::DEFAULT_MAX_BODY_BYTES + 1];
    let mut answered = [0usize; 2];
    for i in 0..200 {
        let url = if i % 2 == 0 {
            server.mcp()
        } else {
            format!("{}/tools/add_note", server.base)
        };
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            413 => answered[0] += 1,
            429 => answered[1] += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(answered[0] + answered[1], 200);
    assert!(answered[1] >= 100, "past the rate, 429: {answered:?}");
    let records = server.sink.records();
    assert!(
        (60..=63).contains(&records.len()),
        "records within the rate, not one per request: {}",
        records.len()
    );
    assert!(
        records
            .iter()
            .all(|r| r.reason.as_deref() == Some("body_too_large") && r.principal.is_none())
    );
}

/// A flood that stops for good still leaves its count: `serve` records what the rate
/// limit counted when it stops (and every few seconds while it runs).
#[tokio::test]
async fn the_count_of_a_flood_that_stops_is_recorded_when_the_server_stops() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    for _ in 0..75 {
        let _ = client
            .post(format!("{}/tools/list_notes", server.base))
            .body("{}")
            .send()
            .await
            .unwrap();
    }
    let before = server.sink.records().len();
    assert!((60..=62).contains(&before), "{before}");
    let server = server.stop().await;
    let records = server.sink.records();
    let counts: u64 = records
        .iter()
        .filter(|r| r.tool == "(rate limited)")
        .map(|r| r.arguments["suppressed"].as_u64().unwrap())
        .sum();
    let recorded = records
        .iter()
        .filter(|r| r.tool != "(rate limited)")
        .count() as u64;
    assert_eq!(
        recorded + counts,
        75,
        "every refusal recorded or counted: {records:?}"
    );
}

/// A request hyper cannot read as HTTP/1.1 is answered by hyper before any route (414 for
/// a URI over its limit, 431 past 100 headers, 400 for a `Content-Length` repeated with
/// different values or a control byte in a header), or closed unanswered (HTTP/2's
/// preface); each is a refusal, and leaves its record: a call of `(unknown)` by nobody
/// known, refused by the protocol.
#[tokio::test]
async fn requests_hyper_refuses_before_any_route_are_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let many_headers: String = (0..120).map(|i| format!("X-Header-{i}: v\r\n")).collect();
    let cases: Vec<(String, &str, u16, &str)> = vec![
        (
            format!(
                "GET /tools/{} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                "a".repeat(70_000)
            ),
            "HTTP/1.1 414",
            414,
            "uri_too_long",
        ),
        (
            format!("POST /tools/list_notes HTTP/1.1\r\nHost: 127.0.0.1\r\n{many_headers}\r\n"),
            "HTTP/1.1 431",
            431,
            "headers_too_large",
        ),
        (
            "POST /tools/list_notes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\
             Content-Length: 3\r\n\r\n{}"
                .to_owned(),
            "HTTP/1.1 400",
            400,
            "unreadable_request",
        ),
        (
            "POST /tools/list_notes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\u{1}b\r\n\r\n"
                .to_owned(),
            "HTTP/1.1 400",
            400,
            "unreadable_request",
        ),
        (
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_owned(),
            "",
            400,
            "http2_not_served",
        ),
    ];
    let mut expected = Vec::new();
    for (request, answer_starts, status, reason) in &cases {
        let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let answer = until_closed(&mut stream).await;
        if answer_starts.is_empty() {
            assert_eq!(answer, "", "{reason}: closed unanswered");
        } else {
            assert!(answer.starts_with(answer_starts), "{reason}: {answer}");
        }
        expected.push((*status, reason.to_string()));
    }
    // Each record is written as its connection ends, after the answer.
    let started = Instant::now();
    while server.sink.records().len() < cases.len() && started.elapsed() < GUARD {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let records = server.sink.records();
    assert_eq!(records.len(), cases.len(), "{records:?}");
    let mut got: Vec<(u16, String)> = records
        .iter()
        .map(|r| (r.status, r.reason.clone().unwrap_or_default()))
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    for record in &records {
        assert_eq!(record.tool, "(unknown)", "{record:?}");
        assert_eq!(record.outcome, Outcome::Denied, "{record:?}");
        assert_eq!(record.check, Some(aac_tools::audit::Check::Protocol));
        assert_eq!(record.principal, None, "{record:?}");
        assert_eq!(record.transport, "http", "{record:?}");
    }
    // A valid client is served as before.
    assert_eq!(valid_call(&server).await, 200);
    // The same `Content-Length` repeated is one length (RFC 9110 §8.6 lets a recipient
    // read it so): served, and recorded once as the call it is.
    server.sink.clear();
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    let request = format!(
        "POST /tools/list_notes HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
         Content-Length: 2\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        server.fixture.full
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].tool, "list_notes");
    assert_eq!(records[0].status, 200);
}

/// A connection buffers at most `MAX_HEAD_BYTES` of a request's head: a head that fills
/// them without ending is answered 431 and recorded at once, as one with too many headers
/// is (hyper's default buffer, ~400 KB, held each dribbling connection's headers until the
/// header timeout). A head well within it (a 60 KB header) is served, and a URI over
/// hyper's limit still gets 414 (`requests_hyper_refuses_before_any_route_are_recorded`).
#[tokio::test]
async fn a_head_past_the_buffer_bound_is_431_and_recorded() {
    let server = TestServer::start(
        HttpOptions::default().header_read_timeout(Duration::from_secs(3)),
        Options::default(),
    )
    .await;
    let mut head = "POST /tools/list_notes HTTP/1.1\r\nHost: 127.0.0.1\r\n".to_owned();
    while head.len() < aac_tools::http::MAX_HEAD_BYTES {
        head.push_str(&format!("X-Pad-{}: {}\r\n", head.len(), "p".repeat(4000)));
    }
    // Exactly the bound, all of it read by the server: its answer is not lost to a reset.
    head.truncate(aac_tools::http::MAX_HEAD_BYTES);
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not after the header timeout"
    );
    while server.sink.records().is_empty() && started.elapsed() < GUARD {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].status, 431);
    assert_eq!(records[0].reason.as_deref(), Some("headers_too_large"));
    assert_eq!(records[0].tool, "(unknown)");

    let response = reqwest::Client::new()
        .post(format!("{}/tools/list_notes", server.base))
        .bearer_auth(&server.fixture.full)
        .header("x-pad", "p".repeat(60_000))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Requests hyper refuses count against their peer's rate of refusals before
/// authentication, as a token-less call does: a flood of them costs a bounded trail.
#[tokio::test]
async fn a_flood_of_unreadable_requests_costs_a_bounded_trail() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let many_headers: String = (0..120).map(|i| format!("X-Header-{i}: v\r\n")).collect();
    let request =
        format!("POST /tools/list_notes HTTP/1.1\r\nHost: 127.0.0.1\r\n{many_headers}\r\n");
    let sent = 150;
    for _ in 0..sent {
        let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        assert!(until_closed(&mut stream).await.starts_with("HTTP/1.1 431"));
    }
    // Every refusal within the rate is recorded; the rest are only counted.
    let started = Instant::now();
    let mut seen = 0;
    while started.elapsed() < Duration::from_millis(500) || seen != server.sink.records().len() {
        seen = server.sink.records().len();
        tokio::time::sleep(Duration::from_millis(100)).await;
        if started.elapsed() > GUARD {
            break;
        }
    }
    let records = server.sink.records();
    assert!(
        (60..sent).contains(&records.len()),
        "{} records for {sent} refusals",
        records.len()
    );
    assert!(
        records
            .iter()
            .all(|r| r.reason.as_deref() == Some("headers_too_large")
                || r.tool == "(rate limited)"),
        "{records:?}"
    );
}

/// Send `head` (a request whose body has not all come) on a new connection, and keep the
/// connection open: the first bytes the server answers, within [`GUARD`].
async fn first_answer(server: &TestServer, head: &str) -> String {
    let mut stream = TcpStream::connect(addr(server)).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(GUARD, stream.read(&mut answer))
        .await
        .expect("an answer within the guard")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// Send `request` on a new connection; the status line of the answer and its body.
async fn exchange(server: &TestServer, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr(server)).await.unwrap();
    stream.write_all(request).await.unwrap();
    until_closed(&mut stream).await
}

/// A `tools/call` of `add_note` as a JSON-RPC body, and the same arguments as a REST body.
const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"x"}}}"#;
const ARGS: &str = r#"{"text":"x"}"#;

/// A request of `body`, JSON, with alice's `token`, whose `Host` (and `Origin`) lines are
/// `host`, closing its connection after the answer.
fn json_request(method: &str, path: &str, host: &str, token: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\n{host}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A chunked body of `bytes`, one chunk.
fn chunked(bytes: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n0\r\n\r\n");
    out
}

/// A body in a transfer coding other than `chunked` is refused unread, 501, and recorded,
/// over REST and `/mcp`: hyper takes the chunks off and hands on the rest still coded, a
/// call no check could read (as with `Content-Encoding`). Plain `chunked` is served.
#[tokio::test]
async fn a_body_in_a_transfer_coding_is_refused_and_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let token = &server.fixture.full;
    let rest = |coding: &str, body: &[u8]| {
        let mut request = format!(
            "POST /tools/add_note HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nTransfer-Encoding: {coding}\r\nConnection: close\r\n\r\n"
        )
        .into_bytes();
        request.extend(chunked(body));
        request
    };
    let answer = exchange(&server, &rest("gzip, chunked", br#"{"text":"coded"}"#)).await;
    assert!(answer.starts_with("HTTP/1.1 501"), "{answer}");
    assert!(answer.contains("unsupported_transfer_encoding"), "{answer}");
    let mut mcp = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Transfer-Encoding: deflate\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    mcp.extend(chunked(b"\x78\x9c\x03\x00\x00\x00\x00\x01"));
    let answer = exchange(&server, &mcp).await;
    assert!(answer.starts_with("HTTP/1.1 501"), "{answer}");
    let answer = exchange(&server, &rest("chunked", br#"{"text":"plain"}"#)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let records = server.sink.records();
    let seen: Vec<(&str, u16, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.status, r.reason.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("add_note", 501, Some("unsupported_transfer_encoding")),
            ("(unknown)", 501, Some("unsupported_transfer_encoding")),
            ("add_note", 200, None),
        ]
    );
    assert_eq!(records[0].principal.as_deref(), Some("alice"));
}

/// A call sent where no route takes it, or with a method its route does not take, is
/// refused 404 or 405 and recorded: a path a proxy in front could read as
/// `/tools/{name}` (`//tools/…`, `/TOOLS/…`) as a call of that tool; a body that carries
/// a `tools/call` as that call (`/%6dcp`, `PATCH /mcp`, the metadata's route); any other
/// body sent under `/mcp` as a call nobody can know. A request elsewhere that carries no
/// call, and one without a body (`PUT /tools/add_note` with none, say), leave none.
#[tokio::test]
async fn calls_sent_where_no_route_takes_them_are_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let token = &server.fixture.full;
    let send = |method: &str, path: &str, body: &str| {
        json_request(method, path, "Host: 127.0.0.1", token, body)
    };
    let cases = [
        (send("POST", "//tools/add_note", ARGS), 404, "add_note"),
        (send("POST", "/TOOLS/add_note", ARGS), 404, "add_note"),
        (send("POST", "/tools%2Fadd_note", ARGS), 404, "add_note"),
        (
            send("POST", "/x/%2e%2e/tools/add_note", ARGS),
            404,
            "add_note",
        ),
        (send("PUT", "/tools/add_note", ARGS), 405, "add_note"),
        (send("POST", "/%6dcp", CALL), 404, "add_note"),
        (send("PATCH", "/mcp", CALL), 405, "add_note"),
        (
            send("POST", "/.well-known/oauth-protected-resource/mcp", CALL),
            405,
            "add_note",
        ),
        (send("POST", "/mcp/x", "not json"), 404, "(unknown)"),
    ];
    for (request, status, _) in &cases {
        let answer = exchange(&server, request.as_bytes()).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{request}: {answer}"
        );
    }
    // Nothing that could be a call: no record.
    for request in [
        send("POST", "/elsewhere", ARGS),
        "GET /tools/add_note HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_owned(),
        "OPTIONS /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_owned(),
        send("PUT", "/tools/add_note", ""),
    ] {
        let answer = exchange(&server, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 40"), "{request}: {answer}");
    }
    let records = server.sink.records();
    let seen: Vec<(u16, &str)> = records
        .iter()
        .map(|r| (r.status, r.tool.as_str()))
        .collect();
    let expected: Vec<(u16, &str)> = cases.iter().map(|(_, s, t)| (*s, *t)).collect();
    assert_eq!(seen, expected, "{records:?}");
    for record in &records {
        assert_eq!(record.outcome, Outcome::Denied);
        assert_eq!(record.check, Some(aac_tools::audit::Check::Protocol));
        assert_eq!(record.principal.as_deref(), Some("alice"), "{record:?}");
    }
    // Nothing ran: the one note is the one a valid call adds now.
    assert_eq!(valid_call(&server).await, 200);
}

/// The same variants with a foreign `Origin` or `Host`: refused 403 by the guard before
/// any route, and recorded as the guard's refusal of what they carry.
#[tokio::test]
async fn calls_the_guard_refuses_off_any_route_are_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let token = &server.fixture.full;
    let origin = "Host: 127.0.0.1\r\nOrigin: http://evil.example";
    let host = "Host: evil.example";
    let send = |method: &str, path: &str, foreign: &str, body: &str| {
        json_request(method, path, foreign, token, body)
    };
    let cases = [
        (send("PUT", "/mcp", origin, CALL), "origin_not_allowed"),
        (send("PATCH", "/mcp", host, CALL), "host_not_allowed"),
        (
            send("POST", "//tools/add_note", origin, ARGS),
            "origin_not_allowed",
        ),
        (
            send("PUT", "/tools/add_note", host, ARGS),
            "host_not_allowed",
        ),
        (
            send("POST", "/tools%2Fadd_note", origin, ARGS),
            "origin_not_allowed",
        ),
        (send("POST", "/%6dcp", host, CALL), "host_not_allowed"),
    ];
    for (request, _) in &cases {
        let answer = exchange(&server, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{request}: {answer}");
    }
    let records = server.sink.records();
    let seen: Vec<(&str, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.reason.as_deref()))
        .collect();
    let expected: Vec<(&str, Option<&str>)> = cases
        .iter()
        .map(|(_, reason)| ("add_note", Some(*reason)))
        .collect();
    assert_eq!(seen, expected, "{records:?}");
    assert!(records.iter().all(|r| r.status == 403));
}

/// A body of more JSON values than `max_body_values` is refused 413 unparsed (parsed,
/// 1 MiB of `{"":0}` took 100 MB before the token was looked at), over `/mcp` and REST,
/// with a token or without, and recorded once as the call it names; one under the limit
/// is read as ever, and the limit is the server's to raise.
#[tokio::test]
async fn a_body_of_too_many_values_is_refused_unparsed_and_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let pad = |objects: usize| vec![serde_json::json!({"": 0}); objects];
    let call = |objects: usize| {
        serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "list_notes", "arguments": {"pad": pad(objects)}}})
        .to_string()
    };
    let client = reqwest::Client::new();
    let post = |body: String, token: Option<&str>, path: &str| {
        let mut request = client
            .post(format!("{}{path}", server.base))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    for token in [None, Some(server.fixture.full.as_str())] {
        let response = post(call(30_000), token, "/mcp").await.unwrap();
        assert_eq!(response.status(), 413, "{token:?}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["reason"], "body_too_large", "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("65536 JSON values"),
            "{body}"
        );
    }
    let body = serde_json::json!({"pad": pad(30_000)}).to_string();
    let response = post(body, Some(&server.fixture.full), "/tools/list_notes")
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let records = server.sink.records();
    let seen: Vec<(&str, u16, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.status, r.reason.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [("list_notes", 413, Some("body_too_large")); 3],
        "{records:?}"
    );
    // Under the limit: read as ever (the call is refused for its arguments, not its size).
    let response = post(call(10_000), Some(&server.fixture.full), "/mcp")
        .await
        .unwrap();
    assert_ne!(response.status(), 413);
    server.stop().await;

    let server = TestServer::start(
        HttpOptions::default().max_body_values(1_000_000),
        Options::default(),
    )
    .await;
    let response = reqwest::Client::new()
        .post(format!("{}/mcp", server.base))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .bearer_auth(&server.fixture.full)
        .body(call(30_000))
        .send()
        .await
        .unwrap();
    assert_ne!(response.status(), 413);
    server.stop().await;
}
