//! The HTTP surface end to end, over real loopback HTTP: `/mcp` (401, 403 with the
//! step-up challenge, sessions, stateless mode, bad input), `/tools`, `POST
//! /tools/{name}`, the RFC 9728 metadata, Host/Origin checks, the body limit, JWTs beside
//! opaque tokens, and exactly one audit record per `tools/call` attempt.

mod common;

use aac_tools::audit::{Check, Outcome};
use aac_tools::http::HttpOptions;
use aac_tools::jwt::JwtVerifier;
use aac_tools::{CONFIRM_REQUIRED, Registry};
use common::{RawMcp, TestServer, messages, tool_names};
use interop_tests::Options;
use serde_json::{Value, json};

fn challenge(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn mcp_without_a_valid_token_is_401_with_the_metadata_url() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", server.base);
    let raw = RawMcp::new(&server.mcp(), None);

    // initialize, without a token
    let response = raw
        .post()
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        challenge(&response),
        format!(r#"Bearer resource_metadata="{metadata}""#)
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "missing_token");

    // a tools/call with a bad token: 401 invalid_token, recorded once
    let raw = RawMcp::new(&server.mcp(), Some("aac_0123456789ab_nope"));
    let response = raw
        .post()
        .body(r#"{"jsonrpc":"2.0","id":"r-1","method":"tools/call","params":{"name":"add_note","arguments":{"text":"secret"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let header = challenge(&response);
    assert!(
        header.starts_with(r#"Bearer error="invalid_token", "#),
        "{header}"
    );
    assert!(
        header.ends_with(&format!(r#"resource_metadata="{metadata}""#)),
        "{header}"
    );

    // GET and DELETE need a token too
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = reqwest::Client::new()
            .request(method, server.mcp())
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
    }

    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record.tool, "add_note");
    assert_eq!(record.outcome, Outcome::Denied);
    assert_eq!(record.check, Some(Check::Authenticate));
    assert_eq!(record.reason.as_deref(), Some("invalid_token"));
    assert_eq!(record.status, 401);
    assert_eq!(record.transport, "streamable_http");
    assert_eq!(record.request_id.as_deref(), Some("r-1"));
    assert_eq!(record.principal, None);
    // redacted, not verbatim
    assert_ne!(record.arguments["text"], "secret");
    assert!(
        record.arguments["text"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
}

#[tokio::test]
async fn missing_scope_is_a_real_403_recorded_once() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    raw.initialize().await;

    let response = raw
        .post()
        .body(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_note","arguments":{"id":1,"confirm":true}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(
        challenge(&response),
        format!(
            r#"Bearer error="insufficient_scope", scope="notes:delete", resource_metadata="{}/.well-known/oauth-protected-resource/mcp""#,
            server.base
        )
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "insufficient_scope");

    // the session still serves what the token allows
    let (status, result) = raw.call(8, "list_notes", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(result.unwrap()["result"]["isError"], false);

    let records = server.sink.records();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].tool, "delete_note");
    assert_eq!(records[0].check, Some(Check::Scope));
    assert_eq!(records[0].principal.as_deref(), Some("bob"));
    assert_eq!(records[0].scopes_provided, vec!["notes:read".to_owned()]);
    assert_eq!(records[0].request_id.as_deref(), Some("7"));
    assert_eq!(records[0].arguments["confirm"], true);
    assert_eq!(records[1].tool, "list_notes");
    assert_eq!(records[1].outcome, Outcome::Success);
    assert_eq!(records[1].principal.as_deref(), Some("bob"));
}

/// The body names the tool that runs, and so the tool the HTTP layer checks and records:
/// an `Mcp-Name` header that names another (undefined before 2026-07-28, where rmcp
/// refuses the mismatch) neither hides a write behind a read nor blames a read for a
/// write. Without a token the refusal's record names the body's tool too.
#[tokio::test]
async fn the_body_names_the_tool_whatever_the_mcp_name_header_says() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    raw.initialize().await;
    let body = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#;

    // A read that the header calls a write: the read is what runs, and the reader may.
    let response = raw
        .post()
        .header("mcp-name", "add_note")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let result = messages(&response.text().await.unwrap()).pop().unwrap();
    assert_ne!(result["result"]["isError"], true, "{result}");

    // A write that the header calls a read: refused by the HTTP layer, a real 403.
    let lying = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"x"}}}"#;
    let response = raw
        .post()
        .header("mcp-name", "list_notes")
        .body(lying)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert!(challenge(&response).contains(r#"scope="notes:write""#));

    // No token: the record names the body's tool.
    let anonymous = RawMcp::new(&server.mcp(), None);
    let response = anonymous
        .post()
        .header("mcp-name", "list_notes")
        .body(lying)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    let records = server.sink.records();
    let checks: Vec<_> = records.iter().map(|r| (r.tool.as_str(), r.check)).collect();
    assert_eq!(
        checks,
        [
            ("list_notes", None),
            ("add_note", Some(Check::Scope)),
            ("add_note", Some(Check::Authenticate))
        ]
    );
}

#[tokio::test]
async fn sessions_start_with_initialize_and_end_with_delete() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    let init = raw.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["serverInfo"]["name"], "aac-interop");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    assert!(init["result"]["capabilities"]["logging"].is_object());
    let session = raw.session.clone().expect("a session id");

    // without the session: 400; with an unknown one: 404
    let mut other = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    let (status, _) = other
        .send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await;
    assert_eq!(status, 400);
    other.session = Some("not-a-session".into());
    let (status, _) = other
        .send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await;
    assert_eq!(status, 404);

    // logging/setLevel and ping answer {}
    let (status, msgs) = raw
        .send(r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}"#)
        .await;
    assert_eq!((status, &msgs.last().unwrap()["result"]), (200, &json!({})));
    let (status, msgs) = raw
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#)
        .await;
    assert_eq!((status, &msgs.last().unwrap()["result"]), (200, &json!({})));

    // tools/list is the registry's objects, exactly
    let (_, msgs) = raw
        .send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#)
        .await;
    let listed = msgs.last().unwrap()["result"]["tools"].clone();
    let registry = Registry::collect_module("interop_tests::tools").unwrap();
    let expected: Vec<Value> = registry.tools().iter().map(|t| t.json().clone()).collect();
    assert_eq!(listed, Value::Array(expected));

    // DELETE ends the session
    let delete = |s: &str| {
        reqwest::Client::new()
            .delete(server.mcp())
            .bearer_auth(&server.fixture.full)
            .header("mcp-session-id", s.to_owned())
            .send()
    };
    assert_eq!(delete(&session).await.unwrap().status(), 204);
    let (status, _) = raw
        .send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#)
        .await;
    assert_eq!(status, 404);
}

/// A `DELETE` naming a session that is not there (never was, ended, or is another
/// principal's) is answered 404, as a POST naming it is (it was 204): the same JSON for
/// the three, and another principal's session lives on.
#[tokio::test]
async fn a_delete_of_a_session_that_is_not_there_is_404() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut alice = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    alice.initialize().await;
    let alices = alice.session.clone().unwrap();
    let mut ended = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    ended.initialize().await;
    let ended = ended.session.clone().unwrap();
    let delete = |token: &str, session: &str| {
        reqwest::Client::new()
            .delete(server.mcp())
            .bearer_auth(token)
            .header("mcp-session-id", session.to_owned())
            .send()
    };
    let reader = server.fixture.reader.clone();
    assert_eq!(delete(&reader, &ended).await.unwrap().status(), 204);
    let mut answers = Vec::new();
    for session in [&ended, "6f1d2c3b-0a9e-4d8c-b7a6-f5e4d3c2b1a0", &alices] {
        let response = delete(&reader, session).await.unwrap();
        let status = response.status().as_u16();
        let kind = response.headers().get("content-type").cloned();
        let text = response.text().await.unwrap();
        assert_eq!(status, 404, "{session}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["reason"], "session_not_found", "{body}");
        answers.push((kind, body));
    }
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
    let (status, result) = alice.call(2, "list_notes", json!({})).await;
    assert_eq!(status, 200, "alice's session lives on");
    assert_eq!(result.unwrap()["result"]["isError"], false);
    assert_eq!(
        delete(&server.fixture.full, &alices)
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        delete(&server.fixture.full, &alices)
            .await
            .unwrap()
            .status(),
        404
    );
}

/// A GET or a DELETE of `/mcp` takes no body: one carrying a call (to one's own session,
/// another's, or none) is refused 400 and the call recorded. rmcp ignored the body: the
/// DELETE ended the session (204) or got its 404, and the call was in no record.
#[tokio::test]
async fn a_get_or_delete_with_a_call_in_its_body_is_refused_and_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut alice = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    alice.initialize().await;
    let alices = alice.session.clone().unwrap();
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete_note","arguments":{"id":1,"confirm":true}}}"#;
    let before = server.sink.records().len();
    let http = reqwest::Client::new();
    for (method, session) in [
        (reqwest::Method::DELETE, alices.as_str()),
        (
            reqwest::Method::DELETE,
            "6f1d2c3b-0a9e-4d8c-b7a6-f5e4d3c2b1a0",
        ),
        (reqwest::Method::GET, alices.as_str()),
    ] {
        let response = http
            .request(method.clone(), server.mcp())
            .bearer_auth(&server.fixture.full)
            .header("mcp-session-id", session)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(call)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{method} {session}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["reason"], "body_not_allowed", "{body}");
    }
    let records = server.sink.records();
    let new = &records[before..];
    assert_eq!(new.len(), 3, "{new:#?}");
    assert!(
        new.iter()
            .all(|r| r.tool == "delete_note" && r.status == 400),
        "{new:#?}"
    );
    // The session was not ended by the DELETE that carried a call.
    let (status, result) = alice.call(4, "list_notes", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(result.unwrap()["result"]["isError"], false);
}

/// The session's standalone stream (`GET /mcp`), its messages forwarded to a channel.
async fn standalone_stream(raw: &RawMcp) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    let response = raw
        .http
        .get(&raw.url)
        .bearer_auth(raw.token.as_deref().unwrap())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", raw.session.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    forward_events(response)
}

/// The JSON-RPC messages of an SSE response, forwarded to a channel as they arrive.
/// Dropping the channel closes the response (the client leaves the stream).
fn forward_events(response: reqwest::Response) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    use futures_util::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = response.bytes_stream();
        let mut buffer = String::new();
        loop {
            let chunk = tokio::select! {
                chunk = stream.next() => chunk,
                () = tx.closed() => return,
            };
            let Some(Ok(chunk)) = chunk else {
                return;
            };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                for message in messages(&event) {
                    if tx.send(message).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// The next log message of the standalone stream (a guard, not a timing assertion:
/// it only keeps a broken server from hanging the test).
async fn next_log(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>) -> Value {
    loop {
        let message = tokio::time::timeout(std::time::Duration::from_secs(30), rx.recv())
            .await
            .expect("a log message within 30 s")
            .expect("the stream is open");
        if message["method"] == "notifications/message" {
            return message["params"].clone();
        }
    }
}

#[tokio::test]
async fn a_session_belongs_to_the_principal_that_opened_it() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut alice = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    alice.initialize().await;
    let bob = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    // What bob gets for POSTs (a call, a body that is not JSON, a batch), a GET and a
    // DELETE naming a session: status, type, body.
    let (bob, server) = (&bob, &server);
    let answers = |session: String| async move {
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#;
        let mut answers = Vec::new();
        for request in [
            bob.post().header("mcp-session-id", &session).body(call),
            bob.post()
                .header("mcp-session-id", &session)
                .body("{not json"),
            bob.post()
                .header("mcp-session-id", &session)
                .body(format!("[{call}]")),
            bob.http
                .get(server.mcp())
                .bearer_auth(&server.fixture.reader)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", &session),
            bob.http
                .delete(server.mcp())
                .bearer_auth(&server.fixture.reader)
                .header("mcp-session-id", &session),
            // Refused by a check of ours before the session is looked up: a call bob's
            // scopes do not allow, a notification, a body of another type.
            bob.post().header("mcp-session-id", &session).body(
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"x"}}}"#,
            ),
            bob.post().header("mcp-session-id", &session).body(
                r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#,
            ),
            bob.post()
                .header("mcp-session-id", &session)
                .header("content-type", "text/plain")
                .body(call),
        ] {
            let response = request.send().await.unwrap();
            let kind = response.headers().get("content-type").cloned();
            answers.push((
                response.status().as_u16(),
                kind,
                response.text().await.unwrap(),
            ));
        }
        answers
    };
    let theirs = answers(alice.session.clone().unwrap()).await;
    assert_eq!(theirs[0].0, 404, "{theirs:?}");
    assert_eq!(
        theirs[3].0, 404,
        "bob cannot read alice's standalone stream"
    );
    // Alice's session is, to bob, exactly a session that does not exist.
    let none = answers("6f1d2c3b-0a9e-4d8c-b7a6-f5e4d3c2b1a0".to_owned()).await;
    assert_eq!(theirs, none);
    let (status, result) = alice.call(2, "list_notes", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(result.unwrap()["result"]["isError"], false);

    // bob's calls on alice's session were attempts, refused and recorded as answered,
    // each with the status a session that never was got (the call, the batch, the
    // scope, the notification, the body of another type); the record of one rmcp
    // refused as of no session says it was another's. His body that is not JSON, his
    // GETs and his DELETEs were not tool calls.
    let records = server.sink.records();
    let checks: Vec<_> = records.iter().map(|r| r.check).collect();
    let (session, protocol, scope) = (
        Some(Check::Session),
        Some(Check::Protocol),
        Some(Check::Scope),
    );
    assert_eq!(
        checks,
        [
            session, protocol, scope, protocol, session, //
            protocol, protocol, scope, protocol, protocol, //
            None
        ],
        "{records:?}"
    );
    let statuses: Vec<_> = records.iter().map(|r| r.status).collect();
    assert_eq!(statuses[..5], statuses[5..10], "{records:?}");
    let records = [records[0].clone(), records[10].clone()];
    let refused = &records[0];
    assert_eq!(refused.tool, "list_notes");
    assert_eq!(refused.outcome, Outcome::Denied);
    assert_eq!(refused.check, Some(Check::Session));
    assert_eq!(refused.reason.as_deref(), Some("session_not_found"));
    assert_eq!(refused.status, 404);
    assert_eq!(refused.request_id.as_deref(), Some("1"));
    assert_ne!(
        refused.principal, records[1].principal,
        "bob's, not alice's"
    );
    assert!(refused.principal.is_some());
    assert_eq!(records[1].outcome, Outcome::Success);
}

