//! Every tool and every kind of refusal, in process through `Server::call`, with the audit
//! records they leave. The demo data on the backend under test (`AAC_TEST_BACKEND`, see
//! `common`): a real SQLite file, or a real PostgreSQL database.

mod common;

use aac_tools::audit::{AuditRecord, Check, MemorySink, Outcome};
use aac_tools::{CallRequest, CallResponse, Server, Status};
use common::{ALL_SCOPES, Seeded};
use serde_json::{Value, json};

struct Fixture {
    seeded: Seeded,
    sink: MemorySink,
    server: Server,
    alice: String,
}

impl Fixture {
    async fn new() -> Fixture {
        Fixture::with_mode(false).await
    }

    async fn with_mode(read_only: bool) -> Fixture {
        let seeded = Seeded::new().await;
        let sink = MemorySink::new();
        let server = seeded.server(sink.clone(), read_only);
        let alice = seeded.token("alice", "demo", ALL_SCOPES);
        Fixture {
            seeded,
            sink,
            server,
            alice,
        }
    }

    async fn call(&self, token: &str, tool: &str, args: Value) -> CallResponse {
        self.server
            .call(CallRequest::new(tool, Some(args)).bearer(token))
            .await
    }

    /// Call as alice (admin, every scope) and return the structured result.
    async fn ok(&self, tool: &str, args: Value) -> Value {
        let response = self.call(&self.alice, tool, args).await;
        match response.result() {
            Ok(output) => output
                .structured_value()
                .cloned()
                .expect("structured output"),
            Err(err) => panic!("{tool} failed: {err}"),
        }
    }

    fn last_record(&self) -> AuditRecord {
        self.sink.records().pop().expect("an audit record")
    }
}

fn keys(page: &Value) -> Vec<String> {
    page["issues"]
        .as_array()
        .expect("issues")
        .iter()
        .map(|i| i["key"].as_str().expect("key").to_owned())
        .collect()
}

#[tokio::test]
async fn list_issues_filters_and_pages_through_every_issue_once() {
    let f = Fixture::new().await;
    let page = f.ok("list_issues", json!({})).await;
    assert_eq!(keys(&page), ["AAC-5", "AAC-4", "AAC-3", "AAC-2", "AAC-1"]);
    assert_eq!(page["next_cursor"], Value::Null);

    let closed = f.ok("list_issues", json!({"status": "closed"})).await;
    assert_eq!(keys(&closed), ["AAC-3"]);
    assert_eq!(closed["issues"][0]["status"], "closed");
    let open = f.ok("list_issues", json!({"status": "open"})).await;
    assert_eq!(keys(&open), ["AAC-5", "AAC-4", "AAC-2", "AAC-1"]);
    let bobs = f.ok("list_issues", json!({"assignee": "bob"})).await;
    assert_eq!(keys(&bobs), ["AAC-1"]);
    assert_eq!(
        bobs["issues"][0]["assignee"],
        json!({"name": "bob", "kind": "user"})
    );
    let bots = f.ok("list_issues", json!({"assignee": "triage-bot"})).await;
    assert_eq!(keys(&bots), ["AAC-2"]);
    assert_eq!(bots["issues"][0]["assignee"]["kind"], "agent");

    // Pages of two: 2 + 2 + 1, every issue exactly once, in order.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = json!({"limit": 2});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let page = f.ok("list_issues", args).await;
        pages += 1;
        assert!(keys(&page).len() <= 2);
        seen.extend(keys(&page));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ["AAC-5", "AAC-4", "AAC-3", "AAC-2", "AAC-1"]);

    // The other workspace's issue never shows.
    let oscar = f.seeded.token("oscar", "other", &["issues:read"]);
    let theirs = f.call(&oscar, "list_issues", json!({})).await;
    let theirs = theirs.result().unwrap().structured_value().unwrap().clone();
    assert_eq!(keys(&theirs), ["OTH-1"]);
}

#[tokio::test]
async fn get_issue_and_list_comments_take_the_key_or_the_uuid() {
    let f = Fixture::new().await;
    let uuid = f.seeded.issue_uuid("demo", 1);
    let by_key = f.ok("get_issue", json!({"issue_id": "AAC-1"})).await;
    let by_lower_key = f.ok("get_issue", json!({"issue_id": "aac-1"})).await;
    let by_uuid = f.ok("get_issue", json!({"issue_id": uuid})).await;
    let by_upper_uuid = f
        .ok("get_issue", json!({"issue_id": uuid.to_uppercase()}))
        .await;
    assert_eq!(by_key, by_uuid);
    assert_eq!(by_key, by_lower_key);
    assert_eq!(by_key, by_upper_uuid);
    assert_eq!(by_key["id"], json!(uuid));
    assert_eq!(by_key["key"], "AAC-1");
    assert_eq!(
        by_key["title"],
        "Login times out behind the corporate proxy"
    );
    assert_eq!(by_key["created_by"], "alice");

    let comments = f.ok("list_comments", json!({"issue_id": uuid})).await;
    assert_eq!(comments["issue_key"], "AAC-1");
    let list = comments["comments"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["author"], "bob");
    assert_eq!(list[1]["author"], "alice");
    assert_eq!(comments["next_cursor"], Value::Null);
    let none = f.ok("list_comments", json!({"issue_id": "AAC-4"})).await;
    assert_eq!(none["comments"], json!([]));
}

