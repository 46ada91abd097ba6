//! The official TypeScript MCP clients against aac-tools servers, over stdio and over
//! Streamable HTTP: the 1.x SDK (`@modelcontextprotocol/sdk`), the 2.x client
//! (`@modelcontextprotocol/client`), and the MCP Inspector's CLI (1.x and 2.x), with
//! the exact versions `interop-tests/ts/package-lock.json` pins.
//!
//! The point is what the hosts built on them show. The 1.x SDK checks a tool result's
//! `structuredContent` against the tool's `outputSchema` even when `isError` is true, so
//! a refusal that carried the error object there reached those hosts as `MCP error
//! -32602: Structured content does not match the tool's output schema`. Every refusal
//! here (401 and 403 over stdio, the confirm guard on a destructive tool with an output
//! schema, 400 invalid arguments, 404 unknown tool, a handler's 404) must come back as a
//! result with `isError: true` whose one text content is the error JSON — never as a
//! thrown error — and leave exactly one audit record per call. Over HTTP, 401 and 403 are
//! real HTTP statuses, checked with their `WWW-Authenticate` challenges as the client
//! received them.
//!
//! Behind the `interop` feature: `cargo test -p interop-tests --features interop --test
//! typescript`, after `scripts/test` ran `npm ci` in `interop-tests/ts` (or set
//! `AAC_INTEROP_NODE` to a Node.js >= 22 and install the packages there yourself).
//! Without Node.js and the packages these tests fail, loudly; they never skip.

#![cfg(feature = "interop")]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use aac_tools::audit::{AuditRecord, CallKind, Outcome};
use aac_tools::{CONFIRM_REQUIRED, Registry};
use common::{AacWorkflow, Fixture, read_audit, run_to_end, server_bin, spawn_http_server};
use serde_json::{Value, json};

fn ts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ts")
}

