use aac_tools::{Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Page {
    page: u32,
}

/// Arguments come as one type.
#[mcp_tool(read_only, scope = "notes:read")]
async fn search(first: Page, second: Page) -> Result<Text, ToolError> {
    Ok(Text(format!("{} {}", first.page, second.page)))
}

fn main() {}