/// `list_comments` is bounded as `list_issues` is: `limit` per page (default 100, at most
/// 100) and a cursor; the pages give every comment once, in order, even when comments are
/// added between two pages; a cursor of `list_issues`, or one forged, is refused.
#[tokio::test]
async fn list_comments_pages_through_every_comment_once() {
    let f = Fixture::new().await;
    for n in 0..7 {
        f.ok(
            "comment_issue",
            json!({"issue_id": "AAC-4", "body": format!("comment {n}")}),
        )
        .await;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = json!({"issue_id": "AAC-4", "limit": 3});
        if let Some(cursor) = &cursor {
            args["cursor"] = json!(cursor);
        }
        let page = f.ok("list_comments", args).await;
        pages += 1;
        let list = page["comments"].as_array().unwrap();
        assert!(list.len() <= 3, "{page}");
        seen.extend(list.iter().map(|c| c["body"].as_str().unwrap().to_owned()));
        if pages == 1 {
            // Added between two pages: it comes last, once.
            f.ok(
                "comment_issue",
                json!({"issue_id": "AAC-4", "body": "comment 7"}),
            )
            .await;
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..8).map(|n| format!("comment {n}")).collect();
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);

    // The default page holds 100; past 100 is refused by the schema.
    let all = f.ok("list_comments", json!({"issue_id": "AAC-4"})).await;
    assert_eq!(all["comments"].as_array().unwrap().len(), 8);
    for limit in [0, 101] {
        let refused = f
            .call(
                &f.alice,
                "list_comments",
                json!({"issue_id": "AAC-4", "limit": limit}),
            )
            .await;
        assert_eq!(refused.error().unwrap().reason(), "invalid_arguments");
    }
    let issues = f.ok("list_issues", json!({"limit": 1})).await;
    let issue_cursor = issues["next_cursor"].as_str().unwrap();
    for cursor in [issue_cursor, "zz", "633a30", "633a2d31"] {
        let refused = f
            .call(
                &f.alice,
                "list_comments",
                json!({"issue_id": "AAC-4", "cursor": cursor}),
            )
            .await;
        assert_eq!(
            refused.error().map(|e| e.reason().to_owned()).as_deref(),
            Some("invalid_cursor"),
            "{cursor}"
        );
    }
}