/// The `package.json` of an installed package, or of `interop-tests/ts` itself.
fn package_json(path: &str) -> Option<Value> {
    let text = std::fs::read_to_string(ts_dir().join(path).join("package.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// Node.js >= 22 with the packages of `interop-tests/ts` installed; a clear failure
/// without them.
fn node() -> PathBuf {
    let node = match std::env::var_os("AAC_INTEROP_NODE") {
        Some(node) => PathBuf::from(node),
        None => ts_dir().join("node_modules/.bin/node"),
    };
    let fix = "Run `scripts/test` (it installs them), or:\n\n    \
               (cd interop-tests/ts && npm ci)\n\n\
               which also brings Node.js 22 (the `node` npm package) to \
               interop-tests/ts/node_modules/.bin/node; or point AAC_INTEROP_NODE at a \
               Node.js >= 22.";
    let node_ok = Command::new(&node)
        .args([
            "-e",
            "process.exit(+process.versions.node.split('.')[0] >= 22 ? 0 : 1)",
        ])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        node_ok,
        "the TypeScript interop tests need Node.js >= 22 at `{}`, and it is missing or \
         older. {fix}",
        node.display()
    );
    let pinned = &package_json(".").expect("interop-tests/ts/package.json")["dependencies"];
    for package in pinned.as_object().expect("dependencies").keys() {
        assert!(
            package_json(&format!("node_modules/{package}")).is_some(),
            "the TypeScript interop tests need the npm package `{package}` in \
             interop-tests/ts/node_modules, and it is missing. {fix}"
        );
    }
    node
}

/// The version of `package` that `interop-tests/ts/package.json` pins.
fn pinned(package: &str) -> String {
    let manifest = package_json(".").expect("interop-tests/ts/package.json");
    let spec = manifest["dependencies"][package]
        .as_str()
        .unwrap_or_else(|| panic!("{package} is not a dependency"));
    spec.rsplit('@').next().unwrap().to_owned()
}

/// Run `node` with these arguments in `interop-tests/ts`; its status, stdout, stderr.
fn run_node(args: &[&str], what: &str) -> (std::process::ExitStatus, String, String) {
    let mut command = Command::new(node());
    command.args(args).current_dir(ts_dir());
    run_to_end(command, what, Duration::from_secs(300))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sdk {
    /// `@modelcontextprotocol/sdk` 1.x (the 2025 `initialize` handshake).
    V1,
    /// `@modelcontextprotocol/client` 2.x, by default (the 2025 `initialize` handshake).
    V2,
    /// `@modelcontextprotocol/client` 2.x with `versionNegotiation: {mode: "auto"}`:
    /// 2026-07-28 through `server/discover`.
    V2Auto,
}

impl Sdk {
    fn arg(self) -> &'static str {
        match self {
            Sdk::V1 => "v1",
            Sdk::V2 | Sdk::V2Auto => "v2",
        }
    }

    fn package(self) -> &'static str {
        match self {
            Sdk::V1 => "@modelcontextprotocol/sdk",
            Sdk::V2 | Sdk::V2Auto => "@modelcontextprotocol/client",
        }
    }

    /// The protocol version a session negotiates, as the client reports it (1.x does
    /// not say over stdio).
    fn protocol_version(self, transport: &str) -> Value {
        match (self, transport) {
            (Sdk::V1, "stdio") => Value::Null,
            (Sdk::V1 | Sdk::V2, _) => json!("2025-11-25"),
            (Sdk::V2Auto, _) => json!("2026-07-28"),
        }
    }
}

/// Run `client.mjs` with this plan; its JSON report.
fn run_client(sdk: Sdk, plan: &Value) -> Value {
    let mut plan = plan.clone();
    if sdk == Sdk::V2Auto {
        plan["version_negotiation"] = json!({"mode": "auto"});
    }
    let transport = plan["transport"].as_str().unwrap().to_owned();
    let plan = plan.to_string();
    let (status, stdout, stderr) = run_node(
        &["client.mjs", sdk.arg(), &plan],
        &format!("the TypeScript client ({})", sdk.package()),
    );
    assert!(
        status.success(),
        "the TypeScript client ({}) failed ({status}):\n{stderr}",
        sdk.package()
    );
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not a report ({e}):\n{stdout}\n{stderr}"));
    assert_eq!(report["sdk"], sdk.package());
    assert_eq!(report["version"], pinned(sdk.package()).as_str());
    for (label, session) in report["sessions"].as_object().unwrap() {
        if session["connected"] == true {
            assert_eq!(
                session["protocol_version"],
                sdk.protocol_version(&transport),
                "{sdk:?} {label}"
            );
        }
    }
    report
}

fn call(label: &str, name: &str, arguments: Value) -> Value {
    json!({"label": label, "name": name, "arguments": arguments})
}

/// What a client with every scope does on the interop server (a fresh database: the
/// first note gets id 1).
fn full_calls() -> Value {
    json!([
        call("add_note", "add_note", json!({"text": "from typescript"})),
        call("list_notes", "list_notes", json!({})),
        call("delete_without_confirm", "delete_note", json!({"id": 1})),
        call(
            "delete_confirm_false",
            "delete_note",
            json!({"id": 1, "confirm": false})
        ),
        call(
            "delete_confirmed",
            "delete_note",
            json!({"id": 1, "confirm": true})
        ),
        call("add_empty_text", "add_note", json!({"text": ""})),
        call("add_wrong_type", "add_note", json!({"text": 5})),
        call("unknown_tool", "no_such_tool", json!({})),
    ])
}

/// What a client with a missing, unknown or under-scoped token tries.
fn refused_calls() -> Value {
    json!([
        call("add_note", "add_note", json!({"text": "nope"})),
        call("list_notes", "list_notes", json!({})),
    ])
}

const BAD_TOKEN: &str =
    "aac_000000000000_0000000000000000000000000000000000000000000000000000000000000000";

fn sessions(full: &str, reader: &str) -> Value {
    json!([
        {"label": "full", "token": full, "calls": full_calls()},
        {"label": "no_token", "token": null, "calls": refused_calls()},
        {"label": "bad_token", "token": BAD_TOKEN, "calls": refused_calls()},
        {"label": "reader", "token": reader, "calls": refused_calls()},
    ])
}

/// The result of a call that must not have thrown.
fn result<'a>(calls: &'a Value, label: &str) -> &'a Value {
    let entry = &calls[label];
    assert!(
        entry["error"].is_null(),
        "`{label}`: the client threw instead of returning the tool result, which is what \
         a host shows the user: {}",
        entry["error"]
    );
    assert!(entry["result"].is_object(), "`{label}`: no result: {entry}");
    &entry["result"]
}

/// A successful call; its `structuredContent`.
fn success<'a>(calls: &'a Value, label: &str) -> &'a Value {
    let result = result(calls, label);
    assert_eq!(result["isError"], false, "`{label}`: {result}");
    result
}

