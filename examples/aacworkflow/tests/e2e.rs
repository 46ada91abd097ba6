//! End to end: rmcp's own client against the real `aacworkflow` binary, over stdio and
//! over Streamable HTTP (with sessions and stateless), on the backend under test
//! (`AAC_TEST_BACKEND`, see `common`): a real SQLite file, or a real PostgreSQL database
//! (`--db postgres://…` through `AAC_DB`). Every tool, every kind of refusal, and the
//! audit records they leave, read back with `aacworkflow audit --json`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::TestDb;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_aacworkflow");

type Client = RunningService<RoleClient, ClientConfig>;

/// A database seeded by `aacworkflow init --demo`: a file in a temporary directory, or
/// a fresh PostgreSQL database (with roles of its own) on the PostgreSQL pass.
struct Env {
    dir: tempfile::TempDir,
    /// `AAC_DB`: the file's path or the database's URL.
    db: String,
    pg: Option<TestDb>,
}

impl Env {
    fn new() -> Env {
        let env = Env::empty();
        let out = env.command().args(["init", "--demo"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        env
    }

    /// No database yet (a path where none is, or a PostgreSQL database never migrated).
    fn empty() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let (db, pg) = if common::on_postgres() {
            let pg = common::test_db();
            (pg.url.clone(), Some(pg))
        } else {
            let path = dir.path().join("aacworkflow.db");
            (path.display().to_string(), None)
        };
        Env { dir, db, pg }
    }

    /// The environment every command of this database runs with.
    fn vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![("AAC_DB", self.db.clone())];
        if let Some(pg) = &self.pg {
            vars.push(("AAC_DB_ROLE_PREFIX", pg.roles.prefix().to_owned()));
        }
        vars
    }

    fn command(&self) -> Command {
        let mut command = Command::new(BIN);
        command
            .current_dir(self.dir.path())
            .envs(self.vars())
            .env_remove("AAC_TOKEN")
            .env("AAC_LOG", "warn");
        command
    }

    /// How many issues the database holds.
    fn issues(&self) -> i64 {
        match &self.pg {
            Some(pg) => common::pg_scalar(&pg.url, "SELECT count(*) FROM issues", &[]),
            None => rusqlite::Connection::open(&self.db)
                .unwrap()
                .query_row("SELECT count(*) FROM issues", [], |r| r.get(0))
                .unwrap(),
        }
    }

    /// `aacworkflow token create …`: the token printed on stdout.
    fn token(&self, workspace: &str, user: &str, scopes: &str) -> String {
        let out = self
            .command()
            .args(["token", "create", "--workspace", workspace, "--user", user])
            .args(["--scopes", scopes])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn revoke(&self, token: &str) {
        let out = self
            .command()
            .args(["token", "revoke", token])
            .output()
            .unwrap();
        assert!(out.status.success());
    }

    /// `aacworkflow audit --json` with extra filters: one record per line.
    fn audit(&self, filters: &[&str]) -> Vec<Value> {
        let out = self
            .command()
            .args(["audit", "--json"])
            .args(filters)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON record per line"))
            .collect()
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::File::create(self.dir.path().join(name)).unwrap()
    }

    /// Connect over stdio to `aacworkflow serve [extra]` with `AAC_TOKEN=token`.
    async fn stdio(&self, token: &str, extra: &[&str]) -> Client {
        self.stdio_with(token, extra, &[]).await
    }

    /// [`Env::stdio`] with these environment variables too.
    async fn stdio_with(&self, token: &str, extra: &[&str], vars: &[(&str, &str)]) -> Client {
        let mut command = tokio::process::Command::new(BIN);
        command
            .current_dir(self.dir.path())
            .arg("serve")
            .args(extra)
            .envs(self.vars())
            .envs(vars.iter().copied())
            .env("AAC_TOKEN", token)
            .env("AAC_LOG", "info");
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(Stdio::from(self.log("stdio.log")))
            .spawn()
            .unwrap();
        client_config()
            .serve(transport)
            .await
            .expect("MCP handshake")
    }

    /// Start `aacworkflow serve --http 127.0.0.1:0 [extra]` and wait for its address.
    fn http(&self, extra: &[&str]) -> HttpServer {
        self.http_with(extra, &[])
    }

    /// [`Env::http`] with these environment variables too.
    fn http_with(&self, extra: &[&str], vars: &[(&str, &str)]) -> HttpServer {
        let mut child = self
            .command()
            .envs(vars.iter().copied())
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("the server says where it listens before anything else")
                .unwrap();
            if let Some(url) = line.strip_prefix("aacworkflow: serving MCP on ") {
                break url.to_owned();
            }
        };
        // Keep draining stderr so that the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        HttpServer { child, url }
    }
}

/// A running `aacworkflow serve --http`, killed on drop.
struct HttpServer {
    child: Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HttpServer {
    async fn connect(&self, token: &str) -> Client {
        let config =
            StreamableHttpClientTransportConfig::with_uri(self.url.as_str()).auth_header(token);
        client_config()
            .serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("MCP handshake over HTTP")
    }
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("aacworkflow-e2e", "0"),
    )
}

