use aac_tools::{mcp_tool, Text};

/// Returns a bare value.
#[mcp_tool(read_only, scope = "notes:read")]
async fn bare() -> Text {
    Text("done".into())
}

fn main() {}