#[tokio::test]
async fn write_tools_change_what_they_say_and_nothing_more() {
    let f = Fixture::new().await;

    // create_issue: a new issue each call, with a UUID and the next key.
    let created = f
        .ok(
            "create_issue",
            json!({"title": "Search ignores accents", "body": "café ≠ cafe"}),
        )
        .await;
    assert_eq!(created["key"], "AAC-6");
    assert_eq!(created["status"], "open");
    assert_eq!(created["created_by"], "alice");
    assert!(uuid::Uuid::parse_str(created["id"].as_str().unwrap()).is_ok());
    let again = f
        .ok("create_issue", json!({"title": "Search ignores accents"}))
        .await;
    assert_eq!(again["key"], "AAC-7");
    assert_ne!(again["id"], created["id"]);

    // update_issue: idempotent; the second identical update changes nothing.
    let first = f
        .ok(
            "update_issue",
            json!({"issue_id": "AAC-6", "status": "closed", "title": "Search ignores accents (é)"}),
        )
        .await;
    assert_eq!(first["changed"], true);
    assert_eq!(first["issue"]["status"], "closed");
    assert_eq!(first["issue"]["title"], "Search ignores accents (é)");
    assert_eq!(first["issue"]["body"], "café ≠ cafe");
    let second = f
        .ok(
            "update_issue",
            json!({"issue_id": "AAC-6", "status": "closed", "title": "Search ignores accents (é)"}),
        )
        .await;
    assert_eq!(second["changed"], false);
    assert_eq!(second["issue"], first["issue"]);

    // comment_issue: a new comment each call.
    let comments_before = f.seeded.count("comments");
    let comment = f
        .ok(
            "comment_issue",
            json!({"issue_id": "AAC-4", "body": "I can take this."}),
        )
        .await;
    assert_eq!(comment["author"], "alice");
    assert_eq!(comment["body"], "I can take this.");
    f.ok(
        "comment_issue",
        json!({"issue_id": "AAC-4", "body": "I can take this."}),
    )
    .await;
    assert_eq!(f.seeded.count("comments"), comments_before + 2);
    let listed = f.ok("list_comments", json!({"issue_id": "AAC-4"})).await;
    assert_eq!(listed["comments"].as_array().unwrap().len(), 2);

    // assign_issue_to_agent: idempotent.
    let assigned = f
        .ok(
            "assign_issue_to_agent",
            json!({"issue_id": "AAC-4", "agent": "autopilot"}),
        )
        .await;
    assert_eq!(assigned["changed"], true);
    assert_eq!(
        assigned["issue"]["assignee"],
        json!({"name": "autopilot", "kind": "agent"})
    );
    let reassigned = f
        .ok(
            "assign_issue_to_agent",
            json!({"issue_id": "AAC-4", "agent": "autopilot"}),
        )
        .await;
    assert_eq!(reassigned["changed"], false);
    assert_eq!(reassigned["issue"], assigned["issue"]);

    // trigger_autopilot: not idempotent, a new run each call.
    let run1 = f
        .ok("trigger_autopilot", json!({"issue_id": "AAC-4"}))
        .await;
    let run2 = f
        .ok("trigger_autopilot", json!({"issue_id": "AAC-4"}))
        .await;
    assert_ne!(run1["run_id"], run2["run_id"]);
    assert_eq!(run1["agent"], "autopilot");
    assert_eq!(run1["status"], "queued");
    assert_eq!(run1["issue_key"], "AAC-4");
    assert_eq!(run1["triggered_by"], "alice");
    assert_eq!(f.seeded.count("autopilot_runs"), 2);

    // delete_issue: removes the issue, its comments and its runs.
    let deleted = f
        .ok(
            "delete_issue",
            json!({"issue_id": "AAC-4", "confirm": true}),
        )
        .await;
    assert_eq!(deleted["key"], "AAC-4");
    assert_eq!(deleted["comments_deleted"], 2);
    assert_eq!(deleted["runs_deleted"], 2);
    assert_eq!(f.seeded.count("autopilot_runs"), 0);
    assert_eq!(f.seeded.count("comments"), comments_before);
    let gone = f
        .call(&f.alice, "get_issue", json!({"issue_id": "AAC-4"}))
        .await;
    assert_eq!(gone.error().unwrap().reason(), "not_found");
    // Deleting again leaves things as they are: 404, nothing else removed.
    let issues = f.seeded.count("issues");
    let twice = f
        .call(
            &f.alice,
            "delete_issue",
            json!({"issue_id": "AAC-4", "confirm": true}),
        )
        .await;
    assert_eq!(twice.error().unwrap().status(), Status::NotFound);
    assert_eq!(f.seeded.count("issues"), issues);

    // One record per call, each a success but the two 404s, with who, where and how.
    let records = f.sink.records();
    assert_eq!(records.len(), 14);
    let tools: Vec<&str> = records.iter().map(|r| r.tool.as_str()).collect();
    assert_eq!(
        tools,
        [
            "create_issue",
            "create_issue",
            "update_issue",
            "update_issue",
            "comment_issue",
            "comment_issue",
            "list_comments",
            "assign_issue_to_agent",
            "assign_issue_to_agent",
            "trigger_autopilot",
            "trigger_autopilot",
            "delete_issue",
            "get_issue",
            "delete_issue",
        ]
    );
    for record in &records[..12] {
        assert_eq!(record.outcome, Outcome::Success, "{record:?}");
        assert_eq!(record.status, 200);
        assert_eq!(record.principal.as_deref(), Some("alice"));
        assert_eq!(record.workspace.as_deref(), Some("demo"));
        assert_eq!(record.transport, "in_process");
    }
    let delete = &records[11];
    assert_eq!(delete.access_level.map(|l| l.as_str()), Some("delete"));
    assert_eq!(delete.arguments["issue_id"], "AAC-4");
    assert_eq!(delete.arguments["confirm"], true);
    let create = &records[0];
    assert_eq!(create.access_level.map(|l| l.as_str()), Some("write"));
    // Free text is redacted: a hash, never the title itself.
    assert!(
        create.arguments["title"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    for record in &records[12..] {
        assert_eq!(record.outcome, Outcome::Error);
        assert_eq!(record.reason.as_deref(), Some("not_found"));
        assert_eq!(record.check, Some(Check::Handler));
        assert_eq!(record.status, 404);
    }
}

/// One refusal: its status, reason and check, and the audit record it left.
#[allow(clippy::too_many_arguments)] // one line per refusal reads best as a table
async fn refused(
    f: &Fixture,
    token: Option<&str>,
    tool: &str,
    args: Value,
    status: u16,
    reason: &str,
    check: Check,
    outcome: Outcome,
) -> AuditRecord {
    let before = f.sink.records().len();
    let mut request = CallRequest::new(tool, Some(args));
    if let Some(token) = token {
        request = request.bearer(token);
    }
    let response = f.server.call(request).await;
    let err = response
        .error()
        .unwrap_or_else(|| panic!("{tool} should be refused with {reason}"));
    assert_eq!(err.status().code(), status, "{err}");
    assert_eq!(err.reason(), reason, "{err}");
    assert_eq!(response.check(), Some(check));
    // Over MCP: a tool result with isError and the same JSON as text (no structured
    // content, which hosts check against the output schema).
    let mcp = response.to_mcp_json();
    assert_eq!(error_body(&mcp)["reason"], reason);
    assert_eq!(error_body(&mcp)["status"], status);
    let records = f.sink.records();
    assert_eq!(records.len(), before + 1, "exactly one record per attempt");
    let record = records.last().unwrap().clone();
    assert_eq!(record.tool, tool);
    assert_eq!(record.outcome, outcome);
    assert_eq!(record.reason.as_deref(), Some(reason));
    assert_eq!(record.check, Some(check));
    assert_eq!(record.status, status);
    record
}

/// A title that shows nothing (white space, zero-width and other invisible characters,
/// the Hangul filler, the braille blank, a tag) is refused on create and update, as a blank
/// one is; a title with one character that shows is taken.
#[tokio::test]
async fn a_title_that_shows_nothing_is_refused_as_blank() {
    let f = Fixture::new().await;
    let issues = f.seeded.count("issues");
    for title in [
        "   ",
        "\u{3000}",
        "\u{200b}",
        "\u{2060}\u{feff}",
        "\u{3164}",
        "\u{115f}\u{1160}",
        "\u{200b} \u{200b}",
        "\u{2800}",
        "\u{180e}",
        "\u{e0020}",
    ] {
        let created = f
            .call(&f.alice, "create_issue", json!({"title": title}))
            .await;
        let err = created
            .error()
            .unwrap_or_else(|| panic!("{title:?} was taken"));
        assert_eq!(err.reason(), "invalid_arguments", "{title:?}");
        assert!(err.to_string().contains("blank"), "{err}");
        let updated = f
            .call(
                &f.alice,
                "update_issue",
                json!({"issue_id": "AAC-1", "title": title}),
            )
            .await;
        assert_eq!(
            updated.error().map(|e| e.reason().to_owned()).as_deref(),
            Some("invalid_arguments"),
            "{title:?}"
        );
    }
    assert_eq!(f.seeded.count("issues"), issues);
    let shown = f
        .ok("create_issue", json!({"title": "\u{200b}x\u{200b}"}))
        .await;
    assert_eq!(shown["title"], "\u{200b}x\u{200b}");
}

/// A `delete_issue` racing comments and autopilot runs on the same issue: each comment or
/// run is either committed before the delete (and counted in what it removed) or refused
/// as an issue that is not found, never uncounted nor refused with the database's own
/// error (on PostgreSQL, without the issue's row lock, 6 rounds of 20 undercounted and the
/// late ones failed on the foreign key).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_racing_comments_counts_each_comment_it_removed() {
    let f = Fixture::new().await;
    for round in 0..12 {
        let created = f
            .ok("create_issue", json!({"title": format!("race {round}")}))
            .await;
        let key = created["key"].as_str().unwrap().to_owned();
        f.ok(
            "assign_issue_to_agent",
            json!({"issue_id": key, "agent": "autopilot"}),
        )
        .await;
        let mut comments = Vec::new();
        for n in 0..6 {
            let (server, alice, key) = (f.server.clone(), f.alice.clone(), key.clone());
            comments.push(tokio::spawn(async move {
                server
                    .call(
                        CallRequest::new(
                            "comment_issue",
                            Some(json!({"issue_id": key, "body": format!("comment {n}")})),
                        )
                        .bearer(&alice),
                    )
                    .await
            }));
        }
        let runs = {
            let (server, alice, key) = (f.server.clone(), f.alice.clone(), key.clone());
            tokio::spawn(async move {
                server
                    .call(
                        CallRequest::new("trigger_autopilot", Some(json!({"issue_id": key})))
                            .bearer(&alice),
                    )
                    .await
            })
        };
        tokio::task::yield_now().await;
        let deleted = f
            .call(
                &f.alice,
                "delete_issue",
                json!({"issue_id": key, "confirm": true}),
            )
            .await;
        let mut answered = 0;
        for comment in comments {
            match comment.await.unwrap().result() {
                Ok(_) => answered += 1,
                Err(err) => assert_eq!(err.reason(), "not_found", "round {round}: {err}"),
            }
        }
        let ran = match runs.await.unwrap().result() {
            Ok(_) => 1,
            Err(err) => {
                assert_eq!(err.reason(), "not_found", "round {round}: {err}");
                0
            }
        };
        let deleted = match deleted.result() {
            Ok(output) => output.structured_value().cloned().unwrap(),
            Err(err) => panic!("round {round}: delete_issue failed: {err}"),
        };
        assert_eq!(deleted["comments_deleted"], answered, "round {round}");
        assert_eq!(deleted["runs_deleted"], ran, "round {round}");
    }
}

#[tokio::test]
async fn every_kind_of_refusal_is_answered_and_audited() {
    let f = Fixture::new().await;
    let s = &f.seeded;
    let reader = s.token("bob", "demo", &["issues:read", "comments:read"]);
    let carol = s.token("carol", "demo", ALL_SCOPES);
    let revoked = s.create_token("bob", Some("demo"), ALL_SCOPES, None);
    s.revoke(&revoked.id);
    let expired = s
        .create_token("bob", Some("demo"), ALL_SCOPES, Some(-1))
        .token;
    use Check::*;
    use Outcome::*;

    // 1. authenticate
    let r = refused(
        &f,
        None,
        "list_issues",
        json!({}),
        401,
        "missing_token",
        Authenticate,
        Denied,
    )
    .await;
    assert_eq!(r.principal, None);
    assert!(r.scopes_provided.is_empty());
    refused(
        &f,
        Some("aac_nope"),
        "list_issues",
        json!({}),
        401,
        "invalid_token",
        Authenticate,
        Denied,
    )
    .await;
    refused(
        &f,
        Some(&revoked.token),
        "list_issues",
        json!({}),
        401,
        "invalid_token",
        Authenticate,
        Denied,
    )
    .await;
    refused(
        &f,
        Some(&expired),
        "list_issues",
        json!({}),
        401,
        "invalid_token",
        Authenticate,
        Denied,
    )
    .await;

    // 2. find the tool
    refused(
        &f,
        Some(&f.alice),
        "drop_database",
        json!({}),
        404,
        "unknown_tool",
        FindTool,
        Denied,
    )
    .await;

    // 3. scopes: each write tool refused to a read-only token, naming the scope.
    for (tool, args, scope) in [
        ("create_issue", json!({"title": "x"}), "issues:write"),
        ("update_issue", json!({"issue_id": "AAC-1"}), "issues:write"),
        (
            "comment_issue",
            json!({"issue_id": "AAC-1", "body": "x"}),
            "comments:write",
        ),
        (
            "assign_issue_to_agent",
            json!({"issue_id": "AAC-1", "agent": "autopilot"}),
            "agents:write",
        ),
        (
            "trigger_autopilot",
            json!({"issue_id": "AAC-2"}),
            "autopilot:run",
        ),
        (
            "delete_issue",
            json!({"issue_id": "AAC-1", "confirm": true}),
            "issues:write",
        ),
        ("dashboard_usage_daily", json!({}), "dashboard:read"),
    ] {
        let r = refused(
            &f,
            Some(&reader),
            tool,
            args,
            403,
            "insufficient_scope",
            Scope,
            Denied,
        )
        .await;
        assert_eq!(r.scopes_provided, ["comments:read", "issues:read"]);
        assert_eq!(r.principal.as_deref(), Some("bob"));
        let err = f.call(&reader, tool, json!({})).await;
        assert!(err.error().unwrap().message().contains(scope), "{tool}");
    }
    f.sink.clear();

    // 4. the confirm guard: absent, false, or anything but the boolean true.
    let issues = s.count("issues");
    for args in [
        json!({"issue_id": "AAC-1"}),
        json!({"issue_id": "AAC-1", "confirm": false}),
        json!({"issue_id": "AAC-1", "confirm": "true"}),
        json!({"issue_id": "AAC-1", "confirm": 1}),
    ] {
        refused(
            &f,
            Some(&f.alice),
            "delete_issue",
            args,
            400,
            "destructive_flag_missing",
            Confirm,
            Denied,
        )
        .await;
        let again = f
            .call(&f.alice, "delete_issue", json!({"issue_id": "AAC-1"}))
            .await;
        assert_eq!(
            again.error().unwrap().message(),
            "confirm: true required for destructive operations"
        );
    }
    assert_eq!(s.count("issues"), issues, "nothing was deleted");

    // 5. validation against the advertised schema, before any handler code.
    for (tool, args) in [
        ("list_issues", json!({"limit": 0})),
        ("list_issues", json!({"limit": 101})),
        ("list_issues", json!({"status": "pending"})),
        ("list_issues", json!({"page": 2})),
        ("dashboard_usage_daily", json!({"days": 0})),
        ("dashboard_usage_daily", json!({"days": 91})),
        ("get_issue", json!({})),
        ("create_issue", json!({"title": ""})),
        ("comment_issue", json!({"issue_id": "AAC-1"})),
        ("delete_issue", json!({"confirm": true})),
    ] {
        let r = refused(
            &f,
            Some(&f.alice),
            tool,
            args.clone(),
            400,
            "invalid_arguments",
            Validate,
            Denied,
        )
        .await;
        assert_eq!(r.principal.as_deref(), Some("alice"), "{tool} {args}");
    }
    let at = f.call(&f.alice, "list_issues", json!({"limit": 101})).await;
    assert!(
        at.error().unwrap().message().contains("/limit"),
        "{:?}",
        at.error()
    );

    // 6. refusals of the handler: role, state, unknown objects, forged cursors.
    let r = refused(
        &f,
        Some(&carol),
        "delete_issue",
        json!({"issue_id": "AAC-1", "confirm": true}),
        403,
        "forbidden",
        Handler,
        Denied,
    )
    .await;
    assert_eq!(r.principal.as_deref(), Some("carol"));
    assert_eq!(s.count("issues"), issues, "the viewer deleted nothing");
    let viewer = f
        .call(
            &carol,
            "delete_issue",
            json!({"issue_id": "AAC-1", "confirm": true}),
        )
        .await;
    assert!(viewer.error().unwrap().message().contains("viewer"));
    refused(
        &f,
        Some(&f.alice),
        "get_issue",
        json!({"issue_id": "AAC-999"}),
        404,
        "not_found",
        Handler,
        Error,
    )
    .await;
    refused(
        &f,
        Some(&f.alice),
        "get_issue",
        json!({"issue_id": "not an id"}),
        404,
        "not_found",
        Handler,
        Error,
    )
    .await;
    refused(
        &f,
        Some(&f.alice),
        "assign_issue_to_agent",
        json!({"issue_id": "AAC-1", "agent": "skynet"}),
        404,
        "not_found",
        Handler,
        Error,
    )
    .await;
    // AAC-3 is closed; AAC-5 is assigned to no agent.
    refused(
        &f,
        Some(&f.alice),
        "trigger_autopilot",
        json!({"issue_id": "AAC-3"}),
        409,
        "conflict",
        Handler,
        Error,
    )
    .await;
    refused(
        &f,
        Some(&f.alice),
        "trigger_autopilot",
        json!({"issue_id": "AAC-5"}),
        409,
        "conflict",
        Handler,
        Error,
    )
    .await;
    refused(
        &f,
        Some(&f.alice),
        "list_issues",
        json!({"cursor": "not-a-cursor"}),
        400,
        "invalid_cursor",
        Handler,
        Error,
    )
    .await;
    // A token of no workspace is refused by the handler.
    let nowhere = s.create_token("alice", None, ALL_SCOPES, None).token;
    refused(
        &f,
        Some(&nowhere),
        "list_issues",
        json!({}),
        403,
        "forbidden",
        Handler,
        Denied,
    )
    .await;
    assert_eq!(s.count("autopilot_runs"), 0);
}

/// A user removed from the workspace reads nothing of it with a token made before: every
/// read tool, the issue resource, the prompt and the completion are refused 403 by the
/// handler and recorded so, as writes always were. (Only writes checked membership.)
#[tokio::test]
async fn a_user_removed_from_the_workspace_reads_nothing_of_it() {
    let f = Fixture::new().await;
    let s = &f.seeded;
    let bob = s.token("bob", "demo", ALL_SCOPES);
    let uri = "aacworkflow://issues/AAC-1";
    let read = f.server.call(CallRequest::resource(uri).bearer(&bob)).await;
    assert!(read.error().is_none(), "a member reads: {:?}", read.error());
    s.remove_user("demo", "bob");
    for (tool, args) in [
        ("list_issues", json!({})),
        ("get_issue", json!({"issue_id": "AAC-1"})),
        ("list_comments", json!({"issue_id": "AAC-1"})),
        ("dashboard_usage_daily", json!({})),
    ] {
        let record = refused(
            &f,
            Some(&bob),
            tool,
            args,
            403,
            "forbidden",
            Check::Handler,
            Outcome::Denied,
        )
        .await;
        assert_eq!(record.principal.as_deref(), Some("bob"));
    }
    for request in [
        CallRequest::resource(uri),
        CallRequest::prompt("triage_issue", Some(json!({"issue_id": "AAC-1"}))),
        CallRequest::completion(
            "aacworkflow://issues/{id}",
            true,
            "id",
            "AAC",
            serde_json::Map::new(),
        ),
    ] {
        let response = f.server.call(request.bearer(&bob)).await;
        let err = response.error().expect("refused");
        assert_eq!(
            (err.status().code(), err.reason()),
            (403, "forbidden"),
            "{err}"
        );
        let record = f.last_record();
        assert_eq!(
            (record.outcome, record.status, record.principal.as_deref()),
            (Outcome::Denied, 403, Some("bob"))
        );
    }
    // A member still reads.
    assert_eq!(
        f.ok("get_issue", json!({"issue_id": "AAC-1"})).await["key"],
        "AAC-1"
    );
}

#[tokio::test]
async fn another_workspace_issue_is_answered_exactly_like_a_missing_one() {
    let f = Fixture::new().await;
    let theirs = f.seeded.issue_uuid("other", 1);
    let missing = uuid::Uuid::new_v4().to_string();
    let before = f.seeded.count("issues");
    let comments = f.seeded.count("comments");
    for (tool, extra) in [
        ("get_issue", json!({})),
        ("list_comments", json!({})),
        ("update_issue", json!({"title": "mine now"})),
        ("comment_issue", json!({"body": "hello"})),
        ("assign_issue_to_agent", json!({"agent": "autopilot"})),
        ("trigger_autopilot", json!({})),
        ("delete_issue", json!({"confirm": true})),
    ] {
        let answers: Vec<Value> = {
            let mut answers = Vec::new();
            for id in [theirs.as_str(), missing.as_str(), "OTH-1", "AAC-404"] {
                let mut args = extra.clone();
                args["issue_id"] = json!(id);
                answers.push(f.call(&f.alice, tool, args).await.to_mcp_json());
            }
            answers
        };
        assert_eq!(error_body(&answers[0])["status"], 404, "{tool}");
        assert_eq!(error_body(&answers[0])["reason"], "not_found");
        for other in &answers[1..] {
            assert_eq!(&answers[0], other, "{tool}: the answers must not differ");
        }
    }
    assert_eq!(f.seeded.count("issues"), before);
    assert_eq!(f.seeded.count("comments"), comments);
    assert_eq!(f.seeded.count("autopilot_runs"), 0);
    // The audit records of both kinds differ only in the (hashed) arguments.
    let records = f.sink.records();
    let (a, b) = (&records[0], &records[1]);
    assert_eq!(
        (a.outcome, &a.reason, a.status, a.check),
        (b.outcome, &b.reason, b.status, b.check)
    );

    // Oscar sees his issue, and none of demo's.
    let oscar = f.seeded.token("oscar", "other", ALL_SCOPES);
    let his = f
        .call(&oscar, "get_issue", json!({"issue_id": theirs}))
        .await;
    assert_eq!(
        his.result().unwrap().structured_value().unwrap()["key"],
        "OTH-1"
    );
    let not_his = f
        .call(&oscar, "get_issue", json!({"issue_id": "AAC-1"}))
        .await;
    assert_eq!(not_his.error().unwrap().reason(), "not_found");
}

#[tokio::test]
async fn read_only_mode_lists_and_serves_only_the_read_only_tools() {
    let f = Fixture::with_mode(true).await;
    let listed: Vec<String> = f.server.list_tools_json(None)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        listed,
        [
            "dashboard_usage_daily",
            "get_issue",
            "list_comments",
            "list_issues"
        ]
    );
    refused(
        &f,
        Some(&f.alice),
        "delete_issue",
        json!({"issue_id": "AAC-1", "confirm": true}),
        404,
        "unknown_tool",
        Check::ReadOnlyMode,
        Outcome::Denied,
    )
    .await;
    refused(
        &f,
        Some(&f.alice),
        "create_issue",
        json!({"title": "x"}),
        404,
        "unknown_tool",
        Check::ReadOnlyMode,
        Outcome::Denied,
    )
    .await;
    let page = f.ok("list_issues", json!({})).await;
    assert_eq!(keys(&page).len(), 5);
    assert_eq!(f.last_record().outcome, Outcome::Success);
}

