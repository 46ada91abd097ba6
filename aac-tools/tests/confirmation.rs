//! A person confirms destructive calls: the policy, the question, elicitation answers,
//! the 2026-07-28 request state (replay, tamper, expiry, another principal, other
//! arguments), and one record per attempt with who confirmed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aac_tools::audit::{AuditRecord, MemorySink, Outcome};
use aac_tools::confirm::{Asking, ConfirmPolicy, MemoryLedger};
use aac_tools::{
    BoxFuture, CallRequest, CallResponse, ClientPeer, LogLevel, Principal, Registry, Server,
    StaticTokens, Text, TokenVerifier, ToolError, mcp_tool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// The notes `drop_note` ran for (tests run in parallel: each uses its own notes).
static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[derive(Deserialize, JsonSchema)]
struct NoteId {
    note_id: String,
}

/// Delete a note.
#[mcp_tool(
    destructive,
    title = "Delete note",
    scope = "notes:write",
    confirm_message = "Delete note {note_id}? This cannot be undone."
)]
async fn drop_note(args: NoteId) -> Result<Text, ToolError> {
    RAN.lock().unwrap().push(args.note_id.clone());
    Ok(Text(format!("deleted {}", args.note_id)))
}

/// Purge a note; confirmed by its caller's argument, whatever the server's policy.
#[mcp_tool(destructive, scope = "notes:write", confirm = "argument")]
async fn purge_note(args: NoteId) -> Result<Text, ToolError> {
    Ok(Text(format!("purged {}", args.note_id)))
}

/// How a test client answers: with this action, never, or it cannot be asked.
#[derive(Clone)]
enum Answer {
    Action(&'static str),
    Never,
    CannotAsk,
    InputRequired,
    /// The client cancels the call (or goes away) while the question is open, as the
    /// MCP peer reports it.
    Cancelled,
    /// While the person is asked, the flag is set (a token revoked, a sink failed); then
    /// they accept.
    AcceptAfterSetting(Arc<AtomicBool>),
}

struct FakeClient {
    answer: Answer,
    asked: Mutex<Vec<Value>>,
}

impl FakeClient {
    fn new(answer: Answer) -> Arc<FakeClient> {
        Arc::new(FakeClient {
            answer,
            asked: Mutex::new(Vec::new()),
        })
    }
}

impl ClientPeer for FakeClient {
    fn progress<'a>(
        &'a self,
        _: f64,
        _: Option<f64>,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(async { Ok(()) })
    }
    fn log<'a>(
        &'a self,
        _: LogLevel,
        _: Option<&'a str>,
        _: Value,
    ) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(async { Ok(()) })
    }
    fn create_message(&self, _: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async { Err(ToolError::internal("no sampling here")) })
    }
    fn elicit(&self, params: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        self.asked.lock().unwrap().push(params);
        let answer = self.answer.clone();
        Box::pin(async move {
            match answer {
                Answer::Action(action) => Ok(json!({"action": action})),
                Answer::AcceptAfterSetting(revoked) => {
                    revoked.store(true, Ordering::SeqCst);
                    Ok(json!({"action": "accept"}))
                }
                Answer::Cancelled => Err(ToolError::bad_request(
                    "cancelled",
                    "the client cancelled the call while the server waited for its elicitation",
                )),
                _ => std::future::pending().await,
            }
        })
    }
    fn asking(&self) -> Asking {
        match self.answer {
            Answer::CannotAsk => Asking::Unavailable("the fake client lacks elicitation".into()),
            Answer::InputRequired => Asking::InputRequired,
            _ => Asking::Elicit,
        }
    }
}

fn server(sink: &MemorySink, policy: ConfirmPolicy, ttl: Duration) -> Server {
    server_waiting(sink, policy, ttl, Duration::from_millis(50))
}

