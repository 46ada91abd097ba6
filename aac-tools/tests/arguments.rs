//! Arguments that pass the input schema reach the handler as its type: JSON Schema counts
//! `5.0` as an integer, and so does the extraction; what the type still refuses is a 400
//! that points at the value, in our words.

use aac_tools::audit::{Check, MemorySink, Outcome};
use aac_tools::{
    CallRequest, Principal, Registry, Server, StaticTokens, Status, Text, ToolError, mcp_tool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Sized {
    /// How many.
    n: u32,
    /// Where.
    #[serde(default)]
    at: Option<Place>,
}

#[derive(Deserialize, JsonSchema)]
struct Place {
    /// Rows.
    rows: Vec<u32>,
}

/// Echo the numbers.
#[mcp_tool(read_only, scope = "t:read")]
async fn sized(args: Sized) -> Result<Text, ToolError> {
    let rows = args.at.map(|p| p.rows).unwrap_or_default();
    Ok(Text(format!("{} {rows:?}", args.n)))
}

fn server(sink: &MemorySink) -> Server {
    Server::builder(Registry::collect_module(module_path!()).unwrap())
        .verifier(StaticTokens::new().with("t", Principal::new("t", ["t:read"])))
        .audit(sink.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_integer_written_as_a_float_is_an_integer() {
    let sink = MemorySink::new();
    let server = server(&sink);
    let call = |arguments| server.call(CallRequest::new("sized", Some(arguments)).bearer("t"));
    let answer = call(json!({"n": 5.0, "at": {"rows": [1.0, 2, 3e0]}})).await;
    assert!(
        answer.result().is_ok(),
        "5.0 is an integer, as the schema says"
    );
    assert_eq!(answer.to_mcp_json()["content"][0]["text"], "5 [1, 2, 3]");
    assert_eq!(sink.records().pop().unwrap().outcome, Outcome::Success);

    // Not an integer: refused by the schema, at its pointer.
    let answer = call(json!({"n": 5.5})).await;
    let err = answer.error().expect("refused");
    assert_eq!(
        (err.status(), err.reason()),
        (Status::BadRequest, "invalid_arguments")
    );
    assert!(err.message().contains("`/n`"), "{err:?}");
}

#[tokio::test]
async fn what_the_type_refuses_after_the_schema_points_at_the_value() {
    let sink = MemorySink::new();
    let server = server(&sink);
    // Past `u32`, which the schema does not bound above.
    for (arguments, pointer) in [
        (json!({"n": 5_000_000_000_u64}), "/n"),
        (
            json!({"n": 1, "at": {"rows": [1, 5_000_000_000_u64]}}),
            "/at/rows/1",
        ),
    ] {
        let answer = server
            .call(CallRequest::new("sized", Some(arguments.clone())).bearer("t"))
            .await;
        let err = answer.error().expect("refused");
        assert_eq!(
            (err.status(), err.reason()),
            (Status::BadRequest, "invalid_arguments"),
            "{arguments}"
        );
        assert!(
            err.message().contains(&format!("`{pointer}`")),
            "{arguments}: {err:?}"
        );
        // Recorded as the refusal of the arguments it is, not as the tool's error.
        let record = sink.records().pop().unwrap();
        assert_eq!(
            (record.outcome, record.check),
            (Outcome::Denied, Some(Check::Validate)),
            "{arguments}"
        );
    }
}

/// Free text for the NUL test.
#[derive(Deserialize, JsonSchema)]
struct Note {
    /// Any text.
    text: String,
    /// Labels.
    #[serde(default)]
    labels: Vec<String>,
}

/// Echo a note.
#[mcp_tool(read_only, scope = "t:read")]
async fn note(args: Note) -> Result<Text, ToolError> {
    Ok(Text(format!("{} {:?}", args.text, args.labels)))
}

/// U+0000 in a string or a key of the arguments is refused 400 on every backend alike,
/// before the handler, at its pointer (PostgreSQL cannot store it: a tool would fail
/// there and run on SQLite); and a record never holds the character, wherever the caller
/// put it (a request id, a tool name), since PostgreSQL would refuse the record.
#[tokio::test]
async fn a_nul_character_is_refused_and_never_recorded() {
    let sink = MemorySink::new();
    let server = server(&sink);
    let call = |arguments| server.call(CallRequest::new("note", Some(arguments)).bearer("t"));
    for (arguments, pointer) in [
        (json!({"text": "a\u{0}b"}), "/text"),
        (
            json!({"text": "a", "labels": ["ok", "b\u{0}"]}),
            "/labels/1",
        ),
        (json!({"text": "a", "x\u{0}y": 1}), "/x\u{2400}y"),
    ] {
        let answer = call(arguments.clone()).await;
        let err = answer.error().expect("refused");
        assert_eq!(
            (err.status(), err.reason()),
            (Status::BadRequest, "invalid_arguments"),
            "{arguments}"
        );
        assert!(err.message().contains(pointer), "{}", err.message());
        assert!(err.message().contains("U+0000"), "{}", err.message());
        let record = sink.records().pop().unwrap();
        assert_eq!(record.check, Some(Check::Validate), "{arguments}");
    }
    // Without it, the same call runs.
    let answer = call(json!({"text": "a", "labels": ["b"]})).await;
    assert!(answer.result().is_ok());

    sink.clear();
    let answer = server
        .call(
            CallRequest::new("no\u{0}such", Some(json!({})))
                .bearer("t")
                .request_id("id\u{0}7"),
        )
        .await;
    assert_eq!(answer.error().unwrap().reason(), "unknown_tool");
    let record = sink.records().pop().unwrap();
    assert_eq!(record.tool, "no\u{2400}such");
    assert_eq!(record.request_id.as_deref(), Some("id\u{2400}7"));
    let json = serde_json::to_string(&record).unwrap();
    assert!(!json.contains("\\u0000"), "{json}");
}

/// A status.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Status2 {
    /// Still to do.
    Open,
    /// Done.
    Closed,
}

/// A plain enum, without descriptions.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Colour {
    Red,
    Green,
}

#[derive(Deserialize, JsonSchema)]
struct Filter {
    /// Required, described variants (`oneOf` of `const`s behind a `$ref`).
    status: Status2,
    /// Optional (`anyOf` of that and `null`).
    #[serde(default)]
    also: Option<Status2>,
    /// Plain variants (`enum`).
    #[serde(default)]
    colour: Option<Colour>,
}

/// Filter by status.
#[mcp_tool(read_only, scope = "t:read")]
async fn filtered(args: Filter) -> Result<Text, ToolError> {
    let _ = (args.status, args.also, args.colour);
    Ok(Text("ok".into()))
}

/// A value outside an enum is refused with the values it may take, not the validator's
/// "not valid under any of the schemas listed in the 'anyOf' keyword": a model corrects
/// itself from that.
#[tokio::test]
async fn a_value_outside_an_enum_names_the_values_it_may_take() {
    let sink = MemorySink::new();
    let server = server(&sink);
    let call = |arguments| server.call(CallRequest::new("filtered", Some(arguments)).bearer("t"));
    for (arguments, said) in [
        (
            json!({"status": "reopened"}),
            r#"invalid arguments at `/status`: "reopened" is not one of: "open", "closed""#,
        ),
        (
            json!({"status": "open", "also": "Open"}),
            r#"invalid arguments at `/also`: "Open" is not one of: "open", "closed", null"#,
        ),
        (
            json!({"status": "open", "colour": 7}),
            r#"invalid arguments at `/colour`: 7 is not one of: "red", "green", null"#,
        ),
    ] {
        let answer = call(arguments.clone()).await;
        let err = answer
            .error()
            .unwrap_or_else(|| panic!("{arguments} refused"));
        assert_eq!(err.reason(), "invalid_arguments", "{arguments}");
        assert_eq!(err.message(), said, "{arguments}");
    }
    assert!(
        call(json!({"status": "closed", "also": null, "colour": "red"}))
            .await
            .result()
            .is_ok()
    );
}

#[derive(Deserialize, JsonSchema)]
struct Nested {
    inner: Inner,
    #[serde(default)]
    maybe: Option<Inner>,
    #[serde(default)]
    many: Vec<Inner>,
    #[serde(default)]
    by_name: std::collections::BTreeMap<String, Inner>,
    #[serde(default)]
    merged: Option<Merged>,
    #[serde(default)]
    shape: Option<Shape>,
    #[serde(default)]
    free: Option<serde_json::Value>,
}

#[derive(Deserialize, JsonSchema)]
struct Inner {
    level: u8,
}

#[derive(Deserialize, JsonSchema)]
struct Merged {
    own: u8,
    #[serde(flatten)]
    inner: Inner,
    #[serde(flatten)]
    shape: Shape,
}

#[derive(Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Shape {
    Square { side: u8 },
    Circle { radius: u8 },
}