#[tokio::test]
async fn progress_tokens_are_echoed_verbatim_and_logs_follow_set_level() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let mut logs = standalone_stream(&raw).await;

    let call = |id: i64, to: u32, token: Value| {
        json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "count_slowly", "arguments": {"to": to}, "_meta": {"progressToken": token}},
        })
        .to_string()
    };
    // progress rides the call's own stream, with the client's token as sent
    let (_, msgs) = raw.send(call(1, 2, json!(42))).await;
    let progress: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{msgs:#?}");
    assert_eq!(progress[0]["params"]["progressToken"], json!(42));
    assert!(progress[0]["params"]["progressToken"].is_i64());
    assert_eq!(progress[1]["params"]["progress"], json!(2.0));
    assert_eq!(progress[1]["params"]["total"], json!(2.0));
    assert_eq!(msgs.last().unwrap()["id"], 1);
    assert_eq!(msgs.last().unwrap()["result"]["isError"], false);
    // log messages (default level: info) ride the session's standalone stream
    for step in [1, 2] {
        let log = next_log(&mut logs).await;
        assert_eq!(log["level"], "info");
        assert_eq!(log["logger"], "count_slowly");
        assert_eq!(log["data"], json!({"step": step}));
    }

    // a string token stays a string; at level `error` the info logs are not sent
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"error"}}"#)
        .await;
    let (_, msgs) = raw.send(call(3, 2, json!("p-1"))).await;
    let progress: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2);
    assert_eq!(progress[0]["params"]["progressToken"], json!("p-1"));
    raw.send(r#"{"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{"level":"debug"}}"#)
        .await;
    raw.send(call(5, 3, json!(5))).await;
    // the stream is ordered: had call 3 logged, its steps 1, 2 would come first
    let steps: Vec<Value> = [
        next_log(&mut logs).await,
        next_log(&mut logs).await,
        next_log(&mut logs).await,
    ]
    .into_iter()
    .map(|log| log["data"]["step"].clone())
    .collect();
    assert_eq!(steps, [json!(1), json!(2), json!(3)]);
}

/// A body that is shallow but not JSON this server can read (a lone surrogate escape,
/// bytes that are not UTF-8, a number out of range, a body in UTF-16) is answered with
/// what serde_json says, a parse error; that it nests too deep only when it does. A body
/// in UTF-16 is no notification, whatever its id: a parse error too. Each leaves one
/// record.
#[tokio::test]
async fn a_body_that_is_not_json_gets_the_parse_error_that_says_why() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let read =
        r#"{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"notes://all"}}"#;
    let utf16: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(read.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"add_note","arguments":{{"text":{}1{}}}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let mut not_utf8 =
        br#"{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"x","arguments":{"a":"#
            .to_vec();
    not_utf8.extend_from_slice(b"\"\xff\xfe\"}}}");
    let cases: [(Vec<u8>, &str); 5] = [
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"notes://\ud800"}}"#
                .to_vec(),
            "hex escape",
        ),
        (not_utf8, "not JSON this server can read"),
        (
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_notes","arguments":{}},"x":1e999}"#
                .to_vec(),
            "number out of range",
        ),
        (utf16, "not JSON this server can read"),
        (deep.into_bytes(), "more than 128 levels deep"),
    ];
    for (body, says) in cases {
        server.sink.clear();
        let shown = String::from_utf8_lossy(&body).into_owned();
        let response = raw.post().body(body).send().await.unwrap();
        assert_eq!(response.status(), 400, "{shown}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32700, "{shown}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{shown}: {answer}");
        assert_eq!(
            message.contains("128 levels"),
            says.contains("128 levels"),
            "{shown}: {answer}"
        );
        assert_eq!(server.sink.records().len(), 1, "{shown}");
    }
}

#[tokio::test]
async fn bad_input_gets_errors_and_the_server_keeps_serving() {
    let server = TestServer::start(
        HttpOptions::default().max_body_bytes(4096),
        Options::default(),
    )
    .await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;

    // Not JSON, or JSON that is not one JSON-RPC message: 400 with the JSON-RPC error
    // (no id), not rmcp's 415 "fail to deserialize request body".
    for (body, code) in [
        ("{not json", -32700),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            -32600,
        ),
        (
            r#"[[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]]"#,
            -32600,
        ),
        (r#""tools/list""#, -32600),
        (r#"{"jsonrpc":"2.0","id":1}"#, -32600),
        // Arguments nested past what a JSON reader follows: not "not a JSON-RPC request".
        (
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"add_note","arguments":{{"text":{}1{}}}}}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            ),
            -32700,
        ),
    ] {
        let response = raw.post().body(body.to_owned()).send().await.unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        assert_eq!(answer["id"], Value::Null, "{body}: {answer}");
        assert!(
            !answer.to_string().contains("deserialize"),
            "{body}: {answer}"
        );
    }
    // wrong JSON-RPC shapes
    for body in [
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"id":1,"method":"tools/list"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
        r#""tools/list""#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"add_note"}"#,
    ] {
        let response = raw.post().body(body).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let is_jsonrpc_error = (200..300).contains(&status)
            && messages(&text)
                .last()
                .is_some_and(|m| m.get("error").is_some());
        assert!(
            (400..500).contains(&status) || is_jsonrpc_error,
            "{body}: {status} {text}"
        );
    }
    // unknown method: a JSON-RPC "method not found"
    let (status, msgs) = raw
        .send(r#"{"jsonrpc":"2.0","id":5,"method":"no/such/method"}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(msgs.last().unwrap()["error"]["code"], -32601);
    // unknown tool: a tool error, recorded
    let (_, result) = raw.call(6, "no_such_tool", json!({})).await;
    let result = result.unwrap();
    assert_eq!(result["result"]["isError"], true);
    assert_eq!(error_body(&result["result"])["reason"], "unknown_tool");
    // oversized body: 413, recorded (a `tools/call` of a tool its start does not name:
    // `arguments`, past the limit, comes before `name`)
    let big = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "add_note", "arguments": {"text": "x".repeat(8000)}},
    });
    let response = raw.post().body(big.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "body_too_large");
    assert_eq!(body["status"], 413);

    // still serving, and the session still works
    let (status, result) = raw.call(8, "add_note", json!({"text": "still here"})).await;
    assert_eq!(status, 200);
    assert_eq!(result.unwrap()["result"]["structuredContent"]["id"], 1);

    let tools: Vec<(String, Option<Check>)> = server
        .sink
        .records()
        .into_iter()
        .map(|r| (r.tool, r.check))
        .collect();
    // The call nested too deeply is recorded under its tool; the two malformed
    // `tools/call` requests (no name; params that are a string) are recorded too, refused
    // by the MCP layer, their tool unknown.
    assert_eq!(
        tools,
        [
            ("add_note".to_owned(), Some(Check::Protocol)),
            ("(unknown)".to_owned(), Some(Check::Protocol)),
            ("(unknown)".to_owned(), Some(Check::Protocol)),
            ("no_such_tool".to_owned(), Some(Check::FindTool)),
            ("(unknown)".to_owned(), Some(Check::Protocol)),
            ("add_note".to_owned(), None),
        ]
    );
}

/// A `tools/call` the MCP layer refuses before our handler sees it (arguments that are not
/// an object) and a REST call over the body limit still leave their one record each,
/// written before the answer.
#[tokio::test]
async fn refusals_before_the_handler_are_recorded_once() {
    let server = TestServer::start(
        HttpOptions::default().max_body_bytes(4096),
        Options::default(),
    )
    .await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let (status, msgs) = raw
        .send(r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"add_note","arguments":[1,2]}}"#)
        .await;
    let answer = msgs.last().cloned().unwrap_or_default();
    assert!(
        (400..500).contains(&status) || answer.get("error").is_some(),
        "{status} {answer}"
    );
    // rmcp may drop the request just after its answer: wait for the record (bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.sink.records().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record.tool, "add_note");
    assert_eq!(record.outcome, Outcome::Denied);
    assert_eq!(record.check, Some(Check::Protocol));
    assert_eq!(record.reason.as_deref(), Some("not_dispatched"));
    assert_eq!(record.request_id.as_deref(), Some("11"));
    assert_eq!(record.principal.as_deref(), Some("alice"));
    // the array is kept redacted under `$`
    assert!(
        record.arguments["$"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    let response = reqwest::Client::new()
        .post(format!("{}/tools/add_note", server.base))
        .bearer_auth(&server.fixture.full)
        .body(json!({"text": "x".repeat(8000)}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "body_too_large");
    assert_eq!(body["status"], 413);
    let records = server.sink.records();
    assert_eq!(records.len(), 2, "{records:?}");
    let record = &records[1];
    assert_eq!((record.tool.as_str(), record.status), ("add_note", 413));
    assert_eq!(record.outcome, Outcome::Denied);
    assert_eq!(record.transport, "http");
}

/// A `tools/call` without an id is a notification: nothing would ever answer it, and rmcp
/// drops it. It is refused 400 (not accepted 202 and never run), and recorded with the
/// status it was answered; the note it asked for is not added.
#[tokio::test]
async fn a_tools_call_sent_as_a_notification_is_refused_as_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    server.sink.clear();
    let response = raw
        .post()
        .body(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"add_note","arguments":{"text":"never"}}}"#)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["reason"], "not_dispatched", "{body}");
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].tool.as_str(),
            records[0].status,
            records[0].check,
            records[0].principal.as_deref()
        ),
        ("add_note", 400, Some(Check::Protocol), Some("alice"))
    );
    // The same with its key written with an escape (`m\u0065thod` is `method`): refused
    // as recorded, not accepted 202.
    server.sink.clear();
    let response = raw
        .post()
        .body(r#"{"jsonrpc":"2.0","m\u0065thod":"tools/call","params":{"name":"add_note","arguments":{"text":"never"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].status, 400);
    // A read, a prompt or a completion without an id: the same.
    server.sink.clear();
    for body in [
        r#"{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"notes://all"}}"#,
        r#"{"jsonrpc":"2.0","method":"prompts/get","params":{"name":"summarize_notes"}}"#,
    ] {
        let response = raw.post().body(body).send().await.unwrap();
        assert_eq!(response.status(), 400, "{body}");
    }
    let statuses: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .map(|r| (r.kind, r.status))
        .collect();
    assert_eq!(
        statuses,
        [
            (aac_tools::audit::CallKind::Resource, 400),
            (aac_tools::audit::CallKind::Prompt, 400)
        ]
    );
    // Calls behind it in the same body are recorded too.
    server.sink.clear();
    let response = raw
        .post()
        .body(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"list_notes","arguments":{}}}{"jsonrpc":"2.0","id":"p1","method":"tools/call","params":{"name":"delete_note","arguments":{"id":1,"confirm":true}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let seen: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .map(|r| (r.tool, r.request_id))
        .collect();
    assert_eq!(
        seen,
        [
            ("list_notes".to_owned(), None),
            ("delete_note".to_owned(), Some("p1".to_owned()))
        ]
    );
    // With an id, the same call runs: the session is still good.
    let (status, answer) = raw.call(25, "list_notes", json!({})).await;
    assert_eq!(status, 200);
    let answer = answer.expect("an answer");
    assert_eq!(
        answer["result"]["structuredContent"]["notes"],
        json!([]),
        "{answer}"
    );
}

/// Every refused request that may carry a `tools/call` leaves exactly one record, however
/// it is dressed: a misleading `Mcp-Method` header, a batch, a repeated key, no token, an
/// unknown token, or a header that contradicts the body (refused inside rmcp).
#[tokio::test]
async fn every_refused_tools_call_is_recorded_once() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let call = r#"{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"x"}}}"#;
    let batch = format!("[{call}]");
    // A batch in a batch is not JSON-RPC; the call in it is recorded once all the same.
    let nested = format!("[[{call}]]");
    let repeated = r#"{"jsonrpc":"2.0","id":22,"method":"tools/list","method":"tools/call","params":{"name":"add_note"}}"#;
    let anonymous = RawMcp::new(&server.mcp(), None);
    let forged = RawMcp::new(&server.mcp(), Some("aac_000000000000_0000"));
    let mut expected = Vec::new();
    for (raw, reason) in [(&anonymous, "missing_token"), (&forged, "invalid_token")] {
        for (body, header, tool) in [
            (call, Some("tools/list"), "add_note"),
            (batch.as_str(), None, "add_note"),
            (nested.as_str(), None, "add_note"),
            (nested.as_str(), Some("tools/call"), "add_note"),
            // What a lenient reader sees (the last key wins), as the stdio framing reads it.
            (repeated, None, "add_note"),
            // found by fuzz/ (gate_probe): no method, but the header says tools/call
            (
                r#"{"jsonrpc":"2.0","id":23,"params":{"name":"add_note"}}"#,
                Some("tools/call"),
                "(unknown)",
            ),
        ] {
            let mut request = raw.post().body(body.to_owned());
            if let Some(method) = header {
                request = request.header("mcp-method", method);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{body}");
            expected.push((
                tool.to_owned(),
                Some(Check::Authenticate),
                reason.to_owned(),
            ));
        }
    }
    let records: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .map(|r| (r.tool, r.check, r.reason.unwrap_or_default()))
        .collect();
    assert_eq!(records, expected);

    // Authenticated, with a header that contradicts the body: rmcp refuses it (the
    // 2026-07-28 standard headers), the gate records it before the answer leaves.
    server.sink.clear();
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let response = raw
        .post()
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "list_notes")
        .body(call)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert!(
        (400..500).contains(&status) || text.contains("\"error\""),
        "{status} {text}"
    );
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].check, Some(Check::Protocol));
    assert_eq!(records[0].principal.as_deref(), Some("alice"));
    assert_eq!(records[0].outcome, Outcome::Denied);

    // Authenticated, batches nested in a batch: refused by rmcp, each call recorded once.
    server.sink.clear();
    let second = call
        .replace("\"id\":21", "\"id\":24")
        .replace("add_note", "list_notes");
    let (status, _) = raw.send(format!("[[{call}],[{second}]]")).await;
    assert!((400..500).contains(&status), "{status}");
    let records: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .map(|r| (r.tool, r.request_id, r.check, r.principal))
        .collect();
    let alice = Some("alice".to_owned());
    assert_eq!(
        records,
        [
            (
                "add_note".into(),
                Some("21".into()),
                Some(Check::Protocol),
                alice.clone()
            ),
            (
                "list_notes".into(),
                Some("24".into()),
                Some(Check::Protocol),
                alice
            ),
        ]
    );
}

#[tokio::test]
async fn host_and_origin_are_checked_on_every_route() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let client = reqwest::Client::new();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#;
    let post = |host: &str, origin: Option<&str>| {
        let mut request = client
            .post(server.mcp())
            .bearer_auth(&server.fixture.full)
            .header("host", host.to_owned())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init);
        if let Some(origin) = origin {
            request = request.header("origin", origin.to_owned());
        }
        request.send()
    };
    let evil = post("evil.example.com", Some("http://evil.example.com"))
        .await
        .unwrap();
    assert_eq!(evil.status(), 403);
    let body: Value = evil.json().await.unwrap();
    assert_eq!(body["reason"], "host_not_allowed");
    let local = format!("127.0.0.1:{port}");
    let ok = post(&local, Some(&format!("http://{local}")))
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let bad_origin = post(&local, Some("https://evil.example.com"))
        .await
        .unwrap();
    assert_eq!(bad_origin.status(), 403);

    for path in ["/tools", "/.well-known/oauth-protected-resource"] {
        let response = client
            .get(format!("{}{path}", server.base))
            .header("host", "evil.example.com")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{path}");
    }
}