/// [`server`], whose person has `timeout` to answer.
fn server_waiting(
    sink: &MemorySink,
    policy: ConfirmPolicy,
    ttl: Duration,
    timeout: Duration,
) -> Server {
    Server::builder(Registry::collect().unwrap())
        .verifier(
            StaticTokens::new()
                .with(
                    "alice",
                    Principal::new("alice", ["notes:write"]).in_workspace("w"),
                )
                .with(
                    "bob",
                    Principal::new("bob", ["notes:write"]).in_workspace("w"),
                ),
        )
        .audit(sink.clone())
        .confirmation(policy)
        .confirmation_timeout(timeout)
        .request_state_keys(vec![vec![7; 32]])
        .request_state_ttl(ttl)
        .request_state_ledger(MemoryLedger::new())
        .build()
        .unwrap()
}

fn call(tool: &str, note: &str, client: &Arc<FakeClient>, token: &str) -> CallRequest {
    CallRequest::new(tool, Some(json!({"note_id": note, "confirm": true})))
        .bearer(token)
        .peer(Arc::clone(client) as Arc<dyn ClientPeer>)
}

fn last(sink: &MemorySink) -> AuditRecord {
    sink.records().last().cloned().unwrap()
}

fn reason(response: &CallResponse) -> Option<&str> {
    response.error().map(ToolError::reason)
}

#[tokio::test]
async fn elicitation_accept_runs_and_records_the_user() {
    let sink = MemorySink::new();
    let server = server(&sink, ConfirmPolicy::User, Duration::from_secs(60));
    let client = FakeClient::new(Answer::Action("accept"));
    let response = server
        .call(call("drop_note", "N-1\u{202e}", &client, "alice"))
        .await;
    assert!(response.error().is_none(), "{:?}", response.error());
    assert!(RAN.lock().unwrap().iter().any(|n| n == "N-1\u{202e}"));
    let asked = client.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["mode"], "form");
    assert_eq!(
        asked[0]["message"],
        "Delete note N-1\\u{202e}? This cannot be undone."
    );
    let record = last(&sink);
    assert_eq!(record.outcome, Outcome::Success);
    assert_eq!(record.confirmed_by.as_deref(), Some("user"));
    assert_eq!(sink.records().len(), 1);
}

/// Alice's token, until the flag says it was revoked.
struct Revocable(Arc<AtomicBool>);

impl TokenVerifier for Revocable {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        Box::pin(async move {
            if token != "alice" || self.0.load(Ordering::SeqCst) {
                return Err(ToolError::invalid_token("the token was revoked"));
            }
            Ok(Principal::new("alice", ["notes:write"]).in_workspace("w"))
        })
    }
}

/// A person's answer may come minutes after the call began: a token revoked meanwhile
/// does not get the call run, even with the person's yes.
#[tokio::test]
async fn a_token_revoked_while_the_user_is_asked_is_refused_after_the_answer() {
    let sink = MemorySink::new();
    let revoked = Arc::new(AtomicBool::new(false));
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(Revocable(Arc::clone(&revoked)))
        .audit(sink.clone())
        .confirmation(ConfirmPolicy::User)
        .build()
        .unwrap();
    let client = FakeClient::new(Answer::AcceptAfterSetting(Arc::clone(&revoked)));
    let response = server
        .call(call("drop_note", "N-revoked", &client, "alice"))
        .await;
    assert_eq!(
        client.asked.lock().unwrap().len(),
        1,
        "the person was asked"
    );
    let err = response.error().expect("refused");
    assert_eq!((err.status().code(), err.reason()), (401, "invalid_token"));
    assert!(
        err.message().contains("revoked") && err.message().contains("answered"),
        "{}",
        err.message()
    );
    assert!(
        !RAN.lock().unwrap().iter().any(|n| n == "N-revoked"),
        "the handler ran"
    );
    let records = sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].outcome,
            records[0].reason.as_deref(),
            records[0].status
        ),
        (Outcome::Denied, Some("invalid_token"), 401)
    );
    assert_eq!(records[0].confirmed_by.as_deref(), Some("user"));

    // The same token, not revoked this time: the yes runs the call.
    revoked.store(false, Ordering::SeqCst);
    let client = FakeClient::new(Answer::Action("accept"));
    let response = server
        .call(call("drop_note", "N-kept-valid", &client, "alice"))
        .await;
    assert!(response.error().is_none(), "{:?}", response.error());
}

