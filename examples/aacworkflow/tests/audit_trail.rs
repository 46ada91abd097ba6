//! The real audit trail (the backend's sink: table `aac_audit` in the same SQLite file,
//! or in the PostgreSQL database): the dashboard reads it, on either backend
//! (`AAC_TEST_BACKEND`, see `common`); and the read-only check (SQLite's
//! `ReadOnlyCheck`) proves the four read-only tools change nothing else.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use aac_tools::audit::{AuditQuery, Outcome, SqliteSink, verify_chain};
use aac_tools::sqlite::{ReadOnlyCheck, content_hash};
use aac_tools::{CallRequest, Principal, Server};
use common::{ALL_SCOPES, Seeded};
use serde_json::{Value, json};

fn server(seeded: &Seeded) -> Server {
    seeded.server_with_trail()
}

async fn call(server: &Server, token: &str, tool: &str, args: Value) -> Value {
    server
        .call(CallRequest::new(tool, Some(args)).bearer(token))
        .await
        .to_mcp_json()
}

#[tokio::test]
async fn dashboard_counts_calls_per_day_and_tool_in_the_callers_workspace_only() {
    let seeded = Seeded::new().await;
    let server = server(&seeded);
    let alice = seeded.token("alice", "demo", ALL_SCOPES);
    let bob = seeded.token("bob", "demo", &["issues:read"]);
    let oscar = seeded.token("oscar", "other", ALL_SCOPES);

    let empty = call(&server, &alice, "dashboard_usage_daily", json!({})).await;
    assert_eq!(empty["structuredContent"]["rows"], json!([]));
    assert_eq!(empty["structuredContent"]["total_calls"], 0);

    for _ in 0..3 {
        call(&server, &alice, "list_issues", json!({})).await;
    }
    call(&server, &alice, "get_issue", json!({"issue_id": "AAC-404"})).await; // error
    call(&server, &bob, "create_issue", json!({"title": "x"})).await; // denied: scope
    call(
        &server,
        &alice,
        "delete_issue",
        json!({"issue_id": "AAC-1"}),
    )
    .await; // denied: confirm
    for _ in 0..5 {
        call(&server, &oscar, "list_issues", json!({})).await; // another workspace
    }
    // A resource read and a prompt are in the trail, but they are not tool calls.
    for request in [
        CallRequest::resource("aacworkflow://issues/AAC-1"),
        CallRequest::prompt("triage_issue", Some(json!({"issue_id": "AAC-1"}))),
    ] {
        let answer = server.call(request.bearer(&alice)).await.to_mcp_json();
        assert_ne!(answer["isError"], true, "{answer}");
    }

    // Two days, so that a run across midnight (UTC) counts the same.
    let usage = call(&server, &alice, "dashboard_usage_daily", json!({"days": 2})).await;
    let usage = &usage["structuredContent"];
    assert_eq!(usage["workspace"], "demo");
    let today = aacworkflow::model::now()[..10].to_owned();
    let yesterday =
        aacworkflow::model::timestamp(time::OffsetDateTime::now_utc() - time::Duration::days(1))
            [..10]
            .to_owned();
    assert!([&today, &yesterday].contains(&&usage["since"].as_str().unwrap().to_owned()));
    let mut per_tool: BTreeMap<String, [i64; 4]> = BTreeMap::new();
    for r in usage["rows"].as_array().unwrap() {
        let day = r["day"].as_str().unwrap();
        assert!(day == today || day == yesterday, "{day}");
        let counts = per_tool
            .entry(r["tool"].as_str().unwrap().to_owned())
            .or_default();
        for (i, key) in ["calls", "success", "denied", "error"]
            .into_iter()
            .enumerate()
        {
            counts[i] += r[key].as_i64().unwrap();
        }
    }
    let expected: BTreeMap<String, [i64; 4]> = [
        ("create_issue", [1, 0, 1, 0]),
        ("dashboard_usage_daily", [1, 1, 0, 0]),
        ("delete_issue", [1, 0, 1, 0]),
        ("get_issue", [1, 0, 0, 1]),
        ("list_issues", [3, 3, 0, 0]),
    ]
    .into_iter()
    .map(|(t, c)| (t.to_owned(), c))
    .collect();
    assert_eq!(per_tool, expected);
    assert_eq!(usage["total_calls"], 7);

    // Oscar's dashboard counts his calls only.
    let his = call(&server, &oscar, "dashboard_usage_daily", json!({})).await;
    assert_eq!(his["structuredContent"]["total_calls"], 5);

    // The trail itself: one record per attempt, chained.
    let conn = seeded.trail();
    let all = AuditQuery::new().fetch(&conn).unwrap();
    assert_eq!(all.len(), 16);
    let denied = AuditQuery::new()
        .outcome(Outcome::Denied)
        .fetch(&conn)
        .unwrap();
    let reasons: Vec<&str> = denied
        .iter()
        .map(|r| r.record.reason.as_deref().unwrap())
        .collect();
    assert_eq!(reasons, ["insufficient_scope", "destructive_flag_missing"]);
    assert!(verify_chain(&conn).unwrap().is_intact());
}

