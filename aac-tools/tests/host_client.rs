//! The host's MCP client and retry policy against a counting Streamable HTTP server that
//! is not ours (hand-written JSON-RPC over a raw socket, see `host_support`).
#![cfg(feature = "host")]

mod host_support;

use std::collections::HashMap;
use std::time::Duration;

use aac_tools::host::{Backoff, Retry, ToolPolicy, Trust, call_with_retry};
use aac_tools::mcp::client::{Client, ClientErrorKind, Endpoint};
use host_support::{Behaviour, FakeServer, tool};
use serde_json::{Value, json};

const T: Option<bool> = Some(true);
const F: Option<bool> = Some(false);

fn tools() -> Vec<Value> {
    vec![
        tool("get_thing", "Get thing", [T, F, T, F], false),
        tool("create_thing", "Create thing", [F, F, F, F], false),
        tool("update_thing", "Update thing", [F, F, T, F], false),
        tool("delete_thing", "Delete thing", [F, T, T, F], true),
        tool("flaky_get", "Flaky get", [T, F, T, F], false),
    ]
}

fn fast_backoff(retries: u32) -> Backoff {
    Backoff::new(Duration::from_millis(5), Duration::from_millis(20), retries)
}

fn server(behaviours: &[(&str, Behaviour)]) -> FakeServer {
    let behaviours: HashMap<String, Behaviour> = behaviours
        .iter()
        .map(|(name, b)| ((*name).to_owned(), b.clone()))
        .collect();
    FakeServer::start(tools(), behaviours, None)
}

#[tokio::test]
async fn lists_tools_as_served_and_calls_by_name() {
    let answer = json!({
        "content": [{"type": "text", "text": "{\"id\":\"T-1\"}"}],
        "structuredContent": {"id": "T-1"}
    });
    let server = server(&[("get_thing", Behaviour::Answer(answer))]);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    assert_eq!(client.server_name(), Some("counting-server"));

    let listed = client.list_tools().await.unwrap();
    let names: Vec<&str> = listed.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "get_thing",
            "create_thing",
            "update_thing",
            "delete_thing",
            "flaky_get"
        ]
    );
    let delete = &listed[3];
    assert_eq!(delete["annotations"]["destructiveHint"], json!(true));
    assert_eq!(delete["title"], json!("Delete thing"));
    let policy = ToolPolicy::new(delete, Trust::Trusted).unwrap();
    assert!(policy.must_ask() && policy.declares_confirm());

    let result = client
        .call_tool("get_thing", json!({"id": "T-1"}))
        .await
        .unwrap();
    assert!(!result.is_error());
    assert_eq!(result.structured_content(), Some(&json!({"id": "T-1"})));
    assert_eq!(result.text(), "{\"id\":\"T-1\"}");
    assert_eq!(server.calls("get_thing"), 1);
    assert_eq!(server.call_params()[0]["arguments"], json!({"id": "T-1"}));
    client.close().await;
}

#[tokio::test]
async fn a_tool_error_is_an_answer_and_a_jsonrpc_error_is_not_a_transport_failure() {
    let refusal = json!({
        "isError": true,
        "content": [{"type": "text", "text": "{\"error\":\"confirm: true required for destructive operations\",\"reason\":\"destructive_flag_missing\",\"status\":400}"}]
    });
    let server = server(&[("delete_thing", Behaviour::Answer(refusal))]);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();

    let result = client
        .call_tool("delete_thing", json!({"id": "T-1"}))
        .await
        .unwrap();
    assert!(result.is_error());
    assert_eq!(
        result.error_reason().as_deref(),
        Some("destructive_flag_missing")
    );
    assert_eq!(
        result.error_message().as_deref(),
        Some("confirm: true required for destructive operations")
    );

    let err = client
        .call_tool("no_such_tool", json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Protocol);
    assert_eq!(err.code(), Some(-32602));
    assert!(!err.is_transport_failure());

    let err = client.call_tool("get_thing", json!([1])).await.unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Protocol);
    assert_eq!(server.calls("get_thing"), 0, "bad arguments are not sent");
    client.close().await;
}

