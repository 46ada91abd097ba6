//! `audit_fields`: argument fields stored verbatim in audit records.

use aac_tools::{Registry, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Move {
    issue_id: String,
    status: String,
    comment: String,
}

/// Move an issue.
#[mcp_tool(scope = "issues:write", audit_fields = ["issue_id", "status"])]
async fn move_issue(args: Move) -> Result<Text, ToolError> {
    Ok(Text(format!(
        "{} {} {}",
        args.issue_id, args.status, args.comment
    )))
}

fn main() {
    let registry = Registry::collect().unwrap();
    assert_eq!(
        registry.get("move_issue").unwrap().def().audit_fields(),
        ["issue_id", "status"]
    );
}