/// A sink that stops being ready once `failing` is set (it still keeps what it is given,
/// so that the refusal's record can be read).
struct FailsWhen {
    inner: MemorySink,
    failing: Arc<AtomicBool>,
}

impl aac_tools::audit::AuditSink for FailsWhen {
    fn ready(&self) -> Result<(), aac_tools::audit::AuditError> {
        if self.failing.load(Ordering::SeqCst) {
            Err(aac_tools::audit::AuditError::new("disk on fire"))
        } else {
            Ok(())
        }
    }
    fn record(
        &self,
        record: AuditRecord,
    ) -> BoxFuture<'_, Result<(), aac_tools::audit::AuditError>> {
        self.inner.record(record)
    }
}

/// The audit sink fails while the person is asked: the yes does not run the call (503
/// `audit_unavailable`, before the handler), as the call would have been refused before
/// the question.
#[tokio::test]
async fn a_sink_that_fails_while_the_user_is_asked_fails_the_call_closed() {
    let sink = MemorySink::new();
    let failing = Arc::new(AtomicBool::new(false));
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(StaticTokens::new().with("alice", Principal::new("alice", ["notes:write"])))
        .audit(FailsWhen {
            inner: sink.clone(),
            failing: Arc::clone(&failing),
        })
        .confirmation(ConfirmPolicy::User)
        .build()
        .unwrap();
    // The client's person says yes just after the sink failed.
    let client = FakeClient::new(Answer::AcceptAfterSetting(Arc::clone(&failing)));
    let response = server
        .call(call("drop_note", "N-sink-failed", &client, "alice"))
        .await;
    assert_eq!(
        client.asked.lock().unwrap().len(),
        1,
        "the person was asked"
    );
    let err = response.error().expect("refused");
    assert_eq!(
        (err.status().code(), err.reason()),
        (503, "audit_unavailable")
    );
    assert!(
        !RAN.lock().unwrap().iter().any(|n| n == "N-sink-failed"),
        "the handler ran while the sink was known to fail"
    );
    let record = last(&sink);
    assert_eq!(
        (
            record.outcome,
            record.status,
            record.confirmed_by.as_deref()
        ),
        (Outcome::Denied, 503, Some("user"))
    );
}

#[tokio::test]
async fn decline_cancel_and_silence_refuse_before_the_handler() {
    for (answer, expected) in [
        (Answer::Action("decline"), "user_declined"),
        (Answer::Action("cancel"), "user_declined"),
        (Answer::Never, "user_confirmation_timeout"),
    ] {
        let sink = MemorySink::new();
        let server = server(&sink, ConfirmPolicy::User, Duration::from_secs(60));
        let client = FakeClient::new(answer);
        let response = server
            .call(call("drop_note", "N-2", &client, "alice"))
            .await;
        assert_eq!(reason(&response), Some(expected));
        assert!(
            !RAN.lock().unwrap().iter().any(|n| n == "N-2"),
            "{expected}: the handler ran"
        );
        let records = sink.records();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].outcome, Outcome::Denied);
        assert_eq!(records[0].reason.as_deref(), Some(expected));
        assert_eq!(records[0].confirmed_by, None);
    }
}