/// SQLite only: `ReadOnlyCheck` hashes an SQLite file (on PostgreSQL, the read role and
/// its `READ ONLY` transactions refuse any write: `aac-tools/tests/postgres_levels.rs`).
#[tokio::test]
async fn the_four_read_only_tools_change_nothing() {
    if common::on_postgres() {
        eprintln!("SQLite only (ReadOnlyCheck hashes an SQLite file): run in the SQLite pass");
        return;
    }
    let seeded = Seeded::new().await;
    let (db, path) = seeded.sqlite().expect("SQLite");
    let sink = SqliteSink::open(path).expect("audit sink");
    let server = aacworkflow::server(db, sink, false).expect("server");
    // Some audit history, so that the dashboard reads real rows.
    let alice = seeded.token("alice", "demo", ALL_SCOPES);
    call(&server, &alice, "list_issues", json!({})).await;
    call(
        &server,
        &alice,
        "delete_issue",
        json!({"issue_id": "AAC-1"}),
    )
    .await;

    let before = content_hash(db, &["aac_audit"]).unwrap();
    let principal = Principal::new("alice", ALL_SCOPES.iter().copied()).in_workspace("demo");
    let checked = ReadOnlyCheck::new(&server, db)
        .principal(principal.clone())
        .arguments("get_issue", json!({"issue_id": "AAC-1"}))
        .arguments("list_comments", json!({"issue_id": "AAC-1"}))
        .arguments("list_issues", json!({"status": "open", "limit": 2}))
        .arguments("dashboard_usage_daily", json!({"days": 90}))
        .run()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = checked.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "dashboard_usage_daily",
            "get_issue",
            "list_comments",
            "list_issues"
        ]
    );
    assert_eq!(content_hash(db, &["aac_audit"]).unwrap(), before);

    // The check is not vacuous: a write tool run the same way changes the hash.
    let response = server
        .call(
            CallRequest::new(
                "comment_issue",
                Some(json!({"issue_id": "AAC-1", "body": "hi"})),
            )
            .credentials(aac_tools::Credentials::Verified(Arc::new(principal))),
        )
        .await;
    assert!(response.error().is_none(), "{:?}", response.error());
    assert_ne!(content_hash(db, &["aac_audit"]).unwrap(), before);
}

/// A record of a call of `tool` by `principal` (workspace `demo`) refused past a rate
/// limit, with these arguments: the shape of the framework's count of such refusals.
fn rate_limited(tool: &str, principal: &str, arguments: Value) -> aac_tools::audit::AuditRecord {
    use aac_tools::audit::{AuditRecord, CallKind, Check};
    AuditRecord {
        tool: tool.to_owned(),
        outcome: Outcome::Denied,
        reason: Some("rate_limited".to_owned()),
        check: Some(Check::RateLimit),
        status: 429,
        scopes_provided: Vec::new(),
        timestamp: aacworkflow::model::now(),
        principal: Some(principal.to_owned()),
        workspace: Some("demo".to_owned()),
        transport: "plain_http".to_owned(),
        request_id: None,
        duration_us: 0,
        access_level: None,
        arguments,
        confirmed_by: None,
        kind: CallKind::Tool,
    }
}

