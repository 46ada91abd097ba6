//! A result is bounded as a request is: past `ServerBuilder::max_output_bytes` the call
//! fails 500 `output_too_large`, recorded, and nothing of the output is sent (a list
//! without a page answered 120 MB over REST and 260 MB over `/mcp`, held whole for as long
//! as its client took to read it).

use std::sync::Arc;

use aac_tools::audit::{MemorySink, Outcome};
use aac_tools::{
    CallRequest, Credentials, Principal, Registry, Server, Status, Text, ToolError, mcp_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Size {
    /// How many bytes.
    bytes: usize,
}

/// Text of the size asked.
#[mcp_tool(read_only, scope = "things:read")]
async fn text_of(size: Size) -> Result<Text, ToolError> {
    Ok(Text("x".repeat(size.bytes)))
}

#[derive(Serialize, JsonSchema)]
struct Many {
    items: Vec<String>,
}

/// A structured result of the size asked (its JSON text is what is counted).
#[mcp_tool(read_only, scope = "things:read")]
async fn many_of(size: Size) -> Result<Many, ToolError> {
    Ok(Many {
        items: vec!["y".repeat(100); size.bytes / 100],
    })
}

fn server(sink: &MemorySink, bound: Option<usize>) -> Server {
    let builder = Server::builder(Registry::collect_named(&["text_of", "many_of"]).unwrap())
        .audit(sink.clone());
    match bound {
        Some(bound) => builder.max_output_bytes(bound),
        None => builder,
    }
    .build()
    .unwrap()
}

async fn call(server: &Server, tool: &str, bytes: usize) -> aac_tools::CallResponse {
    let caller = Credentials::Verified(Arc::new(Principal::new("c", ["things:read"])));
    server
        .call(CallRequest::new(tool, Some(json!({ "bytes": bytes }))).credentials(caller))
        .await
}

#[tokio::test]
async fn a_result_past_the_bound_is_refused_and_recorded() {
    let sink = MemorySink::new();
    let server = server(&sink, Some(64 * 1024));
    assert_eq!(server.max_output_bytes(), 64 * 1024);
    for tool in ["text_of", "many_of"] {
        let under = call(&server, tool, 32 * 1024).await;
        assert!(under.error().is_none(), "{tool}: {:?}", under.error());
        let over = call(&server, tool, 128 * 1024).await;
        let err = over.error().expect("over the bound");
        assert_eq!(
            (err.status(), err.reason()),
            (Status::Internal, "output_too_large"),
            "{tool}"
        );
        assert!(err.message().contains("65536"), "{err}");
        let record = sink.records().pop().unwrap();
        assert_eq!(
            (record.tool.as_str(), record.outcome, record.status),
            (tool, Outcome::Error, 500)
        );
        assert_eq!(record.reason.as_deref(), Some("output_too_large"));
    }
}

#[tokio::test]
async fn the_default_bound_is_8_mib() {
    let sink = MemorySink::new();
    let server = server(&sink, None);
    assert_eq!(
        server.max_output_bytes(),
        aac_tools::DEFAULT_MAX_OUTPUT_BYTES
    );
    assert_eq!(aac_tools::DEFAULT_MAX_OUTPUT_BYTES, 8 << 20);
    assert!(call(&server, "text_of", 4 << 20).await.error().is_none());
    let over = call(&server, "text_of", (8 << 20) + 1).await;
    assert_eq!(over.error().unwrap().reason(), "output_too_large");
}
