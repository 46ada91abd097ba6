//! The committed tools manifest matches the tools: any change to a tool's annotations,
//! scopes or schemas shows up in review as a diff of `tools.json`.

#[test]
fn committed_manifest_is_fresh() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tools.json");
    aacworkflow::registry()
        .expect("the tools register")
        .check_manifest(path, aacworkflow::MANIFEST_REFRESH)
        .unwrap_or_else(|drift| panic!("{drift}"));
}

#[test]
fn manifest_command_prints_exactly_the_manifest() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_aacworkflow"))
        .arg("manifest")
        .env_remove("AAC_DB")
        .output()
        .expect("the binary runs");
    assert!(output.status.success());
    let registry = aacworkflow::registry().unwrap();
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        registry.manifest()
    );
    let manifest: serde_json::Value = serde_json::from_str(registry.manifest()).unwrap();
    let names: Vec<&str> = manifest["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "assign_issue_to_agent",
            "comment_issue",
            "create_issue",
            "dashboard_usage_daily",
            "delete_issue",
            "get_issue",
            "list_comments",
            "list_issues",
            "trigger_autopilot",
            "update_issue",
        ]
    );
}

/// The manifest covers the resources and prompts: a change to one's scopes is named.
#[test]
fn manifest_drift_names_a_resource_or_prompt_that_changed() {
    let registry = aacworkflow::registry().expect("the tools register");
    let mut doc: serde_json::Value = serde_json::from_str(registry.manifest()).unwrap();
    assert_eq!(
        doc["resources"][0]["uriTemplate"],
        "aacworkflow://issues/{id}"
    );
    assert_eq!(
        doc["resources"][0]["scopes"],
        serde_json::json!(["issues:read"])
    );
    assert_eq!(doc["prompts"][0]["name"], "triage_issue");
    doc["resources"][0]["scopes"] = serde_json::json!([]);
    doc["prompts"].as_array_mut().unwrap().clear();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tools.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let message = registry
        .check_manifest(&path, "refresh")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains(
            "resource `aacworkflow://issues/{id}` changed (`scopes`), prompt `triage_issue` added"
        ),
        "{message}"
    );
}

/// `manifest --confirm user` is the manifest of a server run with `serve --confirm user`:
/// its destructive tool says in its `_meta` that a person confirms it, as that server's
/// `tools/list` does; without the flag, nothing says so (the committed manifest).
#[test]
fn manifest_confirm_user_is_the_manifest_of_such_a_server() {
    let manifest = |extra: &[&str]| -> serde_json::Value {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_aacworkflow"))
            .arg("manifest")
            .args(extra)
            .env_remove("AAC_DB")
            .output()
            .expect("the binary runs");
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let confirm_of = |doc: &serde_json::Value, tool: &str| {
        doc["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == tool)
            .unwrap()["_meta"]["aac-tools.dev/confirm"]
            .clone()
    };
    let user = manifest(&["--confirm", "user"]);
    assert_eq!(confirm_of(&user, "delete_issue"), "user");
    assert_eq!(confirm_of(&user, "get_issue"), serde_json::Value::Null);
    let plain = manifest(&[]);
    assert_eq!(confirm_of(&plain, "delete_issue"), serde_json::Value::Null);
    assert_eq!(
        plain,
        serde_json::from_str::<serde_json::Value>(aacworkflow::registry().unwrap().manifest())
            .unwrap()
    );
}
