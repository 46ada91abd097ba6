//! The stdio framing (`serve_io`): one JSON-RPC message per line, whatever the pipe does.
//! A repeated `tools/list` is answered with the bytes of the first answer, so these tests
//! check that those answers are the first one exactly, under the request's own id, that
//! no two lines ever mix (on a pipe small enough for every write to be partial), that a
//! list whose answer could differ is never replayed, and that the framing treats odd
//! lines as rmcp's own transport does.

#![cfg(feature = "mcp")]

use aac_tools::audit::{CallKind, Check, MemorySink, Outcome};
use aac_tools::{Principal, Registry, Server, StaticTokens, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

mod framed {
    use super::*;

    #[derive(Deserialize, JsonSchema)]
    pub(crate) struct Echo {
        /// What to say back.
        pub(crate) text: String,
    }

    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Said {
        pub(crate) text: String,
    }

    /// Says the text back.
    #[mcp_tool(read_only, idempotent, scope = "echo:read")]
    pub(crate) async fn echo_text(args: Echo) -> Result<Said, ToolError> {
        Ok(Said { text: args.text })
    }

    /// Forgets a text.
    #[mcp_tool(destructive, scope = "echo:delete")]
    pub(crate) async fn forget_text(args: Echo) -> Result<Said, ToolError> {
        Ok(Said { text: args.text })
    }
}

mod held {
    use super::*;
    use framed::{Echo, Said};

    /// How many `held_text` calls have started.
    pub(crate) static HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    /// Until set, `held_text` calls wait.
    pub(crate) static RELEASED: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// Says the text back once released.
    #[mcp_tool(read_only, idempotent, scope = "echo:read")]
    pub(crate) async fn held_text(args: Echo) -> Result<Said, ToolError> {
        HELD.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        while !RELEASED.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Ok(Said { text: args.text })
    }
}

mod stuck {
    use super::*;
    use framed::{Echo, Said};

    /// Until set, `stuck_text` calls wait (apart from `held`'s, which another test sets).
    pub(crate) static RELEASED: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// Says the text back once released.
    #[mcp_tool(read_only, idempotent, scope = "echo:read")]
    pub(crate) async fn stuck_text(args: Echo) -> Result<Said, ToolError> {
        while !RELEASED.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Ok(Said { text: args.text })
    }
}

mod parked {
    use super::*;
    use framed::{Echo, Said};

    /// Until set, `parked_text` calls wait (the gate of the tests holding [`GATE`]).
    pub(crate) static RELEASED: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);
    /// Held by a test while it uses the gate.
    pub(crate) static GATE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// Says the text back once released.
    #[mcp_tool(read_only, idempotent, scope = "echo:read")]
    pub(crate) async fn parked_text(args: Echo) -> Result<Said, ToolError> {
        while !RELEASED.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Ok(Said { text: args.text })
    }
}

mod gated {
    use super::*;
    use framed::{Echo, Said};

    /// How many `gated_text` calls have started.
    pub(crate) static STARTED: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);
    /// Until set, `gated_text` calls wait (one test's own gate).
    pub(crate) static OPEN: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// Says the text back once the gate opens; a cancellation does not stop it.
    #[mcp_tool(read_only, idempotent, scope = "echo:read")]
    pub(crate) async fn gated_text(args: Echo) -> Result<Said, ToolError> {
        STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        while !OPEN.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Ok(Said { text: args.text })
    }
}

fn server(filter_by_scope: bool) -> Server {
    builder(filter_by_scope).audit_disabled().build().unwrap()
}

fn builder(filter_by_scope: bool) -> aac_tools::ServerBuilder {
    let registry = Registry::collect_module(&format!("{}::framed", module_path!())).unwrap();
    Server::builder(registry)
        .verifier(
            StaticTokens::new()
                .with("all", Principal::new("all", ["echo:read", "echo:delete"]))
                .with("reader", Principal::new("reader", ["echo:read"])),
        )
        .filter_list_by_scope(filter_by_scope)
}

type Lines = tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>;

/// The next line the server writes, which must be one JSON-RPC message.
async fn next_message(lines: &mut Lines, secs: u64) -> Value {
    let line = tokio::time::timeout(std::time::Duration::from_secs(secs), lines.next_line())
        .await
        .expect("an answer in time")
        .unwrap()
        .expect("an answer");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON message ({e}): {line}"))
}

/// A raw client over an in-memory pipe of `capacity` bytes.
struct Raw {
    lines: Lines,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
}

impl Raw {
    async fn start(server: Server, token: &str, capacity: usize) -> Raw {
        let mut raw = Raw::connect(server, token, capacity);
        raw.initialize().await;
        raw
    }

    /// Connected, not initialized.
    fn connect(server: Server, token: &str, capacity: usize) -> Raw {
        let (client, server_end) = tokio::io::duplex(capacity);
        let (read, write) = tokio::io::split(server_end);
        let token = token.to_owned();
        tokio::spawn(async move {
            let _ = aac_tools::mcp::serve_io(server, Some(token), read, write).await;
        });
        let (read, write) = tokio::io::split(client);
        Raw {
            lines: BufReader::new(read).lines(),
            write,
        }
    }

    async fn initialize(&mut self) {
        let raw = self;
        raw.line(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string(),
        )
        .await;
        let answer = raw.next().await;
        assert_eq!(answer["id"], 0, "{answer}");
        raw.line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
    }

    async fn line(&mut self, line: &str) {
        self.write.write_all(line.as_bytes()).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
    }

    /// The next line the server writes, which must be one JSON-RPC message.
    async fn next(&mut self) -> Value {
        next_message(&mut self.lines, 20).await
    }

    /// Send `line` (a request) until it is not refused for an id still in flight (the
    /// call that had it ends an instant after its record is written): its answer, and how
    /// many times it was refused. Answers under other ids are passed over.
    async fn until_free(&mut self, line: &str) -> (Value, usize) {
        let id = serde_json::from_str::<Value>(line).unwrap()["id"].clone();
        for refused in 0..100 {
            self.line(line).await;
            let answer = loop {
                let answer = self.next().await;
                if answer["id"] == id {
                    break answer;
                }
            };
            if answer["error"]["code"] != -32600 {
                return (answer, refused);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the id stayed in flight: {line}")
    }

    async fn list(&mut self, id: Value, params: Option<Value>) -> Value {
        let mut request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"});
        if let Some(params) = params {
            request["params"] = params;
        }
        self.line(&request.to_string()).await;
        let answer = self.next().await;
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }
}

/// Every answer to a repeated plain `tools/list` is the first answer, under its own id
/// (numbers and strings, escapes included); a list with `_meta` is answered as rmcp
/// answers it, one with a cursor refused.
#[tokio::test]
async fn a_repeated_tools_list_is_the_first_answer_under_its_own_id() {
    let mut raw = Raw::start(server(false), "all", 1 << 20).await;
    let first = raw.list(json!(1), None).await;
    let names: Vec<&str> = first["result"]["tools"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo_text", "forget_text"], "{first}");
    for id in [
        json!(2),
        json!("two"),
        json!("a \"quoted\" id\n"),
        json!(-7),
    ] {
        for params in [None, Some(json!({}))] {
            let again = raw.list(id.clone(), params).await;
            assert_eq!(again["jsonrpc"], "2.0");
            assert_eq!(again["result"], first["result"], "{again}");
            assert_eq!(again.as_object().unwrap().len(), 3, "{again}");
        }
    }
    // Not plain: answered by rmcp, the same tools, each with its id.
    let with_meta = raw
        .list(json!(10), Some(json!({"_meta": {"progressToken": 5}})))
        .await;
    assert_eq!(with_meta["result"]["tools"], first["result"]["tools"]);
    // The server has one page and issues no cursor: one is refused as the specification's
    // pagination says (-32602), by every list, and the session goes on.
    for (id, method) in [
        (11, "tools/list"),
        (12, "resources/list"),
        (13, "resources/templates/list"),
        (14, "prompts/list"),
    ] {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method,
            "params": {"cursor": "x"}});
        raw.line(&request.to_string()).await;
        let refused = raw.next().await;
        assert_eq!(refused["id"], id, "{refused}");
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("invalid cursor")),
            "{refused}"
        );
    }
    let after = raw.list(json!(15), None).await;
    assert_eq!(after["result"], first["result"], "{after}");
}

/// Lists, calls and refusals sent all at once, on a pipe of 512 bytes (so that every
/// write of a 1 KB list is partial and the server's writes must wait for the reader):
/// every line that comes back is one whole message, every request is answered once.
#[tokio::test]
async fn pipelined_lists_and_calls_never_mix_on_a_small_pipe() {
    let mut raw = Raw::start(server(false), "all", 512).await;
    let first = raw.list(json!("first"), None).await;
    let mut expected = std::collections::HashMap::new();
    let mut batch = String::new();
    for n in 0..60u64 {
        let request = match n % 3 {
            0 => json!({"jsonrpc": "2.0", "id": n, "method": "tools/list"}),
            1 => json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                        "params": {"name": "echo_text", "arguments": {"text": format!("t{n}")}}}),
            _ => json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                        "params": {"name": "forget_text", "arguments": {"text": "x"}}}),
        };
        batch.push_str(&request.to_string());
        batch.push('\n');
        expected.insert(n, n % 3);
    }
    // Written by another task while this one reads: neither side can fill the pipe.
    let (mut lines, mut write) = (raw.lines, raw.write);
    let writer = tokio::spawn(async move {
        write.write_all(batch.as_bytes()).await.unwrap();
        write
    });
    for _ in 0..60 {
        let answer = next_message(&mut lines, 20).await;
        let id = answer["id"].as_u64().unwrap_or_else(|| panic!("{answer}"));
        let kind = expected.remove(&id).expect("each request answered once");
        match kind {
            0 => assert_eq!(answer["result"], first["result"], "{answer}"),
            1 => assert_eq!(
                answer["result"]["structuredContent"]["text"],
                format!("t{id}"),
                "{answer}"
            ),
            _ => {
                assert_eq!(answer["result"]["isError"], true, "{answer}");
                let text = answer["result"]["content"][0]["text"].as_str().unwrap();
                assert!(text.contains("confirm: true required"), "{answer}");
            }
        }
    }
    assert!(expected.is_empty());
    drop(writer.await.unwrap());
}

/// A server whose list depends on the caller answers each list for that caller; here
/// the reader's list lacks the destructive tool, every time.
#[tokio::test]
async fn a_list_filtered_by_scope_is_the_caller_s_every_time() {
    let mut reader = Raw::start(server(true), "reader", 1 << 20).await;
    for id in 1..4 {
        let list = reader.list(json!(id), None).await;
        let names: Vec<&str> = list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["echo_text"], "{list}");
    }
    let mut all = Raw::start(server(true), "all", 1 << 20).await;
    for id in 1..3 {
        let list = all.list(json!(id), None).await;
        assert_eq!(
            list["result"]["tools"].as_array().unwrap().len(),
            2,
            "{list}"
        );
    }
}