#[tokio::test]
async fn a_dropped_connection_is_a_transport_failure_sent_once() {
    let server = server(&[("create_thing", Behaviour::Drop)]);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let err = client
        .call_tool("create_thing", json!({"id": "T-1"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Transport, "{err}");
    assert!(err.is_transport_failure());
    assert_eq!(server.calls("create_thing"), 1);
    client.close().await;
}

/// The retry loop as a host runs it: the tool's policy decides, the client reports.
async fn call_as_host(
    server: &FakeServer,
    name: &str,
    backoff: &Backoff,
) -> (Result<aac_tools::mcp::client::ToolResult, String>, u32) {
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let listed = client.list_tools().await.unwrap();
    let def = listed.iter().find(|t| t["name"] == name).unwrap();
    let policy = ToolPolicy::new(def, Trust::Trusted).unwrap();
    let done = call_with_retry(
        policy.retry(),
        backoff,
        |err: &aac_tools::mcp::client::ClientError| err.is_transport_failure(),
        |_| client.call_tool(name, json!({"id": "T-1"})),
    )
    .await;
    client.close().await;
    (done.result.map_err(|e| e.to_string()), done.attempts)
}

#[tokio::test]
async fn a_non_idempotent_call_is_never_retried() {
    let server = server(&[("create_thing", Behaviour::Drop)]);
    let (result, attempts) = call_as_host(&server, "create_thing", &fast_backoff(5)).await;
    assert!(result.is_err());
    assert_eq!(attempts, 1);
    // The counting server proves it: one tools/call reached it, not six.
    assert_eq!(server.calls("create_thing"), 1);
    assert_eq!(server.all_calls(), 1);
}

#[tokio::test]
async fn an_idempotent_call_is_retried_up_to_the_limit() {
    let server = server(&[("update_thing", Behaviour::Drop)]);
    let (result, attempts) = call_as_host(&server, "update_thing", &fast_backoff(3)).await;
    assert!(result.is_err());
    assert_eq!(attempts, 4);
    assert_eq!(server.calls("update_thing"), 4);
}

#[tokio::test]
async fn a_read_only_call_succeeds_after_transport_failures() {
    let answer = json!({"content": [{"type": "text", "text": "third time lucky"}]});
    let server = server(&[("flaky_get", Behaviour::DropThenAnswer(2, answer))]);
    let (result, attempts) = call_as_host(&server, "flaky_get", &fast_backoff(3)).await;
    assert_eq!(result.unwrap().text(), "third time lucky");
    assert_eq!(attempts, 3);
    assert_eq!(server.calls("flaky_get"), 3);
}

#[tokio::test]
async fn a_tool_error_is_not_retried_even_when_safe() {
    let failed = json!({"isError": true, "content": [{"type": "text", "text": "no such thing"}]});
    let server = server(&[("update_thing", Behaviour::Answer(failed))]);
    let (result, attempts) = call_as_host(&server, "update_thing", &fast_backoff(3)).await;
    let result = result.unwrap();
    assert!(result.is_error());
    assert_eq!(result.error_reason(), None);
    assert_eq!(result.error_message().as_deref(), Some("no such thing"));
    assert_eq!(attempts, 1);
    assert_eq!(server.calls("update_thing"), 1);
}

#[tokio::test]
async fn the_bearer_token_is_sent_and_a_wrong_one_is_unauthorized() {
    let server = FakeServer::start(tools(), HashMap::new(), Some("s3cret"));
    let endpoint = Endpoint::http(server.url()).bearer("s3cret");
    assert!(!format!("{endpoint:?}").contains("s3cret"));
    let client = Client::connect(&endpoint).await.unwrap();
    client
        .call_tool("get_thing", json!({"id": "x"}))
        .await
        .unwrap();
    client.close().await;
    let seen = server.seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some("Bearer s3cret"))
    );

    let err = Client::connect(&Endpoint::http(server.url()).bearer("wrong"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Unauthorized, "{err}");
    let err = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Unauthorized, "{err}");
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = Client::connect(&Endpoint::http(format!("http://127.0.0.1:{port}/mcp")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Connect, "{err}");

    let err = Client::connect(&Endpoint::stdio("/nonexistent/aac-no-such-server"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Connect, "{err}");
}

#[test]
fn retry_answers_match_the_policy() {
    let by_name = |name: &str| {
        let t = tools().into_iter().find(|t| t["name"] == name).unwrap();
        ToolPolicy::new(&t, Trust::Trusted).unwrap().retry()
    };
    assert_eq!(by_name("create_thing"), Retry::Never);
    assert_eq!(by_name("update_thing"), Retry::Safe);
    assert_eq!(by_name("delete_thing"), Retry::Safe);
}

fn refusal(status: u16, www_authenticate: Option<&str>, body: &str) -> Behaviour {
    Behaviour::Status {
        status,
        www_authenticate: www_authenticate.map(str::to_owned),
        body: body.to_owned(),
    }
}

/// No rmcp type name (`rmcp::…`, `Transport [`…`]`) leaks into a message.
fn assert_in_our_words(message: &str) {
    for leak in ["rmcp", "Transport [", "reqwest", "Worker", "when send"] {
        assert!(!message.contains(leak), "`{leak}` in: {message}");
    }
}

#[tokio::test]
async fn an_http_403_insufficient_scope_is_the_servers_answer_never_retried() {
    let scope = refusal(
        403,
        Some(
            r#"Bearer error="insufficient_scope", scope="things:read", resource_metadata="http://x/.well-known/oauth-protected-resource/mcp""#,
        ),
        r#"{"error":"this tool requires the scopes: things:read","reason":"insufficient_scope","status":403}"#,
    );
    let server = server(&[("flaky_get", scope.clone()), ("create_thing", scope)]);
    for tool in ["flaky_get", "create_thing"] {
        let (result, attempts) = call_as_host(&server, tool, &fast_backoff(3)).await;
        let message = result.unwrap_err();
        assert_eq!(attempts, 1, "{tool}: {message}");
        assert_eq!(server.calls(tool), 1, "{tool} was resent");
        assert!(message.contains("things:read"), "{message}");
        assert_in_our_words(&message);
    }

    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let err = client
        .call_tool("create_thing", json!({"id": "T-1"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Refused, "{err}");
    assert!(!err.is_transport_failure());
    let refusal = err.refusal().expect("an HTTP refusal");
    assert_eq!(refusal.status(), 403);
    assert_eq!(refusal.reason(), "insufficient_scope");
    assert!(refusal.message().contains("things:read"), "{refusal:?}");
    client.close().await;
}

#[tokio::test]
async fn any_http_4xx_to_a_call_is_a_refusal_with_the_servers_reason() {
    let server = server(&[
        // An aac-tools error body without a challenge: its reason and message are used.
        (
            "update_thing",
            refusal(
                400,
                None,
                r#"{"error":"id: not a valid key","reason":"invalid_arguments","status":400}"#,
            ),
        ),
        ("flaky_get", refusal(404, None, "no such route")),
        (
            "get_thing",
            refusal(
                401,
                Some(r#"Bearer error="invalid_token", error_description="the token was revoked""#),
                "",
            ),
        ),
        ("delete_thing", refusal(429, None, "slow down")),
    ]);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let cases = [
        (
            "update_thing",
            400,
            "invalid_arguments",
            "id: not a valid key",
        ),
        ("flaky_get", 404, "not_found", "no such route"),
        ("get_thing", 401, "invalid_token", "the token was revoked"),
        ("delete_thing", 429, "too_many_requests", ""),
    ];
    for (tool, status, reason, message) in cases {
        let err = client
            .call_tool(tool, json!({"id": "T-1"}))
            .await
            .unwrap_err();
        assert!(!err.is_transport_failure(), "{tool}: {err}");
        assert_in_our_words(err.message());
        let refusal = err.refusal().unwrap_or_else(|| panic!("{tool}: {err}"));
        assert_eq!(refusal.status(), status, "{tool}: {err}");
        assert_eq!(refusal.reason(), reason, "{tool}: {err}");
        assert!(refusal.message().contains(message), "{tool}: {err}");
        assert_eq!(server.calls(tool), 1, "{tool}");
    }
    client.close().await;
}

#[tokio::test]
async fn a_404_on_a_session_is_not_resent_on_a_new_session() {
    let behaviours = HashMap::from([(
        "create_thing".to_owned(),
        refusal(404, None, "session not found"),
    )]);
    let options = host_support::Options {
        session: Some("fake-session-1".to_owned()),
        ..Default::default()
    };
    let server = FakeServer::start_with(tools(), behaviours, options);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let err = client
        .call_tool("create_thing", json!({"id": "T-1"}))
        .await
        .unwrap_err();
    assert!(!err.is_transport_failure(), "{err}");
    assert_eq!(err.refusal().map(|r| r.status()), Some(404), "{err}");
    assert_in_our_words(err.message());
    assert_eq!(
        server.calls("create_thing"),
        1,
        "resent after a new handshake"
    );
    client.close().await;
}

#[tokio::test]
async fn connection_errors_are_told_in_our_words() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/mcp");
    let err = Client::connect(&Endpoint::http(url.as_str()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Connect, "{err}");
    assert!(err.message().contains("connection refused"), "{err}");
    assert!(err.message().contains(&url), "{err}");
    assert_in_our_words(err.message());

    let server = FakeServer::start(tools(), HashMap::new(), Some("s3cret"));
    let err = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Unauthorized, "{err}");
    assert!(err.message().contains("requires a token"), "{err}");
    assert_in_our_words(err.message());
    let err = Client::connect(&Endpoint::http(server.url()).bearer("wrong"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Unauthorized, "{err}");
    assert!(err.message().contains("refused the token"), "{err}");
    assert_eq!(err.refusal().map(|r| r.reason()), Some("invalid_token"));
    assert_in_our_words(err.message());

    // Not an MCP endpoint: the handshake is refused with a 404.
    let options = host_support::Options {
        refuse_initialize: Some((404, "not here".to_owned())),
        ..Default::default()
    };
    let server = FakeServer::start_with(tools(), HashMap::new(), options);
    let err = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Connect, "{err}");
    assert!(err.message().contains("HTTP 404"), "{err}");
    assert_in_our_words(err.message());

    let err = Client::connect(&Endpoint::stdio("/nonexistent/aac-no-such-server"))
        .await
        .unwrap_err();
    assert_in_our_words(err.message());
}

#[tokio::test]
async fn a_tool_with_odd_hints_does_not_spoil_the_list() {
    let mut listed = tools();
    listed.push(json!({
        "name": "odd_thing",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": "true", "destructiveHint": 0, "idempotentHint": null}
    }));
    listed.push(json!({"title": "no name", "inputSchema": {"type": "object"}}));
    listed.push(json!("not even an object"));
    let server = FakeServer::start(listed, HashMap::new(), None);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"get_thing"), "{names:?}");
    let odd = tools.iter().find(|t| t["name"] == "odd_thing").unwrap();
    let policy = ToolPolicy::new(odd, Trust::Trusted).unwrap();
    assert!(policy.must_ask(), "odd hints count as absent: destructive");
    assert_eq!(policy.retry(), Retry::Never);
    assert_eq!(
        policy.malformed_hints(),
        ["readOnlyHint", "destructiveHint"],
        "null is absent, not malformed"
    );
    let result = client
        .call_tool("get_thing", json!({"id": "x"}))
        .await
        .unwrap();
    assert!(!result.is_error());
    client.close().await;
}

/// The client speaks the session protocols, which `aac-host` and host.md promise: it
/// offers 2025-11-25 in `initialize`, not 2026-07-28, and a `tools/call` answered
/// `input_required` (2026-07-28's question) is sent once, never again with an answer.
#[tokio::test]
async fn the_client_offers_a_session_protocol_and_sends_one_call() {
    let input_required = json!({"resultType": "input_required", "requestState": "round"});
    let server = server(&[("get_thing", Behaviour::Answer(input_required))]);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let offered: Vec<Value> = server
        .seen()
        .into_iter()
        .filter(|s| s.method.as_deref() == Some("initialize"))
        .map(|s| s.params["protocolVersion"].clone())
        .collect();
    assert_eq!(offered, [json!("2025-11-25")]);

    let err = client
        .call_tool("get_thing", json!({"id": "T-1"}))
        .await
        .unwrap_err();
    assert_eq!(server.calls("get_thing"), 1, "one tools/call, never resent");
    assert_eq!(err.kind(), ClientErrorKind::InputRequired, "{err}");
    assert!(!err.is_transport_failure());
    assert!(err.message().contains("input_required"), "{err}");
    client.close().await;
}

/// A JSON-RPC error keeps the server's own message beside its code.
#[tokio::test]
async fn a_jsonrpc_error_keeps_its_code_and_message() {
    let server = server(&[]);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let err = client
        .call_tool("no_such_thing", json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Protocol);
    assert_eq!(err.code(), Some(-32602));
    assert_eq!(err.server_message(), Some("unknown tool: no_such_thing"));
    client.close().await;
}

/// `"structuredContent": null` is no structured content: the text is the result.
#[tokio::test]
async fn null_structured_content_counts_as_absent() {
    let answer = json!({"content": [{"type": "text", "text": "done"}], "structuredContent": null});
    let server = server(&[("get_thing", Behaviour::Answer(answer))]);
    let client = Client::connect(&Endpoint::http(server.url()))
        .await
        .unwrap();
    let result = client.call_tool("get_thing", json!({})).await.unwrap();
    assert_eq!(result.structured_content(), None);
    assert_eq!(result.text(), "done");
    client.close().await;
}

/// An HTTP 200 whose body is no JSON-RPC answer (empty, HTML, JSON-RPC that is not well
/// formed) is the server's answer, unreadable: never a transport failure (never resent,
/// even for a read-only tool), no JSON-RPC error, and told without rmcp's type names.
#[tokio::test]
async fn an_http_200_that_is_no_jsonrpc_answer_is_unreadable_not_resent() {
    for body in [
        "",
        "<html>ok</html>",
        r#"{"jsonrpc": "2.0", "id": 2, "error": {"code": -32603}}"#,
        "{}",
    ] {
        let server = server(&[("get_thing", refusal(200, None, body))]);
        let (result, attempts) = call_as_host(&server, "get_thing", &fast_backoff(3)).await;
        let message = result.err().unwrap_or_else(|| panic!("{body:?} read"));
        assert_eq!(attempts, 1, "{body:?}: {message}");
        assert_eq!(server.calls("get_thing"), 1, "{body:?}: {message}");
        assert!(message.contains("no JSON-RPC"), "{body:?}: {message}");
        assert!(!message.contains("ServerJsonRpcMessage"), "{message}");
        assert_in_our_words(&message);

        let client = Client::connect(&Endpoint::http(server.url()))
            .await
            .unwrap();
        let err = client.call_tool("get_thing", json!({})).await.unwrap_err();
        assert_eq!(err.kind(), ClientErrorKind::Protocol, "{body:?}: {err}");
        assert_eq!(err.code(), None);
        assert!(!err.is_transport_failure());
        client.close().await;
    }
}

/// A result that says nothing (`{}`: no `content`, no `structuredContent`, no `isError`)
/// is no empty success: the call's answer cannot be read.
#[tokio::test]
async fn a_result_without_content_is_unreadable() {
    let first = server(&[("get_thing", Behaviour::Answer(json!({})))]);
    let client = Client::connect(&Endpoint::http(first.url())).await.unwrap();
    let err = client.call_tool("get_thing", json!({})).await.unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Protocol, "{err}");
    assert_eq!(err.code(), None);
    assert!(err.message().contains("no `content`"), "{err}");
    // An empty `content` list is an answer: the tool ran and said nothing.
    let empty = json!({"content": []});
    client.close().await;
    let other = server(&[("get_thing", Behaviour::Answer(empty))]);
    let client = Client::connect(&Endpoint::http(other.url())).await.unwrap();
    let result = client.call_tool("get_thing", json!({})).await.unwrap();
    assert!(!result.is_error());
    client.close().await;
}