/// Count what it was given.
#[mcp_tool(read_only, scope = "t:read")]
async fn nested(args: Nested) -> Result<Text, ToolError> {
    let levels = args.inner.level as usize
        + args.maybe.map_or(0, |i| i.level as usize)
        + args.many.iter().map(|i| i.level as usize).sum::<usize>()
        + args
            .by_name
            .values()
            .map(|i| i.level as usize)
            .sum::<usize>()
        + args.merged.map_or(0, |m| {
            let extra = match m.shape {
                Shape::Square { side } => side,
                Shape::Circle { radius } => radius,
            };
            (m.own + m.inner.level + extra) as usize
        });
    let shape = match args.shape {
        Some(Shape::Square { side }) => side,
        Some(Shape::Circle { radius }) => radius,
        None => 0,
    };
    Ok(Text(format!("{levels} {shape} {}", args.free.is_some())))
}

/// Issue 4: unknown fields are refused at any depth, with their pointer, as at the root;
/// every shape the type takes (an optional struct, a list of them, a map, a flattened
/// struct and enum, an internally tagged enum, free JSON) still passes.
#[tokio::test]
async fn an_unknown_field_is_refused_at_any_depth_and_every_shape_the_type_takes_passes() {
    let sink = MemorySink::new();
    let server = server(&sink);
    let call = |arguments| server.call(CallRequest::new("nested", Some(arguments)).bearer("t"));
    let full = json!({
        "inner": {"level": 1},
        "maybe": {"level": 2},
        "many": [{"level": 3}],
        "by_name": {"a": {"level": 4}},
        "merged": {"own": 5, "level": 6, "kind": "circle", "radius": 1},
        "shape": {"kind": "square", "side": 7},
        "free": {"anything": {"at": ["all"]}}
    });
    let answer = call(full.clone()).await;
    assert!(answer.result().is_ok(), "{:?}", answer.error());
    assert_eq!(answer.to_mcp_json()["content"][0]["text"], "22 7 true");
    for (pointer, arguments) in [
        ("/inner/bogus", json!({"inner": {"level": 1, "bogus": 1}})),
        (
            "/maybe/bogus",
            json!({"inner": {"level": 1}, "maybe": {"level": 1, "bogus": true}}),
        ),
        (
            "/many/0/bogus",
            json!({"inner": {"level": 1}, "many": [{"level": 1, "bogus": 0}]}),
        ),
        (
            "/by_name/a/bogus",
            json!({"inner": {"level": 1}, "by_name": {"a": {"level": 1, "bogus": 0}}}),
        ),
        (
            "/shape/bogus",
            json!({"inner": {"level": 1}, "shape": {"kind": "circle", "radius": 1, "bogus": 0}}),
        ),
    ] {
        let answer = call(arguments).await;
        let err = answer
            .error()
            .unwrap_or_else(|| panic!("{pointer}: accepted"));
        assert_eq!(
            (err.status(), err.reason()),
            (Status::BadRequest, "invalid_arguments"),
            "{pointer}"
        );
        // The field's own pointer, inside an `Option` or an enum's variant too, not the
        // whole value's.
        assert!(
            err.message().contains(&format!("`{pointer}`")),
            "{pointer}: {}",
            err.message()
        );
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename = "C Thing")]
struct RenamedWithASpace {
    c: u8,
}