/// Odd lines, as rmcp's own transport treats them: not JSON is ignored, JSON that is no
/// message gets "Invalid request" (-32600), an unknown notification is ignored, a
/// byte-order mark and `\r\n` are accepted, and a line over 16 MiB is dropped, after
/// which the session goes on. The dropped line, which may have hidden a call, leaves one
/// record (413, check `protocol`); the others, which are no call, leave none.
#[tokio::test]
async fn odd_lines_are_ignored_refused_or_dropped_and_the_session_goes_on() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    raw.line("this is not json").await;
    raw.line("").await;
    raw.line(r#"{"jsonrpc":"2.0","method":"notifications/whatever","params":{}}"#)
        .await;
    raw.line(r#"{"jsonrpc":"2.0","id":5,"method":42}"#).await;
    let invalid = raw.next().await;
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    assert_eq!(invalid["id"], 5, "{invalid}");
    // A batch is answered as JSON-RPC answers one: an array, an error under each id.
    raw.line(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},7]"#)
        .await;
    let batch = raw.next().await;
    assert_eq!(batch[0]["id"], 1, "{batch}");
    assert_eq!(batch[0]["error"]["code"], -32600, "{batch}");
    assert!(batch[1]["id"].is_null() && batch[1]["error"]["code"] == -32600);
    // Every error answer has an `id` (JSON-RPC): `null` when the line has no valid one.
    let deep = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"ping"}},{}1{}]"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    for (line, id, code) in [
        // An empty batch is one invalid request.
        ("[]", json!(null), -32600),
        // A batch no reader parses whole: one parse error, rather than no answer.
        (deep.as_str(), json!(null), -32700),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},1e400]"#,
            json!(null),
            -32700,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            json!(null),
            -32600,
        ),
        (
            r#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#,
            json!("x"),
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"y","method":"tools/call","params":{"name":7}}"#,
            json!("y"),
            -32602,
        ),
        // A known method whose params are not of its shape: "Invalid params".
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":[]}"#,
            json!(9),
            -32602,
        ),
        // A key of the message repeated, an id past 64 bits signed: "Invalid request",
        // not "Invalid params".
        (
            r#"{"jsonrpc":"2.0","id":11,"method":"ping","method":"tools/list","params":{}}"#,
            json!(11),
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"tools/list","params":{}}"#,
            json!(18446744073709551615u64),
            -32600,
        ),
    ] {
        raw.line(line).await;
        let answer = raw.next().await;
        assert_eq!(answer["jsonrpc"], "2.0", "{line}: {answer}");
        assert_eq!(
            answer.get("id"),
            Some(&id),
            "{line}: the id is never left out: {answer}"
        );
        assert_eq!(answer["error"]["code"], code, "{line}: {answer}");
    }
    // A request that does not parse (nested past serde_json's 128 levels) is answered
    // "Parse error" under its id, not left waiting.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":10,"method":"ping","params":{{"x":{}1{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    raw.line(&deep).await;
    let parse_error = raw.next().await;
    assert!(
        parse_error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("recursion limit exceeded"),
        "the parser's own reason: {parse_error}"
    );
    assert_eq!(
        (
            parse_error["id"].clone(),
            parse_error["error"]["code"].clone()
        ),
        (json!(10), json!(-32700)),
        "{parse_error}"
    );
    raw.line("\u{feff}{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}\r")
        .await;
    let pong = raw.next().await;
    assert_eq!(
        (pong["id"].clone(), pong["result"].clone()),
        (json!(6), json!({}))
    );
    // 16 MiB and one byte of a string, then a newline.
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{{\"x\":\"{}\"}}}}",
        "a".repeat(16 * 1024 * 1024)
    );
    let (mut lines, mut write) = (raw.lines, raw.write);
    let writer = tokio::spawn(async move {
        write.write_all(huge.as_bytes()).await.unwrap();
        write.write_all(b"\n").await.unwrap();
        write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        write
    });
    // The oversized line is dropped unread, and answered under the id its start gives.
    let answer = next_message(&mut lines, 60).await;
    assert_eq!(
        (&answer["id"], &answer["error"]["code"]),
        (&json!(7), &json!(-32600)),
        "{answer}"
    );
    let answer = next_message(&mut lines, 60).await;
    assert_eq!(answer["id"], 8, "the session goes on: {answer}");
    drop(writer.await.unwrap());
    let records = sink.records();
    assert_eq!(records.len(), 2, "{records:?}");
    // The `tools/call` of the wrong shape, refused by rmcp.
    assert_eq!(records[0].request_id.as_deref(), Some("y"));
    assert_eq!(records[0].reason.as_deref(), Some("not_dispatched"));
    assert_eq!(records[1].tool, "(unknown)");
    assert_eq!(records[1].request_id.as_deref(), Some("7"));
    assert_eq!(records[1].status, 413);
    assert_eq!(records[1].reason.as_deref(), Some("body_too_large"));
    assert_eq!(records[1].check, Some(Check::Protocol));
    assert_eq!(records[1].principal.as_deref(), Some("all"));
}

/// A `tools/call` (or a resource read) in a line rmcp cannot read or dispatch (malformed
/// params, in a batch, without an id, not JSON at all) is refused before any tool runs,
/// and leaves exactly one record each (check `protocol`, `not_dispatched`, the
/// connection's principal); lines that are no call leave none.
#[tokio::test]
async fn every_tools_call_the_framing_cannot_read_is_recorded_once() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    // rmcp cannot read these params; they never reach a tool, and are answered "Invalid
    // params" with what is wrong.
    raw.line(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":7}}"#)
        .await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 5, "{refused}");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`params.name` must be a string"),
        "{refused}"
    );
    raw.line(r#"[{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"hi"}}}]"#)
        .await;
    let batch = raw.next().await;
    assert_eq!(
        (&batch[0]["id"], &batch[0]["error"]["code"]),
        (&json!(8), &json!(-32600))
    );
    // Never answered (no id), recorded all the same.
    raw.line(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"forget_text","arguments":{"text":"x"}}}"#)
        .await;
    raw.line("{tools/call").await;
    // A resource read rmcp cannot read: recorded as a read.
    raw.line(r#"{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":3}}"#)
        .await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 7);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    // A call behind a repeated `method` (a reader keeping the first key sees a call):
    // refused by rmcp, recorded as the call it may be.
    raw.line(r#"{"jsonrpc":"2.0","method":"tools/call","method":"ping","id":11,"params":{"name":"forget_text","arguments":{"text":"x"}}}"#)
        .await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 11, "{refused}");
    assert!(refused.get("error").is_some(), "{refused}");
    // Calls serde_json cannot read (a number out of range, text after the message): answered
    // "Parse error" under their id, recorded as the calls of the tools they name.
    raw.line(r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"forget_text","arguments":{"n":1e999}}}"#)
        .await;
    let refused = raw.next().await;
    assert_eq!(
        (&refused["id"], &refused["error"]["code"]),
        (&json!(13), &json!(-32700)),
        "{refused}"
    );
    raw.line(r#"{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"echo_text","arguments":{}}} ?"#)
        .await;
    assert_eq!(raw.next().await["id"], "q");
    // Two messages on one line, a destructive call behind a harmless one: each recorded,
    // and each answered under its own id.
    raw.line(r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"a"}}}{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"forget_text","arguments":{"text":"b"}}}"#)
        .await;
    for id in [14, 15] {
        let refused = raw.next().await;
        assert_eq!(
            (&refused["id"], &refused["error"]["code"]),
            (&json!(id), &json!(-32600)),
            "{refused}"
        );
    }
    // Not calls: nothing recorded.
    raw.line("not json").await;
    raw.line(r#"{"jsonrpc":"2.0","id":9,"method":42}"#).await;
    assert_eq!(raw.next().await["error"]["code"], -32600);
    raw.line(r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#)
        .await;
    assert_eq!(raw.next().await["id"], 10);
    let records = sink.records();
    let seen: Vec<(&str, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.request_id.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("(unknown)", Some("5")),
            ("echo_text", Some("8")),
            ("forget_text", None),
            ("(unknown)", None),
            ("(unknown)", Some("7")),
            ("forget_text", Some("11")),
            ("forget_text", Some("13")),
            ("echo_text", Some("q")),
            ("echo_text", Some("14")),
            ("forget_text", Some("15")),
        ],
        "{records:?}"
    );
    assert_eq!(records[4].kind, aac_tools::audit::CallKind::Resource);
    for record in &records {
        assert_eq!(record.outcome, Outcome::Denied, "{record:?}");
        assert_eq!(record.check, Some(Check::Protocol), "{record:?}");
        assert_eq!(
            record.reason.as_deref(),
            Some("not_dispatched"),
            "{record:?}"
        );
        assert_eq!(record.principal.as_deref(), Some("all"), "{record:?}");
        assert_eq!(record.transport, "stdio", "{record:?}");
    }
    // A good call after them still runs, and is recorded as itself.
    raw.line(r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"ok"}}}"#)
        .await;
    let answer = raw.next().await;
    assert_eq!(
        answer["result"]["structuredContent"]["text"], "ok",
        "{answer}"
    );
    let records = sink.records();
    assert_eq!(records.len(), 11);
    assert_eq!(records[10].outcome, Outcome::Success);
}

/// A call hidden after bytes no reader gets past (`{…} x {…}`, `{…},{…}`), or spelled
/// `tools\/call` in a line that is not JSON, is recorded all the same (an unknown tool):
/// a lenient reader on the way could take it for a call. Nothing runs.
#[tokio::test]
async fn a_call_hidden_behind_unreadable_bytes_or_escapes_is_recorded() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    let echo = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo_text","arguments":{{"text":"a"}}}}}}"#
        )
    };
    let forget = r#"{"jsonrpc":"2.0","id":99,"method":"tools\/call","params":{"name":"forget_text","arguments":{"text":"b","confirm":true}}}"#;
    let plain_forget = forget.replace(r"tools\/call", "tools/call");
    let cases = [
        (
            format!("{} x {plain_forget}", echo(1)),
            vec![("echo_text", Some("1")), ("(unknown)", None)],
        ),
        (
            format!("{},{forget}", echo(2)),
            vec![("echo_text", Some("2")), ("(unknown)", None)],
        ),
        (format!("xx{forget}"), vec![("(unknown)", None)]),
        (format!("[{forget},]"), vec![("(unknown)", None)]),
        (format!("/*c*/{forget}"), vec![("(unknown)", None)]),
        // As JSON5 reads strings, or in UTF-16.
        (
            forget.replace(r"tools\/call", r"\x74ools/call"),
            vec![("(unknown)", None)],
        ),
        (forget.replace('"', "'"), vec![("(unknown)", None)]),
        (
            String::from_utf8(
                plain_forget
                    .encode_utf16()
                    .flat_map(u16::to_le_bytes)
                    .collect(),
            )
            .unwrap(),
            vec![("(unknown)", None)],
        ),
    ];
    for (n, (line, expected)) in cases.into_iter().enumerate() {
        let before = sink.records().len();
        raw.line(&line).await;
        let ping = 1000 + n as u64;
        raw.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{ping},"method":"ping"}}"#
        ))
        .await;
        while raw.next().await["id"] != ping {}
        let records = sink.records();
        let seen: Vec<(&str, Option<&str>)> = records[before..]
            .iter()
            .map(|r| (r.tool.as_str(), r.request_id.as_deref()))
            .collect();
        assert_eq!(seen, expected, "{line}");
        assert!(
            records[before..]
                .iter()
                .all(|r| r.reason.as_deref() == Some("not_dispatched")),
            "{line}: {records:?}"
        );
    }
}