/// Call a tool and return the `CallToolResult` JSON.
async fn call(client: &Client, tool: &str, args: Value) -> Value {
    let arguments: Map<String, Value> = match args {
        Value::Object(map) => map,
        other => panic!("arguments must be an object, not {other}"),
    };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let result = client
        .peer()
        .call_tool(params)
        .await
        .expect("tools/call answered");
    serde_json::to_value(result).unwrap()
}

async fn ok(client: &Client, tool: &str, args: Value) -> Value {
    let result = call(client, tool, args).await;
    assert_ne!(result["isError"], true, "{tool}: {result}");
    result["structuredContent"].clone()
}

async fn refused(client: &Client, tool: &str, args: Value, status: u16, reason: &str) -> Value {
    let result = call(client, tool, args).await;
    // The text content carries the error JSON; there is no structured content (hosts on
    // the TypeScript SDK 1.x check it against the tool's output schema).
    let body = error_body(&result);
    assert_eq!(body["status"], status, "{tool}: {result}");
    assert_eq!(body["reason"], reason, "{tool}: {result}");
    body
}

/// A call refused for want of a scope. Over stdio it is a tool result (403
/// `insufficient_scope`); over HTTP the server answers a real `403` with
/// `WWW-Authenticate: Bearer error="insufficient_scope"` so that clients can step up,
/// which rmcp's client reports as an error of the request.
async fn scope_refused(client: &Client, tool: &str, args: Value) {
    let arguments: Map<String, Value> = args.as_object().unwrap().clone();
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    match client.peer().call_tool(params).await {
        Ok(result) => {
            let result = serde_json::to_value(result).unwrap();
            assert_eq!(error_body(&result)["status"], 403);
            assert_eq!(error_body(&result)["reason"], "insufficient_scope");
        }
        Err(err) => {
            let text = format!("{err} {err:?}");
            assert!(text.to_lowercase().contains("insufficient"), "{text}");
        }
    }
}

async fn tool_names(client: &Client) -> Vec<String> {
    let tools = client.peer().list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    names
}

/// The whole story on one connection: every tool, then every refusal the tools and the
/// pipeline give. Returns how many calls it made.
async fn every_tool_and_refusal(
    env: &Env,
    admin: &Client,
    readers: [&Client; 2],
    viewer: &Client,
) -> usize {
    let tools = admin.peer().list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 10);
    let delete = tools.iter().find(|t| t.name == "delete_issue").unwrap();
    let delete = serde_json::to_value(delete).unwrap();
    assert_eq!(delete["annotations"]["destructiveHint"], true);
    assert_eq!(delete["annotations"]["readOnlyHint"], false);
    assert_eq!(delete["annotations"]["idempotentHint"], true);
    assert_eq!(delete["annotations"]["openWorldHint"], false);
    assert_eq!(
        delete["_meta"]["aac-tools.dev/scopes"],
        json!(["issues:write"])
    );

    // Every tool, as alice (admin).
    let page = ok(admin, "list_issues", json!({"status": "open", "limit": 2})).await;
    assert_eq!(page["issues"].as_array().unwrap().len(), 2);
    let next = page["next_cursor"].as_str().unwrap().to_owned();
    let rest = ok(
        admin,
        "list_issues",
        json!({"status": "open", "cursor": next}),
    )
    .await;
    assert_eq!(rest["issues"].as_array().unwrap().len(), 2);
    let issue = ok(admin, "get_issue", json!({"issue_id": "AAC-2"})).await;
    assert_eq!(issue["title"], "CSV export drops the last row");
    let comments = ok(admin, "list_comments", json!({"issue_id": issue["id"]})).await;
    assert_eq!(comments["comments"].as_array().unwrap().len(), 1);
    let created = ok(
        admin,
        "create_issue",
        json!({"title": "Typo on the pricing page"}),
    )
    .await;
    let key = created["key"].as_str().unwrap().to_owned();
    assert_eq!(key, "AAC-6");
    let updated = ok(
        admin,
        "update_issue",
        json!({"issue_id": key, "body": "“Pricng”"}),
    )
    .await;
    assert_eq!(updated["changed"], true);
    let comment = ok(
        admin,
        "comment_issue",
        json!({"issue_id": key, "body": "Fixed in the CMS."}),
    )
    .await;
    assert_eq!(comment["author"], "alice");
    let assigned = ok(
        admin,
        "assign_issue_to_agent",
        json!({"issue_id": key, "agent": "autopilot"}),
    )
    .await;
    assert_eq!(assigned["issue"]["assignee"]["name"], "autopilot");
    let run1 = ok(admin, "trigger_autopilot", json!({"issue_id": key})).await;
    let run2 = ok(admin, "trigger_autopilot", json!({"issue_id": key})).await;
    assert_ne!(run1["run_id"], run2["run_id"]);
    let usage = ok(admin, "dashboard_usage_daily", json!({"days": 7})).await;
    assert!(usage["total_calls"].as_i64().unwrap() >= 10, "{usage}");

    // The delete: refused without confirm, refused to a viewer, then done.
    let body = refused(
        admin,
        "delete_issue",
        json!({"issue_id": key}),
        400,
        "destructive_flag_missing",
    )
    .await;
    assert_eq!(
        body["error"],
        "confirm: true required for destructive operations"
    );
    let body = refused(
        viewer,
        "delete_issue",
        json!({"issue_id": key, "confirm": true}),
        403,
        "forbidden",
    )
    .await;
    assert!(body["error"].as_str().unwrap().contains("viewer"));
    let deleted = ok(
        admin,
        "delete_issue",
        json!({"issue_id": key, "confirm": true}),
    )
    .await;
    assert_eq!(deleted["key"], key.as_str());
    assert_eq!(deleted["comments_deleted"], 1);
    assert_eq!(deleted["runs_deleted"], 2);

    // Refusals of the pipeline and of the tools.
    scope_refused(readers[0], "create_issue", json!({"title": "x"})).await;
    scope_refused(readers[1], "dashboard_usage_daily", json!({})).await;
    refused(
        admin,
        "list_issues",
        json!({"limit": 500}),
        400,
        "invalid_arguments",
    )
    .await;
    refused(admin, "no_such_tool", json!({}), 404, "unknown_tool").await;
    refused(
        admin,
        "get_issue",
        json!({"issue_id": key}),
        404,
        "not_found",
    )
    .await;
    refused(
        admin,
        "get_issue",
        json!({"issue_id": "OTH-1"}),
        404,
        "not_found",
    )
    .await;
    refused(
        admin,
        "trigger_autopilot",
        json!({"issue_id": "AAC-3"}),
        409,
        "conflict",
    )
    .await;

    // The records, read back with the command line.
    let denied = env.audit(&["--outcome", "denied"]);
    let reasons: Vec<&str> = denied
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            "destructive_flag_missing",
            "forbidden",
            "insufficient_scope",
            "insufficient_scope",
            "invalid_arguments",
            "unknown_tool",
        ]
    );
    let confirm = &denied[0];
    assert_eq!(confirm["tool"], "delete_issue");
    assert_eq!(confirm["principal"], "alice");
    assert_eq!(confirm["workspace"], "demo");
    assert_eq!(confirm["access_level"], "delete");
    assert!(confirm["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        denied[2]["scopes_provided"],
        json!(["comments:read", "issues:read"])
    );
    let deletes = env.audit(&["--tool", "delete_issue"]);
    let outcomes: Vec<&str> = deletes
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["denied", "denied", "success"]);
    assert_eq!(deletes[2]["arguments"]["issue_id"], key.as_str());
    assert_eq!(deletes[2]["arguments"]["confirm"], true);
    let errors = env.audit(&["--outcome", "error"]);
    assert_eq!(errors.len(), 3);
    21
}

