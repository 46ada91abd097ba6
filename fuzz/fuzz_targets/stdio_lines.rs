//! The stdio framing end to end: `aac_tools::mcp::serve_io`
//! over an in-memory input (an `initialize` handshake, then the fuzzer's bytes as lines)
//! with a MemorySink. Oracles: no panic; the session ends (libFuzzer's `-timeout`); every line that the strict
//! reading (serde_json) takes as a `tools/call` (an object, or a batch holding one)
//! leaves at least one audit record; every record within MAX_RECORD_BYTES; a destructive
//! handler never runs without `confirm: true` in some line; a tool beyond the token's
//! scopes never runs.
#![no_main]

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use aac_tools::audit::{MAX_RECORD_BYTES, MemorySink};
use aac_tools::{Principal, Registry, Server, StaticTokens};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

mod things;

use things::{DELETED, SECRETS};

const TOKEN: &str = "fuzz-token";

struct Fixture {
    server: Server,
    sink: MemorySink,
    runtime: tokio::runtime::Runtime,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let sink = MemorySink::new();
    let tokens = StaticTokens::new().with(
        TOKEN,
        Principal::new("fuzzer", ["things:read", "things:write"]),
    );
    let server = Server::builder(Registry::collect().expect("the registry"))
        .verifier(tokens)
        .audit(sink.clone())
        .rate_limit_unauthenticated(None)
        .build()
        .expect("the server");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    Fixture {
        server,
        sink,
        runtime,
    }
});

const HELLO: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":\"init\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"fuzz\",\"version\":\"1\"}}}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

fn is_call(v: &Value) -> bool {
    v.get("method").and_then(Value::as_str) == Some("tools/call")
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 16 * 1024 {
        return;
    }
    // The strict reading of each line: how many lines hold a tools/call.
    let mut strict_calls = 0usize;
    for line in data.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Array(batch)) if batch.iter().any(is_call) => strict_calls += 1,
            Ok(v) if is_call(&v) => strict_calls += 1,
            _ => {}
        }
    }
    let confirm_somewhere = data.windows(7).any(|w| w == b"confirm");
    let mut input = HELLO.to_vec();
    input.extend_from_slice(data);
    if !input.ends_with(b"\n") {
        input.push(b'\n');
    }
    let fixture = &*FIXTURE;
    fixture.sink.clear();
    let deleted = DELETED.load(Ordering::Relaxed);
    let server = fixture.server.clone();
    let ended = fixture.runtime.block_on(async move {
        aac_tools::mcp::serve_io(
            server,
            Some(TOKEN.to_owned()),
            std::io::Cursor::new(input),
            tokio::io::sink(),
        )
        .await
    });
    let records = fixture.sink.records();
    for record in &records {
        let size = serde_json::to_vec(record).expect("a record is JSON").len();
        assert!(size <= MAX_RECORD_BYTES, "a record of {size} bytes");
    }
    assert_eq!(
        SECRETS.load(Ordering::Relaxed),
        0,
        "a tool past the token's scopes ran"
    );
    if DELETED.load(Ordering::Relaxed) != deleted {
        assert!(
            confirm_somewhere,
            "a destructive handler ran without any confirm"
        );
    }
    match ended {
        Ok(()) => assert!(
            records.len() >= strict_calls,
            "{} tools/call lines (strict reading) but {} records: {:?}",
            strict_calls,
            records.len(),
            String::from_utf8_lossy(data)
        ),
        Err(err) => {
            // The session failed: report it once per distinct message (not an oracle).
            eprintln!("session ended with an error: {err}");
        }
    }
});