/// A read, prompt or completion in a line no reader parses (UTF-16, trailing junk, single
/// quotes) is recorded as what its bytes say, as a call is: nothing is read.
#[tokio::test]
async fn a_read_prompt_or_completion_no_reader_parses_is_recorded() {
    use aac_tools::audit::CallKind;
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    let mut n = 0;
    for (method, params, kind) in [
        (
            "resources/read",
            r#"{"uri":"notes://all"}"#,
            CallKind::Resource,
        ),
        ("prompts/get", r#"{"name":"review"}"#, CallKind::Prompt),
        (
            "completion/complete",
            r#"{"ref":{"type":"ref/prompt","name":"review"},"argument":{"name":"id","value":"1"}}"#,
            CallKind::Completion,
        ),
    ] {
        let message =
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{params}}}"#);
        let utf16 =
            String::from_utf8(message.encode_utf16().flat_map(u16::to_le_bytes).collect()).unwrap();
        for line in [utf16, format!("{message} x"), message.replace('"', "'")] {
            n += 1;
            let before = sink.records().len();
            raw.line(&line).await;
            let ping = 2000 + n;
            raw.line(&format!(
                r#"{{"jsonrpc":"2.0","id":{ping},"method":"ping"}}"#
            ))
            .await;
            while raw.next().await["id"] != ping {}
            let records = sink.records();
            let seen: Vec<(CallKind, Option<&str>)> = records[before..]
                .iter()
                .map(|r| (r.kind, r.reason.as_deref()))
                .collect();
            assert_eq!(seen, [(kind, Some("not_dispatched"))], "{line:?}");
        }
    }
}

/// A stdio connection whose token no longer verifies (revoked, say) is refused 401 on
/// every call; with a per-principal rate set, those refusals are recorded at that rate
/// and the rest counted in one record (`{"peer": "stdio", "suppressed": n}`) when the
/// session ends, as a token-less HTTP peer's are: revoking a hostile agent's token does
/// not let it grow the trail as fast as it can send. Without a rate, each is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_token_fails_is_recorded_at_the_principal_rate() {
    for rate in [
        Some(aac_tools::Rate::new(
            5,
            std::time::Duration::from_secs(3600),
        )),
        None,
    ] {
        let sink = MemorySink::new();
        let server = builder(false)
            .audit(sink.clone())
            .rate_limit_per_principal(rate)
            .build()
            .unwrap();
        let Raw { mut lines, write } = Raw::start(server, "revoked", 1 << 20).await;
        const CALLS: usize = 50;
        let writer = send_calls(write, "echo_text", CALLS);
        let mut statuses = std::collections::BTreeMap::new();
        for _ in 0..CALLS {
            let answer = next_message(&mut lines, 30).await;
            let text = answer["result"]["content"][0]["text"].as_str().unwrap();
            let body: Value = serde_json::from_str(text).unwrap();
            *statuses
                .entry(body["status"].as_u64().unwrap())
                .or_insert(0) += 1;
        }
        let mut write = writer.await.unwrap();
        write.shutdown().await.unwrap();
        // The session ends: what was counted is recorded.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let records = loop {
            let records = sink.records();
            if records.iter().any(|r| r.tool == "(rate limited)") || rate.is_none() {
                break records;
            }
            assert!(std::time::Instant::now() < deadline, "{records:?}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        let refused = records.iter().filter(|r| r.status == 401).count();
        match rate {
            Some(_) => {
                assert_eq!(statuses, [(401, 5), (429, 45)].into(), "{records:?}");
                assert_eq!(refused, 5, "{records:?}");
                let counted: Vec<_> = records
                    .iter()
                    .filter(|r| r.tool == "(rate limited)")
                    .map(|r| r.arguments.clone())
                    .collect();
                assert_eq!(counted, [json!({"peer": "stdio", "suppressed": 45})]);
            }
            None => {
                assert_eq!(statuses, [(401, CALLS as u64)].into());
                assert_eq!(refused, CALLS, "{records:?}");
            }
        }
    }
}

/// A line of calls goes through the connection's principal rate first, once, for every
/// record its refusal writes: within the rate every call is recorded and the line answered
/// with the protocol's errors; past it the line is answered with the rate's error under
/// each id, its first call recorded as that 429 when it is the first refusal past the rate,
/// the rest counted. So batches grow the trail no faster than the rate (one token a
/// record), and no call answered a protocol error is counted as a 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_of_calls_goes_through_the_principal_s_rate_first_and_whole() {
    let sink = MemorySink::new();
    let server = builder(false)
        .audit(sink.clone())
        .rate_limit_per_principal(Some(aac_tools::Rate::new(
            3,
            std::time::Duration::from_secs(3600),
        )))
        .build()
        .unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "echo_text", "arguments": {"text": "x"}}})
    };
    let batch = |first: u64, calls: u64| Value::Array((first..first + calls).map(call).collect());
    let codes = |answer: &Value| -> Vec<i64> {
        answer
            .as_array()
            .expect("an array answers a batch")
            .iter()
            .map(|a| a["error"]["code"].as_i64().unwrap())
            .collect()
    };
    // Two records of three tokens: the batch's protocol error.
    raw.line(&batch(1, 2).to_string()).await;
    assert_eq!(codes(&raw.next().await), [-32600, -32600]);
    // Two records of the one token left, then five: each past the rate, answered with its
    // error under each id.
    for (first, calls) in [(3, 2), (5, 5)] {
        raw.line(&batch(first, calls).to_string()).await;
        let answer = raw.next().await;
        assert_eq!(codes(&answer), vec![-32001; calls as usize], "{answer}");
        let error = &answer[0]["error"];
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .starts_with("too many requests; retry in"),
            "{answer}"
        );
        assert_eq!(error["data"]["status"], 429, "{answer}");
    }
    let seen = |records: &[aac_tools::audit::AuditRecord]| -> Vec<_> {
        records
            .iter()
            .map(|r| {
                (
                    r.request_id.clone(),
                    r.status,
                    r.arguments.get("suppressed").cloned(),
                )
            })
            .collect()
    };
    let expected = [
        (Some("1".to_owned()), 400, None),
        (Some("2".to_owned()), 400, None),
        (Some("3".to_owned()), 429, None),
    ];
    assert_eq!(seen(&sink.records()), expected, "{:#?}", sink.records());
    // Single calls the MCP layer cannot read (arguments that are no object): the token
    // left takes one, recorded (after the count of the six before it); the next two are
    // past the rate, answered with its error, the first recorded as that 429, the other
    // counted.
    let malformed = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "echo_text", "arguments": [1]}})
        .to_string()
    };
    for (id, past) in [(20, false), (21, true), (22, true)] {
        raw.line(&malformed(id)).await;
        let answer = raw.next().await;
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"] == -32001, past, "{answer}");
    }
    let records = sink.records();
    assert_eq!(
        seen(&records[3..]),
        [
            (None, 429, Some(json!(6))),
            (Some("20".to_owned()), 400, None),
            (Some("21".to_owned()), 429, None),
        ],
        "{records:#?}"
    );
    drop(raw);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sink.records().len() < 7 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:#?}",
            sink.records()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let records = sink.records();
    assert_eq!(
        seen(&records[6..]),
        [(None, 429, Some(json!(1)))],
        "{records:#?}"
    );
}

/// A well-formed call that rmcp itself refuses before any handler sees it (sent before
/// `initialize`, or naming a protocol version rmcp does not support) is recorded once,
/// before its answer is written, with what rmcp said; a call rmcp hands on is recorded
/// once, as itself.
#[tokio::test]
async fn a_call_rmcp_refuses_before_the_handler_is_recorded_once_before_its_answer() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::connect(server, "all", 1 << 20);
    raw.line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"forget_text","arguments":{"text":"early","confirm":true}}}"#)
        .await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 1, "{refused}");
    assert!(refused["error"]["code"].is_i64(), "{refused}");
    let records = sink.records();
    assert_eq!(records.len(), 1, "recorded before the answer: {records:?}");
    raw.initialize().await;
    let unsupported = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "echo_text", "arguments": {"text": "future"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}});
    raw.line(&unsupported.to_string()).await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 2, "{refused}");
    assert!(refused["error"]["code"].is_i64(), "{refused}");
    raw.line(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"ok"}}}"#)
        .await;
    let answer = raw.next().await;
    assert_eq!(
        answer["result"]["structuredContent"]["text"], "ok",
        "{answer}"
    );
    let records = sink.records();
    let seen: Vec<(&str, Option<&str>, Outcome)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.request_id.as_deref(), r.outcome))
        .collect();
    assert_eq!(
        seen,
        [
            ("forget_text", Some("1"), Outcome::Denied),
            ("echo_text", Some("2"), Outcome::Denied),
            ("echo_text", Some("3"), Outcome::Success),
        ],
        "{records:?}"
    );
    for record in &records[..2] {
        assert_eq!(record.check, Some(Check::Protocol), "{record:?}");
        assert_eq!(record.reason.as_deref(), Some("not_dispatched"));
        assert_eq!(record.principal.as_deref(), Some("all"), "{record:?}");
        assert_eq!(record.transport, "stdio");
    }
    assert!(
        records[0].arguments["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("sha256:")),
        "the arguments, read back from the line: {:?}",
        records[0].arguments
    );
    assert_eq!(
        records[0].arguments["confirm"], true,
        "{:?}",
        records[0].arguments
    );
}

/// Before a session's lifecycle begins, a notification or a stray answer (which the
/// protocol does not forbid there) is ignored: the session goes on to its `initialize`,
/// or, after a 2026-07-28 client's `server/discover`, to its first request. (rmcp alone
/// ended the process on them.)
#[tokio::test]
async fn a_notification_before_the_lifecycle_begins_does_not_end_the_session() {
    let mut raw = Raw::connect(server(false), "all", 1 << 20);
    for line in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
        r#"{"jsonrpc":"2.0","id":77,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":78,"error":{"code":-1,"message":"no"}}"#,
    ] {
        raw.line(line).await;
    }
    raw.initialize().await;
    raw.line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"ok"}}}"#)
        .await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["text"], "ok",
        "{answer}"
    );

    // 2026-07-28: no `initialize`; a probe, a notification, then requests with the
    // lifecycle in their `_meta`.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    });
    let mut raw = Raw::connect(server(false), "all", 1 << 20);
    raw.line(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}})
            .to_string(),
    )
    .await;
    let discovered = raw.next().await;
    assert_eq!(discovered["id"], 1, "{discovered}");
    assert!(discovered["result"].is_object(), "{discovered}");
    // Before the lifecycle began (after the probe), then once it has (a notification is
    // then rmcp's as always): the session goes on.
    for (id, text) in [(2, "inline"), (3, "again")] {
        raw.line(r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#)
            .await;
        raw.line(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "echo_text", "arguments": {"text": text}, "_meta": meta}})
            .to_string(),
        )
        .await;
        let answer = raw.next().await;
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(
            answer["result"]["structuredContent"]["text"], text,
            "{answer}"
        );
    }
}

