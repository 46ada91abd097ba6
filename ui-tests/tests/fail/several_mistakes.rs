use aac_tools::{Text, ToolError, mcp_tool};

struct NotArgs;

/// Four mistakes, reported in one pass.
#[mcp_tool(readonly, scope = "Notes", destructive = true)]
fn everything(args: NotArgs) -> Result<Text, ToolError> {
    let NotArgs = args;
    Ok(Text("done".into()))
}

fn main() {}