#[tokio::test]
async fn tools_list_carries_the_exact_annotations_and_scopes() {
    let f = Fixture::new().await;
    let tools = f.server.list_tools_json(None)["tools"].clone();
    let table = [
        (
            "assign_issue_to_agent",
            false,
            false,
            true,
            "agents:write",
            "write",
        ),
        (
            "comment_issue",
            false,
            false,
            false,
            "comments:write",
            "write",
        ),
        ("create_issue", false, false, false, "issues:write", "write"),
        (
            "dashboard_usage_daily",
            true,
            false,
            true,
            "dashboard:read",
            "read",
        ),
        ("delete_issue", false, true, true, "issues:write", "delete"),
        ("get_issue", true, false, true, "issues:read", "read"),
        ("list_comments", true, false, true, "comments:read", "read"),
        ("list_issues", true, false, true, "issues:read", "read"),
        (
            "trigger_autopilot",
            false,
            false,
            false,
            "autopilot:run",
            "write",
        ),
        ("update_issue", false, false, true, "issues:write", "write"),
    ];
    assert_eq!(tools.as_array().unwrap().len(), table.len());
    for (tool, (name, read_only, destructive, idempotent, scope, access)) in
        tools.as_array().unwrap().iter().zip(table)
    {
        assert_eq!(tool["name"], name);
        let a = &tool["annotations"];
        assert_eq!(a["readOnlyHint"], read_only, "{name}");
        assert_eq!(a["destructiveHint"], destructive, "{name}");
        assert_eq!(a["idempotentHint"], idempotent, "{name}");
        assert_eq!(a["openWorldHint"], false, "{name}");
        assert_eq!(
            tool["_meta"]["aac-tools.dev/scopes"],
            json!([scope]),
            "{name}"
        );
        assert_eq!(tool["_meta"]["aac-tools.dev/access"], access, "{name}");
        assert!(tool["outputSchema"].is_object(), "{name}");
        assert!(!tool["description"].as_str().unwrap().is_empty(), "{name}");
    }
    let list = &tools[7]["inputSchema"]["properties"];
    assert_eq!(list["limit"]["minimum"], 1);
    assert_eq!(list["limit"]["maximum"], 100);
    assert_eq!(list["limit"]["default"], 20);
    let days = &tools[3]["inputSchema"]["properties"]["days"];
    assert_eq!(
        (days["minimum"].clone(), days["maximum"].clone()),
        (json!(1), json!(90))
    );
    let delete = &tools[4]["inputSchema"];
    assert_eq!(delete["required"], json!(["issue_id", "confirm"]));
}