/// A second `initialize` is refused, and the session keeps the version it negotiated
/// (rmcp alone answered it with the old version and switched the session to the one it
/// asked for: `ping` gone, results of another revision).
#[tokio::test]
async fn a_second_initialize_is_refused_and_changes_nothing() {
    let mut raw = Raw::start(server(false), "all", 1 << 20).await;
    for version in ["2026-07-28", "2025-11-25"] {
        raw.line(
            &json!({"jsonrpc": "2.0", "id": "again", "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "2"}}})
            .to_string(),
        )
        .await;
        let refused = raw.next().await;
        assert_eq!(refused["id"], "again", "{refused}");
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("already initialized"),
            "{refused}"
        );
    }
    raw.line(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .await;
    let pong = raw.next().await;
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    raw.line(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"ok"}}}"#)
        .await;
    let answer = raw.next().await;
    assert_eq!(
        answer["result"]["structuredContent"]["text"], "ok",
        "{answer}"
    );
    assert!(answer["result"].get("resultType").is_none(), "{answer}");
}

/// A subscription is a read: one rmcp refuses before the handler (before `initialize`, an
/// unsupported protocol version) is recorded as one, before its answer, as a read is.
#[tokio::test]
async fn a_subscription_rmcp_refuses_before_the_handler_is_recorded() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::connect(server, "all", 1 << 20);
    raw.line(
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"notes://all"}}"#,
    )
    .await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 1, "{refused}");
    assert!(refused["error"]["code"].is_i64(), "{refused}");
    raw.initialize().await;
    let unsupported = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
        "params": {"uri": "notes://all",
                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}});
    raw.line(&unsupported.to_string()).await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 2, "{refused}");
    assert!(refused["error"]["code"].is_i64(), "{refused}");
    let records = sink.records();
    let seen: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.kind,
                r.tool.as_str(),
                r.request_id.as_deref(),
                r.check,
                r.arguments.get("$subscribe").cloned(),
            )
        })
        .collect();
    let subscription = |id| {
        (
            CallKind::Resource,
            "notes://all",
            Some(id),
            Some(Check::Protocol),
            Some(json!(true)),
        )
    };
    assert_eq!(seen, [subscription("1"), subscription("2")], "{records:?}");
}

/// A batch (which rmcp refuses whole) leaves a record for each call, read, prompt or
/// completion it held, not only for the first; past 32, the rest are counted in one more.
#[tokio::test]
async fn every_call_of_a_refused_batch_is_recorded() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    let call = |id: u64, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "forget_text", "arguments": {"text": text, "confirm": true}}})
    };
    let batch = json!([
        {"jsonrpc": "2.0", "id": 0, "method": "resources/read", "params": {"uri": "x://first"}},
        call(1, "a"),
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        call(3, "b"),
        {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "x://y"}},
        call(5, "c"),
    ]);
    raw.line(&batch.to_string()).await;
    // Answered as JSON-RPC answers a batch: one array, an error under each request's id,
    // so that a client that sent it (2025-03-26 allowed batches) is not left waiting.
    let answer = raw.next().await;
    let answers = answer.as_array().expect("an array answers a batch");
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5], "{answer}");
    assert!(
        answers.iter().all(|a| a["error"]["code"] == -32600),
        "{answer}"
    );
    raw.line(r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#)
        .await;
    assert_eq!(raw.next().await["id"], 6);
    let records = sink.records();
    let seen: Vec<(&str, Option<&str>)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.request_id.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("forget_text", Some("1")),
            ("x://first", Some("0")),
            ("forget_text", Some("3")),
            ("x://y", Some("4")),
            ("forget_text", Some("5")),
        ],
        "{records:?}"
    );
    assert!(
        records
            .iter()
            .all(|r| r.reason.as_deref() == Some("not_dispatched"))
    );

    let before = sink.records().len();
    let many: Vec<Value> = (0..40).map(|i| call(100 + i, "m")).collect();
    raw.line(&Value::Array(many).to_string()).await;
    assert_eq!(raw.next().await.as_array().map(Vec::len), Some(40));
    // A batch of notifications only is answered with nothing (JSON-RPC): the next
    // answer is the ping's.
    raw.line(r#"[{"jsonrpc":"2.0","method":"notifications/progress"}]"#)
        .await;
    raw.line(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)
        .await;
    assert_eq!(raw.next().await["id"], 7);
    let records = sink.records();
    assert_eq!(
        records.len() - before,
        33,
        "32 one by one, and the count of the rest"
    );
    let last = records.last().unwrap();
    assert_eq!(last.tool, "(unknown)");
    assert!(last.reason.as_deref() == Some("not_dispatched"), "{last:?}");
    assert_eq!(last.arguments, json!({"more_calls": 8}), "{last:?}");

    // Batches nested in a batch (not JSON-RPC either): each call recorded once, as the
    // `/mcp` gate records them.
    let before = sink.records().len();
    let nested = json!([[call(8, "n")], [call(9, "o"), [call(10, "p")]]]);
    raw.line(&nested.to_string()).await;
    // Each element is no message: an error under `null` for each (JSON-RPC).
    let answer = raw.next().await;
    assert_eq!(answer.as_array().map(Vec::len), Some(2), "{answer}");
    assert!(answer[1]["id"].is_null() && answer[1]["error"]["code"] == -32600);
    raw.line(r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#)
        .await;
    assert_eq!(raw.next().await["id"], 11);
    let records = sink.records();
    let seen: Vec<(&str, Option<&str>)> = records[before..]
        .iter()
        .map(|r| (r.tool.as_str(), r.request_id.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("forget_text", Some("8")),
            ("forget_text", Some("9")),
            ("forget_text", Some("10")),
        ],
        "{records:?}"
    );
}

/// Messages one after the other on a line, separated by white space JSON does not have
/// but a lenient reader skips (JSON5's U+2028, U+2029, no-break space, byte-order mark):
/// each request among them is answered under its own id, and each call recorded as the
/// call it is, the second as much as the first.
#[tokio::test]
async fn messages_separated_by_any_white_space_are_each_answered_and_recorded() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    let call = |id: u64, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "forget_text", "arguments": {"text": text, "confirm": true}}})
        .to_string()
    };
    for (n, separator) in ["\u{2028}", "\u{2029}", "\u{a0}", "\u{feff}", " \u{3000}\t"]
        .into_iter()
        .enumerate()
    {
        let (first, second) = (10 * n as u64 + 1, 10 * n as u64 + 2);
        let before = sink.records().len();
        raw.line(&format!(
            "{}{separator}{}",
            call(first, "a"),
            call(second, "b")
        ))
        .await;
        let mut ids = vec![raw.next().await, raw.next().await];
        ids.sort_by_key(|a| a["id"].as_u64());
        assert_eq!(
            ids.iter().map(|a| a["id"].clone()).collect::<Vec<_>>(),
            [json!(first), json!(second)],
            "{separator:?}: {ids:?}"
        );
        assert!(ids.iter().all(|a| a["error"]["code"] == -32600), "{ids:?}");
        let records = sink.records();
        let seen: Vec<(&str, Option<&str>)> = records[before..]
            .iter()
            .map(|r| (r.tool.as_str(), r.request_id.as_deref()))
            .collect();
        let (first, second) = (first.to_string(), second.to_string());
        assert_eq!(
            seen,
            [
                ("forget_text", Some(first.as_str())),
                ("forget_text", Some(second.as_str())),
            ],
            "{separator:?}: {records:?}"
        );
        assert!(
            records[before..]
                .iter()
                .all(|r| r.reason.as_deref() == Some("not_dispatched"))
        );
    }
    // One message inside such white space (before it, or a second byte-order mark): not
    // run, answered under its id, recorded as the call it is. And messages after a first
    // value that is no message (a number, a batch): each request answered.
    let before = sink.records().len();
    for (line, ids) in [
        (format!("\u{2028}{}", call(50, "a")), vec![50]),
        (format!("\u{feff}\u{feff}{}\u{a0}", call(51, "a")), vec![51]),
        (format!("1 {}", call(52, "a")), vec![52]),
        (
            format!("[{}]\u{2028}{}", call(53, "a"), call(54, "b")),
            vec![53, 54],
        ),
        // A message that repeats its `method` (a call to a reader that keeps the first
        // key) after another: recorded as the call it may be.
        (
            format!(
                "{} {}",
                call(55, "a"),
                call(56, "b").replacen(
                    r#""method":"tools/call""#,
                    r#""method":"tools/call","method":"ping""#,
                    1
                )
            ),
            vec![55, 56],
        ),
    ] {
        raw.line(&line).await;
        let mut answered = Vec::new();
        for _ in &ids {
            let answer = raw.next().await;
            assert_eq!(answer["error"]["code"], -32600, "{line:?}: {answer}");
            answered.push(answer["id"].as_u64().unwrap());
        }
        answered.sort();
        assert_eq!(answered, ids, "{line:?}");
    }
    let records = sink.records();
    let seen: Vec<(&str, Option<&str>)> = records[before..]
        .iter()
        .map(|r| (r.tool.as_str(), r.request_id.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("forget_text", Some("50")),
            ("forget_text", Some("51")),
            ("forget_text", Some("52")),
            ("forget_text", Some("53")),
            ("forget_text", Some("54")),
            ("forget_text", Some("55")),
            ("forget_text", Some("56")),
        ],
        "{records:?}"
    );
    // Junk after a message is no separator: the message is answered, nothing more read.
    raw.line(&format!("{}\u{2028}x{}", call(90, "a"), call(91, "b")))
        .await;
    assert_eq!(raw.next().await["id"], 90);
    raw.line(r#"{"jsonrpc":"2.0","id":92,"method":"ping"}"#)
        .await;
    assert_eq!(raw.next().await["id"], 92);
}

/// A session of `server` (token `all`, a pipe of `capacity` bytes) whose client can
/// elicit: a person can be asked through it.
async fn eliciting(server: Server, capacity: usize) -> Raw {
    let mut raw = Raw::connect(server, "all", capacity);
    raw.line(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string(),
    )
    .await;
    assert_eq!(raw.next().await["id"], 0);
    raw.line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    raw
}

/// A session of a server whose destructive calls a person confirms (recording into
/// `sink`, with `timeout` for the person's answer), whose client can elicit and has just
/// called `forget_text` with `confirm: true`: the question it was sent.
async fn asked_to_confirm(sink: &MemorySink, timeout: Option<std::time::Duration>) -> (Raw, Value) {
    let mut server = builder(false)
        .audit(sink.clone())
        .confirmation(aac_tools::confirm::ConfirmPolicy::User);
    if let Some(timeout) = timeout {
        server = server.confirmation_timeout(timeout);
    }
    let mut raw = eliciting(server.build().unwrap(), 1 << 16).await;
    raw.line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"forget_text","arguments":{"text":"x","confirm":true}}}"#)
        .await;
    let asked = raw.next().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    (raw, asked)
}

