use aac_tools::{Text, ToolError, mcp_tool};

/// An unknown unit.
#[mcp_tool(read_only, scope = "notes:read", rate = "30/fortnight")]
async fn unknown_unit() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

/// A rate of nothing: the tool could never be called.
#[mcp_tool(read_only, scope = "notes:read", rate = "0/min")]
async fn zero() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

/// No unit.
#[mcp_tool(read_only, scope = "notes:read", rate = "30")]
async fn no_unit() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

/// Not a number.
#[mcp_tool(read_only, scope = "notes:read", rate = "-1/s")]
async fn negative() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

/// Not a string.
#[mcp_tool(read_only, scope = "notes:read", rate = 30)]
async fn not_a_string() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {}
