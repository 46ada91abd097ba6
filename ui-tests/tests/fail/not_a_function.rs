use aac_tools::mcp_tool;

/// Not a function.
#[mcp_tool(read_only, scope = "notes:read")]
struct Notes;

fn main() {}