/// A client that goes away (it closes its stream) while its user is asked to confirm a
/// destructive call abandoned the call: its one record says `cancelled` (499) every time,
/// whichever the server notices first, the stream's end or the call's cancellation (a
/// race that used to record some of them as `user_confirmation_unavailable`). Twelve
/// sessions at once, each its own server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_its_user_is_asked_abandoned_the_call() {
    let mut sessions = Vec::new();
    for _ in 0..12 {
        let sink = MemorySink::new();
        let (raw, _) = asked_to_confirm(&sink, None).await;
        sessions.push((sink, raw));
    }
    let sinks: Vec<MemorySink> = sessions.into_iter().map(|(sink, _raw)| sink).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sinks.iter().any(|s| s.records().is_empty()) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for (n, sink) in sinks.iter().enumerate() {
        let records = sink.records();
        assert_eq!(records.len(), 1, "session {n}: {records:?}");
        let record = &records[0];
        assert_eq!(
            (record.outcome, record.reason.as_deref(), record.status),
            (Outcome::Error, Some("cancelled"), 499),
            "session {n}: {record:?}"
        );
    }
}

/// The one record `sink` gets, waited for (up to 20 s).
async fn the_one_record(sink: &MemorySink) -> aac_tools::audit::AuditRecord {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sink.records().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let records = sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    records[0].clone()
}

/// A person's answer sent with the end of the client's input (one write: the answer,
/// then the input closed) was read before the end, and decides: a "no" is recorded as the
/// person's refusal (403 `user_declined`), not as the client going away, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_with_the_end_of_input_decides() {
    for n in 0..8 {
        let sink = MemorySink::new();
        let (mut raw, asked) = asked_to_confirm(&sink, None).await;
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "decline"}});
        raw.write
            .write_all(format!("{answer}\n").as_bytes())
            .await
            .unwrap();
        raw.write.shutdown().await.unwrap();
        let record = the_one_record(&sink).await;
        assert_eq!(
            (record.reason.as_deref(), record.status),
            (Some("user_declined"), 403),
            "run {n}: {record:?}"
        );
    }
}

/// A `notifications/cancelled` read before the person's answer (both in one write, the
/// input still open or ended with them) cancels the call: the "yes" after it does not
/// run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_read_before_the_answer_wins() {
    for n in 0..12 {
        let sink = MemorySink::new();
        let (mut raw, asked) = asked_to_confirm(&sink, None).await;
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": 1}});
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}});
        raw.write
            .write_all(format!("{cancel}\n{answer}\n").as_bytes())
            .await
            .unwrap();
        // Half of the runs end the input in the same write, too.
        if n % 2 == 1 {
            raw.write.shutdown().await.unwrap();
        }
        let record = the_one_record(&sink).await;
        assert_eq!(
            (record.reason.as_deref(), record.status),
            (Some("cancelled"), 499),
            "run {n}: {record:?}"
        );
    }
}

/// A call cancelled while its user was asked, before its tool ran, is abandoned, recorded
/// as every abandoned call is (`error`, no check, `cancelled`, 499), whichever comes first
/// in the one write that carries both, the cancel or the person's yes (the yes first used
/// to record `denied`: the cancel was then read once the checks had passed). With the yes
/// first, the tool may also have started before the cancel was read: it then ends and is
/// recorded as it ended. Never `denied`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_its_user_is_asked_is_recorded_as_abandoned_either_way() {
    for n in 0..12 {
        let sink = MemorySink::new();
        let (mut raw, asked) = asked_to_confirm(&sink, None).await;
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": 1}});
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}});
        let write = if n % 2 == 0 {
            format!("{answer}\n{cancel}\n")
        } else {
            format!("{cancel}\n{answer}\n")
        };
        raw.write.write_all(write.as_bytes()).await.unwrap();
        let record = the_one_record(&sink).await;
        let seen = (
            record.outcome,
            record.check,
            record.reason.as_deref(),
            record.status,
        );
        let abandoned = (Outcome::Error, None, Some("cancelled"), 499);
        let ran = (Outcome::Success, None, None, 200);
        assert!(
            seen == abandoned || (n % 2 == 0 && seen == ran),
            "run {n}: {record:?}"
        );
    }
}

/// A client whose input ends while its user is asked stops the wait at once: the record
/// says `cancelled` (499), not the confirmation's timeout (3 s here), which rmcp's drain
/// of a closed connection (5 s) used to outlast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_input_ends_the_wait_for_a_person_at_once() {
    let sink = MemorySink::new();
    let (mut raw, _) = asked_to_confirm(&sink, Some(std::time::Duration::from_secs(3))).await;
    // The input ends; the output stays open.
    raw.write.shutdown().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sink.records().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let records = sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].outcome,
            records[0].reason.as_deref(),
            records[0].status
        ),
        (Outcome::Error, Some("cancelled"), 499),
        "{:?}",
        records[0]
    );
    // The answer, if the client still reads, says what the record says, and does not
    // blame the client alone (SIGTERM ends the input the same way).
    let answer = raw.next().await;
    assert_eq!(answer["id"], 1, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    let body: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        (body["status"].as_u64(), body["reason"].as_str()),
        (Some(499), Some("cancelled")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("or the server is stopping"),
        "{body}"
    );
    drop(raw);
}

/// An answer to the confirmation that is not of an elicitation's shape (`ACCEPT`, `{}`,
/// an action that is no string, an `accept` whose `content` is not the form's object) is
/// no: `user_declined`, the tool not run, as any answer but a plain `accept`. So is an
/// `accept` that fills in fields the empty form never asked for (a "no" inside the form).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_another_shape_is_a_no() {
    for answer in [
        json!({"action": "ACCEPT"}),
        json!({}),
        json!({"action": 1}),
        json!({"action": "accept", "content": "yes"}),
        json!({"action": "accept", "content": ["yes"]}),
        json!({"action": "accept", "content": {"confirm": false, "approved": false}}),
        json!({"action": "accept", "content": {"x": null}}),
    ] {
        let sink = MemorySink::new();
        let (mut raw, asked) = asked_to_confirm(&sink, None).await;
        raw.line(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": answer}).to_string())
            .await;
        let result = raw.next().await;
        assert_eq!(result["id"], 1, "{result}");
        assert_eq!(result["result"]["isError"], true, "{answer}: {result}");
        let records = sink.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(
            records[0].reason.as_deref(),
            Some("user_declined"),
            "{answer}: {:?}",
            records[0]
        );
    }
}

/// A person's answer that repeats a key (`decline`, then `accept`: a host or proxy that
/// reads the first key saw a no) confirms nothing: the call is refused 400
/// `ambiguous_answer`, recorded once, and the tool does not run. One that does not is
/// read as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_repeats_a_key_confirms_nothing() {
    for (result, reason) in [
        (
            r#"{"action":"decline","action":"accept"}"#,
            "ambiguous_answer",
        ),
        (
            r#"{"action":"accept","content":{"x":1,"x":2}}"#,
            "ambiguous_answer",
        ),
        (r#"{"action":"decline"}"#, "user_declined"),
    ] {
        let sink = MemorySink::new();
        let (mut raw, asked) = asked_to_confirm(&sink, None).await;
        let id = asked["id"].to_string();
        raw.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#
        ))
        .await;
        let answer = raw.next().await;
        assert_eq!(answer["id"], 1, "{answer}");
        assert_eq!(answer["result"]["isError"], true, "{result}: {answer}");
        let records = sink.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(
            (
                records[0].reason.as_deref(),
                records[0].confirmed_by.as_deref()
            ),
            (Some(reason), None),
            "{result}: {:?}",
            records[0]
        );
        if reason == "ambiguous_answer" {
            assert_eq!(records[0].status, 400, "{:?}", records[0]);
            let text = answer["result"]["content"][0]["text"].as_str().unwrap();
            assert!(
                text.contains("/result/action") || text.contains("/result/content/x"),
                "{text}"
            );
        }
    }
}

/// rmcp takes an answer whose id is a string that reads as an integer (`"0"`, `"+0"`,
/// `"00"`) for the answer to its question of that number: such an answer is read as
/// rmcp reads it. One that repeats a key is refused `ambiguous_answer` (it confirmed),
/// and one that confirms ends the question, so that requests in hand are bounded as
/// after any answer (its question stayed asked, and a 65th request was refused busy
/// instead of waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_under_its_id_written_as_a_string_is_read_as_rmcp_reads_it() {
    for written in [r#""{id}""#, r#""+{id}""#, r#""0{id}""#] {
        let sink = MemorySink::new();
        let (mut raw, asked) = asked_to_confirm(&sink, None).await;
        let id = written.replace("{id}", &asked["id"].to_string());
        raw.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"action":"decline","action":"accept"}}}}"#
        ))
        .await;
        let answer = raw.next().await;
        assert_eq!(answer["id"], 1, "{answer}");
        assert_eq!(answer["result"]["isError"], true, "{id}: {answer}");
        let records = sink.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(
            (
                records[0].reason.as_deref(),
                records[0].status,
                records[0].confirmed_by.as_deref()
            ),
            (Some("ambiguous_answer"), 400, None),
            "{id}: {:?}",
            records[0]
        );
    }

    let sink = MemorySink::new();
    let registry = Registry::collect_named(&["forget_text", "parked_text"]).unwrap();
    let server = Server::builder(registry)
        .verifier(
            StaticTokens::new().with("all", Principal::new("all", ["echo:read", "echo:delete"])),
        )
        .audit(sink.clone())
        .confirmation(aac_tools::confirm::ConfirmPolicy::User)
        .build()
        .unwrap();
    let mut raw = eliciting(server, 1 << 20).await;
    raw.line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"forget_text","arguments":{"text":"x","confirm":true}}}"#)
        .await;
    let asked = raw.next().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    raw.line(&format!(
        r#"{{"jsonrpc":"2.0","id":"{}","result":{{"action":"accept"}}}}"#,
        asked["id"]
    ))
    .await;
    let answer = raw.next().await;
    assert_eq!(
        (answer["id"].as_u64(), answer["result"]["isError"].as_bool()),
        (Some(1), Some(false)),
        "{answer}"
    );
    no_question_waits(&mut raw).await;
    let records = sink.records();
    assert_eq!(records.len(), 66, "{records:?}");
    assert!(
        records
            .iter()
            .all(|r| r.outcome == Outcome::Success && r.status == 200),
        "{records:?}"
    );
    assert_eq!(records[0].confirmed_by.as_deref(), Some("user"));
}

