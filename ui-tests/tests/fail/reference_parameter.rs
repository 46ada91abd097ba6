use aac_tools::{Ctx, Text, ToolError, mcp_tool};

/// Parameters are owned.
#[mcp_tool(read_only, scope = "notes:read")]
async fn borrowed(ctx: &Ctx) -> Result<Text, ToolError> {
    Ok(Text(ctx.tool().into()))
}

fn main() {}