/// The `{"error", "reason", "status"}` object of an MCP error result: its one text
/// content, parsed. An error result carries no `structuredContent` (clients may check it
/// against the tool's output schema).
fn error_body(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// PostgreSQL only (its level roles): every tool runs as the role of its level, so that a
/// privilege taken from one role fails exactly the tools of that level, refused by
/// PostgreSQL itself (500 `level_violation`), with nothing of the call kept.
#[tokio::test]
async fn on_postgres_each_tool_runs_as_the_role_of_its_level() {
    if !common::on_postgres() {
        eprintln!("PostgreSQL only (database roles): runs in the PostgreSQL pass");
        return;
    }
    let f = Fixture::new().await;
    let (_, test) = f.seeded.postgres().expect("PostgreSQL");
    let owner = test.owner().await;
    let roles = &test.roles;
    let level_violation = |response: CallResponse, tool: &str| {
        let err = response
            .error()
            .unwrap_or_else(|| panic!("{tool} succeeded"))
            .clone();
        assert_eq!(
            (err.status(), err.reason()),
            (Status::Internal, "level_violation"),
            "{tool}: {}",
            err.message()
        );
    };

    // The read role may not read issues any more: the read-only tools fail, the tools
    // that write (another role) still read them.
    owner
        .batch_execute(&format!("REVOKE SELECT ON issues FROM {}", roles.read()))
        .await
        .unwrap();
    let get = json!({"issue_id": "AAC-1"});
    level_violation(
        f.call(&f.alice, "get_issue", get.clone()).await,
        "get_issue",
    );
    level_violation(
        f.call(&f.alice, "list_issues", json!({})).await,
        "list_issues",
    );
    let updated = f
        .call(
            &f.alice,
            "update_issue",
            json!({"issue_id": "AAC-1", "title": "Renamed"}),
        )
        .await;
    assert!(updated.error().is_none(), "{:?}", updated.error());

    // The write role may not add comments: `comment_issue` fails and adds nothing.
    let comments = f.seeded.count("comments");
    owner
        .batch_execute(&format!("REVOKE INSERT ON comments FROM {}", roles.write()))
        .await
        .unwrap();
    let comment = json!({"issue_id": "AAC-1", "body": "refused"});
    level_violation(
        f.call(&f.alice, "comment_issue", comment).await,
        "comment_issue",
    );
    assert_eq!(f.seeded.count("comments"), comments);

    // The delete role may not delete issues: `delete_issue` fails, and the comments it
    // deleted first are back (the transaction rolled back).
    owner
        .batch_execute(&format!("REVOKE DELETE ON issues FROM {}", roles.delete()))
        .await
        .unwrap();
    let issues = f.seeded.count("issues");
    let delete = json!({"issue_id": "AAC-1", "confirm": true});
    level_violation(
        f.call(&f.alice, "delete_issue", delete).await,
        "delete_issue",
    );
    assert_eq!(f.seeded.count("issues"), issues);
    assert_eq!(f.seeded.count("comments"), comments);

    // Each refusal has its record.
    let errors: Vec<(String, String)> = f
        .sink
        .records()
        .into_iter()
        .filter(|r| r.reason.as_deref() == Some("level_violation"))
        .map(|r| {
            (
                r.tool,
                r.access_level.map(|l| l.to_string()).unwrap_or_default(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("get_issue", "read"),
        ("list_issues", "read"),
        ("comment_issue", "write"),
        ("delete_issue", "delete"),
    ]
    .iter()
    .map(|(t, l)| ((*t).to_owned(), (*l).to_owned()))
    .collect();
    assert_eq!(errors, expected);
}
