//! Records are bounded whatever a caller sends: a huge tool name, a million-byte
//! arguments object of many keys, a huge kept field, keys made of control characters.
//! What is cut is replaced by its hash and a marker, never dropped silently.

use aac_tools::audit::{AuditRecord, CUT_KEY, MAX_ARGUMENT_KEYS, MAX_RECORD_BYTES, MemorySink};
use aac_tools::{
    CallRequest, Principal, Registry, Server, StaticTokens, Text, ToolError, mcp_tool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

#[derive(Deserialize, JsonSchema)]
struct Labelled {
    label: String,
}

/// Keeps its label in the record.
#[mcp_tool(read_only, scope = "b:read", audit_fields = ["label"])]
async fn labelled(args: Labelled) -> Result<Text, ToolError> {
    Ok(Text(args.label.len().to_string()))
}

fn server(sink: MemorySink) -> Server {
    server_for(sink, Principal::new("p", ["b:read"]))
}

/// The server, its token `t` standing for `principal`.
fn server_for(sink: MemorySink, principal: Principal) -> Server {
    Server::builder(Registry::collect().unwrap())
        .verifier(StaticTokens::new().with("t", principal))
        .audit(sink)
        .build()
        .unwrap()
}

async fn record_of(request: CallRequest) -> AuditRecord {
    let sink = MemorySink::new();
    server(sink.clone()).call(request.bearer("t")).await;
    let records = sink.records();
    assert_eq!(records.len(), 1);
    let record = records.into_iter().next().unwrap();
    let size = serde_json::to_vec(&record).unwrap().len();
    assert!(size <= MAX_RECORD_BYTES, "a record of {size} bytes");
    record
}

#[tokio::test]
async fn a_huge_tool_name_is_cut_and_marked() {
    let name = "x".repeat(1 << 20);
    let record = record_of(CallRequest::new(name, None)).await;
    assert!(record.tool.len() < 256, "{}", record.tool.len());
    assert!(record.tool.starts_with("xxxx"));
    assert!(record.tool.contains("sha256:"), "{}", record.tool);
    assert!(record.tool.contains("1048576 bytes"), "{}", record.tool);
    assert_eq!(record.reason.as_deref(), Some("unknown_tool"));
}

#[tokio::test]
async fn many_keys_are_folded_into_one_marked_entry() {
    let arguments: Map<String, Value> = (0..110_000)
        .map(|i| (format!("k{i:06}"), json!(i)))
        .collect();
    let record = record_of(CallRequest::new("labelled", Some(Value::Object(arguments)))).await;
    let kept = record.arguments.as_object().unwrap();
    assert_eq!(kept.len(), MAX_ARGUMENT_KEYS + 1);
    let folded = kept[CUT_KEY].as_str().unwrap();
    assert!(folded.starts_with("sha256:"), "{folded}");
    assert!(
        folded.ends_with(&format!("{} more keys", 110_000 - MAX_ARGUMENT_KEYS)),
        "{folded}"
    );
}

#[tokio::test]
async fn a_huge_kept_field_is_replaced_by_its_hash() {
    let label = "l".repeat(100_000);
    let record = record_of(CallRequest::new("labelled", Some(json!({"label": label})))).await;
    let kept = record.arguments["label"].as_str().unwrap();
    assert!(
        kept.starts_with("sha256:") && kept.ends_with("bytes, cut"),
        "{kept}"
    );
    // a small one is kept verbatim
    let record = record_of(CallRequest::new(
        "labelled",
        Some(json!({"label": "small"})),
    ))
    .await;
    assert_eq!(record.arguments["label"], "small");
}

#[tokio::test]
async fn keys_that_escape_to_a_large_record_cut_the_arguments() {
    let key = |i: usize| format!("{i:02}{}", "\u{1}".repeat(62));
    let arguments: Map<String, Value> =
        (0..MAX_ARGUMENT_KEYS).map(|i| (key(i), json!(1))).collect();
    let record = record_of(
        CallRequest::new("labelled", Some(Value::Object(arguments))).request_id("r".repeat(5000)),
    )
    .await;
    let args = record.arguments.as_object().unwrap();
    assert_eq!(args.len(), 1, "{args:?}");
    assert!(
        args[CUT_KEY]
            .as_str()
            .unwrap()
            .contains("cut: the record was over")
    );
    assert!(record.request_id.unwrap().contains("5000 bytes"));
}

/// A token's claims are the token issuer's, and a JWT's `sub`, workspace or scope list may
/// be of any length: the record keeps each name to its bound, and at most `MAX_SCOPES`
/// scopes, the rest folded into one marked entry.
#[tokio::test]
async fn a_token_s_huge_claims_are_cut_and_marked() {
    use aac_tools::audit::{MAX_KEY_BYTES, MAX_NAME_BYTES, MAX_SCOPES};
    let mut scopes: Vec<String> = (0..500)
        .map(|i| format!("s{i:03}:{}", "r".repeat(900)))
        .collect();
    scopes.push("b:read".to_owned());
    let principal = Principal::new("u".repeat(40_000), scopes).in_workspace("w".repeat(40_000));
    let sink = MemorySink::new();
    let server = server_for(sink.clone(), principal);
    let long_key = "k".repeat(1000);
    let arguments = json!({ "label": "x", long_key.clone(): 1 });
    server
        .call(CallRequest::new("labelled", Some(arguments)).bearer("t"))
        .await;
    let records = sink.records();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    let size = serde_json::to_vec(record).unwrap().len();
    assert!(size <= MAX_RECORD_BYTES, "a record of {size} bytes");
    for (what, text) in [
        ("principal", record.principal.as_deref().unwrap()),
        ("workspace", record.workspace.as_deref().unwrap()),
    ] {
        assert!(text.len() <= MAX_NAME_BYTES, "{what}: {} bytes", text.len());
        assert!(
            text.ends_with(", 40000 bytes]") && text.contains("sha256:"),
            "{what}: {text}"
        );
    }
    assert_eq!(record.scopes_provided.len(), MAX_SCOPES);
    assert!(
        record
            .scopes_provided
            .iter()
            .all(|s| s.len() <= MAX_NAME_BYTES)
    );
    let folded = record.scopes_provided.last().unwrap();
    assert!(
        folded.starts_with(CUT_KEY)
            && folded.ends_with(&format!("{} more scopes]", 501 - (MAX_SCOPES - 1))),
        "{folded}"
    );
    // A key cut is in its bound too, marker included.
    let keys: Vec<&String> = record.arguments.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k.len() <= MAX_KEY_BYTES), "{keys:?}");
    assert!(
        keys.iter()
            .any(|k| k.starts_with("kkk") && k.ends_with("1000 bytes]")),
        "{keys:?}"
    );
}

/// Scopes of control characters escape to six bytes each in JSON: 64 of 128 bytes would
/// make a record of about 48 KB; past the bound they are folded too.
#[tokio::test]
async fn scopes_that_escape_to_a_large_record_are_folded() {
    let mut scopes: Vec<String> = (0..63)
        .map(|i| format!("s{i:02}:{}", "\u{1}".repeat(120)))
        .collect();
    scopes.push("b:read".to_owned());
    let sink = MemorySink::new();
    let server = server_for(sink.clone(), Principal::new("p", scopes));
    server
        .call(CallRequest::new("labelled", Some(json!({"label": "x"}))).bearer("t"))
        .await;
    let records = sink.records();
    assert_eq!(records.len(), 1);
    let size = serde_json::to_vec(&records[0]).unwrap().len();
    assert!(size <= MAX_RECORD_BYTES, "a record of {size} bytes");
    assert_eq!(
        records[0].scopes_provided.len(),
        1,
        "{:?}",
        records[0].scopes_provided
    );
    assert!(records[0].scopes_provided[0].contains("64 scopes, cut"));
}
