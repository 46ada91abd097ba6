//! Exactly one audit record per `tools/call` attempt, whatever stage decides it, with
//! every field filled as documented.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use aac_tools::access::AccessLevel;
use aac_tools::audit::{AuditError, AuditRecord, AuditSink, Check, MemorySink, Outcome};
use aac_tools::{
    BoxFuture, CallRequest, Credentials, Principal, Registry, Server, StaticTokens, Status, Text,
    ToolError, Transport, mcp_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

static RUNS: AtomicUsize = AtomicUsize::new(0);
/// The tests run one at a time: some count the handlers that ran (`RUNS`), which another
/// test's calls would add to.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Deserialize, JsonSchema)]
struct NoteArgs {
    /// The note's title.
    title: String,
    /// The note's body (secret).
    body: String,
}

#[derive(Serialize, JsonSchema)]
struct Count {
    notes: i64,
}

/// Count notes.
#[mcp_tool(read_only, scope = "notes:read")]
async fn count_notes() -> Result<Count, ToolError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(Count { notes: 3 })
}

/// Add a note; the title is stored verbatim in the audit trail.
#[mcp_tool(scope = "notes:write", audit_fields = ["title"])]
async fn add_note(args: NoteArgs) -> Result<Text, ToolError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(Text(format!(
        "added {} ({} bytes)",
        args.title,
        args.body.len()
    )))
}

/// Delete every note.
#[mcp_tool(destructive, scope = "notes:write")]
async fn clear_notes() -> Result<Text, ToolError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(Text("cleared".into()))
}

/// Always fails: the note is missing.
#[mcp_tool(read_only, scope = "notes:read")]
async fn missing_note() -> Result<Text, ToolError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Err(ToolError::not_found("note 7 not found"))
}

/// Refuses by itself: a 403 decided by the handler.
#[mcp_tool(read_only, scope = "notes:read")]
async fn private_note() -> Result<Text, ToolError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Err(ToolError::forbidden(
        "this note belongs to another workspace",
    ))
}

/// Panics.
#[mcp_tool(read_only, scope = "notes:read")]
async fn broken_note() -> Result<Text, ToolError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    panic!("the handler panicked on purpose")
}

/// Takes a while.
#[mcp_tool(scope = "notes:write")]
async fn slow_note() -> Result<Text, ToolError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(Text("slow".into()))
}

/// A sink whose `ready` and `record` can be made to fail.
#[derive(Clone, Default)]
struct Switchable {
    inner: MemorySink,
    refuse_ready: Arc<AtomicBool>,
    refuse_record: Arc<AtomicBool>,
    /// The next record's write never ends (a sink stuck on a lock), then writes go on.
    hold_next: Arc<AtomicBool>,
}

impl AuditSink for Switchable {
    fn ready(&self) -> Result<(), AuditError> {
        if self.refuse_ready.load(Ordering::SeqCst) {
            Err(AuditError::new("disk on fire"))
        } else {
            Ok(())
        }
    }
    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        if self.hold_next.swap(false, Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        if self.refuse_record.load(Ordering::SeqCst) {
            // Hands the record back, as the built-in sinks do.
            Box::pin(async { Err(AuditError::new("disk on fire").with_record(record)) })
        } else {
            self.inner.record(record)
        }
    }
}

fn tokens() -> StaticTokens {
    StaticTokens::new()
        .with(
            "alice-token",
            Principal::new("alice", ["notes:read", "notes:write"]).in_workspace("acme"),
        )
        .with("bob-token", Principal::new("bob", ["notes:read"]))
}

fn server(sink: impl AuditSink, read_only_mode: bool) -> Server {
    Server::builder(Registry::collect().unwrap())
        .verifier(tokens())
        .audit(sink)
        .read_only_mode(read_only_mode)
        .build()
        .unwrap()
}

/// Run one call and return its answer and the one record it left.
async fn one(
    server: &Server,
    sink: &MemorySink,
    request: CallRequest,
) -> (Result<Value, ToolError>, AuditRecord) {
    let before = sink.records().len();
    let response = server.call(request).await;
    let records = sink.records();
    assert_eq!(
        records.len(),
        before + 1,
        "exactly one record per call: {records:#?}"
    );
    let result = response.into_result().map(|output| output.to_json());
    (result, records.last().cloned().unwrap())
}

