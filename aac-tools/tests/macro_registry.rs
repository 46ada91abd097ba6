//! The registry refuses, at start-up, what the macro cannot see: two tools with one name,
//! schemas that cannot be advertised, audit fields that are not arguments.
//!
//! This binary links such tools on purpose, so `Registry::collect()` fails here; each test
//! builds a registry of the definitions it needs with `collect_module`, `collect_named`
//! or `from_defs`.

use aac_tools::{Registry, RegistryError, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

mod enums {
    use super::*;

    /// Find by one thing or another.
    #[derive(Deserialize, JsonSchema)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum FindBy {
        /// By its id.
        ById {
            /// The id.
            id: i64,
        },
        /// By its text.
        ByText {
            /// The text.
            text: String,
        },
    }

    /// Find a note.
    #[mcp_tool(read_only, scope = "find:read")]
    async fn find_by(args: FindBy) -> Result<Text, ToolError> {
        Ok(Text(match args {
            FindBy::ById { id } => format!("id {id}"),
            FindBy::ByText { text } => format!("text {text}"),
        }))
    }
}

mod first {
    use super::*;

    /// The first twin.
    #[mcp_tool(read_only, scope = "twins:read", name = "twin")]
    async fn first_twin() -> Result<Text, ToolError> {
        Ok(Text("first".into()))
    }

    /// A tool of its own.
    #[mcp_tool(read_only, scope = "solo:read")]
    async fn solo() -> Result<Text, ToolError> {
        Ok(Text("solo".into()))
    }
}

mod second {
    use super::*;

    /// The second twin.
    #[mcp_tool(scope = "twins:write", name = "twin")]
    async fn second_twin() -> Result<Text, ToolError> {
        Ok(Text("second".into()))
    }
}

mod broken {
    use super::*;

    #[derive(Deserialize, JsonSchema)]
    pub(super) struct HasConfirm {
        confirm: bool,
    }

    /// A destructive tool whose arguments have their own `confirm`.
    #[mcp_tool(destructive, scope = "broken:write")]
    async fn own_confirm(args: HasConfirm) -> Result<Text, ToolError> {
        Ok(Text(args.confirm.to_string()))
    }

    #[derive(Deserialize, JsonSchema)]
    struct Counted {
        /// A count of the caller's.
        suppressed: u64,
    }

    /// Keeps an argument named as the framework's counts.
    #[mcp_tool(read_only, scope = "broken:read", audit_fields = ["suppressed"])]
    async fn keeps_a_count(args: Counted) -> Result<Text, ToolError> {
        Ok(Text(args.suppressed.to_string()))
    }

    /// A bare value as arguments.
    #[mcp_tool(read_only, scope = "broken:read")]
    async fn bare_id(id: i64) -> Result<Text, ToolError> {
        Ok(Text(id.to_string()))
    }

    fn array_schema() -> Value {
        json!({"type": "array"})
    }

    /// Its input schema is not an object.
    #[mcp_tool(read_only, scope = "broken:read", input_schema = array_schema)]
    async fn not_an_object() -> Result<Text, ToolError> {
        Ok(Text("never".into()))
    }

    #[derive(Deserialize, JsonSchema)]
    pub(super) struct Note {
        title: String,
    }

    /// Keeps an audit field it does not have.
    #[mcp_tool(scope = "broken:write", audit_fields = ["title", "body"])]
    async fn audits_a_ghost(args: Note) -> Result<Text, ToolError> {
        Ok(Text(args.title))
    }
}