/// With no question of the server's awaited, past 64 requests in hand the input is not
/// read: 64 `parked_text` calls (ids 2 to 65) and a 66th sent, none is refused busy, and
/// every one is answered once released.
async fn no_question_waits(raw: &mut Raw) {
    let _gate = parked::GATE.lock().await;
    parked::RELEASED.store(false, std::sync::atomic::Ordering::SeqCst);
    for i in 2..=66 {
        raw.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"parked_text","arguments":{{"text":"{i}"}}}}}}"#
        ))
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    parked::RELEASED.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut answered = std::collections::BTreeSet::new();
    while answered.len() < 65 {
        let answer = raw.next().await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        assert!(answered.insert(answer["id"].as_u64().unwrap()), "{answer}");
    }
}

/// A question no longer awaited, unanswered (it timed out, or its call was cancelled),
/// is no longer one the input is read on for: requests past 64 in hand wait again,
/// rather than being refused busy for the rest of the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_no_longer_awaited_bounds_the_input_again() {
    for cancel in [false, true] {
        let sink = MemorySink::new();
        let registry = Registry::collect_named(&["forget_text", "parked_text"]).unwrap();
        let server = Server::builder(registry)
            .verifier(
                StaticTokens::new()
                    .with("all", Principal::new("all", ["echo:read", "echo:delete"])),
            )
            .audit(sink.clone())
            .confirmation(aac_tools::confirm::ConfirmPolicy::User)
            .confirmation_timeout(std::time::Duration::from_millis(200))
            .build()
            .unwrap();
        let mut raw = eliciting(server, 1 << 20).await;
        raw.line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"forget_text","arguments":{"text":"x","confirm":true}}}"#)
            .await;
        let asked = raw.next().await;
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        if cancel {
            raw.line(
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            )
            .await;
        }
        // The client is told that its answer is no longer awaited; a call that timed
        // out is answered too (in either order).
        let mut told = false;
        for _ in 0..if cancel { 1 } else { 2 } {
            let message = raw.next().await;
            if message["method"] == "notifications/cancelled" {
                assert_eq!(message["params"]["requestId"], asked["id"], "{message}");
                assert!(!told, "{message}");
                told = true;
            } else {
                assert!(!cancel, "{message}");
                assert_eq!(message["id"], 1, "{message}");
            }
        }
        assert!(told, "cancel: {cancel}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while sink.records().is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let reason = if cancel {
            "cancelled"
        } else {
            "user_confirmation_timeout"
        };
        assert_eq!(sink.records()[0].reason.as_deref(), Some(reason));
        no_question_waits(&mut raw).await;
        let busy = sink
            .records()
            .iter()
            .filter(|r| r.reason.as_deref() == Some("too_many_in_flight"))
            .count();
        assert_eq!((busy, sink.records().len()), (0, 66), "cancel: {cancel}");
    }
}

/// An answer to the confirmation that is not a JSON-RPC response (a `result` and an
/// `error`, or neither; no `"jsonrpc": "2.0"`) ends the question as an error: the call is refused at
/// once (403 `user_confirmation_unavailable`, as when the client's question fails), the
/// tool not run, and nothing is written under the question's id, which a
/// client reads as the answer to its own request of that id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_is_no_response_ends_the_question_unanswered() {
    for shape in [
        r#"{"jsonrpc":"2.0","id":{id},"result":{"action":"accept"},"error":{"code":1,"message":"x"}}"#,
        r#"{"id":{id},"result":{"action":"accept"}}"#,
        r#"{"jsonrpc":"2.0","id":{id}}"#,
    ] {
        let sink = MemorySink::new();
        let (mut raw, asked) = asked_to_confirm(&sink, None).await;
        raw.line(&shape.replace("{id}", &asked["id"].to_string()))
            .await;
        let answer = raw.next().await;
        assert_eq!(answer["id"], 1, "{shape}: {answer}");
        assert_eq!(answer["result"]["isError"], true, "{shape}: {answer}");
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        let body: Value = serde_json::from_str(text).unwrap();
        assert_eq!(body["reason"], "user_confirmation_unavailable", "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("the answer is not a JSON-RPC response"),
            "{body}"
        );
        let records = sink.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(
            (
                records[0].status,
                records[0].reason.as_deref(),
                records[0].confirmed_by.as_deref()
            ),
            (403, Some("user_confirmation_unavailable"), None),
            "{shape}: {:?}",
            records[0]
        );
        // No question asked under that id: not answered, not the end of the session.
        raw.line(&shape.replace("{id}", "99")).await;
        raw.line(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#)
            .await;
        assert_eq!(raw.next().await["id"], 2);
    }
}

/// Over stdio as over HTTP, a destructive tool's `confirm` given twice (false, then true)
/// is not the one JSON `true` the guard asks for: refused by the guard, in its exact
/// words, before the tool runs, and recorded once, naming the key repeated.
#[tokio::test]
async fn arguments_that_repeat_a_key_are_refused_over_stdio() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    raw.line(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"forget_text","arguments":{"text":"x","confirm":false,"confirm":true}}}"#)
        .await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    let body: Value = serde_json::from_str(text).unwrap();
    assert_eq!(body["reason"], "destructive_flag_missing", "{body}");
    assert_eq!(
        body["error"], "confirm: true required for destructive operations",
        "{body}"
    );
    let records = sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].tool.as_str(),
            records[0].check,
            records[0].outcome
        ),
        ("forget_text", Some(Check::Confirm), Outcome::Denied)
    );
    // The record says the key was repeated: its `confirm` holds only the last value.
    assert_eq!(
        records[0].arguments["$repeated_key"], "/confirm",
        "{records:?}"
    );
    assert_eq!(records[0].arguments["confirm"], true);
}

/// A line of more JSON values than a message may hold (half a million: 16 MiB of `[[[…`
/// parsed took 3.5 GB) is refused unparsed, answered under its id, and recorded; a long
/// line of few values (a big string) is read as usual, and the session goes on.
#[tokio::test]
async fn a_line_of_too_many_values_is_refused_unparsed_and_recorded() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    raw.initialize().await;
    let many = format!(
        r#"{{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{{"name":"echo_text","arguments":{{"text":"x","a":[{}0]}}}}}}"#,
        "0,".repeat(600_000)
    );
    raw.line(&many).await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 20, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let text = "y".repeat(2 * 1024 * 1024);
    raw.line(&format!(
        r#"{{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{{"name":"echo_text","arguments":{{"text":"{text}"}}}}}}"#
    ))
    .await;
    let echoed = raw.next().await;
    assert_eq!(echoed["id"], 21);
    assert_eq!(echoed["result"]["isError"], false, "a big string is fine");
    // Values one after the other, with no bracket or comma between them (strings,
    // numbers): counted too (parsed, 16 MiB of them took 350 MB).
    // Separated by white space only a lenient reader skips (vertical tab, U+2028, a
    // no-break space), which the reading of messages one after the other takes as such.
    for (id, filler) in [
        (22, r#""" "#),
        (23, "1 "),
        (24, "1\u{b}"),
        (25, "1\u{2028}"),
        (26, "1\u{a0}"),
    ] {
        raw.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo_text","arguments":{{"text":"x"}}}}}} {}"#,
            filler.repeat(600_000)
        ))
        .await;
        let refused = raw.next().await;
        assert_eq!(refused["id"], id, "{refused}");
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
    }
    let refused: Vec<_> = sink
        .records()
        .into_iter()
        .filter(|r| r.reason.as_deref() == Some("body_too_large"))
        .filter_map(|r| r.request_id)
        .collect();
    assert_eq!(refused, ["20", "22", "23", "24", "25", "26"]);
    let records: Vec<_> = sink
        .records()
        .into_iter()
        .filter(|r| {
            !matches!(
                r.request_id.as_deref(),
                Some("22" | "23" | "24" | "25" | "26")
            )
        })
        .collect();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(
        (
            records[0].request_id.as_deref(),
            records[0].status,
            records[0].reason.as_deref()
        ),
        (Some("20"), 413, Some("body_too_large"))
    );
    assert_eq!(records[0].tool, "echo_text", "the call its start names");
    assert_eq!(records[1].outcome, Outcome::Success);

    // A read, a subscription or a prompt is recorded as what it is, for `audit --kind`.
    sink.clear();
    for (id, method, params, kind, name) in [
        (
            30,
            "resources/read",
            r#""uri":"notes://all""#,
            CallKind::Resource,
            "notes://all",
        ),
        (
            31,
            "resources/subscribe",
            r#""uri":"notes://all""#,
            CallKind::Resource,
            "notes://all",
        ),
        (
            32,
            "prompts/get",
            r#""name":"summarize""#,
            CallKind::Prompt,
            "summarize",
        ),
    ] {
        raw.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params},"pad":[{}0]}}}}"#,
            "0,".repeat(600_000)
        ))
        .await;
        let refused = raw.next().await;
        assert_eq!(refused["id"], id, "{refused}");
        let records = sink.records();
        let record = records.last().expect("a record");
        assert_eq!(
            (record.kind, record.tool.as_str(), record.status),
            (kind, name, 413),
            "{record:?}"
        );
    }
}

/// A client that leaves before it initializes a session (an empty input, a client that
/// only asked which protocol versions the server speaks) ends the session as the end of
/// input does: `serve_io` returns `Ok`, so `serve` exits 0.
#[tokio::test]
async fn a_client_that_leaves_before_initializing_is_an_end_not_a_failure() {
    for input in [
        &b""[..],
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{}}\n",
    ] {
        let (client, server_end) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(server_end);
        let serving = tokio::spawn(aac_tools::mcp::serve_io(
            server(false),
            Some("t".to_owned()),
            read,
            write,
        ));
        // The client reads what it is answered, and stops writing.
        let (client_read, mut client_write) = tokio::io::split(client);
        let answers = tokio::spawn(async move {
            let mut lines = BufReader::new(client_read).lines();
            while let Ok(Some(_)) = lines.next_line().await {}
        });
        client_write.write_all(input).await.unwrap();
        // The end of input (the stream stays open for the answers).
        client_write.shutdown().await.unwrap();
        let ended = tokio::time::timeout(std::time::Duration::from_secs(30), serving)
            .await
            .expect("serve_io returns at the end of input")
            .unwrap();
        answers.abort();
        assert!(
            ended.is_ok(),
            "{:?}: {ended:?}",
            String::from_utf8_lossy(input)
        );
    }
}

/// A client that sends calls and never reads their answers stops being read once a few
/// dozen answers wait to be written: the server does not go on running its calls and
/// keeping their answers (2 GB in 16 s, measured before). Once it reads, every call is
/// answered and recorded once.
#[tokio::test]
async fn a_client_that_does_not_read_its_answers_stops_being_read() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let Raw { mut lines, write } = Raw::start(server, "all", 16 * 1024).await;
    const CALLS: usize = 3000;
    let writer = send_calls(write, "echo_text", CALLS);
    // Absence can only be waited for: half a second is many times what the calls the
    // server read took.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let ran = sink.records().len();
    assert!(
        ran < CALLS / 4,
        "{ran} of {CALLS} calls ran while their answers were not read"
    );
    assert!(!writer.is_finished(), "the server no longer reads");
    answer_all(&mut lines, CALLS).await;
    let _write = writer.await.unwrap();
    assert_eq!(sink.records().len(), CALLS);
}

