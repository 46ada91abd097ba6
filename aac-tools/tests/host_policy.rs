//! The host policy over every combination of the four hints (absent, true, false), from a
//! trusted and an untrusted server.
//!
//! The expectations are the MCP spec's rules restated here, independently of the policy's
//! code: the defaults of absent hints are readOnlyHint false, destructiveHint true,
//! idempotentHint false, openWorldHint true; destructiveHint and idempotentHint mean
//! something only when readOnlyHint is false; hints from an untrusted server are absent.
#![cfg(feature = "host")]

use aac_tools::host::{AskReason, Consent, Hints, Retry, ToolPolicy, Trust};
use serde_json::{Map, Value, json};

const VALUES: [Option<bool>; 3] = [None, Some(true), Some(false)];

fn tool_with(hints: [Option<bool>; 4]) -> Value {
    let keys = [
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    ];
    let mut annotations = Map::new();
    for (key, value) in keys.iter().zip(hints) {
        if let Some(b) = value {
            annotations.insert((*key).to_owned(), Value::Bool(b));
        }
    }
    json!({
        "name": "some_tool",
        "inputSchema": {"type": "object"},
        "annotations": annotations,
    })
}

/// What the spec says a host should do, restated as a decision list.
struct Expected {
    run_without_asking: bool,
    must_ask: bool,
    reason: Option<AskReason>,
    retry_safe: bool,
}

fn expected(hints: [Option<bool>; 4], trusted: bool) -> Expected {
    if !trusted {
        // Untrusted: as if the tool had no annotations at all: destructive, not idempotent.
        return Expected {
            run_without_asking: false,
            must_ask: true,
            reason: Some(AskReason::Untrusted),
            retry_safe: false,
        };
    }
    let [read_only, destructive, idempotent, _open_world] = hints;
    if read_only == Some(true) {
        // A read-only tool changes nothing: run it, and run it again if the wire failed.
        return Expected {
            run_without_asking: true,
            must_ask: false,
            reason: None,
            retry_safe: true,
        };
    }
    // Not read-only (false or absent). Destructive unless it says `false`.
    let (must_ask, reason) = match destructive {
        Some(true) => (true, Some(AskReason::Destructive)),
        None => (true, Some(AskReason::HintsMissing)),
        Some(false) => (false, None),
    };
    Expected {
        run_without_asking: false,
        must_ask,
        reason,
        // Only an explicit idempotentHint: true makes a write safe to send twice.
        retry_safe: idempotent == Some(true),
    }
}