fn alice(tool: &str, args: Option<Value>) -> CallRequest {
    CallRequest::new(tool, args).bearer("alice-token")
}

#[tokio::test]
async fn a_successful_read_only_call_is_recorded_with_every_field() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = server(sink.clone(), false);
    let (result, r) = one(
        &server,
        &sink,
        alice("count_notes", None)
            .transport(Transport::Stdio)
            .request_id("req-1"),
    )
    .await;
    assert!(result.is_ok());
    assert_eq!(r.tool, "count_notes");
    assert_eq!(r.outcome, Outcome::Success);
    assert_eq!(r.reason, None);
    assert_eq!(r.check, None);
    assert_eq!(r.status, 200);
    assert_eq!(r.scopes_provided, ["notes:read", "notes:write"]);
    assert_eq!(r.principal.as_deref(), Some("alice"));
    assert_eq!(r.workspace.as_deref(), Some("acme"));
    assert_eq!(r.transport, "stdio");
    assert_eq!(r.request_id.as_deref(), Some("req-1"));
    assert_eq!(r.access_level, Some(AccessLevel::Read));
    assert_eq!(r.arguments, json!({}));
    // RFC 3339, UTC.
    let at =
        time::OffsetDateTime::parse(&r.timestamp, &time::format_description::well_known::Rfc3339)
            .unwrap();
    assert_eq!(at.offset(), time::UtcOffset::UTC);
    assert!(r.timestamp.ends_with('Z'), "{}", r.timestamp);
    let age = time::OffsetDateTime::now_utc() - at;
    assert!(age >= time::Duration::ZERO && age < time::Duration::minutes(5));

    // The JSON form is a superset of the documented core.
    let json = serde_json::to_value(&r).unwrap();
    for key in ["tool", "outcome", "reason", "scopes_provided", "timestamp"] {
        assert!(json.get(key).is_some(), "missing `{key}` in {json}");
    }
    assert_eq!(json["outcome"], "success");
    assert_eq!(json["reason"], Value::Null);
    assert_eq!(json["access_level"], "read");
}

#[tokio::test]
async fn arguments_are_redacted_except_the_fields_a_tool_opts_in_to() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = server(sink.clone(), false);
    let (result, r) = one(
        &server,
        &sink,
        alice(
            "add_note",
            Some(json!({"title": "groceries", "body": "the launch codes"})),
        ),
    )
    .await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(r.access_level, Some(AccessLevel::Write));
    assert_eq!(r.arguments["title"], "groceries");
    let body = r.arguments["body"].as_str().unwrap();
    assert!(
        body.starts_with("sha256:") && body.len() == 7 + 16,
        "{body}"
    );
    assert!(!serde_json::to_string(&r).unwrap().contains("launch codes"));
    // The same value hashes the same way, so records can be correlated without it.
    let (_, again) = one(
        &server,
        &sink,
        alice(
            "add_note",
            Some(json!({"title": "other", "body": "the launch codes"})),
        ),
    )
    .await;
    assert_eq!(again.arguments["body"], r.arguments["body"]);
}

#[tokio::test]
async fn handler_errors_are_recorded_as_errors_and_handler_refusals_as_denials() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = server(sink.clone(), false);

    let (result, r) = one(&server, &sink, alice("missing_note", None)).await;
    assert_eq!(result.unwrap_err().reason(), "not_found");
    assert_eq!(
        (r.outcome, r.reason.as_deref(), r.check, r.status),
        (Outcome::Error, Some("not_found"), Some(Check::Handler), 404)
    );

    let (_, r) = one(&server, &sink, alice("private_note", None)).await;
    assert_eq!(
        (r.outcome, r.reason.as_deref(), r.check, r.status),
        (
            Outcome::Denied,
            Some("forbidden"),
            Some(Check::Handler),
            403
        )
    );

    let (result, r) = one(&server, &sink, alice("broken_note", None)).await;
    assert_eq!(result.unwrap_err().status(), Status::Internal);
    assert_eq!(
        (r.outcome, r.reason.as_deref(), r.check, r.status),
        (
            Outcome::Error,
            Some("internal_error"),
            Some(Check::Handler),
            500
        )
    );
}

