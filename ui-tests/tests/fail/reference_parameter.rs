use aac_tools::{mcp_tool, Ctx, Text, ToolError};

/// Parameters are owned.
#[mcp_tool(read_only, scope = "notes:read")]
async fn borrowed(ctx: &Ctx) -> Result<Text, ToolError> {
    Ok(Text(ctx.tool().into()))
}

fn main() {}
