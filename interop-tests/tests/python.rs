//! The official Python MCP SDK (`mcp` from PyPI) as a client of an aac-tools server,
//! over stdio and over Streamable HTTP, in the handshake protocol (2025-11-25) and the
//! newest one (2026-07-28): initialize, `tools/list` with every annotation checked,
//! successful calls, progress, logging, sampling, and each kind of refusal, with exactly
//! one audit record per call attempt.
//!
//! Behind the `interop` feature: `cargo test -p interop-tests --features interop`, after
//! `scripts/test` made the venv (`target/interop/venv`; or set `AAC_INTEROP_PYTHON`).
//! Without Python and the SDK these tests fail, loudly; they never skip.

#![cfg(feature = "interop")]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aac_tools::audit::{AuditRecord, CallKind, Outcome};
use aac_tools::{CONFIRM_REQUIRED, Registry};
use common::{ChildGuard, Fixture, read_audit, server_bin, spawn_http_server};
use serde_json::{Value, json};

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// The Python of the venv with the SDK; a clear failure without it.
fn python() -> PathBuf {
    let python = match std::env::var_os("AAC_INTEROP_PYTHON") {
        Some(python) => PathBuf::from(python),
        None => workspace_root().join("target/interop/venv/bin/python"),
    };
    let ok = Command::new(&python)
        .args(["-c", "import mcp, httpx2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the interop tests need Python with the official MCP SDK at `{}`, and it is missing \
         or lacks the `mcp` package. Run `scripts/test` (it creates the venv), or:\n\n    \
         python3 -m venv target/interop/venv && target/interop/venv/bin/pip install -r \
         interop-tests/python/requirements.txt\n\nor point AAC_INTEROP_PYTHON at a Python that \
         has it.",
        python.display()
    );
    python
}

/// Run `interop_client.py` with these arguments; its JSON report.
fn run_client(args: &[String]) -> Value {
    run_script("interop_client.py", args)
}

/// Run a script of `interop-tests/python` with these arguments; its JSON report.
fn run_script(name: &str, args: &[String]) -> Value {
    let script = workspace_root().join("interop-tests/python").join(name);
    let child = Command::new(python())
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    let mut child = ChildGuard(child);
    // A guard against a hung client, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.0.try_wait().expect("python runs").is_none() {
        assert!(Instant::now() < deadline, "the Python client hung");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut stdout = String::new();
    let mut stderr = String::new();
    use std::io::Read;
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.0.wait().unwrap();
    assert!(
        status.success(),
        "the Python client failed ({status}):\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not a report ({e}):\n{stdout}"))
}

/// The annotations every tool must advertise, as the table in the design says.
const HINTS: &[(&str, [bool; 4])] = &[
    // name, [readOnlyHint, destructiveHint, idempotentHint, openWorldHint]
    ("add_note", [false, false, false, false]),
    ("count_slowly", [true, false, true, false]),
    ("delete_note", [false, true, true, false]),
    ("list_notes", [true, false, true, false]),
    ("summarize_notes", [true, false, true, false]),
    ("wait_for_cancellation", [true, false, true, false]),
];

fn structured(result: &Value) -> &Value {
    &result["structuredContent"]
}

/// A refusal as the Python SDK reads it: `isError`, the error JSON in the text content,
/// and no `structuredContent` (which a client may check against the output schema).
fn refusal(result: &Value, reason: &str, status: u16) {
    assert_eq!(result["isError"], true, "{result}");
    assert!(structured(result).is_null(), "{result}");
    let text = error_json(result);
    assert_eq!(text["reason"], reason, "{result}");
    assert_eq!(text["status"], status, "{result}");
}