#[tokio::test]
async fn every_refusal_stage_leaves_exactly_one_denied_record() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = server(sink.clone(), false);
    let runs = RUNS.load(Ordering::SeqCst);

    // (request, check, reason, status)
    let cases: Vec<(CallRequest, Check, &str, u16)> = vec![
        (
            CallRequest::new("count_notes", None),
            Check::Authenticate,
            "missing_token",
            401,
        ),
        (
            CallRequest::new("count_notes", None).bearer("forged"),
            Check::Authenticate,
            "invalid_token",
            401,
        ),
        (
            alice("no_such_tool", Some(json!({"x": 1}))),
            Check::FindTool,
            "unknown_tool",
            404,
        ),
        (
            CallRequest::new("add_note", Some(json!({"title": "t", "body": "b"})))
                .bearer("bob-token"),
            Check::Scope,
            "insufficient_scope",
            403,
        ),
        (
            alice("clear_notes", Some(json!({}))),
            Check::Confirm,
            "destructive_flag_missing",
            400,
        ),
        (
            alice("clear_notes", Some(json!({"confirm": "yes"}))),
            Check::Confirm,
            "destructive_flag_missing",
            400,
        ),
        (
            alice("add_note", Some(json!({"title": 5}))),
            Check::Validate,
            "invalid_arguments",
            400,
        ),
    ];
    for (request, check, reason, status) in cases {
        let tool = request.tool().to_owned();
        let (result, r) = one(&server, &sink, request).await;
        let err = result.unwrap_err();
        assert_eq!(err.reason(), reason, "{tool}");
        assert_eq!(r.tool, tool);
        assert_eq!(r.outcome, Outcome::Denied, "{tool}");
        assert_eq!(r.check, Some(check), "{tool}");
        assert_eq!(r.reason.as_deref(), Some(reason), "{tool}");
        assert_eq!(r.status, status, "{tool}");
        match check {
            Check::Authenticate => {
                assert_eq!(r.principal, None);
                assert!(r.scopes_provided.is_empty());
            }
            Check::FindTool => {
                assert_eq!(r.principal.as_deref(), Some("alice"));
                assert_eq!(r.access_level, None);
            }
            Check::Scope => {
                assert_eq!(r.principal.as_deref(), Some("bob"));
                assert_eq!(r.scopes_provided, ["notes:read"]);
                assert_eq!(r.access_level, Some(AccessLevel::Write));
            }
            Check::Confirm => assert_eq!(r.access_level, Some(AccessLevel::Delete)),
            _ => {}
        }
    }
    assert_eq!(RUNS.load(Ordering::SeqCst), runs, "no handler ran");
    let (result, r) = one(
        &server,
        &sink,
        alice("clear_notes", Some(json!({"confirm": true}))),
    )
    .await;
    assert!(result.is_ok());
    assert_eq!(r.outcome, Outcome::Success);
    assert_eq!(
        r.arguments,
        json!({"confirm": true}),
        "confirm is kept verbatim"
    );
}

#[tokio::test]
async fn read_only_mode_refusals_are_recorded() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = server(sink.clone(), true);
    let (result, r) = one(
        &server,
        &sink,
        alice("add_note", Some(json!({"title": "t", "body": "b"}))),
    )
    .await;
    assert_eq!(result.unwrap_err().reason(), "unknown_tool");
    assert_eq!(r.check, Some(Check::ReadOnlyMode));
    assert_eq!(r.outcome, Outcome::Denied);
    assert_eq!(r.status, 404);
    assert_eq!(r.access_level, Some(AccessLevel::Write));
    // Read-only calls still run, and are recorded.
    let (result, r) = one(&server, &sink, alice("count_notes", None)).await;
    assert!(result.is_ok());
    assert_eq!(r.outcome, Outcome::Success);
}

#[tokio::test]
async fn an_unready_sink_refuses_with_503_before_the_handler_and_records_the_refusal() {
    let _serial = SERIAL.lock().await;
    let sink = Switchable::default();
    let server = server(sink.clone(), false);
    sink.refuse_ready.store(true, Ordering::SeqCst);
    let runs = RUNS.load(Ordering::SeqCst);
    let (result, r) = one(
        &server,
        &sink.inner,
        alice("add_note", Some(json!({"title": "t", "body": "b"}))),
    )
    .await;
    let err = result.unwrap_err();
    assert_eq!(err.status(), Status::Unavailable);
    assert_eq!(err.reason(), "audit_unavailable");
    // Why goes to the server's log: the sink's words (a path, a database's message) are
    // not the caller's, who may not even be authenticated.
    assert!(!err.message().contains("disk on fire"), "{err}");
    assert!(err.message().contains("log"), "{err}");
    assert_eq!(RUNS.load(Ordering::SeqCst), runs, "the handler did not run");
    assert_eq!(
        (r.outcome, r.reason.as_deref(), r.check, r.status),
        (
            Outcome::Denied,
            Some("audit_unavailable"),
            Some(Check::Audit),
            503
        )
    );
}