#[tokio::test]
async fn a_client_that_cannot_ask_is_refused_or_falls_back() {
    let sink = MemorySink::new();
    let client = FakeClient::new(Answer::CannotAsk);
    let user = server(&sink, ConfirmPolicy::User, Duration::from_secs(60));
    let response = user.call(call("drop_note", "N-3", &client, "alice")).await;
    assert_eq!(reason(&response), Some("user_confirmation_unavailable"));
    assert!(
        response
            .error()
            .unwrap()
            .message()
            .contains("lacks elicitation"),
        "{}",
        response.error().unwrap().message()
    );
    // No client channel at all (plain HTTP, in process).
    let bare = CallRequest::new(
        "drop_note",
        Some(json!({"note_id": "N-3", "confirm": true})),
    );
    let response = user.call(bare.bearer("alice")).await;
    assert_eq!(reason(&response), Some("user_confirmation_unavailable"));

    let fallback = server(
        &sink,
        ConfirmPolicy::UserOrArgument,
        Duration::from_secs(60),
    );
    let response = fallback
        .call(call("drop_note", "N-3", &client, "alice"))
        .await;
    assert!(response.error().is_none());
    assert_eq!(
        last(&sink).confirmed_by.as_deref(),
        Some("argument_fallback")
    );
    // The argument is still required.
    let unconfirmed = CallRequest::new("drop_note", Some(json!({"note_id": "N-3"})))
        .bearer("alice")
        .peer(Arc::clone(&client) as Arc<dyn ClientPeer>);
    let response = fallback.call(unconfirmed).await;
    assert_eq!(reason(&response), Some("destructive_flag_missing"));
    assert_eq!(sink.records().len(), 4);
}

#[tokio::test]
async fn the_tools_own_policy_overrides_the_servers() {
    let sink = MemorySink::new();
    let server = server(&sink, ConfirmPolicy::User, Duration::from_secs(60));
    let client = FakeClient::new(Answer::CannotAsk);
    let response = server
        .call(call("purge_note", "N-4", &client, "alice"))
        .await;
    assert!(response.error().is_none());
    assert_eq!(last(&sink).confirmed_by.as_deref(), Some("argument"));
    // The listing says who confirms: the server's policy, or the tool's own.
    let list = server.list_tools_json(None);
    let meta = |name: &str| {
        list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["_meta"]
            .get(aac_tools::META_CONFIRM)
            .cloned()
    };
    assert_eq!(meta("drop_note"), Some(json!("user")));
    assert_eq!(meta("purge_note"), None);
}