/// A body over the limit sent where no route takes it (`/mcp/x`, 404) is recorded as the
/// call its start names, as on `/mcp`: a read as a read.
#[tokio::test]
async fn an_unrouted_body_over_the_limit_is_recorded_by_its_start() {
    let server = TestServer::start(
        HttpOptions::default().max_body_bytes(4096),
        Options::default(),
    )
    .await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{{"uri":"notes://all","pad":"{}"}}}}"#,
        "x".repeat(8192)
    );
    let response = reqwest::Client::new()
        .post(format!("{}/mcp/x", server.base))
        .bearer_auth(&server.fixture.full)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].kind,
            records[0].tool.as_str(),
            records[0].request_id.as_deref()
        ),
        (
            aac_tools::audit::CallKind::Resource,
            "notes://all",
            Some("9")
        ),
        "{records:?}"
    );
}

/// A method a route does not take is 405 in the JSON of every other error, with `Allow`,
/// on the REST routes and on `/mcp` (where rmcp answered plain text).
#[tokio::test]
async fn a_method_a_route_does_not_take_is_a_json_405_with_allow() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    for (method, path, allowed) in [
        (reqwest::Method::GET, "/tools/add_note", "POST"),
        (reqwest::Method::PUT, "/tools/add_note", "POST"),
        (reqwest::Method::DELETE, "/tools", "GET"),
        (reqwest::Method::PATCH, "/mcp", "POST"),
        (reqwest::Method::PUT, "/mcp", "DELETE"),
    ] {
        let response = client
            .request(method.clone(), format!("{}{path}", server.base))
            .bearer_auth(&server.fixture.full)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method} {path}");
        let allow = response.headers()["allow"].to_str().unwrap().to_owned();
        assert!(allow.contains(allowed), "{method} {path}: {allow}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["reason"], "method_not_allowed",
            "{method} {path}: {body}"
        );
        assert_eq!(body["status"], 405);
    }
    // A path no route takes: a JSON 404 that names the routes there are.
    for path in ["/mcp/", "/sse", "/"] {
        let response = client
            .get(format!("{}{path}", server.base))
            .bearer_auth(&server.fixture.full)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["reason"], "not_found", "{path}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(
            error.starts_with("no such route") && error.contains("`/mcp`"),
            "{path}: {body}"
        );
    }
    assert!(server.sink.records().is_empty());
}

/// A request that names a host twice (two `Host` headers, in either order), a target
/// in absolute form naming another host than its `Host`, or a port that is no port is
/// refused and recorded: whichever host a proxy in front reads, it is one the guard
/// checked.
#[tokio::test]
async fn a_request_that_names_another_host_anywhere_is_refused_and_recorded() {
    use std::io::{Read, Write};
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let address = server.base.trim_start_matches("http://").to_owned();
    let token = server.fixture.full.clone();
    let cases = [
        (
            "/tools/list_notes",
            "Host: localhost\r\nHost: evil.example.com\r\n",
            400,
        ),
        (
            "/tools/list_notes",
            "Host: evil.example.com\r\nHost: localhost\r\n",
            400,
        ),
        (
            "http://evil.example.com/tools/list_notes",
            "Host: localhost\r\n",
            403,
        ),
        ("/tools/list_notes", "Host: localhost:99999999\r\n", 400),
    ];
    for (target, hosts, status) in cases {
        let request = format!(
            "POST {target} HTTP/1.1\r\n{hosts}Authorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        let address = address.clone();
        let answer = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(&address).expect("connects");
            stream.write_all(request.as_bytes()).expect("sends");
            let mut answer = String::new();
            stream.read_to_string(&mut answer).ok();
            answer
        })
        .await
        .unwrap();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{target} {hosts:?}: {answer}"
        );
    }
    let records = server.sink.records();
    assert_eq!(records.len(), cases.len(), "{records:?}");
    for (record, (_, _, status)) in records.iter().zip(cases) {
        assert_eq!(record.tool, "list_notes");
        assert_eq!(record.status, status, "{record:?}");
        assert_eq!(record.check, Some(Check::Protocol), "{record:?}");
        assert_eq!(record.principal.as_deref(), Some("alice"));
    }
}

/// A refusal by the `Host`/`Origin` guard is a refusal like any other: every call it
/// refuses leaves one record (over `/mcp`, its batch's other calls too; over REST, the
/// path's tool), with the caller's principal when its token is valid. Requests that
/// carry no call (a `GET`, an `initialize`) leave none.
#[tokio::test]
async fn a_call_the_host_or_origin_guard_refuses_is_recorded_once() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let local = format!("127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let call = r#"{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"x"}}}"#;
    let second = r#"{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#;
    let batch = format!("[{call},{second}]");
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#;
    let post = |url: String, host: &str, origin: Option<&str>, token: Option<&str>, body: &str| {
        let mut request = client
            .post(url)
            .header("host", host.to_owned())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            // A REST call's record keeps it, refused by the guard too (MCP's has its own).
            .header("x-request-id", "rest-guard")
            .body(body.to_owned());
        if let Some(origin) = origin {
            request = request.header("origin", origin.to_owned());
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let full = server.fixture.full.clone();
    let cases = [
        // (url, host, origin, token, body, answered reason)
        (
            server.mcp(),
            "evil.example.com",
            None,
            None,
            call,
            "host_not_allowed",
        ),
        (
            server.mcp(),
            local.as_str(),
            Some("https://evil.example.com"),
            Some(full.as_str()),
            call,
            "origin_not_allowed",
        ),
        (
            server.mcp(),
            "evil.example.com",
            None,
            Some(full.as_str()),
            batch.as_str(),
            "host_not_allowed",
        ),
        (
            server.mcp(),
            "evil.example.com",
            None,
            Some(full.as_str()),
            init,
            "host_not_allowed",
        ),
        (
            format!("{}/tools/add_note", server.base),
            "evil.example.com",
            None,
            Some(full.as_str()),
            r#"{"text":"x"}"#,
            "host_not_allowed",
        ),
        (
            format!("{}/tools/add%5Fnote", server.base),
            local.as_str(),
            Some("null"),
            None,
            r#"{"text":"x"}"#,
            "origin_not_allowed",
        ),
    ];
    for (url, host, origin, token, body, reason) in cases {
        let response = post(url.clone(), host, origin, token, body).await.unwrap();
        assert_eq!(response.status(), 403, "{url} {body}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["reason"], reason, "{url} {body}");
    }
    let response = client
        .get(format!("{}/tools", server.base))
        .header("host", "evil.example.com")
        .bearer_auth(&full)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);

    let records: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .map(|r| {
            (
                r.tool,
                r.check,
                r.reason.unwrap_or_default(),
                r.status,
                r.principal.is_some(),
                r.transport,
                r.request_id,
            )
        })
        .collect();
    let mcp = "streamable_http".to_owned();
    let rest = "http".to_owned();
    let refused =
        |tool: &str, reason: &str, principal: bool, transport: &String, id: Option<&str>| {
            (
                tool.to_owned(),
                Some(Check::Protocol),
                reason.to_owned(),
                403,
                principal,
                transport.clone(),
                id.map(str::to_owned),
            )
        };
    assert_eq!(
        records,
        vec![
            refused("add_note", "host_not_allowed", false, &mcp, Some("31")),
            refused("add_note", "origin_not_allowed", true, &mcp, Some("31")),
            refused("add_note", "host_not_allowed", true, &mcp, Some("31")),
            refused("list_notes", "host_not_allowed", true, &mcp, Some("32")),
            refused(
                "add_note",
                "host_not_allowed",
                true,
                &rest,
                Some("rest-guard")
            ),
            refused(
                "add_note",
                "origin_not_allowed",
                false,
                &rest,
                Some("rest-guard")
            ),
        ]
    );
}

/// One valid token cannot hold unbounded memory in sessions: past its cap, a principal's
/// least recently used session is closed (404 to its client, which may open another),
/// and no other principal's sessions are touched.
#[tokio::test]
async fn a_principal_past_its_session_cap_loses_its_least_recently_used_session() {
    let server = TestServer::start(
        HttpOptions::default().max_sessions_per_principal(2),
        Options::default(),
    )
    .await;
    let mut other = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    other.initialize().await;
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
        raw.initialize().await;
        sessions.push(raw);
    }
    // The first is used again: the second is now the least recently used.
    let (status, result) = sessions[0].call(1, "list_notes", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(result.unwrap()["result"]["isError"], false);
    let mut third = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    third.initialize().await;
    let (status, _) = sessions[1].call(2, "list_notes", json!({})).await;
    assert_eq!(status, 404, "the least recently used session is closed");
    for raw in [&sessions[0], &third, &other] {
        let (status, result) = raw.call(3, "list_notes", json!({})).await;
        assert_eq!(status, 200);
        assert_eq!(result.unwrap()["result"]["isError"], false);
    }
    // Its client opens a new one, as the protocol says; the cap holds.
    sessions[1].session = None;
    sessions[1].initialize().await;
    let (status, _) = sessions[0].call(4, "list_notes", json!({})).await;
    assert_eq!(status, 404);
    let (status, _) = sessions[1].call(5, "list_notes", json!({})).await;
    assert_eq!(status, 200);
}

/// A server that asks a person before a destructive call (`--confirm user`), with a note
/// to delete (id 1).
async fn confirming_server(options: HttpOptions) -> TestServer {
    let server = TestServer::start(
        options,
        Options {
            confirmation: aac_tools::confirm::ConfirmPolicy::User,
            ..Options::default()
        },
    )
    .await;
    let response = reqwest::Client::new()
        .post(format!("{}/tools/add_note", server.base))
        .bearer_auth(&server.fixture.full)
        .body(r#"{"text": "keep me"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"id": 1}));
    server
}

/// A session of alice's whose client can be asked (it declared elicitation).
async fn asking_session(server: &TestServer) -> RawMcp {
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize_with(json!({"elicitation": {}})).await;
    raw
}

/// `delete_note` of note 1 on `raw`'s session, its stream read until the server asks
/// the person (`elicitation/create`); the rest of the stream, and the question.
async fn delete_until_asked(raw: &RawMcp) -> (tokio::sync::mpsc::UnboundedReceiver<Value>, Value) {
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "delete_note", "arguments": {"id": 1, "confirm": true}},
    });
    let response = raw.post().body(body.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = forward_events(response);
    loop {
        // A guard against a hang, not a timing assertion.
        let message = tokio::time::timeout(std::time::Duration::from_secs(30), stream.recv())
            .await
            .expect("the question within 30 s")
            .expect("the call's stream is open");
        if message["method"] == "elicitation/create" {
            return (stream, message);
        }
    }
}

/// The answer to request `id` on a stream of a call (a guard against a hang: 30 s).
async fn answer_to(stream: &mut tokio::sync::mpsc::UnboundedReceiver<Value>, id: u64) -> Value {
    loop {
        let message = tokio::time::timeout(std::time::Duration::from_secs(30), stream.recv())
            .await
            .expect("the answer within 30 s")
            .expect("the stream is open");
        if message["id"] == id {
            return message;
        }
    }
}

/// The records of `tool`'s calls.
fn records_of(server: &TestServer, tool: &str) -> Vec<aac_tools::audit::AuditRecord> {
    server
        .sink
        .records()
        .into_iter()
        .filter(|r| r.tool == tool)
        .collect()
}

/// The one record of the `delete_note` call and how long it took to come: the call that
/// was left waiting for the person must end when its session does, not when the
/// confirmation times out (120 s here).
async fn record_of_the_abandoned_delete(server: &TestServer) -> std::time::Duration {
    let since = std::time::Instant::now();
    let deletes = || records_of(server, "delete_note");
    while deletes().is_empty() && since.elapsed() < std::time::Duration::from_secs(30) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let waited = since.elapsed();
    // Nothing more comes.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let records = deletes();
    assert_eq!(records.len(), 1, "one record of the call: {records:?}");
    let record = &records[0];
    assert_eq!(
        (record.outcome, record.reason.as_deref(), record.status),
        (Outcome::Error, Some("cancelled"), 499),
        "{record:?}"
    );
    assert_eq!(record.confirmed_by, None);
    waited
}

/// The handler of the abandoned delete never ran: the note is still there.
async fn assert_the_note_is_kept(server: &TestServer) {
    let notes: Value = reqwest::Client::new()
        .post(format!("{}/tools/list_notes", server.base))
        .bearer_auth(&server.fixture.full)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(notes["notes"][0]["id"], 1, "{notes}");
}

/// How long a call may take to notice that its session ended (it is prompt; the margin is
/// for a loaded machine).
const PROMPTLY: std::time::Duration = std::time::Duration::from_secs(2);

/// A client that ends its session (`DELETE /mcp`) while its user is asked has left: the
/// call is abandoned at once (`cancelled`, 499), not left to time out, and nothing runs.
#[tokio::test]
async fn a_call_whose_session_is_deleted_while_the_user_is_asked_is_cancelled_at_once() {
    let server = confirming_server(HttpOptions::default()).await;
    let raw = asking_session(&server).await;
    let (_stream, _) = delete_until_asked(&raw).await;
    let deleted = reqwest::Client::new()
        .delete(server.mcp())
        .bearer_auth(&server.fixture.full)
        .header("mcp-session-id", raw.session.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let waited = record_of_the_abandoned_delete(&server).await;
    assert!(
        waited < PROMPTLY,
        "the call ended {waited:?} after its session"
    );
    assert_the_note_is_kept(&server).await;
}

/// The same when the server closes the session: past the principal's session cap, its
/// least recently used session (the one whose user is asked) is closed.
#[tokio::test]
async fn a_call_whose_session_is_evicted_while_the_user_is_asked_is_cancelled_at_once() {
    let server = confirming_server(HttpOptions::default().max_sessions_per_principal(1)).await;
    let raw = asking_session(&server).await;
    let (_stream, _) = delete_until_asked(&raw).await;
    let mut newer = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    newer.initialize().await;
    let waited = record_of_the_abandoned_delete(&server).await;
    assert!(
        waited < PROMPTLY,
        "the call ended {waited:?} after its session"
    );
    assert_the_note_is_kept(&server).await;
    let (status, _) = raw.call(8, "list_notes", json!({})).await;
    assert_eq!(status, 404, "the session is closed");
}

/// And when the server shuts down under it.
#[tokio::test]
async fn a_call_whose_user_is_asked_when_the_server_shuts_down_is_cancelled_at_once() {
    let server = confirming_server(HttpOptions::default()).await;
    let raw = asking_session(&server).await;
    let (_stream, _) = delete_until_asked(&raw).await;
    let since = std::time::Instant::now();
    let server = server.stop().await;
    let stopped = since.elapsed();
    let waited = record_of_the_abandoned_delete(&server).await + stopped;
    assert!(
        waited < PROMPTLY,
        "the call ended {waited:?} after the shutdown"
    );
}

/// A closed POST stream is not a client that left: Streamable HTTP lets a client resume
/// the stream (`GET` with `Last-Event-ID`), and the spec says a disconnection is not a
/// cancellation. The person's answer, sent on the same session, still decides the call,
/// and the resumed stream carries its result.
#[tokio::test]
async fn a_call_whose_stream_closes_while_the_user_is_asked_takes_the_answer_sent_later() {
    use futures_util::StreamExt;
    let server = confirming_server(HttpOptions::default()).await;
    let raw = asking_session(&server).await;
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "delete_note", "arguments": {"id": 1, "confirm": true}},
    });
    let response = raw.post().body(body.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    // Read up to the question, keeping the id of the last event; then leave the stream.
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let question = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            text.push_str(&String::from_utf8_lossy(
                &stream.next().await.unwrap().unwrap(),
            ));
            if let Some(asked) = messages(&text)
                .into_iter()
                .find(|m| m["method"] == "elicitation/create")
            {
                return asked;
            }
        }
    })
    .await
    .expect("the question within 30 s");
    drop(stream);
    let last_event = text
        .lines()
        .filter_map(|line| line.strip_prefix("id:"))
        .next_back()
        .expect("events with ids")
        .trim()
        .to_owned();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        server
            .sink
            .records()
            .iter()
            .all(|r| r.tool != "delete_note"),
        "the call still waits for the answer"
    );

    // The client comes back to the stream, then sends the person's answer.
    let resumed = raw
        .http
        .get(&raw.url)
        .bearer_auth(raw.token.as_deref().unwrap())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", raw.session.as_deref().unwrap())
        .header("last-event-id", &last_event)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let mut resumed = forward_events(resumed);
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept"}});
    let (status, _) = raw.send(answer.to_string()).await;
    assert_eq!(status, 202);
    // The stream resumes after the last event the client read: the question is not
    // asked again (a host would show it to its user again).
    let first = tokio::time::timeout(std::time::Duration::from_secs(30), resumed.recv())
        .await
        .expect("the answer within 30 s")
        .expect("the stream is open");
    assert_ne!(
        first["method"], "elicitation/create",
        "asked again: {first}"
    );
    let result = if first["id"] == 7 {
        first
    } else {
        answer_to(&mut resumed, 7).await
    };
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert_eq!(result["result"]["structuredContent"]["deleted"], true);
    let records = records_of(&server, "delete_note");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].outcome, records[0].confirmed_by.as_deref()),
        (Outcome::Success, Some("user"))
    );
}