#[tokio::test]
async fn a_record_that_cannot_be_written_turns_any_answer_into_503() {
    let _serial = SERIAL.lock().await;
    let sink = Switchable::default();
    let server = server(sink.clone(), false);
    sink.refuse_record.store(true, Ordering::SeqCst);
    for request in [
        alice("count_notes", None),
        CallRequest::new("count_notes", None),
        alice("clear_notes", None),
    ] {
        let response = server.call(request).await;
        let err = response.error().expect("refused");
        assert_eq!(err.status(), Status::Unavailable);
        assert_eq!(err.reason(), "audit_unavailable");
        assert_eq!(response.check(), Some(Check::Audit));
    }
    assert!(sink.inner.records().is_empty());
}

#[tokio::test]
async fn what_is_still_owed_when_the_server_goes_away_is_handed_to_the_sink() {
    let _serial = SERIAL.lock().await;
    let sink = Switchable::default();
    let server = server(sink.clone(), false);
    sink.refuse_record.store(true, Ordering::SeqCst);
    server
        .call(alice(
            "add_note",
            Some(json!({"title": "late", "body": "b"})),
        ))
        .await;
    assert!(sink.inner.records().is_empty());
    // The sink writes again, but no call comes and nothing flushes before the server
    // goes away (a process stopping: stdio's SIGTERM while the database was locked).
    sink.refuse_record.store(false, Ordering::SeqCst);
    drop(server);
    let records = sink.inner.records();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(
        (
            records[0].tool.as_str(),
            records[0].status,
            records[0].arguments["title"].as_str()
        ),
        ("add_note", 503, Some("late"))
    );
}

#[tokio::test]
async fn a_call_dropped_while_owed_records_are_written_is_recorded_whole() {
    let _serial = SERIAL.lock().await;
    let sink = Switchable::default();
    let server = server(sink.clone(), false);
    // One record owed: the sink failed under a call that ran.
    sink.refuse_record.store(true, Ordering::SeqCst);
    server
        .call(alice(
            "add_note",
            Some(json!({"title": "owed", "body": "b"})),
        ))
        .await;
    sink.refuse_record.store(false, Ordering::SeqCst);
    // The next call runs, then waits for the owed record's write, which hangs; its caller
    // gives up (a runtime stopping, a client gone).
    sink.hold_next.store(true, Ordering::SeqCst);
    let call = server.call(alice(
        "add_note",
        Some(json!({"title": "second", "body": "b"})),
    ));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err(),
        "the call waits for the owed record"
    );
    let records = sink.inner.records();
    let second = records
        .iter()
        .find(|r| r.arguments["title"] == "second")
        .unwrap_or_else(|| {
            panic!("the dropped call has its record, arguments and all: {records:#?}")
        });
    assert_eq!(second.tool, "add_note");
    assert_eq!(second.status, 499, "{second:#?}");
    assert!(
        second.timestamp.len() >= 20 && second.timestamp.ends_with('Z'),
        "its own timestamp: {second:#?}"
    );
    assert_eq!(records.len(), 1, "one record, once: {records:#?}");
}

