//! Resources over the MCP layer itself (`serve_io`, raw JSON-RPC lines as a client
//! writes them): a subscribed session gets `notifications/resources/updated` when the
//! server announces a change of that resource, and nothing for other resources; and a
//! refused read is a JSON-RPC error carrying the error JSON, recorded once.

#![cfg(feature = "mcp")]

use aac_tools::audit::{CallKind, Check, MemorySink, Outcome};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aac_tools::{
    BoxFuture, Ctx, Principal, Registry, ResourceContents, Server, StaticTokens, TokenVerifier,
    ToolError, mcp_resource,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A resource clients watch.
#[mcp_resource(uri = "test://watched", scope = "watch:read", mime_type = "text/plain")]
async fn watched() -> Result<ResourceContents, ToolError> {
    Ok(ResourceContents::text("now"))
}

/// Another resource.
#[mcp_resource(uri = "test://other", scope = "watch:read")]
async fn other() -> Result<String, ToolError> {
    Ok("other".to_owned())
}

/// One for another scope.
#[mcp_resource(uri = "test://secret", scope = "secret:read")]
async fn secret() -> Result<String, ToolError> {
    Ok("secret".to_owned())
}

struct Session {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
}

impl Session {
    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    async fn next(&mut self) -> Value {
        let line = self.lines.next_line().await.unwrap().expect("a message");
        serde_json::from_str(&line).unwrap()
    }

    /// The response to request `id` (notifications before it are kept in `seen`).
    async fn response(&mut self, id: u64, seen: &mut Vec<Value>) -> Value {
        loop {
            let message = self.next().await;
            if message["id"] == id {
                return message;
            }
            seen.push(message);
        }
    }
}

async fn start(server: Server, token: &str) -> Session {
    let (client, server_end) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_end);
    let token = token.to_owned();
    tokio::spawn(async move {
        let _ = aac_tools::mcp::serve_io(server, Some(token), read, write).await;
    });
    let (read, write) = tokio::io::split(client);
    let mut session = Session {
        lines: BufReader::new(read).lines(),
        write,
    };
    session
        .send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        )
        .await;
    let init = session.response(1, &mut Vec::new()).await;
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"],
        true
    );
    session
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    session
}

/// The server of these tests, recording to `sink`, before it is built.
fn builder(sink: &MemorySink) -> aac_tools::ServerBuilder {
    Server::builder(Registry::collect_module(module_path!()).unwrap())
        .verifier(StaticTokens::new().with("watcher", Principal::new("watcher", ["watch:read"])))
        .audit(sink.clone())
}

fn server(sink: &MemorySink) -> Server {
    builder(sink).build().unwrap()
}

/// [`server`] with a rate of one call a minute for each principal.
fn rate_limited_server(sink: &MemorySink) -> Server {
    builder(sink)
        .rate_limit_per_principal(Some(aac_tools::Rate::per_minute_const(1)))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_subscribed_session_hears_of_updates_to_its_resources_only() {
    let sink = MemorySink::new();
    let server = server(&sink);
    let mut session = start(server.clone(), "watcher").await;
    let mut seen = Vec::new();
    session
        .send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                     "params": {"uri": "test://watched"}}),
        )
        .await;
    assert_eq!(session.response(2, &mut seen).await["result"], json!({}));
    // Subscribing to what the scopes do not allow is refused.
    session
        .send(
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe",
                     "params": {"uri": "test://secret"}}),
        )
        .await;
    let refused = session.response(3, &mut seen).await;
    assert_eq!(refused["error"]["data"]["reason"], "insufficient_scope");

    server.notify_resource_updated("test://other");
    server.notify_resource_updated("test://watched");
    // The one for `test://other` is never sent: the first update to arrive is ours.
    let notification = loop {
        let message = session.next().await;
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
        seen.push(message);
    };
    assert_eq!(notification["params"]["uri"], "test://watched");

    // After unsubscribing, an update sends nothing: the read's answer arrives alone.
    session
        .send(
            json!({"jsonrpc": "2.0", "id": 4, "method": "resources/unsubscribe",
                     "params": {"uri": "test://watched"}}),
        )
        .await;
    assert_eq!(session.response(4, &mut seen).await["result"], json!({}));
    server.notify_resource_updated("test://watched");
    server.notify_resource_updated("test://other");
    session
        .send(
            json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read",
                     "params": {"uri": "test://watched"}}),
        )
        .await;
    let read = session.response(5, &mut seen).await;
    assert_eq!(read["result"]["contents"][0]["text"], "now");
    assert!(
        seen.iter()
            .all(|m| m["method"] != "notifications/resources/updated"),
        "{seen:?}"
    );
    // Subscribing is a read, recorded as one that says so; the refused one too.
    let records = sink.records();
    let got: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.kind,
                r.tool.as_str(),
                r.outcome,
                r.arguments.get("$subscribe").cloned(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                CallKind::Resource,
                "test://watched",
                Outcome::Success,
                Some(json!(true))
            ),
            (
                CallKind::Resource,
                "test://secret",
                Outcome::Denied,
                Some(json!(true))
            ),
            // The unsubscribe, checked as a subscription (its record says
            // `"$unsubscribe": true`, below).
            (CallKind::Resource, "test://watched", Outcome::Success, None),
            (CallKind::Resource, "test://watched", Outcome::Success, None),
        ],
        "{records:?}"
    );
}