#[tokio::test]
async fn stdio_every_tool_every_refusal_and_their_audit_records() {
    let env = Env::new();
    let alice = env.token("demo", "alice", "all");
    let bob = env.token("demo", "bob", "issues:read,comments:read");
    let carol = env.token("demo", "carol", "all");
    let admin = env.stdio(&alice, &[]).await;
    let reader = env.stdio(&bob, &[]).await;
    let viewer = env.stdio(&carol, &[]).await;
    let calls = every_tool_and_refusal(&env, &admin, [&reader, &reader], &viewer).await;

    let all = env.audit(&[]);
    assert_eq!(all.len(), calls, "one record per call");
    assert!(all.iter().all(|r| r["transport"] == "stdio"));

    // A token revoked while the server runs stops working at once: 401.
    env.revoke(&bob);
    refused(&reader, "list_issues", json!({}), 401, "invalid_token").await;
    let last = env.audit(&["--limit", "1"]);
    assert_eq!(last[0]["outcome"], "denied");
    assert_eq!(last[0]["reason"], "invalid_token");
    assert_eq!(last[0]["principal"], Value::Null);

    let stats = env
        .command()
        .args(["audit", "--stats", "--json"])
        .output()
        .unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["total"], calls as i64 + 1, "{stats}");
    let verify = env.command().args(["audit", "--verify"]).output().unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    for client in [admin, reader, viewer] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn http_with_sessions_every_tool_every_refusal_and_their_audit_records() {
    let env = Env::new();
    let alice = env.token("demo", "alice", "all");
    let bob = env.token("demo", "bob", "issues:read,comments:read");
    let carol = env.token("demo", "carol", "all");
    let server = env.http(&[]);
    let admin = server.connect(&alice).await;
    let reader = server.connect(&bob).await;
    let reader2 = server.connect(&bob).await;
    let viewer = server.connect(&carol).await;
    let calls = every_tool_and_refusal(&env, &admin, [&reader, &reader2], &viewer).await;
    let all = env.audit(&[]);
    // The scope refusals are decided by the HTTP layer (a real 403 that lets clients
    // step up); every attempt still leaves exactly one record.
    assert_eq!(all.len(), calls, "one record per call");
    assert!(
        all.iter().all(|r| r["transport"] == "streamable_http"),
        "{all:?}"
    );
    for client in [admin, reader, reader2, viewer] {
        let _ = client.cancel().await;
    }
}