#[derive(Deserialize, JsonSchema)]
#[serde(tag = "kind")]
enum Renamed {
    R(RenamedWithASpace),
}

#[derive(Deserialize, JsonSchema)]
struct Payload {
    v: u8,
}

#[derive(Deserialize, JsonSchema)]
struct Middle(Payload);

#[derive(Deserialize, JsonSchema)]
struct Outer(Middle);

#[derive(Deserialize, JsonSchema)]
#[serde(tag = "kind")]
enum Wrapped {
    W(Outer),
    X { x: u8 },
}

#[derive(Deserialize, JsonSchema)]
struct MergedShapes {
    renamed: Renamed,
    wrapped: Vec<Wrapped>,
    #[serde(default)]
    maybe: Option<Wrapped>,
}

/// Takes what internally tagged newtype variants merge.
#[mcp_tool(read_only, scope = "t:read")]
async fn merged_shapes(args: MergedShapes) -> Result<Text, ToolError> {
    let Renamed::R(renamed) = args.renamed;
    let sum: u32 = args
        .wrapped
        .iter()
        .chain(args.maybe.iter())
        .map(|w| match w {
            Wrapped::W(Outer(Middle(p))) => u32::from(p.v),
            Wrapped::X { x } => u32::from(*x),
        })
        .sum();
    Ok(Text(format!("{} {sum}", renamed.c)))
}

/// An internally tagged variant's tag sits beside the payload's fields: a payload whose
/// definition's name is percent-encoded in its `$ref` (`C%20Thing`), or reached through
/// newtypes (`{"$ref": …}` definitions), stays open, so the tag passes.
#[tokio::test]
async fn what_a_tagged_newtype_variant_merges_stays_open() {
    let sink = MemorySink::new();
    let server = server(&sink);
    let answer = server
        .call(
            CallRequest::new(
                "merged_shapes",
                Some(json!({
                    "renamed": {"kind": "R", "c": 1},
                    "wrapped": [{"kind": "W", "v": 2}, {"kind": "X", "x": 3}],
                    "maybe": {"kind": "W", "v": 4}
                })),
            )
            .bearer("t"),
        )
        .await;
    assert!(answer.result().is_ok(), "{:?}", answer.error());
    assert_eq!(answer.to_mcp_json()["content"][0]["text"], "1 9");
}
