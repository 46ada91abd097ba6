//! The 2026-07-28 confirmation round trip on the wire, against the real reference server
//! (`aacworkflow serve --http … --confirm user`): `tools/call` is answered with an
//! `InputRequiredResult` carrying the question and a sealed `requestState`; the retry with
//! the state and the person's answer runs the tool once; a replay, an altered state,
//! another principal's retry, other arguments and a decline are refused, and every attempt
//! is in the audit trail (whose chain `audit --verify` checks).
//!
//! Raw JSON-RPC over HTTP (reqwest), so that every byte the client sends is the test's.

mod common;

use std::process::Command;

use common::{AacWorkflow, RawMcp};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

fn meta(elicitation: bool) -> Value {
    let capabilities = if elicitation {
        json!({"elicitation": {"form": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    })
}

/// One 2026-07-28 `tools/call` of `delete_issue`; the JSON-RPC result.
async fn delete(raw: &RawMcp, issue: &str, extra: Value, elicitation: bool) -> Value {
    let mut params = json!({
        "name": "delete_issue",
        "arguments": {"issue_id": issue, "confirm": true},
        "_meta": meta(elicitation),
    });
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let response = raw
        .post()
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "delete_issue")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    let message = common::messages(&text).pop().unwrap();
    message["result"].clone()
}

fn retry(state: &str, action: &str) -> Value {
    json!({"requestState": state, "inputResponses": {"confirm": {"action": action}}})
}

/// The refusal's reason, from the error JSON in the text content.
fn refused(result: &Value) -> String {
    assert_eq!(result["isError"], true, "{result}");
    let error: Value =
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    error["reason"].as_str().unwrap().to_owned()
}

fn token(server: &AacWorkflow, user: &str) -> String {
    let out = Command::new(&server.bin)
        .args([
            "token",
            "create",
            "--workspace",
            "demo",
            "--user",
            user,
            "--scopes",
            "all",
        ])
        .env("AAC_DB", &server.db_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_person_confirms_on_2026_07_28_and_a_state_is_honoured_once() {
    let server = AacWorkflow::new();
    let bob = token(&server, "bob");
    let (_child, url) = server.spawn_http_with(&["--confirm", "user"]);
    let alice = RawMcp::new(&url, Some(&server.token));

    // 1. The question, with a sealed state; nothing ran.
    let asked = delete(&alice, "AAC-1", json!({}), true).await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let request = &asked["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["mode"], "form");
    assert_eq!(
        request["params"]["message"],
        "Delete issue AAC-1 with its comments and autopilot runs? This cannot be undone."
    );
    assert_eq!(
        request["params"]["requestedSchema"],
        json!({"type": "object", "properties": {}})
    );
    let state = asked["requestState"].as_str().unwrap().to_owned();
    assert!(state.starts_with("v1."), "{state}");

    // 2. Refused without spending the state: another principal, other arguments, one
    //    altered byte.
    let bobs = RawMcp::new(&url, Some(&bob));
    assert_eq!(
        refused(&delete(&bobs, "AAC-1", retry(&state, "accept"), true).await),
        "invalid_request_state"
    );
    assert_eq!(
        refused(&delete(&alice, "AAC-2", retry(&state, "accept"), true).await),
        "invalid_request_state"
    );
    let mut altered = state.clone().into_bytes();
    let last = altered.len() - 1;
    altered[last] = if altered[last] == b'0' { b'1' } else { b'0' };
    let altered = String::from_utf8(altered).unwrap();
    assert_eq!(
        refused(&delete(&alice, "AAC-1", retry(&altered, "accept"), true).await),
        "invalid_request_state"
    );

    // 3. The person accepts: the issue is deleted, once.
    let done = delete(&alice, "AAC-1", retry(&state, "accept"), true).await;
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["structuredContent"]["key"], "AAC-1");

    // 4. The same state again: a replay.
    assert_eq!(
        refused(&delete(&alice, "AAC-1", retry(&state, "accept"), true).await),
        "invalid_request_state"
    );

    // 5. A decline refuses; a client without elicitation cannot be asked.
    let asked = delete(&alice, "AAC-3", json!({}), true).await;
    let state = asked["requestState"].as_str().unwrap().to_owned();
    assert_eq!(
        refused(&delete(&alice, "AAC-3", retry(&state, "decline"), true).await),
        "user_declined"
    );
    let cannot = delete(&alice, "AAC-3", json!({}), false).await;
    assert_eq!(refused(&cannot), "user_confirmation_unavailable");

    // Every attempt is recorded, once, on an intact chain.
    let records = server.audit();
    let summary: Vec<(String, String, Value)> = records
        .iter()
        .filter(|r| r["tool"] == "delete_issue")
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_owned(),
                r["reason"].as_str().unwrap_or("-").to_owned(),
                r.get("confirmed_by").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    let row = |o: &str, r: &str, c: Value| (o.to_owned(), r.to_owned(), c);
    assert_eq!(
        summary,
        vec![
            row("denied", "user_confirmation_required", Value::Null),
            row("denied", "invalid_request_state", Value::Null),
            row("denied", "invalid_request_state", Value::Null),
            row("denied", "invalid_request_state", Value::Null),
            row("success", "-", json!("user")),
            row("denied", "invalid_request_state", Value::Null),
            row("denied", "user_confirmation_required", Value::Null),
            row("denied", "user_declined", Value::Null),
            row("denied", "user_confirmation_unavailable", Value::Null),
        ]
    );
}

/// The default policy is unchanged: no question, the seed's `confirm: true` contract.
#[tokio::test]
async fn the_default_policy_does_not_ask() {
    let server = AacWorkflow::new();
    let (_child, url) = server.spawn_http();
    let alice = RawMcp::new(&url, Some(&server.token));
    let done = delete(&alice, "AAC-1", json!({}), true).await;
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(done["isError"], false, "{done}");
    let records = server.audit();
    assert_eq!(records.last().unwrap()["confirmed_by"], "argument");
}

/// `serve --confirm-timeout` is how long a person has to answer under either protocol: a
/// 2026-07-28 request state expires with it (the default is 300 s), not only the wait for
/// an elicitation's answer.
#[tokio::test]
async fn the_confirm_timeout_is_the_life_of_a_request_state() {
    let server = AacWorkflow::new();
    let (_child, url) = server.spawn_http_with(&["--confirm", "user", "--confirm-timeout", "7"]);
    let alice = RawMcp::new(&url, Some(&server.token));
    let asked = delete(&alice, "AAC-1", json!({}), true).await;
    let state = asked["requestState"].as_str().unwrap();
    let payload = state.split('.').nth(1).unwrap();
    let bytes: Vec<u8> = (0..payload.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&payload[i..i + 2], 16).unwrap())
        .collect();
    let claims: Value = serde_json::from_slice(&bytes).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let left = claims["e"].as_i64().unwrap() - now;
    assert!((5..=8).contains(&left), "expires in {left} s: {claims}");
}

/// A retry whose `inputResponses` repeat a key (`decline`, then `accept`: a host or proxy
/// that reads the first saw a no) confirms nothing and leaves the state unspent: refused
/// 400 `ambiguous_answer`, recorded, the issue kept; the same state with a plain answer
/// then goes through, once.
#[tokio::test]
async fn a_retry_whose_answer_repeats_a_key_confirms_nothing() {
    let server = AacWorkflow::new();
    let (_child, url) = server.spawn_http_with(&["--confirm", "user"]);
    let alice = RawMcp::new(&url, Some(&server.token));
    let asked = delete(&alice, "AAC-2", json!({}), true).await;
    let state = asked["requestState"].as_str().unwrap().to_owned();
    let params = json!({
        "name": "delete_issue",
        "arguments": {"issue_id": "AAC-2", "confirm": true},
        "_meta": meta(true),
        "requestState": state,
    })
    .to_string();
    // The answer, written by hand: JSON text with the key twice.
    let params = format!(
        r#"{},"inputResponses":{{"confirm":{{"action":"decline","action":"accept"}}}}}}"#,
        params.strip_suffix('}').unwrap()
    );
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
    let response = alice
        .post()
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "delete_issue")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    let result = common::messages(&text).pop().unwrap()["result"].clone();
    assert_eq!(refused(&result), "ambiguous_answer", "{result}");
    // Nothing was spent: the state with a plain answer deletes the issue.
    let done = delete(&alice, "AAC-2", retry(&state, "accept"), true).await;
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["structuredContent"]["key"], "AAC-2");
    let reasons: Vec<String> = server
        .audit()
        .iter()
        .filter(|r| r["tool"] == "delete_issue")
        .map(|r| r["reason"].as_str().unwrap_or("-").to_owned())
        .collect();
    assert_eq!(
        reasons,
        ["user_confirmation_required", "ambiguous_answer", "-"],
        "one record each"
    );
}
