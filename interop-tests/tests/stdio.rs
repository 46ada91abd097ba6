//! MCP over stdio with a real child process: the token comes from `AAC_TOKEN` and is
//! verified on every call, so revoking it takes effect within the session.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use aac_tools::sqlite::TokenStore;
use common::{ChildGuard, Fixture, read_audit, server_bin};
use serde_json::{Value, json};

struct StdioServer {
    _child: ChildGuard,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl StdioServer {
    fn start(fixture: &Fixture, token: Option<&str>) -> StdioServer {
        let mut command = Command::new(server_bin());
        command
            .arg("--db")
            .arg(&fixture.db_path)
            .arg("--audit")
            .arg(&fixture.audit_path)
            .arg("stdio")
            .env_remove("AAC_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(token) = token {
            command.env("AAC_TOKEN", token);
        }
        let mut child = command.spawn().expect("interop-server starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        StdioServer {
            _child: ChildGuard(child),
            stdin,
            stdout,
        }
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The response to request `id` (notifications before it are skipped).
    fn response(&mut self, id: i64) -> Value {
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "the server closed stdout"
            );
            let message: Value = serde_json::from_str(&line).expect("one JSON message per line");
            if message["id"] == id {
                return message;
            }
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(id)
    }

    fn initialize(&mut self) -> Value {
        self.initialize_with("2025-06-18")
    }

    fn initialize_with(&mut self, version: &str) -> Value {
        let init = self.request(
            0,
            "initialize",
            json!({
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            }),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init
    }

    fn call(&mut self, id: i64, tool: &str, arguments: Value) -> Value {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        )["result"]
            .clone()
    }
}

#[test]
fn the_stdio_token_is_verified_on_every_call() {
    let fixture = Fixture::new();
    let mut server = StdioServer::start(&fixture, Some(&fixture.full));
    let init = server.initialize();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(init["result"]["serverInfo"]["name"], "aac-interop");

    let listed = server.request(1, "tools/list", json!({}));
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 6);
    let added = server.call(2, "add_note", json!({"text": "over stdio"}));
    assert_eq!(added["isError"], false);
    assert_eq!(added["structuredContent"], json!({"id": 1}));

    // revoke the token while the session is open: the next call is refused
    let store = TokenStore::open(&fixture.db).unwrap();
    assert!(store.revoke(&fixture.full).unwrap());
    let refused = server.call(3, "list_notes", json!({}));
    assert_eq!(refused["isError"], true);
    assert_eq!(error_body(&refused)["reason"], "invalid_token");
    assert_eq!(error_body(&refused)["status"], 401);

    // bad input on stdio: a JSON-RPC error, and the server goes on serving
    server.send(json!({"jsonrpc": "2.0", "id": 4, "method": "no/such/method"}));
    assert_eq!(server.response(4)["error"]["code"], -32601);
    let pong = server.request(5, "ping", json!({}));
    assert_eq!(pong["result"], json!({}));

    drop(server);
    let records = read_audit(&fixture.audit_path);
    let got: Vec<(&str, Option<&str>, &str)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.reason.as_deref(), r.transport.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("add_note", None, "stdio"),
            ("list_notes", Some("invalid_token"), "stdio"),
        ]
    );
    assert_eq!(records[0].request_id.as_deref(), Some("2"));
}

#[test]
fn cancellation_reaches_the_tool() {
    let fixture = Fixture::new();
    let mut server = StdioServer::start(&fixture, Some(&fixture.full));
    server.initialize();
    server.send(json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "wait_for_cancellation", "arguments": {}},
    }));
    server.send(json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "the user gave up"},
    }));
    // The cancelled call gets no answer; its audit record says the tool saw the
    // cancellation. (A guard against a broken server, not a timing assertion.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let record = loop {
        if let Some(record) = read_audit(&fixture.audit_path).pop() {
            break record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no audit record for the cancelled call"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(record.tool, "wait_for_cancellation");
    assert_eq!(record.reason.as_deref(), Some("cancelled"));
    assert_eq!(record.request_id.as_deref(), Some("1"));
    // and the server goes on serving
    assert_eq!(server.request(2, "ping", json!({}))["result"], json!({}));
}

#[test]
fn without_a_token_stdio_calls_are_refused() {
    let fixture = Fixture::new();
    let mut server = StdioServer::start(&fixture, None);
    server.initialize();
    let refused = server.call(1, "list_notes", json!({}));
    assert_eq!(refused["isError"], true);
    assert_eq!(error_body(&refused)["reason"], "missing_token");
}

#[test]
fn every_handshake_protocol_version_is_accepted() {
    let fixture = Fixture::new();
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut server = StdioServer::start(&fixture, Some(&fixture.full));
        let init = server.initialize_with(version);
        assert_eq!(init["result"]["protocolVersion"], version);
        let listed = server.request(1, "tools/list", json!({}));
        assert_eq!(
            listed["result"]["tools"].as_array().unwrap().len(),
            6,
            "{version}"
        );
        let called = server.call(2, "list_notes", json!({}));
        assert_eq!(called["isError"], false, "{version}");
    }
}

/// The `{"error", "reason", "status"}` object of an MCP error result: its one text
/// content, parsed. An error result carries no `structuredContent` (clients may check it
/// against the tool's output schema).
fn error_body(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}
