use aac_tools::mcp_tool;

/// Returns nothing.
#[mcp_tool(read_only, scope = "notes:read")]
async fn silent() {}

fn main() {}