#[tokio::test]
async fn http_stateless_and_read_only_modes() {
    let env = Env::new();
    let alice = env.token("demo", "alice", "all");

    let stateless = env.http(&["--stateless"]);
    let client = stateless.connect(&alice).await;
    assert_eq!(tool_names(&client).await.len(), 10);
    let created = ok(&client, "create_issue", json!({"title": "Stateless works"})).await;
    let got = ok(&client, "get_issue", json!({"issue_id": created["id"]})).await;
    assert_eq!(got["title"], "Stateless works");
    refused(
        &client,
        "delete_issue",
        json!({"issue_id": "AAC-1"}),
        400,
        "destructive_flag_missing",
    )
    .await;
    client.cancel().await.unwrap();
    drop(stateless);

    let read_only = env.http(&["--read-only"]);
    let client = read_only.connect(&alice).await;
    assert_eq!(
        tool_names(&client).await,
        [
            "dashboard_usage_daily",
            "get_issue",
            "list_comments",
            "list_issues"
        ]
    );
    ok(&client, "list_issues", json!({})).await;
    refused(
        &client,
        "delete_issue",
        json!({"issue_id": "AAC-1", "confirm": true}),
        404,
        "unknown_tool",
    )
    .await;
    refused(
        &client,
        "create_issue",
        json!({"title": "x"}),
        404,
        "unknown_tool",
    )
    .await;
    client.cancel().await.unwrap();
    let hidden = env.audit(&["--outcome", "denied", "--tool", "create_issue"]);
    assert_eq!(hidden.last().unwrap()["check"], "read_only_mode");
}

#[tokio::test]
async fn http_without_a_token_is_refused_before_any_session() {
    let env = Env::new();
    let server = env.http(&[]);
    let config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str());
    let refused = client_config()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await;
    let Err(err) = refused else {
        panic!("no session without a token")
    };
    assert!(err.is_authorization_required(), "{err}");
    let bad =
        StreamableHttpClientTransportConfig::with_uri(server.url.as_str()).auth_header("aac_nope");
    let Err(err) = client_config()
        .serve(StreamableHttpClientTransport::from_config(bad))
        .await
    else {
        panic!("no session with a bad token")
    };
    assert!(err.is_authorization_required(), "{err}");
}

/// The status of `GET /tools` with this `Host`, sent by hand (no client rewrites it).
fn tools_status(url: &str, host: &str, token: &str) -> String {
    use std::io::{Read, Write};
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "GET /tools HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer.lines().next().unwrap_or_default().to_owned()
}

/// `serve --allow-host` names the other hosts a server is reached by: they are accepted
/// beside localhost's, and any other is still refused (the DNS-rebinding guard).
#[tokio::test]
async fn allow_host_accepts_the_named_hosts_and_still_refuses_others() {
    let env = Env::new();
    let token = env.token("demo", "alice", "issues:read");
    let plain = env.http(&[]);
    assert!(
        tools_status(&plain.url, "mcp.example.test", &token).contains(" 403 "),
        "refused without --allow-host"
    );
    drop(plain);
    let server = env.http(&["--allow-host", "mcp.example.test,10.0.0.7:8443"]);
    for (host, status) in [
        ("mcp.example.test", " 200 "),
        ("mcp.example.test:9000", " 200 "),
        ("10.0.0.7:8443", " 200 "),
        ("10.0.0.7:80", " 403 "),
        ("127.0.0.1", " 200 "),
        ("evil.example.com", " 403 "),
    ] {
        let line = tools_status(&server.url, host, &token);
        assert!(line.contains(status), "{host}: {line}");
    }
}

