//! Crash safety of the audit trail: a real MCP server process over stdio
//! (`examples/audit_stdio.rs`, built by this test) is killed with SIGKILL in the middle
//! of a stream of calls. Every call whose answer the client received has its record,
//! no call has two, and the hash chain still verifies, across several crashes of the
//! same database.

#![cfg(all(feature = "mcp", feature = "sqlite"))]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use aac_tools::audit::{AuditQuery, Outcome, open_reader, verify_chain};
use serde_json::{Value, json};

/// Build the example server with the features this test was built with, and return
/// the path of its executable.
fn server_binary() -> PathBuf {
    let mut features = Vec::new();
    for (on, name) in [
        (cfg!(feature = "sqlite"), "sqlite"),
        (cfg!(feature = "mcp"), "mcp"),
        (cfg!(feature = "http"), "http"),
        (cfg!(feature = "jwt"), "jwt"),
        (cfg!(feature = "host"), "host"),
    ] {
        if on {
            features.push(name);
        }
    }
    let output = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--quiet",
            "-p",
            "aac-tools",
            "--example",
            "audit_stdio",
            "--message-format=json",
            "--no-default-features",
            "--features",
            &features.join(","),
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "the example server builds");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "audit_stdio")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the example's executable")
}

/// The server process; killed (SIGKILL) and reaped on drop.
struct ServerProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl ServerProcess {
    fn start(binary: &Path, db: &Path) -> ServerProcess {
        let mut child = Command::new(binary)
            .arg(db)
            .env("AAC_TOKEN", "writer-token")
            .env("RUST_LOG", "off")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the server starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = ServerProcess {
            child,
            stdin,
            stdout,
        };
        server.send(&json!({
            "jsonrpc": "2.0", "id": "init", "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "audit-kill-test", "version": "0"}
            }
        }));
        let answer = server.next_answer().expect("initialize is answered");
        assert_eq!(answer["id"], "init", "{answer}");
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next JSON-RPC response (notifications and requests from the server skipped),
    /// or `None` when stdout closed.
    fn next_answer(&mut self) -> Option<Value> {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message.get("id").is_some()
                && (message.get("result").is_some() || message.get("error").is_some())
            {
                return Some(message);
            }
        }
    }

    fn kill(&mut self) {
        // `Child::kill` is SIGKILL on Unix.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Call `n`: every fifth one a destructive call without `confirm` (refused, 400),
/// the others a write.
fn call(n: i64) -> Value {
    let (name, arguments) = if n % 5 == 0 {
        ("clear_notes", json!({"n": n}))
    } else {
        ("add_note", json!({"n": n, "text": format!("note {n}")}))
    };
    json!({
        "jsonrpc": "2.0", "id": n, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}
    })
}

/// What the client learnt: for each answered call, whether it was refused.
type Answered = BTreeMap<i64, bool>;

/// Stream calls `first..` with `window` in flight; after `answers` answers, SIGKILL the
/// server while the rest of the window is still in flight.
fn stream_then_kill(
    server: &mut ServerProcess,
    first: i64,
    window: i64,
    answers: usize,
) -> Answered {
    let mut answered = Answered::new();
    let mut next = first;
    for _ in 0..window {
        server.send(&call(next));
        next += 1;
    }
    while answered.len() < answers {
        let answer = server
            .next_answer()
            .expect("the server answers until killed");
        let n = answer["id"].as_i64().expect("a numeric id");
        let result = &answer["result"];
        assert!(result.is_object(), "{answer}");
        let refused = result["isError"] == true;
        if refused {
            assert!(result.get("structuredContent").is_none(), "{answer}");
            let text = result["content"][0]["text"].as_str().unwrap();
            let body: Value = serde_json::from_str(text).unwrap();
            assert_eq!(body["reason"], "destructive_flag_missing", "{answer}");
        } else {
            assert_eq!(result["structuredContent"]["n"], n, "{answer}");
        }
        assert!(answered.insert(n, refused).is_none(), "one answer per call");
        server.send(&call(next));
        next += 1;
    }
    server.kill();
    answered
}

#[test]
fn sigkill_mid_stream_loses_no_answered_record_and_keeps_the_chain() {
    let binary = server_binary();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let mut all_answered = Answered::new();
    let mut first = 1;
    for round in 0..3 {
        let mut server = ServerProcess::start(&binary, &db);
        let answered = stream_then_kill(&mut server, first, 16, 150);
        first += 1000;

        let conn = open_reader(&db).unwrap();
        let report = verify_chain(&conn).unwrap();
        assert!(report.is_intact(), "round {round}: {report}");

        let records = AuditQuery::new().fetch(&conn).unwrap();
        let mut recorded: BTreeMap<i64, Outcome> = BTreeMap::new();
        for stored in &records {
            let r = &stored.record;
            assert_eq!(r.transport, "stdio");
            assert_eq!(r.principal.as_deref(), Some("writer"));
            let n = r.arguments["n"].as_i64().expect("n is kept verbatim");
            assert_eq!(
                r.request_id.as_deref(),
                Some(n.to_string().as_str()),
                "the JSON-RPC id is the request id"
            );
            assert!(
                recorded.insert(n, r.outcome).is_none(),
                "round {round}: call {n} has two records"
            );
        }
        all_answered.extend(answered);
        let missing: BTreeSet<i64> = all_answered
            .keys()
            .filter(|n| !recorded.contains_key(n))
            .copied()
            .collect();
        assert!(
            missing.is_empty(),
            "round {round}: answered calls without a record: {missing:?}"
        );
        for (n, refused) in &all_answered {
            let expected = if *refused {
                Outcome::Denied
            } else {
                Outcome::Success
            };
            assert_eq!(recorded[n], expected, "call {n}");
        }
        // Calls in flight at the kill may or may not have a record, never more than
        // the window.
        assert!(recorded.len() - all_answered.len() <= 16 * (round + 1));
    }
    // Every successful write that was answered is in the application's table too.
    let conn = open_reader(&db).unwrap();
    let notes: i64 = conn
        .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))
        .unwrap();
    assert!(notes as usize >= all_answered.values().filter(|r| !**r).count());
}