/// A line over 16 MiB is dropped unread, but answered under the id its start gives (its
/// client no longer waits for ever) and recorded as the call its start names, under that
/// id; a last line without its `\n`, at the end of the input, is read as a line.
#[tokio::test]
async fn a_line_too_long_is_answered_under_its_id_and_a_last_line_needs_no_newline() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let Raw {
        mut lines,
        mut write,
    } = Raw::start(server, "all", 1 << 20).await;
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"echo_text","arguments":{{"text":"{}"}}}}}}"#,
        "a".repeat(17 * 1024 * 1024)
    );
    // A read and a prompt over the limit are recorded as what they are.
    let read = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{{"uri":"x://big","pad":"{}"}}}}"#,
        "a".repeat(17 * 1024 * 1024)
    );
    let prompt = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"prompts/get","params":{{"name":"big","arguments":{{"a":"{}"}}}}}}"#,
        "a".repeat(17 * 1024 * 1024)
    );
    let sending = tokio::spawn(async move {
        for line in [read, prompt, long] {
            write.write_all(line.as_bytes()).await.unwrap();
            write.write_all(b"\n").await.unwrap();
        }
        // The last line, without its newline, then the end of the input.
        write
            .write_all(br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"last"}}}"#)
            .await
            .unwrap();
        write.shutdown().await.unwrap();
    });
    for id in [5, 6, 7] {
        let refused = next_message(&mut lines, 60).await;
        assert_eq!(
            (&refused["id"], &refused["error"]["code"]),
            (&json!(id), &json!(-32600)),
            "{refused}"
        );
    }
    let last = next_message(&mut lines, 30).await;
    assert_eq!(last["id"], 8, "{last}");
    assert_eq!(
        last["result"]["structuredContent"]["text"], "last",
        "{last}"
    );
    sending.await.unwrap();
    let records = sink.records();
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.kind, r.tool.as_str(), r.request_id.as_deref(), r.status))
        .collect();
    assert_eq!(
        seen,
        [
            (CallKind::Resource, "x://big", Some("5"), 413),
            (CallKind::Prompt, "big", Some("6"), 413),
            (CallKind::Tool, "echo_text", Some("7"), 413),
            (CallKind::Tool, "echo_text", Some("8"), 200)
        ],
        "{records:?}"
    );
}

/// A second request under the id of a call still in flight (here, waiting for a person) is
/// refused under that id and recorded once; the first call is still answered, under its
/// id, when the person answers (rmcp alone answered one of the two and lost the other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_under_the_id_of_a_call_in_flight_is_refused() {
    let sink = MemorySink::new();
    let (mut raw, asked) = asked_to_confirm(&sink, None).await;
    raw.line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"again"}}}"#)
        .await;
    let refused = raw.next().await;
    assert_eq!(
        (&refused["id"], &refused["error"]["code"]),
        (&json!(1), &json!(-32600)),
        "{refused}"
    );
    raw.line(
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "decline"}}).to_string(),
    )
    .await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let records = sink.records();
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.reason.as_deref(), r.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("echo_text", Some("duplicate_request_id"), 409),
            ("forget_text", Some("user_declined"), 403),
        ],
        "{records:?}"
    );
}

/// Calls that take long are never read past a few dozen in hand: a client that sends
/// thousands without waiting for their answers does not get thousands run at once (with
/// a client that did not read, 4 GB in 10 s). Once they are answered, the rest are read,
/// and every call is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_hand_are_bounded_whatever_the_client_sends() {
    use std::sync::atomic::Ordering;
    let sink = MemorySink::new();
    let registry = Registry::collect_module(&format!("{}::held", module_path!())).unwrap();
    let server = Server::builder(registry)
        .verifier(StaticTokens::new().with("all", Principal::new("all", ["echo:read"])))
        .audit(sink.clone())
        .build()
        .unwrap();
    let Raw { mut lines, write } = Raw::start(server, "all", 1 << 20).await;
    const CALLS: usize = 1000;
    let writer = send_calls(write, "held_text", CALLS);
    // Absence can only be waited for: half a second is many times what reading took.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = held::HELD.load(Ordering::SeqCst);
    assert!(
        (1..=100).contains(&started),
        "{started} calls of {CALLS} were started at once"
    );
    held::RELEASED.store(true, Ordering::SeqCst);
    answer_all(&mut lines, CALLS).await;
    let _write = writer.await.unwrap();
    assert_eq!(sink.records().len(), CALLS);
}

/// A client that never answers the questions of a server whose person confirms: the
/// input is read on (the answers can only come that way), but past 16 questions waiting
/// for the principal a call is refused at once (429 `too_many_questions_waiting`, a tool
/// error), and past 64 requests in hand any request is ("Server busy", -32000, under its
/// id; 429 `too_many_in_flight`), rather than kept waiting with its request (a flood of
/// calls padded to 8 MB each took 1.5 GB). Each refusal is recorded. When the input ends,
/// the calls in hand are each recorded too: one record per call sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_those_in_hand_are_refused_while_questions_wait() {
    let sink = MemorySink::new();
    let server = builder(false)
        .audit(sink.clone())
        .confirmation(aac_tools::confirm::ConfirmPolicy::User)
        .build()
        .unwrap();
    let raw = eliciting(server, 1 << 20).await;
    const CALLS: u64 = 200;
    let Raw { mut lines, write } = raw;
    let writer = tokio::spawn(async move {
        let mut write = write;
        for i in 1..=CALLS {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"forget_text","arguments":{{"text":"{i}","confirm":true}}}}}}"#
            );
            write.write_all(line.as_bytes()).await.unwrap();
            write.write_all(b"\n").await.unwrap();
        }
        write
    });
    let (mut asked, mut busy) = (0, std::collections::BTreeSet::new());
    while asked + busy.len() < CALLS as usize {
        let message = next_message(&mut lines, 30).await;
        if message["method"] == "elicitation/create" {
            asked += 1;
            continue;
        }
        let waiting = message["result"]["isError"] == true
            && message["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("too_many_questions_waiting");
        let in_flight = message["error"]["code"] == -32000
            && message["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Server busy");
        assert!(waiting || in_flight, "{message}");
        assert!(busy.insert(message["id"].as_u64().unwrap()), "{message}");
    }
    assert_eq!(asked, 16, "{} refused", busy.len());
    let refused: Vec<_> = sink
        .records()
        .into_iter()
        .filter(|r| {
            matches!(
                r.reason.as_deref(),
                Some("too_many_in_flight" | "too_many_questions_waiting")
            )
        })
        .collect();
    assert_eq!(refused.len(), busy.len());
    assert!(
        refused
            .iter()
            .all(|r| r.status == 429 && r.tool == "forget_text")
    );
    // The input ends: each call in hand is recorded, as abandoned.
    let mut write = writer.await.unwrap();
    write.shutdown().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sink.records().len() < CALLS as usize && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let records = sink.records();
    assert_eq!(records.len(), CALLS as usize);
    let cancelled = records
        .iter()
        .filter(|r| r.reason.as_deref() == Some("cancelled"))
        .count();
    assert_eq!(cancelled, 16, "{records:?}");
}

/// While a question waits for the person, input is read on (the answer can only come that
/// way), so calls that take long can pile up: past 64 requests in hand, a further request
/// is refused at once ("Server busy", -32000, under its id), the call recorded 429
/// `too_many_in_flight`, and not run; once the calls in hand end, requests are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_64_requests_in_hand_while_a_question_waits_a_request_is_refused_busy() {
    let sink = MemorySink::new();
    let registry = Registry::collect_named(&["forget_text", "stuck_text"]).unwrap();
    let server = Server::builder(registry)
        .verifier(
            StaticTokens::new().with("all", Principal::new("all", ["echo:read", "echo:delete"])),
        )
        .audit(sink.clone())
        .confirmation(aac_tools::confirm::ConfirmPolicy::User)
        .build()
        .unwrap();
    let mut raw = eliciting(server, 1 << 20).await;
    raw.line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"forget_text","arguments":{"text":"x","confirm":true}}}"#)
        .await;
    let asked = raw.next().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    // The question and 63 calls that do not end: 64 in hand.
    for i in 2..=64 {
        raw.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"stuck_text","arguments":{{"text":"{i}"}}}}}}"#
        ))
        .await;
    }
    for (id, name) in [(65, "stuck_text"), (66, "forget_text")] {
        raw.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{{"text":"y","confirm":true}}}}}}"#
        ))
        .await;
        let busy = raw.next().await;
        assert_eq!(busy["id"], id, "{busy}");
        assert_eq!(busy["error"]["code"], -32000, "{busy}");
        assert!(
            busy["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Server busy")),
            "{busy}"
        );
    }
    let busy: Vec<_> = sink
        .records()
        .into_iter()
        .filter(|r| r.reason.as_deref() == Some("too_many_in_flight"))
        .map(|r| (r.tool, r.status, r.request_id))
        .collect();
    assert_eq!(
        busy,
        [
            ("stuck_text".to_owned(), 429, Some("65".to_owned())),
            ("forget_text".to_owned(), 429, Some("66".to_owned())),
        ]
    );
    // The person declines and the calls end: a request is taken again.
    stuck::RELEASED.store(true, std::sync::atomic::Ordering::SeqCst);
    raw.line(
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "decline"}}).to_string(),
    )
    .await;
    let mut answered = std::collections::BTreeSet::new();
    while answered.len() < 64 {
        let answer = raw.next().await;
        assert!(answered.insert(answer["id"].as_u64().unwrap()), "{answer}");
    }
    raw.line(r#"{"jsonrpc":"2.0","id":67,"method":"ping"}"#)
        .await;
    assert_eq!(raw.next().await["id"], 67);
    assert_eq!(sink.records().len(), 66, "one record per call sent");
}

