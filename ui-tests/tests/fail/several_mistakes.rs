use aac_tools::{mcp_tool, Text, ToolError};

struct NotArgs;

/// Four mistakes, reported in one pass.
#[mcp_tool(readonly, scope = "Notes", destructive = true)]
fn everything(args: NotArgs) -> Result<Text, ToolError> {
    let NotArgs = args;
    Ok(Text("done".into()))
}

fn main() {}