/// A person's answer that repeats a key (`decline`, then `accept`: a host or proxy that
/// reads the first key saw a no) confirms nothing over Streamable HTTP either: the call
/// is refused 400 `ambiguous_answer`, recorded once, and the note is kept.
#[tokio::test]
async fn an_answer_that_repeats_a_key_confirms_nothing() {
    let server = confirming_server(HttpOptions::default()).await;
    let raw = asking_session(&server).await;
    let (mut stream, question) = delete_until_asked(&raw).await;
    let answer = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"action":"decline","action":"accept"}}}}"#,
        question["id"]
    );
    let (status, _) = raw.send(answer).await;
    assert_eq!(status, 202, "the answer is taken");
    let result = answer_to(&mut stream, 7).await;
    assert_eq!(result["result"]["isError"], true, "{result}");
    let error = error_body(&result["result"]);
    assert_eq!(
        (error["status"].as_u64(), error["reason"].as_str()),
        (Some(400), Some("ambiguous_answer")),
        "{error}"
    );
    let records = records_of(&server, "delete_note");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].reason.as_deref(),
            records[0].confirmed_by.as_deref()
        ),
        (Some("ambiguous_answer"), None)
    );
    assert_the_note_is_kept(&server).await;
}

/// The gate verified alice's token when the call came; her token is revoked while her
/// person is asked. Their yes, sent later on the same session, does not run the call: the
/// token is verified again once they have answered.
#[tokio::test]
async fn a_token_revoked_while_the_user_is_asked_does_not_run_the_call() {
    let server = confirming_server(HttpOptions::default()).await;
    let raw = asking_session(&server).await;
    let (mut stream, question) = delete_until_asked(&raw).await;
    let store = aac_tools::sqlite::TokenStore::open(&server.fixture.db).unwrap();
    // A second token of alice's (the session is hers, whichever token she shows) carries
    // the answer: the one the call came with is revoked.
    let second = store
        .create("alice", Some("interop"), interop_tests::ALL_SCOPES, None)
        .unwrap()
        .token;
    store.revoke(&server.fixture.full).unwrap();
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept"}});
    let mut answering = RawMcp::new(&server.mcp(), Some(&second));
    answering.session = raw.session.clone();
    let (status, _) = answering.send(answer.to_string()).await;
    assert_eq!(status, 202, "the answer is taken");
    let result = answer_to(&mut stream, 7).await;
    assert_eq!(result["result"]["isError"], true, "{result}");
    let error = error_body(&result["result"]);
    assert_eq!(
        (error["status"].as_u64(), error["reason"].as_str()),
        (Some(401), Some("invalid_token")),
        "{error}"
    );
    let records = records_of(&server, "delete_note");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].outcome,
            records[0].reason.as_deref(),
            records[0].status,
            records[0].confirmed_by.as_deref()
        ),
        (Outcome::Denied, Some("invalid_token"), 401, Some("user"))
    );
}

/// A `tools/call` whose params do not have the protocol's shape is answered "Invalid
/// params" with what is wrong (not "Method not found"), and recorded once.
#[tokio::test]
async fn a_tools_call_with_params_of_the_wrong_shape_is_invalid_params() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    server.sink.clear();
    for (id, params, says) in [
        (
            41,
            json!({"name": "add_note", "arguments": ["x"]}),
            "`params.arguments` must be a JSON object",
        ),
        (
            42,
            json!({"name": 7, "arguments": {}}),
            "`params.name` must be a string",
        ),
        (
            43,
            json!({"arguments": {}}),
            "`params.name` must be a string",
        ),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let (status, messages) = raw.send(body.to_string()).await;
        assert_eq!(status, 200, "{body}");
        let error = &messages.last().expect("an answer")["error"];
        assert_eq!(error["code"], -32602, "{body}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(says),
            "{body}: {error}"
        );
    }
    // rmcp may drop a request just after its answer: wait for the records (bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.sink.records().len() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let records = server.sink.records();
    assert_eq!(records.len(), 3, "{records:?}");
    for record in &records {
        assert_eq!(record.check, Some(Check::Protocol));
        assert_eq!(record.reason.as_deref(), Some("not_dispatched"));
        assert_eq!(record.status, 400);
    }
    // A refusal of rmcp's own HTTP layer is recorded with the status it answered.
    server.sink.clear();
    let call = json!({"jsonrpc": "2.0", "id": 45, "method": "tools/call",
        "params": {"name": "list_notes", "arguments": {}}});
    for (accept, content_type, status) in [
        ("text/plain", "application/json", 406),
        ("application/json, text/event-stream", "text/plain", 415),
    ] {
        let response = reqwest::Client::new()
            .post(server.mcp())
            .bearer_auth(&server.fixture.full)
            .header("mcp-session-id", raw.session.clone().unwrap())
            .header("accept", accept)
            .header("content-type", content_type)
            .body(call.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{accept} {content_type}");
    }
    let statuses: Vec<_> = server
        .sink
        .records()
        .iter()
        .map(|r| {
            (
                r.tool.clone(),
                r.status,
                r.reason.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("list_notes".to_owned(), 406, "not_dispatched".to_owned()),
            ("list_notes".to_owned(), 415, "not_dispatched".to_owned()),
        ]
    );
    let (status, messages) = raw
        .send(r#"{"jsonrpc":"2.0","id":44,"method":"no/such/method"}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(messages.last().unwrap()["error"]["code"], -32601);
}

/// A REST path whose tool name is not UTF-8 once decoded names no tool, but is a call:
/// answered 404 `unknown_tool` as JSON, and recorded (before, the router's own 400 in plain
/// text, with no record).
#[tokio::test]
async fn a_rest_call_of_a_name_that_is_not_utf8_is_refused_and_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let response = reqwest::Client::new()
        .post(format!("{}/tools/add_note%FF", server.base))
        .bearer_auth(&server.fixture.full)
        .body(r#"{"text":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "unknown_tool", "{body}");
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].tool, "add_note\u{fffd}");
    assert_eq!(records[0].status, 404);
    assert_eq!(records[0].principal.as_deref(), Some("alice"));
    assert_eq!(records[0].transport, "http");
}

/// A `POST` under `/tools/` that is not `/tools/{name}` (a trailing slash, an empty
/// segment) is a call of a tool named by all that follows: refused 404 `unknown_tool`,
/// recorded, and nothing runs (not resolved to the tool the path ends with).
#[tokio::test]
async fn a_rest_call_by_a_path_of_more_segments_is_refused_and_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    for (path, tool) in [
        ("add_note/", "add_note/"),
        ("/add_note", "/add_note"),
        ("x/add_note", "x/add_note"),
    ] {
        let response = client
            .post(format!("{}/tools/{path}", server.base))
            .bearer_auth(&server.fixture.full)
            .header("content-type", "application/json")
            .header("x-request-id", path)
            .body(r#"{"text":"x"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["reason"], "unknown_tool", "{path}: {body}");
        let records = server.sink.records();
        let record = records
            .iter()
            .find(|r| r.request_id.as_deref() == Some(path))
            .unwrap_or_else(|| panic!("{path}: no record in {records:?}"));
        assert_eq!(
            (
                record.tool.as_str(),
                record.status,
                record.principal.as_deref()
            ),
            (tool, 404, Some("alice"))
        );
    }
    // Without a token: 401, recorded too.
    let response = client
        .post(format!("{}/tools/add_note/", server.base))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let records = server.sink.records();
    assert_eq!(records.len(), 4, "{records:?}");
    assert!(
        records.iter().all(|r| r.outcome == Outcome::Denied),
        "{records:?}"
    );
    // Another method there is still no route.
    let response = client
        .get(format!("{}/tools/add_note/", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(server.sink.records().len(), 4);
}

/// The records of a batch refused as a whole say the status the client got, the calls
/// after the first included.
#[tokio::test]
async fn the_rest_of_a_refused_batch_is_recorded_with_the_status_answered() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    raw.initialize().await;
    server.sink.clear();
    let batch = r#"[{"jsonrpc":"2.0","id":51,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"x"}}},{"jsonrpc":"2.0","id":52,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"y"}}}]"#;
    let (status, _) = raw.send(batch).await;
    assert_eq!(status, 403);
    let records: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .map(|r| {
            (
                r.request_id,
                r.check,
                r.reason.unwrap_or_default(),
                r.status,
            )
        })
        .collect();
    assert_eq!(
        records,
        [
            (
                Some("51".to_owned()),
                Some(Check::Scope),
                "insufficient_scope".to_owned(),
                403
            ),
            (
                Some("52".to_owned()),
                Some(Check::Protocol),
                "not_dispatched".to_owned(),
                403
            ),
        ]
    );
}

#[tokio::test]
async fn get_tools_is_the_manifest_of_the_listed_tools() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/tools", server.base);
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert!(challenge(&response).contains("resource_metadata="));

    let response = client
        .get(&url)
        .bearer_auth(&server.fixture.reader)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let text = response.text().await.unwrap();
    let registry = Registry::collect_module("interop_tests::tools").unwrap();
    // The tools part of the manifest (which also lists resources and prompts, served
    // by `GET /resources` and `GET /prompts`), byte for byte as the manifest prints it.
    let mut tools_only: Value = serde_json::from_str(registry.manifest()).unwrap();
    tools_only
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k == "tools");
    let mut expected = serde_json::to_string_pretty(&tools_only).unwrap();
    expected.push('\n');
    assert_eq!(text, expected);
    let manifest: Value = serde_json::from_str(&text).unwrap();
    let delete = manifest["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "delete_note")
        .unwrap();
    assert_eq!(delete["scopes"], json!(["notes:delete"]));
    assert_eq!(delete["annotations"]["destructiveHint"], true);

    // read-only mode lists only the read-only tools
    let read_only = TestServer::start(
        HttpOptions::default(),
        Options {
            read_only: true,
            ..Options::default()
        },
    )
    .await;
    let names = read_only.manifest_names(&read_only.fixture.full).await;
    assert_eq!(
        names,
        [
            "count_slowly",
            "list_notes",
            "summarize_notes",
            "wait_for_cancellation"
        ]
    );
}

