//! Shared by the integration tests: a temporary database with tokens, the test server
//! in process on a free loopback port, the test server as a child process (killed on
//! drop), and small HTTP helpers.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use aac_tools::audit::MemorySink;
use aac_tools::http::HttpOptions;
use aac_tools::sqlite::{Database, TokenStore};
use interop_tests::{Options, build_server, open_database};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A temporary database with two tokens: `alice` with every scope, `bob` read-only.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub db: Database,
    pub db_path: PathBuf,
    pub audit_path: PathBuf,
    pub full: String,
    pub reader: String,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db_path = dir.path().join("notes.db");
        let audit_path = dir.path().join("audit.jsonl");
        let db = open_database(&db_path).expect("the database opens");
        let store = TokenStore::open(&db).expect("the token store opens");
        let full = store
            .create("alice", Some("interop"), interop_tests::ALL_SCOPES, None)
            .expect("a token")
            .token;
        let reader = store
            .create("bob", Some("interop"), &["notes:read"], None)
            .expect("a token")
            .token;
        Fixture {
            dir,
            db,
            db_path,
            audit_path,
            full,
            reader,
        }
    }
}

/// The test server, in process, on a free loopback port. Stops on drop.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub sink: MemorySink,
    pub fixture: Fixture,
    /// The server it serves (to announce resource updates).
    #[allow(dead_code)]
    pub server: aac_tools::Server,
    shutdown: CancellationToken,
    serving: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(options: HttpOptions, server_options: Options) -> TestServer {
        let fixture = Fixture::new();
        let sink = MemorySink::new();
        let server =
            build_server(&fixture.db, sink.clone(), server_options).expect("the server builds");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let base = format!("http://{}", listener.local_addr().expect("an address"));
        let shutdown = CancellationToken::new();
        let options = options.shutdown(shutdown.clone());
        let served = server.clone();
        let serving = tokio::spawn(async move {
            aac_tools::http::serve(served, listener, options)
                .await
                .expect("the server serves");
        });
        TestServer {
            base,
            sink,
            fixture,
            server,
            shutdown,
            serving: Some(serving),
        }
    }

    /// Stop the server and wait until `serve` has returned.
    #[allow(dead_code)]
    pub async fn stop(mut self) -> TestServer {
        self.shutdown.cancel();
        if let Some(serving) = self.serving.take() {
            serving.await.expect("serve returns");
        }
        self
    }

    pub fn mcp(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The names of the tools `GET /tools` lists for `token`.
    pub async fn manifest_names(&self, token: &str) -> Vec<String> {
        let manifest: Value = reqwest::Client::new()
            .get(format!("{}/tools", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        tool_names(&manifest["tools"])
    }
}

/// The `name` of each tool in a JSON array of tools (a manifest's or `tools/list`'s).
pub fn tool_names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .expect("an array of tools")
        .iter()
        .map(|t| t["name"].as_str().expect("a tool name").to_owned())
        .collect()
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A child process, killed and reaped on drop.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `interop-server` binary of this package.
pub fn server_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_interop-server"))
}

/// Start `interop-server … http 127.0.0.1:0` and return it with its `/mcp` URL.
pub fn spawn_http_server(fixture: &Fixture) -> (ChildGuard, String) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(server_bin())
        .arg("--db")
        .arg(&fixture.db_path)
        .arg("--audit")
        .arg(&fixture.audit_path)
        .args(["http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("interop-server starts");
    let stdout = child.stdout.take().expect("a stdout pipe");
    let guard = ChildGuard(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("interop-server prints its address");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from interop-server: {line:?}"))
        .to_owned();
    (guard, url)
}

/// The audit records of a JSON-lines file.
pub fn read_audit(path: &std::path::Path) -> Vec<aac_tools::audit::AuditRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("an audit record"))
        .collect()
}

/// The JSON-RPC messages of a Streamable HTTP response body (SSE or JSON).
pub fn messages(body: &str) -> Vec<Value> {
    if body.trim_start().starts_with('{') {
        return vec![serde_json::from_str(body).expect("a JSON body")];
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .filter(|data| !data.is_empty())
        .map(|data| serde_json::from_str(data).expect("a JSON-RPC message"))
        .collect()
}

/// A minimal MCP client over raw HTTP.
pub struct RawMcp {
    pub http: reqwest::Client,
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
}

impl RawMcp {
    pub fn new(url: &str, token: Option<&str>) -> RawMcp {
        RawMcp {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            token: token.map(str::to_owned),
            session: None,
        }
    }

    pub fn post(&self) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        request
    }

    /// POST a body; the status and the JSON-RPC messages of the answer.
    pub async fn send(&self, body: impl Into<String>) -> (u16, Vec<Value>) {
        let response = self
            .post()
            .body(body.into())
            .send()
            .await
            .expect("a response");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        let messages = if (200..300).contains(&status) && !text.is_empty() {
            messages(&text)
        } else {
            Vec::new()
        };
        (status, messages)
    }

    /// initialize + notifications/initialized; remembers the session.
    pub async fn initialize(&mut self) -> Value {
        self.initialize_with(serde_json::json!({})).await
    }

    /// [`RawMcp::initialize`], declaring the client's `capabilities`.
    pub async fn initialize_with(&mut self, capabilities: Value) -> Value {
        let response = self
            .post()
            .body(
                serde_json::json!({
                    "jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": capabilities,
                        "clientInfo": {"name": "raw", "version": "1"},
                    },
                })
                .to_string(),
            )
            .send()
            .await
            .expect("a response");
        assert_eq!(response.status().as_u16(), 200, "initialize");
        self.session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().expect("ascii").to_owned());
        let text = response.text().await.expect("a body");
        let result = messages(&text).pop().expect("the initialize result");
        let (status, _) = self
            .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        assert_eq!(status, 202, "notifications/initialized");
        result
    }

    /// tools/call; the final JSON-RPC message (the response).
    pub async fn call(&self, id: i64, tool: &str, arguments: Value) -> (u16, Option<Value>) {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        });
        let (status, mut messages) = self.send(body.to_string()).await;
        (status, messages.pop())
    }
}