/// The first round: the question and a sealed state, recorded as asked.
async fn ask(server: &Server, client: &Arc<FakeClient>, note: &str) -> String {
    let response = server.call(call("drop_note", note, client, "alice")).await;
    assert_eq!(reason(&response), Some("user_confirmation_required"));
    let input = response.input_required().expect("a question");
    assert_eq!(
        input.question(),
        format!("Delete note {note}? This cannot be undone.")
    );
    let json = input.to_json();
    assert_eq!(json["resultType"], "input_required");
    assert_eq!(
        json["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    input.request_state().to_owned()
}

fn retry(note: &str, token: &str, state: &str, action: &str) -> CallRequest {
    CallRequest::new("drop_note", Some(json!({"note_id": note, "confirm": true})))
        .bearer(token)
        .peer(FakeClient::new(Answer::InputRequired) as Arc<dyn ClientPeer>)
        .resume(state, json!({"confirm": {"action": action}}))
}

#[tokio::test]
async fn input_required_round_trip_runs_once_and_refuses_a_replay() {
    let sink = MemorySink::new();
    let server = server(&sink, ConfirmPolicy::User, Duration::from_secs(60));
    let client = FakeClient::new(Answer::InputRequired);
    let state = ask(&server, &client, "N-5").await;
    assert_eq!(
        last(&sink).reason.as_deref(),
        Some("user_confirmation_required")
    );

    let response = server.call(retry("N-5", "alice", &state, "accept")).await;
    assert!(response.error().is_none(), "{:?}", response.error());
    assert_eq!(last(&sink).confirmed_by.as_deref(), Some("user"));

    let replay = server.call(retry("N-5", "alice", &state, "accept")).await;
    assert_eq!(reason(&replay), Some("invalid_request_state"));
    assert!(replay.error().unwrap().message().contains("already used"));
    let record = last(&sink);
    assert_eq!(record.outcome, Outcome::Denied);
    assert_eq!(record.reason.as_deref(), Some("invalid_request_state"));
    assert_eq!(sink.records().len(), 3);
}

#[tokio::test]
async fn a_declined_answer_spends_the_state() {
    let sink = MemorySink::new();
    let server = server(&sink, ConfirmPolicy::User, Duration::from_secs(60));
    let client = FakeClient::new(Answer::InputRequired);
    let state = ask(&server, &client, "N-6").await;
    let declined = server.call(retry("N-6", "alice", &state, "decline")).await;
    assert_eq!(reason(&declined), Some("user_declined"));
    let again = server.call(retry("N-6", "alice", &state, "accept")).await;
    assert_eq!(reason(&again), Some("invalid_request_state"));
}

#[tokio::test]
async fn tampered_foreign_expired_and_rebound_states_are_refused_and_recorded() {
    let sink = MemorySink::new();
    let server = server(&sink, ConfirmPolicy::User, Duration::from_secs(60));
    let client = FakeClient::new(Answer::InputRequired);
    let state = ask(&server, &client, "N-7").await;

    // One hex digit of the payload changed.
    let mut tampered = state.clone().into_bytes();
    let i = 5;
    tampered[i] = if tampered[i] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).unwrap();
    let cases = [
        (
            retry("N-7", "alice", &tampered, "accept"),
            "altered or forged",
        ),
        (retry("N-7", "bob", &state, "accept"), "another principal"),
        (retry("N-8", "alice", &state, "accept"), "other arguments"),
        (
            retry("N-7", "alice", "v1.zz.zz", "accept"),
            "not one this server issued",
        ),
    ];
    for (request, why) in cases {
        let before = sink.records().len();
        let response = server.call(request).await;
        assert_eq!(reason(&response), Some("invalid_request_state"), "{why}");
        assert!(
            response.error().unwrap().message().contains(why),
            "{}",
            response.error().unwrap().message()
        );
        assert_eq!(sink.records().len(), before + 1);
        assert_eq!(last(&sink).reason.as_deref(), Some("invalid_request_state"));
    }
    // The refusals did not spend the state: its own call still goes through once.
    let response = server.call(retry("N-7", "alice", &state, "accept")).await;
    assert!(response.error().is_none(), "{:?}", response.error());

    // A state whose lifetime is over.
    let expiring = server_with_ttl_zero(&sink);
    let state = ask(&expiring, &client, "N-9").await;
    let response = expiring.call(retry("N-9", "alice", &state, "accept")).await;
    assert_eq!(reason(&response), Some("invalid_request_state"));
    assert!(response.error().unwrap().message().contains("expired"));

    // Another server's key.
    let other = Server::builder(Registry::collect().unwrap())
        .verifier(StaticTokens::new().with(
            "alice",
            Principal::new("alice", ["notes:write"]).in_workspace("w"),
        ))
        .audit(sink.clone())
        .confirmation(ConfirmPolicy::User)
        .request_state_keys(vec![vec![8; 32]])
        .build()
        .unwrap();
    let state = ask(&server, &client, "N-10").await;
    let response = other.call(retry("N-10", "alice", &state, "accept")).await;
    assert_eq!(reason(&response), Some("invalid_request_state"));
}

fn server_with_ttl_zero(sink: &MemorySink) -> Server {
    server(sink, ConfirmPolicy::User, Duration::ZERO)
}

#[test]
fn short_keys_are_refused() {
    let err = Server::builder(Registry::collect().unwrap())
        .audit_disabled()
        .request_state_keys(vec![vec![1; 31]])
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("at least 32 bytes"), "{err}");
}

/// A client that cancels the call (or goes away) while its user is being asked abandoned
/// the call: one record, as for any abandoned call (`error`, no check, `cancelled`, 499),
/// not a refusal by the user; the tool never ran.
#[tokio::test]
async fn a_call_cancelled_while_the_user_is_asked_is_recorded_as_abandoned() {
    let sink = MemorySink::new();
    let server = server(&sink, ConfirmPolicy::User, Duration::from_secs(60));
    let client = FakeClient::new(Answer::Cancelled);
    let response = server
        .call(call("drop_note", "N-cancelled", &client, "alice"))
        .await;
    assert_eq!(reason(&response), Some("cancelled"));
    assert!(!RAN.lock().unwrap().iter().any(|n| n == "N-cancelled"));
    assert_eq!(sink.records().len(), 1);
    let record = last(&sink);
    assert_eq!(
        (
            record.outcome,
            record.check,
            record.reason.as_deref(),
            record.status
        ),
        (Outcome::Error, None, Some("cancelled"), 499)
    );
}