#[tokio::test]
async fn post_tools_name_is_a_plain_json_call() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    let url = |name: &str| format!("{}/tools/{name}", server.base);
    let full = &server.fixture.full;
    // `POST /tools/{tool}` with `token` and `body`: its response.
    let call = |tool: &str, token: &str, body: &'static str| {
        let sent = client.post(url(tool)).bearer_auth(token).body(body).send();
        async move { sent.await.unwrap() }
    };

    let response = client
        .post(url("add_note"))
        .bearer_auth(full)
        .header("x-request-id", "req-1")
        .body(r#"{"text": "plain"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"id": 1}));

    // a content (non-structured) result
    let response = call("count_slowly", full, r#"{"to": 1}"#).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"content": [{"type": "text", "text": "counted to 1"}]})
    );

    // the confirm guard: 400 with the exact message
    let response = call("delete_note", full, r#"{"id": 1}"#).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], CONFIRM_REQUIRED);
    assert_eq!(
        body,
        json!({"error": CONFIRM_REQUIRED, "reason": "destructive_flag_missing", "status": 400})
    );

    // 401, 403, 404, invalid arguments, a body that is not JSON
    let response = client.post(url("list_notes")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert!(challenge(&response).starts_with("Bearer resource_metadata="));
    let response = call(
        "delete_note",
        &server.fixture.reader,
        r#"{"id": 1, "confirm": true}"#,
    )
    .await;
    assert_eq!(response.status(), 403);
    assert!(challenge(&response).contains(r#"error="insufficient_scope", scope="notes:delete""#));
    let response = client
        .post(url("no_such_tool"))
        .bearer_auth(full)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(
        response.json::<Value>().await.unwrap()["reason"],
        "unknown_tool"
    );
    let response = call("add_note", full, r#"{"text": 3}"#).await;
    assert_eq!(response.status(), 400);
    assert_eq!(
        response.json::<Value>().await.unwrap()["reason"],
        "invalid_arguments"
    );
    let response = call("add_note", full, "{oops").await;
    assert_eq!(response.status(), 400);
    assert_eq!(
        response.json::<Value>().await.unwrap()["reason"],
        "invalid_arguments"
    );
    let response = call("add_note", "aac_0123456789ab_nope", "{oops").await;
    assert_eq!(response.status(), 401, "a bad token is told first");
    // Then the tool and the scope, as for a body that is JSON: a body that is not JSON
    // is no way past them to a 400 (it used to be refused before both).
    let response = call("no_such_tool", full, "{oops").await;
    assert_eq!(response.status(), 404);
    assert_eq!(
        response.json::<Value>().await.unwrap()["reason"],
        "unknown_tool"
    );
    let response = call("delete_note", &server.fixture.reader, "{oops").await;
    assert_eq!(response.status(), 403);
    assert!(challenge(&response).contains(r#"error="insufficient_scope", scope="notes:delete""#));

    let delete = client
        .post(url("delete_note"))
        .bearer_auth(full)
        .body(r#"{"id": 1, "confirm": true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        delete.json::<Value>().await.unwrap(),
        json!({"deleted": true})
    );

    let records: Vec<(String, Option<Check>, u16)> = server
        .sink
        .records()
        .into_iter()
        .map(|r| {
            assert_eq!(r.transport, "http");
            (r.tool, r.check, r.status)
        })
        .collect();
    let expected = [
        ("add_note", None, 200),
        ("count_slowly", None, 200),
        ("delete_note", Some(Check::Confirm), 400),
        ("list_notes", Some(Check::Authenticate), 401),
        ("delete_note", Some(Check::Scope), 403),
        ("no_such_tool", Some(Check::FindTool), 404),
        ("add_note", Some(Check::Validate), 400),
        ("add_note", Some(Check::Validate), 400),
        ("add_note", Some(Check::Authenticate), 401),
        ("no_such_tool", Some(Check::FindTool), 404),
        ("delete_note", Some(Check::Scope), 403),
        ("delete_note", None, 200),
    ]
    .map(|(t, c, s)| (t.to_owned(), c, s));
    assert_eq!(records, expected);
    assert_eq!(
        server.sink.records()[0].request_id.as_deref(),
        Some("req-1")
    );

    // An `X-Request-Id` of any length is kept, a long one cut with its hash and length
    // (it used to be dropped past 200 bytes), and one that is not ASCII kept as text.
    for (id, kept) in [("r".repeat(5000), None), ("é-id".to_owned(), Some("é-id"))] {
        server.sink.clear();
        let response = client
            .post(url("list_notes"))
            .bearer_auth(full)
            .header(
                "x-request-id",
                reqwest::header::HeaderValue::from_bytes(id.as_bytes()).unwrap(),
            )
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let recorded = server.sink.records()[0].request_id.clone().unwrap();
        match kept {
            Some(kept) => assert_eq!(recorded, kept),
            None => {
                assert!(recorded.starts_with("rrrr"), "{recorded}");
                assert!(recorded.ends_with(", 5000 bytes]"), "{recorded}");
                assert!(recorded.len() <= 200, "{recorded}");
            }
        }
    }
}

#[tokio::test]
async fn metadata_without_an_authorization_server_leaves_the_list_out() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let metadata: Value = reqwest::get(format!(
        "{}/.well-known/oauth-protected-resource",
        server.base
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert!(metadata.get("resource").is_some_and(Value::is_string));
    assert!(
        metadata.get("authorization_servers").is_none(),
        "an empty list is rejected by clients: {metadata}"
    );
}

#[tokio::test]
async fn protected_resource_metadata() {
    let server = TestServer::start(
        HttpOptions::default()
            .resource_url("https://mcp.example.com/mcp")
            .authorization_servers(vec!["https://auth.example.com".into()]),
        Options::default(),
    )
    .await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let response = reqwest::get(format!("{}{path}", server.base))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let metadata: Value = response.json().await.unwrap();
        assert_eq!(metadata["resource"], "https://mcp.example.com/mcp");
        assert_eq!(
            metadata["authorization_servers"],
            json!(["https://auth.example.com"])
        );
        assert_eq!(
            metadata["scopes_supported"],
            json!(["notes:delete", "notes:read", "notes:write"])
        );
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    }
    let response = reqwest::Client::new()
        .post(format!("{}/mcp", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        challenge(&response),
        r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp""#
    );
}

#[tokio::test]
async fn stateless_mode_serves_without_sessions() {
    let server =
        TestServer::start(HttpOptions::default().stateless(true), Options::default()).await;
    let raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    let response = raw
        .post()
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("mcp-session-id").is_none());

    // every POST stands alone: no session id needed
    let (status, result) = raw.call(1, "add_note", json!({"text": "stateless"})).await;
    assert_eq!(status, 200);
    assert_eq!(
        result.unwrap()["result"]["structuredContent"],
        json!({"id": 1})
    );
    let reader = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    let response = reader
        .post()
        .body(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"x"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);

    let get = reqwest::Client::new()
        .get(server.mcp())
        .bearer_auth(&server.fixture.full)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    assert_eq!(server.sink.records().len(), 2);
}

/// Stateless, `/mcp` takes POST only, and says so alike for every other method: the JSON
/// 405 of every route, `Allow: POST` (GET and DELETE got rmcp's plain-text 405, the other
/// methods `Allow: GET,POST,DELETE`). With sessions, `Allow` names GET and DELETE too.
#[tokio::test]
async fn a_stateless_server_answers_every_method_but_post_alike() {
    for (stateless, allow) in [(true, "POST"), (false, "GET,POST,DELETE")] {
        let server = TestServer::start(
            HttpOptions::default().stateless(stateless),
            Options::default(),
        )
        .await;
        let mut methods = Vec::new();
        if stateless {
            methods.extend([reqwest::Method::GET, reqwest::Method::DELETE]);
        }
        methods.extend([
            reqwest::Method::PUT,
            reqwest::Method::PATCH,
            reqwest::Method::OPTIONS,
            reqwest::Method::HEAD,
        ]);
        for method in methods {
            let response = reqwest::Client::new()
                .request(method.clone(), server.mcp())
                .bearer_auth(&server.fixture.full)
                .header("accept", "application/json, text/event-stream")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 405, "{method}");
            assert_eq!(response.headers()["allow"], allow, "{method}");
            assert_eq!(
                response.headers()["content-type"],
                "application/json",
                "{method}"
            );
            if method != reqwest::Method::HEAD {
                let body: Value = response.json().await.unwrap();
                assert_eq!(body["reason"], "method_not_allowed", "{method}: {body}");
            }
        }
        assert!(server.sink.records().is_empty());
    }
}

/// A stateless server whose destructive tool needs a person: a session-protocol client
/// that declared elicitation is told why it cannot be asked (no session to ask through),
/// not that it declared no elicitation.
#[tokio::test]
async fn a_stateless_server_says_why_it_cannot_ask_the_user() {
    let server = confirming_server(HttpOptions::default().stateless(true)).await;
    let raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    let response = raw
        .post()
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (status, answer) = raw
        .call(1, "delete_note", json!({"id": 1, "confirm": true}))
        .await;
    assert_eq!(status, 200);
    let answer = answer.expect("an answer");
    let error = error_body(&answer["result"]);
    assert_eq!(error["reason"], "user_confirmation_unavailable", "{error}");
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("this server is stateless"), "{message}");
    assert!(!message.contains("declared no form"), "{message}");
}

/// Two `Authorization` headers (a proxy may read the other one) are refused 401, not read
/// as the first; a body in a content coding (`Content-Encoding: gzip`) is refused 415
/// unread, on `/mcp` and over REST, and each is recorded.
#[tokio::test]
async fn two_tokens_and_compressed_bodies_are_refused_and_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    let full = &server.fixture.full;
    let reader = &server.fixture.reader;
    let rest = |tool: &str| client.post(format!("{}/tools/{tool}", server.base));
    let response = rest("add_note")
        .header("authorization", format!("Bearer {full}"))
        .header("authorization", format!("Bearer {reader}"))
        .body(r#"{"text": "whose?"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "invalid_token", "{body}");

    let mut raw = RawMcp::new(&server.mcp(), Some(full));
    raw.initialize().await;
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"zipped"}}}"#;
    let response = raw
        .post()
        .header("content-encoding", "gzip")
        .body(call)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    let response = rest("add_note")
        .bearer_auth(full)
        .header("content-encoding", "deflate")
        .body(r#"{"text": "zipped"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "unsupported_content_encoding", "{body}");
    // `identity` is no coding.
    let response = rest("add_note")
        .bearer_auth(full)
        .header("content-encoding", "identity")
        .body(r#"{"text": "plain"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let records: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .filter(|r| r.kind == aac_tools::audit::CallKind::Tool)
        .map(|r| (r.tool, r.reason, r.status))
        .collect();
    let refused =
        |tool: &str, reason: &str, status: u16| (tool.to_owned(), Some(reason.to_owned()), status);
    assert_eq!(
        records,
        [
            refused("add_note", "invalid_token", 401),
            refused("(unknown)", "unsupported_content_encoding", 415),
            refused("add_note", "unsupported_content_encoding", 415),
            ("add_note".to_owned(), None, 200),
        ]
    );
}

/// A stateless server does not offer subscriptions (`subscribe: false`): a subscribe is
/// refused (no stream could carry an update), recorded as refused, not as a success; and
/// so is an unsubscribe.
#[tokio::test]
async fn a_stateless_server_refuses_a_subscription() {
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        a_stateless_server_refuses(method).await;
    }
}

async fn a_stateless_server_refuses(method: &str) {
    let server =
        TestServer::start(HttpOptions::default().stateless(true), Options::default()).await;
    let raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    let (status, answer) = raw
        .send(format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"{method}","params":{{"uri":"notes://all"}}}}"#
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(answer[0]["error"]["code"], -32601, "{method}: {answer:?}");
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].outcome, records[0].check, records[0].kind),
        (
            Outcome::Denied,
            Some(Check::Protocol),
            aac_tools::audit::CallKind::Resource
        ),
        "{records:?}"
    );
    // As answered: a method this server does not have (not a request rmcp could not read).
    assert_eq!(
        (
            records[0].status,
            records[0].reason.as_deref(),
            records[0].request_id.as_deref(),
            records[0].tool.as_str(),
        ),
        (404, Some("not_offered"), Some("5"), "notes://all"),
        "{records:?}"
    );
}

/// A call whose numeric id is written `1e2` is answered under 100 (rmcp reads it so) and
/// recorded under the same id.
#[tokio::test]
async fn a_call_is_recorded_under_the_id_it_is_answered_under() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    server.sink.clear();
    let (status, answer) = raw
        .send(r#"{"jsonrpc":"2.0","id":1e2,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(answer[0]["id"], 100, "{answer:?}");
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].request_id.as_deref(), Some("100"));
}

/// rmcp answers 404 on an open session for a request it reads as of no session (a
/// 2026-07-28 `ping` naming the session): the session is still open, and still its
/// owner's alone, never anyone's.
#[tokio::test]
async fn a_404_on_an_open_session_does_not_forget_its_owner() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut alice = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    alice.initialize().await;
    let session = alice.session.clone().unwrap();
    let response = alice
        .post()
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "ping")
        .body(r#"{"jsonrpc":"2.0","id":"p1","method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#)
        .send()
        .await
        .unwrap();
    let answered = response.status().as_u16();
    let mut bob = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    bob.session = Some(session);
    let (status, _) = bob.call(9, "list_notes", json!({})).await;
    assert_eq!(
        status, 404,
        "bob is refused alice's session (the ping was {answered})"
    );
    let records = server.sink.records();
    let last = records.last().unwrap();
    assert_eq!(
        (last.reason.as_deref(), last.principal.as_deref()),
        (Some("session_not_found"), Some("bob"))
    );
    // And it is still alice's.
    let (status, _) = alice.call(10, "list_notes", json!({})).await;
    assert_eq!(status, 200);
}

/// A 2026-07-28 call has no session, and rmcp serves it whatever session it names; one
/// naming a session that is not open (another principal's, one never opened, one
/// ended) is refused as the session's, 404 `session_not_found`, and recorded so, a read
/// too. It used to run and be cancelled at once by that session's end, recorded 499
/// `cancelled`, as if its client had cancelled it. On an open session of its own, it
/// runs.
#[tokio::test]
async fn a_2026_07_28_call_naming_a_session_that_is_not_open_is_refused_as_the_session_s() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut alice = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    alice.initialize().await;
    let theirs = alice.session.clone().unwrap();
    let mut ended = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    ended.initialize().await;
    let gone = ended.session.clone().unwrap();
    let response = ended
        .http
        .delete(server.mcp())
        .bearer_auth(&server.fixture.full)
        .header("mcp-session-id", &gone)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let call = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"list_notes","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"raw","version":"1"}}}}}}}}"#
        )
    };
    let post = |token: &str, session: &str, id: u32| {
        alice
            .http
            .post(server.mcp())
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "list_notes")
            .header("mcp-session-id", session)
            .body(call(id))
    };
    let answer = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, messages(&text).pop())
    };
    server.sink.clear();
    let reader = server.fixture.reader.clone();
    let full = server.fixture.full.clone();
    for (token, session, id, who) in [
        (&reader, theirs.as_str(), 1, "bob"),
        (&full, "6f1d2c3b-0a9e-4d8c-b7a6-f5e4d3c2b1a0", 2, "alice"),
        (&full, gone.as_str(), 3, "alice"),
    ] {
        let (status, message) = answer(post(token, session, id).send().await.unwrap()).await;
        let message = message.unwrap_or_else(|| panic!("{who} {session}: an answer ({status})"));
        let result = &message["result"];
        assert_eq!(result["isError"], true, "{message}");
        let error: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            (&error["reason"], &error["status"]),
            (&json!("session_not_found"), &json!(404)),
            "{message}"
        );
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{who} {session}: {records:?}");
        let record = &records[0];
        assert_eq!(
            (
                record.check,
                record.reason.as_deref(),
                record.status,
                record.principal.as_deref()
            ),
            (
                Some(Check::Session),
                Some("session_not_found"),
                404,
                Some(who)
            ),
            "{record:?}"
        );
        server.sink.clear();
    }
    // A read, as a call: refused as the session's, recorded so.
    let response = alice
        .http
        .post(server.mcp())
        .bearer_auth(&reader)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "resources/read")
        .header("mcp-name", "notes://all")
        .header("mcp-session-id", &theirs)
        .body(r#"{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"notes://all","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#)
        .send()
        .await
        .unwrap();
    let (_, message) = answer(response).await;
    let message = message.expect("an answer");
    assert!(message.get("result").is_none(), "{message}");
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].kind,
            records[0].check,
            records[0].reason.as_deref(),
            records[0].status
        ),
        (
            aac_tools::audit::CallKind::Resource,
            Some(Check::Session),
            Some("session_not_found"),
            404
        ),
        "{records:?}"
    );
    server.sink.clear();
    // Alice's own open session: the call runs.
    let (_, message) = answer(post(&full, &theirs, 4).send().await.unwrap()).await;
    let message = message.expect("an answer");
    assert_ne!(message["result"]["isError"], true, "{message}");
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].outcome, records[0].status),
        (Outcome::Success, 200)
    );
}

const SECRET: &str = "an HS256 secret of at least 32 bytes, for tests";