/// One feed per workspace: its handler lets only that workspace's members read it.
#[mcp_resource(uri = "test://workspaces/{name}/feed", scope = "watch:read")]
async fn workspace_feed(ctx: Ctx, uri: FeedUri) -> Result<String, ToolError> {
    if ctx.principal().workspace() != Some(uri.name.as_str()) {
        return Err(ToolError::not_found("no such feed"));
    }
    Ok(format!("the feed of {}", uri.name))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FeedUri {
    name: String,
}

/// A token the test revokes while its session is subscribed.
#[derive(Clone, Default)]
struct Revocable(Arc<AtomicBool>);

impl TokenVerifier for Revocable {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        Box::pin(async move {
            match token {
                _ if self.0.load(Ordering::SeqCst) => {
                    Err(ToolError::invalid_token("this token was revoked"))
                }
                "alice" => Ok(Principal::new("alice", ["watch:read"]).in_workspace("a")),
                "bob" => Ok(Principal::new("bob", ["watch:read"]).in_workspace("b")),
                _ => Err(ToolError::invalid_token("unknown token")),
            }
        })
    }
}

/// Whether `session` is sent an update of `uri` before the answer to a `ping` sent after
/// the server announced it (updates are forwarded in the order they are announced).
async fn hears(session: &mut Session, server: &Server, uri: &str, id: u64) -> bool {
    // What earlier updates left in the session's stream first, then this update: the
    // forwarder sends it within a moment, before the answer to a ping sent after that.
    let mut earlier = Vec::new();
    session
        .send(json!({"jsonrpc": "2.0", "id": id + 1000, "method": "ping"}))
        .await;
    session.response(id + 1000, &mut earlier).await;
    server.notify_resource_updated(uri);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    session
        .send(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
        .await;
    let mut seen = Vec::new();
    session.response(id, &mut seen).await;
    seen.iter()
        .any(|m| m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri)
}

#[tokio::test]
async fn only_a_caller_who_may_read_a_resource_subscribes_to_it() {
    let sink = MemorySink::new();
    let revoked = Revocable::default();
    let server = Server::builder(Registry::collect_module(module_path!()).unwrap())
        .verifier(revoked.clone())
        .audit(sink.clone())
        .build()
        .unwrap();
    let mut alice = start(server.clone(), "alice").await;
    let mut bob = start(server.clone(), "bob").await;
    let mut seen = Vec::new();
    let feed_a = "test://workspaces/a/feed";
    for (session, id) in [(&mut alice, 2), (&mut bob, 3)] {
        session
            .send(
                json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe",
                         "params": {"uri": feed_a}}),
            )
            .await;
    }
    assert_eq!(alice.response(2, &mut seen).await["result"], json!({}));
    // Bob has the scope, but the resource's handler refuses him: no subscription.
    let refused = bob.response(3, &mut seen).await;
    assert_eq!(refused["error"]["data"]["reason"], "not_found", "{refused}");
    // A resource its handler does not find is "resource not found", as an unknown one.
    assert_eq!(refused["error"]["code"], -32002, "{refused}");

    assert!(hears(&mut alice, &server, feed_a, 10).await);
    assert!(!hears(&mut bob, &server, feed_a, 11).await);

    // Revoked: the next update is not sent, and the subscription is gone for good.
    revoked.0.store(true, Ordering::SeqCst);
    assert!(!hears(&mut alice, &server, feed_a, 12).await);
    revoked.0.store(false, Ordering::SeqCst);
    assert!(!hears(&mut alice, &server, feed_a, 13).await);

    let records = sink.records();
    let mut got: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.principal.as_deref(),
                r.outcome,
                r.arguments.get("$subscribe").cloned(),
            )
        })
        .collect();
    got.sort_by_key(|r| r.0);
    assert_eq!(
        got,
        [
            (Some("alice"), Outcome::Success, Some(json!(true))),
            (Some("bob"), Outcome::Error, Some(json!(true))),
        ],
        "{records:?}"
    );
}

