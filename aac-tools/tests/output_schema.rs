//! A tool's advertised `outputSchema` describes its output as it is written: hosts (the
//! TypeScript and Python SDKs) check `structuredContent` against it and refuse an answer
//! that does not match.

use std::sync::Arc;

use aac_tools::{
    CallRequest, Credentials, Principal, Registry, RegistryError, Server, ToolError, mcp_tool,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

/// `tool` called with no arguments by a principal holding `things:read`.
async fn call(server: &Server, tool: &str) -> aac_tools::CallResponse {
    let caller = Credentials::Verified(Arc::new(Principal::new("c", ["things:read"])));
    server
        .call(CallRequest::new(tool, Some(json!({}))).credentials(caller))
        .await
}

#[derive(Serialize, JsonSchema)]
struct Tagged {
    id: String,
    /// Left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
    /// Always written, `null` when absent.
    note: Option<String>,
}

/// A thing with its tags.
#[mcp_tool(read_only, scope = "things:read")]
async fn tagged_thing() -> Result<Tagged, ToolError> {
    Ok(Tagged {
        id: "t1".into(),
        tags: Vec::new(),
        note: None,
    })
}

/// The output leaves out an empty `tags` (its schema must not require it), and always
/// writes `note` (its schema says so). Generated as the type is read, the schema required
/// `tags`, and the answer failed every host's check.
#[tokio::test]
async fn the_output_schema_describes_the_output_as_written() {
    let registry = Registry::collect_named(&["tagged_thing"]).unwrap();
    let schema = registry.get("tagged_thing").unwrap().json()["outputSchema"].clone();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    assert!(!required.contains(&"tags"), "{schema}");
    assert!(required.contains(&"note"), "{schema}");
    let server = Server::builder(registry)
        .audit(aac_tools::audit::MemorySink::new())
        .build()
        .unwrap();
    let response = call(&server, "tagged_thing").await;
    let output = response
        .result()
        .unwrap()
        .structured_value()
        .unwrap()
        .clone();
    assert_eq!(output, json!({"id": "t1", "note": null}));
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(
        validator.is_valid(&output),
        "{output} against {schema}: {:?}",
        validator
            .iter_errors(&output)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    );
}

#[derive(Serialize, JsonSchema)]
struct Mean {
    mean: f64,
    count: u32,
}

/// The mean of nothing: NaN, which JSON writes as `null`.
#[mcp_tool(read_only, scope = "things:read")]
async fn mean_of_nothing() -> Result<Mean, ToolError> {
    Ok(Mean {
        mean: f64::NAN,
        count: 0,
    })
}

/// An output its own schema refuses (a NaN written `null` where the schema says
/// `number`) is not sent as a success every host would refuse: the call fails 500
/// `invalid_output`, naming where, and is recorded so. (It was answered, and recorded,
/// as a success; the TypeScript and Python SDKs threw on it.)
#[tokio::test]
async fn an_output_its_schema_refuses_is_an_error_not_a_success() {
    let sink = aac_tools::audit::MemorySink::new();
    let server =
        Server::builder(Registry::collect_named(&["mean_of_nothing", "tagged_thing"]).unwrap())
            .audit(sink.clone())
            .build()
            .unwrap();
    let response = call(&server, "mean_of_nothing").await;
    let err = response.error().expect("refused");
    assert_eq!(
        (err.status().code(), err.reason()),
        (500, "invalid_output"),
        "{err:?}"
    );
    assert!(err.message().contains("`/mean`"), "{}", err.message());
    // An output that matches is sent as before.
    let fine = call(&server, "tagged_thing").await;
    assert!(fine.error().is_none(), "{:?}", fine.error());
    let records = sink.records();
    let reasons: Vec<(Option<&str>, u16)> = records
        .iter()
        .map(|r| (r.reason.as_deref(), r.status))
        .collect();
    assert_eq!(reasons, [(Some("invalid_output"), 500), (None, 200)]);
}

#[derive(Serialize, JsonSchema)]
struct Ticket {
    /// A pattern no validator compiles (its parenthesis is not opened).
    #[schemars(regex(pattern = r"^[A-Z]+-[0-9]+)$"))]
    key: String,
}

/// A ticket.
#[mcp_tool(read_only, scope = "things:read")]
async fn broken_ticket() -> Result<Ticket, ToolError> {
    Ok(Ticket { key: "AB-1".into() })
}

/// An output schema that does not compile stops the start-up, naming the tool, as an
/// input schema does. (The server started, advertised the schema, and sent every output
/// unchecked, with a warning at the first call.)
#[test]
fn an_output_schema_that_does_not_compile_stops_the_start_up() {
    let err = Registry::collect_named(&["broken_ticket", "tagged_thing"]).unwrap_err();
    let said = err.to_string();
    match err {
        RegistryError::InvalidSchema { tool, why } => {
            assert_eq!(tool, "broken_ticket");
            assert!(
                why.starts_with("the output schema does not compile: "),
                "{why}"
            );
            assert!(why.contains(r"^[A-Z]+-[0-9]+)$"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert!(said.contains("`broken_ticket`"), "{said}");
}

#[derive(Serialize, JsonSchema)]
enum Expr {
    Num(i64),
    Neg(Box<Expr>),
}

/// Minus one, as an expression: a recursive type that is not an object at its root.
#[mcp_tool(read_only, scope = "things:read")]
async fn minus_one() -> Result<Expr, ToolError> {
    Ok(Expr::Neg(Box::new(Expr::Num(1))))
}

/// A recursive output that is wrapped in `{"result": …}` is sent, and matches the schema
/// advertised: its `{"$ref": "#"}` is the type, not the wrapper. (Every correct output
/// was refused 500 `invalid_output`.)
#[tokio::test]
async fn a_wrapped_recursive_output_is_sent_and_matches_its_schema() {
    let registry = Registry::collect_named(&["minus_one"]).unwrap();
    let schema = registry.get("minus_one").unwrap().json()["outputSchema"].clone();
    let server = Server::builder(registry)
        .audit(aac_tools::audit::MemorySink::new())
        .build()
        .unwrap();
    let response = call(&server, "minus_one").await;
    assert!(response.error().is_none(), "{:?}", response.error());
    let output = response.result().unwrap().structured_value().unwrap();
    assert_eq!(*output, json!({"result": {"Neg": {"Num": 1}}}));
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(output), "{output} against {schema}");
    assert!(!validator.is_valid(&json!({"result": {"Neg": {"result": {"Num": 1}}}})));
}