/// A refusal as a host shows it: a result with `isError: true` whose one content is
/// the text of the error JSON, and no `structuredContent` (which 1.x clients check
/// against the output schema); the error JSON.
fn refusal(calls: &Value, label: &str, reason: &str, status: u16) -> Value {
    let result = result(calls, label);
    assert_eq!(result["isError"], true, "`{label}`: {result}");
    assert!(
        result.get("structuredContent").is_none(),
        "`{label}`: {result}"
    );
    let content = result["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "`{label}`: {result}");
    assert_eq!(content[0]["type"], "text", "`{label}`: {result}");
    let error: Value = serde_json::from_str(content[0]["text"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("`{label}`: the text is not the error JSON ({e}): {result}"));
    assert_eq!(error["reason"], reason, "`{label}`: {result}");
    assert_eq!(error["status"], status, "`{label}`: {result}");
    assert!(error["error"].is_string(), "`{label}`: {result}");
    error
}

/// The tools as the client listed them: the registry's, as it built them.
fn check_tools(session: &Value) {
    let registry = Registry::collect_module("interop_tests::tools").unwrap();
    let expected: Vec<Value> = registry.tools().iter().map(|t| t.json().clone()).collect();
    assert_eq!(session["tools"], Value::Array(expected));
    let delete = session["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "delete_note")
        .expect("delete_note is listed");
    assert_eq!(delete["annotations"]["destructiveHint"], true);
    // the case that broke: a destructive tool with an output schema
    assert_eq!(
        delete["outputSchema"]["properties"]["deleted"]["type"],
        "boolean"
    );
}

fn check_full_session(sdk: Sdk, session: &Value) {
    assert_eq!(session["connected"], true, "{sdk:?}: {session}");
    assert_eq!(session["server_name"], "aac-interop");
    check_tools(session);
    let calls = &session["calls"];
    assert_eq!(
        success(calls, "add_note")["structuredContent"],
        json!({"id": 1})
    );
    assert_eq!(
        success(calls, "list_notes")["structuredContent"],
        json!({"notes": [{"id": 1, "text": "from typescript"}]})
    );
    for label in ["delete_without_confirm", "delete_confirm_false"] {
        let error = refusal(calls, label, "destructive_flag_missing", 400);
        assert_eq!(error["error"], CONFIRM_REQUIRED);
    }
    assert_eq!(
        success(calls, "delete_confirmed")["structuredContent"],
        json!({"deleted": true})
    );
    for label in ["add_empty_text", "add_wrong_type"] {
        let error = refusal(calls, label, "invalid_arguments", 400);
        assert!(
            error["error"].as_str().unwrap().contains("`/text`"),
            "{error}"
        );
    }
    let error = refusal(calls, "unknown_tool", "unknown_tool", 404);
    assert_eq!(error["error"], "unknown tool `no_such_tool`");
}

type Expected = (&'static str, Outcome, Option<&'static str>);

fn full_session_records() -> Vec<Expected> {
    use Outcome::{Denied, Success};
    vec![
        ("add_note", Success, None),
        ("list_notes", Success, None),
        ("delete_note", Denied, Some("destructive_flag_missing")),
        ("delete_note", Denied, Some("destructive_flag_missing")),
        ("delete_note", Success, None),
        ("add_note", Denied, Some("invalid_arguments")),
        ("add_note", Denied, Some("invalid_arguments")),
        ("no_such_tool", Denied, Some("unknown_tool")),
    ]
}

/// Exactly one audit record per call attempt, in order.
fn check_audit(records: &[AuditRecord], transport: &str, expected: &[Expected]) {
    let got: Vec<(&str, Outcome, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.outcome, r.reason.as_deref()))
        .collect();
    assert_eq!(got, expected);
    assert!(records.iter().all(|r| r.transport == transport));
    let delete = records
        .iter()
        .find(|r| r.tool == "delete_note" && r.outcome == Outcome::Success)
        .unwrap();
    assert_eq!(delete.principal.as_deref(), Some("alice"));
    assert_eq!(delete.arguments["confirm"], true);
}

fn over_stdio(sdk: Sdk) {
    let fixture = Fixture::new();
    let plan = json!({
        "transport": "stdio",
        "command": server_bin(),
        "args": ["--db", fixture.db_path, "--audit", fixture.audit_path, "stdio"],
        "sessions": sessions(&fixture.full, &fixture.reader),
    });
    let report = run_client(sdk, &plan);
    let sessions = &report["sessions"];
    check_full_session(sdk, &sessions["full"]);

    // Over stdio the session starts without a valid token; every call is refused as a
    // tool result naming the reason.
    for (label, reason, message) in [
        ("no_token", "missing_token", "a bearer token is required"),
        ("bad_token", "invalid_token", "unknown token"),
    ] {
        let session = &sessions[label];
        assert_eq!(session["connected"], true, "{label}: {session}");
        check_tools(session);
        for call in ["add_note", "list_notes"] {
            let error = refusal(&session["calls"], call, reason, 401);
            assert_eq!(error["error"], message);
        }
    }
    let reader = &sessions["reader"];
    let error = refusal(&reader["calls"], "add_note", "insufficient_scope", 403);
    assert_eq!(error["error"], "this tool requires the scopes: notes:write");
    assert_eq!(
        success(&reader["calls"], "list_notes")["structuredContent"],
        json!({"notes": []})
    );

    use Outcome::{Denied, Success};
    let mut expected = full_session_records();
    expected.extend([
        ("add_note", Denied, Some("missing_token")),
        ("list_notes", Denied, Some("missing_token")),
        ("add_note", Denied, Some("invalid_token")),
        ("list_notes", Denied, Some("invalid_token")),
        ("add_note", Denied, Some("insufficient_scope")),
        ("list_notes", Success, None),
    ]);
    check_audit(&read_audit(&fixture.audit_path), "stdio", &expected);
}

/// The HTTP responses a session's client received.
fn responses(session: &Value) -> &Vec<Value> {
    session["http"].as_array().expect("the HTTP responses")
}

fn over_http(sdk: Sdk) {
    let fixture = Fixture::new();
    let (_server, url) = spawn_http_server(&fixture);
    let base = url.strip_suffix("/mcp").unwrap();
    let metadata = format!("{base}/.well-known/oauth-protected-resource/mcp");
    let plan = json!({
        "transport": "http",
        "url": url,
        "sessions": sessions(&fixture.full, &fixture.reader),
    });
    let report = run_client(sdk, &plan);
    let sessions = &report["sessions"];
    let full = &sessions["full"];
    check_full_session(sdk, full);
    assert!(
        responses(full)
            .iter()
            .all(|r| r["status"].as_u64().unwrap() < 300 || r["method"] == "GET"),
        "{full}"
    );

    // Over HTTP, no valid token means no session: 401 with the metadata URL, which the
    // client sees as a failed connect (whose message holds the error JSON of the body,
    // except in 2.x's version probe).
    for (label, challenge, body) in [
        (
            "no_token",
            format!(r#"Bearer resource_metadata="{metadata}""#),
            r#"{"error":"a bearer token is required","reason":"missing_token","status":401}"#,
        ),
        (
            "bad_token",
            format!(
                r#"Bearer error="invalid_token", error_description="unknown token", resource_metadata="{metadata}""#
            ),
            r#"{"error":"unknown token","reason":"invalid_token","status":401}"#,
        ),
    ] {
        let session = &sessions[label];
        assert_eq!(session["connected"], false, "{label}: {session}");
        let error = &session["error"];
        let message = error["message"].as_str().unwrap();
        match sdk {
            Sdk::V1 => {
                assert_eq!(error["name"], "StreamableHTTPError", "{label}: {error}");
                assert_eq!(error["code"], 401, "{label}: {error}");
                assert!(message.contains(body), "{label}: {error}");
            }
            // 2.x, without an OAuth provider to answer the 401 with
            Sdk::V2 => {
                assert_eq!(error["name"], "SdkHttpError", "{label}: {error}");
                assert!(message.contains(body), "{label}: {error}");
            }
            // the 401 answers its `server/discover` probe, and it says so
            Sdk::V2Auto => {
                assert_eq!(error["name"], "SdkHttpError", "{label}: {error}");
                assert_eq!(error["code"], "CLIENT_HTTP_AUTHENTICATION", "{label}");
                assert!(message.contains("HTTP 401"), "{label}: {error}");
            }
        }
        let responses = responses(session);
        assert!(!responses.is_empty(), "{label}: {session}");
        for response in responses {
            assert_eq!(response["status"], 401, "{label}: {response}");
            assert_eq!(response["www_authenticate"], challenge.as_str(), "{label}");
        }
    }

    // A token without the scope: the session works, the call gets a real 403 with the
    // step-up challenge. Without an OAuth provider to step up with, 1.x throws the HTTP
    // error; 2.x reads the challenge and throws an `InsufficientScopeError` naming the
    // scope.
    let reader = &sessions["reader"];
    assert_eq!(reader["connected"], true, "{reader}");
    let thrown = &reader["calls"]["add_note"]["error"];
    let message = thrown["message"].as_str().unwrap_or_default();
    match sdk {
        Sdk::V1 => {
            assert_eq!(thrown["name"], "StreamableHTTPError", "{reader}");
            assert_eq!(thrown["code"], 403, "{reader}");
            assert!(
                message.contains(
                    r#"{"error":"this tool requires the scopes: notes:write","reason":"insufficient_scope","status":403}"#
                ),
                "{reader}"
            );
        }
        Sdk::V2 | Sdk::V2Auto => {
            assert_eq!(thrown["name"], "InsufficientScopeError", "{reader}");
            assert_eq!(message, r#"Insufficient scope: required "notes:write""#);
        }
    }
    let forbidden: Vec<&Value> = responses(reader)
        .iter()
        .filter(|r| r["status"] == 403)
        .collect();
    assert_eq!(forbidden.len(), 1, "{reader}");
    assert_eq!(forbidden[0]["method"], "POST");
    assert_eq!(
        forbidden[0]["www_authenticate"],
        format!(
            r#"Bearer error="insufficient_scope", scope="notes:write", resource_metadata="{metadata}""#
        )
    );
    assert_eq!(
        success(&reader["calls"], "list_notes")["structuredContent"],
        json!({"notes": []})
    );

    use Outcome::{Denied, Success};
    let mut expected = full_session_records();
    expected.extend([
        ("add_note", Denied, Some("insufficient_scope")),
        ("list_notes", Success, None),
    ]);
    check_audit(
        &read_audit(&fixture.audit_path),
        "streamable_http",
        &expected,
    );
}

#[test]
fn sdk_1x_over_stdio() {
    over_stdio(Sdk::V1);
}

#[test]
fn client_2x_over_stdio() {
    over_stdio(Sdk::V2);
}

#[test]
fn client_2x_auto_over_stdio() {
    over_stdio(Sdk::V2Auto);
}

#[test]
fn sdk_1x_over_streamable_http() {
    over_http(Sdk::V1);
}

#[test]
fn client_2x_over_streamable_http() {
    over_http(Sdk::V2);
}

#[test]
fn client_2x_auto_over_streamable_http() {
    over_http(Sdk::V2Auto);
}

/// The reference server: a read, a handler's 404, and the confirm guard of
/// `delete_issue` (destructive, with an output schema).
fn aacworkflow_calls() -> Value {
    json!([
        call("get_issue", "get_issue", json!({"issue_id": "AAC-1"})),
        call("get_missing", "get_issue", json!({"issue_id": "AAC-999"})),
        call(
            "delete_without_confirm",
            "delete_issue",
            json!({"issue_id": "AAC-5"})
        ),
        call("get_deleted_not", "get_issue", json!({"issue_id": "AAC-5"})),
    ])
}

fn check_aacworkflow(sdk: Sdk, report: &Value) {
    let session = &report["sessions"]["alice"];
    assert_eq!(session["connected"], true, "{sdk:?}: {session}");
    let tools = session["tools"].as_array().expect("tools");
    let delete = tools
        .iter()
        .find(|t| t["name"] == "delete_issue")
        .expect("delete_issue is listed");
    assert_eq!(delete["annotations"]["destructiveHint"], true);
    assert!(delete["outputSchema"].is_object(), "{delete}");
    let calls = &session["calls"];
    assert_eq!(
        success(calls, "get_issue")["structuredContent"]["key"],
        "AAC-1"
    );
    refusal(calls, "get_missing", "not_found", 404);
    let error = refusal(
        calls,
        "delete_without_confirm",
        "destructive_flag_missing",
        400,
    );
    assert_eq!(error["error"], CONFIRM_REQUIRED);
    assert_eq!(
        success(calls, "get_deleted_not")["structuredContent"]["key"],
        "AAC-5"
    );
}

/// Exactly one audit record per call attempt in aacworkflow's trail, in order: `tool`,
/// `outcome`, `reason` of each, all over `transport`.
fn check_aacworkflow_audit(
    server: &AacWorkflow,
    transport: &str,
    expected: &[(&str, &str, Option<&str>)],
) {
    let records = server.audit();
    let got: Vec<(&str, &str, Option<&str>)> = records
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
                r["reason"].as_str(),
            )
        })
        .collect();
    assert_eq!(got, expected);
    assert!(records.iter().all(|r| r["transport"] == transport));
    assert!(records.iter().all(|r| r["principal"] == "alice"));
}

/// The audit records of [`aacworkflow_calls`], for each client that made them.
fn aacworkflow_records(clients: usize) -> Vec<(&'static str, &'static str, Option<&'static str>)> {
    let one = [
        ("get_issue", "success", None),
        ("get_issue", "error", Some("not_found")),
        ("delete_issue", "denied", Some("destructive_flag_missing")),
        ("get_issue", "success", None),
    ];
    one.iter()
        .copied()
        .cycle()
        .take(one.len() * clients)
        .collect()
}

#[test]
fn both_clients_against_aacworkflow_over_stdio() {
    let server = AacWorkflow::new();
    let plan = json!({
        "transport": "stdio",
        "command": server.bin,
        "args": ["serve"],
        "env": {"AAC_DB": server.db_path},
        "sessions": [{"label": "alice", "token": server.token, "calls": aacworkflow_calls()}],
    });
    for sdk in [Sdk::V1, Sdk::V2, Sdk::V2Auto] {
        check_aacworkflow(sdk, &run_client(sdk, &plan));
    }
    check_aacworkflow_audit(&server, "stdio", &aacworkflow_records(3));
}

#[test]
fn both_clients_against_aacworkflow_over_streamable_http() {
    let server = AacWorkflow::new();
    let (_child, url) = server.spawn_http();
    let plan = json!({
        "transport": "http",
        "url": url,
        "sessions": [{"label": "alice", "token": server.token, "calls": aacworkflow_calls()}],
    });
    for sdk in [Sdk::V1, Sdk::V2, Sdk::V2Auto] {
        check_aacworkflow(sdk, &run_client(sdk, &plan));
    }
    check_aacworkflow_audit(&server, "streamable_http", &aacworkflow_records(3));
}

/// The MCP Inspector's CLI, as `interop-tests/ts` pins it under this npm name.
#[derive(Clone, Copy, Debug)]
enum Inspector {
    /// `@modelcontextprotocol/inspector` 1.x (`inspector-v1`): built on the 1.x SDK, it
    /// lists the tools first and so checks `structuredContent` against the output schema.
    V1,
    /// `@modelcontextprotocol/inspector` 2.x, built on the 2.x client.
    V2,
}

impl Inspector {
    fn package(self) -> &'static str {
        match self {
            Inspector::V1 => "inspector-v1",
            Inspector::V2 => "@modelcontextprotocol/inspector",
        }
    }

    /// Its launcher (both name their bin `mcp-inspector`, so `.bin` has only one).
    fn script(self) -> &'static str {
        match self {
            Inspector::V1 => "node_modules/inspector-v1/cli/build/cli.js",
            Inspector::V2 => {
                "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
            }
        }
    }

    /// `inspector --cli -e AAC_DB=… -e AAC_TOKEN=… aacworkflow serve --method tools/call
    /// --tool-name TOOL --tool-arg issue_id=ISSUE`, as the README shows; its exit status,
    /// the result it printed (parsed) and its stderr.
    fn call(self, server: &AacWorkflow, tool: &str, issue: &str) -> (Option<i32>, Value, String) {
        let db = format!("AAC_DB={}", server.db_path.display());
        let token = format!("AAC_TOKEN={}", server.token);
        let bin = server.bin.display().to_string();
        let issue = format!("issue_id={issue}");
        let catalog = server.dir.path().join("inspector-catalog.json");
        let mut command = Command::new(node());
        command
            .current_dir(ts_dir())
            // 2.x keeps a catalog of servers (by default in ~/.mcp-inspector)
            .env("MCP_CATALOG_PATH", catalog)
            .arg(self.script())
            .args(["--cli", "-e", &db, "-e", &token, &bin, "serve"])
            .args(["--method", "tools/call", "--tool-name", tool])
            .args(["--tool-arg", &issue]);
        let what = format!("the Inspector CLI ({self:?}) calling {tool}");
        let (status, stdout, stderr) = run_to_end(command, &what, Duration::from_secs(300));
        assert!(
            !stdout.contains("-32602") && !stderr.contains("-32602"),
            "{what}: a protocol error instead of the tool result:\n{stdout}\n{stderr}"
        );
        let printed: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("{what}: no JSON result on stdout ({e}, {status}):\n{stdout}\n{stderr}")
        });
        (status.code(), printed, stderr)
    }
}