/// A call cancelled while its tool runs stays in hand until the tool ends: its id is still
/// in flight (a second request under it would take the first call's answer, rmcp matching
/// answers by id), and it counts among the 64 in hand (calls cancelled as soon as sent ran
/// without bound: 400 at once, 1.1 GB with padded requests). Each call is recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stays_in_hand_until_its_tool_ends() {
    use std::sync::atomic::Ordering;
    let sink = MemorySink::new();
    let registry = Registry::collect_module(&format!("{}::gated", module_path!())).unwrap();
    let server = Server::builder(registry)
        .verifier(StaticTokens::new().with("all", Principal::new("all", ["echo:read"])))
        .audit(sink.clone())
        .build()
        .unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    let call = |id: u64, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "gated_text", "arguments": {"text": text}}})
        .to_string()
    };
    let cancel = |id: u64| {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id}})
        .to_string()
    };
    raw.line(&call(1, "first")).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while gated::STARTED.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    raw.line(&cancel(1)).await;
    raw.line(&call(1, "second")).await;
    let refused = raw.next().await;
    assert_eq!(
        (&refused["id"], &refused["error"]["code"]),
        (&json!(1), &json!(-32600)),
        "the id of a cancelled call whose tool still runs is in flight: {refused}"
    );
    // Calls cancelled as soon as sent: never more than 64 in hand at once (most never
    // start: a call cancelled before its tool runs does not run).
    for id in 100..200 {
        raw.line(&call(id, "flood")).await;
        raw.line(&cancel(id)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = gated::STARTED.load(Ordering::SeqCst);
    assert!(
        (1..=64).contains(&started),
        "{started} calls ran at once, cancelled or not"
    );
    gated::OPEN.store(true, Ordering::SeqCst);
    // Every call ends and is recorded once: the first, the refused second, the 100.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while sink.records().len() < 102 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let records = sink.records();
    assert_eq!(records.len(), 102);
    assert!(gated::STARTED.load(Ordering::SeqCst) <= 101);
    let mut flood: Vec<u64> = records
        .iter()
        .filter_map(|r| r.request_id.as_deref()?.parse().ok())
        .filter(|id| *id >= 100)
        .collect();
    flood.sort_unstable();
    assert_eq!(
        flood,
        (100..200).collect::<Vec<u64>>(),
        "each recorded once"
    );
    assert_eq!(
        records
            .iter()
            .filter(|r| r.reason.as_deref() == Some("duplicate_request_id"))
            .count(),
        1
    );
    // Once the first call's tool ended, its id is free again.
    let (answer, _) = raw.until_free(&call(1, "third")).await;
    assert_eq!(
        (
            &answer["id"],
            &answer["result"]["structuredContent"]["text"]
        ),
        (&json!(1), &json!("third")),
        "{answer}"
    );
}

/// A call cancelled while in hand, once its handler is done (here, its wait for a person
/// ended by the cancellation), is no longer in flight: its id may be sent again (MCP
/// forbids it, plain JSON-RPC clients do it) and is not refused as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_frees_its_id() {
    let sink = MemorySink::new();
    let (mut raw, _) = asked_to_confirm(&sink, None).await;
    raw.line(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#)
        .await;
    // Its record says it was abandoned, once the cancellation is taken.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sink.records().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (answer, refused) = raw
        .until_free(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo_text","arguments":{"text":"again"}}}"#)
        .await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["text"], "again",
        "{answer}"
    );
    let records = sink.records();
    let reasons: Vec<_> = records.iter().map(|r| r.reason.as_deref()).collect();
    let mut expected = vec![Some("cancelled")];
    expected.extend(std::iter::repeat_n(Some("duplicate_request_id"), refused));
    expected.push(None);
    assert_eq!(reasons, expected, "{records:?}");
}

/// Writes calls 1 to `calls` of `tool` (text: their number), one line each, on a task of
/// its own (the server may stop reading for a while); the write half when done.
fn send_calls(
    mut write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    tool: &'static str,
    calls: usize,
) -> tokio::task::JoinHandle<tokio::io::WriteHalf<tokio::io::DuplexStream>> {
    tokio::spawn(async move {
        for i in 1..=calls {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"text":"{i}"}}}}}}"#
            );
            write.write_all(line.as_bytes()).await.unwrap();
            write.write_all(b"\n").await.unwrap();
        }
        write
    })
}

/// Reads until calls 1 to `calls` are each answered once, without an error.
async fn answer_all(lines: &mut Lines, calls: usize) {
    let mut answered = std::collections::BTreeSet::new();
    while answered.len() < calls {
        let answer = next_message(lines, 30).await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        let id = answer["id"].as_u64().unwrap();
        assert!(
            (1..=calls as u64).contains(&id),
            "an id never sent: {answer}"
        );
        assert!(answered.insert(id), "answered twice: {answer}");
    }
    assert_eq!(answered.len(), calls);
}

/// A call whose arguments repeat a key under a key name as long as the line allows: the
/// record names the repeated key cut (its hash and length), and stays within
/// `MAX_RECORD_BYTES` (it held the whole pointer: 2 MiB here, 15 MiB possible).
#[tokio::test]
async fn a_repeated_key_s_long_name_is_cut_in_the_record() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::start(server, "all", 1 << 20).await;
    let key = "k".repeat(2 << 20);
    raw.line(&format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"forget_text","arguments":{{"text":"x","{key}":{{"a":1,"a":2}}}}}}}}"#
    ))
    .await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], 7, "{answer}");
    let records = sink.records();
    let record = records.last().expect("a record");
    assert_eq!(record.check, Some(Check::Validate), "{:?}", record.reason);
    let size = serde_json::to_vec(record).unwrap().len();
    assert!(
        size <= aac_tools::audit::MAX_RECORD_BYTES,
        "a record of {size} bytes"
    );
    let pointer = record.arguments["$repeated_key"]
        .as_str()
        .unwrap_or_default();
    assert!(
        pointer.starts_with("/kkkk") && pointer.contains(&format!("{} bytes", key.len() + 3)),
        "{}",
        &pointer[..pointer.len().min(200)]
    );
}

/// An `initialize` is kept for the whole session, parsed: one over 64 KiB (a client's
/// own says a few hundred bytes) is refused under its id, and a proper one then works.
#[tokio::test]
async fn an_initialize_over_its_limit_is_refused() {
    let sink = MemorySink::new();
    let server = builder(false).audit(sink.clone()).build().unwrap();
    let mut raw = Raw::connect(server, "all", 1 << 20);
    let padding = vec![json!([]); 40_000];
    raw.line(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"experimental": {"pad": padding}},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string(),
    )
    .await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("initialize message is limited to 65536 bytes"),
        "{answer}"
    );
    // What a line carries beside it is refused with it, each request answered and each
    // call, read or prompt recorded; so is a message that says both.
    let big = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"experimental": {"pad": "x".repeat(70_000)}},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let call = json!({"jsonrpc": "2.0", "id": "c", "method": "tools/call",
        "params": {"name": "forget_text", "arguments": {"text": "a", "confirm": true}}});
    let read = json!({"jsonrpc": "2.0", "id": "r", "method": "resources/read",
        "params": {"uri": "notes://all"}});
    raw.line(&format!("{big}{call}{read}")).await;
    let mut ids: Vec<_> = [raw.next().await, raw.next().await, raw.next().await]
        .iter()
        .inspect(|a| assert_eq!(a["error"]["code"], -32600, "{a}"))
        .map(|a| a["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, ["c", "i", "r"]);
    let both = big.to_string().replacen(
        r#""method":"initialize""#,
        r#""method":"initialize","method":"resources/read""#,
        1,
    );
    raw.line(&both).await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], "i", "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let mut recorded: Vec<_> = sink
        .records()
        .iter()
        .map(|r| (r.request_id.clone().unwrap_or_default(), r.kind, r.outcome))
        .collect();
    recorded.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        recorded,
        [
            ("c".to_owned(), CallKind::Tool, Outcome::Denied),
            ("i".to_owned(), CallKind::Resource, Outcome::Denied),
            ("r".to_owned(), CallKind::Resource, Outcome::Denied),
        ]
    );
    raw.initialize().await;
    raw.line(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#)
        .await;
    assert_eq!(raw.next().await["id"], 2);
}

/// A call a person is asked to confirm is held, parsed, until the answer: one whose
/// message is over 64 KiB (a `_meta` of `[[],[],…]`, which held 68 MB) is refused 413
/// `too_large_to_confirm` without a question, and recorded; a small one is asked.
#[tokio::test]
async fn a_call_too_large_to_hold_is_not_asked_about() {
    let sink = MemorySink::new();
    let server = builder(false)
        .audit(sink.clone())
        .confirmation(aac_tools::confirm::ConfirmPolicy::User)
        .build()
        .unwrap();
    let mut raw = eliciting(server, 1 << 20).await;
    let padding = vec![json!([]); 40_000];
    raw.line(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "forget_text", "arguments": {"text": "a", "confirm": true},
            "_meta": {"pad": padding}}})
        .to_string(),
    )
    .await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], 3, "{answer}");
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("too_large_to_confirm"), "{answer}");
    let records = sink.records();
    let record = records.last().expect("its record");
    assert_eq!(
        (record.status, record.reason.as_deref()),
        (413, Some("too_large_to_confirm"))
    );
    // A call of ordinary size is asked about.
    raw.line(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"forget_text","arguments":{"text":"b","confirm":true}}}"#,
    )
    .await;
    assert_eq!(raw.next().await["method"], "elicitation/create");
}

/// An `initialize` of many small values is refused under 64 KiB too: each value is kept
/// parsed for the session (64 KiB of `{"":0}` took 6 MB a session); one of a few hundred
/// is taken.
#[tokio::test]
async fn an_initialize_of_too_many_values_is_refused() {
    let mut raw = Raw::connect(server(false), "all", 1 << 20);
    let initialize = |id: u64, objects: usize| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"experimental": (0..objects)
                .map(|i| (format!("k{i}"), json!({"": 0})))
                .collect::<serde_json::Map<_, _>>()},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string()
    };
    let many = initialize(1, 2_000);
    assert!(many.len() < 64 * 1024);
    raw.line(&many).await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("1024 JSON values"),
        "{answer}"
    );
    raw.line(&initialize(2, 200)).await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
}

/// The 16 MiB limit is the message's: a message of exactly 16 MiB is read whatever ends
/// its line (`\n`, `\r\n`, or nothing at the end of the input), and one byte more is not.
#[tokio::test]
async fn the_line_limit_counts_the_message_not_its_line_ending() {
    const LIMIT: usize = 16 * 1024 * 1024;
    let ping = |id: u32, size: usize| {
        let start =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"_meta":{{"x":""#);
        let end = r#""}}}"#;
        let message = format!("{start}{}{end}", "a".repeat(size - start.len() - end.len()));
        assert_eq!(message.len(), size);
        message
    };
    let refused = |answer: &Value| {
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("limited to"))
    };
    for (ending, last) in [("\n", false), ("\r\n", false), ("", true)] {
        let sink = MemorySink::new();
        let server = builder(false).audit(sink.clone()).build().unwrap();
        let raw = Raw::start(server, "all", 1 << 20).await;
        let (mut lines, mut write) = (raw.lines, raw.write);
        let (at, over) = (ping(1, LIMIT), ping(2, LIMIT + 1));
        let writer = tokio::spawn(async move {
            if last {
                // The last line of the input, without a line ending.
                write.write_all(over.as_bytes()).await.unwrap();
                write.write_all(b"\n").await.unwrap();
                write.write_all(at.as_bytes()).await.unwrap();
            } else {
                write.write_all(at.as_bytes()).await.unwrap();
                write.write_all(ending.as_bytes()).await.unwrap();
                write.write_all(over.as_bytes()).await.unwrap();
                write.write_all(ending.as_bytes()).await.unwrap();
            }
            // The end of the input (a half of the duplex dropped does not say so).
            write.shutdown().await.unwrap();
        });
        let mut answers = std::collections::BTreeMap::new();
        for _ in 0..2 {
            let answer = next_message(&mut lines, 60).await;
            answers.insert(answer["id"].as_u64().unwrap(), answer);
        }
        writer.await.unwrap();
        assert!(!refused(&answers[&1]), "{ending:?}: {}", answers[&1]);
        assert!(refused(&answers[&2]), "{ending:?}: {}", answers[&2]);
    }
}