/// An unsubscribe is checked as a subscription is, by the read it performs, and leaves one
/// record (kind `resource`, `"$unsubscribe": true`) per attempt, allowed or refused:
/// without the resource's scope, for a URI its handler refuses (another workspace's), for
/// a URI no resource has, and with a token revoked since.
#[tokio::test]
async fn an_unsubscribe_is_checked_and_recorded_as_a_subscription_is() {
    let sink = MemorySink::new();
    let revoked = Revocable::default();
    let server = Server::builder(Registry::collect_module(module_path!()).unwrap())
        .verifier(revoked.clone())
        .audit(sink.clone())
        .build()
        .unwrap();
    let mut alice = start(server.clone(), "alice").await;
    let mut seen = Vec::new();
    let unsubscribe = |id: u64, uri: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "resources/unsubscribe",
               "params": {"uri": uri}})
    };
    let cases = [
        (2, "test://workspaces/a/feed", None),
        (3, "test://secret", Some((-32001, "insufficient_scope"))),
        (4, "test://workspaces/b/feed", Some((-32002, "not_found"))),
        (5, "other://anything", Some((-32002, "unknown_resource"))),
    ];
    for (id, uri, refused) in cases {
        alice.send(unsubscribe(id, uri)).await;
        let answer = alice.response(id, &mut seen).await;
        match refused {
            None => assert_eq!(answer["result"], json!({}), "{answer}"),
            Some((code, reason)) => {
                assert_eq!(answer["error"]["code"], code, "{uri}: {answer}");
                assert_eq!(answer["error"]["data"]["reason"], reason, "{uri}: {answer}");
            }
        }
    }
    revoked.0.store(true, Ordering::SeqCst);
    alice.send(unsubscribe(6, "test://workspaces/a/feed")).await;
    let answer = alice.response(6, &mut seen).await;
    assert_eq!(
        answer["error"]["data"]["reason"], "invalid_token",
        "{answer}"
    );

    let records = sink.records();
    let got: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.kind,
                r.tool.as_str(),
                r.reason.as_deref(),
                r.request_id.as_deref(),
                r.arguments.get("$unsubscribe").cloned(),
            )
        })
        .collect();
    let unsubscribed =
        |uri, reason, id| (CallKind::Resource, uri, reason, Some(id), Some(json!(true)));
    assert_eq!(
        got,
        [
            unsubscribed("test://workspaces/a/feed", None, "2"),
            unsubscribed("test://secret", Some("insufficient_scope"), "3"),
            unsubscribed("test://workspaces/b/feed", Some("not_found"), "4"),
            unsubscribed("other://anything", Some("unknown_resource"), "5"),
            unsubscribed("test://workspaces/a/feed", Some("invalid_token"), "6"),
        ],
        "{records:?}"
    );
}

/// A subscription refused for its token says why, as a read's refusal does.
#[tokio::test]
async fn a_subscription_with_a_bad_token_says_the_token_is_invalid() {
    let sink = MemorySink::new();
    let mut session = start(server(&sink), "not-a-token").await;
    let mut seen = Vec::new();
    session
        .send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                     "params": {"uri": "test://watched"}}),
        )
        .await;
    let refused = session.response(2, &mut seen).await;
    assert_eq!(
        refused["error"]["data"]["reason"], "invalid_token",
        "{refused}"
    );
    assert_eq!(refused["error"]["data"]["status"], 401, "{refused}");
}