fn inspector_cli(inspector: Inspector) {
    let installed = package_json(&format!("node_modules/{}", inspector.package()))
        .expect("the Inspector is installed");
    assert_eq!(
        installed["version"],
        pinned(inspector.package()).as_str(),
        "{inspector:?}"
    );
    let server = AacWorkflow::new();

    // a read-only tool
    let (code, printed, stderr) = inspector.call(&server, "get_issue", "AAC-1");
    assert_eq!(code, Some(0), "{inspector:?}: {printed}\n{stderr}");
    assert_ne!(printed["isError"], true, "{printed}");
    assert_eq!(printed["structuredContent"]["key"], "AAC-1", "{printed}");

    // a destructive tool with an output schema, without `confirm`: the refusal is what
    // the Inspector prints, as the tool's result
    let (code, printed, stderr) = inspector.call(&server, "delete_issue", "AAC-5");
    assert_eq!(printed["isError"], true, "{printed}");
    assert!(printed.get("structuredContent").is_none(), "{printed}");
    let content = printed["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "{printed}");
    let error: Value = serde_json::from_str(content[0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        error,
        json!({"error": CONFIRM_REQUIRED, "reason": "destructive_flag_missing", "status": 400})
    );
    match inspector {
        // 1.x prints the result and succeeds
        Inspector::V1 => assert_eq!(code, Some(0), "{stderr}"),
        // 2.x prints the result, and exits 5 with a note on stderr for `isError`
        Inspector::V2 => {
            assert_eq!(code, Some(5), "{stderr}");
            assert!(stderr.contains(r#""code":"tool_is_error""#), "{stderr}");
        }
    }

    // and the issue is still there
    let (code, printed, stderr) = inspector.call(&server, "get_issue", "AAC-5");
    assert_eq!(code, Some(0), "{inspector:?}: {printed}\n{stderr}");
    assert_eq!(printed["structuredContent"]["key"], "AAC-5", "{printed}");

    // one record per call (the Inspector's tools/list is not a call)
    check_aacworkflow_audit(
        &server,
        "stdio",
        &[
            ("get_issue", "success", None),
            ("delete_issue", "denied", Some("destructive_flag_missing")),
            ("get_issue", "success", None),
        ],
    );
}

#[test]
fn inspector_1x_cli_over_stdio() {
    inspector_cli(Inspector::V1);
}

#[test]
fn inspector_2x_cli_over_stdio() {
    inspector_cli(Inspector::V2);
}

/// `aacworkflow serve --confirm user`: the 2.x client's elicitation handler is the person.
/// On 2025-11-25 (`initialize`) the server sends `elicitation/create`; on 2026-07-28
/// (`{"mode": "auto"}`) it answers `input_required` and the client retries with the
/// `requestState`. A decline keeps the issue (`user_declined`), an accept deletes it
/// (`confirmed_by: user`).
#[test]
fn client_2x_answers_the_servers_confirmation_in_both_eras() {
    let server = AacWorkflow::new();
    let (_child, url) = server.spawn_http_with(&["--confirm", "user"]);
    let question = |issue: &str| {
        format!(
            "Delete issue {issue} with its comments and autopilot runs? \
             This cannot be undone."
        )
    };
    for (sdk, issue) in [(Sdk::V2, "AAC-1"), (Sdk::V2Auto, "AAC-2")] {
        let arguments = json!({"issue_id": issue, "confirm": true});
        for answer in ["decline", "accept"] {
            let plan = json!({
                "transport": "http",
                "url": url,
                "elicit": answer,
                "sessions": [{"label": "alice", "token": server.token,
                              "calls": [call("delete", "delete_issue", arguments.clone())]}],
            });
            let report = run_client(sdk, &plan);
            let session = &report["sessions"]["alice"];
            assert_eq!(
                session["asked"],
                json!([question(issue)]),
                "{sdk:?} {answer}"
            );
            let result = &session["calls"]["delete"]["result"];
            if answer == "accept" {
                assert_eq!(result["isError"], false, "{sdk:?}: {session}");
                assert_eq!(result["structuredContent"]["key"], issue);
            } else {
                assert_eq!(result["isError"], true, "{sdk:?}: {session}");
                let error: Value =
                    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
                assert_eq!(error["reason"], "user_declined");
            }
        }
    }
    let deletes: Vec<(String, Value, Value)> = server
        .audit()
        .into_iter()
        .filter(|r| r["tool"] == "delete_issue")
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_owned(),
                r["reason"].clone(),
                r.get("confirmed_by").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    let row = |o: &str, r: Value, c: Value| (o.to_owned(), r, c);
    let asked = || row("denied", json!("user_confirmation_required"), Value::Null);
    let declined = || row("denied", json!("user_declined"), Value::Null);
    let accepted = || row("success", Value::Null, json!("user"));
    assert_eq!(
        deletes,
        vec![
            declined(),
            accepted(),
            asked(),
            declined(),
            asked(),
            accepted()
        ]
    );
}

fn item(label: &str, op: &str, rest: Value) -> Value {
    let mut item = json!({"label": label, "op": op});
    item.as_object_mut()
        .unwrap()
        .extend(rest.as_object().unwrap().clone());
    item
}

/// Resources, prompts and completion: a client with every scope reads and gets them, the
/// reader is refused what its scopes do not allow, and (over stdio) a client without a
/// token is refused everything.
fn item_sessions(full: &str, reader: &str, anonymous: bool) -> Value {
    let reads = |label: &str| {
        json!([
            item("resources", "list_resources", json!({})),
            item("templates", "list_templates", json!({})),
            item("prompts", "list_prompts", json!({})),
            item("read_all", "read", json!({"uri": "notes://all"})),
            item("read_note", "read", json!({"uri": "notes://notes/1"})),
            item("read_unknown", "read", json!({"uri": "notes://nothing"})),
            item("read_admin", "read", json!({"uri": "notes://admin/count"})),
            item(
                "get_review",
                "get",
                json!({"name": "review_note", "arguments": {"id": "1"}})
            ),
            item(
                "get_review_no_args",
                "get",
                json!({"name": "review_note", "arguments": {}})
            ),
            item(
                "get_purge",
                "get",
                json!({"name": "purge_plan", "arguments": {}})
            ),
            item(
                "complete",
                "complete",
                json!({"ref": {"type": "ref/prompt", "name": "review_note"},
                       "argument": {"name": "id", "value": ""}})
            ),
            item(&format!("{label}_end"), "list_prompts", json!({})),
        ])
    };
    let mut sessions = vec![
        json!({"label": "full", "token": full,
               "calls": [call("add_note", "add_note", json!({"text": "from typescript"}))],
               "items": reads("full")}),
        json!({"label": "reader", "token": reader, "items": reads("reader")}),
    ];
    if anonymous {
        sessions.push(json!({"label": "no_token", "token": null, "items": reads("no_token")}));
    }
    Value::Array(sessions)
}

/// An item that must have answered; its result.
fn item_result<'a>(session: &'a Value, label: &str) -> &'a Value {
    let entry = &session["items"][label];
    assert!(entry["error"].is_null(), "`{label}` threw: {entry}");
    &entry["result"]
}

/// An item that must have been refused with this JSON-RPC code and reason.
fn item_refused(session: &Value, label: &str, code: i64, reason: &str) {
    let error = &session["items"][label]["error"];
    assert_eq!(error["code"], code, "`{label}`: {error}");
    assert_eq!(error["data"]["reason"], reason, "`{label}`: {error}");
}

fn items_over(sdk: Sdk, transport: &str) {
    let fixture = Fixture::new();
    let (_server, plan) = if transport == "stdio" {
        let plan = json!({
            "transport": "stdio",
            "command": server_bin(),
            "args": ["--db", fixture.db_path, "--audit", fixture.audit_path, "stdio"],
            "sessions": item_sessions(&fixture.full, &fixture.reader, true),
        });
        (None, plan)
    } else {
        let (server, url) = spawn_http_server(&fixture);
        let plan = json!({
            "transport": "http",
            "url": url,
            "sessions": item_sessions(&fixture.full, &fixture.reader, false),
        });
        (Some(server), plan)
    };
    let report = run_client(sdk, &plan);
    let sessions = &report["sessions"];
    let full = &sessions["full"];
    assert_eq!(full["connected"], true, "{full}");
    let uris: Vec<&Value> = item_result(full, "resources")["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["uri"])
        .collect();
    assert_eq!(uris, [&json!("notes://admin/count"), &json!("notes://all")]);
    assert_eq!(
        item_result(full, "templates")["resourceTemplates"][0]["uriTemplate"],
        "notes://notes/{id}"
    );
    assert_eq!(
        item_result(full, "prompts")["prompts"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        item_result(full, "read_all")["contents"][0]["text"],
        "1: from typescript\n"
    );
    assert_eq!(
        item_result(full, "read_note")["contents"][0],
        json!({"uri": "notes://notes/1", "mimeType": "text/plain", "text": "from typescript"})
    );
    // 2026-07-28 answers an unknown resource with invalid params (rmcp upgrades the
    // older "resource not found" code for those peers).
    let not_found = if sdk == Sdk::V2Auto { -32602 } else { -32002 };
    item_refused(full, "read_unknown", not_found, "unknown_resource");
    assert_eq!(item_result(full, "read_admin")["contents"][0]["text"], "1");
    assert_eq!(
        item_result(full, "get_review")["messages"][0]["content"]["text"],
        "Review this note: from typescript"
    );
    item_refused(full, "get_review_no_args", -32602, "invalid_arguments");
    assert_eq!(
        item_result(full, "complete")["completion"]["values"],
        json!(["1"])
    );

    let reader = &sessions["reader"];
    assert_eq!(
        item_result(reader, "resources")["resources"],
        json!([item_result(full, "resources")["resources"][1]])
    );
    item_refused(reader, "read_admin", -32001, "insufficient_scope");
    item_refused(reader, "get_purge", -32001, "insufficient_scope");
    assert_eq!(
        item_result(reader, "read_note")["contents"][0]["text"],
        "from typescript"
    );

    use CallKind::{Completion, Prompt, Resource, Tool};
    use Outcome::{Denied, Success};
    let reads = |admin: (Outcome, Option<&'static str>), purge: (Outcome, Option<&'static str>)| {
        vec![
            (Resource, "notes://all", Success, None),
            (Resource, "notes://notes/1", Success, None),
            (
                Resource,
                "notes://nothing",
                Denied,
                Some("unknown_resource"),
            ),
            (Resource, "notes://admin/count", admin.0, admin.1),
            (Prompt, "review_note", Success, None),
            (Prompt, "review_note", Denied, Some("invalid_arguments")),
            (Prompt, "purge_plan", purge.0, purge.1),
            (Completion, "review_note", Success, None),
        ]
    };
    let mut expected = vec![(Tool, "add_note", Success, None)];
    expected.extend(reads((Success, None), (Success, None)));
    let refused = (Denied, Some("insufficient_scope"));
    expected.extend(reads(refused, refused));
    if transport == "stdio" {
        let anonymous = &sessions["no_token"];
        assert_eq!(item_result(anonymous, "resources")["resources"], json!([]));
        item_refused(anonymous, "read_all", -32001, "missing_token");
        item_refused(anonymous, "get_review", -32001, "missing_token");
        expected.extend(
            reads((Success, None), (Success, None))
                .into_iter()
                .map(|(kind, name, _, _)| (kind, name, Denied, Some("missing_token"))),
        );
    }
    let got: Vec<(CallKind, String, Outcome, Option<String>)> = read_audit(&fixture.audit_path)
        .into_iter()
        .map(|r| (r.kind, r.tool, r.outcome, r.reason))
        .collect();
    let expected: Vec<(CallKind, String, Outcome, Option<String>)> = expected
        .into_iter()
        .map(|(k, t, o, r)| (k, t.to_owned(), o, r.map(str::to_owned)))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn sdk_1x_reads_resources_and_prompts_over_stdio() {
    items_over(Sdk::V1, "stdio");
}

#[test]
fn client_2x_reads_resources_and_prompts_over_stdio() {
    items_over(Sdk::V2, "stdio");
}

#[test]
fn sdk_1x_reads_resources_and_prompts_over_streamable_http() {
    items_over(Sdk::V1, "http");
}

#[test]
fn client_2x_reads_resources_and_prompts_over_streamable_http() {
    items_over(Sdk::V2, "http");
}

#[test]
fn client_2x_auto_reads_resources_and_prompts_over_stdio() {
    items_over(Sdk::V2Auto, "stdio");
}

#[test]
fn client_2x_auto_reads_resources_and_prompts_over_streamable_http() {
    items_over(Sdk::V2Auto, "http");
}
