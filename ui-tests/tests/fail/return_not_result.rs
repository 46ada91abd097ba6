use aac_tools::{Text, mcp_tool};

/// Returns a bare value.
#[mcp_tool(read_only, scope = "notes:read")]
async fn bare() -> Text {
    Text("done".into())
}

fn main() {}