#[tokio::test]
async fn a_call_that_ran_while_its_record_could_not_be_written_is_recorded_once_the_sink_writes() {
    let _serial = SERIAL.lock().await;
    let sink = Switchable::default();
    let server = server(sink.clone(), false);
    sink.refuse_record.store(true, Ordering::SeqCst);
    let response = server
        .call(alice(
            "add_note",
            Some(json!({"title": "kept", "body": "b"})),
        ))
        .await;
    let err = response.error().expect("the result is withheld");
    assert_eq!(
        (err.status(), err.reason()),
        (Status::Unavailable, "audit_unavailable")
    );
    assert!(
        err.message().contains("what it did stands")
            && err.message().contains("its record is kept"),
        "{err}"
    );
    // The sink's own words (a path, a database's message) go to the log, not the caller.
    assert!(!err.message().contains("disk on fire"), "{err}");
    // A refusal while the sink fails (answered 503 as well) is owed too: a call that was
    // refused leaves its trace as one that ran does.
    let refused = server.call(CallRequest::new("count_notes", None)).await;
    assert_eq!(refused.check(), Some(Check::Audit));
    let unauthenticated = refused.error().unwrap();
    assert_eq!(unauthenticated.reason(), "audit_unavailable");
    assert!(
        !unauthenticated.message().contains("disk on fire"),
        "{unauthenticated}"
    );
    assert!(sink.inner.records().is_empty());

    // The sink writes again: the owed records go first, then the call's own; once.
    sink.refuse_record.store(false, Ordering::SeqCst);
    let response = server.call(alice("count_notes", None)).await;
    assert!(response.error().is_none(), "{:?}", response.error());
    let records = sink.inner.records();
    assert_eq!(records.len(), 3, "{records:#?}");
    let owed = &records[0];
    assert_eq!(
        (
            owed.tool.as_str(),
            owed.outcome,
            owed.status,
            owed.reason.as_deref(),
            owed.check,
            owed.principal.as_deref(),
        ),
        (
            "add_note",
            Outcome::Success,
            503,
            Some("audit_unavailable"),
            Some(Check::Audit),
            Some("alice")
        ),
        "as the call ended (the tool ran) and as it was answered"
    );
    assert_eq!(owed.arguments["title"], "kept");
    assert_eq!(
        (
            records[1].tool.as_str(),
            records[1].outcome,
            records[1].status,
            records[1].principal.as_deref()
        ),
        ("count_notes", Outcome::Denied, 503, None),
        "the refusal, as it was answered"
    );
    assert_eq!(
        (records[2].tool.as_str(), records[2].status),
        ("count_notes", 200)
    );
    server.call(alice("count_notes", None)).await;
    assert_eq!(
        sink.inner.records().len(),
        4,
        "an owed record is written once"
    );

    // Owed while no call comes: written when the server flushes (every few seconds over
    // HTTP, and when it stops).
    sink.refuse_record.store(true, Ordering::SeqCst);
    server.call(alice("count_notes", None)).await;
    sink.refuse_record.store(false, Ordering::SeqCst);
    server.flush_rate_limited().await;
    let records = sink.inner.records();
    assert_eq!(records.len(), 5, "{records:#?}");
    assert_eq!(
        (records[4].tool.as_str(), records[4].status),
        ("count_notes", 503)
    );

    // A flood refused while the sink fails: the first 1,024 kept, the rest counted, and
    // the count recorded after them (every call accounted for). A call that ran after
    // them is not pushed out: it takes the place of the latest refusal, counted instead.
    sink.refuse_record.store(true, Ordering::SeqCst);
    for _ in 0..1100 {
        server.call(CallRequest::new("count_notes", None)).await;
    }
    let response = server
        .call(alice(
            "add_note",
            Some(json!({"title": "after the flood", "body": "b"})),
        ))
        .await;
    assert_eq!(response.check(), Some(Check::Audit));
    sink.refuse_record.store(false, Ordering::SeqCst);
    server.flush_rate_limited().await;
    let records = sink.inner.records();
    assert_eq!(records.len(), 5 + 1024 + 1, "kept, and one count");
    let ran = &records[5 + 1023];
    assert_eq!(
        (
            ran.tool.as_str(),
            ran.outcome,
            ran.arguments["title"].as_str()
        ),
        ("add_note", Outcome::Success, Some("after the flood")),
        "the call that ran is kept"
    );
    assert!(
        records[5..5 + 1023]
            .iter()
            .all(|r| r.outcome == Outcome::Denied && r.tool == "count_notes")
    );
    let count = records.last().unwrap();
    assert_eq!(
        (count.tool.as_str(), count.status, count.reason.as_deref()),
        ("(unknown)", 503, Some("audit_unavailable"))
    );
    assert_eq!(count.arguments, json!({"more_calls": 77}));
    server.flush_rate_limited().await;
    assert_eq!(sink.inner.records().len(), 5 + 1024 + 1, "written once");
}

