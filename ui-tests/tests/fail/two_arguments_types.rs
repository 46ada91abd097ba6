use aac_tools::{mcp_tool, Text, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Page { page: u32 }
#[derive(Deserialize, JsonSchema)]
struct Filter { tag: String }

/// Arguments come as one type.
#[mcp_tool(read_only, scope = "notes:read")]
async fn search(page: Page, filter: Filter) -> Result<Text, ToolError> {
    Ok(Text(format!("{} {}", page.page, filter.tag)))
}

fn main() {}
