//! A `tools/call` through the whole pipeline in process (`Server::call`): authentication,
//! the scope check, the confirm guard, validation against the advertised schema, the
//! extraction `#[mcp_tool]` generates, the handler and the audit record.
//!
//! Input: one byte choosing the tool (or, past the known ones, the rest up to a NUL is a
//! tool name), then the arguments as JSON (anything that does not parse is sent as a JSON
//! string). Oracles: never a panic; exactly one audit record per call, within
//! `MAX_RECORD_BYTES`; a destructive handler runs only with `confirm: true`; a handler
//! runs only with arguments that match the advertised schema.
#![no_main]

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use aac_tools::audit::{MAX_RECORD_BYTES, MemorySink};
use aac_tools::{
    CallRequest, Principal, Registry, Server, StaticTokens, Text, ToolError, mcp_tool,
};
use libfuzzer_sys::fuzz_target;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

mod things;

use things::DELETED;

const TOKEN: &str = "fuzz-token";

/// A kind, as an enum.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Bug,
    Feature,
}

/// Nested arguments.
#[derive(Debug, Deserialize, JsonSchema)]
struct Label {
    /// The label.
    #[schemars(length(min = 1, max = 20))]
    name: String,
    /// A colour.
    color: Option<u32>,
}

/// Arguments with most shapes a schema has.
#[derive(Debug, Deserialize, JsonSchema)]
struct FileArgs {
    /// A title.
    #[schemars(length(min = 1, max = 200))]
    title: String,
    /// A count.
    #[schemars(range(min = 1, max = 100))]
    count: Option<u8>,
    /// The kind.
    kind: Kind,
    /// Labels.
    #[serde(default)]
    labels: Vec<Label>,
    /// A ratio.
    ratio: Option<f64>,
}

static FILED: AtomicUsize = AtomicUsize::new(0);

/// File something: every argument shape.
#[mcp_tool(scope = "things:write", audit_fields = ["title", "kind"])]
async fn file_thing(args: FileArgs) -> Result<Text, ToolError> {
    assert!(!args.title.is_empty() && args.title.chars().count() <= 200);
    assert!(args.count.is_none_or(|c| (1..=100).contains(&c)));
    assert!(
        args.labels
            .iter()
            .all(|l| (1..=20).contains(&l.name.chars().count()))
    );
    let colours: u64 = args
        .labels
        .iter()
        .filter_map(|l| l.color)
        .map(u64::from)
        .sum();
    let ratio = args.ratio.unwrap_or(0.0);
    FILED.fetch_add(1, Ordering::Relaxed);
    Ok(Text(format!(
        "{} {:?} {} {colours} {ratio}",
        args.title,
        args.kind,
        args.labels.len()
    )))
}

const TOOLS: [&str; 4] = ["file_thing", "delete_thing", "read_things", "read_secrets"];

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
        .build()
        .expect("the server");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    Fixture {
        server,
        sink,
        runtime,
    }
});

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let (tool, body) = match TOOLS.get(usize::from(choice) % 8) {
        Some(tool) => ((*tool).to_owned(), rest),
        None => match rest.iter().position(|&b| b == 0) {
            Some(nul) => (
                String::from_utf8_lossy(&rest[..nul]).into_owned(),
                &rest[nul + 1..],
            ),
            None => (String::from_utf8_lossy(rest).into_owned(), &[][..]),
        },
    };
    let arguments = if body.is_empty() {
        None
    } else {
        Some(
            serde_json::from_slice::<Value>(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned())),
        )
    };
    let confirmed = matches!(
        arguments.as_ref().and_then(|a| a.get("confirm")),
        Some(Value::Bool(true))
    );
    let fixture = &*FIXTURE;
    let before = fixture.sink.records().len();
    let deleted = DELETED.load(Ordering::Relaxed);
    let response = fixture.runtime.block_on(
        fixture
            .server
            .call(CallRequest::new(tool.clone(), arguments).bearer(TOKEN)),
    );
    let records = fixture.sink.records();
    assert_eq!(records.len(), before + 1, "one record per call");
    let record = records.last().expect("the record");
    let size = serde_json::to_vec(record).expect("a record is JSON").len();
    assert!(size <= MAX_RECORD_BYTES, "a record of {size} bytes");
    if DELETED.load(Ordering::Relaxed) != deleted {
        assert!(confirmed, "a destructive handler ran without confirm: true");
        assert!(response.result().is_ok());
    }
    if tool == "read_secrets" {
        assert!(
            response.result().is_err(),
            "a tool past the token's scopes ran"
        );
    }
    // Keep the sink small: it is only read for the last record.
    if records.len() > 64 {
        fixture.sink.clear();
    }
});