#[test]
fn two_tools_with_one_name_are_refused_naming_both() {
    let err = Registry::collect().expect_err("two tools are named `twin`");
    let RegistryError::DuplicateName {
        name,
        first,
        second,
    } = &err
    else {
        panic!("expected a duplicate name, got {err}");
    };
    assert_eq!(name, "twin");
    let mut locations = [first.as_str(), second.as_str()];
    locations.sort_unstable();
    assert!(
        locations[0]
            .starts_with("`macro_registry::first::first_twin` (aac-tools/tests/macro_registry.rs:"),
        "{locations:?}"
    );
    assert!(
        locations[1].starts_with(
            "`macro_registry::second::second_twin` (aac-tools/tests/macro_registry.rs:"
        ),
        "{locations:?}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with("two tools are named `twin`: "),
        "{message}"
    );
    assert!(
        message.contains(first) && message.contains(second),
        "{message}"
    );
    assert!(
        message.ends_with("rename one with `#[mcp_tool(name = \"…\")]`"),
        "{message}"
    );

    // The same through `collect_named` and `from_defs`.
    let named = Registry::collect_named(&["twin"]).expect_err("both twins are named");
    assert_eq!(named, err);
    let first_twin = Registry::collect_module("macro_registry::first").unwrap();
    let second_twin = Registry::collect_module("macro_registry::second").unwrap();
    let both = [
        first_twin.get("twin").unwrap().def(),
        second_twin.get("twin").unwrap().def(),
    ];
    assert_eq!(Registry::from_defs(both).unwrap_err(), err);
    // Each alone is fine, and the module filter takes whole path segments only.
    assert_eq!(first_twin.len(), 2);
    assert_eq!(second_twin.len(), 1);
    assert!(
        Registry::collect_module("macro_registry::fir")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn schemas_that_cannot_be_advertised_are_refused() {
    let err = Registry::collect_named(&["own_confirm"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool `own_confirm` has an invalid schema: a destructive tool's arguments cannot have \
         their own `confirm` field: the framework adds it and the handler never sees it"
    );
    let err = Registry::collect_named(&["not_an_object"]).unwrap_err();
    let said = err.to_string();
    assert!(
        said.starts_with(
            "tool `not_an_object` has an invalid schema: an MCP input schema must have \
             `\"type\": \"object\"` at its root, found \"array\": a tool's arguments are one \
             struct"
        ),
        "{said}"
    );
    // An argument kept in the clear under a name of the framework's counts would let a
    // caller write a record that reads as a count of millions of calls.
    let err = Registry::collect_named(&["keeps_a_count"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("keeps the argument `suppressed` in the audit trail"),
        "{err}"
    );
    // A bare value as the arguments says what to write instead.
    let err = Registry::collect_named(&["bare_id"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("found \"integer\""), "{err}");
    assert!(err.contains("`async fn get_note(args: GetNote)`"), "{err}");
}

/// An enum whose variants are all structs (tagged) is an object at its root: it
/// registers, its schema says `"type": "object"`, and its calls are checked against it.
#[tokio::test]
async fn an_enum_of_struct_variants_is_an_object() {
    use aac_tools::{CallRequest, Principal, Server, StaticTokens};
    let registry = Registry::collect_named(&["find_by"]).unwrap();
    let schema = registry.tools()[0].input_schema();
    assert_eq!(schema["type"], "object", "{schema}");
    let server = Server::builder(registry)
        .verifier(StaticTokens::new().with("t", Principal::new("t", ["find:read"])))
        .audit_disabled()
        .build()
        .unwrap();
    let call = |args: Value| server.call(CallRequest::new("find_by", Some(args)).bearer("t"));
    let answer = call(json!({"kind": "by_id", "id": 7})).await;
    assert_eq!(answer.to_mcp_json()["content"][0]["text"], "id 7");
    let answer = call(json!({"kind": "by_text", "text": "milk"})).await;
    assert_eq!(answer.to_mcp_json()["content"][0]["text"], "text milk");
    for wrong in [
        json!({"kind": "by_colour"}),
        json!({"kind": "by_id"}),
        json!(7),
    ] {
        let answer = call(wrong.clone()).await;
        assert_eq!(
            answer.error().map(|e| e.reason()),
            Some("invalid_arguments"),
            "{wrong}"
        );
    }
}

#[test]
fn audit_fields_must_be_arguments() {
    let err = Registry::collect_named(&["audits_a_ghost"]).unwrap_err();
    assert_eq!(
        err,
        RegistryError::UnknownAuditField {
            tool: "audits_a_ghost".into(),
            field: "body".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "tool `audits_a_ghost` keeps the audit field `body`, which is not one of its \
         arguments; fix `#[mcp_tool(audit_fields = […])]`"
    );
}

mod enum_fields {
    use super::*;

    /// One note, or all of them.
    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    #[serde(tag = "op", deny_unknown_fields)]
    pub(super) enum Op {
        One { id: i64 },
        All,
    }

    /// Keeps a field no variant has.
    #[mcp_tool(destructive, scope = "notes:delete", audit_fields = ["idd"])]
    async fn purge_typo(_args: Op) -> Result<Text, ToolError> {
        Ok(Text("done".into()))
    }

    /// Shows a field no variant has.
    #[mcp_tool(
        destructive,
        scope = "notes:delete",
        confirm_message = "Delete {nope}?"
    )]
    async fn purge_nope(_args: Op) -> Result<Text, ToolError> {
        Ok(Text("done".into()))
    }

    /// Keeps and shows a field of one variant.
    #[mcp_tool(destructive, scope = "notes:delete", audit_fields = ["id", "op"],
               confirm_message = "Delete {op} {id}?")]
    async fn purge(_args: Op) -> Result<Text, ToolError> {
        Ok(Text("done".into()))
    }
}

/// An enum's arguments are the union of its variants' fields: a name none of them has is
/// a typo, refused as a struct's is.
#[test]
fn an_enums_audit_fields_and_placeholders_are_some_variants_fields() {
    assert_eq!(
        Registry::collect_named(&["purge_typo"]).unwrap_err(),
        RegistryError::UnknownAuditField {
            tool: "purge_typo".into(),
            field: "idd".into()
        }
    );
    assert_eq!(
        Registry::collect_named(&["purge_nope"]).unwrap_err(),
        RegistryError::UnknownConfirmField {
            tool: "purge_nope".into(),
            field: "nope".into()
        }
    );
    assert!(Registry::collect_named(&["purge"]).is_ok());
}

#[test]
fn named_and_module_collections() {
    assert_eq!(
        Registry::collect_named(&["nope"]).unwrap_err(),
        RegistryError::UnknownTool {
            name: "nope".into()
        }
    );
    let solo = Registry::collect_named(&["solo"]).unwrap();
    assert_eq!(solo.len(), 1);
    assert_eq!(solo.scopes_supported(), ["solo:read"]);
}