fn jwt(claims: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn jwts_work_beside_opaque_tokens() {
    let verifier = JwtVerifier::builder()
        .issuer("https://auth.example.com")
        .audience("https://mcp.example.com/mcp")
        .hs256_secret(SECRET)
        .build()
        .unwrap();
    let server = TestServer::start(
        HttpOptions::default(),
        Options {
            jwt: Some(verifier),
            ..Options::default()
        },
    )
    .await;
    let now = jsonwebtoken::get_current_timestamp();
    let good = jwt(json!({
        "iss": "https://auth.example.com", "aud": "https://mcp.example.com/mcp",
        "sub": "carol", "exp": now + 300, "scp": ["notes:read", "notes:write"],
        "workspace": "acme", "jti": "jwt-1",
    }));
    let expired = jwt(json!({
        "iss": "https://auth.example.com", "aud": "https://mcp.example.com/mcp",
        "sub": "carol", "exp": now - 3600, "scope": "notes:read",
    }));
    let other_audience = jwt(json!({
        "iss": "https://auth.example.com", "aud": "https://elsewhere.example.com",
        "sub": "carol", "exp": now + 300, "scope": "notes:read",
    }));
    let client = reqwest::Client::new();
    let call = |token: String| {
        client
            .post(format!("{}/tools/add_note", server.base))
            .bearer_auth(token)
            .body(r#"{"text": "by jwt"}"#)
            .send()
    };
    assert_eq!(call(good).await.unwrap().status(), 200);
    for token in [expired, other_audience] {
        let response = call(token).await.unwrap();
        assert_eq!(response.status(), 401);
        assert!(challenge(&response).contains(r#"error="invalid_token""#));
    }
    assert_eq!(
        call(server.fixture.full.clone()).await.unwrap().status(),
        200
    );

    let records = server.sink.records();
    assert_eq!(records[0].principal.as_deref(), Some("carol"));
    assert_eq!(records[0].workspace.as_deref(), Some("acme"));
    assert_eq!(
        records[0].scopes_provided,
        vec!["notes:read".to_owned(), "notes:write".to_owned()]
    );
    assert_eq!(records[1].reason.as_deref(), Some("invalid_token"));
    assert_eq!(records[3].principal.as_deref(), Some("alice"));
}

#[tokio::test]
async fn shutdown_ends_sessions_and_serve_returns() {
    let fixture = common::Fixture::new();
    let server = interop_tests::build_server(
        &fixture.db,
        aac_tools::audit::MemorySink::new(),
        Options::default(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(aac_tools::http::serve(
        server,
        listener,
        HttpOptions::default().shutdown(shutdown.clone()),
    ));
    let mut raw = RawMcp::new(&url, Some(&fixture.full));
    raw.initialize().await;
    let mut stream = standalone_stream(&raw).await;

    shutdown.cancel();
    // Guards against a hang, not timing assertions.
    let served = tokio::time::timeout(std::time::Duration::from_secs(30), serving)
        .await
        .expect("serve returns after shutdown");
    served.unwrap().expect("serve ends without an error");
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while stream.recv().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the standalone stream ends");
}

#[tokio::test]
async fn the_scope_filter_lists_only_what_the_caller_may_call() {
    let server = TestServer::start(
        HttpOptions::default(),
        Options {
            filter_list_by_scope: true,
            ..Options::default()
        },
    )
    .await;
    let read_tools = [
        "count_slowly",
        "list_notes",
        "summarize_notes",
        "wait_for_cancellation",
    ];
    let mut reader = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    reader.initialize().await;
    let (_, msgs) = reader
        .send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await;
    let names = tool_names(&msgs.last().unwrap()["result"]["tools"]);
    assert_eq!(names, read_tools);
    let names = server.manifest_names(&server.fixture.reader).await;
    assert_eq!(names, read_tools);

    let mut full = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    full.initialize().await;
    let (_, msgs) = full
        .send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await;
    assert_eq!(
        msgs.last().unwrap()["result"]["tools"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
}

/// The `{"error", "reason", "status"}` object of an MCP error result: its one text
/// content, parsed. An error result carries no `structuredContent` (clients may check it
/// against the tool's output schema).
fn error_body(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// A `/mcp` POST over the body limit may carry a `tools/call`: answered 413 and recorded
/// once (the tool its `Mcp-Name` names, else the one its start names, as stdio reads an
/// over-long line), with the caller's principal when the token is valid.
#[tokio::test]
async fn an_mcp_body_over_the_limit_is_refused_and_recorded() {
    let server = TestServer::start(
        HttpOptions::default().max_body_bytes(4096),
        Options::default(),
    )
    .await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"add_note","arguments":{{"text":"{}"}}}}}}"#,
        "x".repeat(8192)
    );
    let anonymous = RawMcp::new(&server.mcp(), None);
    let response = anonymous.post().body(big.clone()).send().await.unwrap();
    assert_eq!(response.status(), 413);
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].tool, "add_note");
    assert_eq!(records[0].request_id.as_deref(), Some("1"));
    assert_eq!(records[0].principal, None);
    assert_eq!(records[0].status, 413);
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    server.sink.clear();
    let response = raw
        .post()
        .header("mcp-name", "add_note")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "body_too_large");
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].tool, "add_note");
    assert_eq!(records[0].check, Some(Check::Protocol));
    assert_eq!(records[0].reason.as_deref(), Some("body_too_large"));
    assert_eq!(records[0].status, 413);
    assert_eq!(records[0].principal.as_deref(), Some("alice"));
    assert_eq!(records[0].kind, aac_tools::audit::CallKind::Tool);
    // A read, a prompt or a completion too big to read is recorded as what its start says
    // it is (with headers that say the same, or none), so that `audit --kind resource`
    // finds it, whether its length was declared or it came in chunks.
    for (method, name, kind) in [
        (
            "resources/read",
            "notes://all",
            aac_tools::audit::CallKind::Resource,
        ),
        (
            "prompts/get",
            "review_note",
            aac_tools::audit::CallKind::Prompt,
        ),
        (
            "completion/complete",
            "review_note",
            aac_tools::audit::CallKind::Completion,
        ),
    ] {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"name":"{name}","uri":"{name}","pad":"{}"}}}}"#,
            "x".repeat(8192)
        );
        for how in ["headers", "start", "chunks"] {
            server.sink.clear();
            let request = match how {
                "headers" => raw
                    .post()
                    .header("mcp-method", method)
                    .header("mcp-name", name)
                    .body(big.clone()),
                "start" => raw.post().body(big.clone()),
                _ => {
                    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big
                        .as_bytes()
                        .chunks(1000)
                        .map(|c| Ok(c.to_vec()))
                        .collect();
                    raw.post()
                        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                            chunks,
                        )))
                }
            };
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 413, "{method} {how}");
            let records = server.sink.records();
            assert_eq!(records.len(), 1, "{method} {how}: {records:?}");
            assert_eq!(
                (records[0].kind, records[0].tool.as_str(), records[0].status),
                (kind, name, 413),
                "{method} {how}"
            );
            assert_eq!(records[0].principal.as_deref(), Some("alice"));
        }
    }
    // Headers that say something else than the body's start: the body is what was sent,
    // and a call of a destructive tool is not hidden as a read.
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"delete_note","arguments":{{"id":1,"confirm":true,"pad":"{}"}}}}}}"#,
        "x".repeat(8192)
    );
    for (method, name) in [
        (Some("resources/read"), Some("notes://all")),
        (None, Some("list_notes")),
        (Some("ping"), None),
    ] {
        server.sink.clear();
        let mut request = raw.post();
        if let Some(method) = method {
            request = request.header("mcp-method", method);
        }
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        let response = request.body(call.clone()).send().await.unwrap();
        assert_eq!(response.status(), 413);
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(
            (records[0].kind, records[0].tool.as_str()),
            (aac_tools::audit::CallKind::Tool, "delete_note"),
            "{method:?} {name:?}"
        );
        assert_eq!(records[0].request_id.as_deref(), Some("9"));
    }
    // The server still serves the session.
    let (status, _) = raw.call(2, "list_notes", serde_json::json!({})).await;
    assert_eq!(status, 200);
}

/// `GET /resources` and `GET /prompts`: 401 without a token, and each caller sees what
/// its scopes allow, as `resources/list`, `resources/templates/list` and `prompts/list`
/// show them.
#[tokio::test]
async fn get_resources_and_prompts_are_filtered_by_scope() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let client = reqwest::Client::new();
    for path in ["resources", "prompts"] {
        let url = format!("{}/{path}", server.base);
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    let get = |path: &'static str, token: String| {
        let client = client.clone();
        let url = format!("{}/{path}", server.base);
        async move {
            let response = client.get(&url).bearer_auth(token).send().await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
            response.json::<Value>().await.unwrap()
        }
    };
    let uris = |doc: &Value| -> Vec<String> {
        doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["uri"].as_str().unwrap().to_owned())
            .collect()
    };
    let full = get("resources", server.fixture.full.clone()).await;
    assert_eq!(uris(&full), ["notes://admin/count", "notes://all"]);
    assert_eq!(
        full["resourceTemplates"][0]["uriTemplate"],
        "notes://notes/{id}"
    );
    let reader = get("resources", server.fixture.reader.clone()).await;
    assert_eq!(uris(&reader), ["notes://all"]);
    assert_eq!(reader["resourceTemplates"].as_array().unwrap().len(), 1);
    let names = |doc: &Value| -> Vec<String> {
        doc["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names(&get("prompts", server.fixture.full.clone()).await),
        ["purge_plan", "review_note"]
    );
    assert_eq!(
        names(&get("prompts", server.fixture.reader.clone()).await),
        ["review_note"]
    );
}

/// A token-less `resources/read`, `prompts/get` or `completion/complete` is recorded once
/// with its kind, also inside a batch, and when its params are malformed (the target then
/// `(unknown)`).
#[tokio::test]
async fn token_less_reads_are_recorded_in_a_batch_and_when_malformed() {
    use aac_tools::audit::CallKind;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let anonymous = RawMcp::new(&server.mcp(), None);
    for (body, kind, target) in [
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"test://a"}}]"#,
            CallKind::Resource,
            "test://a",
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":7}}"#,
            CallKind::Resource,
            "(unknown)",
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"prompts/get"}"#,
            CallKind::Prompt,
            "(unknown)",
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"completion/complete","params":{"ref":"x"}}"#,
            CallKind::Completion,
            "(unknown)",
        ),
    ] {
        server.sink.clear();
        let response = anonymous.post().body(body.to_owned()).send().await.unwrap();
        assert_eq!(response.status(), 401, "{body}");
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{body}: {records:?}");
        assert_eq!(
            (records[0].kind, records[0].tool.as_str()),
            (kind, target),
            "{body}"
        );
        assert_eq!(records[0].reason.as_deref(), Some("missing_token"));
    }
}