#[tokio::test]
async fn a_refused_read_is_a_json_rpc_error_recorded_once() {
    let sink = MemorySink::new();
    let mut session = start(server(&sink), "watcher").await;
    let mut seen = Vec::new();
    for (id, uri, code, reason) in [
        (2, "test://secret", -32001, "insufficient_scope"),
        (3, "test://nothing", -32002, "unknown_resource"),
    ] {
        session
            .send(
                json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
                         "params": {"uri": uri}}),
            )
            .await;
        let answer = session.response(id, &mut seen).await;
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert_eq!(answer["error"]["data"]["reason"], reason, "{answer}");
        if reason == "insufficient_scope" {
            // It names what was refused: a resource, not a tool.
            assert_eq!(
                answer["error"]["message"],
                "this resource requires the scopes: secret:read"
            );
        }
    }
    let records = sink.records();
    let got: Vec<_> = records
        .iter()
        .map(|r| (r.kind, r.tool.as_str(), r.outcome, r.check))
        .collect();
    assert_eq!(
        got,
        [
            (
                CallKind::Resource,
                "test://secret",
                Outcome::Denied,
                Some(Check::Scope)
            ),
            (
                CallKind::Resource,
                "test://nothing",
                Outcome::Denied,
                Some(Check::FindTool)
            ),
        ]
    );
}

/// A connection's subscriptions end with it: once the client's input ends, nothing is
/// kept for them, though the resource never changes again.
#[tokio::test]
async fn a_closed_connection_keeps_no_subscription() {
    let sink = MemorySink::new();
    let server = server(&sink);
    let mut session = start(server.clone(), "watcher").await;
    session
        .send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                     "params": {"uri": "test://watched"}}),
        )
        .await;
    let answer = session.response(2, &mut Vec::new()).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    assert_eq!(server.subscribed_sessions(), 1);
    drop(session);
    let mut left = server.subscribed_sessions();
    for _ in 0..200 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        left = server.subscribed_sessions();
    }
    assert_eq!(left, 0, "the ended connection still forwards updates");
}

/// Reads refused past a principal's rate, counted rather than recorded one by one, are
/// counted as reads: the count's record has kind `resource` (so that `audit --kind
/// resource` finds it and a count of tool calls does not take it for one).
#[tokio::test]
async fn a_count_of_rate_limited_reads_is_recorded_as_reads() {
    let sink = MemorySink::new();
    let server = rate_limited_server(&sink);
    let read = || aac_tools::CallRequest::resource("test://watched").bearer("watcher");
    assert!(server.call(read()).await.error().is_none());
    for _ in 0..4 {
        let refused = server.call(read()).await;
        assert_eq!(refused.check(), Some(Check::RateLimit));
    }
    server.flush_rate_limited().await;
    let records = sink.records();
    // The read, the first refusal, and the count of the other three.
    assert_eq!(records.len(), 3, "{records:#?}");
    let count = &records[2];
    assert_eq!(count.arguments["suppressed"], 3, "{count:#?}");
    assert_eq!(count.kind, CallKind::Resource, "{count:#?}");
    assert!(
        records.iter().all(|r| r.kind == CallKind::Resource),
        "{records:#?}"
    );
}

/// A batch from a principal over its rate: every call it holds is accounted for, the record
/// that counts the rest of it (40 − 32) counted as the eight calls it stands for when the
/// rate refuses it. It was counted as one: a batch of 5,000 left a count of 33.
#[tokio::test]
async fn a_batch_past_the_rate_is_counted_call_by_call() {
    let sink = MemorySink::new();
    let server = rate_limited_server(&sink);
    let mut session = start(server.clone(), "watcher").await;
    // The principal's one call a minute, then its first refusal (recorded as it is).
    for id in [2, 3] {
        session
            .send(
                json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
                         "params": {"uri": "test://watched"}}),
            )
            .await;
        session.response(id, &mut Vec::new()).await;
    }
    let batch: Vec<Value> = (0..40)
        .map(|id| {
            json!({"jsonrpc": "2.0", "id": 100 + id, "method": "resources/read",
                   "params": {"uri": "test://watched"}})
        })
        .collect();
    session.send(Value::Array(batch)).await;
    session
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}))
        .await;
    session.response(7, &mut Vec::new()).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    server.flush_rate_limited().await;
    let records = sink.records();
    // Each record stands for one call, or for the calls its count says.
    let calls: u64 = records
        .iter()
        .map(|r| {
            ["suppressed", "more_calls"]
                .iter()
                .find_map(|key| r.arguments.get(*key).and_then(Value::as_u64))
                .unwrap_or(1)
        })
        .sum();
    assert_eq!(calls, 2 + 40, "{records:#?}");
    assert!(
        records.iter().all(|r| r.kind == CallKind::Resource),
        "{records:#?}"
    );
}

