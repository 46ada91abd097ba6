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