/// Calls waiting for a person are bounded per principal: each holds its call (and the
/// transport its request) until answered, so a client that never answers cannot pile them
/// up. Past 16, a call is refused at once (429, recorded) without a question; another
/// principal is not affected, and a place is given back when a call stops waiting.
#[tokio::test]
async fn questions_waiting_for_a_person_are_bounded_per_principal() {
    let sink = MemorySink::new();
    let server = server_waiting(
        &sink,
        ConfirmPolicy::User,
        Duration::from_secs(300),
        Duration::from_secs(60),
    );
    let silent = FakeClient::new(Answer::Never);
    let waiting: Vec<_> = (0..16)
        .map(|i| {
            let server = server.clone();
            let request = call("drop_note", &format!("Q-{i}"), &silent, "alice");
            tokio::spawn(async move { server.call(request).await })
        })
        .collect();
    while silent.asked.lock().unwrap().len() < 16 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let response = server
        .call(call("drop_note", "Q-16", &silent, "alice"))
        .await;
    assert_eq!(reason(&response), Some("too_many_questions_waiting"));
    assert_eq!(response.error().unwrap().status().code(), 429);
    assert_eq!(silent.asked.lock().unwrap().len(), 16, "no 17th question");
    let record = last(&sink);
    assert_eq!(
        (
            record.reason.as_deref(),
            record.status,
            record.principal.as_deref()
        ),
        (Some("too_many_questions_waiting"), 429, Some("alice"))
    );
    // Bob asks his own person.
    let yes = FakeClient::new(Answer::Action("accept"));
    let response = server.call(call("drop_note", "Q-bob", &yes, "bob")).await;
    assert!(response.error().is_none(), "{:?}", response.error());
    // One call stops waiting (its client went away): its place is free again.
    let mut waiting = waiting.into_iter();
    let first = waiting.next().unwrap();
    first.abort();
    let _ = first.await;
    let response = server.call(call("drop_note", "Q-17", &yes, "alice")).await;
    assert!(response.error().is_none(), "{:?}", response.error());
    for task in waiting {
        task.abort();
    }
}

/// A redeemed nonce is remembered for a while after its state expires: the expiry is
/// checked before the ledger is asked, with that replica's clock, so one forgotten as soon
/// as it expired would let a replay through (the second ticking over between the check
/// and the ledger, or a replica whose clock runs behind another's).
#[tokio::test]
async fn a_redeemed_nonce_is_remembered_past_its_expiry() {
    use aac_tools::confirm::{RequestStateLedger, SqliteLedger};
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ledgers: Vec<(&str, Box<dyn RequestStateLedger>)> = vec![
        ("memory", Box::new(MemoryLedger::new())),
        (
            "sqlite",
            Box::new(SqliteLedger::open(dir.path().join("ledger.db")).unwrap()),
        ),
    ];
    for (name, ledger) in ledgers {
        // Expired 100 s ago by this clock: a replica 100 s behind still accepts it.
        assert!(ledger.redeem("n-1", now - 100).await.unwrap(), "{name}");
        // Another redemption, which forgets what is long expired.
        assert!(ledger.redeem("n-2", now + 300).await.unwrap(), "{name}");
        assert!(
            !ledger.redeem("n-1", now - 100).await.unwrap(),
            "{name}: a replay"
        );
        // Long expired: forgotten, and no longer presentable anyway.
        let long_ago = now - aac_tools::confirm::KEEP_AFTER_EXPIRY - 10;
        assert!(ledger.redeem("n-3", long_ago).await.unwrap(), "{name}");
        assert!(ledger.redeem("n-4", now + 300).await.unwrap(), "{name}");
        assert!(ledger.redeem("n-3", long_ago).await.unwrap(), "{name}");
    }
}