/// The error JSON of a refusal: its one text content, parsed.
fn error_json(result: &Value) -> Value {
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

fn check_full_session(mode: &str, entry: &Value) {
    let full = &entry["full"];
    if mode == "auto" {
        // 2026-07-28: a request without a `_meta` log level gets no log messages.
        assert_eq!(entry["logs_without_opt_in"], 0);
    }
    let expected_version = if mode == "legacy" {
        "2025-11-25"
    } else {
        "2026-07-28"
    };
    assert_eq!(full["protocol_version"], expected_version);
    assert_eq!(full["server_name"], "aac-interop");
    assert!(full["capabilities"]["tools"].is_object());
    assert!(full["capabilities"]["logging"].is_object());
    if mode == "legacy" {
        assert_eq!(full["ping"], true);
    }

    // tools/list: exactly the registry's objects, and every hint explicit
    let registry = Registry::collect_module("interop_tests::tools").unwrap();
    let expected: Vec<Value> = registry.tools().iter().map(|t| t.json().clone()).collect();
    assert_eq!(full["tools"], Value::Array(expected), "{mode}");
    let tools = full["tools"].as_array().unwrap();
    assert_eq!(tools.len(), HINTS.len());
    for (tool, (name, [read_only, destructive, idempotent, open_world])) in tools.iter().zip(HINTS)
    {
        assert_eq!(tool["name"], *name);
        let a = &tool["annotations"];
        assert_eq!(a["readOnlyHint"], *read_only, "{name}");
        assert_eq!(a["destructiveHint"], *destructive, "{name}");
        assert_eq!(a["idempotentHint"], *idempotent, "{name}");
        assert_eq!(a["openWorldHint"], *open_world, "{name}");
        assert!(!tool["description"].as_str().unwrap().is_empty());
    }
    let delete = &tools[2];
    assert_eq!(
        delete["_meta"]["aac-tools.dev/scopes"],
        json!(["notes:delete"])
    );
    assert_eq!(
        delete["inputSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    assert_eq!(delete["inputSchema"]["required"], json!(["id", "confirm"]));

    let calls = &full["calls"];
    let added = &calls["add_note"];
    assert_eq!(added["isError"], false);
    let id = structured(added)["id"].as_i64().expect("an id");
    let notes = structured(&calls["list_notes"])["notes"]
        .as_array()
        .unwrap();
    assert!(
        notes.contains(&json!({"id": id, "text": "from python"})),
        "{notes:?}"
    );
    for label in ["delete_without_confirm", "delete_confirm_false"] {
        refusal(&calls[label], "destructive_flag_missing", 400);
        assert_eq!(error_json(&calls[label])["error"], CONFIRM_REQUIRED);
    }
    assert_eq!(
        structured(&calls["delete_confirmed"]),
        &json!({"deleted": true})
    );
    for label in ["add_empty_text", "add_wrong_type", "add_unknown_field"] {
        refusal(&calls[label], "invalid_arguments", 400);
    }
    assert!(
        error_json(&calls["add_empty_text"])["error"]
            .as_str()
            .unwrap()
            .contains("`/text`")
    );
    refusal(&calls["unknown_tool"], "unknown_tool", 404);
    assert_eq!(
        calls["count_slowly"]["content"],
        json!([{"type": "text", "text": "counted to 3"}])
    );

    let progress = full["progress"].as_array().unwrap();
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(values, [1.0, 2.0, 3.0]);
    assert!(progress.iter().all(|p| p["total"] == 3.0));
    let logs = full["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 3, "{logs:?}");
    for (i, log) in logs.iter().enumerate() {
        assert_eq!(log["level"], "info");
        assert_eq!(log["logger"], "count_slowly");
        assert_eq!(log["data"], json!({"step": i + 1}));
    }

    let summary = &calls["summarize_notes"];
    if mode == "legacy" {
        assert_eq!(
            summary["content"],
            json!([{"type": "text", "text": "summary: three short notes"}])
        );
        let requests = full["sampling_requests"].as_array().unwrap();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0]["maxTokens"], 50);
        assert_eq!(
            requests[0]["messages"],
            json!([{"role": "user", "content": {"type": "text", "text": "Summarize 0 notes."}}])
        );
    } else {
        // 2026-07-28 forbids server-to-client requests (it has InputRequiredResult
        // instead, which aac-tools does not produce yet): a tool error, not a hang.
        refusal(summary, "client_request_failed", 400);
        assert!(full["sampling_requests"].as_array().unwrap().is_empty());
    }
}

type Expected = (&'static str, Outcome, Option<&'static str>);

fn full_session_records(mode: &str) -> Vec<Expected> {
    use Outcome::{Denied, Error, Success};
    vec![
        ("add_note", Success, None),
        ("list_notes", Success, None),
        ("delete_note", Denied, Some("destructive_flag_missing")),
        ("delete_note", Denied, Some("destructive_flag_missing")),
        ("delete_note", Success, None),
        ("add_note", Denied, Some("invalid_arguments")),
        ("add_note", Denied, Some("invalid_arguments")),
        ("add_note", Denied, Some("invalid_arguments")),
        ("no_such_tool", Denied, Some("unknown_tool")),
        ("count_slowly", Success, None),
        if mode == "legacy" {
            ("summarize_notes", Success, None)
        } else {
            ("summarize_notes", Error, Some("client_request_failed"))
        },
    ]
}

fn check_audit(records: &[AuditRecord], transport: &str, expected: &[Expected]) {
    let got: Vec<(&str, Outcome, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.outcome, r.reason.as_deref()))
        .collect();
    assert_eq!(got, expected);
    assert!(records.iter().all(|r| r.transport == transport));
    // the confirmed delete kept `confirm` and hashed the rest
    let delete = records
        .iter()
        .find(|r| r.tool == "delete_note" && r.outcome == Outcome::Success)
        .unwrap();
    assert_eq!(delete.arguments["confirm"], true);
    assert!(
        delete.arguments["id"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(delete.principal.as_deref(), Some("alice"));
    assert_eq!(delete.workspace.as_deref(), Some("interop"));
}

#[test]
fn python_sdk_over_stdio() {
    let fixture = Fixture::new();
    let arg = |a: &str| format!("--arg={a}");
    let report = run_client(&[
        "stdio".into(),
        "--command".into(),
        server_bin().display().to_string(),
        arg("--db"),
        arg(&fixture.db_path.display().to_string()),
        arg("--audit"),
        arg(&fixture.audit_path.display().to_string()),
        arg("stdio"),
        "--full".into(),
        fixture.full.clone(),
        "--reader".into(),
        fixture.reader.clone(),
    ]);
    assert_eq!(report["sdk"], "mcp");

    let mut expected = Vec::new();
    for mode in ["legacy", "auto"] {
        let entry = &report["modes"][mode];
        check_full_session(mode, entry);
        // Over stdio the session starts without a valid token; every call is refused
        // as a tool error naming the reason.
        for (label, reason) in [
            ("no_token", "missing_token"),
            ("bad_token", "invalid_token"),
        ] {
            let session = &entry[label];
            assert_eq!(session["connected"], true, "{label}: {session}");
            assert_eq!(session["tools_listed"], HINTS.len());
            refusal(&session["add_note"], reason, 401);
            refusal(&session["list_notes"], reason, 401);
        }
        let reader = &entry["reader"];
        refusal(&reader["add_note"], "insufficient_scope", 403);
        assert_eq!(
            error_json(&reader["add_note"])["error"],
            "this tool requires the scopes: notes:write"
        );
        assert_eq!(reader["list_notes"]["isError"], false);

        use Outcome::{Denied, Success};
        expected.extend(full_session_records(mode));
        expected.extend([
            ("add_note", Denied, Some("missing_token")),
            ("list_notes", Denied, Some("missing_token")),
            ("add_note", Denied, Some("invalid_token")),
            ("list_notes", Denied, Some("invalid_token")),
            ("add_note", Denied, Some("insufficient_scope")),
            ("list_notes", Success, None),
        ]);
        if mode == "auto" {
            // the call without a log opt-in
            expected.push(("count_slowly", Success, None));
        }
    }
    check_audit(&read_audit(&fixture.audit_path), "stdio", &expected);
}

#[test]
fn python_sdk_over_streamable_http() {
    let fixture = Fixture::new();
    let (_server, url) = spawn_http_server(&fixture);
    let base = url.strip_suffix("/mcp").unwrap().to_owned();
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    let report = run_client(&[
        "http".into(),
        "--url".into(),
        url.clone(),
        "--full".into(),
        fixture.full.clone(),
        "--reader".into(),
        fixture.reader.clone(),
    ]);

    let mut expected = Vec::new();
    for mode in ["legacy", "auto"] {
        let entry = &report["modes"][mode];
        check_full_session(mode, entry);

        // Over HTTP, no valid token means no session: 401 with the metadata URL.
        for (label, error) in [("no_token", None), ("bad_token", Some("invalid_token"))] {
            let session = &entry[label];
            assert_eq!(session["connected"], false, "{label}: {session}");
            let responses = session["http"].as_array().unwrap();
            assert!(!responses.is_empty());
            for response in responses {
                assert_eq!(response["status"], 401, "{label}: {response}");
                assert_eq!(response["resource_metadata"], metadata_url.as_str());
                assert_eq!(response.get("error").and_then(Value::as_str), error);
            }
        }
        // A token without the scope: the session works, the call gets a real 403
        // with the step-up challenge the SDK's own parser reads.
        let reader = &entry["reader"];
        assert_eq!(reader["connected"], true);
        assert!(reader["add_note_error"]["type"].is_string());
        let forbidden: Vec<&Value> = reader["http"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["status"] == 403)
            .collect();
        assert_eq!(forbidden.len(), 1, "{reader}");
        assert_eq!(forbidden[0]["error"], "insufficient_scope");
        assert_eq!(forbidden[0]["scope"], "notes:write");
        assert_eq!(forbidden[0]["resource_metadata"], metadata_url.as_str());
        assert_eq!(reader["list_notes"]["isError"], false);
        assert!(
            reader["http"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["status"].as_u64().unwrap() < 300 || r["status"] == 403),
            "{reader}"
        );

        use Outcome::{Denied, Success};
        expected.extend(full_session_records(mode));
        expected.extend([
            ("add_note", Denied, Some("insufficient_scope")),
            ("list_notes", Success, None),
        ]);
        if mode == "auto" {
            // the call without a log opt-in
            expected.push(("count_slowly", Success, None));
        }
    }

    // The metadata the 401 points to passes the SDK's RFC 9728 model.
    let metadata = &report["resource_metadata"];
    assert_eq!(metadata["status"], 200);
    assert_eq!(metadata["metadata"]["resource"], url.as_str());
    assert_eq!(
        metadata["metadata"]["authorization_servers"],
        json!(["https://auth.example.test"])
    );
    assert_eq!(
        metadata["metadata"]["scopes_supported"],
        json!(["notes:delete", "notes:read", "notes:write"])
    );

    check_audit(
        &read_audit(&fixture.audit_path),
        "streamable_http",
        &expected,
    );
}

/// `interop-server --confirm user`: the SDK's elicitation callback is the person. In both
/// protocol modes (legacy: an `elicitation/create` request on the session; auto,
/// 2026-07-28: an `InputRequiredResult` the SDK answers and retries), an accept deletes
/// (recorded `confirmed_by: user`) and a decline keeps the note (recorded
/// `user_declined`); the question is the framework's, never the model's.
fn check_confirmations(report: &Value, audit: &[AuditRecord]) {
    let question = "Delete note {id}? It cannot be undone.";
    for mode in ["legacy", "auto"] {
        let version = if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        let accepted = &report[format!("{mode}_accept")];
        assert_eq!(accepted["protocol_version"], version, "{accepted}");
        let id = accepted["note"].as_i64().unwrap();
        assert_eq!(
            accepted["asked"],
            json!([question.replace("{id}", &id.to_string())]),
            "{mode}"
        );
        assert_eq!(accepted["result"]["isError"], false, "{accepted}");
        assert_eq!(accepted["still_there"], false, "{mode}");

        let declined = &report[format!("{mode}_decline")];
        let id = declined["note"].as_i64().unwrap();
        assert_eq!(
            declined["asked"],
            json!([question.replace("{id}", &id.to_string())])
        );
        refusal(&declined["result"], "user_declined", 403);
        assert_eq!(declined["still_there"], true, "{mode}");
    }
    let deletes: Vec<(Outcome, Option<&str>, Option<&str>)> = audit
        .iter()
        .filter(|r| r.tool == "delete_note")
        .map(|r| (r.outcome, r.reason.as_deref(), r.confirmed_by.as_deref()))
        .collect();
    let accepted = (Outcome::Success, None, Some("user"));
    let declined = (Outcome::Denied, Some("user_declined"), None);
    let asked = (Outcome::Denied, Some("user_confirmation_required"), None);
    assert_eq!(
        deletes,
        // legacy: one attempt each; auto: the question, then the retry
        vec![accepted, declined, asked, accepted, asked, declined]
    );
}

#[test]
fn python_sdk_confirms_over_stdio() {
    let fixture = Fixture::new();
    let arg = |a: &str| format!("--arg={a}");
    let report = run_script(
        "confirm_client.py",
        &[
            "stdio".into(),
            "--command".into(),
            server_bin().display().to_string(),
            arg("--db"),
            arg(&fixture.db_path.display().to_string()),
            arg("--audit"),
            arg(&fixture.audit_path.display().to_string()),
            arg("--confirm"),
            arg("user"),
            arg("stdio"),
            "--token".into(),
            fixture.full.clone(),
        ],
    );
    check_confirmations(&report, &read_audit(&fixture.audit_path));
}

#[test]
fn python_sdk_confirms_over_streamable_http() {
    use std::io::{BufRead, BufReader};
    let fixture = Fixture::new();
    let mut child = Command::new(server_bin())
        .arg("--db")
        .arg(&fixture.db_path)
        .arg("--audit")
        .arg(&fixture.audit_path)
        .args(["--confirm", "user", "http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("interop-server starts");
    let stdout = child.stdout.take().unwrap();
    let _server = ChildGuard(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    let report = run_script(
        "confirm_client.py",
        &[
            "http".into(),
            "--url".into(),
            url,
            "--token".into(),
            fixture.full.clone(),
        ],
    );
    check_confirmations(&report, &read_audit(&fixture.audit_path));
}

/// The resources, prompts and completion of one `--items` report: what a client with
/// every scope reads, and each refusal (missing scope, unknown resource or prompt, bad
/// arguments), as the SDK saw them.
fn check_items(report: &Value, mode: &str) {
    let full = &report["full"];
    assert_eq!(full["connected"], true, "{full}");
    let caps = &full["capabilities"];
    // 2026-07-28 has no subscriptions (no `resources/subscribe`): not offered there.
    let subscribe = if mode == "legacy" {
        json!(true)
    } else {
        Value::Null
    };
    assert_eq!(caps["resources"]["subscribe"], subscribe, "{caps}");
    assert!(
        caps["prompts"].is_object() && caps["completions"].is_object(),
        "{caps}"
    );
    let uris: Vec<&str> = full["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["notes://admin/count", "notes://all"]);
    assert_eq!(full["templates"][0]["uriTemplate"], "notes://notes/{id}");
    let prompts: Vec<&str> = full["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["purge_plan", "review_note"]);
    let note_id = full["note_id"].as_i64().expect("a note was added");
    assert_eq!(
        full["read_all"]["contents"][0]["text"],
        format!("{note_id}: read me\n")
    );
    assert_eq!(full["read_note"]["contents"][0]["text"], "read me");
    assert_eq!(
        full["read_note"]["contents"][0]["uri"],
        format!("notes://notes/{note_id}")
    );
    assert_eq!(full["read_admin"]["contents"][0]["text"], "1");
    let error = |session: &Value, label: &str, code: i64, reason: &str| {
        let err = &session[format!("{label}_error")];
        assert_eq!(err["code"], code, "{label}: {session}");
        assert_eq!(err["data"]["reason"], reason, "{label}: {session}");
    };
    // 2026-07-28 answers a resource not found with invalid params (rmcp upgrades the
    // older "resource not found" code for those peers).
    let not_found = if mode == "legacy" { -32002 } else { -32602 };
    error(full, "read_missing_note", not_found, "not_found");
    error(full, "read_unknown", not_found, "unknown_resource");
    error(full, "get_review_no_args", -32602, "invalid_arguments");
    error(full, "get_unknown", -32602, "unknown_prompt");
    assert_eq!(
        full["get_review"]["messages"][0]["content"]["text"],
        "Review this note: read me"
    );
    assert_eq!(
        full["get_purge"]["messages"][0]["content"]["text"],
        "Which notes are obsolete?"
    );
    assert_eq!(
        full["complete_prompt"]["completion"]["values"],
        json!([note_id.to_string()])
    );
    assert_eq!(
        full["complete_template"]["completion"]["values"],
        json!([note_id.to_string()])
    );
    assert!(full.get("subscribe_error").is_none(), "{full}");
    assert!(full.get("unsubscribe_error").is_none(), "{full}");

    // The reader (notes:read): lists without what it may not use; refused reads.
    let reader = &report["reader"];
    let uris: Vec<&str> = reader["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["notes://all"]);
    assert_eq!(reader["prompts"].as_array().unwrap().len(), 1);
    error(reader, "read_admin", -32001, "insufficient_scope");
    error(reader, "get_purge", -32001, "insufficient_scope");
    assert!(reader["read_all"]["contents"].is_array(), "{reader}");
}

/// The records of an `--items` run with a valid token, in order: the kind, the name or
/// URI, the outcome and the reason. The full token's session in the `legacy` mode
/// subscribes to `notes://all` last, which reads it (a record of its own).
fn items_records(
    note: &str,
    full: bool,
    mode: &str,
) -> Vec<(CallKind, String, Outcome, Option<&'static str>)> {
    use CallKind::{Completion, Prompt, Resource, Tool};
    use Outcome::{Denied, Error, Success};
    let r = |kind, name: &str, outcome, reason| (kind, name.to_owned(), outcome, reason);
    let mut records = Vec::new();
    if full {
        records.push(r(Tool, "add_note", Success, None));
    }
    records.extend([
        r(Resource, "notes://all", Success, None),
        r(
            Resource,
            &format!("notes://notes/{note}"),
            if full { Success } else { Error },
            (!full).then_some("not_found"),
        ),
        r(Resource, "notes://notes/424242", Error, Some("not_found")),
        r(
            Resource,
            "notes://nothing",
            Denied,
            Some("unknown_resource"),
        ),
        if full {
            r(Resource, "notes://admin/count", Success, None)
        } else {
            r(
                Resource,
                "notes://admin/count",
                Denied,
                Some("insufficient_scope"),
            )
        },
        r(
            Prompt,
            "review_note",
            if full { Success } else { Error },
            (!full).then_some("not_found"),
        ),
        r(Prompt, "review_note", Denied, Some("invalid_arguments")),
        if full {
            r(Prompt, "purge_plan", Success, None)
        } else {
            r(Prompt, "purge_plan", Denied, Some("insufficient_scope"))
        },
        r(Prompt, "no_such_prompt", Denied, Some("unknown_prompt")),
        r(Completion, "review_note", Success, None),
        r(Completion, "notes://notes/{id}", Success, None),
    ]);
    if full && mode == "legacy" {
        // The subscription's read, then the unsubscription's: each is a read, recorded.
        records.push(r(Resource, "notes://all", Success, None));
        records.push(r(Resource, "notes://all", Success, None));
    }
    records
}

fn check_items_audit(
    records: &[AuditRecord],
    expected: &[(CallKind, String, Outcome, Option<&str>)],
    mode: &str,
) {
    let got: Vec<(CallKind, String, Outcome, Option<&str>)> = records
        .iter()
        .map(|r| (r.kind, r.tool.clone(), r.outcome, r.reason.as_deref()))
        .collect();
    assert_eq!(got, expected);
    // The subscription's read says so; no other record does.
    let subscribed: Vec<&str> = records
        .iter()
        .filter(|r| r.arguments.get("$subscribe") == Some(&json!(true)))
        .map(|r| r.tool.as_str())
        .collect();
    let expected: &[&str] = if mode == "legacy" {
        &["notes://all"]
    } else {
        &[]
    };
    assert_eq!(subscribed, expected, "{records:?}");
    let unsubscribed: Vec<&str> = records
        .iter()
        .filter(|r| r.arguments.get("$unsubscribe") == Some(&json!(true)))
        .map(|r| r.tool.as_str())
        .collect();
    assert_eq!(unsubscribed, expected, "{records:?}");
}

#[test]
fn python_sdk_reads_resources_and_prompts_over_stdio() {
    items_over_stdio("legacy");
}

/// The same in the 2026-07-28 protocol (no subscriptions there).
#[test]
fn python_sdk_reads_resources_and_prompts_over_stdio_in_2026_07_28() {
    items_over_stdio("auto");
}

fn items_over_stdio(mode: &str) {
    let fixture = Fixture::new();
    let arg = |a: &str| format!("--arg={a}");
    let report = run_client(&[
        "stdio".into(),
        "--command".into(),
        server_bin().display().to_string(),
        arg("--db"),
        arg(&fixture.db_path.display().to_string()),
        arg("--audit"),
        arg(&fixture.audit_path.display().to_string()),
        arg("stdio"),
        "--full".into(),
        fixture.full.clone(),
        "--reader".into(),
        fixture.reader.clone(),
        "--items".into(),
        format!("--items-mode={mode}"),
    ]);
    check_items(&report, mode);
    // Over stdio a session without a token connects, lists nothing (deny by default)
    // and every read is refused as missing_token.
    let anonymous = &report["no_token"];
    assert_eq!(anonymous["connected"], true, "{anonymous}");
    assert_eq!(anonymous["resources"], json!([]));
    assert_eq!(anonymous["prompts"], json!([]));
    assert_eq!(anonymous["read_all_error"]["code"], -32001);
    assert_eq!(
        anonymous["read_all_error"]["data"]["reason"],
        "missing_token"
    );
    assert_eq!(anonymous["get_review_error"]["data"]["status"], 401);

    let note = report["full"]["note_id"].as_i64().unwrap().to_string();
    let mut expected = items_records(&note, true, mode);
    expected.extend(items_records("None", false, mode));
    let anonymous_records: Vec<_> = items_records("None", false, mode)
        .into_iter()
        .map(|(kind, tool, _, _)| (kind, tool, Outcome::Denied, Some("missing_token")))
        .collect();
    expected.extend(anonymous_records);
    check_items_audit(&read_audit(&fixture.audit_path), &expected, mode);
}

#[test]
fn python_sdk_reads_resources_and_prompts_over_streamable_http() {
    items_over_http("legacy");
}

/// The same in the 2026-07-28 protocol (no subscriptions there).
#[test]
fn python_sdk_reads_resources_and_prompts_over_streamable_http_in_2026_07_28() {
    items_over_http("auto");
}

fn items_over_http(mode: &str) {
    let fixture = Fixture::new();
    let (_server, url) = spawn_http_server(&fixture);
    let report = run_client(&[
        "http".into(),
        "--url".into(),
        url.clone(),
        "--full".into(),
        fixture.full.clone(),
        "--reader".into(),
        fixture.reader.clone(),
        "--items".into(),
        format!("--items-mode={mode}"),
    ]);
    check_items(&report, mode);
    // Over HTTP no token means no session at all.
    assert_eq!(report["no_token"]["connected"], false);
    let note = report["full"]["note_id"].as_i64().unwrap().to_string();
    let mut expected = items_records(&note, true, mode);
    expected.extend(items_records("None", false, mode));

    // A raw `resources/read` and `prompts/get` without a token: 401 from the gate, and
    // each recorded once, with its kind.
    for (method, params) in [
        ("resources/read", json!({"uri": "notes://all"})),
        (
            "prompts/get",
            json!({"name": "review_note", "arguments": {"id": "1"}}),
        ),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
        let status = common::post_json_status(&url, &body);
        assert_eq!(status, 401, "{method}");
    }
    expected.push((
        CallKind::Resource,
        "notes://all".into(),
        Outcome::Denied,
        Some("missing_token"),
    ));
    expected.push((
        CallKind::Prompt,
        "review_note".into(),
        Outcome::Denied,
        Some("missing_token"),
    ));
    check_items_audit(&read_audit(&fixture.audit_path), &expected, mode);
}