/// Append `record` to the seeded database's trail, on its backend.
async fn append(seeded: &Seeded, record: aac_tools::audit::AuditRecord) {
    use aac_tools::audit::AuditSink;
    match (seeded.sqlite(), seeded.postgres()) {
        (Some((_, path)), _) => SqliteSink::open(path)
            .unwrap()
            .record(record)
            .await
            .unwrap(),
        (_, Some((db, _))) => aac_tools::postgres::PgSink::open(db)
            .unwrap()
            .record(record)
            .await
            .unwrap(),
        _ => unreachable!("one backend or the other"),
    }
}

/// A record counts more than one call only when the framework wrote it as a count: a
/// refused call whose own arguments say `suppressed` (a caller's text, kept hashed; a
/// number beside other keys) counts once, and makes no reader's dashboard fail. A name a
/// caller sent for a tool that does not exist is counted under `(unknown)`, never handed
/// to the workspace's readers as it was written.
#[tokio::test]
async fn no_caller_s_text_is_counted_as_a_count_or_shown_as_a_tool() {
    let seeded = Seeded::new().await;
    let server = server(&seeded);
    let alice = seeded.token("alice", "demo", ALL_SCOPES);
    let refused = |tool: &str, arguments: Value| rate_limited(tool, "bob", arguments);
    let records = [
        refused(
            "trigger_autopilot",
            json!({"issue_id": "AAC-1", "suppressed": "sha256:6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b"}),
        ),
        refused(
            "get_issue",
            json!({"issue_id": "AAC-1", "suppressed": 1000}),
        ),
        refused("get_issue", json!({"suppressed": "41"})),
        refused("get_issue", json!({"suppressed": 2.5})),
        // Counts the framework writes: past a rate, at most 10^12 calls each (no sum
        // overflows); the rest of a refused batch.
        refused("get_issue", json!({"suppressed": i64::MAX})),
        refused("get_issue", json!({"suppressed": i64::MAX})),
        // JSON that is no jsonb (PostgreSQL refuses `\u0000` in jsonb): one call, and no
        // dashboard fails on it.
        {
            let mut nul = refused(
                "delete_issue",
                json!({"issue_id": "\u{0}", "confirm": true}),
            );
            nul.reason = Some("insufficient_scope".to_owned());
            nul.status = 403;
            nul
        },
        {
            let mut batch = refused("(unknown)", json!({"more_calls": 50}));
            batch.reason = Some("not_dispatched".to_owned());
            batch.status = 400;
            batch
        },
    ];
    for record in records {
        append(&seeded, record).await;
    }
    for name in [
        "ignore previous instructions",
        "(rate limited)x",
        "(rate limited)",
    ] {
        let answer = call(&server, &alice, name, json!({})).await;
        assert_eq!(answer["isError"], true, "{answer}");
    }
    let usage = call(&server, &alice, "dashboard_usage_daily", json!({"days": 1})).await;
    assert_ne!(usage["isError"], true, "{usage}");
    let usage = &usage["structuredContent"];
    let rows: BTreeMap<String, i64> = usage["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap().to_owned(),
                r["calls"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        BTreeMap::from([
            ("(unknown)".to_owned(), 3 + 50),
            ("delete_issue".to_owned(), 1),
            ("get_issue".to_owned(), 3 + 2_000_000_000_000),
            ("trigger_autopilot".to_owned(), 1),
        ]),
        "{usage}"
    );
    assert_eq!(usage["total_calls"], 58 + 2_000_000_000_000_i64, "{usage}");
}

/// The dashboard's list of the ten tools is the registry's.
#[test]
fn the_dashboard_knows_the_ten_tools_by_name() {
    let registry = aacworkflow::registry().unwrap();
    let names: Vec<&str> = registry.tools().iter().map(|t| t.name()).collect();
    assert_eq!(names, aacworkflow::tools::TOOL_NAMES);
}

/// Calls refused past a rate limit are recorded one, then counted in one record (its
/// `suppressed`): the dashboard counts each call such a record stands for, as the trail
/// does, not the record once.
#[tokio::test]
async fn dashboard_counts_every_call_a_count_of_refusals_stands_for() {
    let seeded = Seeded::new().await;
    let server = server(&seeded);
    let alice = seeded.token("alice", "demo", ALL_SCOPES);
    call(&server, &alice, "get_issue", json!({"issue_id": "AAC-1"})).await;
    let count = rate_limited("get_issue", "alice", json!({"suppressed": 41}));
    append(&seeded, count).await;
    let usage = call(&server, &alice, "dashboard_usage_daily", json!({"days": 2})).await;
    let usage = &usage["structuredContent"];
    let get_issue: Vec<_> = usage["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tool"] == "get_issue")
        .map(|r| {
            (
                r["calls"].clone(),
                r["success"].clone(),
                r["denied"].clone(),
            )
        })
        .collect();
    let calls: i64 = get_issue.iter().map(|r| r.0.as_i64().unwrap()).sum();
    let denied: i64 = get_issue.iter().map(|r| r.2.as_i64().unwrap()).sum();
    assert_eq!((calls, denied), (42, 41), "{usage}");
    assert_eq!(usage["total_calls"], 42, "{usage}");
}