/// A `resources/subscribe` is granted by reading the resource, so it is recorded as that
/// read (`"$subscribe": true`) once: refused by the gate without a token, refused by the
/// MCP layer for params of the wrong shape, refused for a token without the resource's
/// scope, or performed by the handler. A `resources/unsubscribe` is checked and recorded
/// the same way (`"$unsubscribe": true`).
#[tokio::test]
async fn a_subscription_over_http_is_recorded_once_as_the_read_it_performs() {
    use aac_tools::audit::CallKind;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let anonymous = RawMcp::new(&server.mcp(), None);
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let mut reader = RawMcp::new(&server.mcp(), Some(&server.fixture.reader));
    reader.initialize().await;
    for (method, key) in [
        ("resources/subscribe", "$subscribe"),
        ("resources/unsubscribe", "$unsubscribe"),
    ] {
        let subscribe = |id: u32, params: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
        };
        server.sink.clear();
        let response = anonymous
            .post()
            .body(subscribe(41, r#"{"uri":"notes://all"}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
        for (body, principal, check, outcome) in [
            (
                subscribe(41, r#"{"uri":"notes://all"}"#),
                None,
                Some(Check::Authenticate),
                Outcome::Denied,
            ),
            (
                subscribe(42, r#"{"uri":7}"#),
                Some("alice"),
                Some(Check::Protocol),
                Outcome::Denied,
            ),
            (
                subscribe(43, r#"{"uri":"notes://admin/count"}"#),
                Some("bob"),
                Some(Check::Scope),
                Outcome::Denied,
            ),
            (
                subscribe(44, r#"{"uri":"notes://all"}"#),
                Some("alice"),
                None,
                Outcome::Success,
            ),
        ] {
            if let Some(principal) = principal {
                server.sink.clear();
                let client = if principal == "bob" { &reader } else { &raw };
                let (status, answer) = client.send(body.clone()).await;
                assert_eq!(status, 200, "{body}");
                assert_eq!(
                    answer[0].get("error").is_none(),
                    outcome == Outcome::Success,
                    "{body}: {answer:?}"
                );
            }
            let records = server.sink.records();
            assert_eq!(records.len(), 1, "{body}: {records:?}");
            let r = &records[0];
            assert_eq!(r.kind, CallKind::Resource, "{body}");
            assert_eq!(r.principal.as_deref(), principal, "{body}");
            assert_eq!((r.check, r.outcome), (check, outcome), "{body}: {r:?}");
            assert_eq!(r.arguments[key], true, "{body}: {r:?}");
        }
    }
}

/// On 2026-07-28, which has no subscriptions, a `resources/subscribe` and a
/// `resources/unsubscribe` alike are answered "Method not found" by the MCP layer, each
/// recorded once as refused (kind `resource`).
#[tokio::test]
async fn on_2026_07_28_a_subscribe_and_an_unsubscribe_are_refused_alike() {
    use aac_tools::audit::CallKind;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    for (id, method, key) in [
        (61, "resources/subscribe", "$subscribe"),
        (62, "resources/unsubscribe", "$unsubscribe"),
    ] {
        server.sink.clear();
        let response = raw
            .post()
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", "notes://all")
            .body(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"uri":"notes://all","_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
            ))
            .send()
            .await
            .unwrap();
        let text = response.text().await.unwrap();
        assert!(text.contains("-32601"), "{method}: {text}");
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{method}: {records:?}");
        let r = &records[0];
        assert_eq!(
            (r.kind, r.outcome, r.check, r.tool.as_str()),
            (
                CallKind::Resource,
                Outcome::Denied,
                Some(Check::Protocol),
                "notes://all"
            ),
            "{method}: {r:?}"
        );
        assert_eq!(r.arguments[key], true, "{method}: {r:?}");
    }
}

/// The URI of the next resource update on a standalone stream, if one comes within
/// `wait_ms`.
async fn next_update(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>,
    wait_ms: u64,
) -> Option<Value> {
    let wait = std::time::Duration::from_millis(wait_ms);
    loop {
        match tokio::time::timeout(wait, rx.recv()).await {
            Ok(Some(m)) if m["method"] == "notifications/resources/updated" => {
                return Some(m["params"]["uri"].clone());
            }
            Ok(Some(_)) => continue,
            _ => return None,
        }
    }
}

/// A subscription over HTTP was granted to the token that subscribed: once that token is
/// revoked, the session's standalone stream hears of no more updates.
#[tokio::test]
async fn a_subscription_over_http_ends_when_its_token_is_revoked() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut alice = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    alice.initialize().await;
    let mut stream = standalone_stream(&alice).await;
    let (status, answer) = alice
        .send(r#"{"jsonrpc":"2.0","id":51,"method":"resources/subscribe","params":{"uri":"notes://all"}}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(answer[0]["result"], json!({}), "{answer:?}");
    server.server.notify_resource_updated("notes://all");
    assert_eq!(
        next_update(&mut stream, 30_000).await,
        Some(json!("notes://all"))
    );

    aac_tools::sqlite::TokenStore::open(&server.fixture.db)
        .unwrap()
        .revoke(&server.fixture.full)
        .unwrap();
    server.server.notify_resource_updated("notes://all");
    // Absence can only be waited for: a second is many times what the update above took.
    assert_eq!(next_update(&mut stream, 1_000).await, None);
}

/// Waits (up to 10 s) until no session forwards resource updates; how many still do.
async fn subscriptions_gone(server: &aac_tools::Server) -> usize {
    for _ in 0..200 {
        if server.subscribed_sessions() == 0 {
            return 0;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server.subscribed_sessions()
}

/// A subscription lives as long as its session: a `DELETE` of the session drops it at
/// once, though the resource never changes again (nothing kept per ended session), and
/// a stateless server, whose requests have no session to deliver updates on, does not
/// offer subscriptions and keeps nothing from a subscribe sent all the same.
#[tokio::test]
async fn an_ended_session_keeps_no_subscription() {
    let subscribe =
        r#"{"jsonrpc":"2.0","id":5,"method":"resources/subscribe","params":{"uri":"notes://all"}}"#;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut alice = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    let init = alice.initialize().await;
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"],
        true
    );
    let (status, answer) = alice.send(subscribe).await;
    assert_eq!(
        (status, &answer[0]["result"]),
        (200, &json!({})),
        "{answer:?}"
    );
    assert_eq!(server.server.subscribed_sessions(), 1);
    let session = alice.session.clone().unwrap();
    let deleted = alice
        .http
        .delete(server.mcp())
        .bearer_auth(&server.fixture.full)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(subscriptions_gone(&server.server).await, 0);

    let stateless =
        TestServer::start(HttpOptions::default().stateless(true), Options::default()).await;
    let mut raw = RawMcp::new(&stateless.mcp(), Some(&stateless.fixture.full));
    // No stream can carry an update: subscriptions are not offered.
    let init = raw.initialize().await;
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"], false,
        "{init}"
    );
    raw.session = None;
    for _ in 0..20 {
        let (status, _) = raw.send(subscribe).await;
        assert_eq!(status, 200);
    }
    assert_eq!(subscriptions_gone(&stateless.server).await, 0);
}

/// An authenticated `resources/read` the MCP layer refuses before the handler (params of
/// the wrong shape, a batch) is recorded once, as the gate's attempt; one the handler
/// reads is recorded once too, by the handler alone.
#[tokio::test]
async fn a_read_the_mcp_layer_refuses_is_recorded_once_and_a_read_it_takes_once() {
    use aac_tools::audit::CallKind;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    for body in [
        r#"{"jsonrpc":"2.0","id":31,"method":"resources/read","params":{"uri":7}}"#,
        r#"{"jsonrpc":"2.0","id":32,"method":"resources/read","params":"notes://all"}"#,
        r#"[{"jsonrpc":"2.0","id":33,"method":"resources/read","params":{"uri":"notes://all"}}]"#,
        r#"{"jsonrpc":"2.0","id":34,"method":"resources/read","params":{"uri":"notes://all"}}"#,
    ] {
        server.sink.clear();
        let _ = raw.send(body).await;
        // The handler's record (if it ran) is written before its answer; the gate's
        // before the MCP layer's answer leaves.
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{body}: {records:?}");
        assert_eq!(records[0].kind, CallKind::Resource, "{body}");
        assert_eq!(records[0].principal.as_deref(), Some("alice"), "{body}");
        if body.contains(r#""uri":"notes://all"}}"#) && !body.starts_with('[') {
            assert_ne!(
                records[0].check,
                Some(Check::Protocol),
                "{body}: {records:?}"
            );
        } else {
            assert_eq!(
                records[0].check,
                Some(Check::Protocol),
                "{body}: {records:?}"
            );
            assert_eq!(records[0].reason.as_deref(), Some("not_dispatched"));
        }
    }
}

/// A read whose request also says `tools/call` (a `name` of another shape beside its URI,
/// the text in its id, an `Mcp-Method` header naming a tool) is the read the MCP layer
/// takes: one record of it, none of a call that never was. And a read, prompt or
/// completion in a body nothing parses (UTF-16, trailing junk, cut short) is recorded as
/// what its bytes say, with a token or without.
#[tokio::test]
async fn a_read_is_recorded_as_a_read_whatever_else_its_request_says() {
    use aac_tools::audit::CallKind;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    for (body, headers) in [
        (
            r#"{"jsonrpc":"2.0","id":51,"method":"resources/read","params":{"uri":"notes://all","name":5}}"#,
            true,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"tools/call","method":"resources/read","params":{"uri":"notes://all","name":[1]}}"#,
            false,
        ),
    ] {
        server.sink.clear();
        let mut request = raw.post().body(body);
        if headers {
            request = request
                .header("mcp-method", "tools/call")
                .header("mcp-name", "delete_note");
        }
        let response = request.send().await.unwrap();
        let _ = response.text().await;
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{body}: {records:#?}");
        assert_eq!(
            (
                records[0].kind,
                records[0].tool.as_str(),
                records[0].outcome
            ),
            (CallKind::Resource, "notes://all", Outcome::Success),
            "{body}"
        );
    }

    let anonymous = RawMcp::new(&server.mcp(), None);
    for (method, params, kind) in [
        (
            "resources/read",
            r#"{"uri":"notes://all"}"#,
            CallKind::Resource,
        ),
        ("prompts/get", r#"{"name":"review_note"}"#, CallKind::Prompt),
        (
            "completion/complete",
            r#"{"ref":{"type":"ref/resource","uri":"notes://notes/{id}"},"argument":{"name":"id","value":"1"}}"#,
            CallKind::Completion,
        ),
    ] {
        let message =
            format!(r#"{{"jsonrpc":"2.0","id":61,"method":"{method}","params":{params}}}"#);
        let utf16: Vec<u8> = message
            .encode_utf16()
            .flat_map(|unit| unit.to_le_bytes())
            .collect();
        let cut = message.as_bytes()[..message.len() - 3].to_vec();
        for body in [utf16, format!("{message} x").into_bytes(), cut] {
            for (client, check) in [(&raw, Check::Protocol), (&anonymous, Check::Authenticate)] {
                server.sink.clear();
                let response = client.post().body(body.clone()).send().await.unwrap();
                assert!(response.status().as_u16() >= 400, "{message}");
                let records = server.sink.records();
                let shown = String::from_utf8_lossy(&body).into_owned();
                assert_eq!(records.len(), 1, "{shown:?}: {records:#?}");
                assert_eq!(
                    (records[0].kind, records[0].check),
                    (kind, Some(check)),
                    "{shown:?}"
                );
            }
        }
    }
}

/// A batch is refused whole (no call of it runs), and each call it holds leaves its
/// record, not only the first: a confirmed delete hidden behind a harmless first call is
/// in the trail. Without a token (401) and from an authenticated session (the MCP layer
/// refuses the batch).
#[tokio::test]
async fn every_call_of_a_refused_batch_is_recorded() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let call = |id: u64, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "add_note", "arguments": {"text": text}}})
    };
    let batch = json!([
        call(41, "a"),
        {"jsonrpc": "2.0", "id": 42, "method": "ping"},
        call(43, "b"),
        call(44, "c"),
    ])
    .to_string();
    let anonymous = RawMcp::new(&server.mcp(), None);
    let response = anonymous.post().body(batch.clone()).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let records = server.sink.records();
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.request_id.clone().unwrap_or_default(), r.check))
        .collect();
    assert_eq!(
        seen,
        [
            ("41".to_owned(), Some(Check::Authenticate)),
            ("43".to_owned(), Some(Check::Authenticate)),
            ("44".to_owned(), Some(Check::Authenticate)),
        ],
        "{records:?}"
    );

    server.sink.clear();
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let _ = raw.send(batch).await;
    let records = server.sink.records();
    let mut ids: Vec<_> = records
        .iter()
        .map(|r| r.request_id.clone().unwrap_or_default())
        .collect();
    ids.sort();
    assert_eq!(ids, ["41", "43", "44"], "{records:?}");
    for record in &records {
        assert_eq!(record.check, Some(Check::Protocol), "{record:?}");
        assert_eq!(record.reason.as_deref(), Some("not_dispatched"));
        assert_eq!(record.principal.as_deref(), Some("alice"), "{record:?}");
    }

    // Messages one after the other in one body (not JSON-RPC, refused whole), a
    // destructive call behind a harmless one: each call recorded, whatever white space a
    // lenient reader skips between them (JSON5's U+2028 and no-break space among it).
    let delete = json!({"jsonrpc": "2.0", "id": 46, "method": "tools/call",
        "params": {"name": "delete_note", "arguments": {"id": 1, "confirm": true}}});
    for separator in ["", "\u{2028}", " \u{a0}"] {
        server.sink.clear();
        let (status, _) = raw
            .send(format!("{}{separator}{delete}", call(45, "d")))
            .await;
        assert!(status >= 400 || status == 200, "{status}");
        let records = server.sink.records();
        let seen: Vec<_> = records
            .iter()
            .map(|r| (r.tool.as_str(), r.request_id.as_deref(), r.check))
            .collect();
        assert_eq!(
            seen,
            [
                ("add_note", Some("45"), Some(Check::Protocol)),
                ("delete_note", Some("46"), Some(Check::Protocol)),
            ],
            "{separator:?}: {records:?}"
        );
    }
    // One call inside such white space (U+2028 before it, a second byte-order mark):
    // refused as JSON, recorded as the call it is.
    for body in [
        format!("\u{2028}{delete}"),
        format!("\u{feff}\u{feff}{delete}\u{a0}"),
    ] {
        server.sink.clear();
        let (status, _) = raw.send(body.clone()).await;
        assert!(status >= 400, "{status}: {body:?}");
        let records = server.sink.records();
        let seen: Vec<_> = records
            .iter()
            .map(|r| (r.tool.as_str(), r.request_id.as_deref(), r.check))
            .collect();
        assert_eq!(
            seen,
            [("delete_note", Some("46"), Some(Check::Protocol))],
            "{body:?}: {records:?}"
        );
    }

    // A message that repeats its `method` (`tools/call` to a reader that keeps the first
    // key, `ping` to rmcp) beside another call or read, in a batch or one after the
    // other: each recorded as the call or read it may be, under its id.
    let twice = r#"{"jsonrpc":"2.0","id":48,"method":"tools/call","method":"ping","params":{"name":"delete_note","arguments":{"id":1,"confirm":true}}}"#;
    let read_twice = r#"{"jsonrpc":"2.0","id":49,"method":"resources/read","method":"ping","params":{"uri":"notes://all"}}"#;
    let read =
        r#"{"jsonrpc":"2.0","id":50,"method":"resources/read","params":{"uri":"notes://all"}}"#;
    let plain = call(51, "f").to_string();
    for (body, mut expected) in [
        (format!("{twice}{plain}"), vec!["48", "51"]),
        (format!("{plain} {twice}"), vec!["48", "51"]),
        (format!("[{read_twice},{read}]"), vec!["49", "50"]),
        (format!("[{read},{read_twice}]"), vec!["49", "50"]),
        (format!("{read_twice}{read}"), vec!["49", "50"]),
        (format!("{read_twice}{twice}"), vec!["48", "49"]),
    ] {
        for token in [None, Some(server.fixture.full.as_str())] {
            server.sink.clear();
            let client = RawMcp::new(&server.mcp(), token);
            let response = client.post().body(body.clone()).send().await.unwrap();
            assert!(response.status().as_u16() >= 400, "{body}");
            let records = server.sink.records();
            let mut ids: Vec<_> = records
                .iter()
                .map(|r| r.request_id.clone().unwrap_or_default())
                .collect();
            ids.sort();
            expected.sort();
            assert_eq!(ids, expected, "{body} ({token:?}): {records:?}");
        }
    }

    // A call after bytes no reader gets past, or spelled `tools\/call` in a body that is
    // not JSON: recorded all the same, as an unknown tool.
    let escaped = delete.to_string().replace("tools/call", r"tools\/call");
    for (body, expected) in [
        (
            format!("{} x {delete}", call(47, "e")),
            vec![("add_note", Some("47")), ("(unknown)", None)],
        ),
        (format!("xx{escaped}"), vec![("(unknown)", None)]),
    ] {
        server.sink.clear();
        let (status, _) = raw.send(body.clone()).await;
        assert!(status >= 400, "{status}: {body}");
        let records = server.sink.records();
        let seen: Vec<_> = records
            .iter()
            .map(|r| (r.tool.as_str(), r.request_id.as_deref()))
            .collect();
        assert_eq!(seen, expected, "{body}");
    }

    // A batch of 40: 32 recorded one by one, then one record that counts the rest, the
    // count in its arguments.
    server.sink.clear();
    let many: Vec<Value> = (0..40).map(|i| call(100 + i, "m")).collect();
    let _ = raw.send(Value::Array(many).to_string()).await;
    let records = server.sink.records();
    assert_eq!(records.len(), 33, "{records:?}");
    let last = records.last().unwrap();
    assert_eq!(last.tool, "(unknown)", "{last:?}");
    assert_eq!(last.arguments, json!({"more_calls": 8}), "{last:?}");
}

/// A client that sends a whole call and leaves at once (shuts its side down, then closes)
/// has that call processed and recorded once, with its principal, however quickly it
/// left: over REST and over `/mcp` in a session. Before, the server could drop the request
/// before its attempt began (no record at all) or before its token was checked (a
/// `cancelled` record without a principal), depending on the moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_leaves_at_once_is_processed_and_recorded_once() {
    use std::io::Write;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let token = server.fixture.full.clone();
    let mut mcp = RawMcp::new(&server.mcp(), Some(&token));
    mcp.initialize().await;
    let session = mcp.session.clone().expect("a session");
    let address = server.base.trim_start_matches("http://").to_owned();
    for round in 0..12 {
        let text = format!("left at once {round}");
        let (path, body, extra) = if round % 2 == 0 {
            (
                "/tools/add_note".to_owned(),
                json!({ "text": text }).to_string(),
                String::new(),
            )
        } else {
            (
                "/mcp".to_owned(),
                json!({"jsonrpc": "2.0", "id": 100 + round, "method": "tools/call",
                       "params": {"name": "add_note", "arguments": {"text": text}}})
                .to_string(),
                format!("Mcp-Session-Id: {session}\r\n"),
            )
        };
        server.sink.clear();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\n{extra}\r\n{body}",
            body.len()
        );
        let address = address.clone();
        tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(&address).expect("connects");
            stream.write_all(request.as_bytes()).expect("sends");
            stream
                .shutdown(std::net::Shutdown::Write)
                .expect("shuts down");
        })
        .await
        .unwrap();
        // The record comes when the call is done: wait for it (a guard against a hang,
        // not a timing assertion), then a moment for a second one that must not come.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while server.sink.records().is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{path} round {round}: {records:?}");
        let r = &records[0];
        assert_eq!(
            (r.tool.as_str(), r.outcome, r.principal.as_deref()),
            ("add_note", Outcome::Success, Some("alice")),
            "{path} round {round}: {r:?}"
        );
    }
}