/// Calls past a principal's rate are answered 429 and counted, and the count is recorded
/// later (at the principal's next call that goes ahead, or when the server flushes). A
/// count the sink could not write then is owed, as the refusals it counts would be, and
/// written once the sink writes again: every 429 is in the trail. Before, it was only
/// logged.
#[tokio::test]
async fn a_count_of_rate_limited_calls_the_sink_could_not_write_is_written_later() {
    let _serial = SERIAL.lock().await;
    let sink = Switchable::default();
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(tokens())
        .audit(sink.clone())
        .rate_limit_per_principal(Some(aac_tools::Rate::new(1, Duration::from_secs(3600))))
        .build()
        .unwrap();
    let statuses = |records: &[AuditRecord]| -> Vec<(String, u16)> {
        records.iter().map(|r| (r.tool.clone(), r.status)).collect()
    };
    assert!(
        server
            .call(alice("count_notes", None))
            .await
            .error()
            .is_none()
    );
    for _ in 0..4 {
        let refused = server.call(alice("count_notes", None)).await;
        assert_eq!(refused.check(), Some(Check::RateLimit));
    }
    // The first refusal is recorded; the other three counted.
    assert_eq!(sink.inner.records().len(), 2);
    sink.refuse_record.store(true, Ordering::SeqCst);
    server.flush_rate_limited().await;
    sink.refuse_record.store(false, Ordering::SeqCst);
    assert_eq!(
        sink.inner.records().len(),
        2,
        "nothing written while it fails"
    );
    server.flush_rate_limited().await;
    let records = sink.inner.records();
    assert_eq!(
        statuses(&records),
        [
            ("count_notes".to_owned(), 200),
            ("count_notes".to_owned(), 429),
            ("(rate limited)".to_owned(), 429),
        ],
        "{records:#?}"
    );
    assert_eq!(records[2].arguments["suppressed"], 3, "{:#?}", records[2]);
    assert_eq!(records[2].principal.as_deref(), Some("alice"));
    server.flush_rate_limited().await;
    assert_eq!(sink.inner.records().len(), 3, "written once");
}

/// The same for a peer's token-less refusals: the count that falls due at the peer's next
/// recorded refusal, while the sink fails, is owed and written once the sink writes again.
/// Before, it was only logged, and the 429s it counted were in no record.
#[tokio::test]
async fn a_peer_s_count_due_while_the_sink_fails_is_written_later() {
    let _serial = SERIAL.lock().await;
    let sink = Switchable::default();
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(tokens())
        .audit(sink.clone())
        .rate_limit_unauthenticated(Some(aac_tools::Rate::new(1, Duration::from_millis(300))))
        .build()
        .unwrap();
    let peer: std::net::IpAddr = "192.0.2.7".parse().unwrap();
    let anonymous = || CallRequest::new("count_notes", None).peer_addr(peer);
    assert_eq!(
        server.call(anonymous()).await.check(),
        Some(Check::Authenticate)
    );
    for _ in 0..3 {
        assert_eq!(
            server.call(anonymous()).await.check(),
            Some(Check::RateLimit)
        );
    }
    assert_eq!(sink.inner.records().len(), 1, "the first refusal only");
    tokio::time::sleep(Duration::from_millis(400)).await;
    sink.refuse_record.store(true, Ordering::SeqCst);
    // The count of three is due with this refusal, which the sink cannot write either.
    server.call(anonymous()).await;
    sink.refuse_record.store(false, Ordering::SeqCst);
    assert_eq!(
        sink.inner.records().len(),
        1,
        "nothing written while it fails"
    );
    server.flush_rate_limited().await;
    let records = sink.inner.records();
    let counts: Vec<&AuditRecord> = records
        .iter()
        .filter(|r| r.tool == "(rate limited)")
        .collect();
    assert_eq!(counts.len(), 1, "{records:#?}");
    assert_eq!(counts[0].arguments["suppressed"], 3, "{:#?}", counts[0]);
    assert_eq!(counts[0].status, 429);
    server.flush_rate_limited().await;
    assert_eq!(sink.inner.records().len(), records.len(), "written once");
}

#[tokio::test]
async fn refusals_decided_by_a_transport_are_recorded_once() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = server(sink.clone(), false);
    let bob = Arc::new(Principal::new("bob", ["notes:read"]));
    let attempt = server.begin(
        CallRequest::new("add_note", Some(json!({"title": "t", "body": "b"})))
            .credentials(Credentials::Verified(bob))
            .transport(Transport::PlainHttp)
            .request_id("http-9"),
    );
    let err = attempt
        .refuse(
            Check::Scope,
            ToolError::insufficient_scope(&["notes:write"]),
        )
        .await;
    assert_eq!(err.reason(), "insufficient_scope");
    let records = sink.records();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.transport, "http");
    assert_eq!(r.request_id.as_deref(), Some("http-9"));
    assert_eq!(r.principal.as_deref(), Some("bob"));
    assert_eq!(r.arguments["title"], "t", "the tool's audit fields apply");
}