/// `serve --cors-origin` lets a web page of that origin call the server: its preflight is
/// answered and the answers name it; another origin gets neither, and a value that is no
/// origin stops the command (exit 2).
#[tokio::test]
async fn cors_origin_lets_the_named_page_read_the_answers() {
    use std::io::{Read, Write};
    let env = Env::new();
    let token = env.token("demo", "alice", "issues:read");
    let server = env.http(&["--cors-origin", "https://app.example.test"]);
    let address = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let exchange = |request: String| {
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer.to_ascii_lowercase()
    };
    for (origin, listed) in [
        ("https://app.example.test", true),
        ("https://evil.example.test", false),
    ] {
        let preflight = exchange(format!(
            "OPTIONS /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: {origin}\r\n\
             Access-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: authorization, content-type\r\nConnection: close\r\n\r\n"
        ));
        assert_eq!(
            preflight.starts_with("http/1.1 204"),
            listed,
            "{origin}: {preflight}"
        );
        let list = exchange(format!(
            "GET /tools HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: {origin}\r\n\
             Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        ));
        let named = format!("access-control-allow-origin: {origin}");
        assert_eq!(list.contains(&named), listed, "{origin}: {list}");
        assert_eq!(preflight.contains(&named), listed, "{origin}: {preflight}");
        assert_eq!(list.starts_with("http/1.1 200"), listed, "{origin}: {list}");
    }
    drop(server);
    for bad in [
        "*",
        "null",
        "app.example.test",
        "https://app.example.test/path",
        "https://*.example.test",
        "http://::1:6274",
    ] {
        let out = env
            .command()
            .args(["serve", "--http", "127.0.0.1:0", "--cors-origin", bad])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--cors-origin"), "{bad}: {stderr}");
    }
}

/// A request sent by hand to the server at `url` (its `/mcp` address): the status line
/// and the body.
fn http_request(
    url: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (String, String) {
    use std::io::{Read, Write};
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// `serve` is an OAuth resource server from the command line: `--resource-url` and
/// `--authorization-server` make the protected-resource metadata (RFC 9728), and
/// `--jwt-issuer` accepts that issuer's JWTs (keys from `AAC_JWT_SECRET` or `--jwt-jwks`,
/// audience `--resource-url`) beside the store's tokens.
#[tokio::test]
async fn serve_is_an_oauth_resource_server_from_the_command_line() {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let env = Env::new();
    const SECRET: &str = "0123456789abcdef0123456789abcdef-a-test-secret";
    const RESOURCE: &str = "https://mcp.example.test/mcp";
    const ISSUER: &str = "https://auth.example.test";
    let server = env.http_with(
        &[
            "--resource-url",
            RESOURCE,
            "--authorization-server",
            ISSUER,
            "--jwt-issuer",
            ISSUER,
        ],
        &[("AAC_JWT_SECRET", SECRET)],
    );
    let (status, body) = http_request(
        &server.url,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        None,
        "",
    );
    assert!(status.contains(" 200 "), "{status}");
    let metadata: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(metadata["resource"], RESOURCE, "{metadata}");
    assert_eq!(
        metadata["authorization_servers"],
        json!([ISSUER]),
        "{metadata}"
    );
    assert!(
        metadata["scopes_supported"]
            .as_array()
            .unwrap()
            .contains(&json!("issues:read")),
        "{metadata}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let jwt = |aud: &str, iss: &str| {
        encode(
            &Header::default(),
            &json!({"sub": "alice", "workspace": "demo", "scope": "issues:read",
                    "aud": aud, "iss": iss, "exp": now + 600, "iat": now}),
            &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let list =
        |token: &str| http_request(&server.url, "POST", "/tools/list_issues", Some(token), "{}");
    let (status, body) = list(&jwt(RESOURCE, ISSUER));
    assert!(status.contains(" 200 "), "{status}: {body}");
    assert!(body.contains("AAC-1"), "{body}");
    for (aud, iss) in [
        ("https://other.example.test/mcp", ISSUER),
        (RESOURCE, "https://evil.test"),
    ] {
        let (status, body) = list(&jwt(aud, iss));
        assert!(status.contains(" 401 "), "{aud} {iss}: {status}: {body}");
    }
    // The store's tokens keep working beside them.
    let token = env.token("demo", "alice", "issues:read");
    let (status, body) = list(&token);
    assert!(status.contains(" 200 "), "{status}: {body}");
    drop(server);

    // A trailing `/` on --resource-url: the metadata advertises the URL without it, and
    // that is the audience (a JWT for the advertised resource was refused 401 "issued for
    // another audience").
    let slashed = env.http_with(
        &[
            "--resource-url",
            &format!("{RESOURCE}/"),
            "--jwt-issuer",
            ISSUER,
        ],
        &[("AAC_JWT_SECRET", SECRET)],
    );
    let (_, body) = http_request(
        &slashed.url,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        None,
        "",
    );
    let metadata: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(metadata["resource"], RESOURCE, "{metadata}");
    let (status, body) = http_request(
        &slashed.url,
        "POST",
        "/tools/list_issues",
        Some(&jwt(RESOURCE, ISSUER)),
        "{}",
    );
    assert!(status.contains(" 200 "), "{status}: {body}");
    drop(slashed);

    // --jwt-audience without --resource-url: the metadata advertises http://<Host>/mcp
    // while only the audience given is accepted, which is said at start.
    let jwks = env.dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        json!({"keys": [{"kty": "oct", "k": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYtYS10ZXN0LXNlY3JldA"}]})
            .to_string(),
    )
    .unwrap();
    let (mut child, said) = serve_under_ulimit(
        &env,
        "-Sn 1024",
        &format!(
            "--jwt-issuer {ISSUER} --jwt-audience {RESOURCE} --jwt-jwks {}",
            jwks.display()
        ),
    );
    let mut seen = Vec::new();
    let warned = loop {
        match said.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(line) if line.contains("without --resource-url") => break line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no warning of the unadvertised audience: {seen:?}"),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned.contains(RESOURCE), "{warned}");

    // Over stdio too: a JWT in AAC_TOKEN, checked at start and on every call.
    let client = env
        .stdio_with(
            &jwt(RESOURCE, ISSUER),
            &["--jwt-issuer", ISSUER, "--jwt-audience", RESOURCE],
            &[("AAC_JWT_SECRET", SECRET)],
        )
        .await;
    let listed = ok(&client, "list_issues", json!({})).await;
    assert!(listed.to_string().contains("AAC-1"), "{listed}");
    client.cancel().await.unwrap();

    // A read-only server names only the scopes of what it serves.
    let read_only = env.http(&["--read-only"]);
    let (_, body) = http_request(
        &read_only.url,
        "GET",
        "/.well-known/oauth-protected-resource",
        None,
        "",
    );
    let metadata: Value = serde_json::from_str(&body).unwrap();
    let scopes = metadata["scopes_supported"].as_array().unwrap();
    assert!(scopes.contains(&json!("issues:read")), "{metadata}");
    for write in [
        "issues:write",
        "comments:write",
        "agents:write",
        "autopilot:run",
    ] {
        assert!(!scopes.contains(&json!(write)), "{write}: {metadata}");
    }
    drop(read_only);

    // A JWT issuer with no keys, or no audience, stops the server at start; a URL that
    // is none is a usage error.
    for (args, vars, code, said) in [
        (
            &["--jwt-issuer", ISSUER, "--resource-url", RESOURCE][..],
            &[][..],
            1,
            "no keys",
        ),
        (
            &["--jwt-issuer", ISSUER][..],
            &[("AAC_JWT_SECRET", SECRET)][..],
            1,
            "audience",
        ),
        (
            &["--resource-url", "mcp.example.test"][..],
            &[][..],
            2,
            "https://",
        ),
        (
            &["--authorization-server", "https://"][..],
            &[][..],
            2,
            "--authorization-server",
        ),
        (
            &["--resource-url", "https://[::1/mcp"][..],
            &[][..],
            2,
            "not a URL",
        ),
        (
            &["--resource-url", "https://x:99999/mcp"][..],
            &[][..],
            2,
            "not a URL",
        ),
        (
            &["--authorization-server", "https://u:p@as.test"][..],
            &[][..],
            2,
            "password",
        ),
        (&["--jwt-issuer", ""][..], &[][..], 2, "empty"),
        (
            &["--resource-url", "https:///mcp.example.test/mcp"][..],
            &[][..],
            2,
            "write it",
        ),
        (
            &["--resource-url", "https://x:/mcp"][..],
            &[][..],
            2,
            "write it `x`",
        ),
        // Upper case, which every client lower-cases before it asks for a token (the
        // URL was published and taken as the audience as written).
        (
            &["--resource-url", "http://LOCALHOST:8080/mcp"][..],
            &[][..],
            2,
            "write it `localhost:8080`",
        ),
        (
            &["--resource-url", "HTTP://localhost:8080/mcp"][..],
            &[][..],
            2,
            "in lower case",
        ),
        (
            &["--authorization-server", "https://as.test\\x"][..],
            &[][..],
            2,
            "backslash",
        ),
    ] {
        let out = env
            .command()
            .envs(vars.iter().copied())
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
}

#[tokio::test]
async fn serve_demo_from_nothing_gives_a_working_server_and_a_token() {
    // The README's first command: no database yet, `serve --demo` (on SQLite, the default
    // file in the working directory; on PostgreSQL, a database never migrated).
    let env = Env::empty();
    let dir = &env.dir;
    let vars = if env.pg.is_some() {
        env.vars()
    } else {
        Vec::new()
    };
    let mut child = Command::new(BIN)
        .current_dir(dir.path())
        .env_remove("AAC_DB")
        .envs(vars.clone())
        .env("AAC_LOG", "warn")
        .args(["serve", "--demo", "--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut token = None;
    let url = loop {
        let line = lines.next().expect("a line").unwrap();
        if line.trim().starts_with("aac_") {
            token = Some(line.trim().to_owned());
        }
        if let Some(url) = line.strip_prefix("aacworkflow: serving MCP on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let server = HttpServer { child, url };
    assert_eq!(
        dir.path().join("aacworkflow.db").exists(),
        env.pg.is_none(),
        "the default file is made on SQLite only"
    );
    let token = token.expect("the demo token is printed on stderr");
    let client = server.connect(&token).await;
    let page = ok(&client, "list_issues", json!({})).await;
    assert_eq!(page["issues"].as_array().unwrap().len(), 5);
    client.cancel().await.unwrap();
    drop(server);

    // Over stdio, `serve --demo` without AAC_TOKEN uses the token it printed.
    let mut command = tokio::process::Command::new(BIN);
    command
        .current_dir(dir.path())
        .args(["serve", "--demo"])
        .env_remove("AAC_DB")
        .envs(vars)
        .env_remove("AAC_TOKEN")
        .env("AAC_LOG", "warn");
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = client_config().serve(transport).await.unwrap();
    let issue = ok(&client, "get_issue", json!({"issue_id": "AAC-1"})).await;
    assert_eq!(issue["key"], "AAC-1");
    client.cancel().await.unwrap();
    // On SQLite, `env.db` is that default file in the working directory.
    assert_eq!(env.issues(), 6, "seeding twice added nothing");
}

/// The `{"error", "reason", "status"}` object of an MCP error result: its one text
/// content, parsed. An error result carries no `structuredContent` (clients may check it
/// against the tool's output schema).
fn error_body(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// Every tool that changes data, with arguments that would succeed for an admin.
fn every_write_call() -> [(&'static str, Value); 6] {
    [
        ("create_issue", json!({"title": "Written by a viewer"})),
        (
            "update_issue",
            json!({"issue_id": "AAC-1", "status": "closed"}),
        ),
        (
            "comment_issue",
            json!({"issue_id": "AAC-1", "body": "a viewer's comment"}),
        ),
        (
            "assign_issue_to_agent",
            json!({"issue_id": "AAC-1", "agent": "autopilot"}),
        ),
        ("trigger_autopilot", json!({"issue_id": "AAC-2"})),
        (
            "delete_issue",
            json!({"issue_id": "AAC-1", "confirm": true}),
        ),
    ]
}

/// A viewer holding every scope: every write tool answers 403 `forbidden` (over stdio and
/// Streamable HTTP, against the real binary), nothing changes, reads still work, and each
/// refusal has its record.
#[tokio::test]
async fn a_viewer_is_read_only_whatever_scopes_the_token_holds() {
    let env = Env::new();
    let alice = env.token("demo", "alice", "all");
    let carol = env.token("demo", "carol", "all");
    let admin = env.stdio(&alice, &[]).await;
    let before = ok(&admin, "list_issues", json!({"limit": 100})).await;
    let stdio = env.stdio(&carol, &[]).await;
    let server = env.http(&[]);
    let http = server.connect(&carol).await;
    for viewer in [&stdio, &http] {
        for (tool, args) in every_write_call() {
            let body = refused(viewer, tool, args, 403, "forbidden").await;
            let message = body["error"].as_str().unwrap();
            assert!(
                message.contains("`viewer`") && message.contains("read-only"),
                "{tool}: {message}"
            );
        }
        let issue = ok(viewer, "get_issue", json!({"issue_id": "AAC-1"})).await;
        assert_eq!(issue["status"], "open", "the viewer closed nothing");
    }
    let after = ok(&admin, "list_issues", json!({"limit": 100})).await;
    assert_eq!(before, after, "a viewer changed the issues");
    let comments = ok(&admin, "list_comments", json!({"issue_id": "AAC-1"})).await;
    assert!(
        comments["comments"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["author"] != "carol"),
        "{comments}"
    );

    let refusals = env.audit(&["--principal", "carol", "--outcome", "denied"]);
    assert_eq!(
        refusals.len(),
        12,
        "one record per refused call: {refusals:?}"
    );
    for (record, (tool, _)) in refusals.iter().zip(every_write_call().iter().cycle()) {
        assert_eq!(record["tool"], *tool);
        assert_eq!(record["reason"], "forbidden");
        assert_eq!(record["status"], 403);
        assert_eq!(record["check"], "handler");
    }
    for client in [admin, stdio, http] {
        let _ = client.cancel().await;
    }
}

/// `trigger_autopilot` has `rate = "30/min"`: the 31st call of one user within the minute
/// is a tool error 429 `rate_limited` over stdio, recorded; another user's calls and the
/// same user's other tools go on.
#[tokio::test]
async fn a_tools_own_rate_limits_each_user_over_stdio() {
    let env = Env::new();
    let alice = env.token("demo", "alice", "all");
    let bob = env.token("demo", "bob", "all");
    let admin = env.stdio(&alice, &[]).await;
    let member = env.stdio(&bob, &[]).await;
    ok(
        &admin,
        "assign_issue_to_agent",
        json!({"issue_id": "AAC-1", "agent": "autopilot"}),
    )
    .await;
    for _ in 0..30 {
        ok(&admin, "trigger_autopilot", json!({"issue_id": "AAC-1"})).await;
    }
    let body = refused(
        &admin,
        "trigger_autopilot",
        json!({"issue_id": "AAC-1"}),
        429,
        "rate_limited",
    )
    .await;
    assert!(
        body["error"].as_str().unwrap().contains("retry in"),
        "{body}"
    );
    ok(&member, "trigger_autopilot", json!({"issue_id": "AAC-1"})).await;
    ok(&admin, "get_issue", json!({"issue_id": "AAC-1"})).await;

    let limited = env.audit(&["--reason", "rate_limited"]);
    assert_eq!(limited.len(), 1, "{limited:?}");
    assert_eq!(limited[0]["tool"], "trigger_autopilot");
    assert_eq!(limited[0]["principal"], "alice");
    assert_eq!(limited[0]["check"], "rate_limit");
    assert_eq!(limited[0]["status"], 429);
    assert_eq!(limited[0]["outcome"], "denied");
    let runs = env.audit(&["--tool", "trigger_autopilot", "--outcome", "success"]);
    assert_eq!(runs.len(), 31, "30 of alice's and bob's one");
    for client in [admin, member] {
        let _ = client.cancel().await;
    }
}

/// `serve --rate-limit 2/h`: past two calls, every call of that user is refused 429; the
/// first refusal is recorded as any refusal, the rest are counted and their count is
/// recorded when the session ends. A rate that does not read is refused at start.
#[tokio::test]
async fn serve_rate_limit_bounds_each_user_and_counts_the_flood() {
    let env = Env::new();
    let alice = env.token("demo", "alice", "all");
    let admin = env.stdio(&alice, &["--rate-limit", "2/h"]).await;
    ok(&admin, "get_issue", json!({"issue_id": "AAC-1"})).await;
    ok(&admin, "list_issues", json!({})).await;
    for _ in 0..6 {
        refused(
            &admin,
            "get_issue",
            json!({"issue_id": "AAC-1"}),
            429,
            "rate_limited",
        )
        .await;
    }
    let _ = admin.cancel().await;
    // The session's end records the count (a guard against a hang, not a timing check).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let limited = loop {
        let limited = env.audit(&["--reason", "rate_limited"]);
        if limited.len() >= 2 || std::time::Instant::now() > deadline {
            break limited;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(limited.len(), 2, "{limited:?}");
    assert_eq!(
        (&limited[0]["tool"], &limited[0]["principal"]),
        (&json!("get_issue"), &json!("alice"))
    );
    assert_eq!(
        (
            &limited[1]["tool"],
            &limited[1]["principal"],
            &limited[1]["arguments"]["suppressed"]
        ),
        (&json!("(rate limited)"), &json!("alice"), &json!(5))
    );

    let out = env
        .command()
        .args(["serve", "--rate-limit", "0/s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`0/s` is not a rate"), "{stderr}");
}

/// Reads refused past `serve --rate-limit` are counted as reads, not as tool calls: the
/// count's record has kind `resource` (`audit --kind resource` finds it), and
/// `dashboard_usage_daily`, which counts tool calls, shows none of them.
#[tokio::test]
async fn rate_limited_reads_are_counted_as_reads_not_tool_calls() {
    let env = Env::new();
    let alice = env.token("demo", "alice", "all");
    let reader = env.stdio(&alice, &["--rate-limit", "2/h"]).await;
    for _ in 0..6 {
        let params = rmcp::model::ReadResourceRequestParams::new("aacworkflow://issues/AAC-1");
        let _ = reader.peer().read_resource(params).await;
    }
    let _ = reader.cancel().await;
    // The session's end records the count (a guard against a hang, not a timing check).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let limited = loop {
        let limited = env.audit(&["--reason", "rate_limited", "--kind", "resource"]);
        if limited.len() >= 2 || std::time::Instant::now() > deadline {
            break limited;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(limited.len(), 2, "{limited:?}");
    assert_eq!(limited[1]["arguments"]["suppressed"], 3, "{limited:?}");
    assert!(
        env.audit(&["--reason", "rate_limited", "--kind", "tool"])
            .is_empty()
    );
    let admin = env.stdio(&alice, &[]).await;
    let usage = ok(&admin, "dashboard_usage_daily", json!({"days": 1})).await;
    assert_eq!(usage["total_calls"], 0, "{usage}");
    let _ = admin.cancel().await;
}

/// `serve --http` under the shell `ulimit` `limit`: the child once it listens, and its
/// stderr lines as they come (the log's from a thread of its own: before or after the
/// address line).
fn serve_under_ulimit(
    env: &Env,
    limit: &str,
    extra: &str,
) -> (Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit {limit} && exec {BIN} serve --http 127.0.0.1:0 {extra}"
        ))
        .current_dir(env.dir.path())
        .envs(env.vars())
        .env_remove("AAC_TOKEN")
        .env("AAC_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (send, said) = std::sync::mpsc::channel();
    let (listening, listens) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.starts_with("aacworkflow: serving MCP on ") {
                let _ = listening.send(());
            }
            let _ = send.send(line);
        }
    });
    listens
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the address line");
    (child, said)
}

/// The open-file limit of process `pid`: (soft, hard).
fn open_file_limit(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_owned();
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].to_owned(), fields[4].to_owned())
}

/// Idle connections past the open-file limit made `accept` fail for everyone (a soft
/// limit of 1024 is common): `serve --http` raises its soft limit to the hard one, and
/// keeps its connection cap (`--max-connections`, 8192) within what the limit leaves, so
/// that past it new connections are closed at once while the open ones are served.
#[test]
fn serve_raises_its_open_file_limit_and_caps_connections_within_it() {
    let env = Env::new();
    let (mut child, _said) = serve_under_ulimit(&env, "-Sn 512", "");
    let (soft, hard) = open_file_limit(child.id());
    assert_eq!(soft, hard, "the soft limit is raised to the hard one");
    assert_ne!(soft, "512");
    let _ = child.kill();
    let _ = child.wait();

    // A hard limit of 300: 225 connections at most, said once.
    let (mut child, said) = serve_under_ulimit(&env, "-n 300", "--max-connections 5000");
    let mut seen = Vec::new();
    let capped = loop {
        match said.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(line) if line.contains("capped") => break line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no warning of the cap: {seen:?}"),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(capped.contains("max_connections=225"), "{capped}");
    assert!(capped.contains("open_file_limit=300"), "{capped}");
}