/// Arguments that repeat a key say two things: refused as invalid arguments at that key,
/// over REST and over `/mcp`, before the tool runs, and recorded once, naming the key; a
/// destructive tool's `confirm` repeated (false, then true) is not the one JSON `true`
/// the confirm guard asks for, and gets the guard's exact refusal.
#[tokio::test]
async fn arguments_that_repeat_a_key_are_refused() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let full = &server.fixture.full;
    let client = reqwest::Client::new();
    let added = client
        .post(format!("{}/tools/add_note", server.base))
        .bearer_auth(full)
        .body(r#"{"text": "keep me"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 200);
    let mut raw = RawMcp::new(&server.mcp(), Some(full));
    raw.initialize().await;
    server.sink.clear();

    let arguments = r#"{"id": 1, "confirm": false, "confirm": true}"#;
    let rest = client
        .post(format!("{}/tools/delete_note", server.base))
        .bearer_auth(full)
        .body(arguments)
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 400);
    let body: Value = rest.json().await.unwrap();
    assert_eq!(body["reason"], "destructive_flag_missing", "{body}");
    assert_eq!(
        body["error"], "confirm: true required for destructive operations",
        "{body}"
    );

    let (status, answer) = raw
        .send(format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"delete_note","arguments":{arguments}}}}}"#
        ))
        .await;
    assert_eq!(status, 200);
    let result = &answer.last().unwrap()["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        error_body(result)["reason"],
        "destructive_flag_missing",
        "{result}"
    );
    // Any other key, in any tool.
    let (_, answer) = raw.call(4, "add_note", json!({"text": "x"})).await;
    assert_eq!(answer.unwrap()["result"]["isError"], false);
    let (_, answer) = raw
        .send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add_note","arguments":{"text":"a","text":"b"}}}"#)
        .await;
    assert_eq!(answer.last().unwrap()["result"]["isError"], true);

    let records: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .map(|r| (r.tool, r.check, r.reason, r.transport))
        .collect();
    let refused = |tool: &str, transport: &str| {
        (
            tool.to_owned(),
            Some(Check::Validate),
            Some("invalid_arguments".to_owned()),
            transport.to_owned(),
        )
    };
    let unconfirmed = |transport: &str| {
        (
            "delete_note".to_owned(),
            Some(Check::Confirm),
            Some("destructive_flag_missing".to_owned()),
            transport.to_owned(),
        )
    };
    assert_eq!(
        records,
        [
            unconfirmed("http"),
            unconfirmed("streamable_http"),
            (
                "add_note".to_owned(),
                None,
                None,
                "streamable_http".to_owned()
            ),
            refused("add_note", "streamable_http"),
        ]
    );
    // Each refusal's record names the key repeated, on both routes.
    let repeated: Vec<_> = server
        .sink
        .records()
        .into_iter()
        .map(|r| r.arguments.get("$repeated_key").cloned())
        .collect();
    assert_eq!(
        repeated,
        [
            Some(json!("/confirm")),
            Some(json!("/confirm")),
            None,
            Some(json!("/text"))
        ]
    );
    // The note is still there.
    let notes = || async {
        client
            .post(format!("{}/tools/list_notes", server.base))
            .bearer_auth(full)
            .body("{}")
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    let kept = notes().await;
    assert_eq!(kept["notes"][0]["text"], "keep me", "{kept}");

    // The call's `params` repeating its `arguments` (a `confirm: false` first, what a
    // reader keeping the first key saw) or its `name`: never run, and the record names
    // the repeat, not only the last value.
    for (body, pointer) in [
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_note","arguments":{"id":1,"confirm":false},"arguments":{"id":1,"confirm":true}}}"#,
            "/params/arguments",
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"list_notes","arguments":{"id":1,"confirm":true},"name":"delete_note"}}"#,
            "/params/name",
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"delete_note","arguments":{"id":1,"confirm":false}},"params":{"name":"delete_note","arguments":{"id":1,"confirm":true}}}"#,
            "/params",
        ),
    ] {
        server.sink.clear();
        let _ = raw.send(body).await;
        let records = server.sink.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_ne!(records[0].outcome, Outcome::Success, "{records:?}");
        assert_eq!(
            records[0].arguments.get("$repeated_key"),
            Some(&json!(pointer)),
            "{records:?}"
        );
    }
    let kept = notes().await;
    assert_eq!(kept["notes"][0]["text"], "keep me", "{kept}");

    // A prompt's arguments too: refused, recorded, the prompt never rendered.
    server.sink.clear();
    let (_, answer) = raw
        .send(r#"{"jsonrpc":"2.0","id":6,"method":"prompts/get","params":{"name":"review_note","arguments":{"id":"1","id":"2"}}}"#)
        .await;
    let error = &answer.last().unwrap()["error"];
    assert_eq!(error["code"], -32602, "{answer:?}");
    assert!(
        error["message"].as_str().unwrap().contains("`/id`"),
        "{answer:?}"
    );
    let records = server.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].check, records[0].reason.as_deref()),
        (Some(Check::Validate), Some("invalid_arguments"))
    );
    assert_eq!(records[0].kind, aac_tools::audit::CallKind::Prompt);
}

/// An answer's stream of bytes.
type Chunks = std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

/// The answer stream of a `count_slowly` call with a progress token, read until its
/// first progress notification (the call runs), and what was read.
async fn running(response: reqwest::Response) -> (Chunks, String) {
    use futures_util::StreamExt;
    let mut stream: Chunks = Box::pin(response.bytes_stream().map(|r| r.map(|b| b.to_vec())));
    let mut text = String::new();
    while !text.contains("notifications/progress") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), stream.next())
            .await
            .expect("progress within 30 s")
            .expect("the stream goes on")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    (stream, text)
}

/// A client that drops the stream of a call still running does not free its id: the call
/// goes on in the MCP layer, and a second request under the id (answered with the first
/// one's result, or taking it away, when the id was freed with the stream) is refused 409
/// until the call has ended; then the id is free again.
#[tokio::test]
async fn a_request_id_stays_held_while_its_call_runs_after_its_stream_is_dropped() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let slow = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "count_slowly", "arguments": {"to": 300}, "_meta": {"progressToken": 1}},
    });
    let response = raw.post().body(slow.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let (stream, _) = running(response).await;
    // The client goes away from the answer; the progress written after it fails, and the
    // server drops the answer's body.
    drop(stream);
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let ping = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
    let refused = raw.post().body(ping).send().await.unwrap();
    assert_eq!(refused.status(), 409, "the id was freed while its call ran");
    // Once the call has ended (its record written), the id is free.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !server
        .sink
        .records()
        .iter()
        .any(|r| r.tool == "count_slowly" && r.request_id.as_deref() == Some("7"))
    {
        assert!(std::time::Instant::now() < deadline, "the call never ended");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let answer = raw.post().body(ping).send().await.unwrap();
        if answer.status() == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the id stayed held");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A server shutting down answers the calls it took before it ends their sessions: a
/// call running when the shutdown begins finishes and its answer reaches the client (its
/// record says it ran; cut off, the client saw a failure for a call that had run, and a
/// retry ran it twice). New connections are refused meanwhile, and `serve` returns.
#[tokio::test]
async fn a_call_running_when_the_server_shuts_down_is_answered() {
    use futures_util::StreamExt;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let body = json!({
        "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "count_slowly", "arguments": {"to": 10}, "_meta": {"progressToken": 1}},
    });
    let response = raw.post().body(body.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    // The call runs: its first progress notification is here.
    let (mut stream, mut text) = running(response).await;
    let stopping = tokio::spawn(server.stop());
    let rest = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => text.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => break,
            }
        }
    })
    .await;
    assert!(rest.is_ok(), "the stream ends");
    let answer = messages(&text)
        .into_iter()
        .find(|m| m["id"] == 9)
        .unwrap_or_else(|| panic!("no answer to the call in {text}"));
    assert_eq!(
        answer["result"]["content"][0]["text"], "counted to 10",
        "{answer}"
    );
    let server = tokio::time::timeout(std::time::Duration::from_secs(30), stopping)
        .await
        .expect("serve returns")
        .unwrap();
    let records = server.sink.records();
    let call = records.iter().find(|r| r.tool == "count_slowly").unwrap();
    assert_eq!(call.status, 200);
}

/// Two requests of one session in flight under one JSON-RPC id: rmcp matches answers to
/// requests by id, and lost or swapped them while both were recorded as answered. The
/// second is refused 409 and recorded; once the first is answered, its id is free again.
#[tokio::test]
async fn a_request_id_already_in_flight_in_the_session_is_refused_and_recorded() {
    use futures_util::StreamExt;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    raw.initialize().await;
    let slow = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "count_slowly", "arguments": {"to": 10}, "_meta": {"progressToken": 1}},
    });
    let response = raw.post().body(slow.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let (mut stream, mut text) = running(response).await;
    // The same id, written another way (rmcp reads 7.0 as 7).
    let again = r#"{"jsonrpc":"2.0","id":7.0,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#;
    let refused = raw.post().body(again).send().await.unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["reason"], "duplicate_request_id", "{body}");
    // Its key or method written with escapes, as rmcp reads them (a scan of the raw bytes
    // missed them, and the call's answer was lost or swapped with the ping's).
    for ping in [
        r#"{"jsonrpc":"2.0","\u0069d":7,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":7,"m\u0065thod":"ping"}"#,
        r#"{"jsonrpc":"2.0","\u0069d":7,"method":"tools/call","params":{"name":5}}"#,
    ] {
        let refused = raw.post().body(ping).send().await.unwrap();
        assert_eq!(refused.status(), 409, "{ping}");
    }
    // Another id is served meanwhile.
    let (status, _) = raw.call(8, "list_notes", json!({})).await;
    assert_eq!(status, 200);

    while let Some(Ok(chunk)) = stream.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let answer = messages(&text).into_iter().find(|m| m["id"] == 7).unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "counted to 10");
    // Answered: the id is free again.
    let (status, _) = raw.call(7, "list_notes", json!({})).await;
    assert_eq!(status, 200);

    let records = server.sink.records();
    let refusal = records
        .iter()
        .find(|r| r.reason.as_deref() == Some("duplicate_request_id"))
        .unwrap_or_else(|| panic!("no record of the refusal: {records:?}"));
    assert_eq!(
        (refusal.tool.as_str(), refusal.check, refusal.status),
        ("list_notes", Some(Check::Protocol), 409)
    );
    assert_eq!(refusal.principal.as_deref(), Some("alice"));
}

/// An `initialize` is kept for the session's life, parsed: one over 64 KiB is refused 413
/// and opens no session; a proper one then does.
#[tokio::test]
async fn an_initialize_over_its_limit_is_refused() {
    use aac_tools::audit::CallKind;
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    let padding = vec![json!([]); 40_000];
    let response = raw
        .post()
        .body(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"experimental": {"pad": padding}},
                "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert!(response.headers().get("mcp-session-id").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "body_too_large", "{body}");
    // Its key written with an escape (`m\u0065thod` is `method`) is the same message.
    let response = raw
        .post()
        .body(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"experimental": {"pad": vec![json!([]); 40_000]}},
                "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string()
            .replacen(r#""method""#, r#""m\u0065thod""#, 1),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert!(
        server.sink.records().is_empty(),
        "an initialize alone is no call"
    );

    // What the body carries beside it is refused with it, and each call, read or prompt
    // recorded as answered: 413 (nothing of it was run).
    let big_initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"experimental": {"pad": "x".repeat(70_000)}},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let read = json!({"jsonrpc": "2.0", "id": "r", "method": "resources/read",
                      "params": {"uri": "notes://all"}});
    let call = json!({"jsonrpc": "2.0", "id": "c", "method": "tools/call",
                      "params": {"name": "delete_note", "arguments": {"id": 1, "confirm": true}}});
    for (body, kind, id, count) in [
        (
            format!("{big_initialize}{read}"),
            CallKind::Resource,
            "r",
            1,
        ),
        (format!("{big_initialize} {call}"), CallKind::Tool, "c", 1),
        (
            format!("{big_initialize}{read}{call}"),
            CallKind::Tool,
            "c",
            2,
        ),
        // One message that says both (a reader keeping the first key, one keeping the last).
        (
            big_initialize.to_string().replacen(
                r#""method":"initialize""#,
                r#""method":"initialize","method":"resources/read""#,
                1,
            ),
            CallKind::Resource,
            "0",
            1,
        ),
    ] {
        server.sink.clear();
        let response = raw.post().body(body.clone()).send().await.unwrap();
        assert_eq!(response.status(), 413, "{}", &body[body.len() - 200..]);
        let records = server.sink.records();
        assert!(
            records
                .iter()
                .any(|r| r.kind == kind && r.request_id.as_deref() == Some(id)),
            "{records:?}"
        );
        for record in &records {
            assert_eq!(record.status, 413, "{record:?}");
            assert_eq!(record.check, Some(Check::Protocol), "{record:?}");
            assert_eq!(record.principal.as_deref(), Some("alice"), "{record:?}");
        }
        assert_eq!(records.len(), count, "{records:?}");
    }
    raw.initialize().await;
    assert!(raw.session.is_some());
}

/// SSE priming events (an event with an id and no data, SEP-1699) belong to 2025-11-25
/// and later: a session of an earlier version gets none (its clients read every event's
/// data as a message, and the official SDKs of those versions fail on an empty one),
/// neither in the `initialize` answer nor in a call's; a session of 2025-11-25 gets them.
#[tokio::test]
async fn priming_events_only_for_the_versions_that_have_them() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    for (version, primed) in [
        ("2024-11-05", false),
        ("2025-03-26", false),
        ("2025-06-18", false),
        ("2025-11-25", true),
    ] {
        let mut raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
        let initialize = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        });
        let response = raw
            .post()
            .body(initialize.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{version}");
        raw.session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = response.text().await.unwrap();
        let result = messages(&body).pop().expect("the initialize result");
        assert_eq!(result["result"]["protocolVersion"], version);
        let has_priming = |body: &str| {
            body.split("\n\n")
                .any(|event| event.lines().any(|line| line.trim_end() == "data:"))
        };
        assert_eq!(has_priming(&body), primed, "{version}: {body:?}");
        assert_eq!(body.contains("retry:"), primed, "{version}: {body:?}");

        let mut raw = raw;
        raw.http = reqwest::Client::builder()
            .default_headers(reqwest::header::HeaderMap::from_iter([(
                reqwest::header::HeaderName::from_static("mcp-protocol-version"),
                version.parse().unwrap(),
            )]))
            .build()
            .unwrap();
        let (status, _) = raw
            .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        assert_eq!(status, 202, "{version}");
        let call = raw
            .post()
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(call.status(), 200, "{version}");
        let body = call.text().await.unwrap();
        assert_eq!(has_priming(&body), primed, "{version}: {body:?}");
        let answer = messages(&body).pop().expect("the call's answer");
        assert_eq!(answer["id"], 1, "{version}");
        assert_eq!(answer["result"]["isError"], false, "{version}");
    }
    server.stop().await;
}

/// An `initialize` of many small values is refused 413 under 64 KiB too (each value is
/// kept parsed for the session: 64 KiB of `{"":0}` took 6 MB a session, 128 sessions a
/// principal); one of a few hundred opens its session.
#[tokio::test]
async fn an_initialize_of_too_many_values_is_refused() {
    let server = TestServer::start(HttpOptions::default(), Options::default()).await;
    let raw = RawMcp::new(&server.mcp(), Some(&server.fixture.full));
    let initialize = |objects: usize| {
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"experimental": (0..objects)
                .map(|i| (format!("k{i}"), json!({"": 0})))
                .collect::<serde_json::Map<_, _>>()},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string()
    };
    let many = initialize(2_000);
    assert!(many.len() < 64 * 1024);
    let response = raw.post().body(many).send().await.unwrap();
    assert_eq!(response.status(), 413);
    assert!(response.headers().get("mcp-session-id").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "body_too_large", "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("1024 JSON values"),
        "{body}"
    );
    let response = raw.post().body(initialize(200)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("mcp-session-id").is_some());
    server.stop().await;
}