#[tokio::test]
async fn concurrent_calls_leave_one_record_each() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = server(sink.clone(), false);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let server = server.clone();
        tasks.push(tokio::spawn(async move {
            let request = match i % 4 {
                0 => alice("count_notes", None),
                1 => CallRequest::new("count_notes", None),
                2 => alice("clear_notes", None),
                _ => CallRequest::new("missing_note", None).credentials(Credentials::Verified(
                    Arc::new(Principal::new("carol", ["notes:read"])),
                )),
            };
            server.call(request.request_id(format!("r{i}"))).await
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let records = sink.records();
    assert_eq!(records.len(), 200);
    let mut ids: Vec<String> = records
        .iter()
        .map(|r| r.request_id.clone().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 200, "one record per request id");
    let count = |o: Outcome| records.iter().filter(|r| r.outcome == o).count();
    assert_eq!(count(Outcome::Success), 50);
    assert_eq!(count(Outcome::Denied), 100);
    assert_eq!(count(Outcome::Error), 50);
}

/// Once the handler has started, the call finishes even if its transport goes away, and
/// its record says what the handler did.
#[tokio::test]
async fn a_call_abandoned_after_its_handler_started_is_recorded_as_it_ended() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = server(sink.clone(), false);
    let runs_before = RUNS.load(Ordering::SeqCst);
    let call = server.call(alice("slow_note", None).request_id("gone"));
    // The transport gives up (a client disconnecting drops the call's future).
    let abandoned = tokio::time::timeout(Duration::from_millis(20), call).await;
    assert!(abandoned.is_err(), "the call was still running");
    assert!(
        RUNS.load(Ordering::SeqCst) > runs_before,
        "the handler had started"
    );
    // The handler goes on (it sleeps 300 ms); wait for its record.
    let mut records = sink.records();
    for _ in 0..300 {
        if !records.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        records = sink.records();
    }
    assert_eq!(records.len(), 1, "{records:#?}");
    let r = &records[0];
    assert_eq!(r.tool, "slow_note");
    assert_eq!(r.request_id.as_deref(), Some("gone"));
    assert_eq!(r.outcome, Outcome::Success, "the handler finished: {r:?}");
    assert_eq!(r.principal.as_deref(), Some("alice"));
}

/// A verifier that takes its time, so a transport can give up before the handler.
struct SlowTokens;

impl aac_tools::TokenVerifier for SlowTokens {
    fn verify<'a>(
        &'a self,
        _token: &'a str,
    ) -> aac_tools::BoxFuture<'a, Result<Principal, ToolError>> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Principal::new("slow", ["notes:write"]))
        })
    }
}

/// A call abandoned before its handler ran is recorded as cancelled, and no handler runs.
#[tokio::test]
async fn a_call_abandoned_before_its_handler_is_recorded_as_cancelled() {
    let _serial = SERIAL.lock().await;
    let sink = MemorySink::new();
    let server = Server::builder(Registry::collect().unwrap())
        .verifier(SlowTokens)
        .audit(sink.clone())
        .build()
        .unwrap();
    let call = server.call(
        CallRequest::new("add_note", Some(json!({"title": "kept", "body": "hashed"})))
            .bearer("any")
            .request_id("early"),
    );
    let abandoned = tokio::time::timeout(Duration::from_millis(20), call).await;
    assert!(abandoned.is_err(), "the call was still authenticating");
    // Dropping the attempt handed its record to the sink at once.
    let records = sink.records();
    assert_eq!(records.len(), 1, "{records:#?}");
    let r = &records[0];
    assert_eq!(
        (r.tool.as_str(), r.request_id.as_deref()),
        ("add_note", Some("early"))
    );
    assert_eq!(r.outcome, Outcome::Error);
    assert_eq!(r.reason.as_deref(), Some("cancelled"));
    assert_eq!(r.status, 499);
    assert_eq!(
        r.arguments["title"], "kept",
        "the tool's audit fields are kept"
    );
    assert!(r.arguments["body"].as_str().unwrap().starts_with("sha256:"));
}