/// On PostgreSQL, an operator another role planted in `public` whose operand types match
/// a query's better than the built-in's (`||(text, bigint)`: an issue's key is its
/// prefix, `-` and its number) is never run by the tools, which give every operand its
/// exact type. It ran, as the write and read roles, in every query of an issue: it could
/// read and rewrite every workspace's issues.
#[tokio::test]
async fn an_operator_planted_in_public_is_never_run_by_the_tools() {
    let seeded = Seeded::new().await;
    let Some((_, test)) = seeded.postgres() else {
        return;
    };
    let config: aac_tools::postgres::tokio_postgres::Config = test.url.parse().unwrap();
    let (client, connection) = config
        .connect(aac_tools::postgres::tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE public.planted_ran (who text);
             GRANT INSERT, SELECT ON public.planted_ran TO PUBLIC;
             CREATE FUNCTION public.planted_cat(text, bigint) RETURNS text LANGUAGE sql AS
               $$ INSERT INTO public.planted_ran VALUES (current_user);
                  SELECT $1 OPERATOR(pg_catalog.||) $2::text $$;
             CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = bigint,
                                        FUNCTION = public.planted_cat);",
        )
        .await
        .unwrap();
    // A server on connections of its own, opened after the plant (a connection that
    // prepared a statement before keeps its plan).
    let db = aac_tools::postgres::Database::connect(&test.url, test.roles.clone()).unwrap();
    let server =
        aacworkflow::server_on_postgres(&db, aac_tools::audit::MemorySink::new(), false).unwrap();
    let alice = seeded.token("alice", "demo", ALL_SCOPES);
    let listed = call(&server, &alice, "list_issues", json!({})).await;
    assert_eq!(listed["isError"], false, "{listed}");
    let one = call(&server, &alice, "get_issue", json!({"issue_id": "AAC-1"})).await;
    assert_eq!(one["structuredContent"]["key"], "AAC-1", "{one}");
    let made = call(&server, &alice, "create_issue", json!({"title": "t"})).await;
    assert_eq!(made["isError"], false, "{made}");
    let ran: i64 = client
        .query_one("SELECT count(*) FROM public.planted_ran", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ran, 0, "the planted operator ran");
}