/// Run `command` to the end, reading its stdout and stderr as it goes (a report larger
/// than a pipe buffer cannot block it); a panic naming `what` if it runs longer than
/// `limit` (a guard against a hung client, not a timing assertion).
pub fn run_to_end(
    mut command: Command,
    what: &str,
    limit: std::time::Duration,
) -> (std::process::ExitStatus, String, String) {
    use std::io::Read;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
    let mut stdout = child.stdout.take().expect("a stdout pipe");
    let mut stderr = child.stderr.take().expect("a stderr pipe");
    let mut child = ChildGuard(child);
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("the child runs") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} hung (more than {limit:?})"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (
        status,
        out.join().expect("stdout read"),
        err.join().expect("stderr read"),
    )
}

/// The reference server `aacworkflow` (examples/aacworkflow) on a temporary database
/// with the demo data, and a token for `alice@demo` with every scope.
///
/// Its binary is `AAC_INTEROP_AACWORKFLOW`, else `aacworkflow` in the target dir of this
/// test (`target/debug/aacworkflow`: `cargo build -p aacworkflow`, or the `cargo test
/// --workspace` that `scripts/test` runs first, builds it).
pub struct AacWorkflow {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub db_path: PathBuf,
    pub token: String,
}

impl AacWorkflow {
    pub fn new() -> AacWorkflow {
        let bin = match std::env::var_os("AAC_INTEROP_AACWORKFLOW") {
            Some(bin) => PathBuf::from(bin),
            // beside this test binary's `deps/`: the same target dir and profile
            None => std::env::current_exe()
                .expect("the test binary")
                .parent()
                .and_then(|deps| deps.parent())
                .expect("the target dir")
                .join("aacworkflow"),
        };
        assert!(
            bin.is_file(),
            "the reference server is missing at `{}`: run `cargo build -p aacworkflow` \
             (the `cargo test --workspace` of scripts/test does), or point AAC_INTEROP_AACWORKFLOW at its binary",
            bin.display()
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db_path = dir.path().join("aacworkflow.db");
        let run = |args: &[&str]| {
            let output = Command::new(&bin)
                .args(args)
                .env("AAC_DB", &db_path)
                .env_remove("AAC_TOKEN")
                .output()
                .expect("aacworkflow runs");
            assert!(
                output.status.success(),
                "aacworkflow {args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8(output.stdout).expect("UTF-8")
        };
        run(&["init", "--demo"]);
        let token = run(&[
            "token",
            "create",
            "--workspace",
            "demo",
            "--user",
            "alice",
            "--scopes",
            "all",
        ])
        .trim()
        .to_owned();
        assert!(token.starts_with("aac_"), "not a token: {token:?}");
        AacWorkflow {
            dir,
            bin,
            db_path,
            token,
        }
    }

    /// Its audit trail (`aacworkflow audit --json`), oldest first, after checking the hash
    /// chain (`aacworkflow audit --verify`).
    pub fn audit(&self) -> Vec<Value> {
        let run = |args: &[&str]| {
            let output = Command::new(&self.bin)
                .args(args)
                .env("AAC_DB", &self.db_path)
                .output()
                .expect("aacworkflow runs");
            assert!(
                output.status.success(),
                "aacworkflow {args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8(output.stdout).expect("UTF-8")
        };
        run(&["audit", "--verify"]);
        run(&["audit", "--json"])
            .lines()
            .map(|line| serde_json::from_str(line).expect("an audit record"))
            .collect()
    }

    /// Start `aacworkflow serve --http 127.0.0.1:0`; the child and its `/mcp` URL.
    pub fn spawn_http(&self) -> (ChildGuard, String) {
        self.spawn_http_with(&[])
    }

    /// [`AacWorkflow::spawn_http`] with more arguments of `serve`.
    pub fn spawn_http_with(&self, extra: &[&str]) -> (ChildGuard, String) {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(&self.bin)
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(extra)
            .env("AAC_DB", &self.db_path)
            .env_remove("AAC_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("aacworkflow starts");
        let stderr = child.stderr.take().expect("a stderr pipe");
        let guard = ChildGuard(child);
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                panic!("aacworkflow ended before it printed its address:\n{seen:#?}");
            };
            if let Some(url) = line.split("serving MCP on ").nth(1) {
                break url.trim().to_owned();
            }
            seen.push(line);
        };
        // Keep draining its log, so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        (guard, url)
    }
}

/// POST one JSON-RPC message to `url` without a token or session; the HTTP status.
pub fn post_json_status(url: &str, body: &Value) -> u16 {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(async {
            reqwest::Client::new()
                .post(url)
                .header("accept", "application/json, text/event-stream")
                .json(body)
                .send()
                .await
                .expect("the server answers")
                .status()
                .as_u16()
        })
}