/// The reads of a refused batch past those recorded one by one are counted as reads: the
/// count's record has kind `resource`, as the records of the reads before it.
#[tokio::test]
async fn the_reads_of_a_batch_past_those_recorded_are_counted_as_reads() {
    let sink = MemorySink::new();
    let mut session = start(server(&sink), "watcher").await;
    let batch: Vec<Value> = (0..40)
        .map(|id| {
            json!({"jsonrpc": "2.0", "id": 100 + id, "method": "resources/read",
                   "params": {"uri": "test://watched"}})
        })
        .collect();
    session.send(Value::Array(batch)).await;
    // Answered whole (rmcp reads no batch); then a ping, to know the records are written.
    session
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}))
        .await;
    session.response(7, &mut Vec::new()).await;
    let mut records = sink.records();
    for _ in 0..100 {
        if records.len() >= 33 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        records = sink.records();
    }
    assert_eq!(records.len(), 33, "{records:#?}");
    let count = records
        .iter()
        .find(|r| r.arguments.get("more_calls").is_some())
        .expect("a count of the rest");
    assert_eq!(count.arguments["more_calls"], 8, "{count:#?}");
    assert!(
        records.iter().all(|r| r.kind == CallKind::Resource),
        "{records:#?}"
    );
}

/// 2026-07-28 has no subscriptions: `server/discover` does not offer `resources.subscribe`
/// to its clients (a session of 2025-11-25 is offered it: [`start`]), and its
/// `logging/setLevel`, gone from that revision, is answered as a method it does not have
/// rather than told a level was set that nothing reads.
#[tokio::test]
async fn a_2026_07_28_client_is_offered_what_its_revision_has() {
    let sink = MemorySink::new();
    let (client, server_end) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_end);
    let served = server(&sink);
    tokio::spawn(async move {
        let _ = aac_tools::mcp::serve_io(served, Some("watcher".to_owned()), read, write).await;
    });
    let (read, write) = tokio::io::split(client);
    let mut session = Session {
        lines: BufReader::new(read).lines(),
        write,
    };
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    });
    session
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}))
        .await;
    let discovered = session.response(1, &mut Vec::new()).await;
    let resources = &discovered["result"]["capabilities"]["resources"];
    assert!(resources.is_object(), "{discovered}");
    assert!(resources.get("subscribe").is_none(), "{discovered}");
    session
        .send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {
            "level": "debug", "_meta": meta}}),
        )
        .await;
    let refused = session.response(2, &mut Vec::new()).await;
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    // An earlier revision still sets its level.
    let mut earlier = start(server(&sink), "watcher").await;
    earlier
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "debug"}}))
        .await;
    let set = earlier.response(2, &mut Vec::new()).await;
    assert_eq!(set["result"], json!({}), "{set}");
}

/// Verifications in flight, and the most at once.
#[derive(Default)]
struct InFlight {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

/// A verifier that takes a moment, counting how many verify at once.
struct SlowVerifier(Arc<InFlight>);

impl TokenVerifier for SlowVerifier {
    fn verify<'a>(&'a self, _token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        Box::pin(async move {
            let now = self.0.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.0.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            self.0.now.fetch_sub(1, Ordering::SeqCst);
            Ok(Principal::new("watcher", ["watch:read"]))
        })
    }
}

/// One change reaches every subscribed session at once, and each checks its token before
/// its update: a few at a time, not all together (each may read the token store on a
/// thread and a connection of its own, and 384 sessions took 176 threads); every session
/// still hears of it.
#[tokio::test]
async fn the_token_checks_of_one_update_are_a_few_at_a_time() {
    let in_flight = Arc::new(InFlight::default());
    let server = Server::builder(Registry::collect_module(module_path!()).unwrap())
        .verifier(SlowVerifier(Arc::clone(&in_flight)))
        .audit(MemorySink::new())
        .build()
        .unwrap();
    let mut sessions = Vec::new();
    for _ in 0..12 {
        let mut session = start(server.clone(), "watcher").await;
        session
            .send(
                json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                         "params": {"uri": "test://watched"}}),
            )
            .await;
        assert_eq!(
            session.response(2, &mut Vec::new()).await["result"],
            json!({})
        );
        sessions.push(session);
    }
    in_flight.most.store(0, Ordering::SeqCst);
    server.notify_resource_updated("test://watched");
    for session in &mut sessions {
        let update = tokio::time::timeout(std::time::Duration::from_secs(20), session.next())
            .await
            .expect("the update in time");
        assert_eq!(
            update["method"], "notifications/resources/updated",
            "{update}"
        );
        assert_eq!(update["params"]["uri"], "test://watched");
    }
    let most = in_flight.most.load(Ordering::SeqCst);
    assert!((1..=4).contains(&most), "{most} token checks at once");
}