#[test]
fn every_combination_of_hints_and_trust() {
    let mut cases = 0;
    for read_only in VALUES {
        for destructive in VALUES {
            for idempotent in VALUES {
                for open_world in VALUES {
                    let hints = [read_only, destructive, idempotent, open_world];
                    let tool = tool_with(hints);
                    for trusted in [true, false] {
                        let trust = if trusted {
                            Trust::Trusted
                        } else {
                            Trust::Untrusted
                        };
                        let policy = ToolPolicy::new(&tool, trust).unwrap();
                        let want = expected(hints, trusted);
                        let case = format!("hints {hints:?}, trusted {trusted}");
                        assert_eq!(
                            policy.may_run_without_asking(),
                            want.run_without_asking,
                            "{case}"
                        );
                        assert_eq!(policy.must_ask(), want.must_ask, "{case}");
                        match want.reason {
                            Some(reason) => {
                                assert_eq!(policy.consent(), Consent::Required(reason), "{case}")
                            }
                            None if want.run_without_asking => {
                                assert_eq!(policy.consent(), Consent::NotNeeded, "{case}")
                            }
                            None => assert_eq!(policy.consent(), Consent::HostChoice, "{case}"),
                        }
                        assert_eq!(policy.safe_to_retry(), want.retry_safe, "{case}");
                        let retry = if want.retry_safe {
                            Retry::Safe
                        } else {
                            Retry::Never
                        };
                        assert_eq!(policy.retry(), retry, "{case}");
                        // The declared hints are kept as sent, trusted or not.
                        assert_eq!(
                            policy.declared(),
                            Hints {
                                read_only,
                                destructive,
                                idempotent,
                                open_world
                            },
                            "{case}"
                        );
                        // Open world defaults to true and is never trusted from an untrusted server.
                        let open = if trusted {
                            open_world.unwrap_or(true)
                        } else {
                            true
                        };
                        assert_eq!(policy.resolved().open_world, open, "{case}");
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 3 * 3 * 3 * 3 * 2);
}

/// A few rows written out by hand, as a reader would check them against the spec.
#[test]
fn spec_table_rows() {
    // (readOnly, destructive, idempotent, openWorld, trusted) -> (consent, retry)
    use AskReason::*;
    let t = Some(true);
    let f = Some(false);
    let rows: &[([Option<bool>; 4], bool, Consent, Retry)] = &[
        // No annotations at all: destructive and open-world, never retried.
        (
            [None, None, None, None],
            true,
            Consent::Required(HintsMissing),
            Retry::Never,
        ),
        // What aac-tools emits for `read_only`.
        ([t, f, t, f], true, Consent::NotNeeded, Retry::Safe),
        // `read_only` alone, with nothing else said.
        ([t, None, None, None], true, Consent::NotNeeded, Retry::Safe),
        // Read-only wins over a contradictory destructive hint (the spec ignores it).
        ([t, t, f, None], true, Consent::NotNeeded, Retry::Safe),
        // aac-tools `destructive, idempotent` (delete_issue).
        (
            [f, t, t, f],
            true,
            Consent::Required(Destructive),
            Retry::Safe,
        ),
        // aac-tools `destructive` without `idempotent`.
        (
            [f, t, f, f],
            true,
            Consent::Required(Destructive),
            Retry::Never,
        ),
        // aac-tools plain write (create_issue): additive, not idempotent.
        ([f, f, f, f], true, Consent::HostChoice, Retry::Never),
        // aac-tools `idempotent` write (update_issue).
        ([f, f, t, f], true, Consent::HostChoice, Retry::Safe),
        // Says it is a write but not whether destructive: destructive by default.
        (
            [f, None, t, None],
            true,
            Consent::Required(HintsMissing),
            Retry::Safe,
        ),
        // Only idempotent: still destructive by default, but safe to resend.
        (
            [None, None, t, None],
            true,
            Consent::Required(HintsMissing),
            Retry::Safe,
        ),
        // The friendliest annotations from an untrusted server count for nothing.
        (
            [t, f, t, f],
            false,
            Consent::Required(Untrusted),
            Retry::Never,
        ),
        (
            [f, f, t, f],
            false,
            Consent::Required(Untrusted),
            Retry::Never,
        ),
    ];
    for (hints, trusted, consent, retry) in rows {
        let trust = if *trusted {
            Trust::Trusted
        } else {
            Trust::Untrusted
        };
        let policy = ToolPolicy::new(&tool_with(*hints), trust).unwrap();
        assert_eq!(policy.consent(), *consent, "{hints:?} trusted {trusted}");
        assert_eq!(policy.retry(), *retry, "{hints:?} trusted {trusted}");
    }
}

#[test]
fn non_boolean_hints_and_missing_annotations_count_as_absent() {
    let tool = json!({
        "name": "odd",
        "annotations": {"readOnlyHint": "true", "destructiveHint": 0, "idempotentHint": null}
    });
    let policy = ToolPolicy::new(&tool, Trust::Trusted).unwrap();
    assert_eq!(policy.declared(), Hints::ABSENT);
    assert_eq!(policy.consent(), Consent::Required(AskReason::HintsMissing));
    assert_eq!(policy.retry(), Retry::Never);
    // What a host warns about: hints present but not booleans (null is plain absent).
    assert_eq!(
        policy.malformed_hints(),
        ["readOnlyHint", "destructiveHint"]
    );
    let untrusted = ToolPolicy::new(&tool, Trust::Untrusted).unwrap();
    assert_eq!(
        untrusted.malformed_hints(),
        ["readOnlyHint", "destructiveHint"]
    );
    let odd_annotations = json!({"name": "odd", "annotations": ["readOnlyHint"]});
    let policy = ToolPolicy::new(&odd_annotations, Trust::Trusted).unwrap();
    assert_eq!(policy.malformed_hints(), ["annotations"]);
    let fine = json!({"name": "fine", "annotations": {"readOnlyHint": true, "title": "Fine"}});
    let policy = ToolPolicy::new(&fine, Trust::Trusted).unwrap();
    assert!(policy.malformed_hints().is_empty());

    for tool in [
        json!({"name": "bare"}),
        json!({"name": "bare", "annotations": null}),
        json!({"name": "bare", "annotations": ["readOnlyHint"]}),
    ] {
        let policy = ToolPolicy::new(&tool, Trust::Trusted).unwrap();
        assert_eq!(policy.declared(), Hints::ABSENT, "{tool}");
        assert!(policy.must_ask(), "{tool}");
        let resolved = policy.resolved();
        assert!(!resolved.read_only && resolved.destructive && !resolved.idempotent);
        assert!(resolved.open_world);
    }
}

#[test]
fn title_precedence_and_invalid_definitions() {
    let both = json!({"name": "n", "title": "Top", "annotations": {"title": "Annotated"}});
    assert_eq!(
        ToolPolicy::new(&both, Trust::Trusted).unwrap().title(),
        "Top"
    );
    let annotated = json!({"name": "n", "annotations": {"title": "Annotated"}});
    assert_eq!(
        ToolPolicy::new(&annotated, Trust::Untrusted)
            .unwrap()
            .title(),
        "Annotated"
    );
    let blank = json!({"name": "just_name", "title": "  "});
    assert_eq!(
        ToolPolicy::new(&blank, Trust::Trusted).unwrap().title(),
        "just_name"
    );

    assert!(ToolPolicy::new(&json!({"title": "no name"}), Trust::Trusted).is_err());
    assert!(ToolPolicy::new(&json!({"name": 7}), Trust::Trusted).is_err());
    assert!(ToolPolicy::new(&json!("delete_issue"), Trust::Trusted).is_err());
}

#[test]
fn confirm_is_added_only_for_tools_that_declare_it() {
    let with_confirm = json!({
        "name": "delete_issue",
        "inputSchema": {"type": "object", "properties": {
            "id": {"type": "string"}, "confirm": {"type": "boolean"}
        }},
        "annotations": {"destructiveHint": true, "readOnlyHint": false}
    });
    let policy = ToolPolicy::new(&with_confirm, Trust::Trusted).unwrap();
    assert!(policy.declares_confirm());
    let args = json!({"id": "AAC-42"}).as_object().unwrap().clone();
    assert_eq!(
        Value::Object(policy.confirmed_arguments(args.clone())),
        json!({"id": "AAC-42", "confirm": true})
    );
    // An explicit `confirm: false` from the caller is overridden only by a yes.
    let refused = json!({"id": "AAC-42", "confirm": false})
        .as_object()
        .unwrap()
        .clone();
    assert_eq!(policy.confirmed_arguments(refused)["confirm"], json!(true));

    let without = json!({
        "name": "wipe",
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
    });
    let policy = ToolPolicy::new(&without, Trust::Trusted).unwrap();
    assert!(!policy.declares_confirm());
    assert!(policy.must_ask());
    assert_eq!(
        Value::Object(policy.confirmed_arguments(args.clone())),
        json!({"id": "AAC-42"})
    );
}

mod ours {
    //! Tools defined with `#[mcp_tool]`: the host policy reads what the registry emits.
    use aac_tools::{Text, ToolError, mcp_tool};
    use schemars::JsonSchema;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    pub(crate) struct Id {
        /// The issue.
        #[allow(dead_code)]
        pub(crate) id: String,
    }

    /// Read one.
    #[mcp_tool(read_only, scope = "issues:read")]
    async fn host_get(args: Id) -> Result<Text, ToolError> {
        Ok(Text(args.id))
    }

    /// Create one.
    #[mcp_tool(scope = "issues:write")]
    async fn host_create(args: Id) -> Result<Text, ToolError> {
        Ok(Text(args.id))
    }

    /// Delete one.
    #[mcp_tool(destructive, idempotent, scope = "issues:write")]
    async fn host_delete(args: Id) -> Result<Text, ToolError> {
        Ok(Text(args.id))
    }

    /// Fire and forget.
    #[mcp_tool(destructive, scope = "issues:write")]
    async fn host_purge(args: Id) -> Result<Text, ToolError> {
        Ok(Text(args.id))
    }
}

#[test]
fn the_policy_reads_what_our_registry_emits() {
    let registry = aac_tools::Registry::collect_named(&[
        "host_get",
        "host_create",
        "host_delete",
        "host_purge",
    ])
    .unwrap();
    let policy =
        |name: &str| ToolPolicy::new(registry.get(name).unwrap().json(), Trust::Trusted).unwrap();
    assert_eq!(policy("host_get").consent(), Consent::NotNeeded);
    assert_eq!(policy("host_get").retry(), Retry::Safe);
    assert!(!policy("host_get").declares_confirm());

    assert_eq!(policy("host_create").consent(), Consent::HostChoice);
    assert_eq!(policy("host_create").retry(), Retry::Never);

    assert_eq!(
        policy("host_delete").consent(),
        Consent::Required(AskReason::Destructive)
    );
    assert_eq!(policy("host_delete").retry(), Retry::Safe);
    assert!(policy("host_delete").declares_confirm());

    assert_eq!(policy("host_purge").retry(), Retry::Never);
    assert!(policy("host_purge").declares_confirm());
    assert_eq!(policy("host_purge").title(), "Host purge");
}

/// A trusted server that asks the person itself (`aac-tools.dev/confirm: user`) satisfies
/// "ask before destructive"; `user-or-argument` (which may fall back to the model's
/// `confirm: true`) and an untrusted server's claim do not.
#[test]
fn a_server_that_asks_the_user_is_asked_by_server() {
    let tool = |confirm: Option<&str>| {
        let mut tool = json!({
            "name": "delete_issue",
            "inputSchema": {"type": "object", "properties": {"confirm": {"type": "boolean"}}},
            "annotations": {"readOnlyHint": false, "destructiveHint": true,
                            "idempotentHint": true, "openWorldHint": false},
            "_meta": {},
        });
        if let Some(confirm) = confirm {
            tool["_meta"][aac_tools::META_CONFIRM] = json!(confirm);
        }
        tool
    };
    let consent = |t: &Value, trust| ToolPolicy::new(t, trust).unwrap().consent();
    let asked = ToolPolicy::new(&tool(Some("user")), Trust::Trusted).unwrap();
    assert_eq!(asked.consent(), Consent::AskedByServer);
    assert!(!asked.must_ask());
    assert_eq!(
        asked.confirmed_arguments(Map::new())["confirm"],
        json!(true)
    );
    assert_eq!(
        consent(&tool(Some("user-or-argument")), Trust::Trusted),
        Consent::Required(AskReason::Destructive)
    );
    assert_eq!(
        consent(&tool(Some("user")), Trust::Untrusted),
        Consent::Required(AskReason::Untrusted)
    );
    assert_eq!(
        consent(&tool(None), Trust::Trusted),
        Consent::Required(AskReason::Destructive)
    );
}
